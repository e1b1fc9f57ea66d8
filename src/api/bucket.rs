use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// An S3 bucket, created and kept in the shape its spec describes.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "s3.operator.dev",
    version = "v1alpha1",
    kind = "Bucket",
    doc = "An S3 bucket the operator creates and keeps in the shape its spec describes.",
    namespaced,
    status = "BucketStatus",
    shortname = "bkt",
    category = "s3",
    printcolumn = r#"{"name":"Bucket Name","type":"string","jsonPath":".status.bucketName"}"#,
    printcolumn = r#"{"name":"Region","type":"string","jsonPath":".status.region"}"#,
    printcolumn = r#"{"name":"Class","type":"string","jsonPath":".status.className"}"#,
    printcolumn = r#"{"name":"Account","type":"string","jsonPath":".status.account.name"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"In Sync","type":"string","jsonPath":".status.conditions[?(@.type==\"InSync\")].status"}"#,
    printcolumn = r#"{"name":"Paused","type":"string","jsonPath":".status.conditions[?(@.type==\"Paused\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(
    "has(self.bucketName) == has(oldSelf.bucketName) && (!has(self.bucketName) || self.bucketName == oldSelf.bucketName)"
).message("spec.bucketName is immutable: it cannot be added, changed or removed after creation").field_path(".bucketName"))]
#[x_kube(validation = Rule::new(
    "has(self.region) == has(oldSelf.region) && (!has(self.region) || self.region == oldSelf.region)"
).message("spec.region is immutable: it cannot be added, changed or removed after creation").field_path(".region"))]
#[x_kube(validation = Rule::new(
    "has(self.className) == has(oldSelf.className) && (!has(self.className) || self.className == oldSelf.className)"
).message("spec.className is immutable: it cannot be added, changed or removed after creation").field_path(".className"))]
#[x_kube(validation = Rule::new(
    "!has(self.objectLock) || has(oldSelf.objectLock)"
).message("spec.objectLock can only be chosen when the Bucket is created: S3 cannot turn object lock on for an existing bucket").field_path(".objectLock"))]
#[x_kube(validation = Rule::new(
    "!has(self.objectLock) || !has(self.objectLock.defaultRetention) || self.objectLock.defaultRetention.mode != 'COMPLIANCE' || (has(oldSelf.objectLock) && has(oldSelf.objectLock.defaultRetention) && oldSelf.objectLock.defaultRetention.mode == 'COMPLIANCE')"
).message("spec.objectLock.defaultRetention.mode COMPLIANCE can only be chosen when the Bucket is created: like object lock itself it is a one-way door (no one in the account can shorten what it holds)").field_path(".objectLock.defaultRetention.mode"))]
#[x_kube(validation = Rule::new(
    "!has(self.objectLock) || !has(self.versioning) || self.versioning != 'Suspended'"
).message("spec.versioning must not be Suspended with spec.objectLock: object lock keeps versioning enabled").field_path(".versioning"))]
#[x_kube(validation = Rule::new(
    "!has(self.replication) || size(self.replication.rules) == 0 || !has(self.versioning) || self.versioning != 'Suspended'"
).message("spec.versioning must not be Suspended with spec.replication: S3 replicates only from a bucket with versioning Enabled").field_path(".versioning"))]
#[x_kube(validation = Rule::new(
    "!has(self.transferAcceleration) || !has(self.bucketName) || !self.bucketName.contains('.')"
).message("spec.transferAcceleration is not available for a bucket name containing '.': S3 cannot accelerate such buckets").field_path(".transferAcceleration"))]
pub struct BucketSpec {
    /// The BucketClass whose defaults and limits apply. When omitted, the default class of
    /// this namespace (if any). Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub class_name: Option<String>,

