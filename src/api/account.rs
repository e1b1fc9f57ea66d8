//! `AWSAccount`: another AWS account the operator works in, through a role it assumes there.
//! Only a platform admin writes one (it is cluster-scoped); a class names it, and the class's
//! namespace selector is what maps namespaces to accounts.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// An AWS account the operator assumes a role in.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "s3.operator.dev",
    version = "v1alpha1",
    kind = "AWSAccount",
    plural = "awsaccounts",
    status = "AWSAccountStatus",
    doc = "An AWS account the operator works in through a role it assumes there (sts:AssumeRole with an ExternalId). A BucketClass or BucketAccessClass names it in spec.account.",
    shortname = "awsacct",
    category = "s3",
    printcolumn = r#"{"name":"Account ID","type":"string","jsonPath":".status.accountId"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Role","type":"string","jsonPath":".spec.roleArn"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(
    "has(self.bucketNamePrefix) == has(oldSelf.bucketNamePrefix) && (!has(self.bucketNamePrefix) || self.bucketNamePrefix == oldSelf.bucketNamePrefix)"
).message("spec.bucketNamePrefix is immutable: the buckets made in this account are named under it").field_path(".bucketNamePrefix"))]
#[x_kube(validation = Rule::new(
    "has(self.iamPath) == has(oldSelf.iamPath) && (!has(self.iamPath) || self.iamPath == oldSelf.iamPath)"
).message("spec.iamPath is immutable: the users and roles made in this account live under it").field_path(".iamPath"))]
pub struct AWSAccountSpec {
    /// The role the operator assumes in that account (`arn:<partition>:iam::<account>:role/...`);
    /// the account is the one this ARN names. `s3-operator iam-policy --target-account` renders
    /// its trust and permission policies.
    #[schemars(regex(
        pattern = r"^arn:aws[a-z-]*:iam::[0-9]{12}:role/[A-Za-z0-9_+=,.@/-]{1,512}$"
    ))]
    pub role_arn: String,
    /// The Secret, in the operator's own namespace, whose key holds the ExternalId the role's
    /// trust policy requires (`sts:ExternalId`): a tenant can neither read nor name it.
    pub external_id_secret_ref: SecretKeyRef,
    /// Region of new Buckets in this account that name none (and of its IAM and STS calls);
    /// omitted: the operator's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[a-z]{2}(-[a-z]+)+-[0-9]+$"))]
    pub region: Option<String>,
    /// Prefix of the bucket names the operator makes and accepts in this account (as
    /// `--bucket-name-prefix` in its own); omitted: the operator's. The role's policy there is
    /// scoped to it (`s3-operator iam-policy --target-account --bucket-name-prefix`). Immutable:
    /// every bucket made here is named under it, and is recorded with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[a-z0-9][a-z0-9-]{0,39}$"))]
    pub bucket_name_prefix: Option<String>,
    /// IAM path of the users and roles the operator makes in this account, and of the
    /// permissions boundary there (`<iamPath>s3-operator-boundary`); omitted: the operator's
    /// (`/s3-operator/<cluster>/`). Not `/`: the role's policy is scoped to it, and at the
    /// root it would reach every identity of the account. Immutable, as the prefix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^/([A-Za-z0-9_+=,.@-]+/)+$"), length(max = 512))]
    pub iam_path: Option<String>,
}

/// Whether the operator can use the account, as it last found when it assumed the role (on
/// first use, after an edit, and on the retries of a failure): written only when it changes.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AWSAccountStatus {
    /// The account the role ARN names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account_id: Option<String>,
    /// `Ready`: True once the role was assumed and STS answered for that account; False with
    /// reason `AccountUnavailable` and why (STS's message, a missing Secret) when not.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The generation the condition is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// A key of a Secret in the operator's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// Name of the Secret, in the operator's own namespace.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// The key of the Secret's data that holds the value.
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

