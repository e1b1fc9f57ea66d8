//! spec.replication: the configuration a Bucket's S3 bucket replicates by, and the IAM role S3
//! replicates with (one per Bucket, tagged with it, capped by the boundary). What a pass wants
//! is resolved from the spec and the cached destination Buckets ([`complete`], pure); each
//! destination's S3 bucket must be held by its Bucket (its tags, read with the pass) and
//! versioned. A destination that is gone, not held or no longer allowed withdraws the role's
//! grant ([`Refusal::withdraw`]): replication never writes into a bucket its Bucket does not
//! hold.

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::ResourceExt;
use serde_json::Value;

use super::{Address, Desired, address};
use crate::api::condition::{Reason, is_ready};
use crate::api::{Bucket, BucketConstraints, ReplicationConstraint, ReplicationRule, Versioning};
use crate::aws::iam::Identity;
use crate::aws::naming;
use crate::aws::policy::{self, REPLICATION_POLICY, ReplicaTarget};
use crate::aws::s3::replication::{ReplicaRule, ReplicationConfig};
use crate::aws::tags::{Owner, Ownership};
use crate::reconcile::{Blocked, InAccount, Settings, owner};

/// The field refusals name.
pub const FIELD: &str = "spec.replication";

/// What a pass wants of replication: the role and the configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Wanted {
    pub role: String,
    pub role_arn: String,
    pub role_tags: BTreeMap<String, String>,
    pub trust: Value,
    pub policy: Value,
    pub config: ReplicationConfig,
    /// Destinations that are Buckets of the namespace: the S3 bucket each must be held by.
    pub held_by: Vec<HeldBy>,
}

/// A destination S3 bucket, and the Bucket object that must hold it.
#[derive(Clone, Debug, PartialEq)]
pub struct HeldBy {
    pub at: Address,
    /// The Bucket object's name and ownership.
    pub name: String,
    pub owner: Owner,
}

/// What S3 and IAM hold of a Bucket's replication.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Observed {
    pub config: Option<ReplicationConfig>,
    pub role: Option<Role>,
}

/// The replication role as IAM has it.
#[derive(Clone, Debug, PartialEq)]
pub struct Role {
    /// Tagged as this Bucket's.
    pub ours: bool,
    pub trust: Option<Value>,
    pub policy: Option<Value>,
}

/// Why replication cannot be served, and whether what the role grants must go now (the
/// destination is gone, not held, or no longer allowed), rather than wait for a fix.
#[derive(Clone, Debug, PartialEq)]
pub struct Refusal {
    pub why: Blocked,
    pub withdraw: bool,
}

fn refuse(reason: Reason, withdraw: bool, msg: String) -> Refusal {
    Refusal {
        why: Blocked::new(reason, msg),
        withdraw,
    }
}

/// The name of a Bucket's replication role: unique per object (its UID's hash), like an
/// access's identity.
pub fn role_name(owner: &Owner) -> String {
    naming::iam_name(&owner.namespace, &owner.name, &owner.uid)
}

/// The Bucket objects a Bucket's rules name, by name.
pub fn destination_names(b: &Bucket) -> impl Iterator<Item = &str> {
    let rules = b.spec.replication.iter().flat_map(|r| r.rules.iter());
    rules.filter_map(|r| r.destination.bucket_ref.as_ref().map(|d| d.name.as_str()))
}

/// The class's say on replication, as [`complete`] checks it.
pub struct ClassRules<'a> {
    pub name: String,
    pub constraints: &'a BucketConstraints,
}

