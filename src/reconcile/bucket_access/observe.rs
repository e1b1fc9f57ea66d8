//! What a pass reads: the Bucket (its cache, else the API server), the bucket's ownership tags,
//! the Secret, the IAM identity and the Pod Identity association; and the versions of those
//! inputs that `Settled` compares.

use crate::reconcile::InAccount;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::ListParams;
use kube::{Api, Resource, ResourceExt};

use super::plan::{Also, BucketFacts, Found, IdentityState, Snapshot};
use super::{POLICY_NAME, identity_candidates, outputs, revoking_failed, secret_name};
use crate::api::condition::{self, Reason};
use crate::api::{Bucket, BucketAccess, CredentialsType};
use crate::aws::eks::Association;
use crate::aws::iam::Identity;
use crate::aws::tags::{Owner, Ownership};
use crate::aws::{ErrorKind, naming, policy};
use crate::reconcile::bucket::Address;
use crate::reconcile::{Blocked, Error, Settings, has_finalizer, object_key, owner, requested_at};

/// What the Bucket cache says about the grant, before any AWS call (pure).
#[derive(Debug, PartialEq)]
enum BucketState {
    /// No grant may stand: credentials are revoked, and this is why.
    Gone(Blocked),
    /// The Bucket is not Ready: nothing is created or changed, and a grant already in place
    /// stays only while AWS says the bucket it names is still the Bucket's.
    NotReady(String, Box<Address>, Owner),
    /// Neither the Bucket nor this access has reported anything yet: the Bucket's first pass
    /// is still to come. Its status write wakes this access, so it waits without writing a
    /// "waiting for Bucket" status that the Bucket's pass would overturn within a second (a
    /// status write, its echo and a second AWS pass per pair, for nothing).
    Pending,
    /// The bucket this Bucket's spec and UID name, still to be confirmed in AWS.
    Named(Box<Address>, Owner),
}

fn bucket_state(
    access: &BucketAccess,
    bucket: Option<&Bucket>,
    settings: &Settings,
    default_region: &str,
) -> BucketState {
    let ns = access.namespace().unwrap_or_default();
    let name = &access.spec.bucket_ref.name;
    let gone = |msg| BucketState::Gone(Blocked::new(Reason::BucketNotFound, msg));
    let Some(bucket) = bucket else {
        return gone(format!("Bucket {name} does not exist in namespace {ns}"));
    };
    if bucket.metadata.deletion_timestamp.is_some() {
        return gone(format!("Bucket {name} is being deleted"));
    }
    // The bucket is named by spec and UID alone (an edit that makes the rest of the spec
    // invalid does not move it); Ready is only trusted to say "not yet", and what is granted is
    // confirmed in AWS either way.
    let owner = owner(bucket, &settings.cluster_name);
    let at = match crate::reconcile::bucket::address(bucket, settings, default_region, &owner) {
        Ok(at) => Box::new(at),
        Err(why) => return BucketState::Gone(Blocked::new(Reason::BucketNotOwned, why.message)),
    };
    let conditions = bucket.status.as_ref().map(|s| s.conditions.as_slice());
    if !conditions.is_some_and(condition::is_ready) {
        if awaits(access, bucket) {
            return BucketState::Pending;
        }
        let msg = format!("waiting for Bucket {name} to become Ready");
        return BucketState::NotReady(msg, at, owner);
    }
    BucketState::Named(at, owner)
}

/// Does `access` wait quietly for `bucket`'s first report ([`BucketState::Pending`])? Only
/// while nothing was made for it (no finalizer) and it has reported nothing itself: a status
/// holding only its recorded account is no report.
fn awaits(access: &BucketAccess, bucket: &Bucket) -> bool {
    let reported = |c: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition]| {
        c.iter().any(|c| c.type_ == condition::READY)
    };
    let bucket_reported = bucket
        .status
        .as_ref()
        .is_some_and(|s| reported(&s.conditions));
    let access_reported = access
        .status
        .as_ref()
        .is_some_and(|s| !s.conditions.is_empty());
    bucket.metadata.deletion_timestamp.is_none()
        && !bucket_reported
        && !access_reported
        && !has_finalizer(access)
}

