//! Many AWS accounts: a class names an AWSAccount, and the Buckets and BucketAccesses of its
//! namespaces live in that account, reached through a role the operator assumes there with an
//! ExternalId. The emulator's second account (moto keys resources by the caller's account)
//! stands for the target; it checks the role's trust and its ExternalId as STS does.

use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use s3_operator::api::{AWSAccount, BucketClass};
use s3_operator::aws::policy;
use serde_json::json;

use crate::access::access;
use crate::support::*;

const T: Duration = Duration::from_secs(60);
const EXTERNAL_ID: &str = "e2e-external-id-7f3a";

fn other_account() -> String {
    std::env::var("S3OP_AWS_OTHER_ACCOUNT").unwrap_or_else(|_| "210987654321".into())
}

fn other_iam() -> aws_sdk_iam::Client {
    let (k, s) = env()
        .other_admin_key
        .as_ref()
        .expect("S3OP_AWS_OTHER_ADMIN_*: restart the environment (hack/env.sh down, then up)");
    iam_with(k, s)
}

/// The role the target account's admin makes for the installation `cluster` (made by
/// [`target_role`]; its ARN is known before, so the operator's own policy can name it).
fn target_role_arn(cluster: &str) -> String {
    format!(
        "arn:aws:iam::{}:role/s3op-target-{cluster}",
        other_account()
    )
}

/// What the target account's admin sets up for the installation `cluster`, as the README says
/// and `s3-operator iam-policy --target-account` renders it: the permissions boundary, and a
/// role trusting only the operator's principal (its IAM user, which must exist first, as IAM
/// refuses a trust naming a principal that does not), with the ExternalId and the session tag,
/// allowed the operator policy rendered for that account. Returns the role's ARN.
async fn target_role(cluster: &str) -> String {
    let scope = policy::Scope {
        account: other_account(),
        ..scope(cluster)
    };
    let iam = other_iam();
    iam.create_policy()
        .policy_name(policy::BOUNDARY_NAME)
        .path(&scope.iam_path)
        .policy_document(policy::boundary_policy(&scope).to_string())
        .send()
        .await
        .expect("the boundary in the target account");
    let trust = policy::trust_policy(&operator_user_arn(cluster), EXTERNAL_ID, cluster);
    let name = format!("s3op-target-{cluster}");
    let role = iam
        .create_role()
        .role_name(&name)
        .assume_role_policy_document(trust.to_string())
        .send()
        .await
        .expect("the target role");
    iam.put_role_policy()
        .role_name(&name)
        .policy_name("s3-operator")
        .policy_document(policy::operator_policy(&scope).to_string())
        .send()
        .await
        .expect("the target role's policy");
    let arn = role.role.expect("a role").arn;
    assert_eq!(arn, target_role_arn(cluster));
    arn
}

/// The shipped operator policy, plus assuming the target role (what the operator's own account
/// grants it for each AWSAccount: `iam-policy --assume-role-arn`).
fn operator_policy_assuming(cluster: &str, role: &str) -> serde_json::Value {
    policy::with_assume_roles(operator_policy(cluster), &[role.to_string()])
}