/// Completes `d` with the replication `b` asks for, resolved against the cached destination
/// Buckets (`destinations`) and the class in force: `Err` when it cannot be served.
pub fn complete(
    d: &mut Desired,
    b: &Bucket,
    settings: &Settings,
    default_region: &str,
    destinations: &[Arc<Bucket>],
    class: Option<&ClassRules<'_>>,
) -> Result<(), Refusal> {
    let rules = b.spec.replication.as_ref().map(|r| r.rules.as_slice());
    if let Some(c) = class {
        let violation = |field: &str, rule: &str, withdraw| {
            let msg = format!("{field} breaks BucketClass {}: constraints.{rule}", c.name);
            Err(refuse(Reason::ClassViolation, withdraw, msg))
        };
        match (c.constraints.replication, rules) {
            (ReplicationConstraint::Forbidden, Some(r)) if !r.is_empty() => {
                return violation(FIELD, "replication is Forbidden", true);
            }
            (ReplicationConstraint::Required, None) => {
                return violation("spec.replication (unset)", "replication is Required", false);
            }
            (ReplicationConstraint::Required, Some([])) => {
                return violation(
                    "spec.replication.rules []",
                    "replication is Required",
                    false,
                );
            }
            _ => {}
        }
    }
    let Some(rules) = rules else {
        d.replication = None;
        return Ok(());
    };
    if rules.is_empty() {
        d.replication = Some(None);
        return Ok(());
    }
    if d.versioning != Some(Versioning::Enabled) {
        let msg = format!(
            "{FIELD} needs spec.versioning: Enabled (S3 replicates only from a versioned bucket)"
        );
        return Err(refuse(Reason::InvalidSpec, false, msg));
    }
    let o = owner(b, &settings.cluster_name);
    let partition = naming::partition(&d.region);
    let source = naming::bucket_arn(partition, &d.name);
    let mut held_by = vec![];
    let mut targets = vec![];
    let mut out = vec![];
    for (i, rule) in rules.iter().enumerate() {
        let field = format!("{FIELD}.rules[{i}].destination");
        let (arn, account) = match (&rule.destination.bucket_ref, &rule.destination.bucket_arn) {
            (Some(r), _) => {
                let at = by_ref(b, &r.name, &field, settings, default_region, destinations)?;
                if let Some(c) = class {
                    let allowed = &c.constraints.allowed_replication_regions;
                    if !allowed.is_empty() && !allowed.contains(&at.at.region) {
                        let msg = format!(
                            "{field}.bucketRef {} (region {}) breaks BucketClass {}: constraints.allowedReplicationRegions is [{}]",
                            r.name,
                            at.at.region,
                            c.name,
                            allowed.join(", ")
                        );
                        return Err(refuse(Reason::ClassViolation, true, msg));
                    }
                }
                let arn = naming::bucket_arn(naming::partition(&at.at.region), &at.at.name);
                held_by.push(at);
                (arn, None)
            }
            (None, Some(arn)) => {
                let account = rule.destination.account.clone().unwrap_or_default();
                by_arn(arn, &account, &field, settings, class)?;
                (arn.clone(), Some(account))
            }
            // The schema requires one of the two.
            (None, None) => {
                let msg = format!("{field} needs bucketRef or bucketArn");
                return Err(refuse(Reason::InvalidSpec, false, msg));
            }
        };
        if let (Some(c), Some(key)) = (class, &rule.replica_kms_key_id) {
            let allowed = &c.constraints.allowed_kms_keys;
            if !allowed.is_empty() && !allowed.contains(key) {
                let msg = format!(
                    "{FIELD}.rules[{i}].replicaKmsKeyId {key} breaks BucketClass {}: constraints.allowedKmsKeys is [{}]",
                    c.name,
                    allowed.join(", ")
                );
                return Err(refuse(Reason::ClassViolation, false, msg));
            }
        }
        targets.push(ReplicaTarget {
            bucket_arn: arn.clone(),
            kms_key: rule.replica_kms_key_id.clone(),
        });
        out.push(rule_of(rule, arn, account));
    }
    let role = role_name(&o);
    let role_arn = format!(
        "arn:{partition}:iam::{}:role{}{role}",
        settings.account_id, settings.iam_path
    );
    d.replication = Some(Some(Wanted {
        trust: policy::replication_trust(&settings.account_id, &source),
        policy: policy::replication_policy(&source, &d.region, &targets),
        config: ReplicationConfig {
            role: role_arn.clone(),
            rules: out,
        }
        .sorted(),
        role,
        role_arn,
        role_tags: o.tags(),
        held_by,
    }));
    Ok(())
}

