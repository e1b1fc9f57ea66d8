//! The pure planner of a BucketAccess pass: from what was observed in AWS and the Secret to the
//! writes to make, the Secret's contents and the status that result.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use serde_json::Value;

use super::keys::{KeyPlan, PreviousKey, RotationPolicy, plan_keys, secret_creds};
pub use super::outcome::Outcome;
use super::outputs;
use super::pod_identity::{self, AssociationPlan};
use super::{identity_of, is_served, secret_name};
use crate::api::condition::Reason;
use crate::api::{BucketAccess, CredentialsType};
use crate::aws::eks::Association;
use crate::aws::iam::{AccessKey, Identity, Secret as SecretValue};
use crate::aws::naming::{self, sha256_hex};
use crate::aws::policy;
use crate::aws::tags::Owner;
use crate::reconcile::{Blocked, Settings, has_finalizer, owner};

/// Facts about the bucket a BucketAccess grants: derived from its Bucket's spec and UID and
/// confirmed by the bucket's ownership tags in AWS, never taken from status.
#[derive(Clone, Debug, PartialEq)]
pub struct BucketFacts {
    pub name: String,
    pub region: String,
    pub arn: String,
}

/// One of `spec.additionalBuckets` as a pass found it, in the spec's order.
#[derive(Clone, Debug, PartialEq)]
pub enum Also {
    /// Its bucket's tags in AWS name its Bucket as owner: granted.
    Granted(BucketFacts),
    /// Left out of the grant, and why.
    LeftOut(Blocked),
}

/// An IAM user or role with this access's name, as found in AWS.
#[derive(Clone, Debug, PartialEq)]
pub enum Found<T> {
    Absent,
    /// Exists, but its tags name someone else (who, in words).
    Foreign(String),
    Ours(T),
}

/// The access's IAM user or role, when it is ours.
#[derive(Clone, Debug, PartialEq)]
pub struct IdentityState {
    pub arn: String,
    pub boundary: Option<String>,
    /// The inline access policy, if any.
    pub policy: Option<Value>,
    /// The trust policy (roles only).
    pub trust_policy: Option<Value>,
    /// Its access keys, oldest first (users only).
    pub keys: Vec<AccessKey>,
}

/// Everything a pass decides from, read before it writes anything.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub bucket: BucketFacts,
    /// `spec.additionalBuckets`, each granted or left out.
    pub also: Vec<Also>,
    pub identity: Found<IdentityState>,
    /// The Pod Identity association of the access's ServiceAccount (`PodIdentity` only).
    pub association: Found<Association>,
    /// The Secret this access writes, as read at the start of the pass (never someone else's).
    pub secret: Option<Secret>,
    /// Its ConfigMap of bucket facts (`spec.configMap`), read likewise.
    pub config_map: Option<ConfigMap>,
    pub now: jiff::Timestamp,
}

/// One write, in the order the plan lists them: the finalizer, then IAM.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// The finalizer, in place before anything is created in AWS (a Kubernetes write).
    AddFinalizer,
    CreateUser,
    /// Creates the role with its trust policy, for this ServiceAccount.
    CreateRole(Value),
    /// Sets the permissions boundary; `drift`: someone changed or removed it.
    PutBoundary {
        drift: bool,
    },
    PutTrustPolicy {
        trust: Value,
        drift: bool,
    },
    PutPolicy {
        drift: bool,
    },
    DeleteKey(String),
    /// Brings back a kept key that a revoked grant deactivated.
    ReactivateKey(String),
    CreateKey,
    /// The ServiceAccount's Pod Identity association, after the role it names; `drift`: it
    /// was deleted outside.
    CreateAssociation {
        drift: bool,
    },
    /// Puts the association's role and session policy back.
    UpdateAssociation {
        drift: bool,
    },
}

/// One write that takes a grant back. Keys stay, inactive, so the same Secret works again if
/// the grant comes back.
#[derive(Clone, Debug, PartialEq)]
pub enum Revoke {
    DeletePolicy,
    DeactivateKey(String),
    /// A shared role's association: its session policy is all that narrows the role.
    DeleteAssociation(String),
}

/// Grants never outlive ownership: the writes that take this access's grant back, and why no
/// grant may stand. Nothing is written once nothing is left to revoke.
#[derive(Clone, Debug, PartialEq)]
pub struct Withdrawal {
    pub identity: Identity,
    pub changes: Vec<Revoke>,
    pub why: Blocked,
}

/// The key pair the Secret hands out.
#[derive(Clone, Debug, PartialEq)]
pub struct ActiveKey {
    pub id: String,
    pub created: jiff::Timestamp,
    pub secret: SecretValue,
    /// SHA-256 of the secret as the Secret holds it: proves later that nobody edited it.
    pub secret_sha256: String,
}

/// What kind of identity a plan is for.
#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    User,
    /// A role that this ServiceAccount assumes.
    Role {
        service_account: String,
    },
    /// No identity of its own: this ServiceAccount's Pods get the shared role, narrowed by the
    /// association's session policy (`PodIdentity` with `--pod-identity-role-arn`).
    Shared {
        service_account: String,
    },
}

/// The writes that bring IAM in line with the spec, and what the Secret and status then say.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub kind: Kind,
    /// Name of the IAM user or role.
    pub name: String,
    pub path: String,
    pub boundary: String,
    pub tags: BTreeMap<String, String>,
    pub policy: Value,
    /// None in steady state.
    pub changes: Vec<Change>,
    /// ARN of the user or role; `None` until the apply creates it.
    pub arn: Option<String>,
    /// The key the Secret keeps; `None` for roles, and until the apply creates a new key.
    pub key: Option<ActiveKey>,
    pub previous: Option<PreviousKey>,
    /// When the plan changes by itself (a rotation or a grace period ending).
    pub wake_at: Option<jiff::Timestamp>,
    pub secret_name: String,
    /// The ConfigMap of bucket facts (`spec.configMap`), if the access asks for one.
    pub config_map: Option<String>,
    pub bucket: BucketFacts,
    /// The other Buckets granted (`spec.additionalBuckets`): each Bucket's name and facts.
    pub also: Vec<(String, BucketFacts)>,
    /// Why each Bucket of `spec.additionalBuckets` that is not granted is left out.
    pub left_out: Vec<Blocked>,
    pub rotation: RotationPolicy,
    /// The ServiceAccount's Pod Identity association (`PodIdentity` only).
    pub association: Option<AssociationPlan>,
}

/// What only the apply learns: a new user's or role's ARN, a new access key, and the
/// access's resourceVersion once its finalizer is written.
#[derive(Clone, Debug, PartialEq)]
pub struct Learned {
    pub arn: String,
    pub key: Option<ActiveKey>,
    pub version: Option<String>,
    /// The Pod Identity association's id.
    pub association: Option<String>,
}

