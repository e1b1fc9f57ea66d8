//! The scale benchmark's body: N Bucket + BucketAccess pairs (or N Buckets alone, the peer
//! reference's workload) converged by the operator, next to the floor (the same AWS calls made directly at the same concurrency, with no Kubernetes in
//! the way). `cargo bench --bench scale` runs it at 100, 1,000 and 5,000 pairs and writes
//! BENCHMARKS.md; the e2e suite runs it at a small N as a smoke test that asserts correctness
//! (everything Ready, the floor's calls, a quiet resync, a clean audit), never speed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::wait::await_condition;
use kube::runtime::{WatchStreamExt, watcher};
use s3_operator::api::{
    Bucket, BucketAccess, Encryption, PublicAccessBlock, Versioning, condition,
};
use s3_operator::aws::iam;
use s3_operator::aws::{Aws, naming, policy, tags::Owner};
use s3_operator::metrics::Metrics;
use serde::Serialize;
use serde_json::json;

use crate::audit::audit;
use crate::support::*;

pub(crate) fn bucket(name: &str, spec: serde_json::Value) -> Bucket {
    serde_json::from_value(json!({"apiVersion": "s3.operator.dev/v1alpha1", "kind": "Bucket", "metadata": {"name": name}, "spec": spec}))
        .expect("valid Bucket")
}

fn access(name: &str, spec: serde_json::Value) -> BucketAccess {
    serde_json::from_value(json!({"apiVersion": "s3.operator.dev/v1alpha1", "kind": "BucketAccess", "metadata": {"name": name}, "spec": spec}))
        .expect("valid BucketAccess")
}

/// What a run creates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub enum Workload {
    /// A Bucket (deletionPolicy Delete) and a ReadWrite BucketAccess on it per pair.
    #[default]
    Pairs,
    /// Buckets alone, each with 2 tags, versioning, and the default public access block and
    /// SSE-S3: the workload of the quoted peer measurements, to compare like with like.
    Buckets,
}

impl Workload {
    /// What one unit of `n` is, for tables.
    pub fn unit(self) -> &'static str {
        match self {
            Workload::Pairs => "pair",
            Workload::Buckets => "bucket",
        }
    }

    fn bucket_spec(self) -> serde_json::Value {
        match self {
            Workload::Pairs => json!({"deletionPolicy": "Delete"}),
            Workload::Buckets => json!({"deletionPolicy": "Delete", "versioning": "Enabled",
                "tags": USER_TAGS.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>()}),
        }
    }
}

/// The per-namespace AWS write budget a run's operator has.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Budget {
    /// Off (`--namespace-aws-write-rate 0`): what is measured is the operator.
    Off,
    /// Writes per second and at once per namespace.
    On { rate: f64, burst: u32 },
}

impl Budget {
    /// The operator's flags for it.
    fn args(self) -> Vec<String> {
        let rate = |rate: f64| ["--namespace-aws-write-rate".to_string(), rate.to_string()];
        match self {
            Budget::Off => rate(0.0).into(),
            Budget::On { rate: r, burst } => {
                let burst = ["--namespace-aws-write-burst".to_string(), burst.to_string()];
                [rate(r), burst].concat()
            }
        }
    }
}

/// A run with the write budget on: the budget, and how many passes it deferred.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct BudgetSpent {
    pub rate: f64,
    pub burst: u32,
    /// Passes deferred while converging (`s3_operator_aws_write_budget_exhausted_total`).
    pub deferrals: f64,
}

/// The Buckets-only workload's two tags.
const USER_TAGS: [(&str, &str); 2] = [("team", "bench"), ("env", "test")];

