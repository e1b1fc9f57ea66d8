//! The benchmark's drift figures (`cargo bench --bench scale -- --drift`): how long an
//! out-of-band change waits for its correction with drift events on and off, and what reading
//! the drift-event queue costs an idle operator. The resync's reads per object come from the
//! pair rows, measured at each N; the report combines the two. The e2e suite runs it small.

use std::time::{Duration, Instant};

use kube::api::{Api, PostParams};
use s3_operator::api::{Bucket, BucketAccess};
use s3_operator::aws::{naming, policy};
use serde::Serialize;
use serde_json::json;

use crate::support::*;

const T: Duration = Duration::from_secs(120);

#[derive(Debug, Serialize)]
pub struct Drift {
    pub samples: usize,
    /// Seconds from each change to its correction with events on (resync 1h): per change,
    /// median and worst over the samples.
    pub events_on_s: Vec<(f64, f64)>,
    /// The same with events off, at `events_off_resync`.
    pub events_off_s: Vec<(f64, f64)>,
    pub events_off_resync: String,
    /// ReceiveMessage calls an idle operator with events on makes per hour (measured over
    /// `idle_window_s`), the messages it read then (every IAM write in the account arrives: none
    /// in the benchmark's private account), and every other AWS call it made in that window.
    pub queue_polls_per_hour: f64,
    pub idle_messages: f64,
    pub idle_other_calls: f64,
    pub idle_window_s: f64,
}

/// One installation with a Bucket and a ReadWrite access, Ready and settled; the bucket name,
/// the IAM user name, and the user policy as granted.
struct Pair {
    op: Operator,
    bucket: String,
    user: String,
    bucket_policy: serde_json::Value,
    user_policy: serde_json::Value,
}

async fn pair(events: bool, resync: &'static str) -> Pair {
    let client = admin().await;
    let ns = namespace(&client, "driftb").await;
    let cluster = format!("b{}", random(6));
    let mut opts = OperatorOpts {
        namespaces: vec![ns.clone()],
        cluster: Some(cluster.clone()),
        resync,
        env: vec![("RUST_LOG".into(), "info".into())],
        ..Default::default()
    };
    if events {
        let (url, arn) = drift_queue_for(&cluster).await;
        opts.extra_args = vec!["--drift-events-queue-url".into(), url];
        opts.policy = Some(policy::with_drift_queue(
            operator_policy(&cluster),
            Some(&arn),
        ));
    }
    let op = Operator::start(opts).await;
    let buckets = Api::<Bucket>::namespaced(client.clone(), &ns);
    let spec = json!({"deletionPolicy": "Delete"});
    buckets
        .create(&PostParams::default(), &bucket("b", spec))
        .await
        .unwrap();
    let name = wait_ready(&buckets, "b").await;
    let accesses = Api::<BucketAccess>::namespaced(client, &ns);
    let obj: BucketAccess = serde_json::from_value(json!({"metadata": {"name": "a"},
        "spec": {"bucketRef": {"name": "b"}, "permission": "ReadWrite"}}))
    .unwrap();
    accesses.create(&PostParams::default(), &obj).await.unwrap();
    wait_reason(&accesses, "a", "Available", T).await;
    let uid = accesses.get("a").await.unwrap().metadata.uid.unwrap();
    let user = naming::iam_name(&ns, "a", &uid);
    op.wait_settled(Duration::from_secs(2)).await;
    Pair {
        bucket_policy: bucket_policy(&name)
            .await
            .expect("the operator's bucket policy"),
        user_policy: user_policy(&user).await.expect("the access's user policy"),
        op,
        bucket: name,
        user,
    }
}