    /// Name of the S3 bucket. When omitted the operator generates a name that is valid under
    /// every S3 naming rule and stable for the object's life: the operator's bucket-name prefix,
    /// namespace, name and a hash of the object's UID. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 3, max = 63))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9][a-z0-9.-]*[a-z0-9]$')").message("spec.bucketName may contain only lowercase letters, digits, '.' and '-', and must start and end with a letter or digit"))]
    #[x_kube(validation = Rule::new("!self.contains('..')").message("spec.bucketName must not contain two adjacent periods"))]
    #[x_kube(validation = Rule::new("!self.matches('^[0-9]+[.][0-9]+[.][0-9]+[.][0-9]+$')").message("spec.bucketName must not be formatted as an IP address"))]
    #[x_kube(validation = Rule::new("!(self.startsWith('xn--') || self.startsWith('sthree-') || self.startsWith('amzn-s3-demo-'))").message("spec.bucketName must not start with the reserved prefixes 'xn--', 'sthree-' or 'amzn-s3-demo-'"))]
    #[x_kube(validation = Rule::new("!(self.endsWith('-s3alias') || self.endsWith('--ol-s3') || self.endsWith('.mrap') || self.endsWith('--x-s3') || self.endsWith('--table-s3'))").message("spec.bucketName must not end with the reserved suffixes '-s3alias', '--ol-s3', '.mrap', '--x-s3' or '--table-s3'"))]
    pub bucket_name: Option<String>,

    /// AWS region of the bucket. Defaults to the BucketClass's default region (recorded on the
    /// Bucket as annotation `s3.operator.dev/region` when it is created, so a later change to
    /// the class never moves it), else the operator's region. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[a-z]{2}(-[a-z]+)+-[0-9]+$"))]
    pub region: Option<String>,

    /// Object versioning. When omitted the operator leaves versioning as it is in S3 (new buckets
    /// start unversioned). S3 cannot turn versioning off once enabled, only suspend it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub versioning: Option<Versioning>,

    /// Default server-side encryption. When omitted: the BucketClass's default, else SSE-S3
    /// (AES256).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption: Option<Encryption>,

    /// The bucket's public access block. When omitted: the BucketClass's default, else all
    /// four flags true (no public access).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_access_block: Option<PublicAccessBlock>,

    /// S3 Object Ownership: who owns objects written to the bucket and whether ACLs apply.
    /// `BucketOwnerEnforced` (ACLs disabled, the bucket owner owns every object),
    /// `BucketOwnerPreferred` or `ObjectWriter` (both keep ACLs working). When omitted, a new
    /// bucket is created with `BucketOwnerEnforced`, as AWS does, and the setting of an existing
    /// bucket is left alone and not read; when set, it is kept and drift is corrected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_ownership: Option<ObjectOwnership>,

    /// Statements the operator adds to the bucket policy, after its own statement that denies
    /// every request made without TLS (`DenyInsecureTransport`, always kept). A statement may
    /// name only this bucket (`arn:aws:s3:::<bucket>` and `arn:aws:s3:::<bucket>/*`); an `Allow`
    /// may not name everyone (`*`), and may name principals outside the operator's AWS account
    /// only if the operator's `--allowed-policy-principals` lists them. A refused statement
    /// stops every change to the bucket and sets Ready=False (`InvalidSpec`) naming it and the
    /// rule. Empty (the default): the policy holds the TLS-only statement alone (and the logging
    /// grant while Buckets log into this one, see spec.logging). The operator owns the whole
    /// policy: statements added outside it are removed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    #[x_kube(validation = Rule::new("self.all(s, !has(s.sid) || self.exists_one(o, has(o.sid) && o.sid == s.sid))").message("spec.policy[].sid must be unique"))]
    pub policy: Vec<PolicyStatement>,

    /// Lifecycle rules. When omitted the operator leaves the bucket's lifecycle configuration
    /// alone; an empty list removes every rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100))]
    #[x_kube(validation = Rule::new("self.all(r, self.exists_one(o, o.id == r.id))").message("spec.lifecycleRules[].id must be unique"))]
    pub lifecycle_rules: Option<Vec<LifecycleRule>>,

    /// CORS rules. When omitted the operator leaves the bucket's CORS configuration alone; an
    /// empty list removes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100))]
    pub cors: Option<Vec<CorsRule>>,

    /// Tags for the bucket. The operator adds its own ownership tags (prefix `s3.operator.dev/`),
    /// which cannot be set or overridden here.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 40))]
    #[x_kube(validation = Rule::new("self.all(k, !k.startsWith('s3.operator.dev/') && !k.startsWith('aws:'))").message("spec.tags keys must not start with the reserved prefixes 's3.operator.dev/' or 'aws:'"))]
    #[x_kube(validation = Rule::new("self.all(k, size(k) >= 1 && size(k) <= 128 && size(self[k]) <= 256)").message("spec.tags keys must be 1-128 characters and values at most 256 characters"))]
    pub tags: BTreeMap<String, String>,

