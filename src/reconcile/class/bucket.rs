//! What a BucketClass does to a Bucket's spec, as pure functions: its defaults fill what the
//! spec leaves unset ([`with_defaults`]), then its constraints are checked ([`enforce`]).
//! Breaking a constraint is a `ClassViolation` that changes nothing in AWS, except for the
//! security ones (policy principals, notification targets): what they no longer allow is
//! dropped from the spec at once, and the caller says so in an event.

use kube::ResourceExt;

use crate::api::condition::Reason;
use crate::api::{
    Bucket, BucketClass, BucketConstraints, BucketDefaults, BucketSpec, DeletionPolicy, Encryption,
    EncryptionAlgorithm, PolicyEffect, PublicAccessBlock, RetentionMode, TransferAcceleration,
    Versioning,
};
use crate::aws::policy;
use crate::reconcile::bucket::notifications::allows;
use crate::reconcile::{Blocked, Error, Settings, deletion_policy, has_finalizer};

/// The class a Bucket is under, or the violation naming it is (see [`super::InForce`]).
pub type InForce = super::InForce<BucketClass>;
pub use super::{name, version};

/// The class `bucket` is under, as the watches see it now: resolved once per pass.
pub fn in_force(classes: &super::Classes, bucket: &Bucket) -> Result<InForce, Error> {
    let ns = bucket.namespace().unwrap_or_default();
    super::violation(classes.bucket_class(&ns, bucket.spec.class_name.as_deref()))
}

