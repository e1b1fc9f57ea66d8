//! BucketAccess: an IAM user (with access keys) or role scoped to its Buckets, or an EKS Pod
//! Identity association ([`pod_identity`]), and the Secret that hands its credentials (or only
//! the bucket's facts) to the application.
//!
//! Each pass observes (`observe`: the Bucket cache, the Secret, the bucket's tags, the IAM
//! identity and the association, reading only), plans with a pure function ([`plan::plan`],
//! keys in [`keys`]; a grant that may not stand, [`plan::withdrawal`]) and applies only the
//! difference.

mod in_sync;
#[cfg(test)]
mod io_tests;
pub mod keys;
mod observe;
mod outcome;
pub mod outputs;
pub mod plan;
pub mod pod_identity;

use crate::reconcile::{InAccount, paused, slot};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::try_join_all;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};

use super::{
    Blocked, Context, Error, MANAGER, PassEvents, Requeue, accounts, ensure_finalizer,
    has_finalizer, object_key, owner, refusal, remove_finalizer, report_blocked, served,
    update_status,
};
use crate::api::condition::{self, IN_SYNC, Reason};
use crate::api::{BucketAccess, BucketAccessStatus, CredentialsType, Management};
use crate::aws::budget::Key;
use crate::aws::iam::Identity;
use crate::aws::naming;
use crate::aws::tags::{Owner, Ownership};
use crate::reconcile::bucket::in_sync as bucket_in_sync;
use crate::reconcile::class::access as class;
use observe::{Observation, observe};
use plan::{ActiveKey, Change, Found, Kind, Learned, Plan, Revoke, Withdrawal};

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

pub async fn reconcile(access: Arc<BucketAccess>, ctx: Arc<Context>) -> Result<Requeue, Error> {
    if paused::is_paused(access.as_ref()) && bucket_stands(&access, &ctx) {
        let previous = access.status.as_ref().map(|s| s.conditions.as_slice());
        return paused::report(&ctx, access.as_ref(), previous.unwrap_or_default()).await;
    }
    let recorded = access.status.as_ref().and_then(|s| s.account.as_ref());
    if access.metadata.deletion_timestamp.is_some() {
        // Deletion acts where the identity lives, whatever its Bucket or class say now.
        return match ctx.accounts.recorded(recorded).await {
            Ok(account) => cleanup(&access, &InAccount::new(&ctx, account)).await,
            Err(why) => unavailable(&access, &ctx, &why).await,
        };
    }
    if observe::awaits_bucket(&access, &ctx) {
        return Ok(Requeue::Resync(ctx.resync_after()));
    }
    let class = class::in_force(&ctx.classes, &access)?;
    let placed = placement(&access, &ctx, &class);
    let cx = match ctx.accounts.placed(&placed, recorded).await {
        Ok(account) => InAccount::new(&ctx, account),
        Err(why) => return unavailable(&access, &ctx, &why).await,
    };
    let refused = placed.violation.or_else(|| {
        if workload_identity_here(&access, &cx) {
            return None;
        }
        let (name, kind) = (cx.account.name.as_deref(), access.spec.credentials.type_);
        let msg = format!(
            "{kind:?} credentials are not available in AWSAccount {}: the operator knows the OIDC provider and EKS cluster of its own account only; use AccessKey",
            name.unwrap_or_default()
        );
        Some(Blocked::new(Reason::InvalidSpec, msg))
    });
    // A new access's account is recorded before anything is made for it, and the pass goes on
    // from the object that write returned (a second pass would wait out its echo's spacing).
    let (access, earlier) = match &refused {
        None if placed.to_record => {
            let earlier = access.resource_version();
            (Arc::new(record_account(&access, &cx).await?), earlier)
        }
        _ => (access, None),
    };
    let mut events = PassEvents::default();
    let result = match refused {
        Some(why) => Err(Error::Blocked(why)),
        None => pass(&access, &cx, &class, &mut events, earlier).await,
    };
    // What was changed is reported even when a later step of the pass failed.
    events.publish(&ctx, access.as_ref()).await;
    let class = class::name(&class);
    match result {
        Err(Error::Blocked(why)) => blocked(&access, &cx, &why, class).await,
        Err(Error::Aws(e)) => match refusal(&e, None, "") {
            Some(why) => blocked(&access, &cx, &why, class).await,
            None => Err(Error::Aws(e)),
        },
        other => other,
    }
}

/// Is the access's Bucket there, not being deleted, and Ready? Only then may a pause hold the
/// access's pass: a pause never keeps a grant alive past its Bucket.
fn bucket_stands(access: &BucketAccess, ctx: &Context) -> bool {
    let ns = access.namespace().unwrap_or_default();
    ctx.bucket(&ns, &access.spec.bucket_ref.name)
        .is_some_and(|b| {
            b.metadata.deletion_timestamp.is_none()
                && b.status
                    .as_ref()
                    .is_some_and(|s| condition::is_ready(&s.conditions))
        })
}