/// One benchmark run at `n` pairs (or Buckets). Times in seconds, memory in MiB, counts per
/// pair (or Bucket).
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
pub struct Row {
    pub n: usize,
    #[serde(default)]
    pub workload: Workload,
    pub namespace: String,
    pub concurrency: u16,
    pub floor_s: f64,
    pub apply_s: f64,
    pub converge_s: f64,
    pub ratio: f64,
    pub floor_calls: BTreeMap<String, f64>,
    pub operator_calls: BTreeMap<String, f64>,
    pub aws_failures: f64,
    pub floor_failures: f64,
    /// Attempts that got no answer (a dropped connection, a timeout), which the SDK resent:
    /// left out of the calls above, as the transport's doing, not the caller's.
    #[serde(default)]
    pub aws_unanswered: f64,
    #[serde(default)]
    pub floor_unanswered: f64,
    pub reconcile_errors: f64,
    pub kube_writes: BTreeMap<String, f64>,
    pub resync_s: f64,
    pub resync_aws_writes: f64,
    pub resync_kube_writes: f64,
    /// The resync's writes as the emulator's request log and the API server's audit log saw
    /// them (`resync_*_writes` are the operator's own counts).
    #[serde(skip)]
    pub resync_writes_seen: Vec<String>,
    pub resync_s3_reads_per_pair: f64,
    pub resync_iam_reads_per_access: f64,
    pub rss_peak_mib: f64,
    pub rss_settled_mib: f64,
    /// Of `rss_settled_mib`, the heap and stacks (the rest is mostly the binary's code).
    #[serde(default)]
    pub rss_anon_settled_mib: f64,
    pub cpu_converge_s: f64,
    pub cpu_resync_s: f64,
    pub caches_synced_s: f64,
    pub first_reconcile_s: f64,
    pub latency_p50_s: f64,
    pub latency_p99_s: f64,
    pub latency_minus_aws_p50_s: f64,
    pub latency_minus_aws_p99_s: f64,
    pub audit_problems: Vec<String>,
    /// Where a pair's time went while converging (`Breakdown`).
    #[serde(default)]
    pub breakdown: Breakdown,
    /// The emulator's CPU seconds per wall second while the floor ran and while the operator
    /// converged: 1.0 is one core, all a GIL-bound moto can use. The same calls at a lower figure
    /// left it waiting, on its requests or for a CPU.
    #[serde(default)]
    pub emulator_busy_floor: f64,
    #[serde(default)]
    pub emulator_busy_converge: f64,
    /// CPU seconds per wall second while the operator converged: the control plane (API server,
    /// etcd and controller manager together), and the operator. Pinned, they share what the
    /// emulator leaves with the benchmark's own client, which neither counts.
    #[serde(default)]
    pub control_plane_busy_converge: f64,
    #[serde(default)]
    pub operator_busy_converge: f64,
    /// Whether the emulator had a CPU of its own (the benchmark's `--pin`).
    #[serde(default)]
    pub emulator_pinned: bool,
    /// Set when the operator ran with a write budget (`Budget::On`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_budget: Option<BudgetSpent>,
}

/// Where a pair's (or Bucket's) time went while converging, in seconds per pair summed over
/// both controllers, from the operator's own histograms (the floor's AWS time from its own).
/// A slot's time is `aws_s + kube_writes_s + rest_of_slot_s`; the wait before it, at the fair
/// gate and besides; the writes a pass makes after giving its slot back, `writes_after_slot_s`.
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
pub struct Breakdown {
    pub floor_aws_s: f64,
    pub aws_s: f64,
    pub kube_writes_s: f64,
    pub rest_of_slot_s: f64,
    pub gate_wait_s: f64,
    pub other_queue_wait_s: f64,
    /// The rest of a reconcile once its slot is given back: the writes reporting its AWS calls
    /// (none in rows measured before passes gave their slot back early).
    #[serde(default)]
    pub writes_after_slot_s: f64,
    /// Reconciles per pair, both kinds (a pass and its echoes).
    pub reconciles: f64,
}

impl Breakdown {
    /// From the operator's metrics before and after converging `n` pairs.
    fn of(before: &str, after: &str, n: usize, floor_aws_s: f64) -> Breakdown {
        let per_pair =
            |name: &str| (metric_sum(after, name, &[]) - metric_sum(before, name, &[])) / n as f64;
        let aws_s = per_pair("s3_operator_aws_request_duration_seconds_sum");
        let work = per_pair("workqueue_work_duration_seconds_sum");
        let slot = per_pair("s3_operator_reconcile_slot_seconds_sum");
        let writes_after_slot_s = (work - slot).max(0.0);
        let kube_writes_s = (per_pair("s3_operator_kube_write_duration_seconds_sum")
            - writes_after_slot_s)
            .max(0.0);
        let gate_wait_s = per_pair("s3_operator_gate_wait_seconds_sum");
        Breakdown {
            floor_aws_s,
            aws_s,
            kube_writes_s,
            rest_of_slot_s: (slot - aws_s - kube_writes_s).max(0.0),
            writes_after_slot_s,
            gate_wait_s,
            other_queue_wait_s: (per_pair("workqueue_queue_duration_seconds_sum") - gate_wait_s)
                .max(0.0),
            reconciles: per_pair("controller_runtime_reconcile_total"),
        }
    }
}

