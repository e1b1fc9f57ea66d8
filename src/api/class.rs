//! `BucketClass` and `BucketAccessClass`: what a platform team sets for a group of namespaces,
//! in the container object storage interface's (COSI) vocabulary and with StorageClass's habits.
//! Defaults fill what an object leaves unset; constraints are checked after defaulting. The
//! operator's own flags stay the ceiling: a class can narrow what they allow, never widen it.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::Duration;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::{
    CredentialsType, DeletionPolicy, Encryption, EncryptionAlgorithm, LifecycleRule, Management,
    ObjectOwnership, Permission, PublicAccessBlock, Rotation, Versioning,
};

/// Annotation that makes a class its kind's default for the namespaces its selector matches,
/// as `storageclass.kubernetes.io/is-default-class` does for StorageClasses.
pub const DEFAULT_CLASS_ANNOTATION: &str = crate::domain_key!("is-default-class");

/// The grammar of a class's rotation bounds (a CEL rule on each): Go's duration syntax as
/// `kube::core::Duration` parses it, without a sign (API-server-side `duration()` would take
/// `30d` nowhere, but nothing checked the bounds alone), each number bounded so that no
/// accepted value overflows the parser. The test `every_duration_the_schema_accepts_parses`
/// holds the two together.
macro_rules! duration_pattern {
    () => {
        r"^(0|(([0-9]{1,9}([.][0-9]{0,9})?|[.][0-9]{1,9})(ns|us|ms|s|m|h))+)$"
    };
}

/// [`duration_pattern`], for the tests.
#[cfg(test)]
pub(crate) const DURATION_PATTERN: &str = duration_pattern!();

/// Defaults and limits for the Buckets of a group of namespaces.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "s3.operator.dev",
    version = "v1alpha1",
    kind = "BucketClass",
    doc = "Defaults and limits for the Buckets of a group of namespaces (COSI's BucketClass).",
    shortname = "bktc",
    category = "s3",
    printcolumn = r#"{"name":"Default","type":"string","jsonPath":".metadata.annotations.s3\\.operator\\.dev/is-default-class"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct BucketClassSpec {
    /// The namespaces whose Buckets may use this class, by label. Omitted or empty: every
    /// namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "namespace_selector")]
    pub namespace_selector: Option<LabelSelector>,
    /// Values for the fields a Bucket of this class leaves unset.
    #[serde(default)]
    pub defaults: BucketDefaults,
    /// Rules every Bucket of this class must keep, checked after the defaults are filled in.
    #[serde(default)]
    pub constraints: BucketConstraints,
    /// The AWSAccount new Buckets of this class are created in. Omitted: the operator's own
    /// account. Recorded on each Bucket (`status.account`) before its bucket is created: an edit
    /// here never moves an existing bucket (it is a ClassViolation instead).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub account: Option<String>,
}

/// What a class fills in where a Bucket's spec says nothing. A Bucket's own value always wins.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct BucketDefaults {
    /// Region of new Buckets that name none. Recorded on the Bucket (annotation
    /// `s3.operator.dev/region`) before its bucket is created, so a later change to the class
    /// never moves an existing bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[a-z]{2}(-[a-z]+)+-[0-9]+$"))]
    pub region: Option<String>,
    /// Versioning (`Enabled` or `Suspended`) of Buckets that set none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub versioning: Option<Versioning>,
    /// Default server-side encryption (for example `aws:kms` with the platform's key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption: Option<Encryption>,
    /// Object Ownership of Buckets that set none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_ownership: Option<ObjectOwnership>,
    /// Lifecycle rules for Buckets that list none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100))]
    pub lifecycle_rules: Option<Vec<LifecycleRule>>,
    /// Tags added to every bucket of the class; a Bucket's own tag of the same key wins.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 40))]
    #[x_kube(validation = Rule::new("self.all(k, !k.startsWith('s3.operator.dev/') && !k.startsWith('aws:'))").message("spec.defaults.tags keys must not start with the reserved prefixes 's3.operator.dev/' or 'aws:'"))]
    pub tags: BTreeMap<String, String>,
    /// Deletion policy of Buckets that set none (before the operator's
    /// `--default-deletion-policy`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_policy: Option<DeletionPolicy>,
    /// Public access block of Buckets that set none (before the operator's: all four flags on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_access_block: Option<PublicAccessBlock>,
    /// Management mode of Buckets that set none (before the operator's: `Manage`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub management: Option<Management>,
}

