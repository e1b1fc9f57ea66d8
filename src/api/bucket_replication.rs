//! `spec.replication` of a Bucket: S3 replication rules to other Buckets of the namespace (or,
//! where the operator's flags and the class allow it, to a bucket of another account by ARN).

use std::collections::BTreeMap;

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::LoggingTargetRef;

// The bucket's replication configuration (no doc comment: on an `Option` field it would replace
// the field's own `kubectl explain` text).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Replication {
    /// The rules, each to one destination. Empty: replication is off (the configuration is
    /// removed and the replication role deleted).
    #[serde(default)]
    #[schemars(length(max = 10))]
    #[x_kube(validation = Rule::new("self.all(r, self.exists_one(o, o.id == r.id))").message("spec.replication.rules[].id must be unique"))]
    #[x_kube(validation = Rule::new("self.all(r, self.exists_one(o, o.priority == r.priority))").message("spec.replication.rules[].priority must be unique: S3 decides between overlapping rules by priority"))]
    pub rules: Vec<ReplicationRule>,
}

/// One replication rule: which objects (a prefix and tags, all objects when both are omitted)
/// go to which destination.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!(has(self.tags) && size(self.tags) > 0 && has(self.deleteMarkerReplication) && self.deleteMarkerReplication)").message("spec.replication.rules[].deleteMarkerReplication cannot be true with tags: S3 does not replicate delete markers for rules with a tag filter"))]
pub struct ReplicationRule {
    /// Identifier of the rule, unique in the bucket.
    #[schemars(length(min = 1, max = 255))]
    #[x_kube(validation = Rule::new("self.matches('^[A-Za-z0-9._-]+$')").message("spec.replication.rules[].id may contain only letters, digits, '.', '_' and '-'"))]
    pub id: String,
    /// Which rule wins where the filters of two overlap (the higher); unique in the bucket.
    #[schemars(range(min = 0, max = 1000))]
    pub priority: i32,
    /// Replicate only keys under this prefix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub prefix: Option<String>,
    /// Replicate only objects carrying all these tags.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 10))]
    pub tags: BTreeMap<String, String>,
    /// Replicate delete markers too (off by default: a delete in the source leaves the
    /// replica; not with `tags`, which S3 refuses). S3 never replicates deletions of a
    /// version, with or without it.
    #[serde(default)]
    pub delete_marker_replication: bool,
    /// The storage class of the replicas. Omitted: the source object's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class: Option<ReplicaStorageClass>,
    /// A KMS key (id or ARN, in the destination's region) for the replicas: objects encrypted
    /// with SSE-KMS are then replicated too, re-encrypted with this key. Omitted: SSE-KMS
    /// objects are not replicated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2048))]
    pub replica_kms_key_id: Option<String>,
    /// Where the objects go.
    pub destination: ReplicationDestination,
}

/// A replication destination: a Bucket of this namespace (`bucketRef`), or an S3 bucket of
/// another AWS account (`bucketArn` with `account`), only where the operator's
/// `--allowed-replication-accounts` and the BucketClass allow that account.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.bucketRef) != has(self.bucketArn)").message("spec.replication.rules[].destination needs exactly one of bucketRef or bucketArn"))]
#[x_kube(validation = Rule::new("has(self.bucketArn) == has(self.account)").message("spec.replication.rules[].destination.account is required with bucketArn, and only with it"))]
pub struct ReplicationDestination {
    /// A Bucket object of this namespace, by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucket_ref: Option<LoggingTargetRef>,
    /// The ARN of a bucket in another account, `arn:aws:s3:::<bucket>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 80))]
    #[x_kube(validation = Rule::new("self.matches('^arn:aws[a-z-]*:s3:::[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$')").message("spec.replication.rules[].destination.bucketArn must be an S3 bucket ARN, arn:aws:s3:::<bucket>"))]
    pub bucket_arn: Option<String>,
    /// The 12-digit id of the account that owns `bucketArn`: S3 makes it the replicas' owner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]{12}$"))]
    pub account: Option<String>,
}

/// The storage classes S3 replication can write.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, schemars::JsonSchema,
)]
#[allow(non_camel_case_types, clippy::upper_case_acronyms)]
pub enum ReplicaStorageClass {
    STANDARD,
    STANDARD_IA,
    ONEZONE_IA,
    INTELLIGENT_TIERING,
    GLACIER_IR,
    GLACIER,
    DEEP_ARCHIVE,
}

impl ReplicaStorageClass {
    /// The name S3 uses.
    pub fn as_str(self) -> &'static str {
        match self {
            ReplicaStorageClass::STANDARD => "STANDARD",
            ReplicaStorageClass::STANDARD_IA => "STANDARD_IA",
            ReplicaStorageClass::ONEZONE_IA => "ONEZONE_IA",
            ReplicaStorageClass::INTELLIGENT_TIERING => "INTELLIGENT_TIERING",
            ReplicaStorageClass::GLACIER_IR => "GLACIER_IR",
            ReplicaStorageClass::GLACIER => "GLACIER",
            ReplicaStorageClass::DEEP_ARCHIVE => "DEEP_ARCHIVE",
        }
    }
}