/// Is `access` new, and its Bucket (as the cache has it) yet to report? Its placement is then
/// not judged either: a Bucket whose first pass has not recorded its account yet would be taken
/// for one in the operator's account (a ClassViolation reported, and overturned, for nothing).
pub(super) fn awaits_bucket(access: &BucketAccess, ctx: &crate::reconcile::Context) -> bool {
    let ns = access.namespace().unwrap_or_default();
    ctx.bucket(&ns, &access.spec.bucket_ref.name)
        .is_some_and(|b| awaits(access, &b))
}

/// The grant's bucket if its tags in AWS still name the Bucket as owner; else why not (an
/// `Error::Blocked` with reason `BucketNotOwned`).
/// `within`: how old a read of the tags may serve.
async fn confirm(
    ctx: &InAccount<'_>,
    d: &Address,
    owner: &Owner,
    bucket_ref: &str,
    within: Duration,
) -> Result<BucketFacts, Error> {
    let not_owned = |msg| Error::Blocked(Blocked::new(Reason::BucketNotOwned, msg));
    let tags = match ctx.bucket_tags(&d.region, &d.name, within).await {
        Ok(tags) => tags,
        // A bucket whose owner cannot be confirmed is granted to no one.
        Err(e) if e.kind == ErrorKind::AccessDenied => {
            return Err(not_owned(format!(
                "the owner of S3 bucket {} cannot be confirmed ({}: {})",
                d.name, e.code, e.message
            )));
        }
        Err(e) => return Err(e.into()),
    };
    let why = match tags.map(|t| owner.judge(&t)) {
        Some(Ownership::Ours) => {
            return Ok(BucketFacts {
                arn: naming::bucket_arn(naming::partition(&d.region), &d.name),
                name: d.name.clone(),
                region: d.region.clone(),
            });
        }
        None => "does not exist".to_string(),
        Some(Ownership::Foreign(who)) => format!("is {who}"),
        Some(Ownership::Unowned | Ownership::Released { .. }) => "has no owner".to_string(),
    };
    Err(not_owned(format!(
        "S3 bucket {} {why}: it is no longer owned by Bucket {bucket_ref}",
        d.name
    )))
}

/// The resourceVersions of a pass's inputs: those it started from and those it wrote (see
/// `Settled`).
#[derive(Clone, Debug, Default)]
pub(super) struct Versions {
    pub(super) access: Vec<String>,
    bucket: Vec<String>,
    pub(super) secret: Vec<String>,
    /// The class in force: an edited class is no echo.
    class: Vec<String>,
    /// The ConfigMap of bucket facts (`spec.configMap`); like the Secret, none when absent.
    pub(super) config_map: Vec<String>,
}

impl Versions {
    fn current(&self) -> Vec<String> {
        [
            &self.access,
            &self.bucket,
            &self.secret,
            &self.class,
            &self.config_map,
        ]
        .iter()
        .map(|v| v.last().cloned().unwrap_or_default())
        .collect()
    }

    pub(super) fn into_inputs(self) -> Vec<Vec<String>> {
        vec![
            self.access,
            self.bucket,
            self.secret,
            self.class,
            self.config_map,
        ]
    }
}

/// The Secret's version as a pass's input. A missing Secret has none: its absence never matches
/// a version a pass saw or wrote, so a deleted Secret always runs the full pass that restores
/// it. (Recorded as "", the absence its first pass saw before creating it would make that
/// deletion look like the echo of the pass's own write until the next resync.)
fn versions_of<K: Resource>(secret: Option<&K>) -> Vec<String> {
    secret
        .and_then(|s| s.meta().resource_version.clone())
        .into_iter()
        .collect()
}

/// What observing found: nothing new since the last pass, or all the plan decides from.
pub(super) enum Observation {
    /// Every input is at a version the last pass saw or wrote: wait this long.
    Settled(Duration),
    /// No grant may stand (why), and the access's identity and (shared role) association as
    /// found: the pass withdraws what they grant.
    Withdraw(Blocked, Found<IdentityState>, Found<Association>),
    Seen(Box<Snapshot>, Versions),
}

