//! The production runtime: leader election and handover, probes, namespace scoping.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, Patch, PatchParams, PostParams};
use s3_operator::api::{Bucket, BucketAccess};
use serde_json::{Value, json};

use crate::access::access;
use crate::faults::FaultProxy;
use crate::support::*;

const LEASE: &str = "s3-operator-leader";

fn le_opts(namespaces: Vec<String>) -> OperatorOpts {
    OperatorOpts {
        namespaces,
        leader_elect: true,
        extra_args: vec![
            "--lease-duration".into(),
            "4s".into(),
            "--lease-renew-period".into(),
            "500ms".into(),
        ],
        ..Default::default()
    }
}

async fn leading(op: &Operator) -> bool {
    op.metric("leader_election_master_status", &[("name", LEASE)])
        .await
        == 1.0
}

/// Waits until `op` reports itself leader; returns how long that took.
async fn wait_leading(op: &Operator, timeout: Duration) -> Duration {
    let start = Instant::now();
    wait_for("standby to take over", timeout, || async {
        leading(op).await.then_some(())
    })
    .await;
    start.elapsed()
}

#[tokio::test]
async fn one_leader_acts_and_hands_over_on_sigterm_and_on_crash() {
    let client = admin().await;
    let ns = namespace(&client, "le").await;
    let opts = le_opts(vec![ns.clone()]);
    let id = Identity::new(&opts.namespaces, None).await;
    let buckets = Api::<Bucket>::namespaced(client.clone(), &ns);
    let accesses = Api::<BucketAccess>::namespaced(client.clone(), &ns);
    let a = Operator::start_as(&id, &opts, "a").await;
    wait_leading(&a, Duration::from_secs(10)).await;
    // The standby's AWS requests pass a proxy only it uses: counted outside the process.
    let b_aws = FaultProxy::start(1).await;
    let through_proxy = OperatorOpts {
        aws_endpoint: Some(b_aws.url()),
        ..le_opts(vec![ns.clone()])
    };
    let b_started = jiff::Timestamp::now();
    let b = Operator::start_as(&id, &through_proxy, "b").await;
    exactly_one_leads_and_the_standby_is_healthy(&id, &a, &b).await;
    let b_agent = format!("({}-b)", id.cluster);
    only_the_leader_writes(&buckets, &a, &b, (&b_aws, &b_agent, b_started)).await;
    sigterm_hands_over_within_3s(a, &b).await;
    let c = Operator::start_as(&id, &opts, "c").await;
    crash_handover_within_the_lease_while_objects_arrive(b, &c, &buckets, &accesses).await;
    objects_created_during_the_handover_converge_without_duplicate_keys(&buckets, &accesses).await;
    losing_the_lease_stops_the_leader_at_once(&id, c).await;
}

/// Replicas that start together on an absent Lease (a fresh install): one creates it and leads,
/// the others lose the create (409) and stay healthy standbys. When the Lease was left to the
/// crate to create, every replica that read it absent believed it had claimed it, and a loser's
/// fence closed three quarters of a lease later: it exited and its Pod restarted. The race needs
/// both reads before the first create; Pods started together on a loaded node hit it, local
/// processes rarely do.
#[tokio::test]
async fn replicas_starting_together_on_an_absent_lease_elect_one_and_all_stay_up() {
    let client = admin().await;
    let ns = namespace(&client, "le2").await;
    let opts = le_opts(vec![ns.clone()]);
    let id = Identity::new(&opts.namespaces, None).await;
    assert_eq!(
        lease_holder(&id.operator_ns, LEASE).await,
        None,
        "no Lease yet"
    );
    // Three at once, as a Deployment's Pods start: the more that read the Lease absent before
    // the first create lands, the likelier a loser.
    let mut replicas: Vec<Operator> =
        futures::future::join_all(["a", "b", "c"].map(|r| Operator::start_as(&id, &opts, r))).await;
    wait_for("a leader", Duration::from_secs(10), || async {
        for op in &replicas {
            if leading(op).await {
                return Some(());
            }
        }
        None
    })
    .await;
    // Three leases (4 s each): a loser whose fence had opened would exit within one.
    let exits = futures::future::join_all(
        replicas
            .iter_mut()
            .map(|op| op.wait_exit(Duration::from_secs(12))),
    )
    .await;
    assert_eq!(exits, [None, None, None], "a replica exited");
    let mut leaders = Vec::new();
    for (op, r) in replicas.iter().zip(["a", "b", "c"]) {
        if leading(op).await {
            leaders.push(r);
        }
    }
    assert_eq!(leaders.len(), 1, "exactly one leads: {leaders:?}");
    let holder = lease_holder(&id.operator_ns, LEASE).await;
    assert_eq!(holder, Some(format!("{}-{}", id.cluster, leaders[0])));
}

