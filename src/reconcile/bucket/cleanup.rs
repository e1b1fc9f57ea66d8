//! Deletion of a Bucket. What the Bucket asks for ([`Asked`]) and what AWS holds under its name
//! ([`Found`]) decide each step ([`deletion`], pure); the async code only reads, asks
//! [`deletion`] and makes the step, until the finalizer may go or deletion waits.
//!
//! It fails closed: only "no such bucket in this account" means gone, a bucket that is not this
//! object's is never touched, and `forceDelete` empties at most [`EMPTY_PAGES_PER_PASS`] pages of
//! object versions per pass, so each pass stays short.
//!
//! The same steps serve a Bucket that disappeared without this cleanup (its finalizer stripped:
//! [`vanished`]) and a bucket the orphan sweep found owned by a UID no object has any more
//! ([`release_orphan`]); with the object gone they are said in log lines, not events.

use crate::reconcile::InAccount;
use std::collections::BTreeMap;
use std::time::Duration;

use super::apply::blocked;
use super::{Address, address, protection, refusal, replication};
use crate::api::condition::Reason;
use crate::api::{AcceptedDeletion, Bucket, BucketConstraints, DeletionPolicy, Management};
use crate::aws::s3::Emptied;
use crate::aws::tags::{Owner, Ownership, released};
use crate::aws::{ErrorKind, naming, policy};
use crate::reconcile::class::bucket::cleanup_deletion_policy;
use crate::reconcile::{Blocked, Error, Requeue, has_finalizer, owner, remove_finalizer};

/// Pages of object versions (up to 1,000 each) deleted per pass at most when emptying a bucket
/// (`forceDelete`).
const EMPTY_PAGES_PER_PASS: usize = 10;

/// What deleting a Bucket asks for: the rules a pass last accepted, under its class.
#[derive(Clone, Copy, Debug)]
pub(super) struct Asked {
    pub policy: DeletionPolicy,
    /// `forceDelete`: the bucket is emptied before it is deleted.
    pub force_delete: bool,
    /// `spec.objectLock` is set: S3 refusing to delete object versions is its retention.
    pub object_lock: bool,
    /// `spec.replication` is set: a released bucket loses its configuration, and the
    /// replication role goes with the Bucket.
    pub replication: bool,
}

impl Asked {
    fn of(bucket: &Bucket, ctx: &InAccount<'_>) -> Asked {
        let recorded = bucket.status.as_ref().and_then(|s| s.deletion);
        let ns = bucket.metadata.namespace.as_deref().unwrap_or_default();
        let default = ctx.settings.default_deletion_policy;
        let (spec, class) = match ctx
            .classes
            .bucket_class(ns, bucket.spec.class_name.as_deref())
        {
            // What the spec asks now, which a pass would accept if the class allows it.
            Ok(class) => {
                let policy = cleanup_deletion_policy(&bucket.spec, class.as_deref(), &ctx.settings);
                let mut spec = AcceptedDeletion {
                    policy,
                    force_delete: bucket.spec.force_delete,
                };
                // An observed bucket is released, never deleted, whatever its spec says.
                let defaults = class.as_ref().map(|c| &c.spec.defaults);
                let mode = bucket
                    .spec
                    .management
                    .or(defaults.and_then(|d| d.management));
                if mode == Some(Management::Observe) {
                    spec = AcceptedDeletion::default();
                }
                (Some(spec), class)
            }
            // A class that cannot be resolved (a name edited to one that does not apply) accepts
            // no edit and tightens nothing: what was accepted still holds.
            Err(_) => (None, None),
        };
        let constraints = class.as_ref().map(|c| &c.spec.constraints);
        let rules = in_force(spec, recorded, constraints, default);
        Asked {
            policy: rules.policy,
            force_delete: rules.force_delete,
            object_lock: bucket.spec.object_lock.is_some(),
            replication: bucket.spec.replication.is_some(),
        }
    }
}

