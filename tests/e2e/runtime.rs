//! The production runtime: leader election and handover, probes, namespace scoping.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, Patch, PatchParams, PostParams};
use s3_operator::api::{Bucket, BucketAccess};
use serde_json::json;

use crate::bucket::{bucket, wait_ready};
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

async fn holder(leases: &Api<Lease>) -> Option<String> {
    leases
        .get_opt(LEASE)
        .await
        .ok()??
        .spec?
        .holder_identity
        .filter(|h| !h.is_empty())
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
    let leases = Api::<Lease>::namespaced(client.clone(), &id.operator_ns);
    let a = Operator::start_as(&id, &opts, "a").await;
    wait_leading(&a, Duration::from_secs(10)).await;
    let b = Operator::start_as(&id, &opts, "b").await;

    // Exactly one leads; the metric and the Lease agree; the standby is ready and healthy.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(leading(&a).await && !leading(&b).await);
    assert_eq!(
        holder(&leases).await.as_deref(),
        Some(format!("{}-a", id.cluster).as_str())
    );
    for op in [&a, &b] {
        assert_eq!(http_get(&op.probe_addr, "/readyz").await.unwrap().0, 200);
        assert_eq!(http_get(&op.probe_addr, "/healthz").await.unwrap().0, 200);
    }

    // Only the leader writes.
    let buckets = Api::<Bucket>::namespaced(client.clone(), &ns);
    let accesses = Api::<BucketAccess>::namespaced(client.clone(), &ns);
    buckets
        .create(
            &PostParams::default(),
            &bucket("one", json!({"deletionPolicy": "Delete"})),
        )
        .await
        .unwrap();
    wait_ready(&buckets, "one").await;
    assert!(a.aws_writes().await > 0.0);
    assert_eq!(
        (b.aws_writes().await, b.kube_writes().await),
        (0.0, 0.0),
        "the standby wrote"
    );

    // SIGTERM: the leader drains, releases the lease and exits 0; the standby leads within 3s.
    let t0 = Instant::now();
    let code = a.terminate().await;
    wait_leading(&b, Duration::from_secs(10)).await;
    let sigterm_handover = t0.elapsed();
    assert_eq!(code, Some(0), "a SIGTERMed leader exits 0");
    assert!(
        sigterm_handover < Duration::from_secs(3),
        "SIGTERM handover took {sigterm_handover:?}"
    );
    eprintln!("measured: SIGTERM handover {sigterm_handover:?}");

    // Objects created during a crash handover all converge, with no duplicate keys.
    let c = Operator::start_as(&id, &opts, "c").await;
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
    wait_leading(&c, Duration::from_secs(15)).await;
    let crash_handover = t0.elapsed();
    assert!(
        crash_handover < Duration::from_millis(4000 + 500 + 1500),
        "crash handover took {crash_handover:?}"
    );
    eprintln!("measured: kill -9 handover {crash_handover:?} (lease 4s, renew 500ms)");
    for i in 0..3 {
        let name = format!("h{i}");
        wait_ready(&buckets, &name).await;
        wait_reason(&accesses, &name, "Available", Duration::from_secs(60)).await;
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

    // Losing the lease to another holder stops the leader at once with a non-zero exit.
    let mut c = c;
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