/// Where `access` acts: the account recorded for it; one made before accounts existed, the
/// operator's own; a new one, its Bucket's (as the cache has it). Its identity never moves: a
/// Bucket that now lives elsewhere is not its Bucket's bucket any more, and a class that names
/// another account is a violation.
fn placement(access: &BucketAccess, ctx: &Context, class: &class::InForce) -> accounts::Placement {
    let recorded = access.status.as_ref().and_then(|s| s.account.as_ref());
    let ns = access.namespace().unwrap_or_default();
    let bucket = ctx.bucket(&ns, &access.spec.bucket_ref.name);
    let bucket_account = bucket
        .as_ref()
        .map(|b| b.status.as_ref().and_then(|s| s.account.clone()));
    let class_account = class.as_ref().ok().and_then(Option::as_ref);
    let class_account = class_account.and_then(|c| c.spec.account.as_deref());
    accounts::access_placement(
        recorded,
        has_finalizer(access),
        bucket_account.as_ref().map(Option::as_ref),
        class_account,
    )
}

/// The budget a pass of `access` spends: its namespace's in the account the pass acts in, as
/// [`reconcile`] decides it, from what the caches hold (no call): the recorded account, the
/// operator's own for one made before accounts existed, or for a new access its Bucket's.
pub fn budget_key(access: &BucketAccess, ctx: &Context) -> Key {
    let ns = access.namespace().unwrap_or_default();
    let recorded = access.status.as_ref().and_then(|s| s.account.as_ref());
    if access.metadata.deletion_timestamp.is_some() {
        return Key::new(recorded.map(|r| r.name.as_str()), &ns);
    }
    // The class bounds the account but never picks it: one that cannot be read changes nothing.
    let class = class::in_force(&ctx.classes, access).unwrap_or(Ok(None));
    Key::new(placement(access, ctx, &class).account.as_deref(), &ns)
}

/// Workload identity (IRSA, Pod Identity) trusts the cluster's OIDC provider or EKS cluster,
/// which the operator knows in its own account only.
fn workload_identity_here(access: &BucketAccess, ctx: &InAccount<'_>) -> bool {
    ctx.account.name.is_none() || access.spec.credentials.type_ == CredentialsType::AccessKey
}

/// Records the account of a new access's identity (its Bucket's) in status before anything is
/// created for it; returns the access as written.
async fn record_account(access: &BucketAccess, ctx: &InAccount<'_>) -> Result<BucketAccess, Error> {
    let ns = access.namespace().ok_or(Error::NoNamespace)?;
    let api = Api::<BucketAccess>::namespaced(ctx.client.clone(), &ns);
    let patch = serde_json::json!({
        "metadata": {"resourceVersion": access.resource_version()},
        "status": {"account": ctx.account.record()},
    });
    let (name, params, patch) = (
        access.name_any(),
        PatchParams::default(),
        Patch::Merge(patch),
    );
    let write = api.patch_status(&name, &params, &patch);
    Ok(ctx
        .metrics
        .kube_write("BucketAccess", "patch_status", write)
        .await?)
}

/// Reports that the access's account cannot be used: nothing is written to AWS.
async fn unavailable(
    access: &BucketAccess,
    ctx: &Context,
    why: &accounts::Unavailable,
) -> Result<Requeue, Error> {
    let why = Blocked::new(Reason::AccountUnavailable, why.0.clone());
    let class = access.status.as_ref().and_then(|s| s.class_name.clone());
    blocked(access, &InAccount::home(ctx), &why, class).await
}

