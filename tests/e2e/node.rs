//! The test node (`hack/env.sh up --node`) for the tests that run the operator as Pods: the images
//! built here and imported into its containerd, Pod and Deployment helpers, the operator's AWS key
//! pair, and `Scene`, which prints what explains a failure and undoes an installation.
//!
//! Without a node these helpers fail (never skip) and say how to start one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use s3_operator::api::{Bucket, BucketAccess};
use s3_operator::aws::tags;
use serde_json::{Value, json};

use crate::audit::inventory;
use crate::support::*;

/// For a Pod to start, be probed Ready, or finish; for an object to become Ready.
pub(crate) const T: Duration = Duration::from_secs(180);
/// How long a Bucket outside an installation's namespaces is watched for any sign of it.
pub(crate) const UNTOUCHED_FOR: Duration = Duration::from_secs(10);
/// The operator image's repository (hack/images/build.sh operator).
pub(crate) const OPERATOR_REPO: &str = "localhost/s3op/s3-operator";

// ---------------------------------------------------------------- the node and its images

pub(crate) struct Node {
    /// The state directory of `hack/env.sh` (`hack/node.sh load --state`).
    pub(crate) state_dir: PathBuf,
    /// moto as Pods reach it: the node's bridge address, relayed to moto on loopback.
    pub(crate) aws_endpoint: String,
}

/// The node of the environment, or a failure that says how to get one.
pub(crate) fn node() -> Node {
    const HOW: &str = "the cluster tests run the operator as Pods on a real node: start the \
        environment as root with `hack/env.sh up --node --state DIR` and run the tests with \
        S3OP_ENV_FILE=DIR/env";
    let Some(file) = std::env::var("S3OP_ENV_FILE")
        .ok()
        .filter(|f| !f.is_empty())
    else {
        panic!("S3OP_ENV_FILE is not set: {HOW}");
    };
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("reading {file}: {e}"));
    let vars: BTreeMap<&str, &str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("export ")?.split_once('='))
        .collect();
    assert!(
        vars.get("S3OP_NODE_NAME").is_some_and(|n| !n.is_empty()),
        "{file} has no node (S3OP_NODE_NAME is unset; the environment was started without \
         --node): {HOW}"
    );
    Node {
        state_dir: PathBuf::from(vars.get("S3OP_ENV_DIR").expect("S3OP_ENV_DIR")),
        aws_endpoint: vars
            .get("S3OP_NODE_AWS_ENDPOINT")
            .expect("S3OP_NODE_AWS_ENDPOINT")
            .to_string(),
    }
}

pub(crate) struct Images {
    /// The operator image's tag for installs, and a second tag of the same image for upgrades.
    pub(crate) tag: String,
    pub(crate) upgrade_tag: String,
    /// The application image (examples/bucket-app.rs).
    pub(crate) app: String,
}

pub(crate) static IMAGES: tokio::sync::OnceCell<Images> = tokio::sync::OnceCell::const_new();

/// Builds the operator and application images once per test binary and imports them into the
/// node's containerd.
pub(crate) async fn images(node: &Node) -> &'static Images {
    let state_dir = node.state_dir.clone();
    IMAGES
        .get_or_init(|| async move {
            tokio::task::spawn_blocking(move || build_images(&state_dir))
                .await
                .expect("building the images")
        })
        .await
}

