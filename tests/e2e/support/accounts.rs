//! Other AWS accounts as their admins reach them and set them up for an installation, as the
//! README's "Many AWS accounts" says: shared by the accounts tests and the benchmark.

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::PostParams;
use s3_operator::api::{AWSAccount, BucketClass};
use s3_operator::aws::policy;
use serde_json::json;

use super::*;

pub const EXTERNAL_ID: &str = "e2e-external-id-7f3a";

/// The emulator's member account (`S3OP_EMULATOR_ACCOUNTS`), entered as Organizations
/// lets its management account in: through `OrganizationAccountAccessRole`.
pub const MEMBER: &str = "111111111111";

/// A target account as the test's admin reaches it: its IAM and S3.
pub struct Target {
    pub id: String,
    pub iam: aws_sdk_iam::Client,
    pub s3: aws_sdk_s3::Client,
}

impl Target {
    /// The emulator's second account, through its own admin's keys.
    pub fn other() -> Target {
        let (k, s) = env()
            .other_admin_key
            .clone()
            .expect("S3OP_AWS_OTHER_ADMIN_*: restart the environment (hack/env.sh down, then up)");
        let id = std::env::var("S3OP_AWS_OTHER_ACCOUNT").unwrap_or_else(|_| "210987654321".into());
        Target {
            id,
            iam: iam_with(&k, &s),
            s3: s3_with(&k, &s),
        }
    }

    /// The member account, through the role Organizations makes there.
    pub async fn member() -> Target {
        let (k, s, t) = member_credentials().await;
        Target {
            id: MEMBER.into(),
            iam: iam_session(&k, &s, Some(t.clone())),
            s3: s3_session(&k, &s, Some(t)),
        }
    }

    /// The role this account's admin makes for the installation `cluster` (made by
    /// [`Target::set_up`]; its ARN is known before, so the operator's own policy can name it).
    pub fn role_arn(&self, cluster: &str) -> String {
        format!("arn:aws:iam::{}:role/s3op-target-{cluster}", self.id)
    }

    /// What the account's admin sets up for the installation `cluster`, as the README says and
    /// `s3-operator iam-policy --target-account` renders it: the permissions boundary, and a
    /// role trusting only the operator's principal (its IAM user, which must exist first, as
    /// IAM refuses a trust naming a principal that does not), with the ExternalId and the
    /// session tag, allowed the operator policy rendered for that account. Returns its ARN.
    pub async fn set_up(&self, cluster: &str) -> String {
        self.set_up_named(cluster, None, None).await
    }

    /// [`Target::set_up`] for an AWSAccount that sets its own `bucketNamePrefix` and
    /// `iamPath`, as `iam-policy --target-account --bucket-name-prefix --iam-path` renders it.
    pub async fn set_up_named(
        &self,
        cluster: &str,
        prefix: Option<&str>,
        path: Option<&str>,
    ) -> String {
        let own = scope(cluster);
        let scope = policy::Scope {
            account: self.id.clone(),
            bucket_prefix: prefix.map_or(own.bucket_prefix.clone(), str::to_string),
            iam_path: path.map_or(own.iam_path.clone(), str::to_string),
            ..own
        };
        self.iam
            .create_policy()
            .policy_name(policy::BOUNDARY_NAME)
            .path(&scope.iam_path)
            .policy_document(policy::boundary_policy(&scope).to_string())
            .send()
            .await
            .expect("the boundary in the target account");
        let trust = policy::trust_policy(&operator_user_arn(cluster), EXTERNAL_ID, cluster);
        let name = format!("s3op-target-{cluster}");
        let role = self
            .iam
            .create_role()
            .role_name(&name)
            .assume_role_policy_document(trust.to_string())
            .send()
            .await
            .expect("the target role");
        self.iam
            .put_role_policy()
            .role_name(&name)
            .policy_name("s3-operator")
            .policy_document(policy::operator_policy(&scope).to_string())
            .send()
            .await
            .expect("the target role's policy");
        let arn = role.role.expect("a role").arn;
        assert_eq!(arn, self.role_arn(cluster));
        arn
    }

    pub async fn buckets(&self) -> Vec<String> {
        buckets_of(&self.s3).await
    }

