//! BucketAccess: an IAM user (with access keys) or role scoped to one bucket, and the Secret
//! that hands its credentials to the application.
//!
//! Key rotation is crash-safe because every decision is recomputed from what AWS and the Secret
//! hold: keys AWS has that the Secret does not vouch for are deleted before any key is created,
//! so a user never holds more than two keys, and the previous key's grace period is recorded in
//! the same Secret write that introduces its successor.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::{
    Context, Error, MANAGER, PassEvents, ensure_finalizer, object_key, remove_finalizer,
    update_status,
};
use crate::api::condition::{self, Reason};
use crate::api::{Bucket, BucketAccess, BucketAccessStatus, CredentialsType};
use crate::aws::iam::{AccessKey, NewAccessKey};
use crate::aws::tags::{Owner, Ownership};
use crate::aws::{ErrorKind, naming, policy};
use crate::metrics::METRICS;

/// Name of the inline policy on every user and role.
pub const POLICY_NAME: &str = "s3-operator-access";
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "s3-operator";
pub const ACCESS_LABEL: &str = "s3.operator.dev/bucket-access";
const ANN_KEY_ID: &str = "s3.operator.dev/access-key-id";
const ANN_KEY_HASH: &str = "s3.operator.dev/secret-access-key-sha256";
const ANN_PREVIOUS: &str = "s3.operator.dev/previous-access-key-id";
const ANN_ROTATED_AT: &str = "s3.operator.dev/rotated-at";

/// What the Secret vouches for.
#[derive(Clone, Debug, PartialEq)]
pub struct SecretCreds {
    pub key_id: String,
    /// The key pair in `data` is the one the operator wrote (id and secret hash match).
    pub intact: bool,
    pub previous_key_id: Option<String>,
    pub rotated_at: Option<jiff::Timestamp>,
}

/// Rotation settings in force.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RotationPolicy {
    pub interval: Option<Duration>,
    pub grace: Duration,
}

/// Which keys to delete and whether to create one; computed purely from observed state.
#[derive(Clone, Debug, PartialEq)]
pub struct KeyPlan {
    pub delete: Vec<String>,
    pub create: bool,
    /// The key the Secret keeps (when no key is created).
    pub active: Option<AccessKey>,
    /// The key that stays valid through its grace period, and when that period started.
    pub previous: Option<(String, jiff::Timestamp)>,
    /// When the plan changes next by itself (a rotation or a grace period ending).
    pub wake_at: Option<jiff::Timestamp>,
    /// Kept keys that a revoked grant deactivated.
    pub reactivate: Vec<String>,
}

fn add(t: jiff::Timestamp, d: Duration) -> jiff::Timestamp {
    t.checked_add(jiff::SignedDuration::try_from(d).unwrap_or(jiff::SignedDuration::MAX))
        .unwrap_or(jiff::Timestamp::MAX)
}

/// The pure key planner. `keys` are the user's keys in AWS (oldest first), `secret` what the
/// Secret vouches for, `last_active` the key id status last reported.
pub fn plan_keys(
    keys: &[AccessKey],
    secret: Option<&SecretCreds>,
    last_active: Option<&str>,
    rotation: RotationPolicy,
    now: jiff::Timestamp,
) -> KeyPlan {
    let mut plan = plan_key_ids(keys, secret, last_active, rotation, now);
    let kept = [
        plan.active.as_ref().map(|k| k.id.as_str()),
        plan.previous.as_ref().map(|p| p.0.as_str()),
    ];
    plan.reactivate = keys
        .iter()
        .filter(|k| !k.active && kept.contains(&Some(k.id.as_str())))
        .map(|k| k.id.clone())
        .collect();
    plan
}

fn plan_key_ids(
    keys: &[AccessKey],
    secret: Option<&SecretCreds>,
    last_active: Option<&str>,
    rotation: RotationPolicy,
    now: jiff::Timestamp,
) -> KeyPlan {
    let find = |id: &str| keys.iter().find(|k| k.id == id).cloned();
    let active = secret.filter(|s| s.intact).and_then(|s| find(&s.key_id));
    let Some(active) = active else {
        // The Secret is missing, edited, or names a key AWS no longer has: issue a new key. The
        // key running pods most likely still use (the last one reported active, else the newest)
        // keeps working through the grace period; any other key goes first, so at most two exist.
        let keep = (rotation.grace > Duration::ZERO)
            .then(|| last_active.and_then(find).or_else(|| keys.last().cloned()))
            .flatten();
        return KeyPlan {
            delete: keys
                .iter()
                .filter(|k| Some(&k.id) != keep.as_ref().map(|k| &k.id))
                .map(|k| k.id.clone())
                .collect(),
            create: true,
            active: None,
            previous: keep.map(|k| (k.id, now)),
            wake_at: (rotation.grace > Duration::ZERO).then(|| add(now, rotation.grace)),
            reactivate: Vec::new(),
        };
    };
    let previous = secret.and_then(|s| {
        let id = s.previous_key_id.as_deref()?;
        let since = s.rotated_at?;
        (id != active.id && find(id).is_some() && add(since, rotation.grace) > now)
            .then(|| (id.to_string(), since))
    });
    let delete = keys
        .iter()
        .filter(|k| k.id != active.id && Some(&k.id) != previous.as_ref().map(|p| &p.0))
        .map(|k| k.id.clone())
        .collect();
    let rotate_at = rotation.interval.map(|i| add(active.created, i));
    let grace_ends = previous
        .as_ref()
        .map(|(_, since)| add(*since, rotation.grace));
    // Never rotate while the previous key is still in its grace period: that would need a third key.
    if rotate_at.is_some_and(|t| t <= now) && previous.is_none() {
        return KeyPlan {
            delete,
            create: true,
            active: None,
            previous: (rotation.grace > Duration::ZERO).then(|| (active.id.clone(), now)),
            wake_at: Some(add(
                now,
                rotation
                    .grace
                    .min(rotation.interval.unwrap_or(Duration::MAX)),
            )),
            reactivate: Vec::new(),
        };
    }
    let wake_at = [rotate_at, grace_ends].into_iter().flatten().min();
    KeyPlan {
        delete,
        create: false,
        active: Some(active),
        previous,
        wake_at,
        reactivate: Vec::new(),
    }
}