fn rule_of(rule: &ReplicationRule, destination: String, account: Option<String>) -> ReplicaRule {
    ReplicaRule {
        id: rule.id.clone(),
        priority: rule.priority,
        prefix: rule.prefix.clone().unwrap_or_default(),
        tags: rule.tags.clone(),
        delete_markers: rule.delete_marker_replication,
        destination,
        account,
        storage_class: rule.storage_class.map(|c| c.as_str().to_string()),
        replica_kms_key: rule.replica_kms_key_id.clone(),
    }
}

/// The S3 bucket a destination Bucket of this namespace stands for, from its spec and UID
/// (never its status), and the Bucket.
fn by_ref(
    source: &Bucket,
    name: &str,
    field: &str,
    settings: &Settings,
    default_region: &str,
    destinations: &[Arc<Bucket>],
) -> Result<HeldBy, Refusal> {
    let ns = source.namespace().unwrap_or_default();
    if name == source.name_any() {
        let msg = format!(
            "{field}.bucketRef names this Bucket itself: a bucket cannot replicate into itself"
        );
        return Err(refuse(Reason::InvalidSpec, true, msg));
    }
    let found = destinations
        .iter()
        .find(|t| t.name_any() == name && t.namespace().as_deref() == Some(ns.as_str()))
        .filter(|t| t.metadata.deletion_timestamp.is_none());
    let Some(target) = found else {
        let msg = format!("{field}.bucketRef: Bucket {name} does not exist in namespace {ns}");
        return Err(refuse(Reason::BucketNotFound, true, msg));
    };
    let o = owner(target.as_ref(), &settings.cluster_name);
    let at = address(target, settings, default_region, &o).map_err(|why| {
        let msg = format!(
            "{field}.bucketRef: Bucket {name} cannot be served: {}",
            why.message
        );
        refuse(Reason::BucketNotReady, true, msg)
    })?;
    let ready = target
        .status
        .as_ref()
        .is_some_and(|s| is_ready(&s.conditions));
    if !ready {
        let msg = format!("{field}.bucketRef: Bucket {name} is not Ready");
        return Err(refuse(Reason::BucketNotReady, false, msg));
    }
    Ok(HeldBy {
        at,
        name: name.to_string(),
        owner: o,
    })
}

/// Whether a bucket of another account may be a destination: only an account on the
/// operator's `--allowed-replication-accounts` (and the class's list), never the operator's
/// own account nor a name under its bucket-name prefix (those are tenants' buckets, reached
/// only by `bucketRef` from their own namespace).
fn by_arn(
    arn: &str,
    account: &str,
    field: &str,
    settings: &Settings,
    class: Option<&ClassRules<'_>>,
) -> Result<(), Refusal> {
    let name = arn.rsplit(':').next().unwrap_or_default();
    let invalid = |msg: String| Err(refuse(Reason::InvalidSpec, true, msg));
    if account == settings.account_id {
        return invalid(format!(
            "{field}.bucketArn {arn} is in the operator's own account: name a Bucket of this namespace by bucketRef"
        ));
    }
    if name.starts_with(&settings.bucket_name_prefix) {
        return invalid(format!(
            "{field}.bucketArn {arn} is under the operator's bucket-name prefix {}: name a Bucket of this namespace by bucketRef",
            settings.bucket_name_prefix
        ));
    }
    if !settings
        .allowed_replication_accounts
        .iter()
        .any(|a| a == account)
    {
        return invalid(format!(
            "{field}.account {account} is not on the operator's --allowed-replication-accounts"
        ));
    }
    if let Some(c) = class {
        if let Some(allowed) = &c.constraints.allowed_replication_accounts
            && !allowed.iter().any(|a| a == account)
        {
            let msg = format!(
                "{field}.account {account} breaks BucketClass {}: constraints.allowedReplicationAccounts is [{}]",
                c.name,
                allowed.join(", ")
            );
            return Err(refuse(Reason::ClassViolation, true, msg));
        }
        if !c.constraints.allowed_replication_regions.is_empty() {
            let msg = format!(
                "{field}.bucketArn {arn} breaks BucketClass {}: constraints.allowedReplicationRegions is set, and the region of a bucket named by ARN cannot be checked",
                c.name
            );
            return Err(refuse(Reason::ClassViolation, true, msg));
        }
    }
    Ok(())
}