/// Reads what the plan decides from: the Bucket (cache), the Secret, the bucket's ownership
/// tags and the IAM identity. It writes nothing: a grant whose bucket is gone or no longer
/// owned is found here and withdrawn by the pass.
/// `class`: the version of the class in force (see [`crate::reconcile::class::access::version`]).
pub(super) async fn observe(
    access: &BucketAccess,
    ctx: &InAccount<'_>,
    class: String,
) -> Result<Observation, Error> {
    let start = access.resource_version().unwrap_or_default();
    let key = object_key(access);
    // A cache that has not seen this operator's last write (under load, another input's event
    // can come first) would only have the finalizer patch refused; that write's event comes.
    if ctx.settled.wrote_over(&key, &start) {
        return Ok(Observation::Settled(ctx.resync_after()));
    }
    let ns = access.namespace().ok_or(Error::NoNamespace)?;
    let bucket_ref = access.spec.bucket_ref.name.clone();
    let bucket = match ctx.bucket(&ns, &bucket_ref) {
        Some(b) => Some(b),
        None => live_bucket(ctx, &ns, &bucket_ref).await?.map(Arc::new),
    };
    check_prefixes(access)?;
    let (d, bucket_owner) =
        match bucket_state(access, bucket.as_deref(), &ctx.settings, &ctx.aws.region) {
            BucketState::Gone(why) => return withdrawn(access, ctx, why).await,
            // Nothing is created for it yet, so it needs no finalizer either.
            BucketState::Pending => return Ok(Observation::Settled(ctx.resync_after())),
            BucketState::NotReady(msg, at, bucket_owner) => {
                return bucket_not_ready(access, ctx, msg, &at, &bucket_owner).await;
            }
            BucketState::Named(d, owner) => (d, owner),
        };
    let (secret, config_map) = tokio::try_join!(
        read_secret(access, ctx, &ns),
        read_config_map(access, ctx, &ns)
    )?;
    // Every Bucket it grants is an input, as one: any of them changing runs a full pass.
    let version = |b: Option<Arc<Bucket>>| b.and_then(|b| b.resource_version());
    let others = (access.spec.additional_buckets.iter())
        .map(|g| version(ctx.bucket(&ns, &g.bucket_ref.name)).unwrap_or_default());
    let buckets: Vec<String> = std::iter::once(version(bucket).unwrap_or_default())
        .chain(others)
        .collect();
    let versions = Versions {
        access: vec![start],
        bucket: vec![buckets.join("|")],
        secret: versions_of(secret.as_ref()),
        class: vec![class],
        // An access that asks for no ConfigMap has nothing there to change.
        config_map: match &config_map {
            None if access.spec.config_map.is_none() => vec![String::new()],
            found => versions_of(found.as_ref()),
        },
    };
    // The echo of this operator's own writes costs no AWS reads (see `Settled`); roles are
    // cheap to re-read and keep no such record. Without its finalizer the access is no echo.
    if access.spec.credentials.type_ == CredentialsType::AccessKey
        && has_finalizer(access)
        && let Some(wait) = ctx.settled.remaining(&key, &versions.current())
    {
        return Ok(Observation::Settled(wait));
    }
    let outputs = (secret, config_map);
    read_grant(access, ctx, &d, &bucket_owner, outputs, versions).await
}

/// No grant may stand (`why`): reads what the access's identity is granted, for the pass to
/// withdraw. A refused read is reported like a refused withdrawal.
async fn withdrawn(
    access: &BucketAccess,
    ctx: &InAccount<'_>,
    why: Blocked,
) -> Result<Observation, Error> {
    let owner = owner(access, &ctx.settings.cluster_name);
    let (found, association) = tokio::join!(
        observe_identity(ctx, access, &owner),
        shared_association(ctx, access, &owner)
    );
    withdrawal_of(why, found, association)
}