pub(crate) fn build_images(state_dir: &Path) -> Images {
    let started = Instant::now();
    // This test binary lives in <target>/<profile>/deps: the release binary the operator image
    // takes and the example go to the same target directory.
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>");
    let target = profile_dir.parent().expect("target dir").to_path_buf();
    // The release build CI runs and the Dockerfile's build stage runs (hack/lib.sh RELEASE_BUILD);
    // a no-op when the binary is current.
    cargo(
        &target,
        &["build", "--release", "--locked", "--bin", "s3-operator"],
    );
    let mut app_build = vec!["build", "--locked", "--example", "bucket-app"];
    if profile_dir.file_name().is_some_and(|p| p == "release") {
        app_build.push("--release");
    }
    cargo(&target, &app_build);
    let app_bin = profile_dir.join("examples/bucket-app");

    let version = env!("CARGO_PKG_VERSION");
    let tag = version.to_string();
    let upgrade_tag = format!("{version}-e2e-upgrade");
    let mut archives = Vec::new();
    let mut refs = Vec::new();
    for args in [
        vec!["operator", tag.as_str()],
        vec!["operator", upgrade_tag.as_str()],
        vec!["app", app_bin.to_str().expect("path")],
    ] {
        let out = script(&target, "hack/images/build.sh", &args);
        let (r, a) = out
            .lines()
            .last()
            .and_then(|l| l.split_once(' '))
            .unwrap_or_else(|| panic!("hack/images/build.sh {args:?} printed {out:?}"));
        refs.push(r.to_string());
        archives.push(a.to_string());
    }
    let mut load = vec!["load"];
    load.extend(archives.iter().map(String::as_str));
    load.extend(["--state", state_dir.to_str().expect("state dir")]);
    script(&target, "hack/node.sh", &load);
    eprintln!(
        "images {refs:?} built and imported into the node in {:.0?}",
        started.elapsed()
    );
    Images {
        tag,
        upgrade_tag,
        app: refs[2].clone(),
    }
}

pub(crate) fn cargo(target: &Path, args: &[&str]) {
    let status = std::process::Command::new(env!("CARGO"))
        .args(args)
        .arg("--target-dir")
        .arg(target)
        .current_dir(repo())
        .stdout(Stdio::null())
        .status()
        .expect("running cargo");
    assert!(status.success(), "cargo {args:?} failed");
}

/// Runs one of the repository's scripts; returns its stdout (its log goes to stderr).
pub(crate) fn script(target: &Path, path: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(repo().join(path))
        .args(args)
        .env("CARGO_TARGET_DIR", target)
        .current_dir(repo())
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    assert!(out.status.success(), "{path} {args:?} failed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

// ---------------------------------------------------------------- tools

/// The same, off the async runtime (helm --wait and kubectl --wait take a while).
pub(crate) async fn tool_async(t: &'static str, args: Vec<String>) -> String {
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        tool(t, &args, None)
    })
    .await
    .expect("tool thread")
}

pub(crate) fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

// ---------------------------------------------------------------- what explains a failure

/// Held for a test's life. If the test panics it prints what explains the failure: every Pod of
/// the cluster, the status and events of the Pods in `namespaces`, and their containers' logs
/// (current and previous). Then, failed or not, it undoes whatever the test left installed.
pub(crate) struct Scene {
    pub(crate) namespaces: Vec<String>,
    /// Run on drop, in order, failures ignored.
    pub(crate) undo: Vec<Undo>,
    /// More kubectl commands whose output explains a failure (e.g. OLM's objects).
    pub(crate) explain: Vec<Vec<String>>,
}

pub(crate) enum Undo {
    /// A command: tool and arguments.
    Run(&'static str, Vec<String>),
    /// The Buckets and BucketAccesses of a namespace lose their finalizers (their operator is
    /// gone by then) and are deleted.
    Release(String),
}

impl Scene {
    pub(crate) fn new(namespaces: &[&str]) -> Scene {
        Scene {
            namespaces: namespaces.iter().map(|n| n.to_string()).collect(),
            undo: Vec::new(),
            explain: Vec::new(),
        }
    }

    pub(crate) fn run(&mut self, tool: &'static str, args: &[&str]) {
        self.undo.push(Undo::Run(tool, strings(args)));
    }

