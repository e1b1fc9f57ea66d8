//! The pure planner of a Bucket pass: what S3 holds ([`Found`]) and the writes ([`Change`])
//! that bring it in line with the spec ([`plan`]).

use std::collections::BTreeMap;

use super::{Desired, notifications, protection, replication};
use crate::api::condition::Reason;
use crate::api::{
    CorsRule, Encryption, EncryptionAlgorithm, IntelligentTiering, LifecycleRule, ObjectOwnership,
    PublicAccessBlock, TransferAcceleration, Versioning,
};
use crate::aws::s3::logging::LogTarget;
use crate::aws::s3::protection::LockState;
use crate::aws::{naming, policy, tags};
use crate::reconcile::Blocked;

/// What S3 holds for the bucket name, as far as the plan needs to know.
#[derive(Clone, Debug, PartialEq)]
pub enum Found {
    Absent,
    /// Exists with another owner's tags.
    Foreign(String),
    /// Exists with no owner, and this object may not adopt it (the message says why).
    NotAdoptable(String),
    /// Ours, or unowned and adoptable: its current configuration (boxed: it is large).
    Present(Box<BucketState>),
}

/// The bucket's current configuration. Unmanaged aspects are `None` (not read).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct BucketState {
    pub tags: BTreeMap<String, String>,
    pub public_access_block: Option<PublicAccessBlock>,
    pub encryption: Option<Encryption>,
    pub versioning: Option<Versioning>,
    pub lifecycle_rules: Option<Vec<LifecycleRule>>,
    pub cors: Option<Vec<CorsRule>>,
    /// `None` when unmanaged (not read) or when the bucket has no ownership controls.
    pub object_ownership: Option<ObjectOwnership>,
    /// `None` when the bucket has no policy.
    pub policy: Option<serde_json::Value>,
    /// `None` when unmanaged (not read).
    pub object_lock: Option<LockState>,
    pub intelligent_tiering: Option<Vec<IntelligentTiering>>,
    /// `None` when unmanaged (not read) or never set.
    pub transfer_acceleration: Option<TransferAcceleration>,
    pub notifications: Option<crate::aws::s3::notifications::ObservedNotifications>,
    /// `None` when unmanaged (not read); `Some(None)` when logging is off.
    pub logging: Option<Option<LogTarget>>,
    /// `None` when unmanaged (not read).
    pub replication: Option<replication::Observed>,
}

/// One write to S3 (or, for replication, to its IAM role).
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    Create,
    Tags,
    PublicAccessBlock,
    Encryption,
    Versioning(Versioning),
    LifecycleRules,
    Cors,
    ObjectOwnership(ObjectOwnership),
    Policy,
    /// The default retention of a bucket with object lock.
    ObjectLock,
    /// Intelligent-tiering configurations to write and to delete, by id.
    IntelligentTiering {
        put: Vec<String>,
        delete: Vec<String>,
    },
    TransferAcceleration(TransferAcceleration),
    Notifications,
    Logging,
    /// The replication role: created, or what differs put back.
    ReplicationRole(replication::RoleWrite),
    /// The replication configuration written.
    Replication,
    /// Replication turned off: the configuration removed.
    ReplicationOff,
    /// Replication turned off: the role deleted.
    ReplicationRoleOff,
}