/// What the pass withdraws, once the identity (and association) are read.
fn withdrawal_of(
    why: Blocked,
    found: Result<Found<IdentityState>, crate::aws::Error>,
    association: Result<Found<Association>, crate::aws::Error>,
) -> Result<Observation, Error> {
    match (found, association) {
        (Ok(found), Ok(association)) => Ok(Observation::Withdraw(why, found, association)),
        (Err(e), _) | (_, Err(e)) => Err(revoking_failed(&why, e)),
    }
}

/// A `PodIdentity` access's association with the shared role: all a withdrawal takes back (a
/// role of its own loses its policy instead, and its association is not read).
async fn shared_association(
    ctx: &InAccount<'_>,
    access: &BucketAccess,
    owner: &Owner,
) -> Result<Found<Association>, crate::aws::Error> {
    if ctx.settings.pod_identity_role_arn.is_none() {
        return Ok(Found::Absent);
    }
    association(ctx, access, owner, false).await
}

/// The Pod Identity association of a `PodIdentity` access's ServiceAccount, judged by its
/// ownership tags (`Absent` for other types). Without `--eks-cluster-name` none can be found:
/// `strict` (a deletion, which fails closed) says so as an error; a pass's plan refuses anyway.
pub(super) async fn association(
    ctx: &InAccount<'_>,
    access: &BucketAccess,
    owner: &Owner,
    strict: bool,
) -> Result<Found<Association>, crate::aws::Error> {
    let credentials = &access.spec.credentials;
    if credentials.type_ != CredentialsType::PodIdentity {
        return Ok(Found::Absent);
    }
    let no_cluster = |message: String| crate::aws::Error {
        service: "eks",
        operation: "ListPodIdentityAssociations",
        code: "ClusterNotFound".into(),
        message,
        kind: ErrorKind::Invalid,
    };
    let Some(cluster) = ctx.settings.eks_cluster_name.as_deref() else {
        let msg = "the operator's --eks-cluster-name is not set, so the ServiceAccount's association cannot be found";
        return if strict {
            Err(no_cluster(msg.into()))
        } else {
            Ok(Found::Absent)
        };
    };
    let sa = credentials
        .service_account_name
        .as_deref()
        .unwrap_or_default();
    let found = match ctx
        .aws
        .find_association(cluster, &owner.namespace, sa)
        .await
    {
        Ok(found) => found,
        Err(e) if e.not_found() => {
            let msg = format!(
                "EKS cluster {cluster} (--eks-cluster-name) does not exist: {}",
                e.message
            );
            return Err(no_cluster(msg));
        }
        Err(e) => return Err(e),
    };
    let Some(found) = found else {
        return Ok(Found::Absent);
    };
    Ok(match owner.judge(&found.tags) {
        Ownership::Ours => Found::Ours(found),
        Ownership::Unowned | Ownership::Released { .. } => {
            Found::Foreign("not made by the operator".to_string())
        }
        Ownership::Foreign(who) => Found::Foreign(who),
    })
}

/// A Bucket not Ready: the access waits, and its grant stays only while AWS says the bucket it
/// names is still the Bucket's. Its pass may no longer read the tags (an invalid spec stops it
/// early): this read is fresh, so a grant never follows the name to a bucket someone else made.
async fn bucket_not_ready(
    access: &BucketAccess,
    ctx: &InAccount<'_>,
    msg: String,
    at: &Address,
    bucket_owner: &Owner,
) -> Result<Observation, Error> {
    let bucket_ref = &access.spec.bucket_ref.name;
    match confirm(ctx, at, bucket_owner, bucket_ref, Duration::ZERO).await {
        Ok(_) => Err(Blocked::new(Reason::BucketNotReady, msg).into()),
        Err(Error::Blocked(not_owned)) => {
            let msg = format!("{msg}; {}", not_owned.message);
            withdrawn(access, ctx, Blocked::new(Reason::BucketNotReady, msg)).await
        }
        Err(e) => Err(e),
    }
}

