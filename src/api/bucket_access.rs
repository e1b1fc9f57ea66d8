use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::core::Duration;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// Least-privilege access to one Bucket for an application, delivered as a Secret it can mount
/// with `envFrom`.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "s3.operator.dev",
    version = "v1alpha1",
    kind = "BucketAccess",
    doc = "Least-privilege access to one Bucket, delivered as a Secret an application mounts with envFrom.",
    namespaced,
    status = "BucketAccessStatus",
    shortname = "bka",
    category = "s3",
    printcolumn = r#"{"name":"Bucket","type":"string","jsonPath":".spec.bucketRef.name"}"#,
    printcolumn = r#"{"name":"Permission","type":"string","jsonPath":".spec.permission"}"#,
    printcolumn = r#"{"name":"Secret","type":"string","jsonPath":".status.secretName"}"#,
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
    "has(self.className) == has(oldSelf.className) && (!has(self.className) || self.className == oldSelf.className)"
).message("spec.className is immutable: it cannot be added, changed or removed after creation").field_path(".className"))]
#[x_kube(validation = Rule::new(
    "!has(self.additionalBuckets) || self.additionalBuckets.all(b, b.bucketRef.name != self.bucketRef.name)"
).message("spec.additionalBuckets names the Bucket of spec.bucketRef again").field_path(".additionalBuckets"))]
#[x_kube(validation = Rule::new(
    "!has(oldSelf.configMap) || (has(self.configMap) && self.configMap == oldSelf.configMap)"
).message("spec.configMap can be added but not changed or removed: the operator deletes no ConfigMap, and the one it wrote goes with the BucketAccess").field_path(".configMap"))]
pub struct BucketAccessSpec {
    /// The BucketAccessClass whose defaults and limits apply. When omitted, the default class
    /// of this namespace (if any). Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub class_name: Option<String>,

    /// The Bucket (in this namespace) to grant access to. Immutable.
    #[x_kube(validation = Rule::new("self == oldSelf").message("spec.bucketRef is immutable"))]
    pub bucket_ref: BucketRef,

    /// What the credentials may do: `ReadOnly`, `ReadWrite` or `WriteOnly`.
    pub permission: Permission,

    /// More Buckets of this namespace granted through the same identity and Secret, each with
    /// its own permission and prefix (at most 9; the BucketAccessClass's `maxBuckets` may allow
    /// fewer). The Secret then also holds `BUCKET_NAME_<REF>`, `BUCKET_ARN_<REF>` and
    /// `BUCKET_REGION_<REF>` for each Bucket granted, this one included, `<REF>` being the
    /// Bucket's name in capitals with `-` and `.` as `_`. A Bucket that is gone, not Ready or no
    /// longer the owner of its bucket is left out of the grant, and Ready says which.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 9))]
    #[x_kube(validation = Rule::new("self.all(b, self.exists_one(c, c.bucketRef.name == b.bucketRef.name))").message("spec.additionalBuckets names a Bucket twice"))]
    pub additional_buckets: Vec<BucketGrant>,

    /// Restrict the grant to keys starting with this prefix (for example `uploads/`). The whole
    /// bucket when omitted. A plain key prefix: without a trailing `/`, `team` also covers
    /// `team-b/...`. IAM policy variables (`${...}`) and wildcards are refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    #[x_kube(validation = Rule::new("!self.startsWith('/') && !self.contains('*') && !self.contains('?') && !self.contains('${')").message("spec.prefix must not start with '/' or contain '*', '?' or '${': IAM would expand them and widen the grant"))]
    pub prefix: Option<String>,

    /// How the application authenticates.
    #[serde(default)]
    pub credentials: Credentials,

    /// `Manage` (the default, else the BucketAccessClass's `defaultManagement`): the identity,
    /// its grant and its Secret are kept as the spec says. `Observe`: the operator only reads
    /// them and reports in status what a `Manage` pass would change (`status.plan`, condition
    /// `InSync`); it creates, rotates and changes nothing and writes no Secret. A grant whose
    /// Bucket is gone or another's is still taken back. Deleting an observed BucketAccess
    /// deletes the identity the operator made for it, as `Manage` does: a credential is never
    /// left behind without its object (see the README).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub management: Option<super::Management>,

    /// Also write the bucket's facts to a ConfigMap with ObjectBucketClaim's keys
    /// (`BUCKET_NAME`, `BUCKET_HOST`, `BUCKET_PORT`, `BUCKET_REGION`, `BUCKET_SUBREGION`), for
    /// tools that read a claim's ConfigMap. No credentials go there. Can be added later, but
    /// not changed or removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<ConfigMapOutput>,
}

