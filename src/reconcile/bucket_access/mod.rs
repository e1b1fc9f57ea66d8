//! BucketAccess: an IAM user (with access keys) or role scoped to one bucket, and the Secret
//! that hands its credentials to the application.
//!
//! Each pass observes (the Bucket cache, the Secret, the bucket's tags and the IAM identity),
//! plans with a pure function ([`plan::plan`], keys in [`keys`]) and applies only the difference.

pub mod keys;
pub mod plan;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};

use super::{
    Blocked, Context, Error, MANAGER, PassEvents, Requeue, ensure_finalizer, has_finalizer,
    object_key, owner, refusal, remove_finalizer, report_blocked, served, update_status,
};
use crate::api::condition::{self, Reason};
use crate::api::{Bucket, BucketAccess, BucketAccessStatus, CredentialsType};
use crate::aws::tags::{Owner, Ownership};
use crate::aws::{ErrorKind, naming, policy};
use crate::metrics::METRICS;
use plan::{
    ActiveKey, BucketFacts, Found, Identity, Kind, Learned, Observed, ObservedRole, ObservedUser,
    Plan, Step,
};

pub use keys::{KeyPlan, RotationPolicy, SecretCreds, plan_keys, secret_creds};

/// Name of the inline policy on every user and role.
pub const POLICY_NAME: &str = "s3-operator-access";
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "s3-operator";
pub const ACCESS_LABEL: &str = crate::domain_key!("bucket-access");

pub fn secret_name(access: &BucketAccess) -> String {
    access
        .spec
        .credentials
        .secret_name
        .clone()
        .unwrap_or_else(|| access.name_any())
}

/// What the Bucket cache says about the grant, before any AWS call (pure).
#[derive(Debug, PartialEq)]
enum BucketState {
    /// No grant may stand: credentials are revoked, and this is why.
    Gone(Blocked),
    /// The Bucket is not Ready: nothing is created or changed, and a grant already in place
    /// stays only while AWS says the bucket it names is still the Bucket's.
    NotReady(String, Box<super::bucket::Address>, Owner),
    /// Neither the Bucket nor this access has reported anything yet: the Bucket's first pass
    /// is still to come. Its status write wakes this access, so it waits without writing a
    /// "waiting for Bucket" status that the Bucket's pass would overturn within a second (a
    /// status write, its echo and a second AWS pass per pair, for nothing).
    Pending,
    /// The bucket this Bucket's spec and UID name, still to be confirmed in AWS.
    Named(Box<super::bucket::Address>, Owner),
}

fn bucket_state(
    access: &BucketAccess,
    bucket: Option<&Bucket>,
    settings: &super::Settings,
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
    let at = match super::bucket::address(bucket, settings, default_region, &owner) {
        Ok(at) => Box::new(at),
        Err(why) => return BucketState::Gone(Blocked::new(Reason::BucketNotOwned, why.message)),
    };
    let conditions = bucket.status.as_ref().map(|s| s.conditions.as_slice());
    if !conditions.is_some_and(condition::is_ready) {
        let reported = conditions.is_some_and(|c| c.iter().any(|c| c.type_ == condition::READY));
        if !reported && access.status.is_none() {
            return BucketState::Pending;
        }
        let msg = format!("waiting for Bucket {name} to become Ready");
        return BucketState::NotReady(msg, at, owner);
    }
    BucketState::Named(at, owner)
}