/// Why the destination may not receive replicas: its tags (`None`: it does not exist) do not
/// say it is held by its Bucket (whose status is no proof).
pub fn not_held(h: &HeldBy, tags: Option<&BTreeMap<String, String>>) -> Option<Refusal> {
    let held = tags.is_some_and(|t| h.owner.judge(t) == Ownership::Ours);
    (!held).then(|| {
        let msg = format!(
            "{FIELD}: S3 bucket {} is not held by Bucket {}",
            h.at.name, h.name
        );
        refuse(Reason::BucketNotOwned, true, msg)
    })
}

/// Why the destination `at` cannot receive replicas yet: its versioning (S3 refuses a
/// configuration to an unversioned destination).
pub fn unversioned(h: &HeldBy, versioning: Option<Versioning>) -> Option<Refusal> {
    (versioning != Some(Versioning::Enabled)).then(|| {
        let msg = format!(
            "{FIELD}: destination S3 bucket {} (Bucket {}) does not have versioning Enabled; set its spec.versioning: Enabled",
            h.at.name, h.name
        );
        refuse(Reason::BucketNotReady, false, msg)
    })
}

/// One write of replication's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoleWrite {
    /// The role does not exist: create it (with its trust) and put its policy.
    Create,
    /// Put back what differs.
    Update { trust: bool, policy: bool },
}

/// Why the plan cannot go on: a role of that name that is not this Bucket's.
pub fn refused(want: Option<&Wanted>, observed: Option<&Observed>) -> Option<Blocked> {
    let (w, Some(Role { ours: false, .. })) = (want?, observed.and_then(|o| o.role.as_ref()))
    else {
        return None;
    };
    let msg = format!(
        "{FIELD}: IAM role {} exists and is not this Bucket's; it will not be modified",
        w.role
    );
    Some(Blocked::new(Reason::NameConflict, msg))
}

/// The role write and whether the configuration must be written, for `want` against what
/// is held (pure; nothing in steady state).
pub fn changes(
    want: &Wanted,
    observed: Option<&Observed>,
    partition: &str,
) -> (Option<RoleWrite>, bool) {
    let same = |a: Option<&Value>, b: &Value| {
        a.map(|a| policy::normalize_policy(a, partition))
            == Some(policy::normalize_policy(b, partition))
    };
    let role = match observed.and_then(|o| o.role.as_ref()) {
        None => Some(RoleWrite::Create),
        Some(r) => {
            let trust = !same(r.trust.as_ref(), &want.trust);
            let policy = !same(r.policy.as_ref(), &want.policy);
            (trust || policy).then_some(RoleWrite::Update { trust, policy })
        }
    };
    let config = observed.and_then(|o| o.config.as_ref()) != Some(&want.config);
    (role, config)
}

/// What turning replication off removes: the configuration, and the role if it is ours.
pub fn off(observed: Option<&Observed>) -> (bool, bool) {
    let config = observed.is_some_and(|o| o.config.is_some());
    let role = observed.is_some_and(|o| o.role.as_ref().is_some_and(|r| r.ours));
    (config, role)
}

/// Reads the role and the configuration of the bucket `d` names.
pub async fn observe(
    ctx: &InAccount<'_>,
    d: &Desired,
    owner: &Owner,
) -> Result<Observed, crate::aws::Error> {
    let aws = &ctx.aws;
    let id = Identity::Role(role_name(owner));
    let (config, role) = tokio::try_join!(
        aws.bucket_replication(&d.region, &d.name),
        aws.get_identity(&id)
    )?;
    let role = match role {
        None => None,
        Some(e) => {
            let ours = owner.judge(&e.tags) == Ownership::Ours;
            let policy = match ours {
                true => aws.inline_policy(&id, REPLICATION_POLICY).await?,
                false => None,
            };
            Some(Role {
                ours,
                trust: e.trust_policy,
                policy,
            })
        }
    };
    Ok(Observed { config, role })
}