/// Observes, plans and applies; a `Blocked` error stops the pass and is reported by the caller.
/// The class is checked once the grant is confirmed and before the plan: a violation writes
/// nothing to AWS (what is in place stays, keys do not rotate), while a grant whose bucket
/// changed hands is still withdrawn whatever the class says.
/// `earlier`: the access's version before this invocation recorded its account, if it did (a
/// cache still at it is behind this pass's own write).
async fn pass(
    access: &BucketAccess,
    ctx: &InAccount<'_>,
    class: &class::InForce,
    events: &mut PassEvents,
    earlier: Option<String>,
) -> Result<Requeue, Error> {
    let (observed, mut versions) = match observe(access, ctx, class::version(class)).await? {
        Observation::Settled(wait) => return Ok(Requeue::Resync(wait)),
        Observation::Withdraw(why, found, association) => {
            let owner = owner(access, &ctx.settings.cluster_name);
            let identity = identity_of(access, &owner, &found);
            let withdrawal = plan::withdrawal(identity, &found, &association, why);
            return Err(withdraw(access, ctx, &withdrawal).await);
        }
        Observation::Seen(observed, mut versions) => {
            versions.access.splice(0..0, earlier);
            (*observed, versions)
        }
    };
    let access = &*class::admit(access, class, ctx.settings.min_rotation_interval)?;
    let plan = plan::plan(access, &ctx.settings, &observed)?;
    if access.spec.management == Some(Management::Observe) {
        return report_observed(access, ctx, class, (&plan, &observed), versions).await;
    }
    let learned = apply(access, ctx, (&plan, &observed), events).await?;
    versions.access.extend(learned.version.clone());
    let endpoint = ctx.aws.endpoint_url.as_deref();
    let mut outcome = plan.outcome(access, &learned, endpoint, observed.now);
    outcome.status.class_name = class::name(class);
    // Recorded once, before the identity was made (`record_account`).
    outcome.status.account = access.status.as_ref().and_then(|s| s.account.clone());
    // AWS is done (bar deleting a key no Secret took): what is left reports it.
    slot::release();
    let current = observed.secret.as_ref();
    let name = &plan.secret_name;
    let written = match write_secret(access, ctx, name, current, &outcome, events).await {
        Ok(written) => written,
        Err(e) => return Err(unhanded_key(ctx, &plan, &learned, events, e).await),
    };
    versions.secret.extend(written);
    if let Some(name) = &plan.config_map {
        let (facts, current) = (&plan.bucket, observed.config_map.as_ref());
        let data = outputs::bucket_facts(facts, endpoint);
        let written = write_config_map(access, ctx, name, current, data, events).await?;
        versions.config_map.extend(written);
    }
    let current = access.status.as_ref();
    // The pass's event goes out with its status rather than after it (one round trip, not
    // two); the caller publishes what a failed pass changed.
    let (_, written) = tokio::join!(
        std::mem::take(events).publish(ctx, access),
        update_status(ctx, access, current, &outcome.status),
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

/// The user or role that `access` is granted through (`owner`: the access's): named with the
/// long UID hash ([`naming::iam_name`]), or with the short one of an identity made before it,
/// once a pass has recorded that name in status. Status only chooses between the two names of
/// this object's own namespace, name and UID, and the identity's tags are confirmed either way,
/// so a forged status reaches no one else's identity; it costs no read in a steady pass.
pub fn iam_identity(access: &BucketAccess, owner: &Owner) -> Identity {
    let legacy = naming::legacy_iam_name(&owner.namespace, &owner.name, &owner.uid);
    let status = access.status.as_ref();
    let recorded = status.and_then(|s| s.user_arn.as_deref().or(s.role_arn.as_deref()));
    if recorded.and_then(|arn| arn.rsplit('/').next()) == Some(legacy.as_str()) {
        return identity_named(access, legacy);
    }
    identity_named(
        access,
        naming::iam_name(&owner.namespace, &owner.name, &owner.uid),
    )
}

/// The identity a pass works on, from what it found: the one it found ours (perhaps under its
/// legacy name), the one [`iam_identity`] names if that is someone else's, and a new identity
/// under the long-hash name when there is none.
pub fn identity_of(
    access: &BucketAccess,
    owner: &Owner,
    found: &Found<plan::IdentityState>,
) -> Identity {
    let name = match found {
        Found::Ours(state) => state.arn.rsplit('/').next().unwrap_or_default().to_string(),
        Found::Foreign(_) => return iam_identity(access, owner),
        Found::Absent => naming::iam_name(&owner.namespace, &owner.name, &owner.uid),
    };
    identity_named(access, name)
}

/// Both names this access's identity may have: the one [`iam_identity`] chooses first.
pub fn identity_candidates(access: &BucketAccess, owner: &Owner) -> [Identity; 2] {
    let (ns, name, uid) = (&owner.namespace, &owner.name, &owner.uid);
    let chosen = iam_identity(access, owner);
    let other = if chosen.name() == naming::legacy_iam_name(ns, name, uid) {
        naming::iam_name(ns, name, uid)
    } else {
        naming::legacy_iam_name(ns, name, uid)
    };
    [chosen, identity_named(access, other)]
}

fn identity_named(access: &BucketAccess, name: String) -> Identity {
    match access.spec.credentials.type_ {
        CredentialsType::AccessKey => Identity::User(name),
        CredentialsType::ServiceAccountRole | CredentialsType::PodIdentity => Identity::Role(name),
    }
}

/// Executes the plan's changes in order, each reported in the pass's event; returns what only
/// the writes could tell.
async fn apply(
    access: &BucketAccess,
    ctx: &InAccount<'_>,
    (plan, observed): (&Plan, &plan::Snapshot),
    events: &mut PassEvents,
) -> Result<Learned, Error> {
    let mut learned = plan.known();
    for (done, step) in plan.changes.iter().enumerate() {
        if let Err(e) = apply_change(access, ctx, plan, step, &mut learned, events).await {
            return Err(left_undone(plan, observed, done, e));
        }
    }
    Ok(learned)
}

/// A write AWS refused (`e`, at step `done` of the plan) blocks the pass with what it had left
/// to write, for status to list; any other error is retried as it is.
fn left_undone(plan: &Plan, observed: &plan::Snapshot, done: usize, e: Error) -> Error {
    let Some(why) = (match &e {
        Error::Aws(aws) => refusal(aws, None, ""),
        _ => None,
    }) else {
        return e;
    };
    let rest = Plan {
        changes: plan.changes[done..].to_vec(),
        ..plan.clone()
    };
    let shape = in_sync::SecretView::InShape;
    let pending = in_sync::differences(&rest, observed, shape, shape);
    Error::Blocked(why.with_pending(plan.identity().to_string(), pending))
}

async fn apply_change(
    access: &BucketAccess,
    ctx: &InAccount<'_>,
    plan: &Plan,
    step: &Change,
    learned: &mut Learned,
    events: &mut PassEvents,
) -> Result<(), Error> {
    let (aws, name, identity) = (&ctx.aws, plan.name.as_str(), plan.identity());
    match step {
        Change::AddFinalizer => learned.version = Some(ensure_finalizer(ctx, access).await?),
        Change::CreateUser | Change::CreateRole(_) => {
            learned.arn = create(ctx, plan, step, events).await?
        }
        Change::PutBoundary { drift } => {
            aws.put_boundary(&identity, &plan.boundary).await?;
            let note = format!("Set permissions boundary of {identity}");
            drift_or_update(events, *drift, "permissionsBoundary", note);
        }
        Change::PutTrustPolicy { trust, drift } => {
            aws.update_trust_policy(name, trust).await?;
            let note = format!("Set trust policy of IAM role {name}");
            drift_or_update(events, *drift, "trustPolicy", note);
        }
        Change::PutPolicy { drift } => {
            aws.put_inline_policy(&identity, POLICY_NAME, &plan.policy)
                .await?;
            let note = format!("Set access policy of {identity}");
            drift_or_update(events, *drift, "policy", note);
        }
        Change::DeleteKey(id) => {
            aws.delete_access_key(name, id).await?;
            let note = format!("Deleted access key {id} of IAM user {name}");
            events.add(false, "KeyDeleted", note);
        }
        Change::ReactivateKey(id) => {
            aws.set_access_key_active(name, id, true).await?;
            let note = format!("Reactivated access key {id} of IAM user {name}");
            events.add(false, "KeyReactivated", note);
        }
        Change::CreateKey => learned.key = Some(create_key(ctx, name, events).await?),
        Change::CreateAssociation { .. } | Change::UpdateAssociation { .. } => {
            associate(ctx, plan, step, learned, events).await?
        }
    }
    Ok(())
}

/// Creates the ServiceAccount's association, or puts its role and session policy back.
async fn associate(
    ctx: &InAccount<'_>,
    plan: &Plan,
    step: &Change,
    learned: &mut Learned,
    events: &mut PassEvents,
) -> Result<(), Error> {
    let Some(target) = &plan.association else {
        return Ok(());
    };
    let role = plan
        .association_role(Some(&learned.arn))
        .unwrap_or_default();
    let want = crate::aws::eks::Desired {
        role_arn: &role,
        policy: plan.session_policy(),
    };
    let (aws, cluster, sa) = (&ctx.aws, &target.cluster, &target.service_account);
    match (step, &learned.association) {
        (Change::UpdateAssociation { drift }, Some(id)) => {
            aws.update_association(cluster, id, &want).await?;
            let note = format!("Set role and session policy of EKS Pod Identity association {id}");
            drift_or_update(events, *drift, "podIdentityAssociation", note);
        }
        (step, _) => {
            let (ns, tags) = (&target.namespace, &plan.tags);
            let id = match aws.create_association(cluster, ns, sa, &want, tags).await {
                // Made by someone since this pass read: the next pass judges whose it is.
                Err(e) if e.is("ResourceInUseException") => {
                    let msg = format!(
                        "ServiceAccount {sa} got another EKS Pod Identity association meanwhile; it will not be modified"
                    );
                    return Err(Blocked::new(Reason::OwnershipConflict, msg).into());
                }
                other => other?,
            };
            let note = format!("EKS Pod Identity association {id} for ServiceAccount {sa}");
            match step {
                Change::CreateAssociation { drift: true } => drift_or_update(
                    events,
                    true,
                    "podIdentityAssociation",
                    format!("Recreated {note}"),
                ),
                _ => events.add(false, "Created", format!("Created {note}")),
            }
            learned.association = Some(id);
        }
    }
    Ok(())
}

/// Creates an access key for the user `name`; its secret is known only from this answer.
async fn create_key(
    ctx: &InAccount<'_>,
    name: &str,
    events: &mut PassEvents,
) -> Result<ActiveKey, Error> {
    let k = ctx.aws.create_access_key(name).await?;
    let note = format!("Created access key {} for IAM user {name}", k.key.id);
    events.add(false, "KeyCreated", note);
    Ok(ActiveKey {
        secret_sha256: naming::sha256_hex(k.secret.expose().as_bytes()),
        id: k.key.id,
        created: k.key.created,
        secret: k.secret,
    })
}

/// Reports an observed access (nothing written to AWS, no Secret written): Ready while its
/// identity exists, `InSync` and `status.plan` saying what a Manage pass would change, and an
/// event when that list changes.
async fn report_observed(
    access: &BucketAccess,
    ctx: &InAccount<'_>,
    class: &class::InForce,
    (plan, observed): (&Plan, &plan::Snapshot),
    mut versions: observe::Versions,
) -> Result<Requeue, Error> {
    let endpoint = ctx.aws.endpoint_url.as_deref();
    let secret = secret_view(access, plan, observed, endpoint);
    let config_map = config_map_view(access, plan, observed, endpoint);
    let all = in_sync::differences(plan, observed, secret, config_map);
    let (subject, exists) = match &plan.kind {
        Kind::Shared { service_account } => (
            format!("The EKS Pod Identity association of ServiceAccount {service_account}"),
            matches!(observed.association, Found::Ours(_)),
        ),
        _ => (
            plan.identity().to_string(),
            matches!(observed.identity, Found::Ours(_)),
        ),
    };
    let msg = if exists {
        format!(
            "{subject} is observed: the operator reads it and writes nothing (spec.management Observe)"
        )
    } else {
        format!("{subject} does not exist: in Observe the operator does not create it")
    };
    let previous = access.status.clone().unwrap_or_default();
    let (generation, now) = (access.metadata.generation, observed.now);
    let ready = condition::ready(
        &previous.conditions,
        exists,
        Reason::Observed,
        msg,
        generation,
        now,
    );
    let said = condition::Said {
        status: all.is_empty(),
        reason: if all.is_empty() { "InSync" } else { "Differs" },
        message: bucket_in_sync::message(&subject, &all),
    };
    let in_sync = condition::of_type(&previous.conditions, IN_SYNC, said, generation, now);
    let note = in_sync.message.clone();
    let status = BucketAccessStatus {
        conditions: vec![ready, in_sync],
        observed_generation: generation,
        class_name: class::name(class),
        plan: all.iter().take(bucket_in_sync::LISTED).cloned().collect(),
        ..previous.clone()
    };
    if status.plan != previous.plan && !all.is_empty() {
        ctx.event(access, true, "OutOfSync", note).await;
    }
    let written = update_status(ctx, access, access.status.as_ref(), &status).await?;
    versions.access.extend(written);
    let next = next_pass(ctx, plan.wake_at, now);
    let wait = match next {
        Requeue::Resync(d) | Requeue::After(d) => d,
        Requeue::OnChange => ctx.resync_after(),
    };
    ctx.settled
        .record(object_key(access), versions.into_inputs(), wait);
    Ok(next)
}

/// How the access's Secret compares with what a Manage pass would write. A pass that creates
/// an identity or a key rewrites it whatever it holds.
fn secret_view(
    access: &BucketAccess,
    plan: &Plan,
    observed: &plan::Snapshot,
    endpoint: Option<&str>,
) -> in_sync::SecretView {
    let Some(current) = observed.secret.as_ref() else {
        return in_sync::SecretView::Absent;
    };
    let creates = (plan.changes.iter()).any(|c| {
        matches!(
            c,
            Change::CreateUser | Change::CreateRole(_) | Change::CreateKey
        )
    });
    if creates {
        return in_sync::SecretView::Differs;
    }
    let outcome = plan.outcome(access, &plan.known(), endpoint, observed.now);
    if secret_in_shape(
        current,
        &desired_secret(access, &plan.secret_name, &outcome),
    ) {
        in_sync::SecretView::InShape
    } else {
        in_sync::SecretView::Differs
    }
}

/// How the access's ConfigMap of bucket facts compares with what a Manage pass would write
/// (`InShape` when it asks for none).
fn config_map_view(
    access: &BucketAccess,
    plan: &Plan,
    observed: &plan::Snapshot,
    endpoint: Option<&str>,
) -> in_sync::SecretView {
    let Some(name) = &plan.config_map else {
        return in_sync::SecretView::InShape;
    };
    let Some(current) = &observed.config_map else {
        return in_sync::SecretView::Absent;
    };
    let want = outputs::bucket_facts(&plan.bucket, endpoint);
    if outputs::in_shape(current, &outputs::desired_config_map(access, name, want)) {
        in_sync::SecretView::InShape
    } else {
        in_sync::SecretView::Differs
    }
}

/// Creates the user or role of `step`; returns its ARN. One with this name outside the
/// operator's path is someone else's.
async fn create(
    ctx: &InAccount<'_>,
    plan: &Plan,
    step: &Change,
    events: &mut PassEvents,
) -> Result<String, Error> {
    let (aws, name, path) = (&ctx.aws, plan.name.as_str(), plan.path.as_str());
    let identity = plan.identity();
    let (created, note) = match (step, &plan.kind) {
        (Change::CreateRole(trust), Kind::Role { service_account }) => (
            aws.create_role(name, path, &plan.boundary, trust, &plan.tags)
                .await,
            format!("Created {identity} for ServiceAccount {service_account}"),
        ),
        _ => (
            aws.create_user(name, path, &plan.boundary, &plan.tags)
                .await,
            format!("Created {identity}"),
        ),
    };
    let arn = match created {
        Ok(entity) => entity.arn,
        // The SDK resends a create whose answer was lost (a dropped connection, an attempt
        // timeout): one that already landed is this pass's own, by its tags.
        Err(e) if e.is("EntityAlreadyExists") => match ctx.aws.get_identity(&identity).await? {
            Some(found) if plan.tags.iter().all(|(k, v)| found.tags.get(k) == Some(v)) => found.arn,
            _ => {
                let msg = format!(
                    "{identity} already exists outside the operator's path {path}; it will not be modified"
                );
                return Err(Blocked::new(Reason::OwnershipConflict, msg).into());
            }
        },
        Err(e) => return Err(e.into()),
    };
    events.add(false, "Created", note);
    Ok(arn)
}

/// Writes a withdrawal's changes; returns what the access reports, for the Ready condition.
async fn withdraw(access: &BucketAccess, ctx: &InAccount<'_>, withdrawal: &Withdrawal) -> Error {
    let (aws, identity) = (&ctx.aws, &withdrawal.identity);
    for step in &withdrawal.changes {
        let written = match step {
            Revoke::DeletePolicy => aws.delete_inline_policy(identity, POLICY_NAME).await,
            Revoke::DeactivateKey(id) => {
                aws.set_access_key_active(identity.name(), id, false).await
            }
            Revoke::DeleteAssociation(id) => {
                let cluster = ctx.settings.eks_cluster_name.as_deref();
                aws.delete_association(cluster.unwrap_or_default(), id)
                    .await
            }
        };
        if let Err(e) = written {
            return revoking_failed(&withdrawal.why, e);
        }
    }
    if let Some(note) = withdrawal.note() {
        ctx.event(access, true, "AccessRevoked", note).await;
    }
    withdrawal.reported().into()
}

/// A refused read or write of a withdrawal is reported with why the grant goes (`why`);
/// anything else is an error the pass retries.
fn revoking_failed(why: &Blocked, e: crate::aws::Error) -> Error {
    let Some(failed) = refusal(&e, None, "") else {
        return e.into();
    };
    let msg = format!(
        "{}; revoking its credentials failed: {}",
        why.message, failed.message
    );
    Blocked::new(failed.reason, msg).into()
}

/// The API server refused the Secret write (`e`): no Secret names the key this pass created,
/// so it goes now rather than stay usable, unhanded, while the pass is refused (a Secret someone
/// else created in between refuses every later pass). A write whose answer was lost may have
/// landed: its key stays, for the next pass's plan to keep or delete.
async fn unhanded_key(
    ctx: &InAccount<'_>,
    plan: &Plan,
    learned: &Learned,
    events: &mut PassEvents,
    e: Error,
) -> Error {
    let refused = matches!(e, Error::Kube(kube::Error::Api(_)));
    let created = plan.changes.contains(&Change::CreateKey);
    let (Some(key), true, true) = (learned.key.as_ref(), refused, created) else {
        return e;
    };
    let name = &plan.name;
    match ctx.aws.delete_access_key(name, &key.id).await {
        Ok(()) => {
            let note = format!("Deleted access key {} of IAM user {name}", key.id);
            events.add(false, "KeyDeleted", note);
        }
        Err(failed) => tracing::warn!(error = %failed, "could not delete an unhanded access key"),
    }
    e
}

/// The next pass: at the resync period, or sooner when a rotation or grace period is due.
fn next_pass(
    ctx: &InAccount<'_>,
    wake_at: Option<jiff::Timestamp>,
    now: jiff::Timestamp,
) -> Requeue {
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
        events.corrected(aspect);
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
    let data: BTreeMap<String, ByteString> = outcome
        .data
        .iter()
        .map(|(k, v)| (k.clone(), ByteString(v.clone().into_bytes())))
        .collect();
    Secret {
        metadata: ObjectMeta {
            annotations: Some(outcome.annotations.clone()),
            ..outputs::metadata(access, name)
        },
        data: Some(data),
        type_: Some("Opaque".into()),
        ..Default::default()
    }
}

/// Does `current` already say all `want` says (each of its keys, and at least its labels,
/// annotations and owner), and hold no key the operator applied that `want` leaves out? A key
/// someone else added is theirs ([`outputs::holds`]).
fn secret_in_shape(current: &Secret, want: &Secret) -> bool {
    let owner_ref = want.owner_references().first();
    let wanted = |k: &String| want.data.as_ref().is_some_and(|d| d.contains_key(k));
    outputs::holds(want.data.as_ref(), current.data.as_ref())
        && outputs::applied_keys(current).iter().all(wanted)
        && outputs::holds(Some(want.labels()), Some(current.labels()))
        && outputs::holds(Some(want.annotations()), Some(current.annotations()))
        && owner_ref.is_some_and(|o| current.owner_references().contains(o))
        && current.type_ == want.type_
}

/// Writes the Secret if its data, labels, annotations or owner differ from what it should be.
async fn write_secret(
    access: &BucketAccess,
    ctx: &InAccount<'_>,
    name: &str,
    current: Option<&Secret>,
    outcome: &plan::Outcome,
    events: &mut PassEvents,
) -> Result<Option<String>, Error> {
    let secret = desired_secret(access, name, outcome);
    if current.is_some_and(|cur| secret_in_shape(cur, &secret)) {
        return Ok(None);
    }
    let said = ("secret", "SecretUpdated");
    apply_output(access, ctx, &secret, current.is_some(), said, events).await
}

/// Writes the ConfigMap of bucket facts if it differs from `data` with the operator's labels and
/// owner.
async fn write_config_map(
    access: &BucketAccess,
    ctx: &InAccount<'_>,
    name: &str,
    current: Option<&ConfigMap>,
    data: BTreeMap<String, String>,
    events: &mut PassEvents,
) -> Result<Option<String>, Error> {
    let want = outputs::desired_config_map(access, name, data);
    if current.is_some_and(|cur| outputs::in_shape(cur, &want)) {
        return Ok(None);
    }
    let said = ("configMap", "ConfigMapUpdated");
    apply_output(access, ctx, &want, current.is_some(), said, events).await
}

/// Applies `want` (a Secret or ConfigMap of the access's namespace) and reports it as `aspect`
/// recreated (drift) or `updated`; returns the version written. One read as absent (`existed`
/// false) is created, not taken over: one someone else created in between conflicts (409)
/// instead. Ours is forced back into shape.
async fn apply_output<K>(
    access: &BucketAccess,
    ctx: &InAccount<'_>,
    want: &K,
    existed: bool,
    (aspect, updated): (&str, &'static str),
    events: &mut PassEvents,
) -> Result<Option<String>, Error>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    K: Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let ns = access.namespace().ok_or(Error::NoNamespace)?;
    let api = Api::<K>::namespaced(ctx.client.clone(), &ns);
    let params = match existed {
        true => PatchParams::apply(MANAGER).force(),
        false => PatchParams::apply(MANAGER),
    };
    let (kind, name) = (K::kind(&()), want.name_any());
    let apply = Patch::Apply(want);
    let write = api.patch(&name, &params, &apply);
    let written = ctx.metrics.kube_write(&kind, "apply", write).await?;
    if is_served(access) {
        match existed {
            false => drift_or_update(events, true, aspect, format!("Recreated {kind} {name}")),
            true => events.add(false, updated, format!("Updated {kind} {name}")),
        }
    }
    Ok(written.resource_version())
}

/// Reports why the access is not Ready, under the class in force (`class_name`), and waits for
/// a change (or the periodic resync).
async fn blocked(
    access: &BucketAccess,
    ctx: &InAccount<'_>,
    why: &Blocked,
    class_name: Option<String>,
) -> Result<Requeue, Error> {
    let why = &ctx.said(why);
    let status = blocked_status(access, why, class_name, jiff::Timestamp::now());
    report_blocked(ctx, access, access.status.as_ref(), &status, why).await
}

/// The status that reports `why`, keeping what the last pass reported otherwise.
fn blocked_status(
    access: &BucketAccess,
    why: &Blocked,
    class_name: Option<String>,
    now: jiff::Timestamp,
) -> BucketAccessStatus {
    let previous = access.status.clone().unwrap_or_default();
    let generation = access.metadata.generation;
    let ready = condition::ready(
        &previous.conditions,
        false,
        why.reason,
        why.message.clone(),
        generation,
        now,
    );
    // A refused Manage pass says what it had left to write.
    let in_sync = why.in_sync(&previous.conditions, generation, now);
    BucketAccessStatus {
        class_name,
        conditions: std::iter::once(ready).chain(in_sync).collect(),
        observed_generation: generation,
        plan: why.plan(),
        ..previous
    }
}

/// Deletes what this BucketAccess created in IAM: keys, inline policies, then the user or role.
/// The Secret goes with the object through its owner reference. Fails closed: only "does not
/// exist" counts as gone; any refusal keeps the finalizer and names the refused operation.
async fn cleanup(access: &BucketAccess, ctx: &InAccount<'_>) -> Result<Requeue, Error> {
    if !has_finalizer(access) {
        return Ok(Requeue::OnChange);
    }
    if let Err(e) = delete_identity(access, ctx, false).await {
        let Some(refused) = refusal(&e, None, "") else {
            return Err(e.into());
        };
        let msg = format!("deleting the BucketAccess is waiting: {}", refused.message);
        let why = Blocked::new(Reason::DeletionBlocked, msg.clone());
        let class_name = access.status.as_ref().and_then(|s| s.class_name.clone());
        blocked(access, ctx, &why, class_name).await?;
        return Err(Error::DeletionBlocked(msg));
    }
    remove_finalizer(ctx, access).await?;
    Ok(Requeue::OnChange)
}

/// Cleans up after a BucketAccess that disappeared without its cleanup (its finalizer
/// stripped), from the last state the watch saw: the same deletions, said in log lines (the
/// object is gone). How many of its association and identity it deleted, for the metric.
pub async fn vanished(
    access: &BucketAccess,
    ctx: &InAccount<'_>,
) -> Result<Vec<&'static str>, crate::aws::Error> {
    delete_identity(access, ctx, true).await
}

/// Deletes the access's association and its user or role (each only if tagged as its own);
/// returns what was deleted (`association`, `user`, `role`). `gone`: the object is, so each
/// deletion is a log line rather than an event.
async fn delete_identity(
    access: &BucketAccess,
    ctx: &InAccount<'_>,
    gone: bool,
) -> Result<Vec<&'static str>, crate::aws::Error> {
    let owner = owner(access, &ctx.settings.cluster_name);
    let mut deleted = vec![];
    // The association first: it names the role.
    if let Found::Ours(a) = observe::association(ctx, access, &owner, true).await? {
        let cluster = ctx.settings.eks_cluster_name.as_deref().unwrap_or_default();
        ctx.aws.delete_association(cluster, &a.id).await?;
        let note = format!("Deleted EKS Pod Identity association {}", a.id);
        said(access, ctx, gone, note).await;
        deleted.push("association");
    }
    // Under either name (one made before names carried the long hash keeps its own): a
    // status that names neither must not leave one behind. Both are read at once.
    let candidates = identity_candidates(access, &owner);
    let found = try_join_all(candidates.iter().map(|id| ctx.aws.get_identity(id))).await?;
    for (identity, found) in candidates.into_iter().zip(found) {
        // Only one whose tags name this access.
        let Some(found) = found else { continue };
        if owner.judge(&found.tags) != Ownership::Ours {
            continue;
        }
        delete_owned_identity(ctx, &identity).await?;
        let (note, kind) = match &identity {
            Identity::User(_) => (format!("Deleted {identity} and its keys"), "user"),
            Identity::Role(_) => (format!("Deleted {identity}"), "role"),
        };
        said(access, ctx, gone, note).await;
        deleted.push(kind);
    }
    Ok(deleted)
}

