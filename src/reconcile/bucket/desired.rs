//! What a Bucket asks for: the S3 bucket it names ([`address`]) and its spec resolved against the
//! operator's settings ([`desired`]), both pure.

use std::collections::BTreeMap;

use kube::ResourceExt;

use super::{notifications, protection};
use crate::api::condition::Reason;
use crate::api::{
    Bucket, CorsRule, Encryption, IntelligentTiering, LifecycleRule, ObjectLock, ObjectOwnership,
    PublicAccessBlock, TransferAcceleration, Versioning,
};
use crate::aws::s3::logging::LogTarget;
use crate::aws::tags::{Owner, Ownership, with_ownership};
use crate::aws::{naming, policy};
use crate::reconcile::{Blocked, Settings};

/// What the spec asks for, resolved against the operator's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct Desired {
    pub name: String,
    pub region: String,
    pub tags: BTreeMap<String, String>,
    pub public_access_block: PublicAccessBlock,
    pub encryption: Encryption,
    /// `None`: not managed (left as it is in S3), and not even read.
    pub versioning: Option<Versioning>,
    pub lifecycle_rules: Option<Vec<LifecycleRule>>,
    pub cors: Option<Vec<CorsRule>>,
    /// `None`: not managed (and not read) once the bucket exists; a new bucket still gets
    /// [`Desired::creation_ownership`].
    pub object_ownership: Option<ObjectOwnership>,
    /// The whole bucket policy: always managed, as it carries the TLS-only statement. `Err`:
    /// why `spec.policy` is refused (the plan blocks on it; deletion does not).
    pub policy: Result<serde_json::Value, String>,
    /// `None`: not managed (and not read); the bucket is created without object lock.
    pub object_lock: Option<ObjectLock>,
    /// `None`: not managed (and not read).
    pub intelligent_tiering: Option<Vec<IntelligentTiering>>,
    /// `None`: not managed (and not read).
    pub transfer_acceleration: Option<TransferAcceleration>,
    /// `None`: not managed (and not read). `Some(Err)`: why `spec.notifications` is refused.
    pub notifications: Option<Result<crate::api::Notifications, String>>,
    /// spec.logging, resolved against the cache (`logging::wanted`). `None`: not managed
    /// and not read; `Some(None)`: kept off.
    pub logging: Option<Option<LogTarget>>,
    /// spec.replication, resolved against the cache (`replication::complete`). `None`: not
    /// managed and not read; `Some(None)`: kept off.
    pub replication: Option<Option<super::replication::Wanted>>,
}

impl Desired {
    pub fn address(&self) -> Address {
        Address {
            name: self.name.clone(),
            region: self.region.clone(),
        }
    }

    /// The ownership a new bucket is created with: the spec's, else `BucketOwnerEnforced` (ACLs
    /// disabled), as AWS creates buckets. It goes in the CreateBucket call itself, so the
    /// default costs no request of its own.
    pub fn creation_ownership(&self) -> ObjectOwnership {
        self.object_ownership.unwrap_or_default()
    }
}

/// Where an operator before issue 34 recorded the region a BucketClass gave a Bucket. A tenant
/// can write annotations, so the record is now `status.region`; this one is read only for a
/// Bucket the operator had begun (its finalizer is on) whose status holds no region yet.
pub const REGION_ANNOTATION: &str = crate::domain_key!("region");

/// Which S3 bucket a Bucket names: its name and region.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Address {
    pub name: String,
    pub region: String,
}