/// What the plan compares in AWS: the grant's bucket, confirmed still the Bucket's (else the
/// grant is to be withdrawn), and the access's identity.
async fn read_grant(
    access: &BucketAccess,
    ctx: &InAccount<'_>,
    d: &Address,
    bucket_owner: &Owner,
    (secret, config_map): (Option<Secret>, Option<ConfigMap>),
    versions: Versions,
) -> Result<Observation, Error> {
    let owner = owner(access, &ctx.settings.cluster_name);
    // The Bucket's own pass reads these tags at least once per resync period (jittered by up to
    // 10%) and wakes this access when they change hands: its last read serves; but not a pass
    // someone asked for (`reconcile-requested-at`), which reads everything afresh.
    let asked = ctx
        .settled
        .requested(&object_key(access), requested_at(&access.metadata));
    let within = if asked {
        Duration::ZERO
    } else {
        ctx.settings.resync_period.mul_f64(1.1) + Duration::from_secs(30)
    };
    // All only read; the plan needs all.
    let (facts, also, identity, association) = tokio::join!(
        confirm(ctx, d, bucket_owner, &access.spec.bucket_ref.name, within),
        also_found(access, ctx, within),
        observe_identity(ctx, access, &owner),
        association(ctx, access, &owner, false),
    );
    let facts = match facts {
        Err(Error::Blocked(why)) => {
            let shared = ctx.settings.pod_identity_role_arn.is_some();
            let association = association.map(|a| if shared { a } else { Found::Absent });
            return withdrawal_of(why, identity, association);
        }
        other => other?,
    };
    let observed = Snapshot {
        bucket: facts,
        also: also?,
        identity: identity?,
        association: association?,
        secret,
        config_map,
        now: jiff::Timestamp::now(),
    };
    Ok(Observation::Seen(Box::new(observed), versions))
}

/// The prefixes of the grant (`spec.prefix`, and each of `spec.additionalBuckets`), checked
/// again before anything is written: objects stored before the schema's rule may hold anything.
fn check_prefixes(access: &BucketAccess) -> Result<(), Blocked> {
    let spec = &access.spec;
    let others = spec.additional_buckets.iter().enumerate();
    let prefixes = std::iter::once(("spec.prefix".to_string(), spec.prefix.as_ref())).chain(
        others.map(|(i, g)| {
            (
                format!("spec.additionalBuckets[{i}].prefix"),
                g.prefix.as_ref(),
            )
        }),
    );
    for (field, prefix) in prefixes {
        if let Some(p) = prefix {
            policy::check_prefix(p).map_err(|msg| {
                Blocked::new(Reason::InvalidSpec, msg.replacen("spec.prefix", &field, 1))
            })?;
        }
    }
    Ok(())
}

/// Each of `spec.additionalBuckets`, granted only while its bucket's tags in AWS name its Bucket
/// as owner, as for the grant's own bucket (`within`; afresh for a Bucket that is not Ready).
/// One missing, being deleted or whose bucket is not confirmed is left out of the grant, and
/// why; its Bucket's changes wake the access.
async fn also_found(
    access: &BucketAccess,
    ctx: &InAccount<'_>,
    within: Duration,
) -> Result<Vec<Also>, Error> {
    let ns = access.namespace().unwrap_or_default();
    let each = access.spec.additional_buckets.iter().map(|g| {
        let (ns, name) = (ns.as_str(), g.bucket_ref.name.as_str());
        async move {
            let left_out = |reason, msg| Ok(Also::LeftOut(Blocked::new(reason, msg)));
            let Some(bucket) = ctx.bucket(ns, name) else {
                let msg = format!("Bucket {name} does not exist in namespace {ns}");
                return left_out(Reason::BucketNotFound, msg);
            };
            if bucket.metadata.deletion_timestamp.is_some() {
                return left_out(
                    Reason::BucketNotFound,
                    format!("Bucket {name} is being deleted"),
                );
            }
            let bucket_owner = owner(bucket.as_ref(), &ctx.settings.cluster_name);
            let (settings, region) = (&ctx.settings, &ctx.aws.region);
            let at =
                match crate::reconcile::bucket::address(&bucket, settings, region, &bucket_owner) {
                    Ok(at) => at,
                    Err(why) => return left_out(Reason::BucketNotOwned, why.message),
                };
            let conditions = bucket.status.as_ref().map(|s| s.conditions.as_slice());
            let ready = conditions.is_some_and(condition::is_ready);
            let within = if ready { within } else { Duration::ZERO };
            match confirm(ctx, &at, &bucket_owner, name, within).await {
                Ok(facts) => Ok(Also::Granted(facts)),
                Err(Error::Blocked(_)) if !ready => {
                    let msg = format!("waiting for Bucket {name} to become Ready");
                    left_out(Reason::BucketNotReady, msg)
                }
                Err(Error::Blocked(why)) => Ok(Also::LeftOut(why)),
                Err(e) => Err(e),
            }
        }
    });
    futures::future::try_join_all(each).await
}