impl BucketAccessSpec {
    /// The names of every Bucket the access grants: `bucketRef`'s, then `additionalBuckets`'.
    pub fn buckets(&self) -> impl Iterator<Item = &str> {
        let others = self.additional_buckets.iter();
        std::iter::once(self.bucket_ref.name.as_str())
            .chain(others.map(|g| g.bucket_ref.name.as_str()))
    }
}

/// One more Bucket of the namespace an access grants (`spec.additionalBuckets`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct BucketGrant {
    /// The Bucket (in this namespace).
    pub bucket_ref: BucketRef,
    /// What the credentials may do in it: `ReadOnly`, `ReadWrite` or `WriteOnly`.
    pub permission: Permission,
    /// Restrict its grant to keys starting with this prefix, as `spec.prefix` does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    #[x_kube(validation = Rule::new("!self.startsWith('/') && !self.contains('*') && !self.contains('?') && !self.contains('${')").message("spec.additionalBuckets[].prefix must not start with '/' or contain '*', '?' or '${': IAM would expand them and widen the grant"))]
    pub prefix: Option<String>,
}

/// The ConfigMap of bucket facts.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapOutput {
    /// Its name; defaults to the BucketAccess name (as a claim's ConfigMap is named after the
    /// claim). A ConfigMap of that name that this BucketAccess does not own is never written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')").message("spec.configMap.name must be a DNS-1123 subdomain (lowercase letters, digits, '-' and '.')"))]
    pub name: Option<String>,
}

/// A key of a Secret or ConfigMap: what Kubernetes accepts as a data key.
#[derive(
    Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, schemars::JsonSchema,
)]
#[serde(transparent)]
pub struct DataKey(
    #[schemars(length(min = 1, max = 253), regex(pattern = r"^[-._a-zA-Z0-9]+$"))] pub String,
);

/// A reference to a Bucket in the same namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub struct BucketRef {
    /// Name of the Bucket object.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum Permission {
    /// List and read objects.
    ReadOnly,
    /// List, read, write and delete objects.
    ReadWrite,
    /// Write objects only (no list, no read).
    WriteOnly,
}

#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, schemars::JsonSchema,
)]
pub enum CredentialsType {
    /// An IAM user with an inline policy and an access key, delivered in the Secret.
    #[default]
    AccessKey,
    /// An IAM role the named ServiceAccount assumes through the cluster's OIDC provider (IRSA).
    /// No long-lived keys; the Secret carries the role ARN and bucket facts.
    ServiceAccountRole,
    /// An EKS Pod Identity association for the named ServiceAccount: to an IAM role of this
    /// access, or (operator flag `--pod-identity-role-arn`) to one shared role narrowed to this
    /// grant by the association's session policy. No keys; the Secret carries bucket facts only.
    PodIdentity,
}