pub(crate) const CONCURRENCY: u16 = 10;

/// `service:Operation` → calls, from a metrics text, for every outcome AWS answered.
pub(crate) fn calls(text: &str) -> BTreeMap<String, f64> {
    let answered: Vec<&str> = text
        .lines()
        .filter(|l| !l.contains("outcome=\"no_response\""))
        .collect();
    by_labels(
        &answered.join("\n"),
        "s3_operator_aws_requests_total",
        ["service", "operation"],
    )
}

/// AWS attempts that got no answer, which the SDK resent.
pub(crate) fn unanswered(text: &str) -> f64 {
    metric_sum(
        text,
        "s3_operator_aws_requests_total",
        &[("outcome", "no_response")],
    )
}

/// The samples of `metric` summed by the values of two labels, keyed `a:b`.
fn by_labels(text: &str, metric: &str, labels: [&str; 2]) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with(&format!("{metric}{{")))
    {
        let label = |k: &str| {
            line.split(&format!("{k}=\""))
                .nth(1)
                .and_then(|r| r.split('"').next())
                .unwrap_or_default()
                .to_string()
        };
        let v: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
        *out.entry(format!("{}:{}", label(labels[0]), label(labels[1])))
            .or_default() += v;
    }
    out
}

pub(crate) fn delta(
    after: &BTreeMap<String, f64>,
    before: &BTreeMap<String, f64>,
    n: usize,
) -> BTreeMap<String, f64> {
    after
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                (v - before.get(k).copied().unwrap_or(0.0)) / n as f64,
            )
        })
        .filter(|(_, v)| *v > 0.0)
        .collect()
}

pub(crate) fn is_read(op: &str) -> bool {
    let op = op.split(':').nth(1).unwrap_or(op);
    ["Get", "List", "Head"].iter().any(|p| op.starts_with(p))
}

/// A process's memory (MiB) and CPU time, from /proc.
pub(crate) struct Footprint {
    pub(crate) rss: f64,
    pub(crate) peak: f64,
    /// The part of `rss` that is heap and stacks rather than mapped files (the binary's code).
    pub(crate) anon: f64,
    cpu_s: f64,
}

pub(crate) fn footprint(pid: u32) -> Footprint {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib = |key: &str| {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces); utime and stime are 14 and 15.
    let rest: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, r)| r.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        rest.get(i - 3)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    Footprint {
        rss: kib("VmRSS:") / 1024.0,
        peak: kib("VmHWM:") / 1024.0,
        anon: kib("RssAnon:") / 1024.0,
        cpu_s: (ticks(14) + ticks(15)) / 100.0,
    }
}