/// The Bucket `name` as the API server has it, for when the cache has not seen it. Watch events
/// of different kinds arrive independently: under load a new BucketAccess's event can come
/// before its Bucket's, even when the Bucket was created first. Judged from the cache alone, the
/// access then reported `BucketNotFound` and, moments later, its Bucket's progress: a status flip
/// (and an event) for a Bucket that existed all along. Found here, it waits like any access on
/// a new Bucket; the Bucket's own watch event wakes it again. (A LIST by name: the operator's
/// RBAC grants list and watch on Buckets, not get.)
async fn live_bucket(ctx: &InAccount<'_>, ns: &str, name: &str) -> Result<Option<Bucket>, Error> {
    let api = Api::<Bucket>::namespaced(ctx.client.clone(), ns);
    let by_name = ListParams::default().fields(&format!("metadata.name={name}"));
    Ok(api.list(&by_name).await?.items.into_iter().next())
}

/// The user or role with this access's name: whether it is ours, and if so what the plan
/// compares (nothing more is read of an identity that is not ours).
async fn observe_identity(
    ctx: &InAccount<'_>,
    access: &BucketAccess,
    owner: &Owner,
) -> Result<Found<IdentityState>, crate::aws::Error> {
    let aws = &ctx.aws;
    let shared = ctx.settings.pod_identity_role_arn.is_some();
    if shared && access.spec.credentials.type_ == CredentialsType::PodIdentity {
        // The shared role is the administrator's: this access has no identity to read.
        return Ok(Found::Absent);
    }
    let Some((identity, found)) = find_identity(ctx, access, owner).await? else {
        return Ok(Found::Absent);
    };
    match owner.judge(&found.tags) {
        Ownership::Ours => {}
        Ownership::Unowned | Ownership::Released { .. } => {
            return Ok(Found::Foreign("not tagged by the operator".to_string()));
        }
        Ownership::Foreign(who) => return Ok(Found::Foreign(who)),
    }
    let keys = async {
        match &identity {
            Identity::User(user) => aws.access_keys(user).await,
            Identity::Role(_) => Ok(Vec::new()),
        }
    };
    let (policy, keys) = tokio::try_join!(aws.inline_policy(&identity, POLICY_NAME), keys)?;
    Ok(Found::Ours(IdentityState {
        arn: found.arn,
        boundary: found.boundary,
        policy,
        trust_policy: found.trust_policy,
        keys,
    }))
}

/// The identity [`iam_identity`](super::iam_identity) names, or, when it does not exist, this access's identity under
/// its other name if its tags say it is ours: one made before names carried the long UID hash
/// keeps its name (status, which records it after a pass, may be lost or edited). The second
/// read happens only while the first name is absent on an access that has the finalizer, never
/// in a steady pass or a first one.
async fn find_identity(
    ctx: &InAccount<'_>,
    access: &BucketAccess,
    owner: &Owner,
) -> Result<Option<(Identity, crate::aws::iam::Entity)>, crate::aws::Error> {
    let [chosen, other] = identity_candidates(access, owner);
    if let Some(found) = ctx.aws.get_identity(&chosen).await? {
        return Ok(Some((chosen, found)));
    }
    // Without the finalizer nothing was ever made for this access (it goes on before any
    // identity does, in every release), so a new access costs one read, not two.
    if !has_finalizer(access) {
        return Ok(None);
    }
    Ok(match ctx.aws.get_identity(&other).await? {
        Some(found) if owner.judge(&found.tags) == Ownership::Ours => Some((other, found)),
        _ => None,
    })
}