/// The deletion rules cleanup follows (pure). The spec's (`spec`: None when the class cannot be
/// resolved) when the class in force allows them: an edit made while deleting (`forceDelete`
/// set to end a `DeletionBlocked`) is one a pass would accept. Otherwise those a pass last
/// accepted (`recorded`, in status, which tenants cannot write), else the operator's default
/// without `forceDelete`, made stricter by the class: an edit the class refuses (ClassViolation)
/// is never followed.
pub(super) fn in_force(
    spec: Option<AcceptedDeletion>,
    recorded: Option<AcceptedDeletion>,
    class: Option<&BucketConstraints>,
    default: DeletionPolicy,
) -> AcceptedDeletion {
    let under_class = |mut rules: AcceptedDeletion| {
        if let Some(c) = class {
            let allowed = &c.allowed_deletion_policies;
            if rules.policy == DeletionPolicy::Delete
                && !allowed.is_empty()
                && !allowed.contains(&DeletionPolicy::Delete)
            {
                rules.policy = DeletionPolicy::Retain;
            }
            rules.force_delete &= c.allow_force_delete;
        }
        rules
    };
    if let Some(spec) = spec.filter(|s| under_class(*s) == *s) {
        return spec;
    }
    under_class(recorded.unwrap_or(AcceptedDeletion {
        policy: default,
        force_delete: false,
    }))
}

/// Who hears of deletion's steps: the Bucket being deleted (events, and its status while
/// deletion waits), or, once the object is gone, the log.
#[derive(Clone, Copy)]
enum Witness<'a> {
    Bucket(&'a Bucket),
    Gone,
}

impl Witness<'_> {
    async fn say(self, ctx: &InAccount<'_>, warning: bool, reason: &str, note: String) {
        match self {
            Witness::Bucket(b) => ctx.event(b, warning, reason, note).await,
            Witness::Gone => tracing::warn!(reason, note = %note, "orphan cleanup"),
        }
    }
}

/// How a run of deletion's steps ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// Nothing in AWS is (any longer) the object's: gone, or another's.
    Nothing,
    Released,
    Deleted,
    /// Object versions are left for the next run (`forceDelete`).
    More,
}

/// What AWS holds under the Bucket's name, as far as deletion has read.
#[derive(Debug)]
pub(super) enum Found {
    /// No bucket of that name in this account: the one answer that means gone.
    Absent,
    /// A bucket that is not this object's: another owner's, unowned or released.
    NotOurs,
    /// This object's bucket: its tags, and what is known of its objects.
    Ours {
        tags: BTreeMap<String, String>,
        contents: Contents,
    },
}

/// What deletion knows of the objects in a bucket of this object's.
#[derive(Debug)]
pub(super) enum Contents {
    Unread,
    /// Listed: whether no object version or delete marker is left.
    Listed {
        empty: bool,
    },
    /// This pass deleted the object versions it may: whether none is left.
    Emptied {
        empty: bool,
    },
    /// S3 denied deleting object versions.
    DeletesRefused(crate::aws::Error),
}

/// One step of deletion.
#[derive(Debug, PartialEq)]
pub(super) enum Deletion {
    /// Nothing in AWS is this object's: the finalizer may go.
    Done,
    /// The bucket is another's: it is left untouched (and said so), and the finalizer may go.
    LeaveUntouched,
    /// Retain: the bucket policy's grants are removed, then its ownership released.
    Release,
    /// Read whether the bucket holds any object version.
    List,
    /// Delete up to this many pages of object versions (`forceDelete`).
    Empty { pages: usize },
    /// Object versions are left: emptying goes on in the next pass.
    EmptyNextPass,
    /// Delete the bucket, now empty.
    Delete,
    /// Deletion waits (DeletionBlocked) until someone acts: why.
    Wait(String),
}