    /// What happens to the S3 bucket when this object is deleted. `Retain` keeps it (and
    /// releases the operator's ownership tags so it can be adopted later); `Delete` removes it
    /// if it is empty, or always with `forceDelete`. Defaults to the operator's
    /// `--default-deletion-policy` (itself `Retain` unless set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_policy: Option<DeletionPolicy>,

    /// With `deletionPolicy: Delete`, delete every object and object version first, so a
    /// non-empty bucket is deleted too. Off by default: a non-empty bucket blocks deletion and
    /// the block is reported in status and events.
    #[serde(default)]
    pub force_delete: bool,

    /// Allow taking over a bucket that already exists in this account and carries no other
    /// owner's tags. Off by default: an existing bucket is reported as a NameConflict.
    #[serde(default)]
    pub adopt_existing: bool,

    /// S3 Object Lock (WORM): object versions cannot be deleted or overwritten while a retention
    /// period holds them. It can only be chosen when the bucket is created (S3 cannot turn it
    /// on later, nor off), and it keeps versioning enabled. A Bucket that adopts an existing
    /// S3 bucket without object lock is refused (Ready=False, `InvalidSpec`). The default
    /// retention is kept and drift is corrected. When omitted, the bucket's object lock
    /// configuration is left alone and not read; removing it stops managing the default
    /// retention (S3 keeps the lock). A `forceDelete` never bypasses retention: versions still
    /// held block deletion, which is reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_lock: Option<ObjectLock>,

    /// S3 Intelligent-Tiering archive configurations, compared with the bucket's by `id`: a
    /// configuration that differs is rewritten and one the list does not name is deleted. When
    /// omitted the operator leaves them alone and does not read them; an empty list removes
    /// every configuration of the bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 50))]
    #[x_kube(validation = Rule::new("self.all(c, self.exists_one(o, o.id == c.id))").message("spec.intelligentTiering[].id must be unique"))]
    pub intelligent_tiering: Option<Vec<IntelligentTiering>>,

    /// S3 Transfer Acceleration: `Enabled` or `Suspended`. Not available for bucket names
    /// containing '.'. When omitted the operator leaves it alone and does not read it; when set,
    /// it is kept and drift is corrected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transfer_acceleration: Option<TransferAcceleration>,

    /// S3 event notifications: to Amazon EventBridge (`eventBridge: true`) and to SQS queues
    /// and SNS topics, each with its event types and an optional key prefix/suffix filter. A
    /// queue or topic must be in the bucket's region and on the operator's
    /// `--allowed-notification-targets` list; one that is not stops every change to the bucket
    /// and sets Ready=False (`InvalidSpec`) naming it and the rule. When omitted the bucket's
    /// notification configuration is left alone and not read; when set, the operator owns the
    /// whole configuration (anything added outside it, Lambda functions included, is removed)
    /// and corrects drift; `{}` removes every notification.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notifications: Option<crate::api::Notifications>,

    /// Server access logging into another Bucket of this namespace. `targetBucketRef` names it
    /// (a Bucket object, not an S3 name: no other namespace's bucket can be reached) and
    /// `targetPrefix` starts every log object's key (empty by default). The target must be a
    /// Ready Bucket of this operator in the same region, and not this Bucket; otherwise this
    /// Bucket is Ready=False naming spec.logging.targetBucketRef. The target's bucket policy
    /// then grants the S3 logging service (`logging.s3.amazonaws.com`) `s3:PutObject`, for the
    /// source buckets of its namespace that log into it only. `logging: {}` turns logging off
    /// and keeps it off. When omitted the logging configuration is left as it is in S3 and not
    /// read (and this Bucket is no longer granted by its former target).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logging: Option<Logging>,

    /// S3 replication (same-region or cross-region) to other Buckets of this namespace, each
    /// rule naming its destination by `bucketRef` (a Bucket object, not an S3 name), or to a
    /// bucket of another AWS account by `bucketArn` only where the operator's
    /// `--allowed-replication-accounts` and the BucketClass allow that account. Both buckets
    /// need versioning `Enabled`. The operator creates and owns the replication role (trusted
    /// by S3 for this bucket only, allowed exactly this bucket and the destinations) and
    /// corrects drift on the configuration. A destination that is missing, not Ready, not held
    /// by its Bucket or unversioned sets Ready=False naming it, and the role's grant is
    /// withdrawn until it is back. `replication: {rules: []}` turns replication off and deletes
    /// the role; when omitted the configuration is left as it is in S3 and not read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication: Option<crate::api::Replication>,

