//! The Bucket's object lock, intelligent tiering and transfer acceleration:
//! what the plan adds for them, how they are read and written. Each is read only when
//! its spec field is set, so a Bucket using none of them costs no request more.

use std::collections::BTreeMap;

use super::{BucketState, Change, Desired};
use crate::api::condition::Reason;
use crate::api::{BucketSpec, IntelligentTiering, RetentionMode, TransferAcceleration};
use crate::aws::s3::protection::{LockState, normalize_tiering};
use crate::aws::{Aws, Error};
use crate::reconcile::Blocked;

/// Why the spec cannot be served whatever S3 holds (pure). `allow_compliance`: the operator's
/// `--allow-compliance-retention`.
pub fn spec_refused(spec: &BucketSpec, name: &str, allow_compliance: bool) -> Option<Blocked> {
    let mode = spec
        .object_lock
        .as_ref()
        .and_then(|l| l.default_retention)
        .map(|r| r.mode);
    if mode == Some(RetentionMode::COMPLIANCE) && !allow_compliance {
        // Whoever may create a Bucket must not be able to store data the account can never
        // delete before its retention ends.
        return Some(Blocked::new(
            Reason::InvalidSpec,
            "spec.objectLock.defaultRetention.mode COMPLIANCE is not allowed by this operator: no one in the account could delete the objects before their retention ends; use GOVERNANCE, or ask the operator's administrator for --allow-compliance-retention".to_string(),
        ));
    }
    // The CRD refuses it for a spec.bucketName; a generated name may carry a '.' of the prefix.
    (spec.transfer_acceleration.is_some() && name.contains('.')).then(|| {
        Blocked::new(
            Reason::InvalidSpec,
            format!(
                "spec.transferAcceleration is not available for bucket {name}: S3 cannot accelerate a bucket whose name contains '.'"
            ),
        )
    })
}

/// Why an existing bucket cannot be served (pure): object lock asked for on a bucket created
/// without it, which S3 cannot change.
pub fn refused(desired: &Desired, config: &BucketState) -> Option<Blocked> {
    let lockless = config.object_lock.as_ref().is_some_and(|l| !l.enabled);
    (desired.object_lock.is_some() && lockless).then(|| {
        Blocked::new(
            Reason::InvalidSpec,
            format!(
                "spec.objectLock: object lock can only be chosen when the bucket is created, and S3 bucket {} exists without it; remove spec.objectLock or use a new bucket",
                desired.name
            ),
        )
    })
}

/// The writes a new bucket needs after CreateBucket (which carries object lock itself).
pub fn on_create(desired: &Desired) -> Vec<Change> {
    let mut all = Vec::new();
    if desired
        .object_lock
        .as_ref()
        .is_some_and(|l| l.default_retention.is_some())
    {
        all.push(Change::ObjectLock);
    }
    if let Some(want) = &desired.intelligent_tiering
        && !want.is_empty()
    {
        all.push(tiering_change(want, &[]).expect("a non-empty list differs from none"));
    }
    // A new bucket is unaccelerated, which is what Suspended means for it.
    if desired.transfer_acceleration == Some(TransferAcceleration::Enabled) {
        all.push(Change::TransferAcceleration(TransferAcceleration::Enabled));
    }
    all
}

/// The writes that bring an existing bucket's managed parts in line with the spec.
pub fn changes(desired: &Desired, config: &BucketState) -> Vec<Change> {
    let mut all = Vec::new();
    if let (Some(want), Some(have)) = (&desired.object_lock, &config.object_lock)
        && have.default_retention != want.default_retention
    {
        all.push(Change::ObjectLock);
    }
    if let Some(want) = &desired.intelligent_tiering
        && let Some(change) =
            tiering_change(want, config.intelligent_tiering.as_deref().unwrap_or(&[]))
    {
        all.push(change);
    }
    if let Some(want) = desired.transfer_acceleration {
        let have = config
            .transfer_acceleration
            .unwrap_or(TransferAcceleration::Suspended);
        if have != want {
            all.push(Change::TransferAcceleration(want));
        }
    }
    all
}

/// Compared as sets keyed by id: the ids to write (missing or different) and to delete (not
/// asked for); `None` when they agree.
fn tiering_change(want: &[IntelligentTiering], have: &[IntelligentTiering]) -> Option<Change> {
    let have: BTreeMap<&str, IntelligentTiering> = have
        .iter()
        .map(|c| (c.id.as_str(), normalize_tiering(c)))
        .collect();
    let put: Vec<String> = want
        .iter()
        .filter(|w| have.get(w.id.as_str()) != Some(&normalize_tiering(w)))
        .map(|w| w.id.clone())
        .collect();
    let delete: Vec<String> = have
        .keys()
        .filter(|id| !want.iter().any(|w| w.id == **id))
        .map(|id| id.to_string())
        .collect();
    (!put.is_empty() || !delete.is_empty()).then_some(Change::IntelligentTiering { put, delete })
}