/// The grant's bucket if its tags in AWS still name the Bucket as owner; else why not (an
/// `Error::Blocked` with reason `BucketNotOwned`).
/// `within`: how old a read of the tags may serve.
async fn confirm(
    ctx: &Context,
    d: &super::bucket::Address,
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

pub async fn reconcile(access: Arc<BucketAccess>, ctx: Arc<Context>) -> Result<Requeue, Error> {
    if access.metadata.deletion_timestamp.is_some() {
        return cleanup(&access, &ctx).await;
    }
    let mut events = PassEvents::default();
    let result = pass(&access, &ctx, &mut events).await;
    // What was changed is reported even when a later step of the pass failed.
    events.publish(&ctx, access.as_ref()).await;
    match result {
        Err(Error::Blocked(why)) => waiting(&access, &ctx, &why).await,
        Err(Error::Aws(e)) => match refusal(&e, None, "") {
            Some(why) => waiting(&access, &ctx, &why).await,
            None => Err(Error::Aws(e)),
        },
        other => other,
    }
}

/// The resourceVersions of a pass's inputs: those it started from and those it wrote (see
/// `Settled`).
#[derive(Clone, Debug, Default)]
struct Versions {
    access: Vec<String>,
    bucket: Vec<String>,
    secret: Vec<String>,
}

impl Versions {
    fn current(&self) -> Vec<String> {
        [&self.access, &self.bucket, &self.secret]
            .iter()
            .map(|v| v.last().cloned().unwrap_or_default())
            .collect()
    }

    fn into_inputs(self) -> Vec<Vec<String>> {
        vec![self.access, self.bucket, self.secret]
    }
}

/// The Secret's version as a pass's input. A missing Secret has none: its absence never matches
/// a version a pass saw or wrote, so a deleted Secret always runs the full pass that restores
/// it. (Recorded as "", the absence its first pass saw before creating it would make that
/// deletion look like the echo of the pass's own write until the next resync.)
fn secret_versions(secret: Option<&Secret>) -> Vec<String> {
    secret
        .and_then(|s| s.resource_version())
        .into_iter()
        .collect()
}

/// What observing found: nothing new since the last pass, or all the plan decides from.
enum Observation {
    /// Every input is at a version the last pass saw or wrote: wait this long.
    Settled(Duration),
    Seen(Box<Observed>, Versions),
}

/// Observes, plans and applies; a `Blocked` error stops the pass and is reported by the caller.
async fn pass(
    access: &BucketAccess,
    ctx: &Context,
    events: &mut PassEvents,
) -> Result<Requeue, Error> {
    let (observed, mut versions) = match observe(access, ctx).await? {
        Observation::Settled(wait) => return Ok(Requeue::Resync(wait)),
        Observation::Seen(observed, versions) => (*observed, versions),
    };
    let plan = plan::plan(access, &ctx.settings, &observed)?;
    let learned = apply(ctx, &plan, events).await?;
    let endpoint = ctx.aws.endpoint_url.as_deref();
    let outcome = plan.outcome(access, &learned, endpoint, observed.now);
    let current = observed.secret.as_ref();
    let name = &plan.secret_name;
    let written = write_secret(access, ctx, name, current, &outcome, events).await?;
    versions.secret.extend(written);
    let current = access.status.as_ref();
    // The pass's event goes out with its status rather than after it (one round trip, not
    // two); the caller publishes what a failed pass changed.
    let (_, written) = tokio::join!(
        std::mem::take(events).publish(ctx, access),
        update_status(&ctx.client, access, current, &outcome.status),
    );
    versions.access.extend(written?);
    if access.spec.credentials.type_ != CredentialsType::AccessKey {
        return Ok(ctx.resync());
    }
    let next = next_pass(ctx, plan.wake_at, observed.now);
    let wait = match next {
        Requeue::Resync(d) | Requeue::After(d) => d,
        Requeue::OnChange => ctx.resync_after(),
    };
    ctx.settled
        .record(object_key(access), versions.into_inputs(), wait);
    Ok(next)
}

/// Reads what the plan decides from: the Bucket (cache), the Secret, the bucket's ownership
/// tags and the IAM identity. A grant whose bucket is gone or no longer owned is withdrawn here.
async fn observe(access: &BucketAccess, ctx: &Context) -> Result<Observation, Error> {
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
    if let Some(p) = &access.spec.prefix {
        policy::check_prefix(p).map_err(|msg| Blocked::new(Reason::InvalidSpec, msg))?;
    }
    let (d, bucket_owner) =
        match bucket_state(access, bucket.as_deref(), &ctx.settings, &ctx.aws.region) {
            BucketState::Gone(why) => return Err(withdraw(access, ctx, why).await),
            // Nothing is created for it yet, so it needs no finalizer either.
            BucketState::Pending => return Ok(Observation::Settled(ctx.resync_after())),
            BucketState::NotReady(msg, at, bucket_owner) => {
                // Its pass may no longer read the tags (an invalid spec stops it early): this read
                // is fresh, so a grant never follows the name to a bucket someone else made.
                let fresh = Duration::ZERO;
                return Err(
                    match confirm(ctx, &at, &bucket_owner, &bucket_ref, fresh).await {
                        Ok(_) => Blocked::new(Reason::BucketNotReady, msg).into(),
                        Err(Error::Blocked(not_owned)) => {
                            let msg = format!("{msg}; {}", not_owned.message);
                            withdraw(access, ctx, Blocked::new(Reason::BucketNotReady, msg)).await
                        }
                        Err(e) => e,
                    },
                );
            }
            BucketState::Named(d, owner) => (d, owner),
        };
    // The finalizer (in place before anything is created in AWS) and the Secret's read are
    // independent: one round trip to the API server, not two.
    let (version, secret) = tokio::try_join!(
        ensure_finalizer(&ctx.client, access),
        read_secret(access, ctx, &ns)
    )?;
    let versions = Versions {
        access: vec![start, version],
        bucket: vec![
            bucket
                .and_then(|b| b.resource_version())
                .unwrap_or_default(),
        ],
        secret: secret_versions(secret.as_ref()),
    };
    // The echo of this operator's own writes costs no AWS reads (see `Settled`); roles are
    // cheap to re-read and keep no such record.
    if access.spec.credentials.type_ == CredentialsType::AccessKey
        && let Some(wait) = ctx.settled.remaining(&key, &versions.current())
    {
        return Ok(Observation::Settled(wait));
    }
    let owner = owner(access, &ctx.settings.cluster_name);
    // The Bucket's own pass reads these tags at least once per resync period (jittered by up to
    // 10%) and wakes this access when they change hands: its last read serves.
    let within = ctx.settings.resync_period.mul_f64(1.1) + Duration::from_secs(30);
    // Both only read; the plan needs both.
    let (facts, identity) = tokio::join!(
        confirm(ctx, &d, &bucket_owner, &bucket_ref, within),
        observe_identity(ctx, access, &owner)
    );
    let facts = match facts {
        Err(Error::Blocked(why)) => return Err(withdraw(access, ctx, why).await),
        other => other?,
    };
    let observed = Observed {
        bucket: facts,
        identity: identity?,
        secret,
        now: jiff::Timestamp::now(),
    };
    Ok(Observation::Seen(Box::new(observed), versions))
}

/// The Bucket `name` as the API server has it, for when the cache has not seen it. Watch events
/// of different kinds arrive independently: under load a new BucketAccess's event can come
/// before its Bucket's, even when the Bucket was created first. Judged from the cache alone, the
/// access then reported `BucketNotFound` and, moments later, its Bucket's progress: a status flip
/// (and an event) for a Bucket that existed all along. Found here, it waits like any access on
/// a new Bucket; the Bucket's own watch event wakes it again. (A LIST by name: the operator's
/// RBAC grants list and watch on Buckets, not get.)
async fn live_bucket(ctx: &Context, ns: &str, name: &str) -> Result<Option<Bucket>, Error> {
    let api = Api::<Bucket>::namespaced(ctx.client.clone(), ns);
    let by_name = ListParams::default().fields(&format!("metadata.name={name}"));
    Ok(api.list(&by_name).await?.items.into_iter().next())
}

/// The user or role with this access's name: whether it is ours, and if so what the plan
/// compares (nothing more is read of an identity that is not ours).
async fn observe_identity(
    ctx: &Context,
    access: &BucketAccess,
    owner: &Owner,
) -> Result<Identity, crate::aws::Error> {
    let aws = &ctx.aws;
    let name = naming::iam_name(&owner.namespace, &owner.name, &owner.uid);
    let foreign = |tags| match owner.judge(tags) {
        Ownership::Ours => None,
        Ownership::Unowned | Ownership::Released { .. } => {
            Some("not tagged by the operator".to_string())
        }
        Ownership::Foreign(who) => Some(who),
    };
    Ok(match access.spec.credentials.type_ {
        CredentialsType::AccessKey => Identity::User(match aws.get_user(&name).await? {
            None => Found::Absent,
            Some(e) => match foreign(&e.tags) {
                Some(who) => Found::Foreign(who),
                None => {
                    let (policy, keys) = tokio::try_join!(
                        aws.user_policy(&name, POLICY_NAME),
                        aws.access_keys(&name)
                    )?;
                    Found::Ours(ObservedUser {
                        arn: e.arn,
                        boundary: e.boundary,
                        policy,
                        keys,
                    })
                }
            },
        }),
        CredentialsType::ServiceAccountRole => Identity::Role(match aws.get_role(&name).await? {
            None => Found::Absent,
            Some(e) => match foreign(&e.tags) {
                Some(who) => Found::Foreign(who),
                None => Found::Ours(ObservedRole {
                    policy: aws.role_policy(&name, POLICY_NAME).await?,
                    arn: e.arn,
                    boundary: e.boundary,
                    trust_policy: e.trust_policy,
                }),
            },
        }),
    })
}

/// Executes the plan's steps in order, each reported in the pass's event; returns what only
/// the writes could tell.
async fn apply(ctx: &Context, plan: &Plan, events: &mut PassEvents) -> Result<Learned, Error> {
    let mut learned = Learned {
        arn: plan.arn.clone().unwrap_or_default(),
        key: plan.key.clone(),
    };
    for step in &plan.steps {
        apply_step(ctx, plan, step, &mut learned, events).await?;
    }
    Ok(learned)
}

async fn apply_step(
    ctx: &Context,
    plan: &Plan,
    step: &Step,
    learned: &mut Learned,
    events: &mut PassEvents,
) -> Result<(), Error> {
    let (aws, name) = (&ctx.aws, plan.name.as_str());
    let what = match plan.kind {
        Kind::User => "IAM user",
        Kind::Role { .. } => "IAM role",
    };
    match step {
        Step::CreateUser | Step::CreateRole(_) => {
            learned.arn = create(ctx, plan, step, events).await?
        }
        Step::PutBoundary { drift } => {
            match plan.kind {
                Kind::User => aws.put_user_boundary(name, &plan.boundary).await?,
                Kind::Role { .. } => aws.put_role_boundary(name, &plan.boundary).await?,
            }
            let note = format!("Set permissions boundary of {what} {name}");
            drift_or_update(events, *drift, "permissionsBoundary", note);
        }
        Step::PutTrustPolicy { trust, drift } => {
            aws.update_trust_policy(name, trust).await?;
            let note = format!("Set trust policy of IAM role {name}");
            drift_or_update(events, *drift, "trustPolicy", note);
        }
        Step::PutPolicy { drift } => {
            match plan.kind {
                Kind::User => aws.put_user_policy(name, POLICY_NAME, &plan.policy).await?,
                Kind::Role { .. } => aws.put_role_policy(name, POLICY_NAME, &plan.policy).await?,
            }
            let note = format!("Set access policy of {what} {name}");
            drift_or_update(events, *drift, "policy", note);
        }
        Step::DeleteKey(id) => {
            aws.delete_access_key(name, id).await?;
            let note = format!("Deleted access key {id} of IAM user {name}");
            events.add(false, "KeyDeleted", note);
        }
        Step::ReactivateKey(id) => {
            aws.set_access_key_active(name, id, true).await?;
            let note = format!("Reactivated access key {id} of IAM user {name}");
            events.add(false, "KeyReactivated", note);
        }
        Step::CreateKey => {
            let k = aws.create_access_key(name).await?;
            let note = format!("Created access key {} for IAM user {name}", k.key.id);
            events.add(false, "KeyCreated", note);
            learned.key = Some(ActiveKey {
                secret_sha256: naming::sha256_hex(k.secret.expose().as_bytes()),
                id: k.key.id,
                created: k.key.created,
                secret: k.secret,
            });
        }
    }
    Ok(())
}

/// Creates the user or role of `step`; returns its ARN. One with this name outside the
/// operator's path is someone else's.
async fn create(
    ctx: &Context,
    plan: &Plan,
    step: &Step,
    events: &mut PassEvents,
) -> Result<String, Error> {
    let (aws, name, path) = (&ctx.aws, plan.name.as_str(), plan.path.as_str());
    let (created, what, note) = match (step, &plan.kind) {
        (Step::CreateRole(trust), Kind::Role { service_account }) => (
            aws.create_role(name, path, &plan.boundary, trust, &plan.tags)
                .await,
            "IAM role",
            format!("Created IAM role {name} for ServiceAccount {service_account}"),
        ),
        _ => (
            aws.create_user(name, path, &plan.boundary, &plan.tags)
                .await,
            "IAM user",
            format!("Created IAM user {name}"),
        ),
    };
    let entity = match created {
        Err(e) if e.is("EntityAlreadyExists") => {
            let msg = format!(
                "{what} {name} already exists outside the operator's path {path}; it will not be modified"
            );
            return Err(Blocked::new(Reason::OwnershipConflict, msg).into());
        }
        other => other?,
    };
    events.add(false, "Created", note);
    Ok(entity.arn)
}

/// Grants never outlive ownership: removes the access policy and deactivates every key of this
/// access's user (or removes its role's policy); returns why, for the Ready condition. Keys
/// stay, inactive, so the same Secret works again if the grant comes back. Reads only, once
/// nothing is left to revoke.
async fn withdraw(access: &BucketAccess, ctx: &Context, why: Blocked) -> Error {
    let revoked = match revoke(access, ctx).await {
        Ok(revoked) => revoked,
        Err(e) => {
            let Some(failed) = refusal(&e, None, "") else {
                return e.into();
            };
            let msg = format!(
                "{}; revoking its credentials failed: {}",
                why.message, failed.message
            );
            return Blocked::new(failed.reason, msg).into();
        }
    };
    if !revoked.is_empty() {
        let note = format!("{}: {}", why.message, revoked.join(", "));
        ctx.event(access, true, "AccessRevoked", note).await;
    }
    // The same message whether or not this pass revoked anything: a steady pass writes nothing.
    let msg = format!("{}; no access is granted", why.message);
    Blocked::new(why.reason, msg).into()
}

/// Revokes what this access's identity is granted; returns what it did, in words.
async fn revoke(access: &BucketAccess, ctx: &Context) -> Result<Vec<String>, crate::aws::Error> {
    let owner = owner(access, &ctx.settings.cluster_name);
    let name = naming::iam_name(&owner.namespace, &owner.name, &owner.uid);
    let aws = &ctx.aws;
    let mut revoked = Vec::new();
    match access.spec.credentials.type_ {
        CredentialsType::AccessKey => {
            let Some(user) = aws.get_user(&name).await? else {
                return Ok(revoked);
            };
            if owner.judge(&user.tags) != Ownership::Ours {
                return Ok(revoked);
            }
            if aws.user_policy(&name, POLICY_NAME).await?.is_some() {
                aws.delete_user_policy(&name, POLICY_NAME).await?;
                revoked.push(format!("removed the access policy of IAM user {name}"));
            }
            for key in aws.access_keys(&name).await?.iter().filter(|k| k.active) {
                aws.set_access_key_active(&name, &key.id, false).await?;
                revoked.push(format!("deactivated access key {}", key.id));
            }
        }
        CredentialsType::ServiceAccountRole => {
            let Some(role) = aws.get_role(&name).await? else {
                return Ok(revoked);
            };
            if owner.judge(&role.tags) == Ownership::Ours
                && aws.role_policy(&name, POLICY_NAME).await?.is_some()
            {
                aws.delete_role_policy(&name, POLICY_NAME).await?;
                revoked.push(format!("removed the access policy of IAM role {name}"));
            }
        }
    }
    Ok(revoked)
}

/// The Secret this access writes, if it exists; `Blocked` when it exists but belongs to someone
/// else (it is never overwritten).
async fn read_secret(
    access: &BucketAccess,
    ctx: &Context,
    ns: &str,
) -> Result<Option<Secret>, Error> {
    let api = Api::<Secret>::namespaced(ctx.client.clone(), ns);
    let name = secret_name(access);
    let secret = api.get_opt(&name).await?;
    let ours = |s: &Secret| {
        s.owner_references()
            .iter()
            .any(|o| Some(&o.uid) == access.meta().uid.as_ref())
    };
    if secret.as_ref().is_some_and(|s| !ours(s)) {
        let msg = format!(
            "Secret {name} exists and is not owned by this BucketAccess; it will not be overwritten"
        );
        return Err(Blocked::new(Reason::OwnershipConflict, msg).into());
    }
    Ok(secret)
}

/// The next pass: at the resync period, or sooner when a rotation or grace period is due.
fn next_pass(ctx: &Context, wake_at: Option<jiff::Timestamp>, now: jiff::Timestamp) -> Requeue {
    let Some(t) = wake_at else {
        return ctx.resync();
    };
    let until = Duration::try_from(t.duration_since(now)).unwrap_or(Duration::ZERO);
    // Wake just after the deadline; never spin on a deadline already passed.
    let wait = (until + Duration::from_millis(200)).max(Duration::from_millis(500));
    if wait < ctx.settings.resync_period {
        Requeue::After(wait)
    } else {
        ctx.resync()
    }
}

/// Was the current spec already served? Then a change found now was made by someone else.
fn is_served(access: &BucketAccess) -> bool {
    access.status.as_ref().is_some_and(|s| {
        served(
            access.metadata.generation,
            s.observed_generation,
            &s.conditions,
        )
    })
}

fn drift_or_update(events: &mut PassEvents, drift: bool, aspect: &str, note: String) {
    if drift {
        METRICS
            .drift_corrections_total
            .with_label_values(&["BucketAccess", aspect])
            .inc();
        events.add(
            true,
            "DriftCorrected",
            format!("{note} (changed outside the operator)"),
        );
    } else {
        events.add(false, "Updated", note);
    }
}

/// The Secret that hands out `outcome`, labelled as the operator's and owned by `access`.
fn desired_secret(access: &BucketAccess, name: &str, outcome: &plan::Outcome) -> Secret {
    let labels = BTreeMap::from([
        (MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string()),
        (ACCESS_LABEL.to_string(), access.name_any()),
    ]);
    let data: BTreeMap<String, ByteString> = outcome
        .data
        .iter()
        .map(|(k, v)| (k.clone(), ByteString(v.clone().into_bytes())))
        .collect();
    let owner_ref = access
        .controller_owner_ref(&())
        .expect("BucketAccess has a name and uid");
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: access.namespace(),
            labels: Some(labels),
            annotations: Some(outcome.annotations.clone()),
            owner_references: Some(vec![owner_ref]),
            ..Default::default()
        },
        data: Some(data),
        type_: Some("Opaque".into()),
        ..Default::default()
    }
}

