//! Clients for moto: the admin's and any key pair's, and IAM users made for a test.

use super::*;

pub fn s3_with(key: &str, secret: &str) -> aws_sdk_s3::Client {
    let creds = aws_sdk_s3::config::Credentials::new(key, secret, None, None, "e2e");
    let conf = aws_sdk_s3::config::Builder::new()
        .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
        .region(aws_sdk_s3::config::Region::new(env().region.clone()))
        .endpoint_url(&env().aws_endpoint)
        .credentials_provider(creds)
        .force_path_style(true)
        .build();
    aws_sdk_s3::Client::from_conf(conf)
}

pub fn iam_with(key: &str, secret: &str) -> aws_sdk_iam::Client {
    let creds = aws_sdk_iam::config::Credentials::new(key, secret, None, None, "e2e");
    let conf = aws_sdk_iam::config::Builder::new()
        .behavior_version(aws_sdk_iam::config::BehaviorVersion::latest())
        .region(aws_sdk_iam::config::Region::new(env().region.clone()))
        .endpoint_url(&env().aws_endpoint)
        .credentials_provider(creds)
        .build();
    aws_sdk_iam::Client::from_conf(conf)
}

/// The test's own admin identity (full access), for setting up and auditing.
pub fn admin_s3() -> aws_sdk_s3::Client {
    let (k, s) = &env().admin_key;
    s3_with(k, s)
}

pub fn admin_iam() -> aws_sdk_iam::Client {
    let (k, s) = &env().admin_key;
    iam_with(k, s)
}

pub async fn bucket_tags(bucket: &str) -> BTreeMap<String, String> {
    admin_s3()
        .get_bucket_tagging()
        .bucket(bucket)
        .send()
        .await
        .map(|o| o.tag_set.into_iter().map(|t| (t.key, t.value)).collect())
        .unwrap_or_default()
}

/// The bucket's policy as S3 holds it (`None`: no policy).
pub async fn bucket_policy(bucket: &str) -> Option<serde_json::Value> {
    let out = admin_s3()
        .get_bucket_policy()
        .bucket(bucket)
        .send()
        .await
        .ok()?;
    serde_json::from_str(&out.policy?).ok()
}

pub async fn bucket_exists(bucket: &str) -> bool {
    admin_s3().head_bucket().bucket(bucket).send().await.is_ok()
}

/// A client as a new IAM user `{pfx}-{user}` allowed only `actions`, on buckets named `{pfx}*` and
/// their objects.
pub async fn s3_user(pfx: &str, user: &str, actions: &[&str]) -> aws_sdk_s3::Client {
    let policy = serde_json::json!({"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Action": actions, "Resource": [format!("arn:aws:s3:::{pfx}*")],
    }]});
    let (key, secret) = iam_user_with_policy(&format!("{pfx}-{user}"), "/", Some(&policy)).await;
    s3_with(&key, &secret)
}

/// An IAM user with `policy` and one access key, for tests that need a specific identity.
pub async fn iam_user_with_policy(
    name: &str,
    path: &str,
    policy: Option<&serde_json::Value>,
) -> (String, String) {
    let iam = admin_iam();
    iam.create_user()
        .user_name(name)
        .path(path)
        .send()
        .await
        .expect("create user");
    if let Some(p) = policy {
        iam.put_user_policy()
            .user_name(name)
            .policy_name("p")
            .policy_document(p.to_string())
            .send()
            .await
            .expect("put policy");
    }
    let k = iam
        .create_access_key()
        .user_name(name)
        .send()
        .await
        .expect("key")
        .access_key
        .expect("key");
    (k.access_key_id, k.secret_access_key)
}