/// The Secret this access writes, if it exists; `Blocked` when it exists but belongs to someone
/// else (it is never overwritten).
async fn read_secret(
    access: &BucketAccess,
    ctx: &InAccount<'_>,
    ns: &str,
) -> Result<Option<Secret>, Error> {
    read_output(access, ctx, ns, &secret_name(access), "").await
}

/// The ConfigMap of bucket facts this access writes (`spec.configMap`), if it asks for one and
/// it exists; `Blocked` when it exists but belongs to someone else.
async fn read_config_map(
    access: &BucketAccess,
    ctx: &InAccount<'_>,
    ns: &str,
) -> Result<Option<ConfigMap>, Error> {
    let Some(name) = outputs::config_map_name(access) else {
        return Ok(None);
    };
    read_output(access, ctx, ns, &name, " (spec.configMap)").await
}

/// The object `name` of `ns` this access writes, if it exists; `Blocked` when it exists but
/// belongs to someone else: it is never overwritten. `field`: what asked for it, said after its
/// name.
async fn read_output<K>(
    access: &BucketAccess,
    ctx: &InAccount<'_>,
    ns: &str,
    name: &str,
    field: &str,
) -> Result<Option<K>, Error>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let found = Api::<K>::namespaced(ctx.client.clone(), ns)
        .get_opt(name)
        .await?;
    if found
        .as_ref()
        .is_some_and(|o| !outputs::owned_by(o, access))
    {
        let msg = format!(
            "{} {name}{field} exists and is not owned by this BucketAccess; it will not be overwritten",
            K::kind(&())
        );
        return Err(Blocked::new(Reason::OwnershipConflict, msg).into());
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object<K: serde::de::DeserializeOwned>(kind: &str, spec: serde_json::Value) -> K {
        let o = serde_json::json!({"apiVersion": "s3.operator.dev/v1alpha1", "kind": kind,
            "metadata": {"name": "b", "namespace": "team-a", "uid": "u1", "generation": 1},
            "spec": spec});
        serde_json::from_value(o).unwrap()
    }

    fn ready(status: bool) -> Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
        let reason = if status {
            Reason::Available
        } else {
            Reason::InvalidSpec
        };
        let now = jiff::Timestamp::now();
        vec![condition::ready(&[], status, reason, "m", Some(1), now)]
    }

    #[test]
    fn an_access_waits_quietly_only_for_a_bucket_that_has_not_reported_yet() {
        let settings = Settings::for_tests();
        let mut access: BucketAccess = object(
            "BucketAccess",
            serde_json::json!({"bucketRef": {"name": "b"}, "permission": "ReadWrite"}),
        );
        let mut bucket: Bucket = object("Bucket", serde_json::json!({}));
        let state = |a: &BucketAccess, b: &Bucket| bucket_state(a, Some(b), &settings, "eu-west-1");
        // A new Bucket and a new access: the Bucket's first status write wakes the access.
        assert_eq!(state(&access, &bucket), BucketState::Pending);
        // A Bucket that has reported Ready=False is reported as such.
        bucket.status = Some(Default::default());
        bucket.status.as_mut().unwrap().conditions = ready(false);
        assert!(
            matches!(state(&access, &bucket), BucketState::NotReady(m, ..) if m.contains("Bucket b"))
        );
        // An access whose status holds only its recorded account has reported nothing yet.
        bucket.status = None;
        access.status = Some(Default::default());
        access.status.as_mut().unwrap().account = Some(crate::api::AccountRecord {
            name: "other".into(),
            id: "111111111111".into(),
            ..Default::default()
        });
        assert_eq!(state(&access, &bucket), BucketState::Pending);
        // An access that has reported before says why it waits, even for a silent Bucket; so
        // does one with its finalizer (something may have been made for it).
        access.status.as_mut().unwrap().conditions = ready(false);
        assert!(matches!(state(&access, &bucket), BucketState::NotReady(..)));
        access.status.as_mut().unwrap().conditions.clear();
        access.metadata.finalizers = Some(vec![crate::api::FINALIZER.into()]);
        assert!(matches!(state(&access, &bucket), BucketState::NotReady(..)));
        access.metadata.finalizers = None;
        // A Bucket deleted before its first report: the access says so, it does not wait.
        bucket.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now()),
        );
        assert!(matches!(state(&access, &bucket), BucketState::Gone(..)));
        bucket.metadata.deletion_timestamp = None;
        // A Ready Bucket names the grant's bucket.
        bucket.status = Some(Default::default());
        bucket.status.as_mut().unwrap().conditions = ready(true);
        assert!(matches!(state(&access, &bucket), BucketState::Named(..)));
        assert!(matches!(
            bucket_state(&access, None, &settings, "eu-west-1"),
            BucketState::Gone(_)
        ));
    }

    /// The echo of a pass's own writes is skipped, but a Secret deleted or edited since is not
    /// its echo: the full pass runs and restores it at once, not at the next resync. Nor is an
    /// edit of the class in force (or another class coming into force): it is checked at once.
    #[test]
    fn a_secret_or_class_changed_after_a_pass_runs_the_full_pass() {
        let settled = crate::reconcile::Settled::default();
        let secret = |version: &str| {
            let mut s = Secret::default();
            s.metadata.resource_version = Some(version.into());
            s
        };
        let v = |x: &str| x.to_string();
        // The first pass finds no Secret and writes it (version 7).
        let mut first = Versions {
            access: vec![v("1"), v("2"), v("3")],
            bucket: vec![v("5")],
            secret: versions_of::<Secret>(None),
            class: vec![v("sandbox@4")],
            config_map: vec![String::new()],
        };
        first.secret.push(v("7"));
        settled.record("k".into(), first.into_inputs(), Duration::from_secs(600));
        let now = |s: Option<&Secret>, class: &str| {
            Versions {
                access: vec![v("3")],
                bucket: vec![v("5")],
                secret: versions_of(s),
                class: vec![v(class)],
                config_map: vec![String::new()],
            }
            .current()
        };
        let seven = Some(&secret("7"));
        assert!(
            settled.remaining("k", &now(seven, "sandbox@4")).is_some(),
            "the echo of its own write"
        );
        let deleted = now(None, "sandbox@4");
        assert_eq!(settled.remaining("k", &deleted), None, "deleted since");
        let edited = now(Some(&secret("9")), "sandbox@4");
        assert_eq!(settled.remaining("k", &edited), None, "edited since");
        for class in ["sandbox@8", "prod@2", ""] {
            let changed = now(seven, class);
            assert_eq!(settled.remaining("k", &changed), None, "class {class:?}");
        }
    }

    /// An edit that makes the Bucket's spec invalid neither moves the grant's bucket nor lets the
    /// access skip confirming it: the not-Ready state still names the bucket to confirm in AWS.
    #[test]
    fn an_invalid_bucket_spec_still_names_the_bucket_to_confirm() {
        let settings = Settings::for_tests();
        let mut access: BucketAccess = object(
            "BucketAccess",
            serde_json::json!({"bucketRef": {"name": "b"}, "permission": "ReadWrite"}),
        );
        access.status = Some(Default::default());
        let mut bucket: Bucket = object("Bucket", serde_json::json!({}));
        bucket.status = Some(Default::default());
        bucket.status.as_mut().unwrap().conditions = ready(true);
        let BucketState::Named(before, _) = bucket_state(&access, Some(&bucket), &settings, "r")
        else {
            panic!("a Ready Bucket names its bucket");
        };
        // COMPLIANCE retention, which this operator does not allow: the spec no longer resolves.
        bucket.spec.object_lock = serde_json::from_value(serde_json::json!(
            {"defaultRetention": {"mode": "COMPLIANCE", "days": 1}}
        ))
        .unwrap();
        let owner = owner(&bucket, &settings.cluster_name);
        assert!(crate::reconcile::bucket::desired(&bucket, &settings, "r", &owner).is_err());
        bucket.status.as_mut().unwrap().conditions = ready(false);
        match bucket_state(&access, Some(&bucket), &settings, "r") {
            BucketState::NotReady(_, at, _) => assert_eq!(at, before),
            other => panic!("{other:?}"),
        }
    }
}