/// Makes the role write.
pub async fn write_role(
    ctx: &InAccount<'_>,
    w: &Wanted,
    write: RoleWrite,
) -> Result<(), crate::aws::Error> {
    let (aws, s) = (&ctx.aws, &ctx.settings);
    let id = Identity::Role(w.role.clone());
    let (trust, policy) = match write {
        RoleWrite::Create => {
            aws.create_role(
                &w.role,
                &s.iam_path,
                &s.boundary_arn,
                &w.trust,
                &w.role_tags,
            )
            .await?;
            (false, true)
        }
        RoleWrite::Update { trust, policy } => (trust, policy),
    };
    if trust {
        aws.update_trust_policy(&w.role, &w.trust).await?;
    }
    if policy {
        aws.put_inline_policy(&id, REPLICATION_POLICY, &w.policy)
            .await?;
    }
    Ok(())
}

/// The role of `owner`, if it exists and is ours (a role of that name that is not is never
/// touched).
async fn our_role(
    ctx: &InAccount<'_>,
    owner: &Owner,
) -> Result<Option<Identity>, crate::aws::Error> {
    let id = Identity::Role(role_name(owner));
    Ok(match ctx.aws.get_identity(&id).await? {
        Some(e) if owner.judge(&e.tags) == Ownership::Ours => Some(id),
        _ => None,
    })
}

/// Withdraws what the replication role grants (its inline policy): S3 can then replicate
/// nothing until a pass puts it back. `true` when there was something to withdraw.
pub async fn withdraw(ctx: &InAccount<'_>, owner: &Owner) -> Result<bool, crate::aws::Error> {
    let Some(id) = our_role(ctx, owner).await? else {
        return Ok(false);
    };
    if ctx
        .aws
        .inline_policy(&id, REPLICATION_POLICY)
        .await?
        .is_none()
    {
        return Ok(false);
    }
    ctx.aws
        .delete_inline_policy(&id, REPLICATION_POLICY)
        .await?;
    Ok(true)
}

