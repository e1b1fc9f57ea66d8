//! AWS reads are budgeted per namespace, and event floods degrade gracefully: a namespace that
//! annotates its objects in a tight loop (new `reconcile-requested-at` values included) makes
//! no more AWS reads than its budget allows, waits its turn with an event that says so, and
//! never delays another namespace; annotations alone cost at most one pass per object per
//! spacing, and a Bucket's annotations wake none of its accesses.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use kube::api::{Api, Patch, PatchParams, PostParams};
use s3_operator::api::{Bucket, BucketAccess, RECONCILE_REQUESTED_AT};
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::access::access;
use crate::support::*;

const T: Duration = Duration::from_secs(60);

/// Reads (Get, List, Head, Describe) the operator has made, every service and outcome.
fn aws_reads(metrics: &str) -> f64 {
    const NAME: &str = "s3_operator_aws_requests_total{";
    metrics
        .lines()
        .filter(|l| l.starts_with(NAME))
        .filter(|l| {
            ["Get", "List", "Head", "Describe"]
                .iter()
                .any(|r| l.contains(&format!("operation=\"{r}")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Time from create to Ready of a new default Bucket `name` in `api`.
async fn time_to_ready(api: &Api<Bucket>, name: &str) -> Duration {
    let start = Instant::now();
    api.create(&PostParams::default(), &bucket(name, json!({})))
        .await
        .unwrap();
    wait_ready(api, name).await;
    start.elapsed()
}

async fn annotate<K>(api: &Api<K>, name: &str, annotations: serde_json::Value)
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let patch = json!({"metadata": {"annotations": annotations}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// `n` Buckets `b<i>`, each with a BucketAccess `a<i>`, all Ready.
async fn pairs(buckets: &Api<Bucket>, accesses: &Api<BucketAccess>, n: usize) {
    for i in 0..n {
        let pp = PostParams::default();
        buckets
            .create(&pp, &bucket(&format!("b{i}"), json!({})))
            .await
            .unwrap();
        let spec = json!({"bucketRef": {"name": format!("b{i}")}, "permission": "ReadOnly"});
        accesses
            .create(&pp, &access(&format!("a{i}"), spec))
            .await
            .unwrap();
    }
    for i in 0..n {
        wait_ready(buckets, &format!("b{i}")).await;
        wait_reason(accesses, &format!("a{i}"), "Available", T).await;
    }
}

/// Annotates the `n` pairs round robin, four patches at a time, until `stop`: a new
/// `reconcile-requested-at` value every other patch (a pass each, never coalesced), a plain
/// annotation otherwise. Returns the patches made.
async fn annotation_loop(
    buckets: Api<Bucket>,
    accesses: Api<BucketAccess>,
    n: usize,
    stop: Arc<AtomicBool>,
) -> u64 {
    let made = Arc::new(AtomicU64::new(0));
    let workers = (0..4).map(|w| {
        let (buckets, accesses, stop, made) = (
            buckets.clone(),
            accesses.clone(),
            stop.clone(),
            made.clone(),
        );
        tokio::spawn(async move {
            let mut i = w;
            while !stop.load(Ordering::SeqCst) {
                let value = format!("loop-{w}-{i}-end");
                let annotations = if i % 2 == 0 {
                    json!({"loop": value, RECONCILE_REQUESTED_AT: value})
                } else {
                    json!({"loop": value})
                };
                let k = (i / 2) % n;
                if i % 4 < 2 {
                    annotate(&buckets, &format!("b{k}"), annotations).await;
                } else {
                    annotate(&accesses, &format!("a{k}"), annotations).await;
                }
                made.fetch_add(1, Ordering::SeqCst);
                i += 4;
            }
        })
    });
    for w in futures::future::join_all(workers).await {
        w.unwrap();
    }
    made.load(Ordering::SeqCst)
}

/// One namespace annotates its 4 Buckets and 4 BucketAccesses in a tight loop for 20 s (with
/// `S3OP_ANNOTATION_LOOP_S=60`, for 60 s under the operator's default budgets: the benchmark
/// figure). The AWS reads the operator makes in that time stay within the namespace's read
/// budget (its burst, its rate, and the reads of the passes already running when it ran out);
/// the namespace is told with a `ReadBudgetExhausted` event and the deferred passes are
/// counted; another namespace's new Bucket is Ready about as fast as on the idle operator.
/// Before the budget, every patch ran a full pass with AWS reads (and a Bucket's patch one of
/// its access as well): thousands of reads in 20 s.
#[tokio::test]
async fn an_annotation_loop_spends_only_its_namespaces_read_budget() {
    let client = admin().await;
    let (busy, quiet) = (
        namespace(&client, "readloop").await,
        namespace(&client, "readquiet").await,
    );
    let figure = std::env::var("S3OP_ANNOTATION_LOOP_S").ok();
    let (secs, rate, burst) = match &figure {
        Some(s) => (
            s.parse::<u64>().expect("S3OP_ANNOTATION_LOOP_S: seconds"),
            s3_operator::aws::budget::DEFAULT_READ_RATE,
            s3_operator::aws::budget::DEFAULT_READ_BURST,
        ),
        None => (20, 2.0, 20),
    };
    let budget_args = [
        "--namespace-aws-read-rate".to_string(),
        rate.to_string(),
        "--namespace-aws-read-burst".to_string(),
        burst.to_string(),
    ];
    let op = Operator::start(OperatorOpts {
        namespaces: vec![busy.clone(), quiet.clone()],
        resync: "1h",
        extra_args: budget_args.into(),
        ..Default::default()
    })
    .await;
    let (buckets, accesses) = (
        Api::<Bucket>::namespaced(client.clone(), &busy),
        Api::<BucketAccess>::namespaced(client.clone(), &busy),
    );
    const N: usize = 4;
    pairs(&buckets, &accesses, N).await;
    let alone = Api::<Bucket>::namespaced(client.clone(), &quiet);
    let idle = time_to_ready(&alone, "idle").await;
    op.wait_settled(Duration::from_millis(500)).await;
    // The budget refills whole before the loop starts.
    tokio::time::sleep(Duration::from_secs_f64(f64::from(burst) / rate)).await;

    let before = aws_reads(&op.metrics().await);
    let start = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let looping = tokio::spawn(annotation_loop(
        buckets.clone(),
        accesses.clone(),
        N,
        stop.clone(),
    ));
    // Another namespace's Bucket, applied midway through the loop.
    tokio::time::sleep(Duration::from_secs(secs / 2)).await;
    let during = time_to_ready(&alone, "during").await;
    tokio::time::sleep(Duration::from_secs(secs).saturating_sub(start.elapsed())).await;
    stop.store(true, Ordering::SeqCst);
    let patches = looping.await.unwrap();
    let took = start.elapsed().as_secs_f64();
    let reads = aws_reads(&op.metrics().await) - before;
    eprintln!(
        "[read budget] {patches} patches in {took:.1}s: {reads} AWS reads ({:.1}/s) at a read budget of {rate}/s (burst {burst}); the other namespace's Bucket Ready in {during:?} (idle: {idle:?})",
        reads / took
    );

    // The burst, the rate over the loop, and the reads of passes that started with a token
    // left (up to ten at once, a handful of reads each), plus the other namespace's Bucket.
    let allowed = f64::from(burst) + rate * took + 10.0 * 5.0 + 10.0;
    assert!(
        reads <= allowed,
        "{reads} AWS reads in {took:.1}s, over the budget ({allowed})"
    );
    wait_event(&busy, "ReadBudgetExhausted", &["AWS reads"]).await;
    let deferred = op
        .metric("s3_operator_aws_read_budget_exhausted_total", &[])
        .await;
    assert!(deferred > 0.0, "deferred passes are counted");
    assert!(
        during < idle + Duration::from_secs(5),
        "the other namespace's Bucket took {during:?} (idle: {idle:?})"
    );
    assert!(
        events_with(&quiet, "ReadBudgetExhausted").await.is_empty(),
        "the other namespace never ran out"
    );
    // The loop's last requests are served once the budget refills.
    let last = accesses.get("a0").await.unwrap();
    let asked = last.metadata.annotations.unwrap_or_default();
    if let Some(value) = asked.get(RECONCILE_REQUESTED_AT) {
        wait_event(&busy, "ReconcileRequested", &[value.as_str()]).await;
    }
}

/// With no read budget at all, a loop of plain annotations on a Bucket costs at most one full
/// pass of it per spacing (5 s), and none of its BucketAccess: before, each annotation ran a
/// full pass of both (four S3 reads for the Bucket, IAM reads for the access).
#[tokio::test]
async fn annotations_are_coalesced_and_do_not_fan_out_to_accesses() {
    let client = admin().await;
    let ns = namespace(&client, "coalesce").await;
    let op = Operator::start(OperatorOpts {
        namespaces: vec![ns.clone()],
        resync: "1h",
        extra_args: ["--namespace-aws-read-rate", "0"].map(String::from).into(),
        ..Default::default()
    })
    .await;
    let (buckets, accesses) = (
        Api::<Bucket>::namespaced(client.clone(), &ns),
        Api::<BucketAccess>::namespaced(client.clone(), &ns),
    );
    pairs(&buckets, &accesses, 1).await;
    op.wait_settled(Duration::from_millis(500)).await;
    let (policy_reads, user_reads) = ("GetBucketPolicy", "GetUserPolicy");
    let (bucket_before, access_before) = (
        op.aws_calls(policy_reads).await,
        op.aws_calls(user_reads).await,
    );
    let start = Instant::now();
    let mut patches = 0;
    while start.elapsed() < Duration::from_secs(10) {
        annotate(&buckets, "b0", json!({"loop": patches.to_string()})).await;
        patches += 1;
    }
    // The last coalesced pass runs within a spacing of the loop's end.
    tokio::time::sleep(Duration::from_secs(6)).await;
    op.wait_settled(Duration::from_millis(500)).await;
    let took = start.elapsed().as_secs_f64();
    let bucket_passes = op.aws_calls(policy_reads).await - bucket_before;
    let access_passes = op.aws_calls(user_reads).await - access_before;
    eprintln!(
        "[coalesce] {patches} annotations in 10s: {bucket_passes} full Bucket passes, {access_passes} access passes in {took:.1}s"
    );
    assert!(patches > 20, "a tight loop: {patches} patches");
    // One pass per 5 s over 16 s, and one more for where the spacing started.
    assert!(
        bucket_passes <= (took / 5.0).ceil() + 1.0,
        "{bucket_passes} full passes of the Bucket for {patches} annotations in {took:.1}s"
    );
    assert!(bucket_passes >= 1.0, "annotations still run a pass");
    assert_eq!(access_passes, 0.0, "a Bucket's annotations wake no access");
}
