//! The fault suite: AWS faults from a fault-injecting proxy, kill -9 at random points, leader
//! kills under load, an API server stopped and restarted, and hostile input. Every run ends with
//! the audit clean: nothing leaked, nothing duplicated, nothing foreign touched.
//!
//! `S3OP_FAULT_SCALE=N` multiplies the object counts (the full run in the README uses 5);
//! `S3OP_FAULT_SEED` replays the random choices a failed run printed.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use rand::{Rng, SeedableRng};
use s3_operator::api::{Bucket, BucketAccess};
use serde_json::{Value, json};

use crate::access::access;
use crate::audit::{audit, inventory};
use crate::support::*;

fn scale() -> usize {
    std::env::var("S3OP_FAULT_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

/// Seeded randomness, printed so a failing run can be replayed.
fn rng(test: &str) -> rand::rngs::StdRng {
    let seed: u64 = std::env::var("S3OP_FAULT_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| rand::rng().random());
    eprintln!("{test}: seed {seed} (S3OP_FAULT_SEED={seed} replays it)");
    rand::rngs::StdRng::seed_from_u64(seed)
}

// ---------------------------------------------------------------- the fault proxy

/// `hack/fault_proxy.py` between the operator and moto; stopped on drop.
pub struct FaultProxy {
    _child: tokio::process::Child,
    addr: String,
}

impl FaultProxy {
    pub async fn start(seed: u64) -> FaultProxy {
        use tokio::io::AsyncBufReadExt;
        let mut child = tokio::process::Command::new("python3")
            .arg(repo().join("hack/fault_proxy.py"))
            .args([
                "--upstream",
                &env().aws_endpoint,
                "--seed",
                &seed.to_string(),
            ])
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start hack/fault_proxy.py");
        let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .expect("fault proxy did not start")
            .unwrap()
            .expect("fault proxy output");
        let addr = line
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected fault proxy output {line:?}"))
            .to_string();
        FaultProxy {
            _child: child,
            addr,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub async fn set(&self, rates: Value) {
        let (status, body) = http_request(&self.addr, "PUT", "/__faults", &rates.to_string())
            .await
            .expect("fault proxy control");
        assert_eq!(status, 200, "{body}");
    }

    pub async fn stats(&self) -> Value {
        let (_, body) = http_get(&self.addr, "/__faults").await.expect("stats");
        serde_json::from_str::<Value>(&body).expect("JSON")["stats"].clone()
    }
}

// ---------------------------------------------------------------- a fleet of pairs

/// Bucket + BucketAccess pairs `f<i>` in one namespace, with the state each should reach.
struct Fleet {
    ns: String,
    buckets: Api<Bucket>,
    accesses: Api<BucketAccess>,
    /// Live pair → the `round` tag its Bucket should carry.
    live: BTreeMap<usize, u32>,
    deleted: BTreeSet<usize>,
}

const CONCURRENCY: usize = 16;

impl Fleet {
    async fn new(tag: &str) -> Fleet {
        let client = admin().await;
        let ns = namespace(&client, tag).await;
        Fleet {
            buckets: Api::namespaced(client.clone(), &ns),
            accesses: Api::namespaced(client, &ns),
            ns,
            live: BTreeMap::new(),
            deleted: BTreeSet::new(),
        }
    }

    /// Creates pairs `range`; every fifth access key rotates every 15 s.
    async fn create(&mut self, range: std::ops::Range<usize>) {
        let (buckets, accesses) = (&self.buckets, &self.accesses);
        stream::iter(range.clone())
            .for_each_concurrent(CONCURRENCY, |i| async move {
                let name = format!("f{i}");
                let b = bucket(
                    &name,
                    json!({"deletionPolicy": "Delete", "forceDelete": true, "tags": {"round": "0"}}),
                );
                let mut spec = json!({"bucketRef": {"name": name}, "permission": "ReadWrite"});
                if i % 5 == 0 {
                    spec["credentials"] =
                        json!({"rotation": {"interval": "15s", "gracePeriod": "3s"}});
                }
                buckets.create(&PostParams::default(), &b).await.unwrap();
                accesses
                    .create(&PostParams::default(), &access(&name, spec))
                    .await
                    .unwrap();
            })
            .await;
        self.live.extend(range.map(|i| (i, 0)));
    }

    /// Changes the tags of each live Bucket in `ids` and the permission of its access.
    async fn update(&mut self, ids: &[usize]) {
        let ids: Vec<usize> = ids
            .iter()
            .copied()
            .filter(|i| self.live.contains_key(i))
            .collect();
        let (buckets, accesses) = (&self.buckets, &self.accesses);
        let live = &self.live;
        stream::iter(ids.iter().copied())
            .for_each_concurrent(CONCURRENCY, |i| async move {
                let name = format!("f{i}");
                let round = live[&i] + 1;
                let p = PatchParams::default();
                buckets
                    .patch(
                        &name,
                        &p,
                        &Patch::Merge(json!({"spec": {"tags": {"round": round.to_string()}}})),
                    )
                    .await
                    .unwrap();
                let permission = if round % 2 == 1 {
                    "ReadOnly"
                } else {
                    "ReadWrite"
                };
                accesses
                    .patch(
                        &name,
                        &p,
                        &Patch::Merge(json!({"spec": {"permission": permission}})),
                    )
                    .await
                    .unwrap();
            })
            .await;
        for i in &ids {
            *self.live.get_mut(i).unwrap() += 1;
        }
    }

    async fn delete(&mut self, ids: &[usize]) {
        let (buckets, accesses) = (&self.buckets, &self.accesses);
        stream::iter(ids.iter().copied())
            .for_each_concurrent(CONCURRENCY, |i| async move {
                let name = format!("f{i}");
                let dp = DeleteParams::default();
                let _ = accesses.delete(&name, &dp).await;
                let _ = buckets.delete(&name, &dp).await;
            })
            .await;
        for i in ids {
            self.live.remove(i);
            self.deleted.insert(*i);
        }
    }

    /// What is not yet as desired; empty once every live pair is Ready at its generation and
    /// every deleted pair is gone.
    async fn pending(&self) -> Vec<String> {
        let mut out = Vec::new();
        let buckets: BTreeMap<String, Bucket> = self
            .buckets
            .list(&Default::default())
            .await
            .unwrap()
            .into_iter()
            .map(|b| (b.metadata.name.clone().unwrap(), b))
            .collect();
        let accesses: BTreeMap<String, BucketAccess> = self
            .accesses
            .list(&Default::default())
            .await
            .unwrap()
            .into_iter()
            .map(|a| (a.metadata.name.clone().unwrap(), a))
            .collect();
        let ready = |generation: Option<i64>, status: Option<Value>| {
            let observed = status
                .as_ref()
                .and_then(|s| s["observedGeneration"].as_i64());
            matches!(ready_of(status), Some((s, _, _)) if s == "True") && observed == generation
        };
        for i in self.live.keys() {
            let name = format!("f{i}");
            match buckets.get(&name) {
                Some(b) if ready(b.metadata.generation, status_of(b)) => {}
                _ => out.push(format!("Bucket {name}")),
            }
            match accesses.get(&name) {
                Some(a) if ready(a.metadata.generation, status_of(a)) => {}
                _ => out.push(format!("BucketAccess {name}")),
            }
        }
        // What is left of a deleted pair, and whether its deletion has begun.
        let left = |kind: &str, meta: &kube::api::ObjectMeta| {
            format!(
                "{kind} (deleting since {:?}, finalizers {:?})",
                meta.deletion_timestamp.as_ref().map(|t| t.0.to_string()),
                meta.finalizers.as_deref().unwrap_or_default()
            )
        };
        for i in &self.deleted {
            let name = format!("f{i}");
            let b = buckets.get(&name).map(|b| left("Bucket", &b.metadata));
            let a = accesses
                .get(&name)
                .map(|a| left("BucketAccess", &a.metadata));
            let remains: Vec<String> = b.into_iter().chain(a).collect();
            if !remains.is_empty() {
                out.push(format!("deleted pair {name}: {}", remains.join(", ")));
            }
        }
        out
    }

    /// Waits until nothing is pending. A loaded machine may slow the fleet down, which the
    /// scale benchmark measures; what fails here is a fleet that stops: `stall` without one
    /// more object settling, or `LONGEST` in all.
    async fn converge(&self, what: &str, stall: Duration) {
        const LONGEST: Duration = Duration::from_secs(600);
        let start = Instant::now();
        let mut progress = Instant::now();
        let mut last = self.pending().await;
        while !last.is_empty() {
            if progress.elapsed() >= stall || start.elapsed() >= LONGEST {
                panic!(
                    "{what}: {} not converged, none settled in the last {:?} ({:?} in all): {:?}",
                    last.len(),
                    progress.elapsed(),
                    start.elapsed(),
                    &last[..last.len().min(20)]
                );
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            let now = self.pending().await;
            if last.iter().any(|p| !now.contains(p)) {
                progress = Instant::now();
            }
            last = now;
        }
        eprintln!("{what}: converged in {:?}", start.elapsed());
    }

    /// Every live Bucket carries its latest `round` tag in S3.
    async fn assert_tags_applied(&self) {
        for (i, round) in &self.live {
            let b = self.buckets.get(&format!("f{i}")).await.unwrap();
            let name = b.status.unwrap().bucket_name.unwrap();
            let tags = bucket_tags(&name).await;
            assert_eq!(
                tags.get("round"),
                Some(&round.to_string()),
                "f{i}: S3 tags {tags:?}"
            );
        }
    }

    /// Deletes every pair and waits until they are gone.
    async fn delete_all(&mut self, timeout: Duration) {
        let ids: Vec<usize> = self.live.keys().copied().collect();
        self.delete(&ids).await;
        self.converge("deletion of every pair", timeout).await;
    }

    fn namespaces(&self) -> Vec<String> {
        vec![self.ns.clone()]
    }
}

fn status_of<K: serde::Serialize>(obj: &K) -> Option<Value> {
    serde_json::to_value(obj).ok()?.get("status").cloned()
}

async fn assert_audit_clean(cluster: &str, fleet: &Fleet) {
    let problems = audit(cluster, &fleet.namespaces()).await;
    assert!(problems.is_empty(), "audit found: {problems:#?}");
}

async fn assert_nothing_left(cluster: &str) {
    let inv = inventory(cluster).await;
    assert!(
        inv.is_empty(),
        "left behind after deleting everything: {inv:#?}"
    );
}

// ---------------------------------------------------------------- AWS faults

#[tokio::test]
async fn aws_faults_converge_without_leaks() {
    let mut r = rng("aws_faults");
    let proxy = FaultProxy::start(r.random()).await;
    let mut fleet = Fleet::new("awsfault").await;
    let op = Operator::start(OperatorOpts {
        namespaces: fleet.namespaces(),
        aws_endpoint: Some(proxy.url()),
        ..Default::default()
    })
    .await;
    let n = 50 * scale();
    proxy
        .set(
            json!({"error5xx": 0.04, "throttle": 0.04, "latency": 0.1, "latency_ms": [20, 400],
                    "drop_before": 0.02, "drop_after": 0.03}),
        )
        .await;

    // Create, then update and delete while the first creations are still under way.
    fleet.create(0..n).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let updated: Vec<usize> = (0..n).filter(|i| i % 3 == 1).collect();
    fleet.update(&updated).await;
    let deleted: Vec<usize> = (0..n).filter(|i| i % 7 == 3).collect();
    fleet.delete(&deleted).await;
    fleet.create(n..n + n / 5).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    fleet.update(&updated[..updated.len() / 2]).await;
    tokio::time::sleep(Duration::from_secs(10)).await;

    let stats = proxy.stats().await;
    eprintln!("fault proxy: {stats}");
    for kind in [
        "error5xx",
        "throttle",
        "latency",
        "drop_before",
        "drop_after",
    ] {
        assert!(
            stats[kind].as_u64().unwrap() > 0,
            "no {kind} injected: {stats}"
        );
    }
    // Faults off: everything reaches its desired state, with nothing leaked or duplicated.
    proxy
        .set(json!({"error5xx": 0, "throttle": 0, "latency": 0, "drop_before": 0, "drop_after": 0}))
        .await;
    fleet
        .converge("after AWS faults", Duration::from_secs(240))
        .await;
    fleet.assert_tags_applied().await;
    assert_audit_clean(&op.cluster, &fleet).await;
    assert!(
        op.metric(
            "s3_operator_aws_requests_total",
            &[("outcome", "throttled")]
        )
        .await
            > 0.0,
        "throttling was injected but not counted as such"
    );

    // Faults back on for the deletion of everything: nothing is left behind.
    proxy
        .set(json!({"error5xx": 0.05, "throttle": 0.05, "drop_before": 0.02, "drop_after": 0.03}))
        .await;
    let ids: Vec<usize> = fleet.live.keys().copied().collect();
    fleet.delete(&ids).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    proxy
        .set(json!({"error5xx": 0, "throttle": 0, "drop_before": 0, "drop_after": 0}))
        .await;
    fleet
        .converge("deletion after AWS faults", Duration::from_secs(180))
        .await;
    assert_nothing_left(&op.cluster).await;
}

// ---------------------------------------------------------------- crashes

/// Restarts the operator with a kill -9 after a random 0.2 to 3 s, `times` times.
async fn crash_loop(
    id: &Identity,
    opts: &OperatorOpts,
    mut op: Operator,
    r: &mut rand::rngs::StdRng,
    times: usize,
) -> Operator {
    for k in 0..times {
        tokio::time::sleep(Duration::from_millis(r.random_range(200..3000))).await;
        op.kill9().await;
        op = Operator::start_as(id, opts, &format!("{k}")).await;
    }
    op
}

#[tokio::test]
async fn kill_9_during_create_rotation_and_delete_loses_nothing() {
    let mut r = rng("crashes");
    let mut fleet = Fleet::new("crash").await;
    let opts = OperatorOpts {
        namespaces: fleet.namespaces(),
        ..Default::default()
    };
    let id = Identity::new(&opts.namespaces, None).await;
    let op = Operator::start_as(&id, &opts, "first").await;
    let n = 30 * scale();

    // During creation.
    fleet.create(0..n).await;
    let op = crash_loop(&id, &opts, op, &mut r, 5).await;
    fleet
        .converge("creation with crashes", Duration::from_secs(120))
        .await;
    assert_audit_clean(&id.cluster, &fleet).await;

    // During updates and key rotation (every fifth access rotates every 15 s).
    let updated: Vec<usize> = (0..n).filter(|i| i % 2 == 0).collect();
    fleet.update(&updated).await;
    let op = crash_loop(&id, &opts, op, &mut r, 8).await;
    fleet
        .converge(
            "updates and rotation with crashes",
            Duration::from_secs(120),
        )
        .await;
    fleet.assert_tags_applied().await;
    assert_audit_clean(&id.cluster, &fleet).await;

    // During deletion.
    let ids: Vec<usize> = fleet.live.keys().copied().collect();
    fleet.delete(&ids).await;
    let op = crash_loop(&id, &opts, op, &mut r, 4).await;
    fleet
        .converge("deletion with crashes", Duration::from_secs(120))
        .await;
    assert_nothing_left(&id.cluster).await;
    drop(op);
}

// ---------------------------------------------------------------- leader handover under load

#[tokio::test]
async fn leader_kills_under_churn_never_double_act() {
    let mut r = rng("leader_kills");
    let mut fleet = Fleet::new("lkill").await;
    let opts = OperatorOpts {
        namespaces: fleet.namespaces(),
        leader_elect: true,
        extra_args: vec![
            "--lease-duration".into(),
            "3s".into(),
            "--lease-renew-period".into(),
            "500ms".into(),
        ],
        ..Default::default()
    };
    let id = Identity::new(&opts.namespaces, None).await;
    let mut replicas = vec![
        Operator::start_as(&id, &opts, "a").await,
        Operator::start_as(&id, &opts, "b").await,
    ];
    let n = 30 * scale();
    let mut next = 0;
    for round in 0..5 {
        // Churn: new pairs, updates of old ones, a few deletions.
        fleet.create(next..next + n / 3).await;
        next += n / 3;
        let live: Vec<usize> = fleet.live.keys().copied().collect();
        let upd: Vec<usize> = live
            .iter()
            .copied()
            .filter(|_| r.random_bool(0.3))
            .collect();
        fleet.update(&upd).await;
        if round % 2 == 1 {
            let del: Vec<usize> = live
                .iter()
                .copied()
                .filter(|_| r.random_bool(0.15))
                .collect();
            fleet.delete(&del).await;
        }
        tokio::time::sleep(Duration::from_millis(r.random_range(300..2500))).await;
        // Kill whichever replica leads; start a fresh standby.
        let leader = wait_for("a leader", Duration::from_secs(20), || async {
            for (k, op) in replicas.iter().enumerate() {
                if op.metric("leader_election_master_status", &[]).await == 1.0 {
                    return Some(k);
                }
            }
            None
        })
        .await;
        replicas.remove(leader).kill9().await;
        replicas.push(Operator::start_as(&id, &opts, &format!("r{round}")).await);
    }
    fleet
        .converge("churn with leader kills", Duration::from_secs(180))
        .await;
    fleet.assert_tags_applied().await;
    assert_audit_clean(&id.cluster, &fleet).await;
    // A standby never wrote anything.
    for op in &replicas {
        if op.metric("leader_election_master_status", &[]).await == 0.0 {
            assert_eq!(op.aws_writes().await, 0.0, "a standby wrote to AWS");
            assert_eq!(op.kube_writes().await, 0.0, "a standby wrote to Kubernetes");
        }
    }
    fleet.delete_all(Duration::from_secs(120)).await;
    assert_nothing_left(&id.cluster).await;
}

// ---------------------------------------------------------------- API server restart

/// A second kube-apiserver on the environment's etcd (an HA peer) that the test can stop.
async fn peer_apiserver(port: u16, id: &Identity) -> tokio::process::Child {
    let log = logs_dir().join(format!("apiserver-peer-{port}.log"));
    let out = std::fs::File::create(&log).unwrap();
    let child = tokio::process::Command::new(repo().join("hack/env.sh"))
        .args(["apiserver", &port.to_string(), "--state"])
        .arg(&env().state_dir)
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .kill_on_drop(true)
        .spawn()
        .expect("start a peer kube-apiserver");
    // Ready once it serves a ServiceAccount (RBAC bootstrapped), not merely listening.
    wait_for("peer API server", Duration::from_secs(90), || async {
        id.client().await.apiserver_version().await.ok().map(|_| ())
    })
    .await;
    child
}

#[tokio::test]
async fn watches_recover_when_the_api_server_restarts() {
    let mut fleet = Fleet::new("apirestart").await;
    let opts = OperatorOpts {
        namespaces: fleet.namespaces(),
        resync: "5m",
        ..Default::default()
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let id = Identity::new(&opts.namespaces, None)
        .await
        .via(&format!("https://127.0.0.1:{port}"));
    let mut peer = peer_apiserver(port, &id).await;
    let mut op = Operator::start_as(&id, &opts, "0").await;
    let n = 10 * scale();
    fleet.create(0..n).await;
    fleet
        .converge("before the restart", Duration::from_secs(90))
        .await;

    // The operator's API server goes away; changes keep arriving through the other one.
    peer.kill().await.unwrap();
    let down = Instant::now();
    fleet.create(n..2 * n).await;
    fleet.update(&(0..n / 2).collect::<Vec<_>>()).await;
    fleet.delete(&(n / 2..n).collect::<Vec<_>>()).await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert!(
        op.wait_exit(Duration::from_millis(10)).await.is_none(),
        "the operator exited while its API server was down:\n{}",
        op.log_text()
    );
    let _peer = peer_apiserver(port, &id).await;
    eprintln!("API server was down for {:?}", down.elapsed());
    fleet
        .converge("after the restart", Duration::from_secs(120))
        .await;
    fleet.assert_tags_applied().await;
    assert_audit_clean(&id.cluster, &fleet).await;
    fleet.delete_all(Duration::from_secs(90)).await;
    assert_nothing_left(&id.cluster).await;
}

// ---------------------------------------------------------------- hostile input

#[tokio::test]
async fn oversized_and_cross_namespace_input_is_refused_and_nothing_foreign_is_touched() {
    let client = admin().await;
    let ns = namespace(&client, "hostile").await;
    let other = namespace(&client, "hostile-other").await;
    let op = Operator::start(OperatorOpts {
        namespaces: vec![ns.clone(), other.clone()],
        ..Default::default()
    })
    .await;
    let buckets = Api::<Bucket>::namespaced(client.clone(), &ns);
    let accesses = Api::<BucketAccess>::namespaced(client.clone(), &ns);
    oversized_specs_are_refused_naming_each_limit(&buckets).await;
    let theirs = Api::<Bucket>::namespaced(client.clone(), &other);
    theirs
        .create(
            &PostParams::default(),
            &bucket("shared", json!({"deletionPolicy": "Delete"})),
        )
        .await
        .unwrap();
    let their_bucket = wait_ready(&theirs, "shared").await;
    a_cross_namespace_reference_is_refused_or_dropped(&client, &ns, &other).await;
    the_other_namespaces_bucket_is_not_touched(&op, &their_bucket, &other).await;
    let _ = theirs.delete("shared", &DeleteParams::default()).await;
    let _ = accesses.delete("cross", &DeleteParams::default()).await;
}

/// The API server's message for a refused create.
fn refused(r: Result<Bucket, kube::Error>) -> String {
    match r {
        Err(kube::Error::Api(e)) => e.message,
        other => panic!("accepted: {other:?}"),
    }
}

/// Oversized specs: each limit named in the error; a body past the API server's request limit
/// (3 MiB) is refused whole.
async fn oversized_specs_are_refused_naming_each_limit(buckets: &Api<Bucket>) {
    let tags: serde_json::Map<String, Value> =
        (0..41).map(|i| (format!("k{i}"), json!("v"))).collect();
    let msg = refused(
        buckets
            .create(
                &PostParams::default(),
                &bucket("many-tags", json!({"tags": tags})),
            )
            .await,
    );
    assert!(msg.contains("spec.tags") && msg.contains("40"), "{msg}");
    let rules: Vec<Value> = (0..101)
        .map(|i| json!({"id": format!("r{i}"), "expirationDays": 1}))
        .collect();
    let msg = refused(
        buckets
            .create(
                &PostParams::default(),
                &bucket("many-rules", json!({"lifecycleRules": rules})),
            )
            .await,
    );
    assert!(
        msg.contains("spec.lifecycleRules") && msg.contains("100"),
        "{msg}"
    );
    let key = "k".repeat(3000);
    let msg = refused(
        buckets
            .create(
                &PostParams::default(),
                &bucket(
                    "long-kms",
                    json!({"encryption": {"algorithm": "aws:kms", "kmsKeyId": key}}),
                ),
            )
            .await,
    );
    assert!(
        msg.contains("spec.encryption.kmsKeyId") && msg.contains("2048"),
        "{msg}"
    );
    let huge = "x".repeat(4 << 20);
    let r = buckets
        .create(
            &PostParams::default(),
            &bucket("huge", json!({"tags": {"big": huge}})),
        )
        .await;
    assert!(r.is_err(), "a 4 MiB object was accepted");
}

/// A BucketAccess naming a Bucket in another namespace: the field does not exist, so a strict
/// client is told so, and a lax one gets a reference to its own namespace only.
async fn a_cross_namespace_reference_is_refused_or_dropped(
    client: &kube::Client,
    ns: &str,
    other: &str,
) {
    let accesses = Api::<BucketAccess>::namespaced(client.clone(), ns);
    let mut cross = serde_json::to_value(access(
        "cross",
        json!({"bucketRef": {"name": "shared"}, "permission": "ReadWrite"}),
    ))
    .unwrap();
    cross["spec"]["bucketRef"]["namespace"] = json!(other);
    let cross: kube::api::DynamicObject = serde_json::from_value(cross).unwrap();
    let api = Api::<kube::api::DynamicObject>::namespaced_with(
        client.clone(),
        ns,
        &kube::api::ApiResource::erase::<BucketAccess>(&()),
    );
    let strict = PatchParams::apply("e2e").validation_strict();
    match api.patch("cross", &strict, &Patch::Apply(&cross)).await {
        Err(kube::Error::Api(e)) => {
            assert!(e.message.contains("bucketRef.namespace"), "{}", e.message)
        }
        other => panic!("a cross-namespace reference was accepted strictly: {other:?}"),
    }
    // Without strict validation the unknown field is dropped: the reference stays in `ns`.
    api.create(&PostParams::default(), &cross).await.unwrap();
    wait_reason(
        &accesses,
        "cross",
        "BucketNotFound",
        Duration::from_secs(30),
    )
    .await;
    let stored = accesses.get("cross").await.unwrap();
    assert_eq!(stored.spec.bucket_ref.name, "shared");
    assert!(
        Api::<Secret>::namespaced(client.clone(), ns)
            .get_opt("cross")
            .await
            .unwrap()
            .is_none(),
        "credentials were issued for a Bucket in another namespace"
    );
}

/// The other namespace's bucket was not touched: still Ready and tagged for its own owner; no
/// IAM user exists for the refused reference.
async fn the_other_namespaces_bucket_is_not_touched(
    op: &Operator,
    their_bucket: &str,
    other: &str,
) {
    let tags = bucket_tags(their_bucket).await;
    assert_eq!(
        tags.get("s3.operator.dev/namespace").map(String::as_str),
        Some(other)
    );
    let users = inventory(&op.cluster).await.users;
    assert!(
        users.is_empty(),
        "IAM users created for a refused reference: {users:?}"
    );
}

// ---------------------------------------------------------------- quotas

/// IAM refuses CreateUser as it does once 5,000 users exist (`LimitExceeded`, injected by the
/// proxy): the BucketAccess reports QuotaExceeded naming the quota, and CreateUser is not sent
/// again before a change or the periodic resync (10 minutes here), however long it stays full.
#[tokio::test]
async fn a_full_iam_quota_is_reported_and_create_user_is_not_retried() {
    let proxy = FaultProxy::start(rng("quota").random()).await;
    let client = admin().await;
    let ns = namespace(&client, "quota").await;
    let op = Operator::start(OperatorOpts {
        namespaces: vec![ns.clone()],
        resync: "10m",
        aws_endpoint: Some(proxy.url()),
        ..Default::default()
    })
    .await;
    let buckets = Api::<Bucket>::namespaced(client.clone(), &ns);
    let accesses = Api::<BucketAccess>::namespaced(client, &ns);
    let b = bucket("q", json!({"deletionPolicy": "Delete"}));
    buckets.create(&PostParams::default(), &b).await.unwrap();
    wait_ready(&buckets, "q").await;
    proxy.set(json!({"quota": 1, "only": ["CreateUser"]})).await;
    let spec = json!({"bucketRef": {"name": "q"}, "permission": "ReadWrite"});
    let a = access("q", spec);
    accesses.create(&PostParams::default(), &a).await.unwrap();
    let message = wait_reason(&accesses, "q", "QuotaExceeded", Duration::from_secs(60)).await;
    let quota = "quota reached: IAM users per account (5,000, not adjustable)";
    assert!(message.contains(quota), "{message}");
    // The passes its own finalizer and status writes woke end first; then nothing.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let create_user = |stats: &Value| stats["by_operation"]["CreateUser"].as_u64().unwrap_or(0);
    let sent = create_user(&proxy.stats().await);
    assert!((1..=3).contains(&sent), "CreateUser sent {sent} times");
    tokio::time::sleep(Duration::from_secs(10)).await;
    let stats = proxy.stats().await;
    assert_eq!(create_user(&stats), sent, "CreateUser retried: {stats}");
    assert_eq!(
        stats["quota"].as_u64(),
        Some(sent),
        "every one refused: {stats}"
    );
    // Refused at the user: no identity, key or Secret was left half made.
    let problems = audit(&op.cluster, std::slice::from_ref(&ns)).await;
    assert!(problems.is_empty(), "audit found: {problems:#?}");

    proxy.set(json!({"quota": 0})).await;
    let _ = accesses.delete("q", &DeleteParams::default()).await;
    let _ = buckets.delete("q", &DeleteParams::default()).await;
    wait_for(
        "the access and bucket gone",
        Duration::from_secs(60),
        || async {
            let gone = accesses.get_opt("q").await.ok()?.is_none();
            (gone && buckets.get_opt("q").await.ok()?.is_none()).then_some(())
        },
    )
    .await;
    assert_nothing_left(&op.cluster).await;
}