    /// `Manage` (the default, else the BucketClass's default): the bucket is created and kept
    /// as the spec says. `Observe`: the operator only reads the bucket and reports in status
    /// what a `Manage` pass would change (`status.plan`, condition `InSync`); it never creates,
    /// tags or changes it, and deleting the Bucket leaves the bucket and its data (a bucket
    /// the operator tagged earlier is released, as `deletionPolicy: Retain` does). Observing a
    /// bucket the operator does not hold needs `adoptExisting`, as managing it would; one held
    /// by another object is a NameConflict. Switching to `Manage` applies exactly the plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub management: Option<Management>,
}

// Object lock chosen at creation, with an optional default retention (no doc comment: on an
// `Option` field it would replace the field's own `kubectl explain` text).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObjectLock {
    /// The retention S3 applies to every new object version that names none. When omitted the
    /// bucket has no default retention (one set outside the operator is removed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_retention: Option<DefaultRetention>,
}

// A default retention: a mode and a period of exactly one of `days` or `years` (no doc
// comment, as above).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.days) != has(self.years)").message("spec.objectLock.defaultRetention needs exactly one of days or years"))]
pub struct DefaultRetention {
    /// `GOVERNANCE` (users with s3:BypassGovernanceRetention may delete early) or `COMPLIANCE`
    /// (no one, the root user included, may delete a version before its retention ends;
    /// refused unless the operator runs with `--allow-compliance-retention`).
    pub mode: RetentionMode,
    /// Retention period in days (1-36500).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 36500))]
    pub days: Option<i32>,
    /// Retention period in years (1-100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub years: Option<i32>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[allow(clippy::upper_case_acronyms)]
pub enum RetentionMode {
    GOVERNANCE,
    COMPLIANCE,
}

/// One Intelligent-Tiering archive configuration.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct IntelligentTiering {
    /// Identifier of the configuration, unique in the bucket.
    #[schemars(length(min = 1, max = 64))]
    #[x_kube(validation = Rule::new("self.matches('^[A-Za-z0-9._-]+$')").message("spec.intelligentTiering[].id may contain only letters, digits, '.', '_' and '-'"))]
    pub id: String,
    /// `Enabled` (default) or `Disabled`.
    #[serde(default)]
    pub status: TieringStatus,
    /// Apply the configuration only to keys under this prefix (all keys when omitted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub prefix: Option<String>,
    /// Apply the configuration only to objects carrying all these tags.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 10))]
    pub tags: BTreeMap<String, String>,
    /// Archive tiers objects move to after days without access; each tier at most once.
    #[schemars(length(min = 1, max = 2))]
    #[x_kube(validation = Rule::new("self.all(t, self.exists_one(o, o.accessTier == t.accessTier))").message("spec.intelligentTiering[].tierings[].accessTier must be unique"))]
    pub tierings: Vec<Tiering>,
}

/// After how many days without access objects move to an archive tier.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.accessTier == 'ARCHIVE_ACCESS' ? (self.days >= 90 && self.days <= 730) : (self.days >= 180 && self.days <= 730)").message("spec.intelligentTiering[].tierings[].days must be 90-730 for ARCHIVE_ACCESS and 180-730 for DEEP_ARCHIVE_ACCESS"))]
pub struct Tiering {
    /// `ARCHIVE_ACCESS` (90-730 days) or `DEEP_ARCHIVE_ACCESS` (180-730 days).
    pub access_tier: AccessTier,
    /// Consecutive days without access before objects move to the tier.
    pub days: i32,
}

#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, schemars::JsonSchema,
)]
#[allow(non_camel_case_types, clippy::upper_case_acronyms)]
pub enum AccessTier {
    ARCHIVE_ACCESS,
    DEEP_ARCHIVE_ACCESS,
}

#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, schemars::JsonSchema,
)]
pub enum TieringStatus {
    #[default]
    Enabled,
    Disabled,
}

// S3 Transfer Acceleration of a bucket (no doc comment: on an `Option` field it would replace
// the field's own `kubectl explain` text).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum TransferAcceleration {
    Enabled,
    Suspended,
}