impl Change {
    /// The aspect name used in events and the drift metric.
    pub fn aspect(&self) -> &'static str {
        match self {
            Change::Create => "bucket",
            Change::Tags => "tags",
            Change::PublicAccessBlock => "publicAccessBlock",
            Change::Encryption => "encryption",
            Change::Versioning(_) => "versioning",
            Change::LifecycleRules => "lifecycleRules",
            Change::Cors => "cors",
            Change::ObjectOwnership(_) => "objectOwnership",
            Change::Policy => "policy",
            Change::ObjectLock => "objectLock",
            Change::IntelligentTiering { .. } => "intelligentTiering",
            Change::TransferAcceleration(_) => "transferAcceleration",
            Change::Notifications => "notifications",
            Change::Logging => "logging",
            Change::ReplicationRole(_) | Change::ReplicationRoleOff => "replicationRole",
            Change::Replication | Change::ReplicationOff => "replication",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Plan {
    /// Nothing may be done until a person acts.
    Blocked(Blocked),
    /// These writes bring S3 in line with the spec (none in steady state).
    Apply(Vec<Change>),
}

/// The pure heart of the Bucket reconciler: which writes turn `observed` into `desired`.
pub fn plan(desired: &Desired, observed: &Found) -> Plan {
    match observed {
        Found::Foreign(owner) => Plan::Blocked(Blocked::new(
            Reason::NameConflict,
            format!(
                "bucket {} already exists and is {owner}; it will not be modified",
                desired.name
            ),
        )),
        Found::NotAdoptable(why) => Plan::Blocked(Blocked::new(Reason::NameConflict, why.clone())),
        Found::Absent | Found::Present(_) if desired.policy.is_err() => {
            let why = desired.policy.clone().err().unwrap_or_default();
            Plan::Blocked(Blocked::new(Reason::InvalidSpec, why))
        }
        Found::Absent | Found::Present(_) if matches!(desired.notifications, Some(Err(_))) => {
            let why = notifications_refusal(desired);
            Plan::Blocked(Blocked::new(Reason::InvalidSpec, why))
        }
        Found::Absent => Plan::Apply(creation(desired)),
        Found::Present(config) => {
            let want = desired.replication.as_ref().and_then(Option::as_ref);
            let refused = protection::refused(desired, config)
                .or_else(|| replication::refused(want, config.replication.as_ref()));
            match refused {
                Some(why) => Plan::Blocked(why),
                None => Plan::Apply(drift(desired, config)),
            }
        }
    }
}

/// The writes that make a new bucket: created with its tags, object ownership and object lock
/// in one call, then each managed aspect that differs from what S3 gives a new bucket.
pub(super) fn creation(desired: &Desired) -> Vec<Change> {
    let mut all = vec![
        Change::Create,
        Change::PublicAccessBlock,
        Change::Encryption,
        Change::Policy,
    ];
    // A new bucket is unversioned, which is what Suspended means for it; object lock turns
    // versioning on in the CreateBucket call.
    if desired.versioning == Some(Versioning::Enabled) && desired.object_lock.is_none() {
        all.push(Change::Versioning(Versioning::Enabled));
    }
    if desired
        .lifecycle_rules
        .as_ref()
        .is_some_and(|r| !r.is_empty())
    {
        all.push(Change::LifecycleRules);
    }
    if desired.cors.as_ref().is_some_and(|r| !r.is_empty()) {
        all.push(Change::Cors);
    }
    all.extend(protection::on_create(desired));
    if let Some(Ok(n)) = &desired.notifications
        && !n.is_empty()
    {
        all.push(Change::Notifications);
    }
    // A new bucket logs nothing: only logging somewhere is a write.
    if matches!(desired.logging, Some(Some(_))) {
        all.push(Change::Logging);
    }
    // After versioning, which S3 needs first; a new bucket has no configuration to remove.
    if let Some(Some(_)) = &desired.replication {
        all.push(Change::ReplicationRole(replication::RoleWrite::Create));
        all.push(Change::Replication);
    }
    all
}

/// The writes that bring an existing bucket back to the spec: one per managed aspect that
/// differs (none in steady state).
pub(super) fn drift(desired: &Desired, config: &BucketState) -> Vec<Change> {
    let mut changes = aspects(desired, config);
    if config.tags != desired.tags {
        // A bucket that is not ours yet is tagged first, so nothing else is written to it
        // before it is; one that is has its tags written last, so a refused tag write (S3
        // refuses them on a bucket with ABAC on) holds back no other aspect.
        let owned = tags::KEYS
            .iter()
            .all(|k| config.tags.get(*k) == desired.tags.get(*k));
        changes.insert(if owned { changes.len() } else { 0 }, Change::Tags);
    }
    changes
}

/// The writes of every managed aspect but the tags that differs from the spec.
fn aspects(desired: &Desired, config: &BucketState) -> Vec<Change> {
    let mut changes = Vec::new();
    if config.public_access_block != Some(desired.public_access_block) {
        changes.push(Change::PublicAccessBlock);
    }
    if config.encryption.as_ref().map(normalize_encryption)
        != Some(normalize_encryption(&desired.encryption))
    {
        changes.push(Change::Encryption);
    }
    if let Some(want) = desired.versioning
        && config.versioning.unwrap_or(Versioning::Suspended) != want
    {
        changes.push(Change::Versioning(want));
    }
    if let Some(want) = &desired.lifecycle_rules
        && config.lifecycle_rules.as_ref().map(|r| sorted_rules(r)) != Some(sorted_rules(want))
    {
        changes.push(Change::LifecycleRules);
    }
    if let Some(want) = &desired.cors
        && config.cors.as_ref().map(|r| normalize_cors(r)) != Some(normalize_cors(want))
    {
        changes.push(Change::Cors);
    }
    if let Some(want) = desired.object_ownership
        && config.object_ownership != Some(want)
    {
        changes.push(Change::ObjectOwnership(want));
    }
    let partition = naming::partition(&desired.region);
    if let Ok(want) = &desired.policy
        && config
            .policy
            .as_ref()
            .map(|p| policy::normalize_policy(p, partition))
            != Some(policy::normalize_policy(want, partition))
    {
        changes.push(Change::Policy);
    }
    changes.extend(protection::changes(desired, config));
    if let Some(Ok(want)) = &desired.notifications
        && notifications::drifted(want, config.notifications.as_ref())
    {
        changes.push(Change::Notifications);
    }
    if let Some(want) = &desired.logging
        && config.logging.as_ref() != Some(want)
    {
        changes.push(Change::Logging);
    }
    changes.extend(replication_changes(desired, config));
    changes
}

/// The replication writes: the role before the configuration that names it; turned off, the
/// configuration before the role.
fn replication_changes(desired: &Desired, config: &BucketState) -> Vec<Change> {
    let observed = config.replication.as_ref();
    match &desired.replication {
        None => vec![],
        Some(Some(want)) => {
            let partition = naming::partition(&desired.region);
            let (role, write) = replication::changes(want, observed, partition);
            let role = role.map(Change::ReplicationRole);
            role.into_iter()
                .chain(write.then_some(Change::Replication))
                .collect()
        }
        Some(None) => {
            let (config, role) = replication::off(observed);
            let config = config.then_some(Change::ReplicationOff);
            config
                .into_iter()
                .chain(role.then_some(Change::ReplicationRoleOff))
                .collect()
        }
    }
}

fn notifications_refusal(desired: &Desired) -> String {
    match &desired.notifications {
        Some(Err(why)) => why.clone(),
        _ => String::new(),
    }
}

fn normalize_encryption(e: &Encryption) -> Encryption {
    let mut e = e.clone();
    if e.algorithm == EncryptionAlgorithm::AwsKms {
        e.bucket_key_enabled = Some(e.bucket_key_enabled.unwrap_or(false));
    }
    e
}

fn sorted_rules(rules: &[LifecycleRule]) -> Vec<LifecycleRule> {
    let mut r = rules.to_vec();
    r.sort_by(|a, b| a.id.cmp(&b.id));
    r
}

fn normalize_cors(rules: &[CorsRule]) -> Vec<CorsRule> {
    rules
        .iter()
        .map(|r| {
            let mut r = r.clone();
            r.allowed_methods.sort();
            r.allowed_methods.dedup();
            r
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{
        Bucket, BucketSpec, CorsMethod, PolicyEffect, PolicyPrincipal, PolicyStatement,
    };
    use crate::reconcile::bucket::desired;
    use crate::reconcile::bucket::fixtures::{converged, desired_for, owner, rule, settings};

    #[test]
    fn absent_bucket_is_created_with_defaults() {
        let d = desired_for(BucketSpec::default());
        assert!(d.name.starts_with("s3op-ns-b-"));
        assert_eq!(
            plan(&d, &Found::Absent),
            Plan::Apply(vec![
                Change::Create,
                Change::PublicAccessBlock,
                Change::Encryption,
                Change::Policy
            ])
        );
    }

    #[test]
    fn absent_bucket_gets_every_managed_aspect() {
        let d = desired_for(BucketSpec {
            versioning: Some(Versioning::Enabled),
            lifecycle_rules: Some(vec![rule("a")]),
            cors: Some(vec![]),
            ..Default::default()
        });
        let Plan::Apply(changes) = plan(&d, &Found::Absent) else {
            panic!()
        };
        assert!(changes.contains(&Change::Versioning(Versioning::Enabled)));
        assert!(changes.contains(&Change::LifecycleRules));
        assert!(
            !changes.contains(&Change::Cors),
            "an empty CORS list needs no write on a new bucket"
        );
    }

    #[test]
    fn steady_state_plans_nothing() {
        let d = desired_for(BucketSpec {
            versioning: Some(Versioning::Enabled),
            lifecycle_rules: Some(vec![rule("b"), rule("a")]),
            cors: Some(vec![CorsRule {
                allowed_methods: vec![CorsMethod::PUT, CorsMethod::GET],
                allowed_origins: vec!["*".into()],
                allowed_headers: vec![],
                expose_headers: vec![],
                max_age_seconds: None,
            }]),
            tags: BTreeMap::from([("team".into(), "x".into())]),
            ..Default::default()
        });
        let mut c = converged(&d);
        // S3 returns rules in its own order and methods sorted.
        c.lifecycle_rules.as_mut().unwrap().reverse();
        c.cors.as_mut().unwrap()[0].allowed_methods.sort();
        assert_eq!(plan(&d, &Found::Present(c.into())), Plan::Apply(vec![]));
    }

    type Mutation = Box<dyn Fn(&mut BucketState)>;

    /// Each change to a converged configuration, and the one write that undoes it.
    fn drifts() -> Vec<(Mutation, Change)> {
        vec![
            (
                Box::new(|c| c.public_access_block.as_mut().unwrap().block_public_policy = false),
                Change::PublicAccessBlock,
            ),
            (
                Box::new(|c| c.public_access_block = None),
                Change::PublicAccessBlock,
            ),
            (Box::new(|c| c.encryption = None), Change::Encryption),
            (
                Box::new(|c| {
                    c.encryption.as_mut().unwrap().algorithm = EncryptionAlgorithm::AwsKms
                }),
                Change::Encryption,
            ),
            (
                Box::new(|c| c.versioning = Some(Versioning::Suspended)),
                Change::Versioning(Versioning::Enabled),
            ),
            (
                Box::new(|c| c.lifecycle_rules = Some(vec![])),
                Change::LifecycleRules,
            ),
            (
                Box::new(|c| c.lifecycle_rules.as_mut().unwrap()[0].expiration_days = Some(1)),
                Change::LifecycleRules,
            ),
            (
                Box::new(|c| {
                    c.cors = Some(vec![CorsRule {
                        allowed_methods: vec![CorsMethod::GET],
                        allowed_origins: vec!["*".into()],
                        allowed_headers: vec![],
                        expose_headers: vec![],
                        max_age_seconds: None,
                    }])
                }),
                Change::Cors,
            ),
            (
                Box::new(|c| {
                    c.tags.insert("extra".into(), "1".into());
                }),
                Change::Tags,
            ),
            (
                Box::new(|c| {
                    c.tags.remove(crate::aws::tags::NAME);
                }),
                Change::Tags,
            ),
        ]
    }

    #[test]
    fn each_drift_is_planned_alone() {
        let d = desired_for(BucketSpec {
            versioning: Some(Versioning::Enabled),
            lifecycle_rules: Some(vec![rule("a")]),
            cors: Some(vec![]),
            ..Default::default()
        });
        for (mutate, want) in drifts() {
            let mut c = converged(&d);
            mutate(&mut c);
            assert_eq!(plan(&d, &Found::Present(c.into())), Plan::Apply(vec![want]));
        }
    }

    #[test]
    fn new_buckets_disable_acls_by_default_in_the_create_call() {
        let d = desired_for(BucketSpec::default());
        assert_eq!(d.object_ownership, None, "omitted: unmanaged once created");
        assert_eq!(d.creation_ownership(), ObjectOwnership::BucketOwnerEnforced);
        // No write of its own: CreateBucket carries it.
        let Plan::Apply(changes) = plan(&d, &Found::Absent) else {
            panic!()
        };
        assert!(
            !changes
                .iter()
                .any(|c| matches!(c, Change::ObjectOwnership(_)))
        );
    }

    #[test]
    fn explicit_object_ownership_is_created_kept_and_corrected() {
        let d = desired_for(BucketSpec {
            object_ownership: Some(ObjectOwnership::ObjectWriter),
            ..Default::default()
        });
        assert_eq!(d.creation_ownership(), ObjectOwnership::ObjectWriter);
        let c = converged(&d);
        assert_eq!(plan(&d, &Found::Present(c.into())), Plan::Apply(vec![]));
        for drifted in [None, Some(ObjectOwnership::BucketOwnerEnforced)] {
            let mut c = converged(&d);
            c.object_ownership = drifted;
            assert_eq!(
                plan(&d, &Found::Present(c.into())),
                Plan::Apply(vec![Change::ObjectOwnership(ObjectOwnership::ObjectWriter)]),
                "{drifted:?}"
            );
        }
        assert_eq!(
            Change::ObjectOwnership(ObjectOwnership::ObjectWriter).aspect(),
            "objectOwnership"
        );
    }

    #[test]
    fn unmanaged_object_ownership_of_an_existing_bucket_is_left_alone() {
        let d = desired_for(BucketSpec::default());
        let mut c = converged(&d);
        c.object_ownership = Some(ObjectOwnership::ObjectWriter);
        assert_eq!(plan(&d, &Found::Present(c.into())), Plan::Apply(vec![]));
    }

    #[test]
    fn the_tls_only_policy_is_kept_and_compared_semantically() {
        let d = desired_for(BucketSpec::default());
        let want = d.policy.clone().unwrap();
        let tls = &want["Statement"][0];
        assert_eq!(tls["Sid"], policy::TLS_ONLY_SID);
        assert_eq!(
            tls["Resource"][0],
            format!("arn:aws:s3:::{}", d.name),
            "this bucket only"
        );
        // S3's own formatting of the same document is no drift.
        let mut reformatted = want.clone();
        reformatted["Statement"][0]["Principal"] = serde_json::json!({"AWS": "*"});
        reformatted["Statement"][0]["Action"] = serde_json::json!(["s3:*"]);
        let mut c = converged(&d);
        c.policy = Some(reformatted);
        assert_eq!(plan(&d, &Found::Present(c.into())), Plan::Apply(vec![]));
        // A policy deleted, the TLS statement dropped or weakened, or a statement added: rewritten.
        let mut weakened = want.clone();
        weakened["Statement"][0]["Condition"]["Bool"]["aws:SecureTransport"] =
            serde_json::json!("true");
        let mut added = want.clone();
        added["Statement"].as_array_mut().unwrap().push(
            serde_json::json!({"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject"}),
        );
        for drifted in [
            None,
            Some(serde_json::json!({"Version": "2012-10-17", "Statement": []})),
            Some(weakened),
            Some(added),
            Some(serde_json::Value::Null),
        ] {
            let mut c = converged(&d);
            c.policy = drifted.clone();
            assert_eq!(
                plan(&d, &Found::Present(c.into())),
                Plan::Apply(vec![Change::Policy]),
                "{drifted:?}"
            );
        }
    }

    fn statement(effect: PolicyEffect, aws: &[&str], resource: &str) -> PolicyStatement {
        PolicyStatement {
            sid: Some("Team".into()),
            effect,
            principal: PolicyPrincipal {
                aws: aws.iter().map(|p| p.to_string()).collect(),
                service: vec![],
            },
            action: vec!["s3:GetObject".into()],
            resource: vec![resource.into()],
            condition: BTreeMap::new(),
        }
    }

    fn desired_with(statements: Vec<PolicyStatement>, allowed: &[&str], bucket: &str) -> Desired {
        let mut b = Bucket::new(
            "b",
            BucketSpec {
                bucket_name: Some(bucket.into()),
                policy: statements,
                ..Default::default()
            },
        );
        b.metadata.namespace = Some("ns".into());
        b.metadata.uid = Some("uid-1".into());
        let mut settings = settings();
        settings.allowed_policy_principals = allowed.iter().map(|p| p.to_string()).collect();
        desired(&b, &settings, "us-east-1", &owner()).unwrap()
    }

    #[test]
    fn policy_statements_follow_the_tls_statement_which_is_always_kept() {
        let objects = "arn:aws:s3:::s3op-b/*";
        let own = statement(
            PolicyEffect::Allow,
            &["arn:aws:iam::123456789012:role/app"],
            objects,
        );
        let d = desired_with(vec![own], &[], "s3op-b");
        let doc = d.policy.clone().unwrap();
        let all = doc["Statement"].as_array().unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all[0]["Sid"], policy::TLS_ONLY_SID);
        assert_eq!(
            all[1]["Principal"]["AWS"][0],
            "arn:aws:iam::123456789012:role/app"
        );
        assert_eq!(all[1]["Resource"][0], objects);
        let c = converged(&d);
        assert_eq!(plan(&d, &Found::Present(c.into())), Plan::Apply(vec![]));
        // A policy holding only the user's statement (the TLS one removed) is rewritten.
        let mut c = converged(&d);
        c.policy.as_mut().unwrap()["Statement"]
            .as_array_mut()
            .unwrap()
            .remove(0);
        assert_eq!(
            plan(&d, &Found::Present(c.into())),
            Plan::Apply(vec![Change::Policy])
        );
        // And a new bucket gets it in its first pass.
        let Plan::Apply(changes) = plan(&d, &Found::Absent) else {
            panic!()
        };
        assert!(changes.contains(&Change::Policy));
    }

    #[test]
    fn a_refused_policy_blocks_a_new_or_an_existing_bucket() {
        let public = statement(PolicyEffect::Allow, &["*"], "arn:aws:s3:::s3op-b");
        let d = desired_with(vec![public], &[], "s3op-b");
        for observed in [Found::Absent, Found::Present(BucketState::default().into())] {
            match plan(&d, &observed) {
                Plan::Blocked(Blocked {
                    reason: Reason::InvalidSpec,
                    message,
                    ..
                }) => assert!(message.contains("spec.policy[0].principal"), "{message}"),
                other => panic!("not refused: {other:?}"),
            }
        }
    }

    #[test]
    fn unmanaged_aspects_are_never_planned() {
        let d = desired_for(BucketSpec::default());
        let mut c = converged(&d);
        c.versioning = Some(Versioning::Enabled);
        assert_eq!(plan(&d, &Found::Present(c.into())), Plan::Apply(vec![]));
    }

    #[test]
    fn suspended_is_satisfied_by_a_never_versioned_bucket() {
        let d = desired_for(BucketSpec {
            versioning: Some(Versioning::Suspended),
            ..Default::default()
        });
        let mut c = converged(&d);
        c.versioning = None;
        assert_eq!(plan(&d, &Found::Present(c.into())), Plan::Apply(vec![]));
    }

    #[test]
    fn kms_bucket_key_defaults_to_false() {
        let enc = Encryption {
            algorithm: EncryptionAlgorithm::AwsKms,
            kms_key_id: Some("k".into()),
            bucket_key_enabled: None,
        };
        let d = desired_for(BucketSpec {
            encryption: Some(enc.clone()),
            ..Default::default()
        });
        let mut c = converged(&d);
        c.encryption = Some(Encryption {
            bucket_key_enabled: Some(false),
            ..enc
        });
        assert_eq!(plan(&d, &Found::Present(c.into())), Plan::Apply(vec![]));
    }

    #[test]
    fn foreign_and_unowned_buckets_are_never_touched() {
        let d = desired_for(BucketSpec::default());
        assert!(
            matches!(plan(&d, &Found::Foreign("held by another installation".into())), Plan::Blocked(Blocked { reason: Reason::NameConflict, message: m, .. }) if m.contains("held by another installation"))
        );
        assert!(
            matches!(plan(&d, &Found::NotAdoptable("set spec.adoptExisting".into())), Plan::Blocked(Blocked { reason: Reason::NameConflict, message: m, .. }) if m.contains("adoptExisting"))
        );
    }

    #[test]
    fn adoption_writes_ownership_tags_and_keeps_user_tags_desired() {
        let d = desired_for(BucketSpec {
            tags: BTreeMap::from([("team".into(), "x".into())]),
            ..Default::default()
        });
        let mut c = converged(&d);
        c.tags = BTreeMap::from([("team".into(), "x".into())]);
        assert_eq!(
            plan(&d, &Found::Present(c.into())),
            Plan::Apply(vec![Change::Tags])
        );
        assert_eq!(
            d.tags.get(crate::aws::tags::UID).map(String::as_str),
            Some("uid-1")
        );
    }

    #[test]
    fn tags_are_written_last_on_an_owned_bucket_and_first_on_one_being_adopted() {
        let d = desired_for(BucketSpec {
            tags: BTreeMap::from([("team".into(), "x".into())]),
            ..Default::default()
        });
        // A refused tag write (ABAC on) must not hold back the encryption of a bucket of ours.
        let mut owned = converged(&d);
        owned.tags.insert("team".into(), "y".into());
        owned.encryption = None;
        assert_eq!(
            plan(&d, &Found::Present(owned.into())),
            Plan::Apply(vec![Change::Encryption, Change::Tags])
        );
        // Nothing is written to a bucket before it carries our ownership tags.
        for lost in [crate::aws::tags::UID, crate::aws::tags::CLUSTER] {
            let mut adopted = converged(&d);
            adopted.tags.remove(lost);
            adopted.encryption = None;
            assert_eq!(
                plan(&d, &Found::Present(adopted.into())),
                Plan::Apply(vec![Change::Tags, Change::Encryption]),
                "{lost}"
            );
        }
    }

    fn with_notifications(n: crate::api::Notifications, allowed: &[&str]) -> Desired {
        let mut b = Bucket::new(
            "b",
            BucketSpec {
                notifications: Some(n),
                ..Default::default()
            },
        );
        b.metadata.namespace = Some("ns".into());
        b.metadata.uid = Some("uid-1".into());
        let mut settings = settings();
        settings.allowed_notification_targets = allowed.iter().map(|p| p.to_string()).collect();
        desired(&b, &settings, "us-east-1", &owner()).unwrap()
    }

    /// EventBridge and a queue, and the queue's ARN.
    fn queued() -> (crate::api::Notifications, &'static str) {
        let queue = "arn:aws:sqs:us-east-1:123456789012:q";
        let n = crate::api::Notifications {
            event_bridge: true,
            queues: vec![crate::api::NotificationTarget {
                id: None,
                arn: queue.into(),
                events: vec!["s3:ObjectCreated:*".into()],
                filter: None,
            }],
            topics: vec![],
        };
        (n, queue)
    }

    #[test]
    fn notifications_are_written_kept_and_unmanaged_when_omitted() {
        let (n, queue) = queued();
        let d = with_notifications(n, &[queue]);
        let Plan::Apply(changes) = plan(&d, &Found::Absent) else {
            panic!()
        };
        assert_eq!(changes.last(), Some(&Change::Notifications));
        assert_eq!(
            plan(&d, &Found::Present(converged(&d).into())),
            Plan::Apply(vec![])
        );
        let mut c = converged(&d);
        c.notifications.as_mut().unwrap().config.event_bridge = false;
        assert_eq!(
            plan(&d, &Found::Present(c.into())),
            Plan::Apply(vec![Change::Notifications])
        );
        assert_eq!(Change::Notifications.aspect(), "notifications");
        // `{}` on a new bucket needs no write; on one with notifications it removes them.
        let none = with_notifications(Default::default(), &[]);
        let Plan::Apply(changes) = plan(&none, &Found::Absent) else {
            panic!()
        };
        assert!(!changes.contains(&Change::Notifications));
        let mut c = converged(&none);
        c.notifications = converged(&d).notifications;
        assert_eq!(
            plan(&none, &Found::Present(c.into())),
            Plan::Apply(vec![Change::Notifications])
        );
        // Omitted: whatever S3 holds is left alone.
        let omitted = desired_for(BucketSpec::default());
        assert_eq!(omitted.notifications, None);
        let mut c = converged(&omitted);
        c.notifications = converged(&d).notifications;
        assert_eq!(
            plan(&omitted, &Found::Present(c.into())),
            Plan::Apply(vec![])
        );
    }

    #[test]
    fn notifications_not_allow_listed_are_refused_before_any_write() {
        let (n, queue) = queued();
        let d = with_notifications(n.clone(), &[queue]);
        let refused = with_notifications(n, &[]);
        for observed in [Found::Absent, Found::Present(converged(&d).into())] {
            match plan(&refused, &observed) {
                Plan::Blocked(Blocked {
                    reason: Reason::InvalidSpec,
                    message,
                    ..
                }) => assert!(
                    message.contains("spec.notifications.queues[0].arn"),
                    "{message}"
                ),
                other => panic!("not refused: {other:?}"),
            }
        }
    }
}