    pub(crate) fn print_diagnosis(&self) {
        let show = |title: &str, args: &[&str]| {
            let (_, out, err) = try_tool("kubectl", args, None);
            eprintln!("\n===== {title}\n{out}{err}");
        };
        for args in &self.explain {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            show(&format!("kubectl {}", args.join(" ")), &args);
        }
        show(
            "kubectl get pods -A -o wide",
            &["get", "pods", "-A", "-o", "wide"],
        );
        for ns in &self.namespaces {
            show(
                &format!("deployments, pdbs, leases and s3 objects in {ns}"),
                &[
                    "get",
                    "deployments,pdb,leases,buckets,bucketaccesses",
                    "-n",
                    ns,
                    "-o",
                    "wide",
                ],
            );
            show(
                &format!("Pods in {ns} (status)"),
                &["describe", "pods", "-n", ns],
            );
            show(
                &format!("events in {ns}"),
                &["get", "events", "-n", ns, "--sort-by", ".lastTimestamp"],
            );
            let (_, names, _) = try_tool("kubectl", &["get", "pods", "-n", ns, "-o", "name"], None);
            for pod in names.lines() {
                show(
                    &format!("logs of {ns}/{pod}"),
                    &["logs", "-n", ns, pod, "--all-containers", "--tail", "300"],
                );
                let (code, out, _) = try_tool(
                    "kubectl",
                    &[
                        "logs",
                        "-n",
                        ns,
                        pod,
                        "--all-containers",
                        "--previous",
                        "--tail",
                        "300",
                    ],
                    None,
                );
                if code == 0 && !out.trim().is_empty() {
                    eprintln!("\n===== previous logs of {ns}/{pod}\n{out}");
                }
            }
        }
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.print_diagnosis();
        }
        for u in &self.undo {
            match u {
                Undo::Run(t, args) => {
                    let args: Vec<&str> = args.iter().map(String::as_str).collect();
                    let _ = try_tool(t, &args, None);
                }
                Undo::Release(ns) => {
                    for kind in ["bucketaccesses.s3.operator.dev", "buckets.s3.operator.dev"] {
                        let (_, names, _) =
                            try_tool("kubectl", &["get", kind, "-n", ns, "-o", "name"], None);
                        for o in names.lines() {
                            let unblock = r#"{"metadata":{"finalizers":null}}"#;
                            let patch = ["patch", o, "-n", ns, "--type", "merge", "-p", unblock];
                            let _ = try_tool("kubectl", &patch, None);
                            let _ =
                                try_tool("kubectl", &["delete", o, "-n", ns, "--wait=false"], None);
                        }
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------- Kubernetes helpers

pub(crate) fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

pub(crate) fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default()
}

pub(crate) fn name_of<K: kube::Resource>(o: &K) -> String {
    o.meta().name.clone().unwrap_or_default()
}

/// The Pods matching `selector` that are not being deleted.
pub(crate) async fn live_pods(ns: &str, selector: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(admin().await, ns)
        .list(&ListParams::default().labels(selector))
        .await
        .expect("list pods")
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

/// Waits until Deployment `name` has rolled out `replicas` Pods, all of them (and no other)
/// Running and Ready; returns them. Ready comes from kubelet's readiness probe on /readyz.
pub(crate) async fn wait_rolled_out(ns: &str, name: &str, replicas: i32) -> Vec<Pod> {
    let deployments = Api::<Deployment>::namespaced(admin().await, ns);
    let selector = wait_for(
        &format!("Deployment {ns}/{name} to roll out {replicas} ready replicas"),
        T,
        || async {
            let d = deployments.get(name).await.ok()?;
            let s = d.status.as_ref()?;
            let done = s.observed_generation >= d.metadata.generation
                && s.replicas == Some(replicas)
                && s.updated_replicas == Some(replicas)
                && s.ready_replicas == Some(replicas)
                && s.available_replicas == Some(replicas);
            let labels = d.spec?.selector.match_labels?;
            done.then(|| {
                labels
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(",")
            })
        },
    )
    .await;
    let pods = wait_for(
        &format!("exactly {replicas} Running and Ready Pods of {ns}/{name}"),
        T,
        || async {
            let pods = live_pods(ns, &selector).await;
            (pods.len() == replicas as usize
                && pods.iter().all(|p| phase(p) == "Running" && is_ready(p)))
            .then_some(pods)
        },
    )
    .await;
    for p in &pods {
        let c = &p.spec.as_ref().expect("spec").containers[0];
        let probe = c.readiness_probe.as_ref().and_then(|r| r.http_get.as_ref());
        assert_eq!(
            probe.and_then(|g| g.path.as_deref()),
            Some("/readyz"),
            "{}: readiness comes from kubelet probing /readyz",
            name_of(p)
        );
        assert!(
            c.liveness_probe.is_some(),
            "{}: kubelet also checks liveness",
            name_of(p)
        );
        let restarts: i32 = p
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .map(|cs| cs.iter().map(|c| c.restart_count).sum())
            .unwrap_or_default();
        assert_eq!(restarts, 0, "{} restarted", name_of(p));
    }
    pods
}

/// An admin client that shows every refusal as it is (kube retries 429s by default).
pub(crate) async fn admin_without_retries() -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(&env().kubeconfig).expect("admin kubeconfig");
    let mut cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("kube config");
    cfg.default_retry = false;
    kube::Client::try_from(cfg).expect("kube client")
}

/// Waits until the Lease names one of `pods` as holder; returns it.
pub(crate) async fn wait_leader(ns: &str, lease: &str, pods: &[Pod]) -> String {
    let names: Vec<String> = pods.iter().map(name_of).collect();
    wait_for(
        &format!("the Lease {ns}/{lease} to name one of {names:?}"),
        T,
        || async {
            let h = lease_holder(ns, lease).await?;
            names.contains(&h).then_some(h)
        },
    )
    .await
}

/// The operator's AWS key pair for `cluster`: an IAM user with exactly the shipped operator
/// policy, under the permissions boundary an administrator installs first (what
/// `Identity::installed` makes; that helper also creates the chart's ServiceAccount, which
/// `helm install` would then refuse to adopt).
pub(crate) async fn operator_key(cluster: &str) -> (String, String) {
    create_boundary(cluster).await;
    iam_user_with_policy(
        &operator_user(cluster),
        "/",
        Some(&operator_policy(cluster)),
    )
    .await
}

/// The Secret the installation's Pods read their AWS key pair from.
pub(crate) const AWS_SECRET: &str = "s3-operator-aws";

pub(crate) async fn create_aws_secret(ns: &str, key: &(String, String)) {
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": AWS_SECRET},
        "stringData": {"AWS_ACCESS_KEY_ID": key.0, "AWS_SECRET_ACCESS_KEY": key.1},
    }))
    .unwrap();
    Api::<Secret>::namespaced(admin().await, ns)
        .create(&PostParams::default(), &secret)
        .await
        .expect("create the AWS Secret");
}

/// The operator container's env entries for that Secret.
pub(crate) fn aws_secret_env() -> Value {
    json!(
        ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"].map(|k| json!({
            "name": k,
            "valueFrom": {"secretKeyRef": {"name": AWS_SECRET, "key": k}},
        }))
    )
}