/// Deletes the replication role of `owner` if it is ours (deletion, and replication turned
/// off). `true` when one was deleted.
pub async fn delete_role(ctx: &InAccount<'_>, owner: &Owner) -> Result<bool, crate::aws::Error> {
    let Some(id) = our_role(ctx, owner).await? else {
        return Ok(false);
    };
    crate::reconcile::bucket_access::delete_owned_identity(ctx, &id).await?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{BucketSpec, LoggingTargetRef, Replication, ReplicationDestination};
    use crate::reconcile::bucket::desired;
    use crate::reconcile::bucket::fixtures::named_bucket;

    fn b(name: &str, replication: Option<Vec<ReplicationRule>>, ready: bool) -> Arc<Bucket> {
        let spec = BucketSpec {
            versioning: Some(Versioning::Enabled),
            replication: replication.map(|rules| Replication { rules }),
            ..Default::default()
        };
        named_bucket("ns", name, spec, ready)
    }

    fn to_ref(id: &str, priority: i32, name: &str) -> ReplicationRule {
        ReplicationRule {
            id: id.into(),
            priority,
            prefix: None,
            tags: BTreeMap::new(),
            delete_marker_replication: false,
            storage_class: None,
            replica_kms_key_id: None,
            destination: ReplicationDestination {
                bucket_ref: Some(LoggingTargetRef { name: name.into() }),
                bucket_arn: None,
                account: None,
            },
        }
    }

    fn to_arn(arn: &str, account: &str) -> ReplicationRule {
        ReplicationRule {
            destination: ReplicationDestination {
                bucket_ref: None,
                bucket_arn: Some(arn.into()),
                account: Some(account.into()),
            },
            ..to_ref("out", 9, "")
        }
    }

    fn resolve(
        source: &Bucket,
        all: &[Arc<Bucket>],
        s: &Settings,
        class: Option<&ClassRules<'_>>,
    ) -> Result<Desired, Refusal> {
        let o = owner(source, &s.cluster_name);
        let mut d = desired(source, s, "us-east-1", &o).expect("desired");
        complete(&mut d, source, s, "us-east-1", all, class).map(|()| d)
    }

    fn wanted(d: &Desired) -> &Wanted {
        d.replication
            .as_ref()
            .and_then(Option::as_ref)
            .expect("wanted")
    }

    #[test]
    fn destinations_resolve_from_their_spec_and_the_role_names_exactly_them() {
        let s = Settings::for_tests();
        let dr = b("dr", None, true);
        let source = b("photos", Some(vec![to_ref("a", 1, "dr")]), true);
        let d = resolve(&source, std::slice::from_ref(&dr), &s, None).unwrap();
        let w = wanted(&d);
        assert_eq!(w.config.rules[0].destination, "arn:aws:s3:::s3op-ns-dr");
        assert_eq!(w.config.role, w.role_arn);
        assert!(
            w.role_arn
                .starts_with("arn:aws:iam::123456789012:role/s3-operator/c/ns-photos-")
        );
        assert_eq!(w.held_by[0].at.name, "s3op-ns-dr");
        assert_eq!(w.held_by[0].owner, owner(b("dr", None, true).as_ref(), "c"));
        assert_eq!(
            w.policy["Statement"][2]["Resource"],
            serde_json::json!(["arn:aws:s3:::s3op-ns-dr/*"])
        );
        assert_eq!(
            w.trust["Statement"][0]["Condition"]["ArnLike"]["aws:SourceArn"],
            "arn:aws:s3:::s3op-ns-photos"
        );
        assert_eq!(w.role_tags, owner(source.as_ref(), "c").tags());
    }

    #[test]
    fn omitted_is_unmanaged_and_no_rules_is_off() {
        let s = Settings::for_tests();
        let d = resolve(&b("plain", None, true), &[], &s, None).unwrap();
        assert_eq!(d.replication, None);
        let d = resolve(&b("off", Some(vec![]), true), &[], &s, None).unwrap();
        assert_eq!(d.replication, Some(None));
    }

    /// Every refusal names its field; the ones that leave a grant reaching a bucket its Bucket
    /// may not hold withdraw it.
    #[test]
    fn each_refusal_names_its_field_and_withdraws_what_may_not_stand() {
        let s = Settings::for_tests();
        let dr = b("dr", None, true);
        let refused = |source: Arc<Bucket>, all: &[Arc<Bucket>]| {
            resolve(&source, all, &s, None).expect_err("refused")
        };
        let gone = refused(b("p", Some(vec![to_ref("a", 1, "dr")]), true), &[]);
        assert_eq!(gone.why.reason, Reason::BucketNotFound);
        assert!(gone.withdraw && gone.why.message.contains("rules[0].destination.bucketRef"));
        let mut other_ns = (*dr).clone();
        other_ns.metadata.namespace = Some("intruder".into());
        let elsewhere = refused(
            b("p", Some(vec![to_ref("a", 1, "dr")]), true),
            &[Arc::new(other_ns)],
        );
        assert_eq!(elsewhere.why.reason, Reason::BucketNotFound);
        let itself = refused(b("p", Some(vec![to_ref("a", 1, "p")]), true), &[]);
        assert!(itself.why.message.contains("itself"), "{}", itself.why);
        let unready = refused(
            b("p", Some(vec![to_ref("a", 1, "dr")]), true),
            &[b("dr", None, false)],
        );
        assert_eq!(unready.why.reason, Reason::BucketNotReady);
        assert!(!unready.withdraw);
        let mut unversioned = (*b("p", Some(vec![to_ref("a", 1, "dr")]), true)).clone();
        unversioned.spec.versioning = None;
        let why = refused(Arc::new(unversioned), std::slice::from_ref(&dr));
        assert!(why.why.message.contains("spec.versioning"), "{}", why.why);
        assert!(!why.withdraw);
    }

    /// A bucket of another account by ARN: only on the flag's list, never the operator's own
    /// account, never a name under its prefix; the class narrows it.
    #[test]
    fn arn_destinations_need_the_flag_and_the_class_and_never_reach_tenants() {
        let mut s = Settings::for_tests();
        let foreign = b(
            "p",
            Some(vec![to_arn("arn:aws:s3:::partner-dr", "210987654321")]),
            true,
        );
        let why = resolve(&foreign, &[], &s, None).expect_err("not on the flag");
        assert!(why.withdraw && why.why.message.contains("--allowed-replication-accounts"));
        s.allowed_replication_accounts = vec!["210987654321".into()];
        let d = resolve(&foreign, &[], &s, None).unwrap();
        let rule = &wanted(&d).config.rules[0];
        assert_eq!(rule.account.as_deref(), Some("210987654321"));
        assert!(wanted(&d).held_by.is_empty());
        let own = b(
            "p",
            Some(vec![to_arn("arn:aws:s3:::partner-dr", "123456789012")]),
            true,
        );
        let why = resolve(&own, &[], &s, None).expect_err("own account");
        assert!(why.why.message.contains("own account"), "{}", why.why);
        let tenant = b(
            "p",
            Some(vec![to_arn("arn:aws:s3:::s3op-other-x", "210987654321")]),
            true,
        );
        let why = resolve(&tenant, &[], &s, None).expect_err("under the prefix");
        assert!(why.why.message.contains("prefix"), "{}", why.why);
        let constraints = BucketConstraints {
            allowed_replication_accounts: Some(vec!["333333333333".into()]),
            ..Default::default()
        };
        let class = ClassRules {
            name: "gold".into(),
            constraints: &constraints,
        };
        let why = resolve(&foreign, &[], &s, Some(&class)).expect_err("class");
        assert_eq!(why.why.reason, Reason::ClassViolation);
        assert!(why.withdraw && why.why.message.contains("allowedReplicationAccounts"));
    }

    #[test]
    fn the_class_requires_forbids_and_bounds_regions() {
        let s = Settings::for_tests();
        let dr = b("dr", None, true);
        let replicating = b("p", Some(vec![to_ref("a", 1, "dr")]), true);
        let mut c = BucketConstraints {
            replication: ReplicationConstraint::Forbidden,
            ..Default::default()
        };
        let check = |c: &BucketConstraints, source: &Arc<Bucket>| {
            let class = ClassRules {
                name: "gold".into(),
                constraints: c,
            };
            resolve(source, std::slice::from_ref(&dr), &s, Some(&class))
        };
        let why = check(&c, &replicating).expect_err("forbidden");
        assert!(why.withdraw && why.why.message.contains("replication is Forbidden"));
        assert!(check(&c, &b("plain", None, true)).is_ok());
        c.replication = ReplicationConstraint::Required;
        let why = check(&c, &b("plain", None, true)).expect_err("required");
        assert!(!why.withdraw && why.why.message.contains("replication is Required"));
        assert!(check(&c, &replicating).is_ok());
        c.allowed_replication_regions = vec!["eu-west-1".into()];
        let why = check(&c, &replicating).expect_err("region");
        assert!(
            why.why.message.contains("allowedReplicationRegions"),
            "{}",
            why.why
        );
    }

    #[test]
    fn a_destination_is_held_only_as_its_tags_say_and_must_be_versioned() {
        let dr = b("dr", None, true);
        let h = HeldBy {
            at: Address {
                name: "s3op-ns-dr".into(),
                region: "us-east-1".into(),
            },
            name: "dr".into(),
            owner: owner(dr.as_ref(), "c"),
        };
        let held = h.owner.tags();
        assert_eq!(not_held(&h, Some(&held)), None);
        let other = owner(b("x", None, true).as_ref(), "c").tags();
        for tags in [None, Some(&other), Some(&BTreeMap::new())] {
            let why = not_held(&h, tags).expect("refused");
            assert!(why.withdraw && why.why.message.contains("not held by Bucket dr"));
            assert_eq!(why.why.reason, Reason::BucketNotOwned);
        }
        assert_eq!(unversioned(&h, Some(Versioning::Enabled)), None);
        for v in [None, Some(Versioning::Suspended)] {
            let why = unversioned(&h, v).expect("refused");
            assert!(!why.withdraw && why.why.message.contains("versioning"));
        }
    }

    /// Through the Bucket's planner: a new bucket is versioned before its role and its
    /// configuration are written; served, nothing; turned off, the configuration then the role.
    #[test]
    fn the_bucket_plan_orders_versioning_role_and_configuration() {
        use crate::reconcile::bucket::fixtures::converged;
        use crate::reconcile::bucket::{Change, Found, Plan, plan};
        let s = Settings::for_tests();
        let source = b("photos", Some(vec![to_ref("a", 1, "dr")]), true);
        let d = resolve(&source, &[b("dr", None, true)], &s, None).unwrap();
        let Plan::Apply(created) = plan(&d, &Found::Absent) else {
            panic!()
        };
        let at = |c: &Change| created.iter().position(|x| x == c).expect("planned");
        let role = Change::ReplicationRole(RoleWrite::Create);
        assert!(at(&Change::Versioning(Versioning::Enabled)) < at(&role));
        assert!(at(&role) < at(&Change::Replication));
        assert_eq!(created.last(), Some(&Change::Replication));
        let served = Found::Present(Box::new(converged(&d)));
        assert_eq!(plan(&d, &served), Plan::Apply(vec![]));
        let mut off = d.clone();
        off.replication = Some(None);
        assert_eq!(
            plan(&off, &served),
            Plan::Apply(vec![Change::ReplicationOff, Change::ReplicationRoleOff])
        );
        let mut unmanaged = d.clone();
        unmanaged.replication = None;
        assert_eq!(plan(&unmanaged, &served), Plan::Apply(vec![]));
    }

    #[test]
    fn the_plan_creates_corrects_and_then_writes_nothing() {
        let s = Settings::for_tests();
        let dr = b("dr", None, true);
        let source = b("photos", Some(vec![to_ref("a", 1, "dr")]), true);
        let d = resolve(&source, &[dr], &s, None).unwrap();
        let w = wanted(&d);
        assert_eq!(changes(w, None, "aws"), (Some(RoleWrite::Create), true));
        let held = Observed {
            config: Some(w.config.clone()),
            role: Some(Role {
                ours: true,
                trust: Some(w.trust.clone()),
                policy: Some(w.policy.clone()),
            }),
        };
        assert_eq!(changes(w, Some(&held), "aws"), (None, false));
        assert_eq!(refused(Some(w), Some(&held)), None);
        // Drift on each part is put back, and only that part.
        let mut drifted = held.clone();
        drifted.config.as_mut().unwrap().rules[0].delete_markers = true;
        assert_eq!(changes(w, Some(&drifted), "aws"), (None, true));
        let mut withdrawn = held.clone();
        withdrawn.role.as_mut().unwrap().policy = None;
        assert_eq!(
            changes(w, Some(&withdrawn), "aws"),
            (
                Some(RoleWrite::Update {
                    trust: false,
                    policy: true
                }),
                false
            )
        );
        let mut widened = held.clone();
        widened.role.as_mut().unwrap().trust = Some(serde_json::json!({"Statement": []}));
        assert_eq!(
            changes(w, Some(&widened), "aws").0,
            Some(RoleWrite::Update {
                trust: true,
                policy: false
            })
        );
        // Someone else's role of that name: never touched.
        let mut theirs = held.clone();
        theirs.role.as_mut().unwrap().ours = false;
        assert_eq!(
            refused(Some(w), Some(&theirs)).unwrap().reason,
            Reason::NameConflict
        );
        // Off: the configuration goes, and the role if it is ours.
        assert_eq!(off(Some(&held)), (true, true));
        assert_eq!(off(Some(&theirs)), (true, false));
        assert_eq!(off(Some(&Observed::default())), (false, false));
    }
}