/// The pure heart of the BucketAccess reconciler: which writes turn `observed` into what
/// `access` asks for, or why none may be made.
pub fn plan(
    access: &BucketAccess,
    settings: &Settings,
    observed: &Snapshot,
) -> Result<Plan, Blocked> {
    let owner = owner(access, &settings.cluster_name);
    let facts = &observed.bucket;
    let identity = identity_of(access, &owner, &observed.identity);
    outputs::check_bucket_keys(access).map_err(|msg| Blocked::new(Reason::InvalidSpec, msg))?;
    let (also, left_out) = also_granted(access, &observed.also);
    let mut plan = Plan {
        kind: Kind::User,
        name: identity.name().to_string(),
        path: settings.iam_path.clone(),
        boundary: settings.boundary_arn.clone(),
        tags: owner.tags(),
        policy: grant_policy(access, facts, &observed.also),
        changes: Vec::new(),
        arn: None,
        key: None,
        previous: None,
        wake_at: None,
        secret_name: secret_name(access),
        config_map: outputs::config_map_name(access),
        bucket: facts.clone(),
        also,
        left_out,
        rotation: RotationPolicy::of(access),
        association: None,
    };
    if let Some(interval) = plan.rotation.interval
        && interval < settings.min_rotation_interval
    {
        let msg = format!(
            "spec.credentials.rotation.interval {interval:?} is shorter than the operator's minimum of {:?} (--min-rotation-interval): every rotation costs IAM writes",
            settings.min_rotation_interval
        );
        return Err(Blocked::new(Reason::InvalidSpec, msg));
    }
    outputs::check_key_map(&access.spec.credentials.secret_keys)
        .map_err(|msg| Blocked::new(Reason::InvalidSpec, msg))?;
    plan.association = pod_identity::target(access, settings, &plan)?;
    let shared = plan.session_policy().is_some();
    let trust = match identity {
        Identity::User(_) => None,
        Identity::Role(_) => Some(role_trust(&mut plan, access, settings, &owner, shared)?),
    };
    check_policy_size(&plan)?;
    if !has_finalizer(access) {
        plan.changes.push(Change::AddFinalizer);
    }
    let served = is_served(access);
    if !shared {
        let keys = plan_identity(&mut plan, &observed.identity, trust, served)?;
        if plan.kind == Kind::User {
            plan_user_keys(&mut plan, access, keys, observed);
        }
    }
    pod_identity::plan_association(&mut plan, &observed.association, served)?;
    Ok(plan)
}

/// The Buckets of `spec.additionalBuckets` granted (name and facts), and why the others are
/// left out, from what the pass found (`found`, in the spec's order).
fn also_granted(
    access: &BucketAccess,
    found: &[Also],
) -> (Vec<(String, BucketFacts)>, Vec<Blocked>) {
    let (mut granted, mut left_out) = (Vec::new(), Vec::new());
    for (g, found) in access.spec.additional_buckets.iter().zip(found) {
        match found {
            Also::Granted(facts) => granted.push((g.bucket_ref.name.clone(), facts.clone())),
            Also::LeftOut(why) => left_out.push(why.clone()),
        }
    }
    (granted, left_out)
}

/// The access policy: the grant on its Bucket, then on each other Bucket granted (`found`, in
/// the spec's order).
fn grant_policy(access: &BucketAccess, facts: &BucketFacts, found: &[Also]) -> Value {
    let spec = &access.spec;
    let first = policy::Grant {
        bucket: &facts.name,
        permission: spec.permission,
        prefix: spec.prefix.as_deref(),
    };
    let others = spec.additional_buckets.iter().zip(found);
    let others = others.filter_map(|(g, found)| match found {
        Also::Granted(facts) => Some(policy::Grant {
            bucket: &facts.name,
            permission: g.permission,
            prefix: g.prefix.as_deref(),
        }),
        Also::LeftOut(_) => None,
    });
    let grants: Vec<_> = std::iter::once(first).chain(others).collect();
    policy::access_policy_of(naming::partition(&facts.region), &grants)
}

/// IAM's limits on the inline policies of one user and of one role, in characters without
/// whitespace (all of an identity's inline policies together; it has only this one). A shared
/// role's session policy has EKS's own limit ([`pod_identity::SESSION_POLICY_MAX`]).
pub const USER_POLICY_MAX: usize = 2048;
pub const ROLE_POLICY_MAX: usize = 10240;

/// Refuses a grant whose policy IAM would refuse, before anything is written: a PutUserPolicy
/// refused after the user was made would leave it without its grant.
fn check_policy_size(plan: &Plan) -> Result<(), Blocked> {
    let (max, of) = match plan.kind {
        Kind::User => (USER_POLICY_MAX, "an IAM user's inline policies"),
        Kind::Role { .. } => (ROLE_POLICY_MAX, "an IAM role's inline policies"),
        Kind::Shared { .. } => return Ok(()),
    };
    let size = plan.policy.to_string().len();
    if size <= max {
        return Ok(());
    }
    let msg = format!(
        "the access policy of this grant is {size} characters, over IAM's limit of {max} for {of}: grant fewer Buckets (spec.additionalBuckets) or use shorter prefixes"
    );
    Err(Blocked::new(Reason::InvalidSpec, msg))
}

/// The trust policy of the role the access's ServiceAccount assumes (through the cluster's
/// OIDC provider, or EKS Pod Identity); makes `plan` a role's, or the shared role's (`shared`:
/// no role of its own, no trust).
fn role_trust(
    plan: &mut Plan,
    access: &BucketAccess,
    settings: &Settings,
    owner: &Owner,
    shared: bool,
) -> Result<Value, Blocked> {
    let sa = access
        .spec
        .credentials
        .service_account_name
        .clone()
        .unwrap_or_default();
    let (ns, eks) = (&owner.namespace, settings.eks_cluster_arn.as_deref());
    let trust = match (access.spec.credentials.type_, &settings.oidc_provider_arn) {
        // `pod_identity::target` refused an operator without an EKS cluster.
        (CredentialsType::PodIdentity, _) => {
            policy::pod_identity_trust_policy(eks.unwrap_or_default(), ns, &sa)
        }
        (_, Some(oidc)) => policy::irsa_trust_policy(oidc, ns, &sa),
        (_, None) => {
            let msg = "ServiceAccountRole credentials need the operator's --oidc-provider-arn, which is not set";
            return Err(Blocked::new(Reason::InvalidSpec, msg));
        }
    };
    plan.kind = if shared {
        Kind::Shared {
            service_account: sa,
        }
    } else {
        Kind::Role {
            service_account: sa,
        }
    };
    Ok(trust)
}