/// The pure planner of deletion: the next step for the bucket named `bucket`.
pub(super) fn deletion(bucket: &str, asked: Asked, found: &Found) -> Deletion {
    let contents = match found {
        Found::Absent => return Deletion::Done,
        Found::NotOurs => return Deletion::LeaveUntouched,
        Found::Ours { .. } if asked.policy == DeletionPolicy::Retain => return Deletion::Release,
        Found::Ours { contents, .. } => contents,
    };
    match contents {
        Contents::Unread | Contents::Listed { empty: false } if asked.force_delete => {
            Deletion::Empty {
                pages: EMPTY_PAGES_PER_PASS,
            }
        }
        Contents::Unread => Deletion::List,
        Contents::Listed { empty: true } | Contents::Emptied { empty: true } => Deletion::Delete,
        Contents::Listed { empty: false } => Deletion::Wait(format!(
            "S3 bucket {bucket} is not empty; empty it or set spec.forceDelete: true to delete it with its objects"
        )),
        Contents::Emptied { empty: false } => Deletion::EmptyNextPass,
        // The operator never bypasses retention: what the lock keeps stays, and the bucket too.
        Contents::DeletesRefused(e) if asked.object_lock => {
            Deletion::Wait(protection::retention_holds(bucket, e))
        }
        Contents::DeletesRefused(e) => Deletion::Wait(waiting(e)),
    }
}

/// The next step when nobody is left to act on a wait (`gone`: the object disappeared, or the
/// sweep found its bucket): the bucket is released instead, its data kept, never deleted.
pub(super) fn next(bucket: &str, asked: Asked, found: &Found, gone: bool) -> Deletion {
    match deletion(bucket, asked, found) {
        Deletion::Wait(why) if gone => {
            tracing::warn!(bucket, why = %why, "deletion cannot finish; the bucket is released instead");
            Deletion::Release
        }
        step => step,
    }
}

/// What deletion waiting on a refused AWS call says.
fn waiting(e: &crate::aws::Error) -> String {
    let why = refusal(e).map_or_else(|| e.to_string(), |why| why.message);
    format!("deleting the Bucket is waiting: {why}")
}

pub(super) async fn cleanup(bucket: &Bucket, ctx: &InAccount<'_>) -> Result<Requeue, Error> {
    if !has_finalizer(bucket) {
        return Ok(Requeue::OnChange);
    }
    let owner = owner(bucket, &ctx.settings.cluster_name);
    // From spec, UID and the tags in AWS, never from a spec check an edit can make fail. A name
    // outside the prefix was never the operator's to create or adopt.
    if let Ok(at) = address(bucket, &ctx.settings, &ctx.aws.region, &owner) {
        let asked = Asked::of(bucket, ctx);
        let done = match release_or_delete(Witness::Bucket(bucket), ctx, &at, &owner, asked).await {
            // The replication role goes once the bucket no longer replicates with it.
            Ok(Ended::More) => Ok(Ended::More),
            Ok(ended) => without_role(Witness::Bucket(bucket), ctx, &owner, asked)
                .await
                .map(|()| ended),
            Err(e) => Err(e),
        };
        match done {
            // Emptying goes on in the next pass: each pass stays short.
            Ok(Ended::More) => return Ok(Requeue::After(Duration::from_secs(1))),
            Ok(_) => {}
            // Cleanup fails closed: a refusal keeps the finalizer and says what was refused.
            Err(Error::Aws(e)) if refusal(&e).is_some() => {
                return Err(hold(bucket, ctx, &at, waiting(&e)).await);
            }
            Err(e) => return Err(e),
        }
    }
    remove_finalizer(ctx, bucket).await?;
    Ok(Requeue::OnChange)
}