/// Does `current` already say all `want` says (its data, and at least its labels, annotations
/// and owner)?
fn secret_in_shape(current: &Secret, want: &Secret) -> bool {
    let has = |want: &Option<BTreeMap<String, String>>, have: &Option<BTreeMap<String, String>>| {
        want.iter()
            .flatten()
            .all(|(k, v)| have.as_ref().and_then(|h| h.get(k)) == Some(v))
    };
    let owner_ref = want.owner_references().first();
    current.data == want.data
        && has(&want.metadata.labels, &current.metadata.labels)
        && has(&want.metadata.annotations, &current.metadata.annotations)
        && owner_ref.is_some_and(|o| current.owner_references().contains(o))
        && current.type_ == want.type_
}

/// Writes the Secret if its data, labels, annotations or owner differ from what it should be.
async fn write_secret(
    access: &BucketAccess,
    ctx: &Context,
    name: &str,
    current: Option<&Secret>,
    outcome: &plan::Outcome,
    events: &mut PassEvents,
) -> Result<Option<String>, Error> {
    let secret = desired_secret(access, name, outcome);
    if current.is_some_and(|cur| secret_in_shape(cur, &secret)) {
        return Ok(None);
    }
    let ns = access.namespace().ok_or(Error::NoNamespace)?;
    let api = Api::<Secret>::namespaced(ctx.client.clone(), &ns);
    METRICS
        .kube_writes_total
        .with_label_values(&["Secret", "apply"])
        .inc();
    let written = api
        .patch(
            name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&secret),
        )
        .await?;
    if is_served(access) {
        match current {
            None => drift_or_update(events, true, "secret", format!("Recreated Secret {name}")),
            Some(_) => events.add(false, "SecretUpdated", format!("Updated Secret {name}")),
        }
    }
    Ok(written.resource_version())
}