/// The S3 bucket a Bucket names, from its spec's name and region (immutable; else the region
/// recorded in `status.region` when the bucket was first placed, e.g. by its class: only the
/// operator writes status, tenants get no RBAC on it) and its UID: never from status' bucket
/// name or ARN, and whatever else the spec says, so deletion and the grants' ownership checks
/// work for a spec that an edit has made invalid. `Err`: a name outside the operator's
/// bucket-name prefix, which it can neither have created nor adopted.
pub fn address(
    bucket: &Bucket,
    settings: &Settings,
    default_region: &str,
    owner: &Owner,
) -> Result<Address, Blocked> {
    let spec = &bucket.spec;
    let name = bucket_name(bucket, &settings.bucket_name_prefix, owner)?;
    let region = match spec.region.clone().or_else(|| recorded_region(bucket)) {
        Some(r) if !is_region(&r) => {
            // Not checked by the API server as spec.region is, and it names AWS's endpoint.
            let msg = format!("the recorded region {r:?} is not an AWS region");
            return Err(Blocked::new(Reason::InvalidSpec, msg));
        }
        Some(r) => r,
        None => default_region.to_string(),
    };
    Ok(Address { name, region })
}

/// The name of the S3 bucket a Bucket names ([`address`]) in an account whose bucket-name
/// prefix is `prefix`.
pub fn bucket_name(bucket: &Bucket, prefix: &str, owner: &Owner) -> Result<String, Blocked> {
    let name = match &bucket.spec.bucket_name {
        Some(n) => n.clone(),
        None => naming::bucket_name(prefix, &owner.namespace, &owner.name, &owner.uid),
    };
    if !name.starts_with(prefix) {
        let msg = format!(
            "spec.bucketName {name:?} must start with the bucket-name prefix {prefix:?} of the account the Bucket lives in (the operator's --bucket-name-prefix, or its AWSAccount's spec.bucketNamePrefix): the operator's IAM policy there covers only such buckets"
        );
        return Err(Blocked::new(Reason::InvalidSpec, msg));
    }
    Ok(name)
}

/// The region recorded for a Bucket: `status.region`; else, for a Bucket begun by an operator
/// that recorded it in [`REGION_ANNOTATION`] and has not written status since, that
/// annotation (its first status write moves the record into status).
pub fn recorded_region(bucket: &Bucket) -> Option<String> {
    let status = bucket.status.as_ref().and_then(|s| s.region.clone());
    let begun = crate::reconcile::has_finalizer(bucket);
    status.or_else(|| {
        begun
            .then(|| bucket.annotations().get(REGION_ANNOTATION).cloned())
            .flatten()
    })
}

/// Is `r` shaped like an AWS region (`^[a-z]{2}(-[a-z]+)+-[0-9]+$`, as spec.region's schema)?
fn is_region(r: &str) -> bool {
    let parts: Vec<&str> = r.split('-').collect();
    let lower = |p: &&str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_lowercase());
    let [first, middle @ .., last] = parts.as_slice() else {
        return false;
    };
    first.len() == 2
        && lower(first)
        && !middle.is_empty()
        && middle.iter().all(lower)
        && !last.is_empty()
        && last.bytes().all(|b| b.is_ascii_digit())
}

/// The spec resolved into a [`Desired`], or why it cannot be served.
pub fn desired(
    bucket: &Bucket,
    ctx_settings: &Settings,
    default_region: &str,
    owner: &Owner,
) -> Result<Desired, Blocked> {
    let spec = &bucket.spec;
    let Address { name, region } = address(bucket, ctx_settings, default_region, owner)?;
    let compliance = ctx_settings.allow_compliance_retention;
    if let Some(why) = protection::spec_refused(spec, &name, compliance) {
        return Err(why);
    }
    let arn = naming::bucket_arn(naming::partition(&region), &name);
    let rules = policy::StatementRules {
        account: &ctx_settings.account_id,
        allowed: &ctx_settings.allowed_policy_principals,
        operator: &ctx_settings.operator_principals,
    };
    let statements = policy::bucket_statements(&spec.policy, &arn, &rules);
    let allowed_targets = &ctx_settings.allowed_notification_targets;
    let notifications = spec
        .notifications
        .as_ref()
        .map(|n| notifications::desired(n, &region, allowed_targets));
    Ok(Desired {
        policy: statements.map(|s| policy::bucket_policy(&arn, &s)),
        name,
        region,
        tags: with_ownership(&spec.tags, owner),
        // The operator's defaults, where no class pass has filled them in.
        public_access_block: spec.public_access_block.unwrap_or_default(),
        encryption: spec.encryption.clone().unwrap_or_default(),
        versioning: spec.versioning,
        lifecycle_rules: spec.lifecycle_rules.clone(),
        cors: spec.cors.clone(),
        object_ownership: spec.object_ownership,
        object_lock: spec.object_lock.clone(),
        intelligent_tiering: spec.intelligent_tiering.clone(),
        transfer_acceleration: spec.transfer_acceleration,
        notifications,
        // Need the cache: resolved by `logging::complete` and `replication::complete`.
        logging: None,
        replication: None,
    })
}