/// The floor: each pair's AWS calls for a fresh Bucket and BucketAccess (the reads that find
/// nothing, then the writes; the Bucket's alone for `Workload::Buckets`), made directly with
/// the operator's own AWS client code, the operator's credentials and policy, and its
/// concurrency per kind.
pub(crate) async fn floor(id: &Identity, ns: &str, n: usize, workload: Workload) -> Floor {
    let creds =
        aws_sdk_s3::config::Credentials::new(&id.aws_key.0, &id.aws_key.1, None, None, "bench");
    let conf = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new(env().region.clone()))
        .endpoint_url(&env().aws_endpoint)
        .credentials_provider(creds)
        .load()
        .await;
    // The floor's own registry: it counts only the floor's calls.
    let metrics = Arc::new(Metrics::new());
    let aws = Aws::from_config(conf, Some(env().aws_endpoint.clone()), metrics.clone());
    let region = env().region.clone();
    let path = naming::iam_path(&id.cluster);
    let prefix = prefix(&id.cluster);
    let boundary = scope(&id.cluster).boundary_arn();
    let (buckets, accesses) = (
        Arc::new(tokio::sync::Semaphore::new(CONCURRENCY.into())),
        Arc::new(tokio::sync::Semaphore::new(CONCURRENCY.into())),
    );
    let before_text = metrics.render();
    let before = calls(&before_text);
    let emulator0 = emulator_cpu_s();
    let start = Instant::now();
    let pair = |i: usize| {
        let (aws, region, path) = (aws.clone(), region.clone(), path.clone());
        let (prefix, boundary) = (prefix.clone(), boundary.clone());
        let (buckets, accesses) = (buckets.clone(), accesses.clone());
        let owner = Owner {
            cluster: id.cluster.clone(),
            namespace: ns.to_string(),
            name: format!("floor{i}"),
            uid: format!("00000000-0000-4000-8000-{i:012}"),
        };
        async move {
            let bucket = naming::bucket_name(&prefix, &owner.namespace, &owner.name, &owner.uid);
            {
                let _slot = buckets.acquire().await.unwrap();
                assert!(aws.bucket_tags(&region, &bucket).await.unwrap().is_none());
                let mut tags = owner.tags();
                if workload == Workload::Buckets {
                    tags.extend(USER_TAGS.map(|(k, v)| (k.to_string(), v.to_string())));
                }
                aws.create_bucket(&region, &bucket, &tags, Default::default(), false)
                    .await
                    .unwrap();
                aws.put_public_access_block(&region, &bucket, &PublicAccessBlock::default())
                    .await
                    .unwrap();
                aws.put_encryption(&region, &bucket, &Encryption::default())
                    .await
                    .unwrap();
                let arn = naming::bucket_arn(naming::partition(&region), &bucket);
                aws.put_bucket_policy(&region, &bucket, &policy::bucket_policy(&arn, &[]))
                    .await
                    .unwrap();
                if workload == Workload::Buckets {
                    aws.put_versioning(&region, &bucket, Versioning::Enabled)
                        .await
                        .unwrap();
                    return (bucket, None);
                }
            }
            let _slot = accesses.acquire().await.unwrap();
            // A grant is confirmed against the bucket's ownership tags, never Bucket status.
            assert!(aws.bucket_tags(&region, &bucket).await.unwrap().is_some());
            let user = naming::iam_name(&owner.namespace, &owner.name, &owner.uid);
            let id = iam::Identity::User(user.clone());
            assert!(aws.get_identity(&id).await.unwrap().is_none());
            // As the operator does: a create the SDK resent after a lost answer finds the user
            // the first attempt made (one more read, as the operator makes).
            match aws
                .create_user(&user, &path, &boundary, &owner.tags())
                .await
            {
                Err(e) if e.is("EntityAlreadyExists") => {
                    let found = aws.get_identity(&id).await.unwrap().expect("the user");
                    assert_eq!(found.tags, owner.tags(), "{user} is not the floor's");
                }
                other => drop(other.unwrap()),
            }
            let doc = policy::access_policy(
                naming::partition(&region),
                &bucket,
                s3_operator::api::Permission::ReadWrite,
                None,
            );
            aws.put_inline_policy(&id, "s3-operator", &doc)
                .await
                .unwrap();
            aws.create_access_key(&user).await.unwrap();
            (bucket, Some(user))
        }
    };
    let made: Vec<(String, Option<String>)> = stream::iter(0..n)
        .map(pair)
        .buffer_unordered(2 * CONCURRENCY as usize + 8)
        .collect()
        .await;
    let secs = start.elapsed().as_secs_f64();
    let emulator_busy = (emulator_cpu_s() - emulator0) / secs;
    let after_text = metrics.render();
    let used = delta(&calls(&after_text), &before, n);
    let failures = failed(&after_text) - failed(&before_text);
    let unanswered = unanswered(&after_text) - unanswered(&before_text);
    let aws_s = (aws_seconds(&after_text) - aws_seconds(&before_text)) / n as f64;
    // Clean up (untimed) so the operator's run starts on an emulator of the same size.
    stream::iter(made)
        .for_each_concurrent(2 * CONCURRENCY as usize, |(bucket, user)| {
            let (aws, region) = (aws.clone(), region.clone());
            async move {
                if let Some(user) = user {
                    for k in aws.access_keys(&user).await.unwrap() {
                        aws.delete_access_key(&user, &k.id).await.unwrap();
                    }
                    let id = iam::Identity::User(user.clone());
                    for p in aws.inline_policy_names(&id).await.unwrap() {
                        aws.delete_inline_policy(&id, &p).await.unwrap();
                    }
                    aws.delete_identity(&id).await.unwrap();
                }
                // A versioned bucket is empty here too: the floor writes no objects.
                aws.delete_bucket(&region, &bucket).await.unwrap();
            }
        })
        .await;
    Floor {
        secs,
        calls: used,
        failures,
        unanswered,
        aws_s,
        emulator_busy,
    }
}