/// Exactly one leads; the metric and the Lease agree; the standby is ready and healthy.
async fn exactly_one_leads_and_the_standby_is_healthy(id: &Identity, a: &Operator, b: &Operator) {
    // Kept as a window, the thing under test: for 2s with the standby ready and retrying, at
    // every look the first leads and the standby does not.
    let window = Instant::now();
    while window.elapsed() < Duration::from_secs(2) {
        assert!(leading(a).await && !leading(b).await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(leading(a).await && !leading(b).await);
    assert_eq!(
        lease_holder(&id.operator_ns, LEASE).await.as_deref(),
        Some(format!("{}-a", id.cluster).as_str())
    );
    for op in [a, b] {
        assert_eq!(http_get(&op.probe_addr, "/readyz").await.unwrap().0, 200);
        assert_eq!(http_get(&op.probe_addr, "/healthz").await.unwrap().0, 200);
    }
}

/// Only the leader writes. The standby's requests are counted where it cannot leave one out:
/// its AWS requests by the proxy only it uses, its Kubernetes writes in the API server's audit
/// log by its Lease identity in its user agent. Its own counters must agree.
async fn only_the_leader_writes(
    buckets: &Api<Bucket>,
    a: &Operator,
    b: &Operator,
    (b_aws, b_agent, b_started): (&FaultProxy, &str, jiff::Timestamp),
) {
    let sent = a.sent().await;
    buckets
        .create(
            &PostParams::default(),
            &bucket("one", json!({"deletionPolicy": "Delete"})),
        )
        .await
        .unwrap();
    wait_ready(buckets, "one").await;
    let by_the_installation = sent.writes().await;
    assert!(
        by_the_installation
            .iter()
            .any(|w| w.starts_with("AWS PUT bucket")),
        "the leader's writes are counted: {by_the_installation:?}"
    );
    let proxied = by_operation(&b_aws.stats().await);
    assert!(
        !proxied.is_empty(),
        "the standby reads AWS through its proxy"
    );
    let aws: Vec<_> = proxied.iter().filter(|(op, _)| aws_write(op)).collect();
    let kube = audited_writes(By::Agent(b_agent), b_started);
    assert!(
        aws.is_empty() && kube.is_empty(),
        "the standby wrote: AWS {aws:?}, Kubernetes {kube:?}"
    );
    assert!(a.aws_writes().await > 0.0);
    assert_eq!(
        (b.aws_writes().await, b.kube_writes().await),
        (0.0, 0.0),
        "the standby wrote"
    );
}

/// SIGTERM: the leader drains, releases the lease and exits 0; the standby leads within 3s.
async fn sigterm_hands_over_within_3s(a: Operator, b: &Operator) {
    let t0 = Instant::now();
    let code = a.terminate().await;
    wait_leading(b, Duration::from_secs(10)).await;
    let sigterm_handover = t0.elapsed();
    assert_eq!(code, Some(0), "a SIGTERMed leader exits 0");
    assert!(
        sigterm_handover < Duration::from_secs(3),
        "SIGTERM handover took {sigterm_handover:?}"
    );
    eprintln!("measured: SIGTERM handover {sigterm_handover:?}");
}

/// The leader `b` is killed (-9) while Buckets and BucketAccesses `h0`..`h2` are created; the
/// standby `c` leads within the lease (4s) plus renewal and start-up slack.
async fn crash_handover_within_the_lease_while_objects_arrive(
    b: Operator,
    c: &Operator,
    buckets: &Api<Bucket>,
    accesses: &Api<BucketAccess>,
) {
    let t0 = Instant::now();
    b.kill9().await;
    for i in 0..3 {
        let name = format!("h{i}");
        buckets
            .create(
                &PostParams::default(),
                &bucket(&name, json!({"deletionPolicy": "Delete"})),
            )
            .await
            .unwrap();
        let spec = json!({"bucketRef": {"name": name}, "permission": "ReadWrite"});
        let a: BucketAccess = serde_json::from_value(json!({"apiVersion": "s3.operator.dev/v1alpha1", "kind": "BucketAccess", "metadata": {"name": name}, "spec": spec})).unwrap();
        accesses.create(&PostParams::default(), &a).await.unwrap();
    }
    wait_leading(c, Duration::from_secs(15)).await;
    let crash_handover = t0.elapsed();
    assert!(
        crash_handover < Duration::from_millis(4000 + 500 + 1500),
        "crash handover took {crash_handover:?}"
    );
    eprintln!("measured: kill -9 handover {crash_handover:?} (lease 4s, renew 500ms)");
}

/// Objects created during a crash handover all converge, with no duplicate keys.
async fn objects_created_during_the_handover_converge_without_duplicate_keys(
    buckets: &Api<Bucket>,
    accesses: &Api<BucketAccess>,
) {
    for i in 0..3 {
        let name = format!("h{i}");
        wait_ready(buckets, &name).await;
        wait_reason(accesses, &name, "Available", Duration::from_secs(60)).await;
        let arn = accesses
            .get(&name)
            .await
            .unwrap()
            .status
            .unwrap()
            .user_arn
            .unwrap();
        let user = arn.rsplit('/').next().unwrap();
        let keys = admin_iam()
            .list_access_keys()
            .user_name(user)
            .send()
            .await
            .unwrap()
            .access_key_metadata;
        assert_eq!(keys.len(), 1, "{name} has duplicate keys");
    }
}

/// Losing the lease to another holder stops the leader at once with a non-zero exit.
async fn losing_the_lease_stops_the_leader_at_once(id: &Identity, mut c: Operator) {
    let leases = Api::<Lease>::namespaced(admin().await, &id.operator_ns);
    let patch = json!({"spec": {"holderIdentity": "intruder", "renewTime": jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()}});
    leases
        .patch(LEASE, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
    let code = c.wait_exit(Duration::from_secs(10)).await;
    assert_eq!(
        code,
        Some(1),
        "a leader that lost its lease must exit non-zero"
    );
}

/// Requests per operation the fault proxy has forwarded or answered.
fn by_operation(stats: &Value) -> BTreeMap<String, u64> {
    stats["by_operation"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(op, n)| (op.clone(), n.as_u64().unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default()
}

/// libfaketime's preload library (Debian's `faketime`, installed by `hack/tools.sh faketime`).
fn libfaketime() -> String {
    let found = std::fs::read_dir("/usr/lib").ok().and_then(|dirs| {
        dirs.flatten()
            .map(|d| d.path().join("faketime/libfaketime.so.1"))
            .find(|p| p.exists())
    });
    found
        .expect("libfaketime.so.1 not found: run hack/tools.sh faketime")
        .display()
        .to_string()
}

/// The time in the first stamped line of `op`'s log (text format: the time leads each line).
fn first_log_stamp(op: &Operator) -> jiff::Timestamp {
    let text = op.log_text();
    let mut plain = String::with_capacity(text.len());
    let mut escape = false;
    for c in text.chars() {
        match (escape, c) {
            (false, '\u{1b}') => escape = true,
            (true, 'm') => escape = false,
            (true, _) => {}
            (false, c) => plain.push(c),
        }
    }
    plain
        .lines()
        .find_map(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no timestamp in the log of {:?}", op.log))
}

/// A standby whose wall clock runs an hour ahead (libfaketime, in that process only) reads the
/// leader's `renewTime` as an hour old. It must not take over while the leader renews: it
/// judges expiry on its own monotonic clock, from when it last saw the lease change. Once the
/// leader is killed, it takes over after a lease of no change: within the lease plus a renew
/// period (and slack for its next read), and not before the lease could have run out.
#[tokio::test]
async fn a_standby_whose_clock_is_an_hour_ahead_takes_over_only_once_the_lease_stops_changing() {
    let client = admin().await;
    let ns = namespace(&client, "skew").await;
    let opts = le_opts(vec![ns.clone()]);
    let id = Identity::new(&opts.namespaces, None).await;
    let leases = Api::<Lease>::namespaced(client.clone(), &id.operator_ns);
    let a = Operator::start_as(&id, &opts, "a").await;
    wait_leading(&a, Duration::from_secs(10)).await;
    let skewed = OperatorOpts {
        env: vec![
            ("LD_PRELOAD".into(), libfaketime()),
            ("FAKETIME".into(), "+1h".into()),
            // Only the wall clock: the monotonic clock is what must be trusted.
            ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
        ],
        ..le_opts(vec![ns.clone()])
    };
    let b = Operator::start_as(&id, &skewed, "b").await;
    // The skew took: b's log is stamped an hour ahead of ours.
    let ahead = first_log_stamp(&b).duration_since(jiff::Timestamp::now());
    assert!(
        ahead > jiff::SignedDuration::from_mins(55),
        "the standby's clock is not skewed: {ahead:?}"
    );
    let (a_id, b_id) = (format!("{}-a", id.cluster), format!("{}-b", id.cluster));
    let transitions = |l: &Lease| l.spec.as_ref().and_then(|s| s.lease_transitions);
    let before = transitions(&leases.get(LEASE).await.unwrap());

    // Three leases long, the leader keeps renewing and keeps the lease.
    let hold = Instant::now();
    while hold.elapsed() < Duration::from_secs(12) {
        let lease = leases.get(LEASE).await.unwrap();
        let holder = lease.spec.as_ref().and_then(|s| s.holder_identity.clone());
        assert_eq!(
            holder.as_deref(),
            Some(a_id.as_str()),
            "the skewed standby took over"
        );
        assert_eq!(transitions(&lease), before);
        assert!(
            !leading(&b).await,
            "the skewed standby reports itself leader"
        );
        // Kept: the interval of the looks over the 12s window under test.
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(leading(&a).await);

    let killed = Instant::now();
    a.kill9().await;
    wait_for(
        "the skewed standby to take the lease",
        Duration::from_secs(15),
        || async {
            (lease_holder(&id.operator_ns, LEASE).await.as_deref() == Some(b_id.as_str()))
                .then_some(())
        },
    )
    .await;
    let takeover = killed.elapsed();
    wait_leading(&b, Duration::from_secs(5)).await;
    eprintln!(
        "measured: skewed (+1h) standby took over {takeover:?} after kill -9 (lease 4s, renew 500ms)"
    );
    // The last renewal was at most a renew period (plus its latency) before the kill.
    assert!(
        takeover >= Duration::from_millis(4000 - 500 - 250),
        "took over before the lease could have run out: {takeover:?}"
    );
    assert!(
        takeover < Duration::from_millis(4000 + 500 + 1500),
        "took over too late: {takeover:?}"
    );
}

/// Someone who may label the Lease (a new resourceVersion on every write) relabels it in a loop
/// while the leader is killed: the standby judges the leader election record only, as client-go
/// does, and takes over within the lease. When any resourceVersion change counted, the loop kept
/// the dead leader's lease alive for as long as it ran.
#[tokio::test]
async fn relabelling_the_lease_does_not_postpone_the_takeover() {
    let client = admin().await;
    let ns = namespace(&client, "relabel").await;
    let opts = le_opts(vec![ns.clone()]);
    let id = Identity::new(&opts.namespaces, None).await;
    let leases = Api::<Lease>::namespaced(client.clone(), &id.operator_ns);
    let a = Operator::start_as(&id, &opts, "a").await;
    wait_leading(&a, Duration::from_secs(10)).await;
    let b = Operator::start_as(&id, &opts, "b").await;
    let b_id = format!("{}-b", id.cluster);
    let killed = Instant::now();
    a.kill9().await;
    let mut touches = 0u32;
    while lease_holder(&id.operator_ns, LEASE).await.as_deref() != Some(b_id.as_str()) {
        assert!(
            killed.elapsed() < Duration::from_secs(15),
            "the standby never took the relabelled lease ({touches} relabels)"
        );
        let label = json!({"metadata": {"labels": {"touched": touches.to_string()}}});
        leases
            .patch(LEASE, &PatchParams::default(), &Patch::Merge(&label))
            .await
            .expect("relabel the Lease");
        touches += 1;
        // Faster than the standby reads the Lease (every renew period, 500ms).
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let takeover = killed.elapsed();
    eprintln!("measured: takeover {takeover:?} after kill -9 under {touches} relabels");
    assert!(
        takeover < Duration::from_millis(4000 + 500 + 1500),
        "took over too late: {takeover:?}"
    );
    wait_leading(&b, Duration::from_secs(5)).await;
}

/// A leader frozen past its lease (SIGSTOP) wakes up after its standby has taken over. Its
/// monotonic clock ran on while it was stopped, so its fence has closed: it must not send one
/// more write, to Kubernetes or AWS, and must exit non-zero. Its writes are counted outside the
/// process: AWS through a pass-through proxy only it uses, Kubernetes in the API server's audit
/// log, by the Lease identity in its user agent.
#[tokio::test]
async fn a_leader_frozen_past_its_lease_writes_nothing_after_resuming_and_exits() {
    let client = admin().await;
    let ns = namespace(&client, "frz").await;
    let opts = le_opts(vec![ns.clone()]);
    let id = Identity::new(&opts.namespaces, None).await;
    let proxy = FaultProxy::start(1).await;
    let started = jiff::Timestamp::now();
    let through_proxy = OperatorOpts {
        aws_endpoint: Some(proxy.url()),
        ..le_opts(vec![ns.clone()])
    };
    let a = Operator::start_as(&id, &through_proxy, "a").await;
    wait_leading(&a, Duration::from_secs(10)).await;
    let b = Operator::start_as(&id, &opts, "b").await;
    let buckets = Api::<Bucket>::namespaced(client.clone(), &ns);
    let accesses = Api::<BucketAccess>::namespaced(client.clone(), &ns);
    let names = slow_aws_keeps_reconciles_in_flight(&proxy, &buckets, &accesses).await;
    let a_agent = format!("({}-a)", id.cluster);
    both_counters_see_the_leaders_writes(&a, &proxy, &a_agent, started).await;
    a.signal("STOP");
    let stopped = Instant::now();
    let takeover = the_standby_takes_the_expired_lease_and_acts(&id, &b, &buckets, stopped).await;
    the_resumed_leader_writes_nothing_and_exits(a, &proxy, &a_agent, stopped, takeover).await;
    // The new leader finishes what the old one left half done.
    for name in &names {
        wait_ready(&buckets, name).await;
        wait_reason(&accesses, name, "Available", Duration::from_secs(90)).await;
    }
}

/// Slow AWS answers keep the leader's reconciles in flight when it is stopped: once resumed,
/// each would go straight on to its next write. Returns the names of the objects created.
async fn slow_aws_keeps_reconciles_in_flight(
    proxy: &FaultProxy,
    buckets: &Api<Bucket>,
    accesses: &Api<BucketAccess>,
) -> Vec<String> {
    proxy
        .set(json!({"latency": 1.0, "latency_ms": [300, 600]}))
        .await;
    let names: Vec<String> = (0..6).map(|i| format!("f{i}")).collect();
    for name in &names {
        let b = bucket(name, json!({"deletionPolicy": "Delete"}));
        buckets.create(&PostParams::default(), &b).await.unwrap();
        let spec = json!({"bucketRef": {"name": name}, "permission": "ReadWrite"});
        let x = access(name, spec);
        accesses.create(&PostParams::default(), &x).await.unwrap();
    }
    names
}

/// Both counters see the leader's writes: a broken one would pass the test below.
async fn both_counters_see_the_leaders_writes(
    a: &Operator,
    proxy: &FaultProxy,
    a_agent: &str,
    started: jiff::Timestamp,
) {
    wait_for(
        "the leader to write to AWS",
        Duration::from_secs(60),
        || async { (a.aws_writes().await > 0.0).then_some(()) },
    )
    .await;
    wait_for(
        "its writes in the audit log",
        Duration::from_secs(10),
        || async { (!audited_writes(By::Agent(a_agent), started).is_empty()).then_some(()) },
    )
    .await;
    let proxied = by_operation(&proxy.stats().await);
    assert!(proxied.keys().any(|op| aws_write(op)), "{proxied:?}");
}

/// The standby takes the lease once it has expired, and acts. Returns how long after the
/// leader stopped it took the lease.
async fn the_standby_takes_the_expired_lease_and_acts(
    id: &Identity,
    b: &Operator,
    buckets: &Api<Bucket>,
    stopped: Instant,
) -> Duration {
    let b_id = format!("{}-b", id.cluster);
    wait_for(
        "the standby to take the lease",
        Duration::from_secs(30),
        || async {
            (lease_holder(&id.operator_ns, LEASE).await.as_deref() == Some(b_id.as_str()))
                .then_some(())
        },
    )
    .await;
    let takeover = stopped.elapsed();
    buckets
        .create(
            &PostParams::default(),
            &bucket("after", json!({"deletionPolicy": "Delete"})),
        )
        .await
        .unwrap();
    wait_ready(buckets, "after").await;
    assert!(leading(b).await);
    takeover
}

/// Waits until the API server's audit log has a write made now, and the proxy's counts did not
/// move meanwhile: by then what an exited process sent before is in both.
async fn caught_up(proxy: &FaultProxy) {
    let configmaps =
        Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(admin().await, "default");
    wait_for(
        "the proxy and the audit log to catch up",
        Duration::from_secs(60),
        || async {
            let before = proxy.stats().await;
            let marker = format!("e2e-audit-marker-{}", random(8));
            let cm = serde_json::from_value(json!({"metadata": {"name": marker}})).unwrap();
            configmaps
                .create(&PostParams::default(), &cm)
                .await
                .expect("create the marker");
            let path = env().audit_log.clone().expect("the audit log");
            wait_for(
                "the marker in the audit log",
                Duration::from_secs(30),
                || async {
                    std::fs::read_to_string(&path)
                        .ok()?
                        .contains(&marker)
                        .then_some(())
                },
            )
            .await;
            let _ = configmaps.delete(&marker, &Default::default()).await;
            (proxy.stats().await == before).then_some(())
        },
    )
    .await;
}

/// Resumed (SIGCONT), the old leader sends no write to AWS or Kubernetes and exits non-zero.
async fn the_resumed_leader_writes_nothing_and_exits(
    mut a: Operator,
    proxy: &FaultProxy,
    a_agent: &str,
    stopped: Instant,
    takeover: Duration,
) {
    let before = by_operation(&proxy.stats().await);
    let resumed = jiff::Timestamp::now();
    let frozen = stopped.elapsed();
    a.signal("CONT");
    let code = a.wait_exit(Duration::from_secs(20)).await;
    // Let the proxy and the audit log catch up with anything it sent before exiting.
    caught_up(proxy).await;
    let after = by_operation(&proxy.stats().await);
    let sent: BTreeMap<&String, u64> = after
        .iter()
        .map(|(op, n)| (op, n - before.get(op).copied().unwrap_or_default()))
        .filter(|(_, n)| *n > 0)
        .collect();
    let aws_writes: Vec<_> = sent.iter().filter(|(op, _)| aws_write(op)).collect();
    let kube_writes = audited_writes(By::Agent(a_agent), resumed);
    eprintln!(
        "measured: stopped {frozen:?} (takeover after {takeover:?}); after SIGCONT the old \
         leader exited with {code:?}, sent AWS {sent:?}, Kubernetes writes {kube_writes:?}"
    );
    assert!(
        aws_writes.is_empty() && kube_writes.is_empty(),
        "the old leader wrote after resuming: AWS {aws_writes:?}, Kubernetes {kube_writes:?}\n{}",
        a.log_text()
    );
    assert!(
        code.is_some_and(|c| c != 0),
        "the old leader must exit non-zero, got {code:?}"
    );
}

#[tokio::test]
async fn scoped_operator_serves_only_its_namespaces() {
    let client = admin().await;
    let (a, b, c) = (
        namespace(&client, "sa").await,
        namespace(&client, "sb").await,
        namespace(&client, "sc").await,
    );
    // Roles only in A and B; nothing anywhere else.
    let op = Operator::start(OperatorOpts {
        namespaces: vec![a.clone(), b.clone()],
        ..Default::default()
    })
    .await;
    for ns in [&a, &b, &c] {
        Api::<Bucket>::namespaced(client.clone(), ns)
            .create(
                &PostParams::default(),
                &bucket("x", json!({"deletionPolicy": "Delete"})),
            )
            .await
            .unwrap();
    }
    for ns in [&a, &b] {
        wait_ready(&Api::<Bucket>::namespaced(client.clone(), ns), "x").await;
    }
    // Kept as a window, the thing under test: C's Bucket stays untouched for 3s more after the
    // others are served (the operator has no event to wait for: it must never see C at all).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let ignored = Api::<Bucket>::namespaced(client.clone(), &c)
        .get("x")
        .await
        .unwrap();
    assert!(
        ignored.status.is_none() && ignored.metadata.finalizers.is_none(),
        "namespace C was touched"
    );
    let log = op.log_text();
    assert!(
        !log.to_lowercase().contains("forbidden"),
        "the operator tried something outside its Roles:\n{log}"
    );
    wait_for("managed objects gauge", Duration::from_secs(15), || async {
        (op.metric(
            "s3_operator_managed_objects",
            &[("kind", "Bucket"), ("ready", "true")],
        )
        .await
            == 2.0)
            .then_some(())
    })
    .await;
}

/// Bad configuration fails fast with one clear line and a non-zero exit, never a panic.
#[tokio::test]
async fn bad_flags_and_an_unreachable_api_server_fail_clearly() {
    let bin = env!("CARGO_BIN_EXE_s3-operator");
    let out = std::process::Command::new(bin)
        .args(["run", "--resync-period", "soon"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        err.contains("--resync-period") && err.contains("duration"),
        "{err}"
    );
    let out = std::process::Command::new(bin)
        .args(["run", "--cluster-name", "has/slash"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--cluster-name"));

    let dir = logs_dir().join(format!("unreachable-{}", random(4)));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    std::fs::write(
        &kubeconfig,
        format!("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:{port}\n    insecure-skip-tls-verify: true\nusers:\n- name: u\n  user:\n    token: x\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n"),
    )
    .unwrap();
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new(bin)
            .args([
                "run",
                "--metrics-bind-address",
                "127.0.0.1:0",
                "--health-probe-bind-address",
                "127.0.0.1:0",
            ])
            .env("KUBECONFIG", &kubeconfig)
            .env("AWS_REGION", "us-east-1")
            .output(),
    )
    .await
    .expect("exits promptly")
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("error:"))
        .unwrap_or_default();
    assert!(line.contains("cannot reach the Kubernetes API"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}