/// What the Secret holding `data` vouches for.
pub fn secret_creds(secret: &Secret) -> Option<SecretCreds> {
    let ann = secret.metadata.annotations.as_ref()?;
    let data = secret.data.as_ref()?;
    let key_id = ann.get(ANN_KEY_ID)?.clone();
    let id_in_data =
        data.get("AWS_ACCESS_KEY_ID").map(|b| b.0.as_slice()) == Some(key_id.as_bytes());
    let hash_ok = data.get("AWS_SECRET_ACCESS_KEY").map(|b| sha256_hex(&b.0))
        == ann.get(ANN_KEY_HASH).cloned();
    Some(SecretCreds {
        key_id,
        intact: id_in_data && hash_ok,
        previous_key_id: ann.get(ANN_PREVIOUS).filter(|s| !s.is_empty()).cloned(),
        rotated_at: ann.get(ANN_ROTATED_AT).and_then(|t| t.parse().ok()),
    })
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

pub fn owner(access: &BucketAccess, cluster: &str) -> Owner {
    Owner {
        cluster: cluster.to_string(),
        namespace: access.namespace().unwrap_or_default(),
        name: access.name_any(),
        uid: access.uid().unwrap_or_default(),
    }
}

pub fn secret_name(access: &BucketAccess) -> String {
    access
        .spec
        .credentials
        .secret_name
        .clone()
        .unwrap_or_else(|| access.name_any())
}

fn rotation_policy(access: &BucketAccess) -> RotationPolicy {
    match &access.spec.credentials.rotation {
        Some(r) => RotationPolicy {
            interval: Some(r.interval.into()),
            grace: r.grace_period.into(),
        },
        None => RotationPolicy {
            interval: None,
            grace: Duration::ZERO,
        },
    }
}

/// Facts about the bucket a BucketAccess grants: derived from its Bucket's spec and UID and
/// confirmed by the bucket's ownership tags in AWS, never taken from status.
struct BucketFacts {
    name: String,
    region: String,
    arn: String,
}

/// What the Bucket cache says about the grant, before any AWS call (pure).
#[derive(Debug, PartialEq)]
enum BucketState {
    /// No grant may stand: credentials are revoked, with this reason and message.
    Gone(Reason, String),
    /// The Bucket is not Ready yet: nothing is created, nothing is revoked.
    NotReady(String),
    /// The bucket this Bucket's spec and UID name, still to be confirmed in AWS.
    Named(Box<super::bucket::Desired>, Owner),
}

fn bucket_state(
    access: &BucketAccess,
    bucket: Option<&Bucket>,
    settings: &super::Settings,
    default_region: &str,
) -> BucketState {
    let ns = access.namespace().unwrap_or_default();
    let name = &access.spec.bucket_ref.name;
    let Some(bucket) = bucket else {
        let msg = format!("Bucket {name} does not exist in namespace {ns}");
        return BucketState::Gone(Reason::BucketNotFound, msg);
    };
    if bucket.metadata.deletion_timestamp.is_some() {
        let msg = format!("Bucket {name} is being deleted");
        return BucketState::Gone(Reason::BucketNotFound, msg);
    }
    // Ready is only trusted to say "not yet"; what is granted is confirmed in AWS.
    if !bucket
        .status
        .as_ref()
        .is_some_and(|s| condition::is_ready(&s.conditions))
    {
        return BucketState::NotReady(format!("waiting for Bucket {name} to become Ready"));
    }
    let owner = super::bucket::owner(bucket, &settings.cluster_name);
    match super::bucket::desired(bucket, settings, default_region, &owner) {
        Ok(d) => BucketState::Named(Box::new(d), owner),
        Err(msg) => BucketState::Gone(Reason::BucketNotOwned, msg),
    }
}

/// The grant's bucket if its tags in AWS still name the Bucket as owner; else why not.
async fn confirm(
    ctx: &Context,
    d: &super::bucket::Desired,
    owner: &Owner,
    bucket_ref: &str,
) -> Result<Result<BucketFacts, String>, Error> {
    let tags = match ctx.aws.bucket_tags(&d.region, &d.name).await {
        Ok(tags) => tags,
        // A bucket whose owner cannot be confirmed is granted to no one.
        Err(e) if e.kind == ErrorKind::AccessDenied => {
            return Ok(Err(format!(
                "the owner of S3 bucket {} cannot be confirmed ({}: {})",
                d.name, e.code, e.message
            )));
        }
        Err(e) => return Err(e.into()),
    };
    let why = match tags.map(|t| owner.judge(&t)) {
        Some(Ownership::Ours) => {
            return Ok(Ok(BucketFacts {
                arn: naming::bucket_arn(naming::partition(&d.region), &d.name),
                name: d.name.clone(),
                region: d.region.clone(),
            }));
        }
        None => "does not exist".to_string(),
        Some(Ownership::Foreign(who)) => format!("is {who}"),
        Some(Ownership::Unowned | Ownership::Released { .. }) => "has no owner".to_string(),
    };
    Ok(Err(format!(
        "S3 bucket {} {why}: it is no longer owned by Bucket {bucket_ref}",
        d.name
    )))
}

pub async fn reconcile(access: Arc<BucketAccess>, ctx: Arc<Context>) -> Result<Action, Error> {
    if access.metadata.deletion_timestamp.is_some() {
        return cleanup(&access, &ctx).await;
    }
    let start = access.resource_version().unwrap_or_default();
    let version = ensure_finalizer(&ctx.client, access.as_ref()).await?;
    let ns = access.namespace().ok_or(Error::NoNamespace)?;
    let bucket_ref = access.spec.bucket_ref.name.clone();
    let bucket = ctx.bucket(&ns, &bucket_ref);
    let bucket_version = bucket
        .as_ref()
        .and_then(|b| b.resource_version())
        .unwrap_or_default();
    if let Some(p) = &access.spec.prefix
        && let Err(msg) = policy::check_prefix(p)
    {
        return waiting(&access, &ctx, Reason::InvalidSpec, msg).await;
    }
    let (d, bucket_owner) =
        match bucket_state(&access, bucket.as_deref(), &ctx.settings, &ctx.aws.region) {
            BucketState::Gone(reason, msg) => return withdraw(&access, &ctx, reason, msg).await,
            BucketState::NotReady(msg) => {
                return waiting(&access, &ctx, Reason::BucketNotReady, msg).await;
            }
            BucketState::Named(d, owner) => (d, owner),
        };
    let mut events = PassEvents::default();
    let result = match access.spec.credentials.type_ {
        CredentialsType::AccessKey => {
            let found = match read_secret(&access, &ctx, &ns).await? {
                Ok(found) => found,
                Err(msg) => {
                    return waiting(&access, &ctx, Reason::OwnershipConflict, msg).await;
                }
            };
            let secret_version = found
                .2
                .as_ref()
                .and_then(|s| s.resource_version())
                .unwrap_or_default();
            let current = [
                version.clone(),
                bucket_version.clone(),
                secret_version.clone(),
            ];
            if let Some(wait) = ctx
                .settled
                .remaining(&object_key(access.as_ref()), &current)
            {
                return Ok(Action::requeue(wait));
            }
            let facts = match confirm(&ctx, &d, &bucket_owner, &bucket_ref).await? {
                Ok(facts) => facts,
                Err(msg) => return withdraw(&access, &ctx, Reason::BucketNotOwned, msg).await,
            };
            let versions = [
                vec![start, version],
                vec![bucket_version],
                vec![secret_version],
            ];
            apply_user(&access, &ctx, &facts, found, versions, &mut events).await
        }
        CredentialsType::ServiceAccountRole => {
            match confirm(&ctx, &d, &bucket_owner, &bucket_ref).await? {
                Ok(facts) => apply_role(&access, &ctx, &facts, &mut events).await,
                Err(msg) => return withdraw(&access, &ctx, Reason::BucketNotOwned, msg).await,
            }
        }
    };
    // What was changed is reported even when a later step of the pass failed.
    events.publish(&ctx, access.as_ref()).await;
    match result {
        Err(Error::Aws(e)) => match refusal(&e) {
            Some((reason, msg)) => waiting(&access, &ctx, reason, msg).await,
            None => Err(Error::Aws(e)),
        },
        other => other,
    }
}

/// Grants never outlive ownership: removes the access policy and deactivates every key of this
/// access's user (or removes its role's policy), then reports why. Keys stay, inactive, so the
/// same Secret works again if the grant comes back. Reads only, once nothing is left to revoke.
async fn withdraw(
    access: &BucketAccess,
    ctx: &Context,
    reason: Reason,
    msg: String,
) -> Result<Action, Error> {
    let owner = owner(access, &ctx.settings.cluster_name);
    let name = naming::iam_name(&owner.namespace, &owner.name, &owner.uid);
    let aws = &ctx.aws;
    let mut revoked = Vec::new();
    let result: Result<(), crate::aws::Error> = async {
        match access.spec.credentials.type_ {
            CredentialsType::AccessKey => {
                let Some(user) = aws.get_user(&name).await? else {
                    return Ok(());
                };
                if owner.judge(&user.tags) != Ownership::Ours {
                    return Ok(());
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
                    return Ok(());
                };
                if owner.judge(&role.tags) == Ownership::Ours
                    && aws.role_policy(&name, POLICY_NAME).await?.is_some()
                {
                    aws.delete_role_policy(&name, POLICY_NAME).await?;
                    revoked.push(format!("removed the access policy of IAM role {name}"));
                }
            }
        }
        Ok(())
    }
    .await;
    if let Err(e) = result {
        return match refusal(&e) {
            Some((reason, why)) => {
                let msg = format!("{msg}; revoking its credentials failed: {why}");
                waiting(access, ctx, reason, msg).await
            }
            None => Err(e.into()),
        };
    }
    if !revoked.is_empty() {
        ctx.event(
            access,
            true,
            "AccessRevoked",
            format!("{msg}: {}", revoked.join(", ")),
        )
        .await;
    }
    // The same message whether or not this pass revoked anything: a steady pass writes nothing.
    waiting(access, ctx, reason, format!("{msg}; no access is granted")).await
}

fn refusal(e: &crate::aws::Error) -> Option<(Reason, String)> {
    match e.kind {
        ErrorKind::AccessDenied => Some((
            Reason::AccessDenied,
            format!(
                "AWS denied {} {}: the operator's IAM policy does not allow it ({})",
                e.service, e.operation, e.message
            ),
        )),
        ErrorKind::Invalid | ErrorKind::Conflict => Some((
            Reason::InvalidSpec,
            format!("AWS rejected {}: {}: {}", e.operation, e.code, e.message),
        )),
        ErrorKind::NotFound | ErrorKind::Transient => None,
    }
}

/// `found` is the Secret as read at the start of the pass; `versions` the resourceVersions of
/// the BucketAccess, its Bucket and its Secret this pass started from.
async fn apply_user(
    access: &BucketAccess,
    ctx: &Context,
    facts: &BucketFacts,
    found: (Api<Secret>, String, Option<Secret>),
    versions: [Vec<String>; 3],
    events: &mut PassEvents,
) -> Result<Action, Error> {
    let aws = &ctx.aws;
    let owner = owner(access, &ctx.settings.cluster_name);
    let user = naming::iam_name(&owner.namespace, &owner.name, &owner.uid);
    let doc = policy::access_policy(
        naming::partition(&facts.region),
        &facts.name,
        access.spec.permission,
        access.spec.prefix.as_deref(),
    );

    // Observe.
    let existing = aws.get_user(&user).await?;
    let (arn, current_policy, keys) = match existing {
        Some(entity) => {
            let who = match owner.judge(&entity.tags) {
                Ownership::Ours => None,
                Ownership::Unowned | Ownership::Released { .. } => {
                    Some("not tagged by the operator".to_string())
                }
                Ownership::Foreign(who) => Some(who),
            };
            if let Some(who) = who {
                let msg =
                    format!("IAM user {user} already exists and is {who}; it will not be modified");
                return waiting(access, ctx, Reason::OwnershipConflict, msg).await;
            }
            let boundary = &ctx.settings.boundary_arn;
            if entity.boundary.as_ref() != Some(boundary) {
                // A user from before boundaries, or one whose boundary was changed.
                aws.put_user_boundary(&user, boundary).await?;
                drift_or_update(
                    events,
                    entity.boundary.is_some(),
                    "permissionsBoundary",
                    format!("Set permissions boundary of IAM user {user}"),
                );
            }
            let (p, k) =
                tokio::try_join!(aws.user_policy(&user, POLICY_NAME), aws.access_keys(&user))?;
            (entity.arn, p, k)
        }
        None => {
            let path = naming::iam_path(&ctx.settings.cluster_name);
            let boundary = &ctx.settings.boundary_arn;
            let entity = match aws.create_user(&user, &path, boundary, &owner.tags()).await {
                Err(e) if e.is("EntityAlreadyExists") => {
                    let msg = format!(
                        "IAM user {user} already exists outside the operator's path {path}; it will not be modified"
                    );
                    return waiting(access, ctx, Reason::OwnershipConflict, msg).await;
                }
                other => other?,
            };
            events.add(false, "Created", format!("Created IAM user {user}"));
            (entity.arn, None, Vec::new())
        }
    };
    let (secrets, secret_name, secret) = found;
    let [mut own_versions, bucket_versions, mut secret_versions] = versions;
    let creds = secret.as_ref().and_then(secret_creds);
    let now = jiff::Timestamp::now();
    let last_active = access
        .status
        .as_ref()
        .and_then(|s| s.access_key_id.as_deref());
    let keys_plan = plan_keys(
        &keys,
        creds.as_ref(),
        last_active,
        rotation_policy(access),
        now,
    );

    // Apply: policy, then deletions before any creation (never more than two keys).
    let served = served(access);
    if current_policy.as_ref() != Some(&doc) {
        aws.put_user_policy(&user, POLICY_NAME, &doc).await?;
        drift_or_update(
            events,
            served && current_policy.is_some(),
            "policy",
            format!("Set access policy of IAM user {user}"),
        );
    }
    for id in &keys_plan.delete {
        aws.delete_access_key(&user, id).await?;
        events.add(
            false,
            "KeyDeleted",
            format!("Deleted access key {id} of IAM user {user}"),
        );
    }
    // Keys kept from a revoked grant come back to life with it.
    for id in &keys_plan.reactivate {
        aws.set_access_key_active(&user, id, true).await?;
        events.add(
            false,
            "KeyReactivated",
            format!("Reactivated access key {id} of IAM user {user}"),
        );
    }
    let new_key = if keys_plan.create {
        let k = aws.create_access_key(&user).await?;
        events.add(
            false,
            "KeyCreated",
            format!("Created access key {} for IAM user {user}", k.key.id),
        );
        Some(k)
    } else {
        None
    };

    let mut data = bucket_data(ctx, facts);
    let mut annotations = BTreeMap::new();
    let (active_id, active_created) = match (&new_key, &keys_plan.active) {
        (Some(NewAccessKey { key, secret }), _) => {
            data.insert("AWS_ACCESS_KEY_ID".into(), key.id.clone());
            data.insert("AWS_SECRET_ACCESS_KEY".into(), secret.expose().to_string());
            annotations.insert(
                ANN_KEY_HASH.to_string(),
                sha256_hex(secret.expose().as_bytes()),
            );
            (key.id.clone(), key.created)
        }
        (None, Some(active)) => {
            // Keep the pair the Secret already holds.
            let old: &[u8] = secret
                .as_ref()
                .and_then(|s| s.data.as_ref())
                .and_then(|d| d.get("AWS_SECRET_ACCESS_KEY"))
                .map_or(&[], |b| b.0.as_slice());
            data.insert("AWS_ACCESS_KEY_ID".into(), active.id.clone());
            data.insert(
                "AWS_SECRET_ACCESS_KEY".into(),
                String::from_utf8_lossy(old).into(),
            );
            annotations.insert(ANN_KEY_HASH.to_string(), sha256_hex(old));
            (active.id.clone(), active.created)
        }
        (None, None) => unreachable!("plan_keys either keeps a key or creates one"),
    };
    annotations.insert(ANN_KEY_ID.to_string(), active_id.clone());
    annotations.insert(
        ANN_PREVIOUS.to_string(),
        keys_plan
            .previous
            .as_ref()
            .map(|p| p.0.clone())
            .unwrap_or_default(),
    );
    annotations.insert(
        ANN_ROTATED_AT.to_string(),
        keys_plan
            .previous
            .as_ref()
            .map(|p| p.1.to_string())
            .unwrap_or_else(|| active_created.to_string()),
    );
    secret_versions.extend(
        write_secret(
            access,
            &secrets,
            &secret_name,
            secret.as_ref(),
            data,
            annotations,
            events,
        )
        .await?,
    );

    let rotation = rotation_policy(access);
    let status = BucketAccessStatus {
        conditions: vec![condition::ready(
            &access.status.clone().unwrap_or_default().conditions,
            true,
            Reason::Available,
            format!(
                "credentials for bucket {} are in Secret {secret_name}",
                facts.name
            ),
            access.metadata.generation,
            now,
        )],
        observed_generation: access.metadata.generation,
        secret_name: Some(secret_name),
        user_arn: Some(arn),
        role_arn: None,
        access_key_id: Some(active_id),
        last_rotation_time: Some(Time(active_created)),
        next_rotation_time: rotation.interval.map(|i| Time(add(active_created, i))),
    };
    own_versions.extend(update_status(&ctx.client, access, access.status.as_ref(), &status).await?);
    let next = next_pass(ctx, keys_plan.wake_at, now);
    ctx.settled.record(
        object_key(access),
        vec![own_versions, bucket_versions, secret_versions],
        next,
    );
    Ok(Action::requeue(next))
}

/// The Secret this access writes, if it exists; `Err` with a message when it exists but belongs
/// to someone else (it is never overwritten).
async fn read_secret(
    access: &BucketAccess,
    ctx: &Context,
    ns: &str,
) -> Result<Result<(Api<Secret>, String, Option<Secret>), String>, Error> {
    let api = Api::<Secret>::namespaced(ctx.client.clone(), ns);
    let name = secret_name(access);
    let secret = api.get_opt(&name).await?;
    let ours = |s: &Secret| {
        s.owner_references()
            .iter()
            .any(|o| Some(&o.uid) == access.meta().uid.as_ref())
    };
    if secret.as_ref().is_some_and(|s| !ours(s)) {
        return Ok(Err(format!(
            "Secret {name} exists and is not owned by this BucketAccess; it will not be overwritten"
        )));
    }
    Ok(Ok((api, name, secret)))
}

/// The next pass: at the resync period, or sooner when a rotation or grace period is due.
fn next_pass(ctx: &Context, wake_at: Option<jiff::Timestamp>, now: jiff::Timestamp) -> Duration {
    let resync = ctx.resync_after();
    match wake_at {
        Some(t) => {
            let until = Duration::try_from(t.duration_since(now)).unwrap_or(Duration::ZERO);
            // Wake just after the deadline; never spin on a deadline already passed.
            let wait = (until + Duration::from_millis(200)).max(Duration::from_millis(500));
            if wait < ctx.settings.resync_period {
                wait
            } else {
                resync
            }
        }
        None => resync,
    }
}

fn bucket_data(ctx: &Context, facts: &BucketFacts) -> BTreeMap<String, String> {
    let mut data = BTreeMap::from([
        ("AWS_REGION".to_string(), facts.region.clone()),
        ("BUCKET_NAME".to_string(), facts.name.clone()),
        ("BUCKET_ARN".to_string(), facts.arn.clone()),
    ]);
    if let Some(endpoint) = &ctx.aws.endpoint_url {
        data.insert("AWS_ENDPOINT_URL_S3".into(), endpoint.clone());
    }
    data
}

fn served(access: &BucketAccess) -> bool {
    access.status.as_ref().is_some_and(|s| {
        s.observed_generation == access.metadata.generation && condition::is_ready(&s.conditions)
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

/// Writes the Secret if its data, labels, annotations or owner differ from what it should be.
async fn write_secret(
    access: &BucketAccess,
    api: &Api<Secret>,
    name: &str,
    current: Option<&Secret>,
    data: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    events: &mut PassEvents,
) -> Result<Option<String>, Error> {
    let labels = BTreeMap::from([
        (MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string()),
        (ACCESS_LABEL.to_string(), access.name_any()),
    ]);
    let data: BTreeMap<String, ByteString> = data
        .into_iter()
        .map(|(k, v)| (k, ByteString(v.into_bytes())))
        .collect();
    let owner_ref = access
        .controller_owner_ref(&())
        .expect("BucketAccess has a name and uid");
    if let Some(cur) = current {
        let has = |want: &BTreeMap<String, String>, have: Option<&BTreeMap<String, String>>| {
            want.iter()
                .all(|(k, v)| have.and_then(|h| h.get(k)) == Some(v))
        };
        let same_data = cur.data.as_ref() == Some(&data);
        let same_meta = has(&labels, cur.metadata.labels.as_ref())
            && has(&annotations, cur.metadata.annotations.as_ref())
            && cur.owner_references().contains(&owner_ref);
        if same_data && same_meta && cur.type_.as_deref() == Some("Opaque") {
            return Ok(None);
        }
    }
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: access.namespace(),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: Some(vec![owner_ref]),
            ..Default::default()
        },
        data: Some(data),
        type_: Some("Opaque".into()),
        ..Default::default()
    };
    let restored = current.is_some() && served(access);
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
    if current.is_none() && served(access) {
        drift_or_update(events, true, "secret", format!("Recreated Secret {name}"));
    } else if restored {
        events.add(false, "SecretUpdated", format!("Updated Secret {name}"));
    }
    Ok(written.resource_version())
}

async fn apply_role(
    access: &BucketAccess,
    ctx: &Context,
    facts: &BucketFacts,
    events: &mut PassEvents,
) -> Result<Action, Error> {
    let aws = &ctx.aws;
    let Some(oidc) = ctx.settings.oidc_provider_arn.clone() else {
        let msg = "ServiceAccountRole credentials need the operator's --oidc-provider-arn, which is not set".to_string();
        return waiting(access, ctx, Reason::InvalidSpec, msg).await;
    };
    let owner = owner(access, &ctx.settings.cluster_name);
    let role = naming::iam_name(&owner.namespace, &owner.name, &owner.uid);
    let sa = access
        .spec
        .credentials
        .service_account_name
        .clone()
        .unwrap_or_default();
    let trust = policy::irsa_trust_policy(&oidc, &owner.namespace, &sa);
    let doc = policy::access_policy(
        naming::partition(&facts.region),
        &facts.name,
        access.spec.permission,
        access.spec.prefix.as_deref(),
    );
    let served = served(access);

    let arn = match aws.get_role(&role).await? {
        Some(entity) => {
            if owner.judge(&entity.tags) != Ownership::Ours {
                let msg = format!(
                    "IAM role {role} already exists and is not owned by this BucketAccess; it will not be modified"
                );
                return waiting(access, ctx, Reason::OwnershipConflict, msg).await;
            }
            let boundary = &ctx.settings.boundary_arn;
            if entity.boundary.as_ref() != Some(boundary) {
                aws.put_role_boundary(&role, boundary).await?;
                drift_or_update(
                    events,
                    entity.boundary.is_some(),
                    "permissionsBoundary",
                    format!("Set permissions boundary of IAM role {role}"),
                );
            }
            if entity.trust_policy.as_ref() != Some(&trust) {
                aws.update_trust_policy(&role, &trust).await?;
                drift_or_update(
                    events,
                    served,
                    "trustPolicy",
                    format!("Set trust policy of IAM role {role}"),
                );
            }
            entity.arn
        }
        None => {
            let path = naming::iam_path(&ctx.settings.cluster_name);
            let boundary = &ctx.settings.boundary_arn;
            let entity = match aws
                .create_role(&role, &path, boundary, &trust, &owner.tags())
                .await
            {
                Err(e) if e.is("EntityAlreadyExists") => {
                    let msg = format!(
                        "IAM role {role} already exists outside the operator's path {path}; it will not be modified"
                    );
                    return waiting(access, ctx, Reason::OwnershipConflict, msg).await;
                }
                other => other?,
            };
            events.add(
                false,
                "Created",
                format!("Created IAM role {role} for ServiceAccount {sa}"),
            );
            entity.arn
        }
    };
    let current: Option<Value> = aws.role_policy(&role, POLICY_NAME).await?;
    if current.as_ref() != Some(&doc) {
        aws.put_role_policy(&role, POLICY_NAME, &doc).await?;
        drift_or_update(
            events,
            served && current.is_some(),
            "policy",
            format!("Set access policy of IAM role {role}"),
        );
    }
    let (secrets, secret_name, secret) = match read_secret(access, ctx, &owner.namespace).await? {
        Ok(found) => found,
        Err(msg) => return waiting(access, ctx, Reason::OwnershipConflict, msg).await,
    };
    let mut data = bucket_data(ctx, facts);
    data.insert("AWS_ROLE_ARN".into(), arn.clone());
    write_secret(
        access,
        &secrets,
        &secret_name,
        secret.as_ref(),
        data,
        BTreeMap::new(),
        events,
    )
    .await?;
    let status = BucketAccessStatus {
        conditions: vec![condition::ready(
            &access.status.clone().unwrap_or_default().conditions,
            true,
            Reason::Available,
            format!("IAM role {role} is ready for ServiceAccount {sa}"),
            access.metadata.generation,
            jiff::Timestamp::now(),
        )],
        observed_generation: access.metadata.generation,
        secret_name: Some(secret_name),
        role_arn: Some(arn),
        ..Default::default()
    };
    update_status(&ctx.client, access, access.status.as_ref(), &status).await?;
    Ok(ctx.resync())
}

/// Reports why the access is not Ready and waits for a change (or the periodic resync).
async fn waiting(
    access: &BucketAccess,
    ctx: &Context,
    reason: Reason,
    msg: String,
) -> Result<Action, Error> {
    let previous = access.status.clone().unwrap_or_default();
    let status = BucketAccessStatus {
        conditions: vec![condition::ready(
            &previous.conditions,
            false,
            reason,
            msg.clone(),
            access.metadata.generation,
            jiff::Timestamp::now(),
        )],
        observed_generation: access.metadata.generation,
        ..previous.clone()
    };
    if access.status.as_ref() != Some(&status) {
        // Waiting for a Bucket still being created is the normal first step, not news: the
        // condition says so without an event per new pair.
        if reason != Reason::BucketNotReady {
            ctx.event(access, true, reason.as_str(), msg).await;
        }
        update_status(&ctx.client, access, access.status.as_ref(), &status).await?;
    }
    if !matches!(
        reason,
        Reason::BucketNotReady | Reason::BucketNotFound | Reason::BucketNotOwned
    ) {
        METRICS
            .terminal_reconcile_errors_total
            .with_label_values(&["bucketaccess"])
            .inc();
    }
    Ok(ctx.resync())
}

/// Deletes what this BucketAccess created in IAM: keys, inline policies, then the user or role.
/// The Secret goes with the object through its owner reference. Fails closed: only "does not
/// exist" counts as gone; any refusal keeps the finalizer and names the refused operation.
async fn cleanup(access: &BucketAccess, ctx: &Context) -> Result<Action, Error> {
    if !access
        .finalizers()
        .iter()
        .any(|f| f == crate::api::FINALIZER)
    {
        return Ok(Action::await_change());
    }
    if let Err(e) = delete_identity(access, ctx).await {
        let Some((_, why)) = refusal(&e) else {
            return Err(e.into());
        };
        let msg = format!("deleting the BucketAccess is waiting: {why}");
        waiting(access, ctx, Reason::DeletionBlocked, msg.clone()).await?;
        return Err(Error::DeletionBlocked(msg));
    }
    remove_finalizer(&ctx.client, access).await?;
    Ok(Action::await_change())
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

    fn t(s: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_800_000_000 + s).unwrap()
    }
    fn key(id: &str, created: i64) -> AccessKey {
        AccessKey {
            id: id.into(),
            created: t(created),
            active: true,
        }
    }
    fn creds(id: &str, previous: Option<&str>, rotated_at: Option<i64>) -> SecretCreds {
        SecretCreds {
            key_id: id.into(),
            intact: true,
            previous_key_id: previous.map(Into::into),
            rotated_at: rotated_at.map(t),
        }
    }
    const NO_ROTATION: RotationPolicy = RotationPolicy {
        interval: None,
        grace: Duration::ZERO,
    };
    const ROTATION: RotationPolicy = RotationPolicy {
        interval: Some(Duration::from_secs(100)),
        grace: Duration::from_secs(10),
    };

    #[test]
    fn first_pass_creates_one_key() {
        let p = plan_keys(&[], None, None, NO_ROTATION, t(0));
        assert!(p.create && p.delete.is_empty() && p.previous.is_none());
    }

    #[test]
    fn steady_state_keeps_the_key() {
        let p = plan_keys(
            &[key("A", 0)],
            Some(&creds("A", None, None)),
            Some("A"),
            ROTATION,
            t(50),
        );
        assert_eq!(
            p,
            KeyPlan {
                delete: vec![],
                create: false,
                active: Some(key("A", 0)),
                previous: None,
                wake_at: Some(t(100)),
                reactivate: vec![],
            }
        );
    }

    #[test]
    fn rotation_creates_a_key_and_keeps_the_old_one_for_the_grace_period() {
        let p = plan_keys(
            &[key("A", 0)],
            Some(&creds("A", None, None)),
            Some("A"),
            ROTATION,
            t(100),
        );
        assert!(p.create && p.delete.is_empty());
        assert_eq!(p.previous, Some(("A".into(), t(100))));
    }

    #[test]
    fn previous_key_survives_the_grace_period_then_goes() {
        let keys = [key("A", 0), key("B", 100)];
        let s = creds("B", Some("A"), Some(100));
        let during = plan_keys(&keys, Some(&s), Some("B"), ROTATION, t(105));
        assert!(during.delete.is_empty() && !during.create);
        assert_eq!(during.wake_at, Some(t(110)));
        let after = plan_keys(&keys, Some(&s), Some("B"), ROTATION, t(111));
        assert_eq!(after.delete, vec!["A".to_string()]);
        assert!(!after.create);
    }

    #[test]
    fn crash_after_creating_a_key_deletes_the_orphan_before_creating_again() {
        // Rotation created C but died before writing the Secret, which still vouches for A.
        let keys = [key("A", 0), key("C", 100)];
        let p = plan_keys(
            &keys,
            Some(&creds("A", None, None)),
            Some("A"),
            ROTATION,
            t(101),
        );
        assert_eq!(p.delete, vec!["C".to_string()]);
        assert!(p.create);
        assert!(keys.len() - p.delete.len() + usize::from(p.create) <= 2);
    }

    #[test]
    fn no_rotation_while_a_previous_key_is_in_grace() {
        let keys = [key("A", 0), key("B", 5)];
        // B is already past its interval, but A is still in its grace period.
        let policy = RotationPolicy {
            interval: Some(Duration::from_secs(1)),
            grace: Duration::from_secs(10),
        };
        let p = plan_keys(
            &keys,
            Some(&creds("B", Some("A"), Some(5))),
            Some("B"),
            policy,
            t(8),
        );
        assert!(!p.create && p.delete.is_empty());
    }

    #[test]
    fn deleted_or_edited_secret_issues_a_new_key_keeping_the_last_active_through_grace() {
        let keys = [key("A", 0), key("B", 50)];
        for s in [
            None,
            Some(SecretCreds {
                intact: false,
                ..creds("B", None, None)
            }),
        ] {
            let p = plan_keys(&keys, s.as_ref(), Some("B"), ROTATION, t(60));
            assert!(p.create);
            assert_eq!(p.delete, vec!["A".to_string()]);
            assert_eq!(p.previous, Some(("B".into(), t(60))));
        }
        // Without a grace period every old key goes at once.
        let p = plan_keys(&keys, None, Some("B"), NO_ROTATION, t(60));
        assert_eq!(p.delete, vec!["A".to_string(), "B".to_string()]);
    }

    #[test]
    fn never_more_than_two_keys_in_any_state() {
        let all = [key("A", 0), key("B", 10)];
        for n in 0..=2 {
            let keys = &all[..n];
            for secret in [
                None,
                Some(creds("A", None, None)),
                Some(creds("B", Some("A"), Some(10))),
                Some(creds("X", None, None)),
            ] {
                for now in [5, 50, 105, 200] {
                    for policy in [NO_ROTATION, ROTATION] {
                        let p = plan_keys(keys, secret.as_ref(), Some("A"), policy, t(now));
                        let after = keys.len() - p.delete.len() + usize::from(p.create);
                        assert!(after <= 2, "{keys:?} {secret:?} {now}: {p:?}");
                        assert!(p.create || p.active.is_some());
                    }
                }
            }
        }
    }

    #[test]
    fn a_restored_grant_reactivates_only_the_keys_it_keeps() {
        let inactive = |id, c| AccessKey {
            active: false,
            ..key(id, c)
        };
        // The Secret's key was deactivated when the grant was revoked: it comes back.
        let p = plan_keys(
            &[inactive("A", 0)],
            Some(&creds("A", None, None)),
            Some("A"),
            NO_ROTATION,
            t(5),
        );
        assert_eq!(p.reactivate, vec!["A".to_string()]);
        assert!(!p.create && p.delete.is_empty());
        // A key the Secret does not vouch for is deleted, never reactivated.
        let p = plan_keys(
            &[inactive("A", 0), inactive("B", 1)],
            Some(&creds("B", None, None)),
            Some("B"),
            NO_ROTATION,
            t(5),
        );
        assert_eq!(p.reactivate, vec!["B".to_string()]);
        assert_eq!(p.delete, vec!["A".to_string()]);
    }

    #[test]
    fn secret_creds_detect_edits() {
        let mut s = Secret {
            metadata: ObjectMeta {
                annotations: Some(BTreeMap::from([
                    (ANN_KEY_ID.to_string(), "A".to_string()),
                    (ANN_KEY_HASH.to_string(), sha256_hex(b"secret")),
                ])),
                ..Default::default()
            },
            data: Some(BTreeMap::from([
                ("AWS_ACCESS_KEY_ID".to_string(), ByteString(b"A".to_vec())),
                (
                    "AWS_SECRET_ACCESS_KEY".to_string(),
                    ByteString(b"secret".to_vec()),
                ),
            ])),
            ..Default::default()
        };
        assert!(secret_creds(&s).unwrap().intact);
        s.data.as_mut().unwrap().insert(
            "AWS_SECRET_ACCESS_KEY".into(),
            ByteString(b"edited".to_vec()),
        );
        assert!(!secret_creds(&s).unwrap().intact);
    }
}