/// The user's or role's own writes: create it (a role with `trust`), or put back its boundary
/// and trust policy; then its access policy. Returns its access keys.
fn plan_identity<'a>(
    plan: &mut Plan,
    found: &'a Found<IdentityState>,
    trust: Option<Value>,
    served: bool,
) -> Result<&'a [AccessKey], Blocked> {
    let (policy, keys) = match found {
        Found::Foreign(who) => {
            let msg = format!(
                "{} already exists and is {who}; it will not be modified",
                plan.identity()
            );
            return Err(Blocked::new(Reason::OwnershipConflict, msg));
        }
        Found::Absent => {
            plan.changes
                .push(trust.map_or(Change::CreateUser, Change::CreateRole));
            (None, &[][..])
        }
        Found::Ours(o) => {
            // One from before boundaries, or one whose boundary was changed.
            if o.boundary.as_ref() != Some(&plan.boundary) {
                let drift = o.boundary.is_some();
                plan.changes.push(Change::PutBoundary { drift });
            }
            if let Some(trust) = trust
                && o.trust_policy.as_ref() != Some(&trust)
            {
                plan.changes.push(Change::PutTrustPolicy {
                    trust,
                    drift: served,
                });
            }
            plan.arn = Some(o.arn.clone());
            (o.policy.as_ref(), &o.keys[..])
        }
    };
    if policy != Some(&plan.policy) {
        let drift = served && policy.is_some();
        plan.changes.push(Change::PutPolicy { drift });
    }
    Ok(keys)
}

/// The user's key writes, and the key pair the Secret keeps.
fn plan_user_keys(plan: &mut Plan, access: &BucketAccess, keys: &[AccessKey], observed: &Snapshot) {
    let secret = observed.secret.as_ref();
    let last_active = access
        .status
        .as_ref()
        .and_then(|s| s.access_key_id.as_deref());
    let creds = secret.and_then(secret_creds);
    let KeyPlan {
        delete,
        create,
        active,
        previous,
        wake_at,
        reactivate,
    } = plan_keys(
        keys,
        creds.as_ref(),
        last_active,
        plan.rotation,
        observed.now,
    );
    // Deletions before any creation: never more than two keys.
    plan.changes
        .extend(delete.into_iter().map(Change::DeleteKey));
    plan.changes
        .extend(reactivate.into_iter().map(Change::ReactivateKey));
    if create {
        plan.changes.push(Change::CreateKey);
    }
    // Keep the pair the Secret already holds.
    let held = creds.as_ref().and_then(|c| c.secret_key.as_deref());
    plan.key = active.map(|k| {
        let old: &[u8] = secret
            .and_then(|s| s.data.as_ref())
            .zip(held)
            .and_then(|(d, key)| d.get(key))
            .map_or(&[], |b| b.0.as_slice());
        ActiveKey {
            id: k.id,
            created: k.created,
            secret: SecretValue::new(String::from_utf8_lossy(old)),
            secret_sha256: sha256_hex(old),
        }
    });
    plan.previous = previous;
    plan.wake_at = wake_at;
}

/// Takes back all that `found` is granted: its access policy and its active keys.
/// `association`: the ServiceAccount's association when it names the shared role, which goes
/// with the grant (a role of its own keeps it, and loses its policy).
pub fn withdrawal(
    identity: Identity,
    found: &Found<IdentityState>,
    association: &Found<Association>,
    why: Blocked,
) -> Withdrawal {
    let mut changes = Vec::new();
    if let Found::Ours(a) = association {
        changes.push(Revoke::DeleteAssociation(a.id.clone()));
    }
    if let Found::Ours(o) = found {
        if o.policy.is_some() {
            changes.push(Revoke::DeletePolicy);
        }
        let active = o.keys.iter().filter(|k| k.active);
        changes.extend(active.map(|k| Revoke::DeactivateKey(k.id.clone())));
    }
    Withdrawal {
        identity,
        changes,
        why,
    }
}

impl Withdrawal {
    /// The event once every step is written; `None` when nothing was granted.
    pub fn note(&self) -> Option<String> {
        let done: Vec<String> = self
            .changes
            .iter()
            .map(|step| match step {
                Revoke::DeletePolicy => format!("removed the access policy of {}", self.identity),
                Revoke::DeactivateKey(id) => format!("deactivated access key {id}"),
                Revoke::DeleteAssociation(id) => {
                    format!("deleted EKS Pod Identity association {id}")
                }
            })
            .collect();
        (!done.is_empty()).then(|| format!("{}: {}", self.why.message, done.join(", ")))
    }

    /// What the access reports: the same whether or not this pass revoked anything, so a
    /// steady pass writes nothing.
    pub fn reported(&self) -> Blocked {
        let msg = format!("{}; no access is granted", self.why.message);
        Blocked::new(self.why.reason, msg)
    }
}

impl Plan {
    /// What the pass knows before any write: the identity's ARN, the Secret's key and the
    /// association's id as found (the apply fills in what it creates).
    pub fn known(&self) -> Learned {
        Learned {
            arn: self.arn.clone().unwrap_or_default(),
            key: self.key.clone(),
            version: None,
            association: self.association.as_ref().and_then(|a| a.id.clone()),
        }
    }