/// The floor's run: its seconds, calls per pair, failed and unanswered calls and AWS seconds
/// per pair.
pub(crate) struct Floor {
    pub secs: f64,
    pub calls: BTreeMap<String, f64>,
    pub failures: f64,
    pub unanswered: f64,
    pub aws_s: f64,
    /// The emulator's CPU seconds per wall second while it ran.
    pub emulator_busy: f64,
}

/// The processes `hack/env.sh` started, by name, from its state (none when that is not known).
pub(crate) fn env_pids() -> Vec<(String, u32)> {
    let pids = std::fs::read_to_string(env().state_dir.join("pids")).unwrap_or_default();
    pids.lines()
        .filter_map(|l| l.split_once(' '))
        .filter_map(|(name, pid)| Some((name.to_string(), pid.trim().parse().ok()?)))
        .collect()
}

/// CPU seconds the environment's processes named `names` have used so far (0 for those whose
/// pid is not known).
fn env_cpu_s(names: &[&str]) -> f64 {
    env_pids()
        .into_iter()
        .filter(|(name, _)| names.contains(&name.as_str()))
        .map(|(_, pid)| footprint(pid).cpu_s)
        .sum()
}

/// CPU seconds the emulator has used so far.
pub(crate) fn emulator_cpu_s() -> f64 {
    env_cpu_s(&["moto"])
}

/// CPU seconds the control plane (API server, etcd, controller manager) has used so far.
fn control_plane_cpu_s() -> f64 {
    env_cpu_s(&["kube-apiserver", "etcd", "kube-controller-manager"])
}

/// AWS calls that ended in an error or throttling (a GetUser of a missing user is one: AWS
/// answers AccessDenied to a path-scoped policy, which the operator reads as "absent").
pub(crate) fn failed(text: &str) -> f64 {
    ["error", "throttled"]
        .iter()
        .map(|o| metric_sum(text, "s3_operator_aws_requests_total", &[("outcome", o)]))
        .sum()
}

/// Its Ready condition's status is True.
pub(crate) trait Ready {
    fn conditions(&self) -> Option<&[Condition]>;
}

impl Ready for Bucket {
    fn conditions(&self) -> Option<&[Condition]> {
        self.status.as_ref().map(|s| s.conditions.as_slice())
    }
}

impl Ready for BucketAccess {
    fn conditions(&self) -> Option<&[Condition]> {
        self.status.as_ref().map(|s| s.conditions.as_slice())
    }
}

/// Resolves once `n` objects of kind K in `ns` are Ready. It reads the typed status: this
/// watch shares the cores with what it measures.
pub(crate) async fn all_ready<K>(api: Api<K>, n: usize) -> Instant
where
    K: kube::Resource
        + Ready
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    let mut ready = std::collections::HashSet::new();
    let mut events = std::pin::pin!(watcher(api, watcher::Config::default()).applied_objects());
    while let Some(obj) = events.try_next().await.expect("watch") {
        if obj.conditions().is_some_and(condition::is_ready) {
            ready.insert(obj.meta().name.clone().unwrap());
            if ready.len() >= n {
                return Instant::now();
            }
        }
    }
    panic!("watch ended");
}