/// Limits on a Bucket of the class. An empty list or an omitted field adds no limit of its own
/// (the operator's flags still apply).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct BucketConstraints {
    /// Regions a bucket may be in.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 50), extend("items" = {"type": "string", "maxLength": 32, "pattern": "^[a-z]{2}(-[a-z]+)+-[0-9]+$"}))]
    pub allowed_regions: Vec<String>,
    /// The encryption every bucket must use (`aws:kms` to require SSE-KMS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required_encryption: Option<EncryptionAlgorithm>,
    /// KMS key ids or ARNs an SSE-KMS bucket may use.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 50), extend("items" = {"type": "string", "minLength": 1, "maxLength": 2048}))]
    pub allowed_kms_keys: Vec<String>,
    /// Every bucket must have versioning `Enabled`.
    #[serde(default)]
    pub require_versioning: bool,
    /// Deletion policies a Bucket may have.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_deletion_policies: Vec<DeletionPolicy>,
    /// May a Bucket set `forceDelete` (delete a bucket with its objects)?
    #[serde(default = "yes")]
    pub allow_force_delete: bool,
    /// May a Bucket set `adoptExisting`?
    #[serde(default = "yes")]
    pub allow_adopt_existing: bool,
    /// May a Bucket turn on object lock?
    #[serde(default = "yes")]
    pub allow_object_lock: bool,
    /// May a Bucket choose COMPLIANCE retention (also needs the operator's
    /// `--allow-compliance-retention`)?
    #[serde(default = "yes")]
    pub allow_compliance_retention: bool,
    /// May a Bucket turn on transfer acceleration?
    #[serde(default = "yes")]
    pub allow_transfer_acceleration: bool,
    /// Principals outside the operator's account a bucket policy `Allow` may name, within the
    /// operator's `--allowed-policy-principals`. Omitted: the operator's list. Each entry an
    /// account id, an IAM or STS ARN, or an AWS service principal (`*.amazonaws.com`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100), extend("items" = {"type": "string", "maxLength": 2048, "pattern": "^([0-9]{12}|arn:aws[a-z-]*:(iam|sts)::[0-9]{12}:[^*]+|[a-z0-9.-]+[.]amazonaws[.]com(-cn|[.]cn)?)$"}))]
    pub allowed_policy_principals: Option<Vec<String>>,
    /// SQS queue and SNS topic ARNs (an entry ending in `*` is a prefix) notifications may
    /// name, within the operator's `--allowed-notification-targets`. Omitted: the operator's
    /// list. Each entry an SQS or SNS ARN, or an ARN prefix ending in a single `*`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100), extend("items" = {"type": "string", "maxLength": 2048, "pattern": "^arn:aws[a-z-]*:(sqs|sns):[^*]*[*]?$"}))]
    pub allowed_notification_targets: Option<Vec<String>>,
    /// Management modes a Bucket may use (`Manage`, `Observe`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_management_modes: Vec<Management>,
    /// `Allowed` (the default), `Required` (every Bucket must replicate: spec.replication with
    /// at least one rule) or `Forbidden` (no Bucket may; one that does is refused and its
    /// replication role's grant withdrawn at once).
    #[serde(default)]
    pub replication: ReplicationConstraint,
    /// Regions a replication destination may be in.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 50), extend("items" = {"type": "string", "maxLength": 32, "pattern": "^[a-z]{2}(-[a-z]+)+-[0-9]+$"}))]
    pub allowed_replication_regions: Vec<String>,
    /// Accounts a replication destination given by `bucketArn` may be in, within the
    /// operator's `--allowed-replication-accounts`. Omitted: the operator's list. A security
    /// constraint: an account taken off withdraws the replication role's grant at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100), extend("items" = {"type": "string", "pattern": "^[0-9]{12}$"}))]
    pub allowed_replication_accounts: Option<Vec<String>>,
}

/// Whether the Buckets of a class may, must or must not replicate.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, schemars::JsonSchema,
)]
pub enum ReplicationConstraint {
    #[default]
    Allowed,
    Required,
    Forbidden,
}

fn yes() -> bool {
    true
}

impl Default for BucketConstraints {
    fn default() -> Self {
        BucketConstraints {
            allowed_regions: vec![],
            required_encryption: None,
            allowed_kms_keys: vec![],
            require_versioning: false,
            allowed_deletion_policies: vec![],
            allow_force_delete: true,
            allow_adopt_existing: true,
            allow_object_lock: true,
            allow_compliance_retention: true,
            allow_transfer_acceleration: true,
            allowed_policy_principals: None,
            allowed_notification_targets: None,
            allowed_management_modes: vec![],
            replication: ReplicationConstraint::Allowed,
            allowed_replication_regions: vec![],
            allowed_replication_accounts: None,
        }
    }
}

