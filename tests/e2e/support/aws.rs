//! Clients for moto: the admin's and any key pair's, and IAM users made for a test.

use super::*;

pub fn s3_with(key: &str, secret: &str) -> aws_sdk_s3::Client {
    s3_session(key, secret, None)
}

/// S3 as a role session (temporary credentials with their session token), or as a key pair.
pub fn s3_session(key: &str, secret: &str, token: Option<String>) -> aws_sdk_s3::Client {
    let creds = aws_sdk_s3::config::Credentials::new(key, secret, token, None, "e2e");
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
    iam_session(key, secret, None)
}

/// IAM as a role session (temporary credentials with their session token), or as a key pair.
pub fn iam_session(key: &str, secret: &str, token: Option<String>) -> aws_sdk_iam::Client {
    let creds = aws_sdk_iam::config::Credentials::new(key, secret, token, None, "e2e");
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

/// S3 as an admin of another account than the operator's: a stranger that may hold a bucket
/// name the operator would use.
pub fn other_account_s3() -> aws_sdk_s3::Client {
    let (k, s) = env()
        .other_admin_key
        .as_ref()
        .expect("S3OP_AWS_OTHER_ADMIN_*: restart the environment (hack/env.sh down, then up)");
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

/// The access policy of the IAM user `user` (the operator's inline policy), decoded.
pub async fn user_policy(user: &str) -> Option<serde_json::Value> {
    let got = admin_iam()
        .get_user_policy()
        .user_name(user)
        .policy_name("s3-operator-access")
        .send()
        .await
        .ok()?;
    s3_operator::aws::policy::decode_document(&got.policy_document)
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

/// What the emulator has received from the access key `key` so far, by operation, whatever the
/// answers were: counted by hack/moto_server.py as each request arrives, outside the client.
/// Operations are named as hack/fault_proxy.py names them (the Action for IAM and STS, `METHOD
/// bucket?subresource` and the like for S3).
pub async fn emulator_requests(key: &str) -> BTreeMap<String, u64> {
    let addr = env().aws_endpoint.trim_start_matches("http://").to_string();
    let path = format!("/__s3op/requests?key={key}");
    let (status, body) = http_get(&addr, &path)
        .await
        .expect("the emulator's request log");
    assert_eq!(
        status, 200,
        "no request log at {path} ({body}): restart the environment (hack/env.sh down, then up)"
    );
    serde_json::from_str(&body).expect("request counts")
}

/// An operation (as the emulator's log and the fault proxy name it) that may change something:
/// S3 requests but GET and HEAD, IAM and STS actions but Get* and List*.
pub fn aws_write(op: &str) -> bool {
    match op.split_once(' ') {
        Some((method, _)) => !matches!(method, "GET" | "HEAD"),
        None => !(op.starts_with("Get") || op.starts_with("List")),
    }
}

/// The writes among the requests counted between two snapshots of the emulator's log, with
/// how many of each.
pub fn aws_writes_between(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    after
        .iter()
        .map(|(op, n)| (op.clone(), n - before.get(op).copied().unwrap_or_default()))
        .filter(|(op, n)| *n > 0 && aws_write(op))
        .collect()
}

// ---------------------------------------------------------------- the drift-event queue

pub fn sqs() -> aws_sdk_sqs::Client {
    let (k, s) = &env().admin_key;
    let creds = aws_sdk_sqs::config::Credentials::new(k, s, None, None, "e2e");
    let conf = aws_sdk_sqs::config::Builder::new()
        .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
        .region(aws_sdk_sqs::config::Region::new(env().region.clone()))
        .endpoint_url(&env().aws_endpoint)
        .credentials_provider(creds)
        .build();
    aws_sdk_sqs::Client::from_conf(conf)
}

pub fn eventbridge() -> aws_sdk_eventbridge::Client {
    let (k, s) = &env().admin_key;
    let creds = aws_sdk_eventbridge::config::Credentials::new(k, s, None, None, "e2e");
    let conf = aws_sdk_eventbridge::config::Builder::new()
        .behavior_version(aws_sdk_eventbridge::config::BehaviorVersion::latest())
        .region(aws_sdk_eventbridge::config::Region::new(
            env().region.clone(),
        ))
        .endpoint_url(&env().aws_endpoint)
        .credentials_provider(creds)
        .build();
    aws_sdk_eventbridge::Client::from_conf(conf)
}

/// What an administrator sets up for `cluster`: the queue, the rule as the operator renders
/// it, its target and the queue policy. Returns (queue URL, queue ARN).
pub async fn drift_queue_for(cluster: &str) -> (String, String) {
    let name = format!("s3op-drift-{cluster}");
    let url = sqs().create_queue().queue_name(&name).send().await.unwrap();
    let url = url.queue_url.unwrap();
    let arn = format!("arn:aws:sqs:{}:{ACCOUNT}:{name}", env().region);
    let rule = s3_operator::aws::drift_queue::rule(
        "aws",
        ACCOUNT,
        &env().region,
        cluster,
        &prefix(cluster),
        &arn,
    );
    let rule_name = rule["ruleName"].as_str().unwrap();
    let events = eventbridge();
    events
        .put_rule()
        .name(rule_name)
        .event_pattern(rule["eventPattern"].to_string())
        .send()
        .await
        .unwrap();
    let target = aws_sdk_eventbridge::types::Target::builder()
        .id("drift-queue")
        .arn(&arn)
        .build()
        .unwrap();
    events
        .put_targets()
        .rule(rule_name)
        .targets(target)
        .send()
        .await
        .unwrap();
    sqs()
        .set_queue_attributes()
        .queue_url(&url)
        .attributes(
            aws_sdk_sqs::types::QueueAttributeName::Policy,
            rule["queuePolicy"].to_string(),
        )
        .send()
        .await
        .unwrap();
    (url, arn)
}

#[cfg(test)]
mod request_log {
    use super::*;

    /// The log counts every request of one key by operation as it arrives, refused or not, and
    /// tells writes from reads: a write it missed would let a "writes nothing" check pass.
    #[tokio::test]
    async fn the_emulator_counts_every_request_of_a_key_and_tells_writes_from_reads() {
        let name = format!("{PREFIX}log-{}", random(5));
        let policy = serde_json::json!({"Version": "2012-10-17", "Statement": [{"Effect": "Allow",
            "Action": ["s3:CreateBucket", "s3:PutBucketTagging"],
            "Resource": [format!("arn:aws:s3:::{name}")]}]});
        let (key, secret) = iam_user_with_policy(&name, "/", Some(&policy)).await;
        let before = emulator_requests(&key).await;
        assert!(before.is_empty(), "a new key has sent nothing: {before:?}");
        let (s3, iam) = (s3_with(&key, &secret), iam_with(&key, &secret));
        s3.create_bucket()
            .bucket(&name)
            .send()
            .await
            .expect("create");
        let tag = aws_sdk_s3::types::Tag::builder()
            .key("k")
            .value("v")
            .build();
        let tagging = aws_sdk_s3::types::Tagging::builder()
            .tag_set(tag.unwrap())
            .build()
            .unwrap();
        let put = s3.put_bucket_tagging().bucket(&name).tagging(tagging);
        put.send().await.expect("tag");
        // Refused (not granted): sent all the same, so counted all the same.
        assert!(s3.get_bucket_tagging().bucket(&name).send().await.is_err());
        assert!(s3.delete_bucket().bucket(&name).send().await.is_err());
        assert!(iam.list_users().send().await.is_err());
        assert!(iam.create_user().user_name(&name).send().await.is_err());
        let sent = emulator_requests(&key).await;
        // Another key's requests are not this one's.
        admin_s3()
            .delete_bucket()
            .bucket(&name)
            .send()
            .await
            .unwrap();
        assert_eq!(emulator_requests(&key).await, sent);
        let counts = |ops: &[&str]| -> BTreeMap<String, u64> {
            ops.iter().map(|op| (op.to_string(), 1)).collect()
        };
        let writes = [
            "PUT bucket",
            "PUT bucket?tagging",
            "DELETE bucket",
            "CreateUser",
        ];
        let reads = ["GET bucket?tagging", "ListUsers"];
        assert_eq!(sent, counts(&[&writes[..], &reads[..]].concat()));
        assert_eq!(aws_writes_between(&before, &sent), counts(&writes));
        assert!(aws_writes_between(&sent, &sent).is_empty());
    }
}