pub(crate) fn sample<T: serde::de::DeserializeOwned>(file: &str) -> T {
    let path = repo().join("config/samples").join(file);
    serde_yaml::from_str(&std::fs::read_to_string(&path).expect("sample")).expect("sample YAML")
}

/// What a watch of a Bucket and a BucketAccess saw that was not Ready, for objects that must stay
/// Ready meanwhile. A watch, not polls: a Ready=False that lasts less than a poll interval (an
/// upgrade's handover) still shows.
pub(crate) struct ReadyWatch {
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<Vec<String>>,
    /// One per object, sent once its watch has listed it.
    listed: Vec<tokio::sync::oneshot::Receiver<()>>,
}

impl ReadyWatch {
    pub(crate) fn start(ns: &str, bucket: &str, access: &str) -> ReadyWatch {
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let (ns, bucket, access) = (ns.to_string(), bucket.to_string(), access.to_string());
        let (b_listed, b_rx) = tokio::sync::oneshot::channel();
        let (a_listed, a_rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let client = admin().await;
            let buckets = Api::<Bucket>::namespaced(client.clone(), &ns);
            let accesses = Api::<BucketAccess>::namespaced(client, &ns);
            let (b, a) = tokio::join!(
                ready_transitions(buckets, "Bucket", &bucket, stopped.clone(), b_listed),
                ready_transitions(accesses, "BucketAccess", &access, stopped, a_listed),
            );
            b.into_iter().chain(a).collect()
        });
        ReadyWatch {
            stop,
            task,
            listed: vec![b_rx, a_rx],
        }
    }

    /// Waits until both watches have listed their object: a change from now on is seen.
    pub(crate) async fn listed(&mut self) {
        for rx in self.listed.drain(..) {
            tokio::time::timeout(T, rx)
                .await
                .expect("the ReadyWatch lists its objects")
                .expect("the ReadyWatch task runs");
        }
    }

    /// Stops the watch; every not-Ready state it saw, the state at the end included.
    pub(crate) async fn finish(self) -> Vec<String> {
        let _ = self.stop.send(true);
        self.task.await.expect("watch task")
    }
}