/// Reports why the access is not Ready and waits for a change (or the periodic resync).
async fn waiting(access: &BucketAccess, ctx: &Context, why: &Blocked) -> Result<Requeue, Error> {
    let status = blocked_status(access, why, jiff::Timestamp::now());
    report_blocked(ctx, access, access.status.as_ref(), &status, why).await
}

/// The status that reports `why`, keeping what the last pass reported otherwise.
fn blocked_status(
    access: &BucketAccess,
    why: &Blocked,
    now: jiff::Timestamp,
) -> BucketAccessStatus {
    let previous = access.status.clone().unwrap_or_default();
    BucketAccessStatus {
        conditions: vec![condition::ready(
            &previous.conditions,
            false,
            why.reason,
            why.message.clone(),
            access.metadata.generation,
            now,
        )],
        observed_generation: access.metadata.generation,
        ..previous
    }
}

/// Deletes what this BucketAccess created in IAM: keys, inline policies, then the user or role.
/// The Secret goes with the object through its owner reference. Fails closed: only "does not
/// exist" counts as gone; any refusal keeps the finalizer and names the refused operation.
async fn cleanup(access: &BucketAccess, ctx: &Context) -> Result<Requeue, Error> {
    if !has_finalizer(access) {
        return Ok(Requeue::OnChange);
    }
    if let Err(e) = delete_identity(access, ctx).await {
        let Some(refused) = refusal(&e, None, "") else {
            return Err(e.into());
        };
        let msg = format!("deleting the BucketAccess is waiting: {}", refused.message);
        waiting(
            access,
            ctx,
            &Blocked::new(Reason::DeletionBlocked, msg.clone()),
        )
        .await?;
        return Err(Error::DeletionBlocked(msg));
    }
    remove_finalizer(&ctx.client, access).await?;
    Ok(Requeue::OnChange)
}

