//! The benchmark's workloads besides the pair and Bucket rows (`scale::run`): churn, fairness
//! the orphan sweep and pairs over several accounts. Only the benchmark runs them, so they
//! live with it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::wait::await_condition;
use s3_operator::api::{Bucket, BucketAccess, condition};
use serde::Serialize;
use serde_json::json;

mod accounts;

pub use accounts::*;

use crate::audit::audit;
use crate::scale::{
    CONCURRENCY, Workload, all_ready, bucket, calls, create_objects, delta, footprint, percentile,
};
use crate::support::*;

/// One create/delete cycle of the churn run: when it ended and the operator's RSS then.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct ChurnSample {
    pub cycle: usize,
    pub elapsed_s: f64,
    pub rss_mib: f64,
    /// Of `rss_mib`, the heap and stacks.
    pub anon_mib: f64,
}

/// Creates `batch` pairs, waits for them to be Ready, deletes them and waits until they are
/// gone, over and over for `duration`; samples the operator's RSS after each cycle. Flat RSS
/// shows that per-object bookkeeping goes with its object.
pub async fn churn(duration: Duration, batch: usize) -> Vec<ChurnSample> {
    let client = admin().await;
    let ns = namespace(&client, "churn").await;
    let opts = OperatorOpts {
        namespaces: vec![ns.clone()],
        extra_args: [
            "--namespace-aws-write-rate",
            "0",
            "--namespace-aws-read-rate",
            "0",
        ]
        .map(String::from)
        .into(),
        env: vec![("RUST_LOG".into(), "info".into())],
        ..Default::default()
    };
    let op = Operator::start(opts).await;
    let (buckets, accesses) = (
        Api::<Bucket>::namespaced(client.clone(), &ns),
        Api::<BucketAccess>::namespaced(client.clone(), &ns),
    );
    let (start, mut samples) = (Instant::now(), Vec::new());
    for cycle in 0.. {
        if start.elapsed() >= duration {
            break;
        }
        let names: Vec<String> = (0..batch).map(|i| format!("c{cycle}-{i}")).collect();
        let ready_b = tokio::spawn(all_ready(buckets.clone(), batch));
        let ready_a = tokio::spawn(all_ready(accesses.clone(), batch));
        create_objects(&buckets, &accesses, names.iter().cloned(), Workload::Pairs).await;
        ready_b.await.unwrap();
        ready_a.await.unwrap();
        for name in &names {
            accesses
                .delete(name, &DeleteParams::default())
                .await
                .unwrap();
            buckets
                .delete(name, &DeleteParams::default())
                .await
                .unwrap();
        }
        wait_for(
            "the cycle's objects to go",
            Duration::from_secs(300),
            || async {
                let left = buckets.list(&Default::default()).await.unwrap().items.len()
                    + accesses
                        .list(&Default::default())
                        .await
                        .unwrap()
                        .items
                        .len();
                (left == 0).then_some(())
            },
        )
        .await;
        let now = footprint(op.pid());
        let sample = ChurnSample {
            cycle,
            elapsed_s: start.elapsed().as_secs_f64(),
            rss_mib: now.rss,
            anon_mib: now.anon,
        };
        eprintln!("[churn] {sample:?}");
        samples.push(sample);
    }
    let cluster = op.cluster.clone();
    drop(op);
    let problems = audit(&cluster, &[ns]).await;
    assert!(problems.is_empty(), "audit after churn: {problems:?}");
    samples
}

/// The fairness run: one namespace floods a cluster-wide operator (its defaults: 10 reconciles
/// at once, the default write budget) while another applies single Buckets one after another.
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
pub struct Fairness {
    pub flood: usize,
    /// Time to Ready of a single Bucket on the idle operator, median of the samples.
    pub idle_ready_s: f64,
    /// The same while the flood converges: median and worst.
    pub flooded_ready_p50_s: f64,
    pub flooded_ready_max_s: f64,
    pub samples: usize,
    /// The flood's own time from the first create to all Ready.
    pub flood_converge_s: f64,
    /// Passes of the flood deferred by its write budget.
    pub budget_deferrals: f64,
    pub write_rate: f64,
    pub write_burst: u32,
}

/// Time from create to Ready of Bucket `name` in `api`, watched.
async fn time_to_ready(api: &Api<Bucket>, name: &str) -> f64 {
    let ready = await_condition(api.clone(), name, |b: Option<&Bucket>| {
        b.and_then(|b| b.status.as_ref())
            .is_some_and(|s| condition::is_ready(&s.conditions))
    });
    let start = Instant::now();
    let (pp, object) = (PostParams::default(), bucket(name, json!({})));
    let create = api.create(&pp, &object);
    let (created, ready) = tokio::join!(
        create,
        tokio::time::timeout(Duration::from_secs(120), ready)
    );
    created.unwrap();
    ready.expect("Ready within 120 s").expect("watch");
    start.elapsed().as_secs_f64()
}