/// Watches the object `name` until `stop`; logs every change of its Ready (status, reason) and
/// returns the changes to a state that is not Ready/Available (absent included).
async fn ready_transitions<K>(
    api: Api<K>,
    what: &str,
    name: &str,
    mut stop: tokio::sync::watch::Receiver<bool>,
    listed_tx: tokio::sync::oneshot::Sender<()>,
) -> Vec<String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize,
    K: std::fmt::Debug + Send + 'static,
{
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let state = |o: Option<&K>| ready_of(o.map(|o| json!(o)["status"].clone()));
    let mut last: Option<Option<(String, String)>> = None;
    let mut not_ready = Vec::new();
    let mut record = |ready: Option<(String, String, String)>| {
        let key = ready.as_ref().map(|(s, r, _)| (s.clone(), r.clone()));
        if last.as_ref() == Some(&key) {
            return;
        }
        last = Some(key);
        eprintln!("ReadyWatch: {what} {name}: Ready {ready:?}");
        match ready {
            Some((s, r, _)) if s == "True" && r == "Available" => {}
            other => not_ready.push(format!("{what}: {other:?}")),
        }
    };
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = std::pin::pin!(watcher(api.clone(), cfg).default_backoff());
    let mut listed = false;
    let mut listed_tx = Some(listed_tx);
    loop {
        // Events already delivered are taken before the stop, so none is dropped at the end.
        let event = tokio::select! {
            biased;
            e = events.next() => e,
            _ = stop.changed() => break,
        };
        match event {
            None => break,
            Some(Ok(watcher::Event::Init)) => listed = false,
            Some(Ok(watcher::Event::InitApply(o) | watcher::Event::Apply(o))) => {
                listed = true;
                record(state(Some(&o)));
            }
            Some(Ok(watcher::Event::InitDone)) => {
                if !listed {
                    record(None);
                }
                if let Some(tx) = listed_tx.take() {
                    let _ = tx.send(());
                }
            }
            Some(Ok(watcher::Event::Delete(_))) => record(None),
            Some(Err(e)) => eprintln!("ReadyWatch: {what} {name}: {e} (the watch retries)"),
        }
    }
    // The watch may lag the server: the state at the stop counts too.
    let now = api.get_opt(name).await.expect("get the watched object");
    record(state(now.as_ref()));
    not_ready
}