/// Defaults and limits for the BucketAccesses of a group of namespaces.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "s3.operator.dev",
    version = "v1alpha1",
    kind = "BucketAccessClass",
    doc = "Defaults and limits for the BucketAccesses of a group of namespaces (COSI's BucketAccessClass).",
    shortname = "bkac",
    category = "s3",
    printcolumn = r#"{"name":"Default","type":"string","jsonPath":".metadata.annotations.s3\\.operator\\.dev/is-default-class"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(
    "!has(self.rotation) || !has(self.rotation.minimum) || !has(self.rotation.maximum) || duration(self.rotation.minimum) <= duration(self.rotation.maximum)"
).message("spec.rotation.minimum must not be longer than spec.rotation.maximum").field_path(".rotation"))]
pub struct BucketAccessClassSpec {
    /// The namespaces whose BucketAccesses may use this class, by label. Omitted or empty:
    /// every namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "namespace_selector")]
    pub namespace_selector: Option<LabelSelector>,
    /// Credential types an access may use. Empty: any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_credential_types: Vec<CredentialsType>,
    /// Permissions an access may ask for. Empty: any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_permissions: Vec<Permission>,
    /// Every access must name a `prefix` (no grant on a whole bucket).
    #[serde(default)]
    pub require_prefix: bool,
    /// Access-key rotation: the default for accesses that set none, and its bounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotation: Option<RotationBounds>,
    /// The AWSAccount an access of this class may live in: one whose Bucket lives in another
    /// account is a ClassViolation. Omitted: its Bucket's account. An access's identity always
    /// lives in its Bucket's account, recorded (`status.account`) before it is created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub account: Option<String>,
    /// Management mode of BucketAccesses that set none (before the operator's: `Manage`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_management: Option<Management>,
    /// Management modes an access may use (`Manage`, `Observe`). Empty: any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_management_modes: Vec<Management>,
    /// The most Buckets one access may grant: `spec.bucketRef` and `spec.additionalBuckets`
    /// together (1 to 10). Omitted: 10, the most an access can name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10))]
    pub max_buckets: Option<u8>,
}

/// Rotation a class gives and allows (access keys only).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(
    "!has(self.default) || !has(self.minimum) || duration(self.default.interval) >= duration(self.minimum)"
).message("spec.rotation.default.interval must not be shorter than spec.rotation.minimum").field_path(".default"))]
#[x_kube(validation = Rule::new(
    "!has(self.default) || !has(self.maximum) || duration(self.default.interval) <= duration(self.maximum)"
).message("spec.rotation.default.interval must not be longer than spec.rotation.maximum").field_path(".default"))]
pub struct RotationBounds {
    /// Rotation of an `AccessKey` access that sets none (it must keep within `minimum` and
    /// `maximum`, and at least the operator's `--min-rotation-interval`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<Rotation>,
    /// The shortest interval an access may ask for (the operator's `--min-rotation-interval`
    /// still applies), such as `1h`: hours, minutes and seconds (`h`, `m`, `s`, `ms`, `us`,
    /// `ns`), no days.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxLength" = 64))]
    #[x_kube(validation = Rule::new(concat!("self.matches('", duration_pattern!(), "')")).message("spec.rotation.minimum must be a duration such as 720h or 1h30m (units h, m, s, ms, us, ns; no days)"))]
    pub minimum: Option<Duration>,
    /// The longest interval an access may ask for, such as `720h` (units as for `minimum`);
    /// with it, every `AccessKey` access must rotate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxLength" = 64))]
    #[x_kube(validation = Rule::new(concat!("self.matches('", duration_pattern!(), "')")).message("spec.rotation.maximum must be a duration such as 720h or 1h30m (units h, m, s, ms, us, ns; no days)"))]
    pub maximum: Option<Duration>,
}

/// A label key: an optional DNS-subdomain prefix and `/`, then a name of at most 63
/// characters, as the API server checks on Namespaces.
const LABEL_KEY: &str = "^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$";
/// A label value: empty, or at most 63 characters.
const LABEL_VALUE: &str = "^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$";