/// The parts [`BucketState`] holds for these features, each read only when managed.
pub struct ProtectionState {
    pub object_lock: Option<LockState>,
    pub intelligent_tiering: Option<Vec<IntelligentTiering>>,
    pub transfer_acceleration: Option<TransferAcceleration>,
}

pub async fn observe(aws: &Aws, d: &Desired) -> Result<ProtectionState, Error> {
    let (r, n) = (d.region.as_str(), d.name.as_str());
    let object_lock = match d.object_lock {
        Some(_) => Some(aws.object_lock(r, n).await?),
        None => None,
    };
    let intelligent_tiering = match d.intelligent_tiering {
        Some(_) => Some(aws.intelligent_tiering(r, n).await?),
        None => None,
    };
    let transfer_acceleration = match d.transfer_acceleration {
        Some(_) => aws.transfer_acceleration(r, n).await?,
        None => None,
    };
    Ok(ProtectionState {
        object_lock,
        intelligent_tiering,
        transfer_acceleration,
    })
}

/// Applies one of this module's changes; `None` for a change that is not one of them.
/// Writes the tiering configurations named in `put` and deletes those in `delete`.
pub async fn write_tiering(
    aws: &Aws,
    d: &Desired,
    put: &[String],
    delete: &[String],
) -> Result<(), Error> {
    let (r, n) = (d.region.as_str(), d.name.as_str());
    let want = d.intelligent_tiering.as_deref().unwrap_or_default();
    for config in want.iter().filter(|c| put.contains(&c.id)) {
        aws.put_intelligent_tiering(r, n, config).await?;
    }
    for id in delete {
        aws.delete_intelligent_tiering(r, n, id).await?;
    }
    Ok(())
}