/// A Ready=False that lasts a few milliseconds, far less than any poll interval, is seen by
/// `ReadyWatch`; so is the state at its end. No operator: the test writes the status itself,
/// under a scoped pass so no cluster-wide operator of another test acts on the objects.
#[tokio::test]
async fn ready_watch_sees_a_flip_between_polls() {
    let _pass = Pass::acquire(false).await;
    install_crds().await;
    let client = admin().await;
    let ns = namespace(&client, "readywatch").await;
    let buckets = Api::<Bucket>::namespaced(client.clone(), &ns);
    let accesses = Api::<BucketAccess>::namespaced(client, &ns);
    let status = |s: &str, reason: &str| {
        json!({"status": {"conditions": [{"type": "Ready", "status": s, "reason": reason,
            "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})
    };
    let set_bucket = |s: &'static str, reason: &'static str| {
        let (buckets, patch) = (buckets.clone(), status(s, reason));
        async move {
            buckets
                .patch_status("b", &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .expect("patch the Bucket status");
        }
    };
    buckets
        .create(&PostParams::default(), &bucket("b", json!({})))
        .await
        .unwrap();
    let a = crate::access::access(
        "a",
        json!({"bucketRef": {"name": "b"}, "permission": "ReadOnly"}),
    );
    accesses.create(&PostParams::default(), &a).await.unwrap();
    accesses
        .patch_status(
            "a",
            &PatchParams::default(),
            &Patch::Merge(&status("True", "Available")),
        )
        .await
        .unwrap();
    set_bucket("True", "Available").await;

    // Steady: nothing to report (over a second the watch is open, the window under test).
    let mut watch = ReadyWatch::start(&ns, "b", "a");
    watch.listed().await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(watch.finish().await, Vec::<String>::new());

    // A flip back within one round trip.
    let mut watch = ReadyWatch::start(&ns, "b", "a");
    watch.listed().await;
    set_bucket("False", "Progressing").await;
    set_bucket("True", "Available").await;
    let seen = watch.finish().await;
    assert!(
        seen.iter()
            .any(|s| s.starts_with("Bucket:") && s.contains("Progressing")),
        "{seen:?}"
    );

    // Not Ready when the watch stops, however soon: the final read catches it.
    let watch = ReadyWatch::start(&ns, "b", "a");
    accesses
        .patch_status(
            "a",
            &PatchParams::default(),
            &Patch::Merge(&status("False", "Denied")),
        )
        .await
        .unwrap();
    let seen = watch.finish().await;
    assert!(
        seen.iter()
            .any(|s| s.starts_with("BucketAccess:") && s.contains("Denied")),
        "{seen:?}"
    );
}

/// Buckets in the `watched` namespaces become Ready and get a bucket of installation `cluster`;
/// those in `unwatched` are left alone (no status, no finalizer, no bucket); deleting the watched
/// ones takes their buckets with them. `what` names the installation in failures.
pub(crate) async fn serves_exactly(
    what: &str,
    cluster: &str,
    watched: &[String],
    unwatched: &[String],
) {
    let started = Instant::now();
    // The unwatched Buckets first: by the time the watched ones are Ready, the operator has had
    // every chance to act on them.
    let client = admin().await;
    let name = format!("e2e-{}", random(5));
    for ns in unwatched.iter().chain(watched) {
        Api::<Bucket>::namespaced(client.clone(), ns)
            .create(
                &PostParams::default(),
                &bucket(&name, json!({"deletionPolicy": "Delete"})),
            )
            .await
            .unwrap();
    }
    for ns in watched {
        wait_reason(
            &Api::<Bucket>::namespaced(client.clone(), ns),
            &name,
            "Available",
            T,
        )
        .await;
    }
    eprintln!(
        "{what}: Buckets in {watched:?} Ready at {:.0?}",
        started.elapsed()
    );
    let until = Instant::now() + UNTOUCHED_FOR;
    loop {
        for ns in unwatched {
            let b = Api::<Bucket>::namespaced(client.clone(), ns)
                .get(&name)
                .await
                .unwrap();
            assert!(
                b.status.is_none(),
                "{what}: the Bucket in unwatched {ns} got a status: {:?}",
                b.status
            );
            assert!(
                b.metadata.finalizers.as_ref().is_none_or(|f| f.is_empty()),
                "{what}: the Bucket in unwatched {ns} got finalizers {:?}",
                b.metadata.finalizers
            );
        }
        if Instant::now() > until {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let of = |ns: &[String], inv: &crate::audit::Inventory| -> Vec<String> {
        inv.buckets
            .iter()
            .filter(|(_, t)| t.get(tags::NAMESPACE).is_some_and(|n| ns.contains(n)))
            .map(|(b, _)| b.clone())
            .collect()
    };
    let inv = inventory(cluster).await;
    assert_eq!(
        of(watched, &inv).len(),
        watched.len(),
        "{what}: one bucket per watched namespace: {:?}",
        inv.buckets
    );
    assert!(
        of(unwatched, &inv).is_empty(),
        "{what}: buckets for unwatched namespaces: {:?}",
        inv.buckets
    );

    // Clean up while the operator still runs: the watched Buckets (deletionPolicy Delete) take
    // their buckets with them; then the installation goes, its Pods included.
    for ns in watched.iter().chain(unwatched) {
        Api::<Bucket>::namespaced(client.clone(), ns)
            .delete(&name, &DeleteParams::default())
            .await
            .unwrap();
    }
    for ns in watched {
        let api = Api::<Bucket>::namespaced(client.clone(), ns);
        wait_for(&format!("the Bucket in {ns} to be deleted"), T, || async {
            api.get_opt(&name).await.ok()?.is_none().then_some(())
        })
        .await;
    }
    let inv = inventory(cluster).await;
    assert!(
        of(watched, &inv).is_empty(),
        "{what}: the deleted Buckets took their buckets with them: {:?}",
        inv.buckets
    );
}

/// Deletes every AWS resource of the installation `cluster` with the admin identity: what an
/// uninstall leaves behind (by design) must not outlive the test.
pub(crate) async fn purge_aws(cluster: &str) {
    let (s3, iam) = (admin_s3(), admin_iam());
    let inv = inventory(cluster).await;
    for name in inv.buckets.keys() {
        if let Ok(v) = s3.list_object_versions().bucket(name).send().await {
            for (key, version) in v
                .versions()
                .iter()
                .map(|o| (o.key(), o.version_id()))
                .chain(v.delete_markers().iter().map(|o| (o.key(), o.version_id())))
            {
                let _ = s3
                    .delete_object()
                    .bucket(name)
                    .key(key.unwrap_or_default())
                    .set_version_id(version.map(String::from))
                    .send()
                    .await;
            }
        }
        if let Ok(l) = s3.list_objects_v2().bucket(name).send().await {
            for o in l.contents() {
                let _ = s3
                    .delete_object()
                    .bucket(name)
                    .key(o.key().unwrap_or_default())
                    .send()
                    .await;
            }
        }
        s3.delete_bucket()
            .bucket(name)
            .send()
            .await
            .unwrap_or_else(|e| panic!("delete bucket {name}: {e:?}"));
    }
    for (user, p) in &inv.users {
        for k in &p.keys {
            let _ = iam
                .delete_access_key()
                .user_name(user)
                .access_key_id(k)
                .send()
                .await;
        }
        for policy in &p.inline_policies {
            let _ = iam
                .delete_user_policy()
                .user_name(user)
                .policy_name(policy)
                .send()
                .await;
        }
        iam.delete_user()
            .user_name(user)
            .send()
            .await
            .unwrap_or_else(|e| panic!("delete IAM user {user}: {e:?}"));
    }
}

/// The value of `leader_election_master_status` a Pod reports, scraped from its metrics port
/// over the node's bridge (the test runs on the node) with a token allowed to get /metrics.
pub(crate) async fn leader_metric(pod: &Pod, token: &str) -> Option<f64> {
    let ip = pod.status.as_ref()?.pod_ip.clone()?;
    let (status, body) = https_get(&format!("{ip}:8080"), "/metrics", Some(token)).await?;
    (status == 200).then(|| metric_sum(&body, "leader_election_master_status", &[]))
}

/// A ServiceAccount token bound to ClusterRole `role` (the chart's metrics reader).
pub(crate) async fn reader_token(ns: &str, role: &str) -> String {
    let client = admin().await;
    let token = service_account(&client, ns, "e2e-scraper", &[]).await;
    let binding = format!("{ns}-scraper");
    bind_cluster_role(&client, Some(&binding), role, ns, "e2e-scraper").await;
    token
}
