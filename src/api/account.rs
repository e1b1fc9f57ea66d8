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
}