    /// The user or role this plan writes.
    pub fn identity(&self) -> Identity {
        match self.kind {
            Kind::User => Identity::User(self.name.clone()),
            Kind::Role { .. } | Kind::Shared { .. } => Identity::Role(self.name.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use k8s_openapi::ByteString;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use serde_json::json;

    use super::super::keys::{ANN_KEY_HASH, ANN_KEY_ID, ANN_PREVIOUS, ANN_ROTATED_AT};
    use super::*;
    use crate::api::BucketAccessStatus;
    use crate::api::condition;

    const BOUNDARY: &str = "arn:aws:iam::123456789012:policy/s3-operator/c/s3-operator-boundary";
    const USER_ARN: &str = "arn:aws:iam::123456789012:user/s3-operator/c/u";

    fn settings() -> Settings {
        Settings::for_tests()
    }

    fn t(s: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn access(credentials: Value) -> BucketAccess {
        serde_json::from_value(json!({
            "apiVersion": "s3.operator.dev/v1alpha1", "kind": "BucketAccess",
            "metadata": {"name": "a", "namespace": "ns", "uid": "uid-a", "generation": 1,
                         "finalizers": [crate::api::FINALIZER]},
            "spec": {"bucketRef": {"name": "b"}, "permission": "ReadWrite",
                     "credentials": credentials},
        }))
        .unwrap()
    }

    /// `a` as a pass that served its spec leaves it.
    fn served(mut a: BucketAccess, key_id: &str) -> BucketAccess {
        let ready = condition::ready(&[], true, Reason::Available, "ok", Some(1), t(0));
        a.status = Some(BucketAccessStatus {
            conditions: vec![ready],
            observed_generation: Some(1),
            access_key_id: Some(key_id.into()),
            ..Default::default()
        });
        a
    }

    fn facts() -> BucketFacts {
        BucketFacts {
            name: "s3op-b".into(),
            region: "us-east-1".into(),
            arn: "arn:aws:s3:::s3op-b".into(),
        }
    }

    fn doc(a: &BucketAccess) -> Value {
        policy::access_policy("aws", "s3op-b", a.spec.permission, None)
    }

    fn key(id: &str, created: i64) -> AccessKey {
        AccessKey {
            id: id.into(),
            created: t(created),
            active: true,
        }
    }

    fn new_key(id: &str, created: i64, secret: &str) -> ActiveKey {
        ActiveKey {
            id: id.into(),
            created: t(created),
            secret: SecretValue::new(secret),
            secret_sha256: sha256_hex(secret.as_bytes()),
        }
    }

    /// The Secret a pass with `outcome` writes, as a later pass reads it.
    fn secret_of(outcome: &Outcome) -> Secret {
        Secret {
            metadata: ObjectMeta {
                annotations: Some(outcome.annotations.clone()),
                ..Default::default()
            },
            data: Some(
                outcome
                    .data
                    .iter()
                    .map(|(k, v)| (k.clone(), ByteString(v.clone().into_bytes())))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    fn observed(identity: Found<IdentityState>, secret: Option<Secret>, now: i64) -> Snapshot {
        Snapshot {
            bucket: facts(),
            also: vec![],
            identity,
            association: Found::Absent,
            secret,
            config_map: None,
            now: t(now),
        }
    }

    /// What an apply that made the user and its key "A" (secret "s3cr3t") learned.
    fn user_made() -> Learned {
        Learned {
            arn: USER_ARN.into(),
            key: Some(new_key("A", 0, "s3cr3t")),
            version: None,
            association: None,
        }
    }

    fn ours(a: &BucketAccess, keys: Vec<AccessKey>) -> Found<IdentityState> {
        Found::Ours(user(a, keys))
    }

    fn user(a: &BucketAccess, keys: Vec<AccessKey>) -> IdentityState {
        IdentityState {
            arn: USER_ARN.into(),
            boundary: Some(BOUNDARY.into()),
            policy: Some(doc(a)),
            trust_policy: None,
            keys,
        }
    }

    /// The Secret's keys go under the names the key map gives; a new map renames the keys of the
    /// same pair (no new key, nothing written to IAM); a map that would lose a value is refused.
    #[test]
    fn a_key_map_renames_the_secret_and_a_new_one_keeps_its_pair() {
        let cosi = json!({"secretKeys": {"AWS_ACCESS_KEY_ID": "COSI_S3_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY": "COSI_S3_ACCESS_SECRET_KEY"}});
        let a = access(cosi);
        let p = plan(&a, &settings(), &observed(Found::Absent, None, 0)).unwrap();
        let learned = user_made();
        let out = p.outcome(&a, &learned, None, t(0));
        assert_eq!(out.data["COSI_S3_ACCESS_KEY_ID"], "A");
        assert_eq!(out.data["COSI_S3_ACCESS_SECRET_KEY"], "s3cr3t");
        assert!(!out.data.contains_key("AWS_SECRET_ACCESS_KEY"));
        assert_eq!(out.data["BUCKET_NAME"], "s3op-b", "not renamed");

        // The map is dropped: the pair the Secret holds under COSI's names is kept.
        let a = served(access(json!({})), "A");
        let o = observed(ours(&a, vec![key("A", 0)]), Some(secret_of(&out)), 5);
        let next = plan(&a, &settings(), &o).unwrap();
        assert_eq!(next.changes, [], "no new key");
        let learned = Learned {
            key: next.key.clone(),
            ..learned
        };
        let again = next.outcome(&a, &learned, None, t(5));
        assert_eq!(again.data["AWS_ACCESS_KEY_ID"], "A");
        assert_eq!(again.data["AWS_SECRET_ACCESS_KEY"], "s3cr3t");
        assert!(!again.data.contains_key("COSI_S3_ACCESS_KEY_ID"));

        let lossy = access(json!({"secretKeys": {"AWS_REGION": "X", "BUCKET_NAME": "X"}}));
        let refused = plan(&lossy, &settings(), &observed(Found::Absent, None, 0)).unwrap_err();
        assert_eq!(refused.reason, Reason::InvalidSpec);
        assert!(
            refused.message.contains("spec.credentials.secretKeys"),
            "{refused:?}"
        );
    }

    /// `a` naming `others` besides its Bucket `b`: (name, permission, prefix) each.
    fn with_others(mut a: BucketAccess, others: &[(&str, &str, Option<&str>)]) -> BucketAccess {
        a.spec.additional_buckets = others
            .iter()
            .map(|(name, permission, prefix)| {
                serde_json::from_value(json!({"bucketRef": {"name": name},
                    "permission": permission, "prefix": prefix}))
                .unwrap()
            })
            .collect();
        a
    }

    fn granted(bucket: &str) -> Also {
        Also::Granted(BucketFacts {
            name: bucket.into(),
            region: "eu-west-1".into(),
            arn: format!("arn:aws:s3:::{bucket}"),
        })
    }

    /// One identity, one policy and one Secret for several Buckets: each granted Bucket gets
    /// its own statements (its permission, its prefix) and its own keys; a Bucket left out
    /// (gone, or its bucket no longer its) is in neither, and Ready says why while the grant on
    /// the others stands.
    #[test]
    fn several_buckets_share_one_identity_each_with_its_own_grant_and_keys() {
        let a = with_others(
            access(json!({})),
            &[
                ("logs", "ReadOnly", Some("app/")),
                ("gone", "ReadWrite", None),
            ],
        );
        let why = Blocked::new(
            Reason::BucketNotFound,
            "Bucket gone does not exist in namespace ns",
        );
        let o = Snapshot {
            also: vec![granted("s3op-logs"), Also::LeftOut(why)],
            ..observed(Found::Absent, None, 0)
        };
        let p = plan(&a, &settings(), &o).unwrap();
        let ro = crate::api::Permission::ReadOnly;
        let mut want = policy::access_policy("aws", "s3op-b", a.spec.permission, None);
        let theirs = policy::access_policy("aws", "s3op-logs", ro, Some("app/"));
        for mut st in theirs["Statement"].as_array().unwrap().clone() {
            st["Sid"] = json!(format!("{}1", st["Sid"].as_str().unwrap()));
            want["Statement"].as_array_mut().unwrap().push(st);
        }
        assert_eq!(p.policy, want);
        assert!(
            !p.policy.to_string().contains("gone"),
            "left out of the policy"
        );
        assert_eq!(
            p.changes,
            [
                Change::CreateUser,
                Change::PutPolicy { drift: false },
                Change::CreateKey
            ],
            "one identity, one policy write, one key"
        );
        let learned = user_made();
        let out = p.outcome(&a, &learned, None, t(0));
        assert_eq!(
            out.data["BUCKET_NAME"], "s3op-b",
            "the one-bucket keys stay"
        );
        assert_eq!(out.data["BUCKET_NAME_B"], "s3op-b");
        assert_eq!(out.data["BUCKET_NAME_LOGS"], "s3op-logs");
        assert_eq!(out.data["BUCKET_ARN_LOGS"], "arn:aws:s3:::s3op-logs");
        assert_eq!(out.data["BUCKET_REGION_LOGS"], "eu-west-1");
        assert!(!out.data.keys().any(|k| k.ends_with("_GONE")));
        let ready = &out.status.conditions[0];
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "BucketNotFound")
        );
        assert!(
            ready.message.contains("s3op-b, s3op-logs"),
            "{}",
            ready.message
        );
        assert!(
            ready.message.contains("Bucket gone does not exist"),
            "{}",
            ready.message
        );

        // One Bucket alone: the Secret has no per-Bucket keys, as before.
        let one = access(json!({}));
        let p = plan(&one, &settings(), &observed(Found::Absent, None, 0)).unwrap();
        let out = p.outcome(&one, &learned, None, t(0));
        assert!(!out.data.contains_key("BUCKET_NAME_B"));
        assert_eq!(p.policy, doc(&one));
    }

    /// IAM's inline policy limits are checked before any write: too many Buckets (or too long
    /// prefixes) for a user's 2,048 characters is InvalidSpec naming the limit, and nothing is
    /// planned; a role's limit is 10,240.
    #[test]
    fn a_grant_over_iams_policy_size_limit_is_refused_before_any_write() {
        let long = "p".repeat(200);
        let others: Vec<(String, Option<&str>)> = (0..3)
            .map(|i| (format!("b{i}"), Some(long.as_str())))
            .collect();
        let others: Vec<(&str, &str, Option<&str>)> = others
            .iter()
            .map(|(n, p)| (n.as_str(), "ReadWrite", *p))
            .collect();
        let a = with_others(access(json!({})), &others);
        let o = Snapshot {
            also: (0..3).map(|i| granted(&format!("s3op-b{i}"))).collect(),
            ..observed(Found::Absent, None, 0)
        };
        let refused = plan(&a, &settings(), &o).unwrap_err();
        assert_eq!(refused.reason, Reason::InvalidSpec);
        assert!(refused.message.contains("limit of 2048"), "{refused}");
        assert!(
            refused.message.contains("spec.additionalBuckets"),
            "{refused}"
        );
        // Two of them fit.
        let a = with_others(access(json!({})), &others[..1]);
        let o = Snapshot {
            also: vec![granted("s3op-b0")],
            ..observed(Found::Absent, None, 0)
        };
        let p = plan(&a, &settings(), &o).unwrap();
        assert!(p.policy.to_string().len() <= USER_POLICY_MAX);
        // A role holds more.
        let irsa = json!({"type": "ServiceAccountRole", "serviceAccountName": "app"});
        let settings = Settings {
            oidc_provider_arn: Some("arn:aws:iam::123456789012:oidc-provider/oidc.example".into()),
            ..settings()
        };
        let a = with_others(access(irsa), &others);
        let o = Snapshot {
            also: (0..3).map(|i| granted(&format!("s3op-b{i}"))).collect(),
            ..observed(Found::Absent, None, 0)
        };
        let p = plan(&a, &settings, &o).unwrap();
        assert!(p.policy.to_string().len() > USER_POLICY_MAX);
    }

    /// Each Bucket's keys end in its name in capitals: two names that would end them alike,
    /// or a key renamed onto one of them, would lose a value and are refused.
    #[test]
    fn bucket_keys_that_would_collide_are_refused() {
        let clash = with_others(
            access(json!({})),
            &[("my-data", "ReadOnly", None), ("my.data", "ReadOnly", None)],
        );
        let refused = plan(&clash, &settings(), &observed(Found::Absent, None, 0)).unwrap_err();
        assert_eq!(refused.reason, Reason::InvalidSpec);
        assert!(refused.message.contains("BUCKET_NAME_MY_DATA"), "{refused}");
        let renamed = with_others(
            access(json!({"secretKeys": {"BUCKET_NAME": "BUCKET_NAME_LOGS"}})),
            &[("logs", "ReadOnly", None)],
        );
        let refused = plan(&renamed, &settings(), &observed(Found::Absent, None, 0)).unwrap_err();
        assert!(
            refused.message.contains("is a key of Bucket logs"),
            "{refused}"
        );
    }

    #[test]
    fn first_pass_creates_the_user_its_policy_and_one_key() {
        let a = access(json!({}));
        let o = observed(Found::Absent, None, 0);
        let p = plan(&a, &settings(), &o).unwrap();
        assert_eq!(
            p.changes,
            [
                Change::CreateUser,
                Change::PutPolicy { drift: false },
                Change::CreateKey
            ]
        );
        let learned_by_apply = (p.arn.as_ref(), p.key.as_ref());
        assert_eq!(learned_by_apply, (None, None));
        let learned = user_made();
        let out = p.outcome(&a, &learned, Some("http://moto:5000"), t(0));
        assert_eq!(out.data["AWS_ACCESS_KEY_ID"], "A");
        assert_eq!(out.data["AWS_SECRET_ACCESS_KEY"], "s3cr3t");
        assert_eq!(out.data["BUCKET_NAME"], "s3op-b");
        assert_eq!(out.data["AWS_ENDPOINT_URL_S3"], "http://moto:5000");
        assert_eq!(out.annotations[ANN_KEY_ID], "A");
        assert_eq!(out.annotations[ANN_PREVIOUS], "");
        assert_eq!(out.status.access_key_id.as_deref(), Some("A"));
        assert_eq!(out.status.user_arn.as_deref(), Some(USER_ARN));
        assert!(condition::is_ready(&out.status.conditions));
        assert!(
            !format!("{out:?} {p:?}").contains("s3cr3t"),
            "secrets never print"
        );

        // The next pass finds what this one wrote: nothing to do, the same Secret and status.
        let a = served(a, "A");
        let o = observed(ours(&a, vec![key("A", 0)]), Some(secret_of(&out)), 5);
        let next = plan(&a, &settings(), &o).unwrap();
        assert_eq!(next.changes, []);
        let again = next.outcome(
            &a,
            &Learned {
                arn: USER_ARN.into(),
                key: next.key.clone(),
                version: None,
                association: None,
            },
            Some("http://moto:5000"),
            t(5),
        );
        assert_eq!((again.data, again.annotations), (out.data, out.annotations));
    }

    /// Each rotation costs IAM writes: an interval below the operator's floor is refused before
    /// any write, naming the field and the flag.
    #[test]
    fn a_rotation_interval_below_the_operators_minimum_is_refused() {
        let a = served(
            access(json!({"rotation": {"interval": "100s", "gracePeriod": "10s"}})),
            "A",
        );
        let o = observed(ours(&a, vec![key("A", 0)]), None, 100);
        let mut s = settings();
        s.min_rotation_interval = Duration::from_secs(3600);
        let refused = plan(&a, &s, &o).unwrap_err();
        assert_eq!(refused.reason, Reason::InvalidSpec);
        assert!(
            refused
                .message
                .contains("spec.credentials.rotation.interval 100s")
                && refused.message.contains("--min-rotation-interval"),
            "{}",
            refused.message
        );
        s.min_rotation_interval = Duration::from_secs(100);
        assert!(plan(&a, &s, &o).is_ok(), "the minimum itself is allowed");
    }

    #[test]
    fn rotation_creates_a_key_and_keeps_the_old_one_through_its_grace_period() {
        let a = served(
            access(json!({"rotation": {"interval": "100s", "gracePeriod": "10s"}})),
            "A",
        );
        let first = Outcome {
            data: BTreeMap::from([
                ("AWS_ACCESS_KEY_ID".into(), "A".into()),
                ("AWS_SECRET_ACCESS_KEY".into(), "old".into()),
            ]),
            annotations: BTreeMap::from([
                (ANN_KEY_ID.into(), "A".into()),
                (ANN_KEY_HASH.into(), sha256_hex(b"old")),
            ]),
            status: Default::default(),
        };
        let o = observed(ours(&a, vec![key("A", 0)]), Some(secret_of(&first)), 100);
        let p = plan(&a, &settings(), &o).unwrap();
        assert_eq!(p.changes, [Change::CreateKey]);
        let previous = PreviousKey {
            id: "A".into(),
            since: t(100),
        };
        assert_eq!(p.previous.as_ref(), Some(&previous));
        assert_eq!(p.wake_at, Some(t(110)), "the grace period ends");
        let learned = Learned {
            arn: USER_ARN.into(),
            key: Some(new_key("B", 100, "new")),
            version: None,
            association: None,
        };
        let out = p.outcome(&a, &learned, None, t(100));
        assert_eq!(out.data["AWS_ACCESS_KEY_ID"], "B");
        assert_eq!(out.annotations[ANN_PREVIOUS], "A");
        assert_eq!(out.annotations[ANN_ROTATED_AT], t(100).to_string());
        assert_eq!(out.status.next_rotation_time, Some(Time(t(200))));
        assert!(!out.data.contains_key("AWS_ENDPOINT_URL_S3"));

        // After the grace period the old key goes, and nothing else changes.
        let o = observed(
            ours(&a, vec![key("A", 0), key("B", 100)]),
            Some(secret_of(&out)),
            111,
        );
        let a = served(a, "B");
        let p = plan(&a, &settings(), &o).unwrap();
        assert_eq!(p.changes, [Change::DeleteKey("A".into())]);
        assert_eq!(p.key.as_ref().map(|k| k.id.as_str()), Some("B"));
    }

    /// The pass of an access that rotated key A to key B at 100 (interval 100s, grace 10s),
    /// reading `secret` at `now`; and what it hands out.
    fn rotated_pass(secret: Secret, now: i64) -> (Plan, Outcome) {
        let a = served(
            access(json!({"rotation": {"interval": "100s", "gracePeriod": "10s"}})),
            "B",
        );
        let o = observed(
            ours(&a, vec![key("A", 0), key("B", 100)]),
            Some(secret),
            now,
        );
        let p = plan(&a, &settings(), &o).unwrap();
        // A key the plan creates, as IAM would answer.
        let created = || new_key("C", now, "newest");
        let learned = Learned {
            arn: USER_ARN.into(),
            key: p.key.clone().or_else(|| Some(created())),
            version: None,
            association: None,
        };
        let out = p.outcome(&a, &learned, None, t(now));
        (p, out)
    }

    /// The Secret the rotation to B wrote: B's pair, A kept through its grace period.
    fn rotated_secret() -> Secret {
        let mut s = Secret {
            data: Some(BTreeMap::from([
                ("AWS_ACCESS_KEY_ID".into(), ByteString(b"B".to_vec())),
                ("AWS_SECRET_ACCESS_KEY".into(), ByteString(b"new".to_vec())),
            ])),
            ..Default::default()
        };
        s.metadata.annotations = Some(BTreeMap::from([
            (ANN_KEY_ID.into(), "B".into()),
            (ANN_KEY_HASH.into(), sha256_hex(b"new")),
            (ANN_PREVIOUS.into(), "A".into()),
            (ANN_ROTATED_AT.into(), t(100).to_string()),
        ]));
        s
    }

    /// Issue 34, item 2: a tenant moving the Secret's rotation annotations steers nothing. A
    /// rotated-at moved ahead (or a previous key named anew) neither keeps the previous key past
    /// its grace period nor holds rotation, and wakes no pass before the real deadline; the plan
    /// is the one of the untouched Secret, and the annotations are written back.
    #[test]
    fn the_secrets_rotation_annotations_steer_nothing() {
        let tampered = |previous: &str, rotated_at: jiff::Timestamp| {
            let mut s = rotated_secret();
            let ann = s.metadata.annotations.as_mut().unwrap();
            ann.insert(ANN_PREVIOUS.into(), previous.into());
            ann.insert(ANN_ROTATED_AT.into(), rotated_at.to_string());
            s
        };
        let mut removed = rotated_secret();
        let ann = removed.metadata.annotations.as_mut().unwrap();
        ann.remove(ANN_ROTATED_AT);
        ann.remove(ANN_PREVIOUS);
        let edits = [
            tampered("A", t(10_000)),
            tampered("A", t(-10_000)),
            tampered("", t(100)),
            tampered("B", t(105)),
            removed,
        ];
        for now in [105, 111, 150, 200, 250] {
            let (honest, honest_out) = rotated_pass(rotated_secret(), now);
            for edited in &edits {
                let (p, out) = rotated_pass(edited.clone(), now);
                assert_eq!(
                    (&p.changes, &p.previous, p.wake_at),
                    (&honest.changes, &honest.previous, honest.wake_at),
                    "at {now} with {:?}",
                    edited.metadata.annotations
                );
                assert_eq!(out.annotations, honest_out.annotations, "written back");
            }
        }
        // The honest decisions: A kept until 110 (B's CreateDate + grace), then deleted; B
        // rotated at 200, not later; no wake before a deadline.
        let (during, _) = rotated_pass(rotated_secret(), 105);
        assert_eq!(
            (during.changes.as_slice(), during.wake_at),
            (&[][..], Some(t(110)))
        );
        let (after, out) = rotated_pass(rotated_secret(), 111);
        assert_eq!(after.changes, [Change::DeleteKey("A".into())]);
        assert_eq!(after.wake_at, Some(t(200)));
        assert_eq!(out.annotations[ANN_PREVIOUS], "");
        assert_eq!(out.annotations[ANN_ROTATED_AT], t(100).to_string());
        let (due, _) = rotated_pass(rotated_secret(), 200);
        assert!(
            due.changes.contains(&Change::CreateKey),
            "{:?}",
            due.changes
        );
    }

    /// An upgrade: a Secret written by an operator that read its annotations back, mid-grace,
    /// and a status without any new field, rotates as before: the previous key stays until the
    /// current key is `grace` old and then goes, and the Secret needs no write.
    #[test]
    fn a_secret_from_before_the_upgrade_rotates_on_time() {
        let old = rotated_secret();
        let (during, out) = rotated_pass(old.clone(), 105);
        assert_eq!(during.changes, []);
        assert_eq!(during.previous.as_ref().map(|p| p.id.as_str()), Some("A"));
        assert_eq!(Some(&out.annotations), old.metadata.annotations.as_ref());
        let (after, _) = rotated_pass(old, 110);
        assert_eq!(after.changes, [Change::DeleteKey("A".into())]);
    }

    /// A Secret put back to an earlier key whose pair the tenant kept does not bring that key
    /// back: status names a newer one, so a new key is issued and the earlier one goes.
    #[test]
    fn a_secret_put_back_to_an_earlier_key_does_not_revive_it() {
        let mut s = rotated_secret();
        s.data = Some(BTreeMap::from([
            ("AWS_ACCESS_KEY_ID".into(), ByteString(b"A".to_vec())),
            ("AWS_SECRET_ACCESS_KEY".into(), ByteString(b"old".to_vec())),
        ]));
        let ann = s.metadata.annotations.as_mut().unwrap();
        ann.insert(ANN_KEY_ID.into(), "A".into());
        ann.insert(ANN_KEY_HASH.into(), sha256_hex(b"old"));
        ann.insert(ANN_PREVIOUS.into(), String::new());
        let (p, _) = rotated_pass(s, 150);
        assert_eq!(
            p.changes,
            [Change::DeleteKey("A".into()), Change::CreateKey],
            "B, which status reports, stays through the grace period"
        );
        assert_eq!(p.previous.as_ref().map(|p| p.id.as_str()), Some("B"));
    }

    #[test]
    fn a_policy_changed_in_aws_is_drift_once_the_spec_was_served() {
        let a = access(json!({}));
        let changed = |a: &BucketAccess| {
            Found::Ours(IdentityState {
                policy: Some(json!({"Version": "2012-10-17", "Statement": []})),
                boundary: None,
                ..user(a, vec![key("A", 0)])
            })
        };
        let p = plan(&a, &settings(), &observed(changed(&a), None, 5)).unwrap();
        assert!(
            p.changes.contains(&Change::PutPolicy { drift: false }),
            "{p:?}"
        );
        let a = served(a, "A");
        let p = plan(&a, &settings(), &observed(changed(&a), None, 5)).unwrap();
        assert!(
            p.changes.contains(&Change::PutPolicy { drift: true }),
            "{p:?}"
        );
        // A boundary that was removed is drift too (one that never was set is not).
        assert_eq!(p.changes[0], Change::PutBoundary { drift: false });
    }

    #[test]
    fn a_user_of_someone_else_is_never_touched() {
        let a = access(json!({}));
        let who = "owned by ns-b/other in cluster c".to_string();
        let o = observed(Found::Foreign(who.clone()), None, 0);
        let refused = plan(&a, &settings(), &o).unwrap_err();
        assert_eq!(refused.reason, Reason::OwnershipConflict);
        assert!(refused.message.contains(&who), "{refused}");
    }

    #[test]
    fn irsa_role_gets_trust_and_policy_and_a_secret_without_keys() {
        let a = access(json!({"type": "ServiceAccountRole", "serviceAccountName": "app"}));
        let o = observed(Found::Absent, None, 0);
        let p = plan(&a, &settings(), &o).unwrap();
        let oidc = settings().oidc_provider_arn.unwrap();
        let trust = policy::irsa_trust_policy(&oidc, "ns", "app");
        assert_eq!(
            p.changes,
            [
                Change::CreateRole(trust.clone()),
                Change::PutPolicy { drift: false }
            ]
        );
        let role_arn = "arn:aws:iam::123456789012:role/s3-operator/c/r";
        let learned = Learned {
            arn: role_arn.into(),
            key: None,
            version: None,
            association: None,
        };
        let out = p.outcome(&a, &learned, Some("http://moto:5000"), t(0));
        assert_eq!(out.data["AWS_ROLE_ARN"], role_arn);
        assert_eq!(out.data["AWS_ENDPOINT_URL_STS"], "http://moto:5000");
        assert!(!out.data.contains_key("AWS_ACCESS_KEY_ID"));
        assert_eq!(out.annotations, BTreeMap::new());
        assert_eq!(out.status.role_arn.as_deref(), Some(role_arn));
        assert_eq!(out.status.access_key_id, None);

        // A trust policy edited in AWS after the role was served is put back, as drift.
        let a = served(a, "");
        let role = IdentityState {
            arn: role_arn.into(),
            boundary: Some(BOUNDARY.into()),
            trust_policy: Some(json!({})),
            policy: Some(doc(&a)),
            keys: Vec::new(),
        };
        let o = observed(Found::Ours(role), None, 5);
        let p = plan(&a, &settings(), &o).unwrap();
        assert_eq!(p.changes, [Change::PutTrustPolicy { trust, drift: true }]);

        // Without the cluster's OIDC provider no role can be trusted.
        let s = Settings {
            oidc_provider_arn: None,
            ..settings()
        };
        let refused = plan(&a, &s, &observed(Found::Absent, None, 0)).unwrap_err();
        assert_eq!(refused.reason, Reason::InvalidSpec);
    }

    /// The finalizer is the pass's first write, before anything is created in AWS, and only
    /// while it is missing.
    #[test]
    fn the_finalizer_is_written_first_and_only_once() {
        let mut a = access(json!({}));
        a.metadata.finalizers = None;
        let p = plan(&a, &settings(), &observed(Found::Absent, None, 0)).unwrap();
        assert_eq!(p.changes[..2], [Change::AddFinalizer, Change::CreateUser]);
        let a = served(access(json!({})), "A");
        let p = plan(
            &a,
            &settings(),
            &observed(ours(&a, vec![key("A", 0)]), None, 0),
        )
        .unwrap();
        assert!(!p.changes.contains(&Change::AddFinalizer), "{p:?}");
    }

    fn gone() -> Blocked {
        Blocked::new(Reason::BucketNotFound, "Bucket b does not exist")
    }

    /// A grant whose bucket is gone, foreign or not owned is taken back: the access policy
    /// goes, active keys are deactivated (not deleted), and the access says why.
    #[test]
    fn a_withdrawal_removes_the_policy_and_deactivates_active_keys() {
        let a = access(json!({}));
        let mut inactive = key("B", 5);
        inactive.active = false;
        let user = Identity::User("u".into());
        let w = withdrawal(
            user,
            &ours(&a, vec![key("A", 0), inactive]),
            &Found::Absent,
            gone(),
        );
        assert_eq!(
            w.changes,
            [Revoke::DeletePolicy, Revoke::DeactivateKey("A".into())]
        );
        assert_eq!(
            w.note().as_deref(),
            Some(
                "Bucket b does not exist: removed the access policy of IAM user u, deactivated access key A"
            )
        );
        let reported = w.reported();
        assert_eq!(reported.reason, Reason::BucketNotFound);
        assert_eq!(
            reported.message,
            "Bucket b does not exist; no access is granted"
        );
    }

    /// Revoking writes only what is still granted, and never touches an identity that is not
    /// ours: a steady withdrawn access writes nothing and reports the same.
    #[test]
    fn revocation_writes_only_what_is_still_granted_and_only_to_its_own() {
        let a = access(json!({}));
        let role = Identity::Role("r".into());
        let revoked = Found::Ours(IdentityState {
            policy: None,
            keys: vec![AccessKey {
                active: false,
                ..key("A", 0)
            }],
            ..user(&a, vec![])
        });
        let foreign = Found::Foreign("owned by ns-b/other".into());
        for found in [Found::Absent, foreign, revoked] {
            let w = withdrawal(role.clone(), &found, &Found::Absent, gone());
            assert_eq!(
                (w.changes.as_slice(), w.note()),
                (&[][..], None),
                "{found:?}"
            );
            assert!(w.reported().message.ends_with("; no access is granted"));
        }
        let w = withdrawal(role, &ours(&a, vec![]), &Found::Absent, gone());
        assert_eq!(w.changes, [Revoke::DeletePolicy]);
        assert!(w.note().unwrap().contains("access policy of IAM role r"));
    }
    /// What an Observe pass lists is each write of the plan as a field, keys by id and the
    /// Secret as present or not (never a secret), and nothing for the finalizer.
    #[test]
    fn an_observed_access_lists_each_planned_write_as_a_field() {
        use super::super::in_sync::{SecretView, differences};
        let fields = |d: Vec<crate::api::PlannedChange>| -> Vec<(String, String, String)> {
            d.into_iter().map(|c| (c.field, c.from, c.to)).collect()
        };
        let mut a = access(json!({}));
        a.metadata.finalizers = None;
        let o = observed(Found::Absent, None, 0);
        let p = plan(&a, &settings(), &o).unwrap();
        assert_eq!(p.changes[0], Change::AddFinalizer);
        let listed = fields(differences(&p, &o, SecretView::Absent, SecretView::InShape));
        let names: Vec<&str> = listed.iter().map(|(f, _, _)| f.as_str()).collect();
        assert_eq!(
            names,
            [
                "identity",
                "policy.statement[Bucket]",
                "policy.statement[Objects]",
                "accessKeys[new]",
                "secret[a]"
            ]
        );
        assert_eq!(listed[0].1, "absent");
        assert!(listed[0].2.starts_with("IAM user "), "{:?}", listed[0]);
        assert_eq!(
            listed[3],
            ("accessKeys[new]".into(), "absent".into(), "Active".into())
        );
        assert_eq!(
            listed[4],
            ("secret[a]".into(), "absent".into(), "present".into())
        );

        // In sync: nothing listed.
        let learned = user_made();
        let handed = secret_of(&p.outcome(&a, &learned, None, t(0)));
        let a = served(access(json!({})), "A");
        let o = observed(ours(&a, vec![key("A", 0)]), Some(handed.clone()), 5);
        let p = plan(&a, &settings(), &o).unwrap();
        assert_eq!(
            differences(&p, &o, SecretView::InShape, SecretView::InShape),
            vec![]
        );
        // A ConfigMap is listed only when the access asks for one.
        assert_eq!(
            differences(&p, &o, SecretView::InShape, SecretView::Absent),
            vec![]
        );
        let mut asks = a.clone();
        asks.spec.config_map = Some(crate::api::ConfigMapOutput::default());
        let with = plan(&asks, &settings(), &o).unwrap();
        assert_eq!(
            fields(differences(
                &with,
                &o,
                SecretView::InShape,
                SecretView::Absent
            )),
            [("configMap[a]".into(), "absent".into(), "present".into())]
        );

        // The policy widened out of band, a second key made and the first deactivated: those
        // fields only, each from what IAM holds to what the spec asks.
        let mut state = user(&a, vec![key("A", 0), key("B", 1)]);
        state.keys[0].active = false;
        let mut wide = doc(&a);
        wide["Statement"][0]["Resource"] = json!("*");
        state.policy = Some(wide);
        let o = observed(Found::Ours(state), Some(handed), 5);
        let p = plan(&a, &settings(), &o).unwrap();
        let listed = fields(differences(
            &p,
            &o,
            SecretView::InShape,
            SecretView::InShape,
        ));
        assert!(
            !format!("{listed:?}").contains("s3cr3t"),
            "secrets never listed"
        );
        let names: Vec<&str> = listed.iter().map(|(f, _, _)| f.as_str()).collect();
        assert!(names.contains(&"accessKeys[B]"), "{listed:?}");
        assert!(
            listed.contains(&("accessKeys[A]".into(), "Inactive".into(), "Active".into())),
            "{listed:?}"
        );
        let policy: Vec<_> = listed
            .iter()
            .filter(|(f, _, _)| f.starts_with("policy."))
            .collect();
        assert_eq!(policy.len(), 1, "{listed:?}");
        assert!(policy[0].1.contains("\"*\""), "{listed:?}");
        assert!(!policy[0].2.contains("\"*\""), "{listed:?}");
    }
    /// A write AWS refuses blocks the pass with what it had left to write, from that write on;
    /// a transient error is retried as it is, listing nothing.
    #[test]
    fn a_refused_write_blocks_the_pass_with_what_it_had_left() {
        use crate::aws::{Error as AwsError, ErrorKind};
        use crate::reconcile::Error;
        let a = access(json!({}));
        let o = observed(Found::Absent, None, 0);
        let p = plan(&a, &settings(), &o).unwrap();
        let error = |code: &str, kind| {
            Error::Aws(AwsError {
                service: "iam",
                operation: "PutUserPolicy",
                code: code.into(),
                message: "m".into(),
                kind,
            })
        };
        let denied =
            super::super::left_undone(&p, &o, 1, error("AccessDenied", ErrorKind::AccessDenied));
        let Error::Blocked(why) = denied else {
            panic!("not blocked: {denied:?}");
        };
        assert_eq!(why.reason, Reason::AccessDenied);
        let fields: Vec<String> = why.plan().into_iter().map(|c| c.field).collect();
        assert_eq!(
            fields,
            [
                "policy.statement[Bucket]",
                "policy.statement[Objects]",
                "accessKeys[new]"
            ],
            "the user was made before the refusal: not listed"
        );
        let c = why.in_sync(&[], Some(1), t(0)).unwrap();
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", "Blocked"));
        assert!(
            c.message.starts_with(&format!("{} differs", p.identity())),
            "{}",
            c.message
        );

        let throttled =
            super::super::left_undone(&p, &o, 1, error("Throttling", ErrorKind::Transient));
        assert!(matches!(throttled, Error::Aws(_)), "{throttled:?}");
    }
}