/// Cleans up after a Bucket that disappeared without this cleanup (its finalizer stripped),
/// from the last state the watch saw, by the rules a pass last accepted for it. A deletion that
/// would wait for someone (a bucket not empty, deletes refused) releases the bucket instead:
/// nobody is left to act, and releasing keeps the data. How it ended, for the orphan metric.
pub async fn vanished(bucket: &Bucket, ctx: &InAccount<'_>) -> Result<Ended, Error> {
    let owner = owner(bucket, &ctx.settings.cluster_name);
    let Ok(at) = address(bucket, &ctx.settings, &ctx.aws.region, &owner) else {
        return Ok(Ended::Nothing);
    };
    let asked = Asked::of(bucket, ctx);
    loop {
        match release_or_delete(Witness::Gone, ctx, &at, &owner, asked).await? {
            Ended::More => continue,
            ended => {
                without_role(Witness::Gone, ctx, &owner, asked).await?;
                return Ok(ended);
            }
        }
    }
}

/// Deletes the Bucket's replication role, if it asked for replication and the role is its.
/// (One whose spec no longer says so is found by the orphan sweep, by its tags.)
async fn without_role(
    witness: Witness<'_>,
    ctx: &InAccount<'_>,
    owner: &Owner,
    asked: Asked,
) -> Result<(), Error> {
    if asked.replication && replication::delete_role(ctx, owner).await? {
        let role = replication::role_name(owner);
        let msg = format!("Deleted replication role {role}");
        witness.say(ctx, false, "Deleted", msg).await;
    }
    Ok(())
}

/// Releases a bucket the sweep found owned by `owner`, a UID no object has any more: its
/// grants removed and its ownership tags replaced by where it came from, as `Retain` does. The
/// sweep never deletes: AWS holds no record of the deletion rules a pass accepted (see the
/// README), and releasing never loses data a `Retain` would keep; the namespace may adopt it.
pub async fn release_orphan(
    ctx: &InAccount<'_>,
    region: &str,
    name: &str,
    owner: &Owner,
) -> Result<Ended, Error> {
    let at = Address {
        name: name.to_string(),
        region: region.to_string(),
    };
    // The spec is gone: a configuration left would name a role the sweep deletes.
    let asked = Asked {
        policy: DeletionPolicy::Retain,
        force_delete: false,
        object_lock: false,
        replication: true,
    };
    release_or_delete(Witness::Gone, ctx, &at, owner, asked).await
}

/// Releases (Retain) or deletes (Delete) the bucket if this object owns it, making the steps
/// [`next`] plans.
async fn release_or_delete(
    witness: Witness<'_>,
    ctx: &InAccount<'_>,
    at: &Address,
    owner: &Owner,
    asked: Asked,
) -> Result<Ended, Error> {
    let (aws, r, n) = (&ctx.aws, at.region.as_str(), at.name.as_str());
    let gone = matches!(witness, Witness::Gone);
    let mut found = find(ctx, at, owner).await?;
    loop {
        let now = match next(n, asked, &found, gone) {
            Deletion::Done => return Ok(Ended::Nothing),
            Deletion::LeaveUntouched => {
                let msg = format!("S3 bucket {n} is not owned by this object; left untouched");
                if let Witness::Bucket(b) = witness {
                    ctx.event(b, false, "Released", msg).await;
                }
                return Ok(Ended::Nothing);
            }
            Deletion::Release => {
                if let Found::Ours { tags, .. } = &found {
                    retain(witness, ctx, owner, tags, at, asked.replication).await?;
                }
                return Ok(Ended::Released);
            }
            Deletion::List => Contents::Listed {
                empty: aws.bucket_is_empty(r, n).await?,
            },
            Deletion::Empty { pages } => empty(witness, ctx, at, pages).await?,
            Deletion::EmptyNextPass => return Ok(Ended::More),
            Deletion::Delete => {
                aws.delete_bucket(r, n).await?;
                let msg = format!("Deleted S3 bucket {n}");
                witness.say(ctx, false, "Deleted", msg).await;
                return Ok(Ended::Deleted);
            }
            Deletion::Wait(msg) => match witness {
                Witness::Bucket(b) => return Err(hold(b, ctx, at, msg).await),
                // `next` never waits for a gone object.
                Witness::Gone => return Err(Error::DeletionBlocked(msg)),
            },
        };
        if let Found::Ours { contents, .. } = &mut found {
            *contents = now;
        }
    }
}

