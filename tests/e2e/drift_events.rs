//! Drift found by events (`--drift-events-queue-url`): the emulator puts a CloudTrail event on
//! EventBridge for every S3 and IAM write, the rule `s3-operator iam-policy --drift-events-rule`
//! renders sends this installation's to an SQS queue, and the operator corrects what someone
//! else changed within seconds. Its resync is an hour, so nothing else can explain a correction.

use std::time::{Duration, Instant};

use s3_operator::aws::{naming, policy};
use serde_json::json;

use crate::access::access;
use crate::node::strings;
use crate::support::*;

const T: Duration = Duration::from_secs(60);
/// What the issue promises on this machine, from the change to the correction.
pub(crate) const WITHIN: Duration = Duration::from_secs(5);

/// How long `fixed` took to hold, checked every 50 ms (up to T, so a slow correction is
/// reported with its time rather than as a timeout).
pub(crate) async fn corrected<F, Fut>(what: &str, mut fixed: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    while !fixed().await {
        assert!(started.elapsed() < T, "{what}: not corrected within {T:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let took = started.elapsed();
    eprintln!("{what}: corrected in {took:.2?}");
    took
}

/// With events on, a public access block removed, a bucket policy replaced and a user policy
/// edited out of band are each corrected within 5 s; an event for a bucket under the prefix
/// that no Bucket owns costs the operator no S3 or IAM call; its own writes are recognised.
#[tokio::test]
async fn out_of_band_changes_are_corrected_within_seconds_by_their_events() {
    let client = admin().await;
    let ns = namespace(&client, "driftev").await;
    let cluster = format!("d{}", random(6));
    let (url, arn) = drift_queue_for(&cluster).await;
    let op = Operator::start(OperatorOpts {
        namespaces: vec![ns.clone()],
        cluster: Some(cluster.clone()),
        resync: "1h",
        extra_args: strings(&["--drift-events-queue-url", &url]),
        policy: Some(policy::with_drift_queue(
            operator_policy(&cluster),
            Some(&arn),
        )),
        ..Default::default()
    })
    .await;
    let b = bucket("b", json!({"deletionPolicy": "Delete"}));
    let spec = json!({"bucketRef": {"name": "b"}, "permission": "ReadOnly"});
    let pair = AccessPair::create(&client, &ns, b, access("a", spec)).await;
    let name = pair.s3_name.clone();
    let user = naming::iam_name(&ns, "a", &pair.uid());
    op.wait_settled(Duration::from_secs(2)).await;
    assert!(
        op.metric("s3_operator_drift_events_total", &[("outcome", "own")])
            .await
            >= 1.0,
        "the operator's own writes come back as events it recognises"
    );

    let s3 = admin_s3();
    s3.delete_public_access_block()
        .bucket(&name)
        .send()
        .await
        .unwrap();
    let took_pab = corrected("public access block removed", || async {
        s3.get_public_access_block()
            .bucket(&name)
            .send()
            .await
            .is_ok()
    })
    .await;

    let ours = bucket_policy(&name)
        .await
        .expect("the operator's bucket policy");
    let theirs = json!({"Version": "2012-10-17", "Statement": [{"Effect": "Allow",
        "Principal": {"AWS": format!("arn:aws:iam::{ACCOUNT}:root")}, "Action": "s3:GetObject",
        "Resource": format!("arn:aws:s3:::{name}/*")}]});
    s3.put_bucket_policy()
        .bucket(&name)
        .policy(theirs.to_string())
        .send()
        .await
        .unwrap();
    let took_policy = corrected("bucket policy replaced", || async {
        bucket_policy(&name).await.as_ref() == Some(&ours)
    })
    .await;

    let iam = admin_iam();
    let user_policy = || async {
        let got = iam
            .get_user_policy()
            .user_name(&user)
            .policy_name("s3-operator-access")
            .send()
            .await
            .ok()?;
        policy::decode_document(&got.policy_document)
    };
    let granted = user_policy().await.expect("the access's user policy");
    let wide = json!({"Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]});
    iam.put_user_policy()
        .user_name(&user)
        .policy_name("s3-operator-access")
        .policy_document(wide.to_string())
        .send()
        .await
        .unwrap();
    let took_user = corrected("user policy widened", || async {
        user_policy().await.as_ref() == Some(&granted)
    })
    .await;
    for took in [took_pab, took_policy, took_user] {
        assert!(took < WITHIN, "corrected in {took:?}, more than {WITHIN:?}");
    }
    // Each was put back by the operator, which counted it as drift.
    let drift = op.metric("s3_operator_drift_corrections_total", &[]).await;
    assert!(drift >= 3.0, "{drift} drift corrections counted");

    // A bucket under this installation's prefix that no Bucket owns: its event arrives (the
    // rule matches the prefix) and wakes nothing, so no S3 or IAM call follows.
    op.wait_settled(Duration::from_secs(2)).await;
    let calls = || op.s3_and_iam_calls();
    let (before, touched) = (
        calls().await,
        op.metric("s3_operator_drift_events_total", &[("outcome", "touched")])
            .await,
    );
    let stray = format!("{}stray-{}", prefix(&cluster), random(6));
    s3.create_bucket().bucket(&stray).send().await.unwrap();
    wait_for("the stray bucket's event read", T, || async {
        let now = op
            .metric("s3_operator_drift_events_total", &[("outcome", "touched")])
            .await;
        (now > touched).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        calls().await,
        before,
        "an event nobody owns costs no AWS call"
    );
    s3.delete_bucket().bucket(&stray).send().await.unwrap();
}