/// Creates a Bucket and, for pairs, a ReadWrite BucketAccess on it per name, 32 at a time.
pub(crate) async fn create_objects(
    buckets: &Api<Bucket>,
    accesses: &Api<BucketAccess>,
    names: impl Iterator<Item = String>,
    workload: Workload,
) {
    stream::iter(names)
        .for_each_concurrent(32, |name| async move {
            buckets
                .create(
                    &PostParams::default(),
                    &bucket(&name, workload.bucket_spec()),
                )
                .await
                .unwrap();
            if workload == Workload::Buckets {
                return;
            }
            accesses
                .create(
                    &PostParams::default(),
                    &access(
                        &name,
                        json!({"bucketRef": {"name": name}, "permission": "ReadWrite"}),
                    ),
                )
                .await
                .unwrap();
        })
        .await;
}

/// Samples the operator's footprint every 200 ms until dropped; returns the peak RSS seen.
pub(crate) struct Sampler {
    peak: Arc<std::sync::Mutex<f64>>,
    task: tokio::task::JoinHandle<()>,
}

impl Sampler {
    pub(crate) fn start(pid: u32) -> Sampler {
        let peak = Arc::new(std::sync::Mutex::new(0.0_f64));
        let p = peak.clone();
        let task = tokio::spawn(async move {
            loop {
                let hwm = footprint(pid).peak;
                {
                    let mut g = p.lock().unwrap();
                    *g = g.max(hwm);
                }
                // Kept: the sampling interval of the memory high-water mark, not a wait.
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        Sampler { peak, task }
    }

    pub(crate) fn peak(&self) -> f64 {
        *self.peak.lock().unwrap()
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn aws_seconds(text: &str) -> f64 {
    metric_sum(text, "s3_operator_aws_request_duration_seconds_sum", &[])
}

/// Runs the benchmark at `n` pairs (or Buckets) under `write_budget` with `samples`
/// single-object latency samples; with `clean`, deletes every object at the end (the smoke test
/// shares its environment with other tests).
pub async fn run(
    n: usize,
    workload: Workload,
    write_budget: Budget,
    samples: usize,
    clean: bool,
) -> Row {
    let client = admin().await;
    let ns = namespace(&client, "bench").await;
    let opts = operator_opts(&ns, write_budget);
    let id = Identity::new(&opts.namespaces, None).await;
    let mut row = Row {
        n,
        workload,
        namespace: ns.clone(),
        concurrency: CONCURRENCY,
        ..Default::default()
    };
    eprintln!("[{n}] floor");
    let floor = floor(&id, &ns, n, workload).await;
    (row.floor_s, row.floor_failures) = (floor.secs, floor.failures);
    row.floor_unanswered = floor.unanswered;
    row.emulator_busy_floor = floor.emulator_busy;
    row.floor_calls = floor.calls;
    let apis = Apis {
        buckets: Api::namespaced(client.clone(), &ns),
        accesses: Api::namespaced(client, &ns),
    };
    let peak_first = converge(&mut row, &id, &opts, &apis, (write_budget, floor.aws_s)).await;
    let (op, sampler) = resync(&mut row, &id, &opts).await;
    latency(&mut row, &op, &apis.buckets, samples).await;
    row.rss_peak_mib = peak_first.max(sampler.peak()).max(footprint(op.pid()).peak);
    drop(sampler);
    row.audit_problems = audit(&id.cluster, &opts.namespaces).await;
    if clean {
        delete_everything(&id, &apis).await;
    }
    drop(op);
    row
}

/// The benchmark's objects.
struct Apis {
    buckets: Api<Bucket>,
    accesses: Api<BucketAccess>,
}

/// The operator of a run: concurrency as the floor's, reads never budgeted (so the write budget
/// is the only difference), no periodic resync inside the measurements (it is measured alone).
fn operator_opts(ns: &str, write_budget: Budget) -> OperatorOpts {
    let mut extra_args = vec![
        "--max-concurrent-reconciles".into(),
        CONCURRENCY.to_string(),
        "--namespace-aws-read-rate".into(),
        "0".into(),
    ];
    extra_args.extend(write_budget.args());
    OperatorOpts {
        namespaces: vec![ns.to_string()],
        resync: "1h",
        extra_args,
        env: vec![("RUST_LOG".into(), "info".into())],
        ..Default::default()
    }
}

/// Applies the N objects to a fresh operator and measures it converging them: the times, calls,
/// writes, errors and CPU into `row`. Stops the operator; returns its peak RSS.
async fn converge(
    row: &mut Row,
    id: &Identity,
    opts: &OperatorOpts,
    apis: &Apis,
    (write_budget, floor_aws_s): (Budget, f64),
) -> f64 {
    let (n, workload) = (row.n, row.workload);
    eprintln!("[{n}] operator: applying {n} {}s", workload.unit());
    let op = Operator::start_as(id, opts, "bench").await;
    let sampler = Sampler::start(op.pid());
    let cpu0 = footprint(op.pid()).cpu_s;
    let before = op.metrics().await;
    let (emulator0, control_plane0) = (emulator_cpu_s(), control_plane_cpu_s());
    let start = Instant::now();
    let ready_b = tokio::spawn(all_ready(apis.buckets.clone(), n));
    let ready_a = tokio::spawn(all_ready(apis.accesses.clone(), n));
    if workload == Workload::Buckets {
        ready_a.abort();
    }
    let names = (0..n).map(|i| format!("p{i}"));
    create_objects(&apis.buckets, &apis.accesses, names, workload).await;
    row.apply_s = start.elapsed().as_secs_f64();
    let mut done = ready_b.await.unwrap();
    if workload == Workload::Pairs {
        done = done.max(ready_a.await.unwrap());
    }
    row.converge_s = done.duration_since(start).as_secs_f64();
    row.emulator_busy_converge = (emulator_cpu_s() - emulator0) / row.converge_s;
    row.control_plane_busy_converge = (control_plane_cpu_s() - control_plane0) / row.converge_s;
    row.operator_busy_converge = (footprint(op.pid()).cpu_s - cpu0) / row.converge_s;
    row.ratio = row.converge_s / row.floor_s;
    eprintln!(
        "[{n}] converged in {:.1}s (floor {:.1}s)",
        row.converge_s, row.floor_s
    );
    // Let the last status writes and their echo reconciles finish before counting.
    op.wait_settled(Duration::from_secs(3)).await;
    let after = op.metrics().await;
    row.operator_calls = delta(&calls(&after), &calls(&before), n);
    row.aws_failures = failed(&after) - failed(&before);
    row.aws_unanswered = unanswered(&after) - unanswered(&before);
    let errors = |t: &str| {
        metric_sum(
            t,
            "controller_runtime_reconcile_total",
            &[("result", "error")],
        )
    };
    row.reconcile_errors = errors(&after) - errors(&before);
    row.breakdown = Breakdown::of(&before, &after, n, floor_aws_s);
    if let Budget::On { rate, burst } = write_budget {
        let deferred = |t: &str| metric_sum(t, "s3_operator_aws_write_budget_exhausted_total", &[]);
        row.write_budget = Some(BudgetSpent {
            rate,
            burst,
            deferrals: deferred(&after) - deferred(&before),
        });
    }
    let writes = |t: &str| by_labels(t, "s3_operator_kube_writes_total", ["kind", "verb"]);
    row.kube_writes = delta(&writes(&after), &writes(&before), n);
    row.cpu_converge_s = footprint(op.pid()).cpu_s - cpu0;
    op.wait_settled(Duration::from_secs(5)).await;
    drop(sampler);
    let peak = footprint(op.pid()).peak;
    assert_eq!(
        op.terminate().await,
        Some(0),
        "the operator did not exit cleanly"
    );
    peak
}

/// A full resync: a restarted operator reconciles every object once, from fresh caches. Its
/// start-up, reads, writes and footprint into `row`; returns it running, with its sampler.
async fn resync(row: &mut Row, id: &Identity, opts: &OperatorOpts) -> (Operator, Sampler) {
    let n = row.n;
    eprintln!("[{n}] resync");
    let sent = Sent::now(&id.aws_key.0, &id.kube_user).await;
    let start = Instant::now();
    let op = Operator::start_as(id, opts, "resync").await;
    row.caches_synced_s = start.elapsed().as_secs_f64();
    let sampler = Sampler::start(op.pid());
    let reconciles = || async {
        metric_sum(
            &op.metrics().await,
            "controller_runtime_reconcile_total",
            &[],
        )
    };
    wait_for("first reconcile", Duration::from_secs(120), || async {
        (reconciles().await >= 1.0).then_some(())
    })
    .await;
    row.first_reconcile_s = start.elapsed().as_secs_f64();
    let objects = match row.workload {
        Workload::Pairs => 2 * n,
        Workload::Buckets => n,
    };
    wait_for(
        "every object reconciled",
        Duration::from_secs(600),
        || async { (reconciles().await >= objects as f64).then_some(()) },
    )
    .await;
    row.resync_s = start.elapsed().as_secs_f64();
    // A late write of the resync must show in the counts below: wait until nothing moves.
    op.wait_settled(Duration::from_secs(3)).await;
    let text = op.metrics().await;
    row.resync_writes_seen = sent.writes().await;
    row.resync_aws_writes = op.aws_writes().await;
    row.resync_kube_writes = op.kube_writes().await;
    if row.resync_kube_writes > 0.0 {
        eprintln!(
            "[{n}] resync kube writes: {:?}",
            by_labels(&text, "s3_operator_kube_writes_total", ["kind", "verb"])
        );
    }
    let resync_calls = calls(&text);
    let sum_reads = |svc: &str| {
        resync_calls
            .iter()
            .filter(|(k, _)| k.starts_with(svc) && is_read(k))
            .map(|(_, v)| v)
            .sum::<f64>()
    };
    row.resync_s3_reads_per_pair = sum_reads("s3:") / n as f64;
    row.resync_iam_reads_per_access = sum_reads("iam:") / n as f64;
    let settled = footprint(op.pid());
    row.cpu_resync_s = settled.cpu_s;
    row.rss_settled_mib = settled.rss;
    row.rss_anon_settled_mib = settled.anon;
    (op, sampler)
}

/// Single-object latency on the now quiet system: `samples` new Buckets, each to Ready, in
/// total and without its AWS time.
async fn latency(row: &mut Row, op: &Operator, buckets: &Api<Bucket>, samples: usize) {
    eprintln!("[{}] latency", row.n);
    let mut total = Vec::new();
    let mut minus_aws = Vec::new();
    for j in 0..samples {
        let name = format!("lat{j}");
        let before = aws_seconds(&op.metrics().await);
        // Watched, not polled: a poll's interval would be most of what is measured.
        let ready = await_condition(buckets.clone(), &name, |b: Option<&Bucket>| {
            b.and_then(|b| b.status.as_ref())
                .is_some_and(|s| condition::is_ready(&s.conditions))
        });
        let start = Instant::now();
        let (pp, object) = (
            PostParams::default(),
            bucket(&name, row.workload.bucket_spec()),
        );
        let create = buckets.create(&pp, &object);
        let (created, ready) =
            tokio::join!(create, tokio::time::timeout(Duration::from_secs(60), ready));
        created.unwrap();
        ready
            .expect("latency sample Ready within 60 s")
            .expect("watch");
        let t = start.elapsed().as_secs_f64();
        // The Ready status write's echo reconcile reads AWS too; wait for it so the next sample
        // starts quiet, and count only the calls up to Ready.
        let aws = aws_seconds(&op.metrics().await) - before;
        total.push(t);
        minus_aws.push((t - aws).max(0.0));
        op.wait_settled(Duration::from_millis(300)).await;
    }
    total.sort_by(f64::total_cmp);
    minus_aws.sort_by(f64::total_cmp);
    row.latency_p50_s = percentile(&total, 0.5);
    row.latency_p99_s = percentile(&total, 0.99);
    row.latency_minus_aws_p50_s = percentile(&minus_aws, 0.5);
    row.latency_minus_aws_p99_s = percentile(&minus_aws, 0.99);
}

/// Deletes every object of the run and checks that nothing of it is left in AWS.
async fn delete_everything(id: &Identity, apis: &Apis) {
    let dp = DeleteParams::default();
    let all = Default::default();
    apis.accesses.delete_collection(&dp, &all).await.unwrap();
    apis.buckets.delete_collection(&dp, &all).await.unwrap();
    wait_for("every object deleted", Duration::from_secs(120), || async {
        let left = apis.buckets.list(&all).await.ok()?.items.len()
            + apis.accesses.list(&all).await.ok()?.items.len();
        (left == 0).then_some(())
    })
    .await;
    let left = crate::audit::inventory(&id.cluster).await;
    assert!(left.is_empty(), "left behind: {left:?}");
}