/// What AWS holds under the name, from the bucket's tags read now.
async fn find(
    ctx: &InAccount<'_>,
    at: &Address,
    owner: &Owner,
) -> Result<Found, crate::aws::Error> {
    let (aws, r, n) = (&ctx.aws, at.region.as_str(), at.name.as_str());
    // The bucket is released or deleted next: no access may go on from an earlier read, and
    // its entry goes with the Bucket.
    ctx.tag_reads.forget(r, n);
    let tags = match aws.bucket_tags(r, n).await {
        Ok(Some(tags)) => tags,
        Ok(None) => return Ok(Found::Absent),
        // Only a bucket this account does not have may be taken as gone (another account's
        // answers AccessDenied too); one of ours we may not read keeps the finalizer.
        Err(e) if e.kind == ErrorKind::AccessDenied => {
            return match aws.bucket_in_account(r, n).await? {
                false => Ok(Found::Absent),
                true => Err(e),
            };
        }
        Err(e) => return Err(e),
    };
    Ok(match owner.judge(&tags) {
        Ownership::Ours => Found::Ours {
            tags,
            contents: Contents::Unread,
        },
        _ => Found::NotOurs,
    })
}

/// Leaves the bucket in S3 without this object's grants and ownership.
async fn retain(
    witness: Witness<'_>,
    ctx: &InAccount<'_>,
    owner: &Owner,
    tags: &BTreeMap<String, String>,
    at: &Address,
    replication: bool,
) -> Result<(), Error> {
    let (aws, r, n) = (&ctx.aws, at.region.as_str(), at.name.as_str());
    // Grants never outlive ownership: the spec's statements go, the TLS-only one stays, and
    // the replication this Bucket set up (its role goes next). Before the tags, so a failure
    // here still finds the bucket ours on the next pass.
    let arn = naming::bucket_arn(naming::partition(r), n);
    aws.put_bucket_policy(r, n, &policy::bucket_policy(&arn, &[]))
        .await?;
    if replication {
        aws.delete_bucket_replication(r, n).await?;
    }
    aws.put_tags(r, n, &released(tags, owner)).await?;
    let note = format!(
        "S3 bucket {n} retained; ownership tags and bucket policy grants removed (only namespace {} may adopt it again)",
        owner.namespace
    );
    witness.say(ctx, false, "Retained", note).await;
    Ok(())
}

/// Deletes up to `pages` pages of object versions: what is left, or S3's denial (which
/// [`deletion`] judges). Never bypasses object lock retention.
async fn empty(
    witness: Witness<'_>,
    ctx: &InAccount<'_>,
    at: &Address,
    pages: usize,
) -> Result<Contents, crate::aws::Error> {
    let n = at.name.as_str();
    match ctx.aws.empty_bucket(&at.region, n, pages).await {
        Ok(Emptied { deleted, empty }) => {
            if deleted > 0 {
                let msg = format!("Deleted {deleted} object versions from {n} (forceDelete)");
                witness.say(ctx, false, "Emptied", msg).await;
            }
            Ok(Contents::Emptied { empty })
        }
        Err(e) if e.kind == ErrorKind::AccessDenied => Ok(Contents::DeletesRefused(e)),
        Err(e) => Err(e),
    }
}