async fn delete_identity(access: &BucketAccess, ctx: &Context) -> Result<(), crate::aws::Error> {
    let aws = &ctx.aws;
    let owner = owner(access, &ctx.settings.cluster_name);
    let name = naming::iam_name(&owner.namespace, &owner.name, &owner.uid);
    match access.spec.credentials.type_ {
        CredentialsType::AccessKey => {
            if let Some(user) = aws.get_user(&name).await?
                && owner.judge(&user.tags) == Ownership::Ours
            {
                for key in aws.access_keys(&name).await? {
                    aws.delete_access_key(&name, &key.id).await?;
                }
                for p in aws.user_policy_names(&name).await? {
                    aws.delete_user_policy(&name, &p).await?;
                }
                aws.delete_user(&name).await?;
                ctx.event(
                    access,
                    false,
                    "Deleted",
                    format!("Deleted IAM user {name} and its keys"),
                )
                .await;
            }
        }
        CredentialsType::ServiceAccountRole => {
            if let Some(role) = aws.get_role(&name).await?
                && owner.judge(&role.tags) == Ownership::Ours
            {
                for p in aws.role_policy_names(&name).await? {
                    aws.delete_role_policy(&name, &p).await?;
                }
                aws.delete_role(&name).await?;
                ctx.event(access, false, "Deleted", format!("Deleted IAM role {name}"))
                    .await;
            }
        }
    }
    Ok(())
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
        let settings = super::super::Settings::for_tests();
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
        // An access that has reported before says why it waits, even for a silent Bucket.
        bucket.status = None;
        access.status = Some(Default::default());
        assert!(matches!(state(&access, &bucket), BucketState::NotReady(..)));
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
    /// its echo: the full pass runs and restores it at once, not at the next resync.
    #[test]
    fn a_secret_deleted_or_edited_after_a_pass_runs_the_full_pass() {
        let settled = super::super::Settled::default();
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
            secret: secret_versions(None),
        };
        first.secret.push(v("7"));
        settled.record("k".into(), first.into_inputs(), Duration::from_secs(600));
        let now = |s: Option<&Secret>| {
            Versions {
                access: vec![v("3")],
                bucket: vec![v("5")],
                secret: secret_versions(s),
            }
            .current()
        };
        assert!(
            settled.remaining("k", &now(Some(&secret("7")))).is_some(),
            "the echo of its own write"
        );
        assert_eq!(settled.remaining("k", &now(None)), None, "deleted since");
        assert_eq!(
            settled.remaining("k", &now(Some(&secret("9")))),
            None,
            "edited since"
        );
    }

    /// An edit that makes the Bucket's spec invalid neither moves the grant's bucket nor lets the
    /// access skip confirming it: the not-Ready state still names the bucket to confirm in AWS.
    #[test]
    fn an_invalid_bucket_spec_still_names_the_bucket_to_confirm() {
        let settings = super::super::Settings::for_tests();
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
        assert!(super::super::bucket::desired(&bucket, &settings, "r", &owner).is_err());
        bucket.status.as_mut().unwrap().conditions = ready(false);
        match bucket_state(&access, Some(&bucket), &settings, "r") {
            BucketState::NotReady(_, at, _) => assert_eq!(at, before),
            other => panic!("{other:?}"),
        }
    }
}