/// How credentials are issued and delivered.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.type == 'AccessKey' || has(self.serviceAccountName)").message("spec.credentials.serviceAccountName is required when type is ServiceAccountRole or PodIdentity"))]
#[x_kube(validation = Rule::new("self.type != 'AccessKey' || !has(self.serviceAccountName)").message("spec.credentials.serviceAccountName is only allowed when type is ServiceAccountRole or PodIdentity"))]
#[x_kube(validation = Rule::new("self.type == 'AccessKey' || !has(self.rotation)").message("spec.credentials.rotation is only allowed when type is AccessKey"))]
#[x_kube(validation = Rule::new("self.type == oldSelf.type").message("spec.credentials.type is immutable"))]
#[x_kube(validation = Rule::new("has(self.secretName) == has(oldSelf.secretName) && (!has(self.secretName) || self.secretName == oldSelf.secretName)").message("spec.credentials.secretName is immutable").field_path(".secretName"))]
#[x_kube(validation = Rule::new("has(self.serviceAccountName) == has(oldSelf.serviceAccountName) && (!has(self.serviceAccountName) || self.serviceAccountName == oldSelf.serviceAccountName)").message("spec.credentials.serviceAccountName is immutable: an identity stays with its ServiceAccount (create another BucketAccess for another one)").field_path(".serviceAccountName"))]
pub struct Credentials {
    /// `AccessKey` (default), `ServiceAccountRole` or `PodIdentity`.
    #[serde(default, rename = "type")]
    pub type_: CredentialsType,
    /// Name of the Secret to write. Defaults to the BucketAccess name. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')").message("spec.credentials.secretName must be a DNS-1123 subdomain (lowercase letters, digits, '-' and '.')"))]
    pub secret_name: Option<String>,
    /// ServiceAccount of this namespace whose Pods get the credentials (`ServiceAccountRole` and
    /// `PodIdentity` only). A ServiceAccount name (DNS-1123 subdomain). Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')").message("spec.credentials.serviceAccountName must be a ServiceAccount name: a DNS-1123 subdomain (lowercase letters, digits, '-' and '.')"))]
    pub service_account_name: Option<String>,
    /// Access-key rotation (`AccessKey` only). When omitted, the class's `rotation.default`
    /// if it has one, else no rotation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotation: Option<Rotation>,
    /// Renames the Secret's keys for applications that expect other names: each entry maps a
    /// key the operator writes (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`,
    /// `BUCKET_NAME`, `BUCKET_ARN`, `AWS_ENDPOINT_URL_S3`, `AWS_ENDPOINT_URL_STS`, `AWS_ROLE_ARN`)
    /// to the name it gets, for example `AWS_SECRET_ACCESS_KEY: COSI_S3_ACCESS_SECRET_KEY`.
    /// Keys not named keep their names. Two keys may not end up with one name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 8))]
    #[x_kube(validation = Rule::new("self.all(k, k in ['AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY', 'AWS_REGION', 'BUCKET_NAME', 'BUCKET_ARN', 'AWS_ENDPOINT_URL_S3', 'AWS_ENDPOINT_URL_STS', 'AWS_ROLE_ARN'])").message("spec.credentials.secretKeys may rename only the keys the operator writes: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, BUCKET_NAME, BUCKET_ARN, AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL_STS, AWS_ROLE_ARN"))]
    #[x_kube(validation = Rule::new("self.all(k, self.all(j, j == k || self[j] != self[k]))").message("spec.credentials.secretKeys renames two keys to one name: one value would overwrite the other"))]
    #[x_kube(validation = Rule::new("self.all(k, self[k] == k || !(self[k] in ['AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY', 'AWS_REGION', 'BUCKET_NAME', 'BUCKET_ARN', 'AWS_ENDPOINT_URL_S3', 'AWS_ENDPOINT_URL_STS', 'AWS_ROLE_ARN']))").message("spec.credentials.secretKeys renames a key to the name of another key the operator writes: one value would overwrite the other"))]
    pub secret_keys: BTreeMap<String, DataKey>,
}

/// Key rotation with no outage: a new key is created and written to the Secret, and the old key
/// keeps working for `gracePeriod` before it is deleted.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("duration(self.gracePeriod) < duration(self.interval)").message("spec.credentials.rotation.gracePeriod must be shorter than interval"))]
pub struct Rotation {
    /// How old a key may get before it is replaced, as a duration such as `720h`. At least 10s.
    #[x_kube(validation = Rule::new("duration(self) >= duration('10s')").message("spec.credentials.rotation.interval must be at least 10s"))]
    pub interval: Duration,
    /// How long the previous key stays valid after a rotation, such as `1h`.
    #[x_kube(validation = Rule::new("duration(self) >= duration('0s')").message("spec.credentials.rotation.gracePeriod must not be negative"))]
    pub grace_period: Duration,
}

/// Observed state of a BucketAccess. Never holds a secret.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BucketAccessStatus {
    /// `Ready` with a machine-readable reason and a human message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The generation the operator last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The Secret holding the credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_name: Option<String>,
    /// The ConfigMap holding the bucket's facts (`spec.configMap`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_name: Option<String>,
    /// ARN of the IAM user (`AccessKey`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_arn: Option<String>,
    /// ARN of the IAM role (`ServiceAccountRole`; `PodIdentity`: the access's role or the
    /// shared one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role_arn: Option<String>,
    /// Id of the EKS Pod Identity association (`PodIdentity`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_identity_association_id: Option<String>,
    /// Id of the access key in the Secret (the id only, never the secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_key_id: Option<String>,
    /// When the current key was created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_rotation_time: Option<Time>,
    /// When the current key will be replaced (with rotation on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_rotation_time: Option<Time>,
    /// The BucketAccessClass in force (named in spec, or the namespace's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class_name: Option<String>,
    /// The AWSAccount the access's identity lives in (its Bucket's), recorded before it is
    /// created; absent: the operator's own account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<super::AccountRecord>,
    /// What a `Manage` pass would change, field by field: written by an `Observe` pass (empty
    /// when IAM and the Secret are as the spec says), at most 20 entries. Always serialized, as
    /// on a Bucket: only `[]` clears a list in a merge patch.
    #[serde(default)]
    pub plan: Vec<super::PlannedChange>,
}