/// Why a forced deletion of a bucket with object lock waits: S3 refused to delete versions its
/// retention still holds. The operator never bypasses retention (it has no
/// s3:BypassGovernanceRetention), so nothing the lock keeps is lost; the bucket stays.
pub fn retention_holds(bucket: &str, e: &Error) -> String {
    format!(
        "S3 bucket {bucket} has object lock and still holds object versions S3 refuses to delete ({}): they and the bucket are kept until their retention ends (COMPLIANCE retention cannot be shortened or bypassed; the operator never bypasses GOVERNANCE retention)",
        e.message
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{
        AccessTier, DefaultRetention, ObjectLock, RetentionMode, Tiering, TieringStatus,
    };

    fn desired() -> Desired {
        Desired {
            name: "s3op-b".into(),
            region: "us-east-1".into(),
            tags: BTreeMap::new(),
            public_access_block: Default::default(),
            encryption: Default::default(),
            versioning: None,
            lifecycle_rules: None,
            cors: None,
            object_ownership: None,
            policy: Ok(serde_json::json!({})),
            object_lock: None,
            intelligent_tiering: None,
            transfer_acceleration: None,
            notifications: None,
            logging: None,
            replication: None,
        }
    }

    fn tiering(id: &str, days: i32) -> IntelligentTiering {
        IntelligentTiering {
            id: id.into(),
            status: TieringStatus::Enabled,
            prefix: None,
            tags: BTreeMap::new(),
            tierings: vec![Tiering {
                access_tier: AccessTier::ARCHIVE_ACCESS,
                days,
            }],
        }
    }

    fn retention(days: i32) -> Option<DefaultRetention> {
        Some(DefaultRetention {
            mode: RetentionMode::COMPLIANCE,
            days: Some(days),
            years: None,
        })
    }

    #[test]
    fn omitted_features_plan_nothing_and_are_not_read() {
        let d = desired();
        assert!(on_create(&d).is_empty());
        let c = BucketState {
            object_lock: Some(LockState::default()),
            intelligent_tiering: Some(vec![tiering("x", 90)]),
            transfer_acceleration: Some(TransferAcceleration::Enabled),
            ..Default::default()
        };
        assert!(changes(&d, &c).is_empty());
        assert!(refused(&d, &c).is_none());
    }

    #[test]
    fn object_lock_retention_is_set_after_create_and_drift_corrected() {
        let mut d = desired();
        d.object_lock = Some(ObjectLock {
            default_retention: retention(3),
        });
        assert_eq!(on_create(&d), vec![Change::ObjectLock]);
        let held = |r| BucketState {
            object_lock: Some(LockState {
                enabled: true,
                default_retention: r,
            }),
            ..Default::default()
        };
        assert!(changes(&d, &held(retention(3))).is_empty());
        for drifted in [None, retention(1)] {
            assert_eq!(changes(&d, &held(drifted)), vec![Change::ObjectLock]);
        }
        // Lock without a default retention: nothing to write at creation, a default removed.
        d.object_lock = Some(ObjectLock::default());
        assert!(on_create(&d).is_empty());
        assert_eq!(changes(&d, &held(retention(3))), vec![Change::ObjectLock]);
        assert_eq!(Change::ObjectLock.aspect(), "objectLock");
    }

    #[test]
    fn a_locked_bucket_is_versioned_by_its_create_call_alone() {
        use crate::reconcile::bucket::{Found as S3, Plan, plan};
        let mut d = desired();
        d.versioning = Some(crate::api::Versioning::Enabled);
        d.object_lock = Some(ObjectLock {
            default_retention: retention(1),
        });
        let Plan::Apply(all) = plan(&d, &S3::Absent) else {
            panic!("not applied")
        };
        assert_eq!(all.first(), Some(&Change::Create));
        assert!(all.contains(&Change::ObjectLock), "{all:?}");
        assert!(
            !all.iter().any(|c| matches!(c, Change::Versioning(_))),
            "{all:?}"
        );
    }

    #[test]
    fn object_lock_on_a_bucket_created_without_it_is_refused_with_the_reason() {
        let mut d = desired();
        d.object_lock = Some(ObjectLock::default());
        let c = BucketState {
            object_lock: Some(LockState::default()),
            ..Default::default()
        };
        let why = refused(&d, &c).expect("refused");
        assert_eq!(why.reason, Reason::InvalidSpec);
        assert!(
            why.message.contains("spec.objectLock")
                && why
                    .message
                    .contains("only be chosen when the bucket is created"),
            "{}",
            why.message
        );
    }

    #[test]
    fn intelligent_tiering_is_compared_as_a_set_keyed_by_id() {
        let mut d = desired();
        d.intelligent_tiering = Some(vec![tiering("a", 90), tiering("b", 120)]);
        let with = |have: Vec<IntelligentTiering>| BucketState {
            intelligent_tiering: Some(have),
            ..Default::default()
        };
        // Order does not matter.
        assert!(changes(&d, &with(vec![tiering("b", 120), tiering("a", 90)])).is_empty());
        // Only what differs is written; what the list does not name is deleted.
        assert_eq!(
            changes(
                &d,
                &with(vec![tiering("a", 90), tiering("b", 200), tiering("z", 90)])
            ),
            vec![Change::IntelligentTiering {
                put: vec!["b".into()],
                delete: vec!["z".into()],
            }]
        );
        assert_eq!(
            on_create(&d),
            vec![Change::IntelligentTiering {
                put: vec!["a".into(), "b".into()],
                delete: vec![],
            }]
        );
        // An empty list removes every configuration.
        d.intelligent_tiering = Some(vec![]);
        assert!(on_create(&d).is_empty());
        assert_eq!(
            changes(&d, &with(vec![tiering("a", 90)])),
            vec![Change::IntelligentTiering {
                put: vec![],
                delete: vec!["a".into()],
            }]
        );
        assert!(changes(&d, &with(vec![])).is_empty());
    }

    #[test]
    fn transfer_acceleration_is_kept_and_suspended_means_never_set_too() {
        let mut d = desired();
        d.transfer_acceleration = Some(TransferAcceleration::Suspended);
        assert!(on_create(&d).is_empty());
        assert!(changes(&d, &BucketState::default()).is_empty());
        d.transfer_acceleration = Some(TransferAcceleration::Enabled);
        let want = Change::TransferAcceleration(TransferAcceleration::Enabled);
        assert_eq!(on_create(&d), vec![want.clone()]);
        let suspended = BucketState {
            transfer_acceleration: Some(TransferAcceleration::Suspended),
            ..Default::default()
        };
        assert_eq!(changes(&d, &suspended), vec![want]);
    }

    #[test]
    fn acceleration_of_a_dotted_name_is_refused_naming_the_field() {
        let spec = BucketSpec {
            transfer_acceleration: Some(TransferAcceleration::Enabled),
            ..Default::default()
        };
        let why = spec_refused(&spec, "s3op.team-b", false).expect("refused");
        assert!(why.message.contains("spec.transferAcceleration"), "{why}");
        assert!(spec_refused(&spec, "s3op-team-b", false).is_none());
        assert!(spec_refused(&BucketSpec::default(), "s3op.team-b", false).is_none());
    }

    #[test]
    fn compliance_retention_needs_the_operators_consent() {
        let spec = |mode| BucketSpec {
            object_lock: Some(ObjectLock {
                default_retention: Some(DefaultRetention {
                    mode,
                    days: Some(1),
                    years: None,
                }),
            }),
            ..Default::default()
        };
        let why = spec_refused(&spec(RetentionMode::COMPLIANCE), "s3op-b", false).expect("refused");
        assert_eq!(why.reason, Reason::InvalidSpec);
        assert!(
            why.message
                .contains("spec.objectLock.defaultRetention.mode")
                && why.message.contains("--allow-compliance-retention"),
            "{why}"
        );
        assert!(spec_refused(&spec(RetentionMode::COMPLIANCE), "s3op-b", true).is_none());
        assert!(spec_refused(&spec(RetentionMode::GOVERNANCE), "s3op-b", false).is_none());
    }
}