/// Removes the public access block, replaces the bucket policy and widens the user policy, at
/// once; the seconds until each is corrected.
async fn corrections(p: &Pair) -> [f64; 3] {
    let s3 = admin_s3();
    let theirs = json!({"Version": "2012-10-17", "Statement": [{"Effect": "Allow",
        "Principal": {"AWS": format!("arn:aws:iam::{ACCOUNT}:root")}, "Action": "s3:GetObject",
        "Resource": format!("arn:aws:s3:::{}/*", p.bucket)}]});
    let wide = json!({"Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]});
    let start = Instant::now();
    let (a, b, c) = tokio::join!(
        s3.delete_public_access_block().bucket(&p.bucket).send(),
        s3.put_bucket_policy()
            .bucket(&p.bucket)
            .policy(theirs.to_string())
            .send(),
        admin_iam()
            .put_user_policy()
            .user_name(&p.user)
            .policy_name("s3-operator-access")
            .policy_document(wide.to_string())
            .send(),
    );
    a.unwrap();
    b.unwrap();
    c.unwrap();
    let (pab, bucket_policy, user) = tokio::join!(
        until("public access block back", start, || async {
            let got = s3.get_public_access_block().bucket(&p.bucket).send().await;
            got.is_ok().then_some(())
        }),
        until("bucket policy back", start, || async {
            (bucket_policy(&p.bucket).await.as_ref() == Some(&p.bucket_policy)).then_some(())
        }),
        until("user policy back", start, || async {
            (user_policy(&p.user).await.as_ref() == Some(&p.user_policy)).then_some(())
        }),
    );
    [pab, bucket_policy, user]
}

/// Seconds from `start` until `fixed` holds.
async fn until<F, Fut>(what: &str, start: Instant, fixed: F) -> f64
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<()>>,
{
    wait_for(what, T, fixed).await;
    start.elapsed().as_secs_f64()
}

/// Per change, (median, worst) over the samples.
fn summary(samples: &[[f64; 3]]) -> Vec<(f64, f64)> {
    (0..3)
        .map(|i| {
            let mut v: Vec<f64> = samples.iter().map(|s| s[i]).collect();
            v.sort_by(f64::total_cmp);
            (v[v.len() / 2], v[v.len() - 1])
        })
        .collect()
}

async fn measured(p: &Pair, samples: usize) -> Vec<(f64, f64)> {
    let mut all = Vec::new();
    for _ in 0..samples {
        all.push(corrections(p).await);
        p.op.wait_settled(Duration::from_secs(1)).await;
    }
    eprintln!("[drift] {all:?}");
    summary(&all)
}

/// `samples` rounds of the three changes with events on, then off at `off_resync`; and the
/// idle operator's queue reads over `idle`.
pub async fn drift(samples: usize, off_resync: &'static str, idle: Duration) -> Drift {
    let on = pair(true, "1h").await;
    let events_on_s = measured(&on, samples).await;
    on.op.wait_settled(Duration::from_secs(1)).await;
    let calls = |service: &'static str| async {
        on.op
            .metric("s3_operator_aws_requests_total", &[("service", service)])
            .await
    };
    let read = || async { on.op.metric("s3_operator_drift_events_total", &[]).await };
    // Polls only: each answer that brought messages is also followed by a DeleteMessageBatch.
    let receives = || async {
        let labels = [("service", "sqs"), ("operation", "ReceiveMessage")];
        on.op
            .metric("s3_operator_aws_requests_total", &labels)
            .await
    };
    let (polls, s3, iam) = (receives().await, calls("s3").await, calls("iam").await);
    let messages = read().await;
    tokio::time::sleep(idle).await;
    let polled = receives().await - polls;
    let idle_messages = read().await - messages;
    let other = calls("s3").await - s3 + calls("iam").await - iam;
    let off = pair(false, off_resync).await;
    let events_off_s = measured(&off, samples).await;
    Drift {
        samples,
        events_on_s,
        events_off_s,
        events_off_resync: off_resync.into(),
        queue_polls_per_hour: polled * 3600.0 / idle.as_secs_f64(),
        idle_messages,
        idle_other_calls: other,
        idle_window_s: idle.as_secs_f64(),
    }
}

/// The measurement itself, small: events correct within seconds, the resync later, and an
/// idle operator reads its queue about once per long poll and makes no other call.
#[tokio::test]
async fn drift_benchmark_smoke() {
    let d = drift(1, "10s", Duration::from_secs(25)).await;
    eprintln!("{d:?}");
    for ((on, _), (off, _)) in d.events_on_s.iter().zip(&d.events_off_s) {
        assert!(*on < 5.0, "with events: {on:.2}s");
        // Without events only the resync (10 s, jittered by up to 10%) finds it.
        assert!(*off < 11.0 + 5.0, "without events: {off:.2}s");
    }
    // 20 s long polls: 1 or 2 in 25 s (3 at the window's edges), and one more for each answer
    // that brought messages (other tests' IAM writes reach every installation's queue, as an
    // account's would).
    let polls = d.queue_polls_per_hour * d.idle_window_s / 3600.0;
    assert!(polls >= 1.0 && polls <= 3.0 + d.idle_messages, "{d:?}");
    assert_eq!(
        d.idle_other_calls, 0.0,
        "messages nobody owns cost no other call"
    );
}