/// `spec` with the class's defaults in every field it leaves unset (tags: merged, the spec's
/// keys win), then the operator's own defaults for encryption (SSE-S3) and the public access
/// block (all four flags on). The region is not defaulted here: see [`creation_region`].
pub fn with_defaults(spec: &BucketSpec, defaults: Option<&BucketDefaults>) -> BucketSpec {
    let mut s = spec.clone();
    if let Some(d) = defaults {
        s.versioning = s.versioning.or(d.versioning);
        s.encryption = s.encryption.or_else(|| d.encryption.clone());
        s.object_ownership = s.object_ownership.or(d.object_ownership);
        s.lifecycle_rules = s.lifecycle_rules.or_else(|| d.lifecycle_rules.clone());
        s.deletion_policy = s.deletion_policy.or(d.deletion_policy);
        s.public_access_block = s.public_access_block.or(d.public_access_block);
        s.management = s.management.or(d.management);
        for (k, v) in &d.tags {
            s.tags.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    s.encryption.get_or_insert_with(Encryption::default);
    s.public_access_block
        .get_or_insert_with(PublicAccessBlock::default);
    s
}

/// Checks a defaulted `spec` in `region` against `class`'s constraints. `Err`: the first rule
/// broken, naming the field, the class and the rule. `Ok`: what the security constraints
/// removed from `spec` (policy statements and notification targets the class does not allow
/// but the operator's flags do; what the flags refuse stays, for the operator's own refusal).
pub fn enforce(
    spec: &mut BucketSpec,
    class: &BucketClass,
    region: &str,
    settings: &Settings,
) -> Result<Vec<String>, Blocked> {
    let c = &class.spec.constraints;
    if let Some((field, rule)) = violation(spec, c, region, settings) {
        let name = class.name_any();
        return Err(Blocked::new(
            Reason::ClassViolation,
            format!("{field} breaks BucketClass {name}: constraints.{rule}"),
        ));
    }
    let mut removed = remove_principals(spec, c, settings);
    removed.extend(remove_targets(spec, c, settings));
    Ok(removed)
}

/// The first constraint `spec` breaks: (the field and its value, the rule).
fn violation(
    spec: &BucketSpec,
    c: &BucketConstraints,
    region: &str,
    settings: &Settings,
) -> Option<(String, String)> {
    let listed = |list: &[String]| format!("[{}]", list.join(", "));
    if !c.allowed_regions.is_empty() && !c.allowed_regions.iter().any(|r| r == region) {
        let rule = format!("allowedRegions is {}", listed(&c.allowed_regions));
        return Some((format!("spec.region {region}"), rule));
    }
    if let Some(v) = encryption_violation(spec.encryption.as_ref(), c) {
        return Some(v);
    }
    if c.require_versioning && spec.versioning != Some(Versioning::Enabled) {
        let have = spec
            .versioning
            .map_or("(unset)".into(), |v| format!("{v:?}"));
        let rule = "requireVersioning is true".to_string();
        return Some((format!("spec.versioning {have}"), rule));
    }
    let mode = spec.management.unwrap_or_default();
    if !c.allowed_management_modes.is_empty() && !c.allowed_management_modes.contains(&mode) {
        let names: Vec<String> = (c.allowed_management_modes.iter())
            .map(|m| format!("{m:?}"))
            .collect();
        let rule = format!("allowedManagementModes is {}", listed(&names));
        return Some((format!("spec.management {mode:?}"), rule));
    }
    let policy = deletion_policy(spec.deletion_policy, settings);
    if !c.allowed_deletion_policies.is_empty() && !c.allowed_deletion_policies.contains(&policy) {
        let names: Vec<String> = c
            .allowed_deletion_policies
            .iter()
            .map(|p| format!("{p:?}"))
            .collect();
        let rule = format!("allowedDeletionPolicies is {}", listed(&names));
        return Some((format!("spec.deletionPolicy {policy:?}"), rule));
    }
    switch_violation(spec, c)
}

fn encryption_violation(e: Option<&Encryption>, c: &BucketConstraints) -> Option<(String, String)> {
    let e = e.cloned().unwrap_or_default();
    let algorithm = |a: EncryptionAlgorithm| match a {
        EncryptionAlgorithm::Aes256 => "AES256",
        EncryptionAlgorithm::AwsKms => "aws:kms",
    };
    if let Some(required) = c.required_encryption
        && e.algorithm != required
    {
        let field = format!("spec.encryption.algorithm {}", algorithm(e.algorithm));
        return Some((
            field,
            format!("requiredEncryption is {}", algorithm(required)),
        ));
    }
    let kms = e.algorithm == EncryptionAlgorithm::AwsKms;
    let key = e.kms_key_id.as_deref();
    if kms
        && !c.allowed_kms_keys.is_empty()
        && !key.is_some_and(|k| c.allowed_kms_keys.iter().any(|a| a == k))
    {
        let field = format!(
            "spec.encryption.kmsKeyId {}",
            key.unwrap_or("(the AWS managed key)")
        );
        let rule = format!("allowedKmsKeys is [{}]", c.allowed_kms_keys.join(", "));
        return Some((field, rule));
    }
    None
}

/// The features a class may switch off.
fn switch_violation(spec: &BucketSpec, c: &BucketConstraints) -> Option<(String, String)> {
    let compliance = spec
        .object_lock
        .as_ref()
        .and_then(|l| l.default_retention)
        .is_some_and(|r| r.mode == RetentionMode::COMPLIANCE);
    let accelerated = spec.transfer_acceleration == Some(TransferAcceleration::Enabled);
    let off = [
        (
            spec.force_delete && !c.allow_force_delete,
            "spec.forceDelete true",
            "allowForceDelete",
        ),
        (
            spec.adopt_existing && !c.allow_adopt_existing,
            "spec.adoptExisting true",
            "allowAdoptExisting",
        ),
        (
            spec.object_lock.is_some() && !c.allow_object_lock,
            "spec.objectLock",
            "allowObjectLock",
        ),
        (
            compliance && !c.allow_compliance_retention,
            "spec.objectLock.defaultRetention.mode COMPLIANCE",
            "allowComplianceRetention",
        ),
        (
            accelerated && !c.allow_transfer_acceleration,
            "spec.transferAcceleration Enabled",
            "allowTransferAcceleration",
        ),
    ];
    off.into_iter()
        .find(|(broken, _, _)| *broken)
        .map(|(_, field, rule)| (field.to_string(), format!("{rule} is false")))
}

/// Drops the `Allow` statements that name a principal outside the class's
/// `allowedPolicyPrincipals` (the operator's account is always allowed) but allowed by the flags.
fn remove_principals(spec: &mut BucketSpec, c: &BucketConstraints, s: &Settings) -> Vec<String> {
    let Some(class) = &c.allowed_policy_principals else {
        return vec![];
    };
    let account = s.account_id.as_str();
    let mut removed = vec![];
    let mut i = 0;
    spec.policy.retain(|st| {
        let drop = st.effect == PolicyEffect::Allow
            && policy::allow_refused(st, account, &s.allowed_policy_principals).is_none()
            && policy::allow_refused(st, account, class).is_some();
        if drop {
            let names = [&st.principal.aws[..], &st.principal.service[..]]
                .concat()
                .join(", ");
            removed.push(format!(
                "spec.policy[{i}] (principals {names}): not on constraints.allowedPolicyPrincipals"
            ));
        }
        i += 1;
        !drop
    });
    removed
}

/// Drops the queues and topics outside the class's `allowedNotificationTargets` but allowed by
/// the flags.
fn remove_targets(spec: &mut BucketSpec, c: &BucketConstraints, s: &Settings) -> Vec<String> {
    let (Some(class), Some(n)) = (&c.allowed_notification_targets, spec.notifications.as_mut())
    else {
        return vec![];
    };
    let flags = &s.allowed_notification_targets;
    let mut removed = vec![];
    for (field, targets) in [("queues", &mut n.queues), ("topics", &mut n.topics)] {
        targets.retain(|t| {
            let drop =
                flags.iter().any(|e| allows(e, &t.arn)) && !class.iter().any(|e| allows(e, &t.arn));
            if drop {
                removed.push(format!(
                    "spec.notifications.{field} {}: not on constraints.allowedNotificationTargets",
                    t.arn
                ));
            }
            !drop
        });
    }
    removed
}

/// The region `class` gives a Bucket that names none, to record in its status: only before the
/// operator has done anything for it (no finalizer), so an existing bucket never follows a
/// class's new default region. `None`: nothing to record (already recorded, or the operator's
/// region applies).
pub fn creation_region(
    bucket: &Bucket,
    class: &BucketClass,
    operator_region: &str,
) -> Option<String> {
    if bucket.spec.region.is_some() || has_finalizer(bucket) {
        return None;
    }
    let recorded = bucket.status.as_ref().and_then(|s| s.region.as_ref());
    class
        .spec
        .defaults
        .region
        .clone()
        .filter(|r| r != operator_region && recorded != Some(r))
}

/// The deletion policy a Bucket's cleanup follows: its own, else its class's default, else the
/// operator's. Never blocked: a class that cannot be resolved leaves the spec's or flag's.
pub fn cleanup_deletion_policy(
    spec: &BucketSpec,
    class: Option<&BucketClass>,
    settings: &Settings,
) -> DeletionPolicy {
    let class_default = class.and_then(|c| c.spec.defaults.deletion_policy);
    deletion_policy(spec.deletion_policy.or(class_default), settings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{
        BucketClassSpec, DefaultRetention, Management, NotificationTarget, Notifications,
        ObjectLock, PolicyPrincipal, PolicyStatement,
    };

    fn class(constraints: BucketConstraints) -> BucketClass {
        BucketClass::new(
            "prod",
            BucketClassSpec {
                constraints,
                ..Default::default()
            },
        )
    }

    fn settings() -> Settings {
        let mut s = Settings::for_tests();
        s.allowed_policy_principals = vec!["111111111111".into(), "222222222222".into()];
        s.allowed_notification_targets = vec!["arn:aws:sqs:us-east-1:123456789012:*".into()];
        s
    }

    fn kms(key: Option<&str>) -> Encryption {
        Encryption {
            algorithm: EncryptionAlgorithm::AwsKms,
            kms_key_id: key.map(Into::into),
            bucket_key_enabled: None,
        }
    }

    #[test]
    fn the_objects_values_win_then_the_class_then_the_operators() {
        let defaults = BucketDefaults {
            versioning: Some(Versioning::Enabled),
            encryption: Some(kms(Some("k1"))),
            deletion_policy: Some(DeletionPolicy::Delete),
            tags: [("team", "platform"), ("cost", "shared")]
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .into(),
            ..Default::default()
        };
        let mut spec = BucketSpec {
            versioning: Some(Versioning::Suspended),
            ..Default::default()
        };
        spec.tags.insert("team".into(), "a".into());
        let s = with_defaults(&spec, Some(&defaults));
        assert_eq!(
            s.versioning,
            Some(Versioning::Suspended),
            "the object's value"
        );
        assert_eq!(s.encryption, Some(kms(Some("k1"))), "the class's default");
        assert_eq!(s.deletion_policy, Some(DeletionPolicy::Delete));
        assert_eq!(s.tags["team"], "a", "the object's tag wins");
        assert_eq!(s.tags["cost"], "shared", "the class's tag is added");
        assert_eq!(s.public_access_block, Some(PublicAccessBlock::default()));
        // No class: today's defaults.
        let s = with_defaults(&BucketSpec::default(), None);
        assert_eq!(s.encryption, Some(Encryption::default()));
        assert_eq!(s.encryption.unwrap().algorithm, EncryptionAlgorithm::Aes256);
        assert_eq!(s.public_access_block, Some(PublicAccessBlock::default()));
        assert_eq!(s.versioning, None);
    }

    /// Each constraint refused with the field, the class and the rule.
    type Case = (
        BucketConstraints,
        Box<dyn Fn(&mut BucketSpec)>,
        &'static str,
    );

    /// Each constraint, a change to a defaulted spec that breaks it, and the message.
    fn violations() -> Vec<Case> {
        let c = BucketConstraints::default;
        let locked = Some(ObjectLock {
            default_retention: Some(DefaultRetention {
                mode: RetentionMode::COMPLIANCE,
                days: Some(1),
                years: None,
            }),
        });
        vec![
            (
                BucketConstraints {
                    allowed_regions: vec!["eu-west-1".into()],
                    ..c()
                },
                Box::new(|_| {}),
                "spec.region us-east-1 breaks BucketClass prod: constraints.allowedRegions is [eu-west-1]",
            ),
            (
                BucketConstraints {
                    required_encryption: Some(EncryptionAlgorithm::AwsKms),
                    ..c()
                },
                Box::new(|_| {}),
                "spec.encryption.algorithm AES256 breaks BucketClass prod: constraints.requiredEncryption is aws:kms",
            ),
            (
                BucketConstraints {
                    allowed_kms_keys: vec!["k1".into()],
                    ..c()
                },
                Box::new(|s| s.encryption = Some(kms(Some("k2")))),
                "spec.encryption.kmsKeyId k2 breaks BucketClass prod: constraints.allowedKmsKeys is [k1]",
            ),
            (
                BucketConstraints {
                    allowed_kms_keys: vec!["k1".into()],
                    ..c()
                },
                Box::new(|s| s.encryption = Some(kms(None))),
                "spec.encryption.kmsKeyId (the AWS managed key) breaks",
            ),
            (
                BucketConstraints {
                    require_versioning: true,
                    ..c()
                },
                Box::new(|_| {}),
                "spec.versioning (unset) breaks BucketClass prod: constraints.requireVersioning is true",
            ),
            (
                BucketConstraints {
                    allowed_deletion_policies: vec![DeletionPolicy::Retain],
                    ..c()
                },
                Box::new(|s| s.deletion_policy = Some(DeletionPolicy::Delete)),
                "spec.deletionPolicy Delete breaks BucketClass prod: constraints.allowedDeletionPolicies is [Retain]",
            ),
            (
                BucketConstraints {
                    allowed_management_modes: vec![Management::Manage],
                    ..c()
                },
                Box::new(|s| s.management = Some(Management::Observe)),
                "spec.management Observe breaks BucketClass prod: constraints.allowedManagementModes is [Manage]",
            ),
            (
                BucketConstraints {
                    allow_force_delete: false,
                    ..c()
                },
                Box::new(|s| s.force_delete = true),
                "spec.forceDelete true breaks BucketClass prod: constraints.allowForceDelete is false",
            ),
            (
                BucketConstraints {
                    allow_adopt_existing: false,
                    ..c()
                },
                Box::new(|s| s.adopt_existing = true),
                "spec.adoptExisting true breaks BucketClass prod: constraints.allowAdoptExisting is false",
            ),
            (
                BucketConstraints {
                    allow_object_lock: false,
                    ..c()
                },
                Box::new(move |s| s.object_lock = Some(ObjectLock::default())),
                "spec.objectLock breaks BucketClass prod: constraints.allowObjectLock is false",
            ),
            (
                BucketConstraints {
                    allow_compliance_retention: false,
                    ..c()
                },
                Box::new(move |s| s.object_lock = locked.clone()),
                "spec.objectLock.defaultRetention.mode COMPLIANCE breaks BucketClass prod: constraints.allowComplianceRetention is false",
            ),
            (
                BucketConstraints {
                    allow_transfer_acceleration: false,
                    ..c()
                },
                Box::new(|s| s.transfer_acceleration = Some(TransferAcceleration::Enabled)),
                "spec.transferAcceleration Enabled breaks BucketClass prod: constraints.allowTransferAcceleration is false",
            ),
        ]
    }

    #[test]
    fn each_constraint_is_a_violation_naming_field_class_and_rule() {
        for (constraints, change, want) in violations() {
            let class = class(constraints);
            let mut spec = with_defaults(&BucketSpec::default(), None);
            change(&mut spec);
            let err = enforce(&mut spec, &class, "us-east-1", &settings()).unwrap_err();
            assert_eq!(err.reason, Reason::ClassViolation);
            assert!(
                err.message.starts_with(want),
                "{} does not start with {want}",
                err.message
            );
        }
        // The deletion policy the operator would give counts too.
        let class = self::class(BucketConstraints {
            allowed_deletion_policies: vec![DeletionPolicy::Delete],
            ..Default::default()
        });
        let mut spec = with_defaults(&BucketSpec::default(), None);
        let err = enforce(&mut spec, &class, "us-east-1", &settings()).unwrap_err();
        assert!(
            err.message.starts_with("spec.deletionPolicy Retain"),
            "{err}"
        );
    }

    fn allow(principal: &str) -> PolicyStatement {
        PolicyStatement {
            sid: None,
            effect: PolicyEffect::Allow,
            principal: PolicyPrincipal {
                aws: vec![principal.into()],
                service: vec![],
            },
            action: vec!["s3:GetObject".into()],
            resource: vec!["arn:aws:s3:::s3op-b/*".into()],
            condition: Default::default(),
        }
    }

    #[test]
    fn principals_the_class_no_longer_allows_are_removed_and_named() {
        let class = class(BucketConstraints {
            allowed_policy_principals: Some(vec!["111111111111".into()]),
            ..Default::default()
        });
        let mut spec = with_defaults(&BucketSpec::default(), None);
        spec.policy = vec![
            allow("arn:aws:iam::111111111111:role/r"),
            allow("arn:aws:iam::222222222222:role/r"),
            allow("arn:aws:iam::123456789012:role/own-account"),
            // Refused by the flags: left for the operator's own refusal (InvalidSpec).
            allow("arn:aws:iam::333333333333:role/r"),
        ];
        let removed = enforce(&mut spec, &class, "us-east-1", &settings()).unwrap();
        assert_eq!(removed.len(), 1, "{removed:?}");
        assert!(
            removed[0].contains("spec.policy[1]") && removed[0].contains("222222222222"),
            "{removed:?}"
        );
        let kept: Vec<_> = spec
            .policy
            .iter()
            .map(|s| s.principal.aws[0].as_str())
            .collect();
        assert_eq!(
            kept,
            [
                "arn:aws:iam::111111111111:role/r",
                "arn:aws:iam::123456789012:role/own-account",
                "arn:aws:iam::333333333333:role/r"
            ]
        );
        // Without a class list the flags alone decide: nothing removed.
        let open = self::class(BucketConstraints::default());
        assert!(
            enforce(&mut spec.clone(), &open, "us-east-1", &settings())
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn notification_targets_outside_the_class_list_are_removed() {
        let class = class(BucketConstraints {
            allowed_notification_targets: Some(vec![
                "arn:aws:sqs:us-east-1:123456789012:team-a-*".into(),
            ]),
            ..Default::default()
        });
        let target = |arn: &str| NotificationTarget {
            id: None,
            arn: arn.into(),
            events: vec!["s3:ObjectCreated:*".into()],
            filter: None,
        };
        let mut spec = with_defaults(&BucketSpec::default(), None);
        spec.notifications = Some(Notifications {
            event_bridge: true,
            queues: vec![
                target("arn:aws:sqs:us-east-1:123456789012:team-a-events"),
                target("arn:aws:sqs:us-east-1:123456789012:team-b-events"),
            ],
            topics: vec![],
        });
        let removed = enforce(&mut spec, &class, "us-east-1", &settings()).unwrap();
        assert_eq!(
            removed,
            [
                "spec.notifications.queues arn:aws:sqs:us-east-1:123456789012:team-b-events: not on constraints.allowedNotificationTargets"
            ]
        );
        let n = spec.notifications.unwrap();
        assert_eq!(n.queues.len(), 1);
        assert!(n.event_bridge, "EventBridge needs no allow-listing");
    }

    #[test]
    fn a_class_region_is_given_only_to_a_bucket_not_yet_begun() {
        let mut class = class(BucketConstraints::default());
        class.spec.defaults.region = Some("eu-west-1".into());
        let new = Bucket::new("b", BucketSpec::default());
        assert_eq!(
            creation_region(&new, &class, "us-east-1"),
            Some("eu-west-1".into())
        );
        assert_eq!(
            creation_region(&new, &class, "eu-west-1"),
            None,
            "the operator's own"
        );
        let mut begun = new.clone();
        begun.finalizers_mut().push(crate::api::FINALIZER.into());
        assert_eq!(
            creation_region(&begun, &class, "us-east-1"),
            None,
            "an existing bucket stays"
        );
        let mut named = new.clone();
        named.spec.region = Some("us-west-2".into());
        assert_eq!(creation_region(&named, &class, "us-east-1"), None);
        let mut recorded = new;
        recorded.status = Some(crate::api::BucketStatus {
            region: Some("eu-west-1".into()),
            ..Default::default()
        });
        assert_eq!(creation_region(&recorded, &class, "us-east-1"), None);
        // A tenant's annotation is no record.
        recorded.status = None;
        recorded.annotations_mut().insert(
            crate::reconcile::bucket::REGION_ANNOTATION.into(),
            "ap-south-1".into(),
        );
        assert_eq!(
            creation_region(&recorded, &class, "us-east-1"),
            Some("eu-west-1".into())
        );
    }

    #[test]
    fn cleanup_follows_the_spec_then_the_class_then_the_flag() {
        let mut class = class(BucketConstraints::default());
        class.spec.defaults.deletion_policy = Some(DeletionPolicy::Delete);
        let s = settings();
        let spec = BucketSpec::default();
        assert_eq!(
            cleanup_deletion_policy(&spec, Some(&class), &s),
            DeletionPolicy::Delete
        );
        assert_eq!(
            cleanup_deletion_policy(&spec, None, &s),
            DeletionPolicy::Retain
        );
        let retain = BucketSpec {
            deletion_policy: Some(DeletionPolicy::Retain),
            ..Default::default()
        };
        assert_eq!(
            cleanup_deletion_policy(&retain, Some(&class), &s),
            DeletionPolicy::Retain
        );
    }
}