    pub async fn user_exists(&self, user: &str) -> bool {
        self.iam.get_user().user_name(user).send().await.is_ok()
    }
}

/// A session of the member account's admin (key, secret, token), through the role
/// Organizations makes there.
pub async fn member_credentials() -> (String, String, String) {
    let role = format!("arn:aws:iam::{MEMBER}:role/OrganizationAccountAccessRole");
    let out = admin_sts()
        .assume_role()
        .role_arn(role)
        .role_session_name("e2e-admin")
        .send()
        .await
        .expect("the member account's OrganizationAccountAccessRole (S3OP_EMULATOR_ACCOUNTS)");
    let c = out.credentials.expect("credentials");
    (c.access_key_id, c.secret_access_key, c.session_token)
}

/// STS as the operator's account's admin.
pub fn admin_sts() -> aws_sdk_sts::Client {
    let (k, s) = env().admin_key.clone();
    let creds = aws_sdk_sts::config::Credentials::new(k, s, None, None, "e2e");
    let conf = aws_sdk_sts::config::Builder::new()
        .behavior_version(aws_sdk_sts::config::BehaviorVersion::latest())
        .region(aws_sdk_sts::config::Region::new(env().region.clone()))
        .endpoint_url(&env().aws_endpoint)
        .credentials_provider(creds)
        .build();
    aws_sdk_sts::Client::from_conf(conf)
}

/// AssumeRole on `role` as the home account's admin (every permission in its own account),
/// with the right ExternalId and the installation's tag: the error code STS answered, if any.
pub async fn assume_as_admin(role: &str, cluster: &str) -> Result<(), String> {
    let tag = aws_sdk_sts::types::Tag::builder()
        .key(s3_operator::aws::SESSION_TAG)
        .value(cluster)
        .build()
        .expect("a tag");
    admin_sts()
        .assume_role()
        .role_arn(role)
        .role_session_name("e2e-admin")
        .external_id(EXTERNAL_ID)
        .tags(tag)
        .send()
        .await
        .map(|_| ())
        .map_err(|e| {
            e.into_service_error()
                .meta()
                .code()
                .unwrap_or("?")
                .to_string()
        })
}

pub async fn external_id_secret(client: &kube::Client, ns: &str, name: &str, value: &str) {
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some([("externalId".to_string(), ByteString(value.into()))].into()),
        ..Default::default()
    };
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await
        .expect("ExternalId Secret");
}

pub async fn aws_account(client: &kube::Client, name: &str, role: &str, secret: &str) {
    let obj = json!({"apiVersion": "s3.operator.dev/v1alpha1", "kind": "AWSAccount",
        "metadata": {"name": name},
        "spec": {"roleArn": role, "externalIdSecretRef": {"name": secret, "key": "externalId"}}});
    let obj: AWSAccount = serde_json::from_value(obj).expect("an AWSAccount");
    Api::<AWSAccount>::all(client.clone())
        .create(&PostParams::default(), &obj)
        .await
        .expect("create AWSAccount");
}

/// A BucketClass for namespace `ns` only, in `account`.
pub async fn class_in(client: &kube::Client, name: &str, ns: &str, account: &str) {
    account_class(client, name, ns, account, false).await
}

/// A BucketClass for namespace `ns` only, in `account`; with `default`, its namespace's default
/// class (its Buckets need no className).
pub async fn account_class(
    client: &kube::Client,
    name: &str,
    ns: &str,
    account: &str,
    default: bool,
) {
    let mut obj = json!({"apiVersion": "s3.operator.dev/v1alpha1", "kind": "BucketClass",
        "metadata": {"name": name},
        "spec": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
                 "account": account}});
    if default {
        obj["metadata"]["annotations"] =
            json!({s3_operator::api::DEFAULT_CLASS_ANNOTATION: "true"});
    }
    let obj: BucketClass = serde_json::from_value(obj).expect("a BucketClass");
    Api::<BucketClass>::all(client.clone())
        .create(&PostParams::default(), &obj)
        .await
        .expect("create BucketClass");
}

pub async fn buckets_of(s3: &aws_sdk_s3::Client) -> Vec<String> {
    let out = s3.list_buckets().send().await.expect("ListBuckets");
    out.buckets()
        .iter()
        .filter_map(|b| b.name.clone())
        .collect()
}