/// Why this object may not take over a bucket that has no owner, if it may not (pure). It
/// must ask (`spec.adoptExisting`), and a retained bucket goes back only to the namespace and
/// cluster it came from, unless the operator allows adoption across namespaces.
pub(super) fn adoption_refused(
    bucket: &str,
    ownership: &Ownership,
    owner: &Owner,
    adopt_existing: bool,
    cross_namespace: bool,
) -> Option<String> {
    let from = match ownership {
        Ownership::Ours | Ownership::Foreign(_) => return None,
        Ownership::Unowned => None,
        Ownership::Released { cluster, namespace } => Some((cluster, namespace)),
    };
    if let Some((cluster, namespace)) = from
        && (cluster != &owner.cluster || namespace != &owner.namespace)
        && !cross_namespace
    {
        // Which namespace is not said: a tenant learns nothing about another's buckets.
        let whom = if cluster == &owner.cluster {
            "another namespace"
        } else {
            "another installation"
        };
        return Some(format!(
            "bucket {bucket} was retained by {whom}; only it may adopt the bucket"
        ));
    }
    (!adopt_existing).then(|| {
        format!(
            "bucket {bucket} already exists in this account without an owner; set spec.adoptExisting: true to manage it"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{BucketSpec, BucketStatus};
    use crate::reconcile::bucket::fixtures::{owner, settings};

    #[test]
    fn retained_buckets_go_back_only_to_their_namespace() {
        let o = owner();
        let released_here = Ownership::Released {
            cluster: "c".into(),
            namespace: "ns".into(),
        };
        let released_elsewhere = Ownership::Released {
            cluster: "c".into(),
            namespace: "other".into(),
        };
        let other_cluster = Ownership::Released {
            cluster: "c2".into(),
            namespace: "ns".into(),
        };
        assert_eq!(adoption_refused("b", &released_here, &o, true, false), None);
        let msg = adoption_refused("b", &released_here, &o, false, false).unwrap();
        assert!(msg.contains("adoptExisting"), "{msg}");
        let msg = adoption_refused("b", &released_elsewhere, &o, true, false).unwrap();
        assert!(
            msg.contains("another namespace") && !msg.contains("other;"),
            "{msg}"
        );
        assert!(adoption_refused("b", &other_cluster, &o, true, false).is_some());
        // Only the operator's explicit flag lets another namespace take it.
        assert_eq!(
            adoption_refused("b", &released_elsewhere, &o, true, true),
            None
        );
        assert_eq!(
            adoption_refused("b", &Ownership::Unowned, &o, true, false),
            None
        );
        assert!(adoption_refused("b", &Ownership::Unowned, &o, false, true).is_some());
    }

    #[test]
    fn names_outside_the_prefix_are_refused_with_the_rule() {
        let mut b = Bucket::new(
            "b",
            BucketSpec {
                bucket_name: Some("other-bucket".into()),
                ..Default::default()
            },
        );
        b.metadata.namespace = Some("ns".into());
        let settings = settings();
        let err = desired(&b, &settings, "us-east-1", &owner()).unwrap_err();
        assert!(
            err.message.contains("spec.bucketName") && err.message.contains("s3op-"),
            "{err}"
        );
        // In an AWSAccount with a prefix of its own, names are made and accepted under it
        // only: the operator's own prefix is refused there as any other.
        let team_b = Settings {
            bucket_name_prefix: "team-b-".into(),
            ..settings.clone()
        };
        b.spec.bucket_name = None;
        let made = desired(&b, &team_b, "us-east-1", &owner()).unwrap().name;
        assert!(made.starts_with("team-b-ns-b-"), "{made}");
        b.spec.bucket_name = Some("s3op-x".into());
        let err = desired(&b, &team_b, "us-east-1", &owner()).unwrap_err();
        assert!(err.message.contains("\"team-b-\""), "{err}");
        b.spec.bucket_name = Some("team-b-x".into());
        assert!(desired(&b, &team_b, "us-east-1", &owner()).is_ok());
    }

    #[test]
    fn a_recorded_region_is_used_only_when_it_is_a_region() {
        let mut b = Bucket::new("b", BucketSpec::default());
        b.metadata.namespace = Some("ns".into());
        let at = |b: &Bucket| address(b, &settings(), "us-east-1", &owner()).map(|a| a.region);
        assert_eq!(at(&b).unwrap(), "us-east-1");
        for (value, ok) in [
            ("eu-west-1", true),
            ("us-gov-west-1", true),
            ("evil.example.com#", false),
            ("eu-1", false),
            ("EU-west-1", false),
        ] {
            b.status = Some(BucketStatus {
                region: Some(value.into()),
                ..Default::default()
            });
            assert_eq!(at(&b).is_ok(), ok, "{value}");
            if ok {
                assert_eq!(at(&b).unwrap(), value);
            }
        }
        // spec.region, immutable, comes first.
        b.spec.region = Some("ap-south-1".into());
        assert_eq!(at(&b).unwrap(), "ap-south-1");
    }

    /// Issue 34, item 2: the region is recorded in status, which tenants cannot write. The old
    /// annotation is read only to migrate a Bucket the operator had begun and whose status
    /// holds no region yet; a tenant's annotation on a new Bucket, or on one with a record,
    /// moves nothing.
    #[test]
    fn the_region_annotation_only_migrates_a_begun_bucket_without_a_record() {
        let mut b = Bucket::new("b", BucketSpec::default());
        b.metadata.namespace = Some("ns".into());
        let at = |b: &Bucket| {
            address(b, &settings(), "us-east-1", &owner())
                .unwrap()
                .region
        };
        b.annotations_mut()
            .insert(REGION_ANNOTATION.into(), "eu-west-1".into());
        assert_eq!(at(&b), "us-east-1", "a new Bucket: the tenant's annotation");
        b.finalizers_mut().push(crate::api::FINALIZER.into());
        assert_eq!(
            at(&b),
            "eu-west-1",
            "recorded by the operator before the upgrade"
        );
        b.status = Some(BucketStatus {
            region: Some("eu-west-1".into()),
            ..Default::default()
        });
        b.annotations_mut()
            .insert(REGION_ANNOTATION.into(), "ap-south-1".into());
        assert_eq!(at(&b), "eu-west-1", "an edit after the record");
    }

    #[test]
    fn status_never_redirects_the_bucket() {
        let mut b = Bucket::new("b", BucketSpec::default());
        b.metadata.namespace = Some("ns".into());
        b.metadata.uid = Some("uid-1".into());
        let settings = settings();
        let generated = desired(&b, &settings, "us-east-1", &owner()).unwrap().name;
        b.status = Some(BucketStatus {
            bucket_name: Some("s3op-someone-elses-bucket".into()),
            ..Default::default()
        });
        assert_eq!(
            desired(&b, &settings, "us-east-1", &owner()).unwrap().name,
            generated
        );
    }
}
