//! What the Bucket tests share: settings, an owner, a resolved spec and the configuration S3
//! holds once it is served.

use std::sync::Arc;

use crate::api::condition::{self, Reason};
use crate::api::{Bucket, BucketSpec, BucketStatus, LifecycleRule};
use crate::aws::s3::protection::LockState;
use crate::aws::tags::Owner;
use crate::reconcile::Settings;

use super::{BucketState, Desired, desired};

pub fn settings() -> Settings {
    Settings::for_tests()
}

pub fn owner() -> Owner {
    Owner {
        cluster: "c".into(),
        namespace: "ns".into(),
        name: "b".into(),
        uid: "uid-1".into(),
    }
}

/// A lifecycle rule expiring objects after 30 days.
pub fn rule(id: &str) -> LifecycleRule {
    LifecycleRule {
        id: id.into(),
        prefix: None,
        enabled: true,
        expiration_days: Some(30),
        noncurrent_version_expiration_days: None,
        abort_incomplete_multipart_upload_days: None,
        transitions: vec![],
    }
}

/// Bucket `ns/name` of `spec`, named `s3op-<ns>-<name>` in its spec, at resourceVersion 7;
/// `ready`: with a Ready status whose bucket name is another's (status is the tenant's to
/// write, so nothing may follow it).
pub fn named_bucket(ns: &str, name: &str, spec: BucketSpec, ready: bool) -> Arc<Bucket> {
    let mut b = Bucket::new(
        name,
        BucketSpec {
            bucket_name: Some(format!("s3op-{ns}-{name}")),
            ..spec
        },
    );
    b.metadata.namespace = Some(ns.into());
    b.metadata.uid = Some(format!("uid-{name}"));
    b.metadata.resource_version = Some("7".into());
    if ready {
        let now = jiff::Timestamp::now();
        let c = condition::ready(&[], true, Reason::Available, "ok", None, now);
        b.status = Some(BucketStatus {
            conditions: vec![c],
            bucket_name: Some("s3op-someone-else".into()),
            ..Default::default()
        });
    }
    Arc::new(b)
}

pub fn desired_for(spec: BucketSpec) -> Desired {
    let mut b = Bucket::new("b", spec);
    b.metadata.namespace = Some("ns".into());
    b.metadata.uid = Some("uid-1".into());
    let settings = settings();
    desired(&b, &settings, "us-east-1", &owner()).unwrap()
}

/// The configuration S3 holds after the plan for `d` was applied.
pub fn converged(d: &Desired) -> BucketState {
    BucketState {
        tags: d.tags.clone(),
        public_access_block: Some(d.public_access_block),
        encryption: Some(d.encryption.clone()),
        versioning: d.versioning,
        lifecycle_rules: d.lifecycle_rules.clone(),
        cors: d.cors.clone(),
        object_ownership: d.object_ownership,
        policy: d.policy.clone().ok(),
        object_lock: d.object_lock.as_ref().map(|l| LockState {
            enabled: true,
            default_retention: l.default_retention,
        }),
        intelligent_tiering: d.intelligent_tiering.clone(),
        transfer_acceleration: d.transfer_acceleration,
        notifications: match &d.notifications {
            Some(Ok(n)) => Some(crate::aws::s3::notifications::ObservedNotifications {
                config: n.clone(),
                lambda_functions: 0,
            }),
            _ => None,
        },
        logging: d.logging.clone(),
        replication: d.replication.as_ref().map(|w| match w {
            Some(w) => super::replication::Observed {
                config: Some(w.config.clone()),
                role: Some(super::replication::Role {
                    ours: true,
                    trust: Some(w.trust.clone()),
                    policy: Some(w.policy.clone()),
                }),
            },
            None => Default::default(),
        }),
    }
}