/// Reports why deletion waits (status and event, once) and returns the error that keeps the
/// finalizer and retries with backoff.
async fn hold(bucket: &Bucket, ctx: &InAccount<'_>, at: &Address, msg: String) -> Error {
    let why = Blocked::new(Reason::DeletionBlocked, msg);
    // Deleting, it stays reported under the class its last pass applied.
    let class = bucket.status.as_ref().and_then(|s| s.class_name.as_deref());
    if let Err(e) = blocked(bucket, ctx, class, Some(at), &why).await {
        return e;
    }
    Error::DeletionBlocked(why.message)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEEP: Asked = Asked {
        policy: DeletionPolicy::Retain,
        force_delete: false,
        object_lock: false,
        replication: false,
    };
    const DELETE: Asked = Asked {
        policy: DeletionPolicy::Delete,
        ..KEEP
    };
    const FORCE: Asked = Asked {
        force_delete: true,
        ..DELETE
    };

    fn ours(contents: Contents) -> Found {
        Found::Ours {
            tags: BTreeMap::new(),
            contents,
        }
    }

    fn denied() -> crate::aws::Error {
        crate::aws::Error {
            service: "S3",
            operation: "DeleteObjects",
            code: "AccessDenied".into(),
            message: "Access Denied".into(),
            kind: ErrorKind::AccessDenied,
        }
    }

    fn waits(step: Deletion) -> String {
        match step {
            Deletion::Wait(why) => why,
            other => panic!("does not wait: {other:?}"),
        }
    }

    #[test]
    fn a_bucket_that_is_gone_or_not_ours_is_never_touched() {
        for asked in [KEEP, DELETE, FORCE] {
            assert_eq!(deletion("b", asked, &Found::Absent), Deletion::Done);
            assert_eq!(
                deletion("b", asked, &Found::NotOurs),
                Deletion::LeaveUntouched
            );
        }
    }

    #[test]
    fn retain_releases_whatever_the_bucket_holds() {
        for contents in [Contents::Unread, Contents::Listed { empty: false }] {
            assert_eq!(deletion("b", KEEP, &ours(contents)), Deletion::Release);
        }
        let forced = Asked {
            force_delete: true,
            ..KEEP
        };
        assert_eq!(
            deletion("b", forced, &ours(Contents::Unread)),
            Deletion::Release
        );
    }

    #[test]
    fn delete_lists_first_and_waits_on_a_bucket_that_is_not_empty() {
        assert_eq!(
            deletion("b", DELETE, &ours(Contents::Unread)),
            Deletion::List
        );
        let empty = ours(Contents::Listed { empty: true });
        assert_eq!(deletion("b", DELETE, &empty), Deletion::Delete);
        let why = waits(deletion(
            "b",
            DELETE,
            &ours(Contents::Listed { empty: false }),
        ));
        assert!(
            why.contains("S3 bucket b is not empty") && why.contains("spec.forceDelete: true"),
            "{why}"
        );
    }

    #[test]
    fn force_delete_empties_a_bounded_number_of_pages_per_pass() {
        let first = deletion("b", FORCE, &ours(Contents::Unread));
        assert_eq!(
            first,
            Deletion::Empty {
                pages: EMPTY_PAGES_PER_PASS
            }
        );
        // What one emptying left waits for the next pass: never a second emptying in this one.
        let left = ours(Contents::Emptied { empty: false });
        assert_eq!(deletion("b", FORCE, &left), Deletion::EmptyNextPass);
        let done = ours(Contents::Emptied { empty: true });
        assert_eq!(deletion("b", FORCE, &done), Deletion::Delete);
    }

    /// Deletion follows what a pass accepted, made stricter by the class, or an edit the class allows;
    /// never one it refuses.
    #[test]
    fn cleanup_follows_the_rules_last_accepted_or_the_class_when_stricter() {
        let accepted = |policy, force_delete| AcceptedDeletion {
            policy,
            force_delete,
        };
        let forced = Some(accepted(DeletionPolicy::Delete, true));
        let open = BucketConstraints::default();
        assert_eq!(
            in_force(None, forced, Some(&open), DeletionPolicy::Retain),
            accepted(DeletionPolicy::Delete, true)
        );
        // The class now allows only Retain and no forceDelete: both tighten what was accepted.
        let strict = BucketConstraints {
            allowed_deletion_policies: vec![DeletionPolicy::Retain],
            allow_force_delete: false,
            ..Default::default()
        };
        assert_eq!(
            in_force(None, forced, Some(&strict), DeletionPolicy::Delete),
            accepted(DeletionPolicy::Retain, false)
        );
        // A class allowing only Delete never turns an accepted Retain into a deletion.
        let delete_only = BucketConstraints {
            allowed_deletion_policies: vec![DeletionPolicy::Delete],
            ..Default::default()
        };
        let kept = Some(accepted(DeletionPolicy::Retain, false));
        assert_eq!(
            in_force(None, kept, Some(&delete_only), DeletionPolicy::Delete),
            accepted(DeletionPolicy::Retain, false)
        );
        // Nothing accepted yet (or from before the record existed): the operator's default,
        // without forceDelete, under the class.
        assert_eq!(
            in_force(None, None, None, DeletionPolicy::Delete),
            accepted(DeletionPolicy::Delete, false)
        );
        assert_eq!(
            in_force(None, None, Some(&strict), DeletionPolicy::Delete),
            accepted(DeletionPolicy::Retain, false)
        );
        // An edit the class allows is followed, such as forceDelete set to end a wait; one it
        // refuses is not, whatever was accepted before.
        let asked = Some(accepted(DeletionPolicy::Delete, true));
        let was = Some(accepted(DeletionPolicy::Delete, false));
        assert_eq!(
            in_force(asked, was, Some(&open), DeletionPolicy::Retain),
            accepted(DeletionPolicy::Delete, true)
        );
        assert_eq!(
            in_force(asked, was, None, DeletionPolicy::Retain),
            accepted(DeletionPolicy::Delete, true)
        );
        assert_eq!(
            in_force(asked, kept, Some(&strict), DeletionPolicy::Delete),
            accepted(DeletionPolicy::Retain, false)
        );
        let no_force = BucketConstraints {
            allow_force_delete: false,
            ..Default::default()
        };
        assert_eq!(
            in_force(asked, was, Some(&no_force), DeletionPolicy::Delete),
            accepted(DeletionPolicy::Delete, false)
        );
    }

    /// With nobody left to act on a wait (the object gone), a deletion that would wait releases.
    #[test]
    fn a_gone_objects_deletion_that_would_wait_releases_instead() {
        let full = ours(Contents::Listed { empty: false });
        assert!(matches!(next("b", DELETE, &full, false), Deletion::Wait(_)));
        assert_eq!(next("b", DELETE, &full, true), Deletion::Release);
        let refused = ours(Contents::DeletesRefused(denied()));
        assert_eq!(next("b", FORCE, &refused, true), Deletion::Release);
        // Everything else is the same step as for a live object.
        let empty = ours(Contents::Listed { empty: true });
        assert_eq!(next("b", DELETE, &empty, true), Deletion::Delete);
        assert_eq!(
            next("b", FORCE, &ours(Contents::Unread), true),
            deletion("b", FORCE, &ours(Contents::Unread))
        );
        assert_eq!(
            next("b", DELETE, &Found::NotOurs, true),
            Deletion::LeaveUntouched
        );
    }

    #[test]
    fn refused_deletes_wait_and_name_retention_only_under_object_lock() {
        let refused = ours(Contents::DeletesRefused(denied()));
        let why = waits(deletion("b", FORCE, &refused));
        assert!(
            why.starts_with("deleting the Bucket is waiting: AWS denied S3 DeleteObjects")
                && !why.contains("object lock"),
            "{why}"
        );
        let locked = Asked {
            object_lock: true,
            ..FORCE
        };
        let why = waits(deletion("b", locked, &refused));
        assert!(
            why.contains("S3 bucket b has object lock") && why.contains("Access Denied"),
            "{why}"
        );
    }
}