/// A deletion, as an event on `access`, or a log line once it is `gone`.
async fn said(access: &BucketAccess, ctx: &InAccount<'_>, gone: bool, note: String) {
    if gone {
        tracing::warn!(reason = "Deleted", note = %note, "orphan cleanup");
    } else {
        ctx.event(access, false, "Deleted", note).await;
    }
}

/// Deletes a user's keys, the identity's inline policies, then the identity itself, whose
/// tags the caller has judged as owned by this installation.
pub async fn delete_owned_identity(
    ctx: &InAccount<'_>,
    identity: &Identity,
) -> Result<(), crate::aws::Error> {
    let aws = &ctx.aws;
    // Listed together, then deleted together: three round trips to IAM before the identity
    // goes, however many keys and policies it has.
    let keys = async {
        match identity {
            Identity::User(user) => aws.access_keys(user).await,
            Identity::Role(_) => Ok(vec![]),
        }
    };
    let (keys, policies) = tokio::try_join!(keys, aws.inline_policy_names(identity))?;
    let keys = keys
        .iter()
        .map(|key| aws.delete_access_key(identity.name(), &key.id).boxed());
    let policies = (policies.iter()).map(|p| aws.delete_inline_policy(identity, p).boxed());
    try_join_all(keys.chain(policies)).await?;
    aws.delete_identity(identity).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::BucketAccessStatus;
    use crate::reconcile::owner;

    fn access(credentials: serde_json::Value, user_arn: Option<&str>) -> BucketAccess {
        let mut a: BucketAccess = serde_json::from_value(serde_json::json!({
            "apiVersion": "s3.operator.dev/v1alpha1", "kind": "BucketAccess",
            "metadata": {"name": "a", "namespace": "ns", "uid": "uid-a"},
            "spec": {"bucketRef": {"name": "b"}, "permission": "ReadWrite",
                     "credentials": credentials},
        }))
        .unwrap();
        a.status = user_arn.map(|arn| BucketAccessStatus {
            user_arn: Some(arn.into()),
            ..Default::default()
        });
        a
    }

    fn arn(name: &str) -> String {
        format!("arn:aws:iam::123456789012:user/s3-operator/c/{name}")
    }

    /// A new identity is named with the long UID hash; one made before keeps its short-hash name
    /// once status records it. Status only chooses between this UID's two names: any other name
    /// it records (another object's identity) is ignored.
    #[test]
    fn an_identity_keeps_its_legacy_name_and_status_reaches_no_other() {
        let (new, legacy) = (
            naming::iam_name("ns", "a", "uid-a"),
            naming::legacy_iam_name("ns", "a", "uid-a"),
        );
        let named = |status: Option<&str>| {
            let a = access(serde_json::json!({}), status);
            iam_identity(&a, &owner(&a, "c")).name().to_string()
        };
        assert_eq!(named(None), new);
        assert_eq!(named(Some(&arn(&new))), new);
        assert_eq!(named(Some(&arn(&legacy))), legacy);
        let foreign = naming::legacy_iam_name("ns", "other", "uid-b");
        assert_eq!(named(Some(&arn(&foreign))), new);
        assert_eq!(named(Some(&arn("admin"))), new);

        // Both names are candidates, the recorded one first (cleanup tries both).
        let a = access(serde_json::json!({}), Some(&arn(&legacy)));
        let [first, second] = identity_candidates(&a, &owner(&a, "c"));
        assert_eq!(
            (first.name(), second.name()),
            (legacy.as_str(), new.as_str())
        );
        let a = access(serde_json::json!({"type": "ServiceAccountRole"}), None);
        let [first, second] = identity_candidates(&a, &owner(&a, "c"));
        assert_eq!(first, Identity::Role(new.clone()));
        assert_eq!(second, Identity::Role(legacy.clone()));

        // What AWS answered for wins over both: a pass works on the identity it found.
        let found = Found::Ours(plan::IdentityState {
            arn: arn(&legacy),
            boundary: None,
            policy: None,
            trust_policy: None,
            keys: vec![],
        });
        let a = access(serde_json::json!({}), None);
        let o = owner(&a, "c");
        assert_eq!(identity_of(&a, &o, &found), Identity::User(legacy.clone()));
        assert_eq!(
            identity_of(&a, &o, &Found::Absent),
            Identity::User(new.clone())
        );
        // A recorded legacy identity that is gone is made again under the long-hash name; one
        // that is someone else's is reported under the name that was read.
        let a = access(serde_json::json!({}), Some(&arn(&legacy)));
        let o = owner(&a, "c");
        assert_eq!(identity_of(&a, &o, &Found::Absent), Identity::User(new));
        let foreign = Found::Foreign("another object's".into());
        assert_eq!(identity_of(&a, &o, &foreign), Identity::User(legacy));
    }
}