/// Where a Bucket or BucketAccess lives, recorded in its status before anything is created for
/// it: a later class edit never moves it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AccountRecord {
    /// The AWSAccount the object lives in.
    pub name: String,
    /// That account's id, as its role ARN named it when recorded.
    pub id: String,
    /// The AWSAccount's bucket-name prefix when recorded; absent: the operator's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucket_name_prefix: Option<String>,
    /// The AWSAccount's IAM path when recorded; absent: the operator's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iam_path: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::CustomResourceExt;

    #[test]
    fn an_account_is_cluster_scoped_and_needs_its_role_and_external_id() {
        let crd = AWSAccount::crd();
        assert_eq!(crd.spec.scope, "Cluster");
        let schema = serde_json::to_value(&crd.spec.versions[0].schema).unwrap();
        let spec = &schema["openAPIV3Schema"]["properties"]["spec"];
        let required = spec["required"].as_array().unwrap();
        assert!(required.contains(&"roleArn".into()));
        assert!(required.contains(&"externalIdSecretRef".into()));
        let pattern = spec["properties"]["roleArn"]["pattern"].as_str().unwrap();
        let re = regex::Regex::new(pattern).unwrap();
        assert!(re.is_match("arn:aws:iam::111111111111:role/s3-operator"));
        assert!(re.is_match("arn:aws-cn:iam::111111111111:role/path/s3-operator"));
        assert!(!re.is_match("arn:aws:iam::111111111111:user/s3-operator"));
        assert!(!re.is_match("arn:aws:iam::1111:role/x"));
    }

    #[test]
    fn an_account_shows_its_id_and_readiness_and_only_the_operator_writes_them() {
        let crd = AWSAccount::crd();
        let version = &crd.spec.versions[0];
        assert!(
            version.subresources.as_ref().unwrap().status.is_some(),
            "status is a subresource: whoever may edit the spec cannot fake Ready"
        );
        let columns: Vec<_> = version
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| (c.name.as_str(), c.json_path.as_str()))
            .collect();
        assert_eq!(
            columns,
            [
                ("Account ID", ".status.accountId"),
                ("Ready", r#".status.conditions[?(@.type=="Ready")].status"#),
                ("Role", ".spec.roleArn"),
                ("Age", ".metadata.creationTimestamp"),
            ]
        );
    }

    /// The CLI's check (`iam-policy --iam-path`) and the schema's pattern agree, and neither
    /// takes the root path or a prefix the operator's own rule refuses; both names are
    /// immutable in the schema, added or removed included.
    #[test]
    fn an_accounts_prefix_and_iam_path_are_checked_alike_and_immutable() {
        let crd = AWSAccount::crd();
        let schema = serde_json::to_value(&crd.spec.versions[0].schema).unwrap();
        let spec = &schema["openAPIV3Schema"]["properties"]["spec"];
        let pattern = |f: &str| {
            let p = spec["properties"][f]["pattern"].as_str().unwrap();
            regex::Regex::new(p).unwrap()
        };
        let path = pattern("iamPath");
        for p in ["/", "//", "/a", "a/", "/a//b/", "/a b/", "/a/*/", ""] {
            assert!(!path.is_match(p), "{p:?}");
            assert!(crate::aws::naming::check_iam_path(p).is_err(), "{p:?}");
        }
        for p in ["/a/", "/platform/team-b/", "/x_1/y.z@w=+,/"] {
            assert!(path.is_match(p), "{p:?}");
            assert!(crate::aws::naming::check_iam_path(p).is_ok(), "{p:?}");
        }
        assert_eq!(spec["properties"]["iamPath"]["maxLength"], 512);
        let prefix = pattern("bucketNamePrefix");
        for p in ["team-b-", "a", "x9"] {
            assert!(prefix.is_match(p), "{p:?}");
            assert!(crate::aws::naming::bucket_prefix("c", Some(p)).is_ok());
        }
        for p in ["-a", "A-", "a_b", "a.b", &"a".repeat(41)] {
            assert!(!prefix.is_match(p), "{p:?}");
            assert!(crate::aws::naming::bucket_prefix("c", Some(p)).is_err());
        }
        let rules = spec["x-kubernetes-validations"].as_array().unwrap();
        for field in ["bucketNamePrefix", "iamPath"] {
            let rule = rules
                .iter()
                .find(|r| r["fieldPath"] == format!(".{field}"))
                .unwrap_or_else(|| panic!("a rule for {field}"));
            let text = rule["rule"].as_str().unwrap();
            assert!(
                text.contains(&format!("has(self.{field}) == has(oldSelf.{field})")),
                "{text}"
            );
        }
    }
}