// Server access logging of a bucket (no doc comment: on an `Option` field it would replace the
// field's own `kubectl explain` text).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.targetPrefix) || has(self.targetBucketRef)").message("spec.logging.targetPrefix needs spec.logging.targetBucketRef"))]
pub struct Logging {
    /// The Bucket of this namespace that receives the logs. Omitted: logging is turned off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_bucket_ref: Option<LoggingTargetRef>,
    /// Prefix of the log objects' keys, such as `logs/photos/`. Empty by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    pub target_prefix: Option<String>,
}

/// A Bucket of the same namespace, by name.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub struct LoggingTargetRef {
    /// Name of the Bucket object (in this namespace) that receives the logs.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum Versioning {
    Enabled,
    Suspended,
}

// S3 Object Ownership of a bucket (no doc comment: on an `Option` field it would replace the
// field's own `kubectl explain` text).
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, schemars::JsonSchema,
)]
pub enum ObjectOwnership {
    /// ACLs are disabled; the bucket owner owns every object (the AWS default for new buckets).
    #[default]
    BucketOwnerEnforced,
    /// The bucket owner owns objects uploaded with the `bucket-owner-full-control` ACL.
    BucketOwnerPreferred,
    /// The uploading account owns the objects it writes (the legacy behaviour).
    ObjectWriter,
}

/// Whether the operator writes to AWS for an object (see `spec.management`).
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, schemars::JsonSchema,
)]
pub enum Management {
    #[default]
    Manage,
    Observe,
}

#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, schemars::JsonSchema,
)]
pub enum DeletionPolicy {
    Delete,
    #[default]
    Retain,
}

#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, schemars::JsonSchema,
)]
pub enum EncryptionAlgorithm {
    /// SSE-S3: keys managed by S3.
    #[default]
    #[serde(rename = "AES256")]
    Aes256,
    /// SSE-KMS: keys in AWS KMS.
    #[serde(rename = "aws:kms")]
    AwsKms,
}

/// Default server-side encryption of new objects.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.algorithm == 'aws:kms' || (!has(self.kmsKeyId) && !has(self.bucketKeyEnabled))").message("spec.encryption.kmsKeyId and bucketKeyEnabled are only allowed with algorithm aws:kms"))]
pub struct Encryption {
    /// `AES256` (default) or `aws:kms`.
    #[serde(default)]
    pub algorithm: EncryptionAlgorithm,
    /// KMS key id or ARN for `aws:kms`; the AWS managed key when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2048))]
    pub kms_key_id: Option<String>,
    /// Use an S3 Bucket Key to cut KMS request costs (`aws:kms` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucket_key_enabled: Option<bool>,
}

fn yes() -> bool {
    true
}

/// The four S3 public access block flags. Each defaults to true.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PublicAccessBlock {
    /// Refuse requests that set a public ACL on the bucket or its objects. Default true.
    #[serde(default = "yes")]
    pub block_public_acls: bool,
    /// Ignore every public ACL on the bucket and its objects. Default true.
    #[serde(default = "yes")]
    pub ignore_public_acls: bool,
    /// Refuse a bucket policy that grants public access. Default true.
    #[serde(default = "yes")]
    pub block_public_policy: bool,
    /// Limit a bucket with a public policy to AWS services and the bucket owner's account.
    /// Default true.
    #[serde(default = "yes")]
    pub restrict_public_buckets: bool,
}

impl Default for PublicAccessBlock {
    fn default() -> Self {
        Self {
            block_public_acls: true,
            ignore_public_acls: true,
            block_public_policy: true,
            restrict_public_buckets: true,
        }
    }
}

/// The CRD's rule on what an `Allow` may grant: the object and listing actions a BucketAccess
/// holds, compared lowercased as IAM compares actions (`aws::policy::grantable_actions`, which a
/// test keeps equal to this list).
pub const ALLOW_ACTIONS_RULE: &str = "self.effect != 'Allow' || self.action.all(a, a.lowerAscii() in ['s3:abortmultipartupload', 's3:deleteobject', 's3:deleteobjectversion', 's3:getbucketlocation', 's3:getobject', 's3:getobjecttagging', 's3:getobjectversion', 's3:listbucket', 's3:listbucketmultipartuploads', 's3:listmultipartuploadparts', 's3:putobject', 's3:putobjecttagging'])";