/// Runs the fairness measurement with a flood of `flood` Buckets and `samples` single Buckets
/// of the other namespace before and during it. Cluster-wide, as the default install runs: a
/// benchmark child has the control plane to itself.
pub async fn fairness(flood: usize, samples: usize) -> Fairness {
    let client = admin().await;
    let (busy, quiet) = (
        namespace(&client, "flood").await,
        namespace(&client, "quiet").await,
    );
    // The operator's default budgets (the harness turns the read budget off).
    let read_budget = [
        "--namespace-aws-read-rate".to_string(),
        s3_operator::aws::budget::DEFAULT_READ_RATE.to_string(),
    ];
    let opts = OperatorOpts {
        resync: "1h",
        extra_args: read_budget.into(),
        env: vec![("RUST_LOG".into(), "info".into())],
        ..Default::default()
    };
    let op = Operator::start(opts).await;
    let (flooded, alone) = (
        Api::<Bucket>::namespaced(client.clone(), &busy),
        Api::<Bucket>::namespaced(client.clone(), &quiet),
    );
    let mut idle = Vec::new();
    for j in 0..samples {
        idle.push(time_to_ready(&alone, &format!("idle{j}")).await);
        // The echo reconcile of the Ready write ends before the next idle sample starts.
        op.wait_settled(Duration::from_millis(300)).await;
    }
    eprintln!("[fairness] idle time to Ready {idle:?}; flooding {flood}");
    let start = Instant::now();
    let done = tokio::spawn(all_ready(flooded.clone(), flood));
    let names = (0..flood).map(|i| format!("f{i}"));
    let empty = Api::<BucketAccess>::namespaced(client.clone(), &busy);
    let creating = create_objects(&flooded, &empty, names, Workload::Buckets);
    // Samples spread over the flood: the first while it is still being applied.
    let sampling = async {
        let mut during = Vec::new();
        for j in 0..samples {
            during.push(time_to_ready(&alone, &format!("during{j}")).await);
            // Kept: the pause is what spreads the samples over the flood (the thing measured).
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        during
    };
    let ((), mut during) = tokio::join!(creating, sampling);
    let converged = done.await.unwrap();
    let pending = ready_count_of(&flooded).await < flood;
    eprintln!("[fairness] flooded time to Ready {during:?}; flood still converging: {pending}");
    idle.sort_by(f64::total_cmp);
    during.sort_by(f64::total_cmp);
    let metrics = op.metrics().await;
    Fairness {
        flood,
        idle_ready_s: percentile(&idle, 0.5),
        flooded_ready_p50_s: percentile(&during, 0.5),
        flooded_ready_max_s: during.last().copied().unwrap_or_default(),
        samples,
        flood_converge_s: converged.duration_since(start).as_secs_f64(),
        budget_deferrals: metric_sum(
            &metrics,
            "s3_operator_aws_write_budget_exhausted_total",
            &[],
        ),
        // The operator ran with its defaults.
        write_rate: s3_operator::aws::budget::DEFAULT_RATE,
        write_burst: s3_operator::aws::budget::DEFAULT_BURST,
    }
}

/// What one orphan sweep costs at steady state, with `pairs` live pairs and nothing orphaned.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct SweepCost {
    pub pairs: usize,
    pub period_s: u64,
    /// `service:Operation` → calls between the starts of two consecutive sweeps.
    pub calls: BTreeMap<String, f64>,
}

/// `pairs` pairs converged under an operator sweeping every `period_s` (and no resync within
/// the hour), then the AWS calls between the starts of two sweeps (a sweep begins with
/// `ListBuckets`): nothing else runs then, so they are one sweep's.
pub async fn sweep(pairs: usize, period_s: u64) -> SweepCost {
    let client = admin().await;
    let ns = namespace(&client, "sweep").await;
    let op = Operator::start(OperatorOpts {
        namespaces: vec![ns.clone()],
        resync: "1h",
        extra_args: vec![
            "--max-concurrent-reconciles".into(),
            CONCURRENCY.to_string(),
            "--namespace-aws-write-rate".into(),
            "0".into(),
            "--orphan-sweep-period".into(),
            format!("{period_s}s"),
        ],
        ..Default::default()
    })
    .await;
    let (buckets, accesses) = (
        Api::<Bucket>::namespaced(client.clone(), &ns),
        Api::<BucketAccess>::namespaced(client.clone(), &ns),
    );
    let ready_b = tokio::spawn(all_ready(buckets.clone(), pairs));
    let ready_a = tokio::spawn(all_ready(accesses.clone(), pairs));
    let names = (0..pairs).map(|i| format!("p{i}"));
    create_objects(&buckets, &accesses, names, Workload::Pairs).await;
    ready_b.await.unwrap();
    ready_a.await.unwrap();
    eprintln!("[sweep] {pairs} pairs Ready; waiting for two sweep starts");
    op.wait_settled(Duration::from_secs(3)).await;
    let started = |n: f64| {
        let op = &op;
        async move {
            let what = "a sweep to start";
            let wait = Duration::from_secs(3 * period_s + 60);
            wait_for(what, wait, || async {
                (op.aws_calls("ListBuckets").await > n).then_some(())
            })
            .await;
            op.metrics().await
        }
    };
    let before = started(op.aws_calls("ListBuckets").await).await;
    let after = started(op.aws_calls("ListBuckets").await).await;
    op.terminate().await;
    SweepCost {
        pairs,
        period_s,
        calls: delta(&calls(&after), &calls(&before), 1),
    }
}

async fn ready_count_of(api: &Api<Bucket>) -> usize {
    let list = api.list(&Default::default()).await.unwrap();
    list.items
        .iter()
        .filter(|b| {
            b.status
                .as_ref()
                .is_some_and(|s| condition::is_ready(&s.conditions))
        })
        .count()
}