/// AssumeRole on `role` as the home account's admin (every permission in its own account),
/// with the right ExternalId and the installation's tag: the error code STS answered, if any.
async fn assume_as_admin(role: &str, cluster: &str) -> Result<(), String> {
    let (k, s) = env().admin_key.clone();
    let creds = aws_sdk_sts::config::Credentials::new(k, s, None, None, "e2e");
    let conf = aws_sdk_sts::config::Builder::new()
        .behavior_version(aws_sdk_sts::config::BehaviorVersion::latest())
        .region(aws_sdk_sts::config::Region::new(env().region.clone()))
        .endpoint_url(&env().aws_endpoint)
        .credentials_provider(creds)
        .build();
    let tag = aws_sdk_sts::types::Tag::builder()
        .key(s3_operator::aws::SESSION_TAG)
        .value(cluster)
        .build()
        .expect("a tag");
    aws_sdk_sts::Client::from_conf(conf)
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

async fn external_id_secret(client: &kube::Client, ns: &str, name: &str, value: &str) {
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

async fn account(client: &kube::Client, name: &str, role: &str, secret: &str) {
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
async fn class_in(client: &kube::Client, name: &str, ns: &str, account: &str) {
    let obj = json!({"apiVersion": "s3.operator.dev/v1alpha1", "kind": "BucketClass",
        "metadata": {"name": name},
        "spec": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
                 "account": account}});
    let obj: BucketClass = serde_json::from_value(obj).expect("a BucketClass");
    Api::<BucketClass>::all(client.clone())
        .create(&PostParams::default(), &obj)
        .await
        .expect("create BucketClass");
}

async fn wait_gone<K>(api: &Api<K>, name: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    wait_for(&format!("{name} gone"), T, || async {
        api.get_opt(name).await.unwrap().is_none().then_some(())
    })
    .await;
}

async fn buckets_of(s3: &aws_sdk_s3::Client) -> Vec<String> {
    let out = s3.list_buckets().send().await.expect("ListBuckets");
    out.buckets()
        .iter()
        .filter_map(|b| b.name.clone())
        .collect()
}

/// A class in another account puts a tenant's Bucket and BucketAccess there and nowhere else,
/// with credentials that work there; a wrong ExternalId is AccountUnavailable with nothing
/// written; a class edited to another account moves nothing; deleting cleans the right account.
#[tokio::test]
async fn a_class_puts_buckets_and_identities_in_its_account_and_nowhere_else() {
    let client = admin().await;
    install_crds().await;
    let ns = namespace(&client, "acct").await;
    let cluster = format!("acct{}", random(5));
    let op = Operator::start(OperatorOpts {
        namespaces: vec![ns.clone()],
        cluster: Some(cluster.clone()),
        policy: Some(operator_policy_assuming(
            &cluster,
            &target_role_arn(&cluster),
        )),
        ..Default::default()
    })
    .await;
    let role = target_role(&cluster).await;
    // The trust names the operator's principal, not its account: another identity there,
    // allowed everything in its own account and holding the ExternalId, is refused.
    assert_eq!(
        assume_as_admin(&role, &cluster).await,
        Err("AccessDenied".to_string())
    );
    let (good, bad) = (format!("{cluster}-a"), format!("{cluster}-bad"));
    external_id_secret(&client, &op.operator_ns, "ext", EXTERNAL_ID).await;
    external_id_secret(&client, &op.operator_ns, "wrong", "not-the-external-id").await;
    account(&client, &good, &role, "ext").await;
    account(&client, &bad, &role, "wrong").await;
    class_in(&client, &good, &ns, &good).await;

    // Served in the target account.
    let b = bucket(
        "b1",
        json!({"className": good, "deletionPolicy": "Delete", "forceDelete": true}),
    );
    let a = access(
        "a1",
        json!({"bucketRef": {"name": "b1"}, "permission": "ReadWrite"}),
    );
    let pair = AccessPair::create(&client, &ns, b, a).await;
    let target = other_account();
    let status = pair.buckets.get("b1").await.unwrap().status.unwrap();
    let recorded = status.account.expect("status.account");
    assert_eq!(
        (recorded.name.as_str(), recorded.id.as_str()),
        (good.as_str(), target.as_str())
    );
    let access_status = pair.access.status.clone().unwrap();
    assert_eq!(access_status.account, Some(recorded.clone()));
    assert!(
        pair.user_arn()
            .starts_with(&format!("arn:aws:iam::{target}:user/"))
    );
    let (k, s) = env().other_admin_key.clone().unwrap();
    let theirs = s3_with(&k, &s);
    assert!(buckets_of(&theirs).await.contains(&pair.s3_name));
    assert!(!buckets_of(&admin_s3()).await.contains(&pair.s3_name));
    let data = pair.secret_data().await;
    let app = s3_with(&data["AWS_ACCESS_KEY_ID"], &data["AWS_SECRET_ACCESS_KEY"]);
    app.put_object()
        .bucket(&pair.s3_name)
        .key("k")
        .body(b"v".to_vec().into())
        .send()
        .await
        .expect("the access's keys write into the bucket in the target account");

    // A wrong ExternalId: AccountUnavailable, nothing made in either account.
    class_in(&client, &bad, &ns, &bad).await;
    let before = (buckets_of(&theirs).await, buckets_of(&admin_s3()).await);
    let b2 = bucket("b2", json!({"className": bad}));
    pair.buckets
        .create(&PostParams::default(), &b2)
        .await
        .unwrap();
    let msg = wait_reason(&pair.buckets, "b2", "AccountUnavailable", T).await;
    assert!(msg.contains(&bad), "names the AWSAccount: {msg}");
    // STS's own refusal, not a Secret the operator could not read.
    assert!(
        msg.contains("not authorized to perform: sts:AssumeRole"),
        "{msg}"
    );
    let b2 = pair.buckets.get("b2").await.unwrap();
    assert!(
        b2.status.as_ref().unwrap().account.is_none(),
        "not recorded"
    );
    assert!(b2.metadata.finalizers.is_none_or(|f| f.is_empty()));
    assert_eq!(
        before,
        (buckets_of(&theirs).await, buckets_of(&admin_s3()).await)
    );

    // The class edited to the other account: a violation, the bucket stays where it is.
    let classes = Api::<BucketClass>::all(client.clone());
    let to = |a: &str| Patch::Merge(json!({"spec": {"account": a}}));
    classes
        .patch(&good, &PatchParams::default(), &to(&bad))
        .await
        .unwrap();
    let msg = wait_reason(&pair.buckets, "b1", "ClassViolation", T).await;
    assert!(msg.contains("never moved"), "{msg}");
    assert!(buckets_of(&theirs).await.contains(&pair.s3_name));
    classes
        .patch(&good, &PatchParams::default(), &to(&good))
        .await
        .unwrap();
    wait_reason(&pair.buckets, "b1", "Available", T).await;

    // Deleting cleans the target account.
    let user = pair.user();
    let dp = DeleteParams::default();
    pair.accesses.delete("a1", &dp).await.unwrap();
    wait_gone(&pair.accesses, "a1").await;
    let gone = other_iam().get_user().user_name(&user).send().await;
    assert!(
        gone.is_err(),
        "the access's user is deleted in the target account"
    );
    for name in ["b1", "b2"] {
        pair.buckets.delete(name, &dp).await.unwrap();
    }
    wait_gone(&pair.buckets, "b1").await;
    assert!(!buckets_of(&theirs).await.contains(&pair.s3_name));
    // b2 never began: its deletion needs no account.
    wait_gone(&pair.buckets, "b2").await;
    for name in [&good, &bad] {
        let _ = classes.delete(name, &dp).await;
        let _ = Api::<AWSAccount>::all(client.clone())
            .delete(name, &dp)
            .await;
    }
    drop(op);
}