/// One statement of the bucket policy, in the IAM policy grammar.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.effect != 'Allow' || !has(self.principal.aws) || !self.principal.aws.exists(p, p == '*')").message("spec.policy[].principal.aws must not be '*' in an Allow statement: it would make the bucket public"))]
#[x_kube(validation = Rule::new(ALLOW_ACTIONS_RULE).message("spec.policy[].action of an Allow may list only the object and listing actions a BucketAccess holds (s3:GetObject, s3:GetObjectVersion, s3:GetObjectTagging, s3:PutObject, s3:PutObjectTagging, s3:DeleteObject, s3:DeleteObjectVersion, s3:AbortMultipartUpload, s3:ListMultipartUploadParts, s3:ListBucket, s3:ListBucketMultipartUploads, s3:GetBucketLocation): no wildcard, bucket configuration, retention, legal hold or bypass; a Deny may name any S3 action").field_path(".action"))]
pub struct PolicyStatement {
    /// Statement id, unique in the policy (letters and digits). `DenyInsecureTransport` and
    /// `S3ServerAccessLogs` are the operator's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128))]
    #[x_kube(validation = Rule::new("self.matches('^[A-Za-z0-9]+$')").message("spec.policy[].sid may contain only letters and digits"))]
    #[x_kube(validation = Rule::new("self != 'DenyInsecureTransport'").message("spec.policy[].sid DenyInsecureTransport is reserved for the operator's TLS-only statement"))]
    #[x_kube(validation = Rule::new("self != 'S3ServerAccessLogs'").message("spec.policy[].sid S3ServerAccessLogs is reserved for the operator's server access logging grant"))]
    pub sid: Option<String>,
    /// `Allow` or `Deny`.
    pub effect: PolicyEffect,
    /// Whom the statement applies to.
    pub principal: PolicyPrincipal,
    /// S3 actions. An `Allow` may grant only the object and listing actions a BucketAccess
    /// holds (such as `s3:GetObject`, `s3:PutObject`, `s3:ListBucket`), never a wildcard; a
    /// `Deny` may name any, `s3:*` included, and never binds the operator itself.
    // Bounded items keep the CEL rules' estimated cost within the API server's budget.
    #[schemars(length(min = 1, max = 50), extend("items" = {"type": "string", "maxLength": 128}))]
    #[x_kube(validation = Rule::new("self.all(a, a.startsWith('s3:'))").message("spec.policy[].action must list S3 actions (s3:...)"))]
    pub action: Vec<String>,
    /// This bucket's ARN (`arn:aws:s3:::<bucket>`) and/or its objects' (`arn:aws:s3:::<bucket>/*`);
    /// no other resource is accepted.
    #[schemars(length(min = 1, max = 2), extend("items" = {"type": "string", "maxLength": 128}))]
    #[x_kube(validation = Rule::new("self.all(r, r.matches('^arn:aws[a-z-]*:s3:::[a-z0-9][a-z0-9.-]*[a-z0-9](/[*])?$'))").message("spec.policy[].resource must be this bucket's ARN, arn:aws:s3:::<bucket>, or its objects', arn:aws:s3:::<bucket>/*"))]
    pub resource: Vec<String>,
    /// Conditions: operator (`StringEquals`, `Bool`, `IpAddress`, ...) to condition key to values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 10))]
    pub condition: BTreeMap<String, BTreeMap<String, Vec<String>>>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum PolicyEffect {
    Allow,
    Deny,
}

/// The principals of a policy statement.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema)]
#[x_kube(validation = Rule::new("(has(self.aws) && size(self.aws) > 0) || (has(self.service) && size(self.service) > 0)").message("spec.policy[].principal needs at least one aws or service principal"))]
pub struct PolicyPrincipal {
    /// AWS account ids or IAM ARNs (`123456789012`, `arn:aws:iam::123456789012:role/app`); `*`
    /// is everyone, allowed only in a `Deny`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20), extend("items" = {"type": "string", "maxLength": 2048}))]
    pub aws: Vec<String>,
    /// AWS service principals, such as `logging.s3.amazonaws.com`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20), extend("items" = {"type": "string", "maxLength": 256}))]
    pub service: Vec<String>,
}

/// One lifecycle rule. At least one action (expiration, noncurrent expiration, multipart
/// abort or transition) is required.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.expirationDays) || has(self.noncurrentVersionExpirationDays) || has(self.abortIncompleteMultipartUploadDays) || (has(self.transitions) && size(self.transitions) > 0)").message("spec.lifecycleRules[] needs at least one action: expirationDays, noncurrentVersionExpirationDays, abortIncompleteMultipartUploadDays or transitions"))]
pub struct LifecycleRule {
    /// Unique identifier of the rule.
    #[schemars(length(min = 1, max = 255))]
    pub id: String,
    /// Apply the rule only to keys under this prefix (all keys when omitted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub prefix: Option<String>,
    /// Whether the rule is active. Defaults to true.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Delete current object versions this many days after creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 36500))]
    pub expiration_days: Option<i32>,
    /// Delete noncurrent object versions this many days after they become noncurrent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 36500))]
    pub noncurrent_version_expiration_days: Option<i32>,
    /// Abort incomplete multipart uploads this many days after they start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 36500))]
    pub abort_incomplete_multipart_upload_days: Option<i32>,
    /// Move current versions to another storage class after some days.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 10))]
    pub transitions: Vec<Transition>,
}

/// A lifecycle transition to another storage class.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Transition {
    /// Days after object creation.
    #[schemars(range(min = 0, max = 36500))]
    pub days: i32,
    /// The storage class objects move to: STANDARD_IA, ONEZONE_IA, INTELLIGENT_TIERING, GLACIER,
    /// GLACIER_IR or DEEP_ARCHIVE.
    pub storage_class: StorageClass,
}