/// A class's `spec.namespaceSelector`: a Kubernetes label selector whose operators, keys and
/// values the API server checks as it does a Deployment's, so every selector it accepts is one
/// the operator can evaluate (`reconcile::class::admission`).
fn namespace_selector(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let key_rule = format!("self.key.matches('{LABEL_KEY}')");
    let values_rule =
        format!("!has(self.values) || self.values.all(v, v.matches('{LABEL_VALUE}'))");
    // Keys are not checked here: a map key has no length bound for CEL's cost estimate, and a
    // key no namespace can carry is read as it is (it matches no namespace).
    let labels_rule = format!("self.all(k, self[k].matches('{LABEL_VALUE}'))");
    schemars::json_schema!({
        "type": "object",
        "nullable": true,
        "description": "A label selector over namespaces (matchLabels and matchExpressions, ANDed).",
        "properties": {
            "matchLabels": {
                "description": "Labels a namespace must carry, each with exactly this value.",
                "type": "object",
                "maxProperties": 64,
                "additionalProperties": {"type": "string", "maxLength": 63},
                "x-kubernetes-validations": [{
                    "rule": labels_rule,
                    "message": "spec.namespaceSelector.matchLabels values must be label values (at most 63 letters, digits, '-', '_' or '.', beginning and ending with a letter or digit)"
                }]
            },
            "matchExpressions": {
                "description": "Requirements on a namespace's labels, all of which must hold.",
                "type": "array",
                "maxItems": 64,
                "items": {
                    "type": "object",
                    "required": ["key", "operator"],
                    "properties": {
                        "key": {"description": "The label key the requirement is on.", "type": "string", "maxLength": 317},
                        "operator": {"description": "How the key's value is tested: In, NotIn, Exists or DoesNotExist.", "type": "string", "enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
                        "values": {
                            "description": "The values for In and NotIn; empty for Exists and DoesNotExist.",
                            "type": "array",
                            "maxItems": 64,
                            "items": {"type": "string", "maxLength": 63}
                        }
                    },
                    "x-kubernetes-validations": [
                        {
                            "rule": key_rule,
                            "message": "spec.namespaceSelector.matchExpressions[].key must be a label key (an optional DNS subdomain and '/', then at most 63 letters, digits, '-', '_' or '.')"
                        },
                        {
                            "rule": values_rule,
                            "message": "spec.namespaceSelector.matchExpressions[].values must be label values (at most 63 letters, digits, '-', '_' or '.')"
                        },
                        {
                            "rule": "(self.operator == 'In' || self.operator == 'NotIn') == (has(self.values) && size(self.values) > 0)",
                            "message": "spec.namespaceSelector.matchExpressions[].values must be non-empty for In and NotIn, and empty for Exists and DoesNotExist"
                        }
                    ]
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every string over the alphabet of durations (and a few traps) up to five characters that
    /// the API server's rule accepts is one the operator's parser reads, without a panic; the
    /// longest values the bounds allow too.
    #[test]
    fn every_duration_the_schema_accepts_parses() {
        let accepted = regex::Regex::new(DURATION_PATTERN).unwrap();
        let alphabet = ['0', '1', '9', '.', 'h', 'm', 's', 'n', 'u', 'd', '-', '+'];
        let mut strings = vec![String::new()];
        let (mut checked, mut all) = (0, vec![]);
        for _ in 0..5 {
            strings = strings
                .iter()
                .flat_map(|s| alphabet.iter().map(move |c| format!("{s}{c}")))
                .collect();
            all.extend(strings.iter().cloned());
        }
        let long = "999999999.999999999h".repeat(3);
        all.extend([
            long.clone(),
            format!("{long}9ns"),
            "1h30m".into(),
            "720h".into(),
        ]);
        for s in &all {
            if s.len() <= 64 && accepted.is_match(s) {
                checked += 1;
                let parsed = std::panic::catch_unwind(|| s.parse::<Duration>());
                assert!(
                    matches!(parsed, Ok(Ok(_))),
                    "{s:?} is accepted but does not parse"
                );
            }
        }
        assert!(checked > 1000, "only {checked} accepted strings checked");
        for refused in ["30d", "", "-1h", "+1h", "1", "1h-1m", "1.5", "1d2h", "1e3s"] {
            assert!(!accepted.is_match(refused), "{refused:?} is accepted");
        }
        for ok in [
            "0",
            "720h",
            "1h30m",
            "1.5h",
            ".5s",
            "10ms",
            "1h2m3s4ms5us6ns",
        ] {
            assert!(accepted.is_match(ok), "{ok:?} is refused");
        }
    }

    /// The rules the API server runs on a class's durations and selector are in the CRD.
    #[test]
    fn the_crds_carry_the_duration_and_selector_rules() {
        use kube::CustomResourceExt;
        let access = serde_json::to_string(&BucketAccessClass::crd()).unwrap();
        let pattern = serde_json::to_string(DURATION_PATTERN).unwrap();
        let pattern = pattern.trim_matches('"');
        assert_eq!(access.matches(pattern).count(), 2, "minimum and maximum");
        for crd in [access, serde_json::to_string(&BucketClass::crd()).unwrap()] {
            assert!(crd.contains(r#""enum":["In","NotIn","Exists","DoesNotExist"]"#));
            assert!(crd.contains("values must be non-empty for In and NotIn"));
        }
    }
}