/// An S3 storage class a lifecycle transition moves objects to.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[allow(non_camel_case_types, clippy::upper_case_acronyms)]
pub enum StorageClass {
    STANDARD_IA,
    ONEZONE_IA,
    INTELLIGENT_TIERING,
    GLACIER,
    GLACIER_IR,
    DEEP_ARCHIVE,
}

/// One CORS rule.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CorsRule {
    /// HTTP methods the origins may use.
    #[schemars(length(min = 1, max = 5))]
    pub allowed_methods: Vec<CorsMethod>,
    /// Origins allowed to make cross-origin requests (one `*` wildcard each at most).
    #[schemars(length(min = 1, max = 100))]
    pub allowed_origins: Vec<String>,
    /// Headers allowed in a preflight request.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub allowed_headers: Vec<String>,
    /// Response headers the browser may read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub expose_headers: Vec<String>,
    /// Seconds a browser may cache a preflight response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 86400))]
    pub max_age_seconds: Option<i32>,
}

#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, schemars::JsonSchema,
)]
#[allow(clippy::upper_case_acronyms)]
pub enum CorsMethod {
    GET,
    PUT,
    POST,
    DELETE,
    HEAD,
}

/// Observed state of a Bucket.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BucketStatus {
    /// `Ready` with a machine-readable reason and a human message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The generation the operator last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The S3 bucket name (generated or from the spec).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucket_name: Option<String>,
    /// ARN of the bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arn: Option<String>,
    /// Region of the bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// S3 endpoint clients should use for this bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// The BucketClass in force (named in spec, or the namespace's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class_name: Option<String>,
    /// The deletion rules a pass last accepted (the spec under its class, Ready): deletion
    /// follows these, or the class when it is stricter, never an edit a pass refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion: Option<AcceptedDeletion>,
    /// The AWSAccount the bucket lives in, recorded before it is created; absent: the
    /// operator's own account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<super::AccountRecord>,
    /// What a `Manage` pass would change, field by field: written by an `Observe` pass (empty
    /// when the bucket is as the spec says), at most 20 entries (condition `InSync` gives the
    /// full count). Always serialized: status is written as a merge patch, where only `[]`
    /// clears a list an earlier Observe pass left.
    #[serde(default)]
    pub plan: Vec<PlannedChange>,
    /// ARN of the IAM role S3 replicates this bucket with (spec.replication), once made.
    /// Always serialized: status is written as a merge patch, where only `null` removes it.
    #[serde(default)]
    pub replication_role: Option<String>,
}

/// One field a `Manage` pass would change.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub struct PlannedChange {
    /// The spec's field, as `publicAccessBlock.blockPublicPolicy`, `tags.team` or
    /// `policy.statement[Sid]`.
    pub field: String,
    /// What S3 holds now (`absent`: nothing).
    pub from: String,
    /// What the spec asks for (`absent`: removed).
    pub to: String,
}

/// What deleting a Bucket was last accepted to do.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct AcceptedDeletion {
    /// `Delete` or `Retain`.
    pub policy: DeletionPolicy,
    /// The bucket is emptied before it is deleted.
    #[serde(default)]
    pub force_delete: bool,
}
