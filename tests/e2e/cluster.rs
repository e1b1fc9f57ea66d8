//! The operator as real Pods on the test node (`hack/env.sh up --node`, root): its image built
//! from the project's Dockerfile and imported into the node's containerd, then installed the way
//! users install it: `helm install` of the chart, and `kubectl apply -k` of each kustomize
//! overlay. Kubelet runs the Pods, probes them and enforces their security context; an
//! application Pod proves that a BucketAccess's Secret works with the AWS SDK's default chain.
//!
//! These tests need the node: without one they fail (never skip) and say how to start it.
//!
//! The installations here watch every namespace (the chart's default, the `cluster` overlay), and
//! the overlays use the fixed names they ship with (`s3-operator-system`, `team-a`, `team-b`), so
//! each test holds the harness's exclusive gate (`cluster_wide`): no other operator runs on the
//! same API server meanwhile, or a cluster-wide Pod would reconcile its objects.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, EvictParams, ListParams, ObjectMeta, PostParams};
use s3_operator::api::{Bucket, BucketAccess};
use s3_operator::aws::tags;
use serde_json::{Value, json};

use crate::audit::{audit, inventory};
use crate::support::*;

/// For a Pod to start, be probed Ready, or finish; for an object to become Ready.
const T: Duration = Duration::from_secs(180);
/// How long a Bucket outside an installation's namespaces is watched for any sign of it.
const UNTOUCHED_FOR: Duration = Duration::from_secs(10);
/// The operator image's repository (hack/images/build.sh operator).
const OPERATOR_REPO: &str = "localhost/s3op/s3-operator";
/// The chart's release name (its full name, since it contains the chart's name).
const RELEASE: &str = "s3-operator";
/// Where every kustomize overlay runs the operator.
const OVERLAY_NS: &str = "s3-operator-system";

// ---------------------------------------------------------------- the node and its images

struct Node {
    /// The state directory of `hack/env.sh` (`hack/node.sh load --state`).
    state_dir: PathBuf,
    /// moto as Pods reach it: the node's bridge address, relayed to moto on loopback.
    aws_endpoint: String,
}

/// The node of the environment, or a failure that says how to get one.
fn node() -> Node {
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

struct Images {
    /// The operator image's tag for installs, and a second tag of the same image for upgrades.
    tag: String,
    upgrade_tag: String,
    /// The application image (examples/bucket-app.rs).
    app: String,
}

static IMAGES: tokio::sync::OnceCell<Images> = tokio::sync::OnceCell::const_new();

/// Builds the operator and application images once per test binary and imports them into the
/// node's containerd.
async fn images(node: &Node) -> &'static Images {
    let state_dir = node.state_dir.clone();
    IMAGES
        .get_or_init(|| async move {
            tokio::task::spawn_blocking(move || build_images(&state_dir))
                .await
                .expect("building the images")
        })
        .await
}

fn build_images(state_dir: &Path) -> Images {
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

fn cargo(target: &Path, args: &[&str]) {
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
fn script(target: &Path, path: &str, args: &[&str]) -> String {
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
async fn tool_async(t: &'static str, args: Vec<String>) -> String {
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        tool(t, &args, None)
    })
    .await
    .expect("tool thread")
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

// ---------------------------------------------------------------- what explains a failure

/// Held for a test's life. If the test panics it prints what explains the failure: every Pod of
/// the cluster, the status and events of the Pods in `namespaces`, and their containers' logs
/// (current and previous). Then, failed or not, it undoes whatever the test left installed.
struct Scene {
    namespaces: Vec<String>,
    /// Run on drop, in order, failures ignored.
    undo: Vec<Undo>,
}

enum Undo {
    /// A command: tool and arguments.
    Run(&'static str, Vec<String>),
    /// The Buckets and BucketAccesses of a namespace lose their finalizers (their operator is
    /// gone by then) and are deleted.
    Release(String),
}

impl Scene {
    fn new(namespaces: &[&str]) -> Scene {
        Scene {
            namespaces: namespaces.iter().map(|n| n.to_string()).collect(),
            undo: Vec::new(),
        }
    }

    fn run(&mut self, tool: &'static str, args: &[&str]) {
        self.undo.push(Undo::Run(tool, strings(args)));
    }

    fn print_diagnosis(&self) {
        let show = |title: &str, args: &[&str]| {
            let (_, out, err) = try_tool("kubectl", args, None);
            eprintln!("\n===== {title}\n{out}{err}");
        };
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

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default()
}

fn name_of<K: kube::Resource>(o: &K) -> String {
    o.meta().name.clone().unwrap_or_default()
}

/// The Pods matching `selector` that are not being deleted.
async fn live_pods(ns: &str, selector: &str) -> Vec<Pod> {
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
async fn wait_rolled_out(ns: &str, name: &str, replicas: i32) -> Vec<Pod> {
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
async fn admin_without_retries() -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(&env().kubeconfig).expect("admin kubeconfig");
    let mut cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("kube config");
    cfg.default_retry = false;
    kube::Client::try_from(cfg).expect("kube client")
}

async fn lease_holder(ns: &str, lease: &str) -> Option<String> {
    Api::<Lease>::namespaced(admin().await, ns)
        .get_opt(lease)
        .await
        .ok()??
        .spec?
        .holder_identity
        .filter(|h| !h.is_empty())
}

/// Waits until the Lease names one of `pods` as holder; returns it.
async fn wait_leader(ns: &str, lease: &str, pods: &[Pod]) -> String {
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

async fn ensure_namespace(name: &str) {
    let api = Api::<Namespace>::all(admin().await);
    if api.get_opt(name).await.expect("get namespace").is_none() {
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let _ = api.create(&PostParams::default(), &ns).await;
    }
}

/// The operator's AWS key pair for `cluster`: an IAM user with exactly the shipped operator
/// policy, under the permissions boundary an administrator installs first (what
/// `Identity::installed` makes; that helper also creates the chart's ServiceAccount, which
/// `helm install` would then refuse to adopt).
async fn operator_key(cluster: &str) -> (String, String) {
    create_boundary(cluster).await;
    iam_user_with_policy(
        &format!("s3-operator-{cluster}"),
        "/",
        Some(&operator_policy(cluster)),
    )
    .await
}

/// The Secret the installation's Pods read their AWS key pair from.
const AWS_SECRET: &str = "s3-operator-aws";

async fn create_aws_secret(ns: &str, key: &(String, String)) {
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
fn aws_secret_env() -> Value {
    json!(
        ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"].map(|k| json!({
            "name": k,
            "valueFrom": {"secretKeyRef": {"name": AWS_SECRET, "key": k}},
        }))
    )
}

fn sample<T: serde::de::DeserializeOwned>(file: &str) -> T {
    let path = repo().join("config/samples").join(file);
    serde_yaml::from_str(&std::fs::read_to_string(&path).expect("sample")).expect("sample YAML")
}

fn bucket(name: &str) -> Bucket {
    serde_json::from_value(json!({
        "apiVersion": "s3.operator.dev/v1alpha1",
        "kind": "Bucket",
        "metadata": {"name": name},
        "spec": {"deletionPolicy": "Delete"},
    }))
    .unwrap()
}

/// Sets of what a watcher saw that was not Ready, for objects that must stay Ready meanwhile.
struct ReadyWatch {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Vec<String>>,
}

impl ReadyWatch {
    fn start(ns: &str, bucket: &str, access: &str) -> ReadyWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let (ns, bucket, access, flag) = (
            ns.to_string(),
            bucket.to_string(),
            access.to_string(),
            stop.clone(),
        );
        let task = tokio::spawn(async move {
            let client = admin().await;
            let buckets = Api::<Bucket>::namespaced(client.clone(), &ns);
            let accesses = Api::<BucketAccess>::namespaced(client, &ns);
            let mut seen = Vec::new();
            while !flag.load(Ordering::SeqCst) {
                let b = buckets
                    .get(&bucket)
                    .await
                    .ok()
                    .map(|o| json!(o)["status"].clone());
                let a = accesses
                    .get(&access)
                    .await
                    .ok()
                    .map(|o| json!(o)["status"].clone());
                for (what, status) in [("Bucket", b), ("BucketAccess", a)] {
                    match ready_of(status) {
                        Some((s, r, _)) if s == "True" && r == "Available" => {}
                        other => seen.push(format!("{what}: {other:?}")),
                    }
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            seen
        });
        ReadyWatch { stop, task }
    }

    async fn finish(self) -> Vec<String> {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.expect("watch task")
    }
}

/// Deletes every AWS resource of the installation `cluster` with the admin identity: what an
/// uninstall leaves behind (by design) must not outlive the test.
async fn purge_aws(cluster: &str) {
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
async fn leader_metric(pod: &Pod, token: &str) -> Option<f64> {
    let ip = pod.status.as_ref()?.pod_ip.clone()?;
    let (status, body) = https_get(&format!("{ip}:8080"), "/metrics", Some(token)).await?;
    (status == 200).then(|| metric_sum(&body, "leader_election_master_status", &[]))
}

/// A ServiceAccount token bound to ClusterRole `role` (the chart's metrics reader).
async fn reader_token(ns: &str, role: &str) -> String {
    let client = admin().await;
    let token = service_account(&client, ns, "e2e-scraper", &[]).await;
    let binding = format!("{ns}-scraper");
    bind_cluster_role(&client, Some(&binding), role, ns, "e2e-scraper").await;
    token
}

// ---------------------------------------------------------------- Helm

/// `helm install` of the chart with the image built here: two replicas probed Ready by kubelet,
/// one leader, the samples Ready and an application Pod using their Secret; then the PDB, an
/// upgrade, a leader handover and the uninstall.
#[tokio::test]
async fn helm_chart_runs_as_pods_on_a_real_node() {
    let node = node();
    // Release `s3-operator` names its metrics reader `s3-operator-metrics-reader`, as the bundle
    // and the overlays do, and uninstalling deletes it.
    let _names = PACKAGE_NAMES.write().await;
    let _turn = cluster_wide().await;
    let started = Instant::now();
    let images = images(&node).await;
    let client = admin().await;
    let ns = namespace(&client, "helm-pods").await;
    let team = namespace(&client, "helm-team").await;
    let cluster = format!("h{}", random(6));
    let mut scene = Scene::new(&[&ns, &team]);
    scene.run(
        "helm",
        &[
            "uninstall",
            RELEASE,
            "-n",
            &ns,
            "--wait",
            "--timeout",
            "90s",
        ],
    );
    scene.undo.push(Undo::Release(team.clone()));
    scene.run(
        "kubectl",
        &["delete", "namespace", &ns, &team, "--wait=false"],
    );
    let binding = format!("{ns}-scraper");
    scene.run(
        "kubectl",
        &[
            "delete",
            "clusterrolebinding",
            &binding,
            "--ignore-not-found",
        ],
    );

    // The operator's key pair reaches its Pods only through a Secret and the chart's extraEnv.
    let key = operator_key(&cluster).await;
    create_aws_secret(&ns, &key).await;
    let values = |tag: &str| {
        let v = json!({
            "image": {"repository": OPERATOR_REPO, "tag": tag, "pullPolicy": "Never"},
            "replicaCount": 2,
            "clusterName": cluster,
            // Its own namespace only: objects other tests left elsewhere are no business of this
            // installation (the cluster overlay's test runs one that watches everything).
            "watchNamespaces": [team],
            "logLevel": "info,s3_operator=debug",
            // moto on the node's bridge address, which Pods reach.
            "aws": {"endpointUrl": node.aws_endpoint, "region": env().region},
            "extraEnv": aws_secret_env(),
        });
        let path = logs_dir().join(format!("helm-values-{cluster}-{tag}.yaml"));
        std::fs::write(&path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
        path.display().to_string()
    };
    let helm = |verb: &str, tag: &str| {
        strings(&[
            verb,
            RELEASE,
            "charts/s3-operator",
            "-n",
            &ns,
            "-f",
            &values(tag),
            "--wait",
            "--timeout",
            "5m",
        ])
    };
    tool_async("helm", helm("install", &images.tag)).await;
    eprintln!("helm install --wait: done at {:.0?}", started.elapsed());

    // Two replicas, Running and probed Ready, exactly one of them leading.
    let pods = wait_rolled_out(&ns, RELEASE, 2).await;
    for p in &pods {
        let c = &p.spec.as_ref().unwrap().containers[0];
        assert_eq!(
            c.image.as_deref(),
            Some(format!("{OPERATOR_REPO}:{}", images.tag).as_str())
        );
    }
    let lease = format!("{RELEASE}-leader");
    let leader = wait_leader(&ns, &lease, &pods).await;
    let token = reader_token(&ns, &format!("{RELEASE}-metrics-reader")).await;
    let statuses = wait_for("both replicas' leader metric", T, || async {
        let mut v = Vec::new();
        for p in &pods {
            v.push((name_of(p), leader_metric(p, &token).await?));
        }
        Some(v)
    })
    .await;
    let leading: Vec<&String> = statuses
        .iter()
        .filter(|(_, v)| *v == 1.0)
        .map(|(n, _)| n)
        .collect();
    assert_eq!(
        leading,
        [&leader],
        "exactly the Lease holder reports leadership: {statuses:?}"
    );

    // The samples become Ready in a team namespace.
    let buckets = Api::<Bucket>::namespaced(client.clone(), &team);
    let accesses = Api::<BucketAccess>::namespaced(client.clone(), &team);
    let b: Bucket = sample("s3_v1alpha1_bucket.yaml");
    let a: BucketAccess = sample("s3_v1alpha1_bucketaccess.yaml");
    let (b_name, a_name) = (name_of(&b), name_of(&a));
    buckets.create(&PostParams::default(), &b).await.unwrap();
    accesses.create(&PostParams::default(), &a).await.unwrap();
    wait_reason(&buckets, &b_name, "Available", T).await;
    wait_reason(&accesses, &a_name, "Available", T).await;
    let s3_name = buckets
        .get(&b_name)
        .await
        .unwrap()
        .status
        .and_then(|s| s.bucket_name)
        .expect("status.bucketName");
    let secret_name = accesses
        .get(&a_name)
        .await
        .unwrap()
        .status
        .and_then(|s| s.secret_name)
        .expect("status.secretName");
    eprintln!("samples Ready at {:.0?}", started.elapsed());

    // An application takes the Secret as it is and writes through the SDK's default chain.
    let app_key = format!("e2e/{}.txt", random(6));
    run_app(&team, "bucket-app", &images.app, &secret_name, &app_key).await;
    let got = admin_s3()
        .get_object()
        .bucket(&s3_name)
        .key(&app_key)
        .send()
        .await
        .unwrap_or_else(|e| panic!("the app's object {s3_name}/{app_key}: {e:?}"));
    let body = got.body.collect().await.unwrap().into_bytes();
    assert!(
        String::from_utf8_lossy(&body).starts_with("written by bucket-app"),
        "{body:?}"
    );
    eprintln!("application Pod succeeded at {:.0?}", started.elapsed());

    // The PodDisruptionBudget: one eviction allowed, the next refused until the replacement is
    // Ready.
    pdb_allows_one_eviction(&ns, &pods, &leader).await;
    let pods = wait_rolled_out(&ns, RELEASE, 2).await;
    eprintln!("PDB checked at {:.0?}", started.elapsed());

    // helm upgrade to another tag rolls both replicas while the objects stay Ready.
    let before: Vec<String> = pods.iter().map(name_of).collect();
    let watch = ReadyWatch::start(&team, &b_name, &a_name);
    tool_async("helm", helm("upgrade", &images.upgrade_tag)).await;
    let pods = wait_rolled_out(&ns, RELEASE, 2).await;
    let not_ready = watch.finish().await;
    assert!(
        not_ready.is_empty(),
        "the objects stopped being Ready during the upgrade: {not_ready:?}"
    );
    for p in &pods {
        assert!(
            !before.contains(&name_of(p)),
            "{} was not replaced by the upgrade",
            name_of(p)
        );
        let c = &p.spec.as_ref().unwrap().containers[0];
        assert_eq!(
            c.image.as_deref(),
            Some(format!("{OPERATOR_REPO}:{}", images.upgrade_tag).as_str())
        );
    }
    let leader = wait_leader(&ns, &lease, &pods).await;
    wait_reason(&buckets, &b_name, "Available", T).await;
    wait_reason(&accesses, &a_name, "Available", T).await;
    let problems = audit(&cluster, std::slice::from_ref(&team)).await;
    assert!(problems.is_empty(), "after the upgrade: {problems:#?}");
    let inv = inventory(&cluster).await;
    assert_eq!(inv.buckets.len(), 1, "one bucket: {:?}", inv.buckets.keys());
    assert_eq!(inv.users.len(), 1, "one IAM user: {:?}", inv.users.keys());
    eprintln!(
        "helm upgrade rolled both replicas at {:.0?}",
        started.elapsed()
    );

    // Deleting the leader hands over: it releases the Lease on SIGTERM and the standby (or, if
    // it is quicker, the leader's replacement Pod) takes it.
    let standby = pods
        .iter()
        .map(name_of)
        .find(|n| *n != leader)
        .expect("a standby");
    let deleted = Instant::now();
    Api::<Pod>::namespaced(client.clone(), &ns)
        .delete(&leader, &DeleteParams::default())
        .await
        .unwrap();
    let holder = wait_for(
        &format!("the Lease to pass from {leader} to another replica"),
        Duration::from_secs(30),
        || async { lease_holder(&ns, &lease).await.filter(|h| *h != leader) },
    )
    .await;
    eprintln!(
        "leader {leader} deleted: {holder} ({}) took the Lease after {:.1?}",
        if holder == standby {
            "the standby"
        } else {
            "its replacement"
        },
        deleted.elapsed()
    );
    wait_rolled_out(&ns, RELEASE, 2).await;
    assert_eq!(
        lease_holder(&ns, &lease).await.as_deref(),
        Some(holder.as_str()),
        "leadership stays put once handed over"
    );

    // helm uninstall: the chart's README says Helm never deletes the CRDs of crds/. The Buckets
    // and BucketAccesses are the users' objects, not the release's, so they stay, and so do the
    // bucket and its data (nothing deletes a bucket but the operator acting on a deleted Bucket).
    tool_async(
        "helm",
        strings(&["uninstall", RELEASE, "-n", &ns, "--wait", "--timeout", "2m"]),
    )
    .await;
    wait_for("the operator Pods to be gone", T, || async {
        let left = Api::<Pod>::namespaced(admin().await, &ns)
            .list(&ListParams::default().labels(&format!("app.kubernetes.io/instance={RELEASE}")))
            .await
            .ok()?;
        left.items.is_empty().then_some(())
    })
    .await;
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    for crd in ["buckets.s3.operator.dev", "bucketaccesses.s3.operator.dev"] {
        let c = crds.get_opt(crd).await.unwrap();
        assert!(
            c.is_some_and(|c| c.metadata.deletion_timestamp.is_none()),
            "the CRD {crd} stays after helm uninstall"
        );
    }
    let kept = buckets.get(&b_name).await.expect("the Bucket stays");
    assert!(kept.metadata.deletion_timestamp.is_none());
    assert_eq!(
        kept.status.and_then(|s| s.bucket_name).as_deref(),
        Some(s3_name.as_str())
    );
    accesses.get(&a_name).await.expect("the BucketAccess stays");
    assert!(bucket_exists(&s3_name).await, "the bucket {s3_name} stays");
    let data = admin_s3()
        .get_object()
        .bucket(&s3_name)
        .key(&app_key)
        .send()
        .await;
    assert!(data.is_ok(), "the app's object stays: {data:?}");
    eprintln!("helm uninstall checked at {:.0?}", started.elapsed());

    // What the uninstall left by design goes now, so no other test meets it.
    purge_aws(&cluster).await;
    drop(scene);
    eprintln!("helm test done in {:.0?}", started.elapsed());
}

/// Runs the application image as a non-root Pod with the BucketAccess's Secret as its whole
/// environment (`envFrom`); waits for it to succeed.
async fn run_app(ns: &str, name: &str, image: &str, secret: &str, key: &str) {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "bucket-app"}},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": false,
            "enableServiceLinks": false,
            "securityContext": {
                "runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [{
                "name": "app",
                "image": image,
                "imagePullPolicy": "Never",
                "args": [key],
                "envFrom": [{"secretRef": {"name": secret}}],
                "securityContext": {
                    "allowPrivilegeEscalation": false,
                    "readOnlyRootFilesystem": true,
                    "capabilities": {"drop": ["ALL"]},
                },
            }],
        },
    }))
    .unwrap();
    let api = Api::<Pod>::namespaced(admin().await, ns);
    api.create(&PostParams::default(), &pod).await.unwrap();
    let done = wait_for(
        &format!("the application Pod {ns}/{name} to finish"),
        T,
        || async {
            let p = api.get(name).await.ok()?;
            matches!(phase(&p), "Succeeded" | "Failed").then_some(p)
        },
    )
    .await;
    let (_, logs, _) = try_tool("kubectl", &["logs", "-n", ns, name], None);
    assert_eq!(
        phase(&done),
        "Succeeded",
        "the application Pod failed; its log:\n{logs}"
    );
    eprintln!("application Pod log:\n{logs}");
}

/// Evicting one replica is allowed; evicting the other before the replacement is Ready would
/// leave none, and the PodDisruptionBudget refuses it with 429.
async fn pdb_allows_one_eviction(ns: &str, pods: &[Pod], leader: &str) {
    let client = admin().await;
    let pdbs = Api::<PodDisruptionBudget>::namespaced(client.clone(), ns);
    wait_for("the PDB to allow one disruption", T, || async {
        let p = pdbs.get(RELEASE).await.ok()?;
        let s = p.status?;
        (s.observed_generation >= p.metadata.generation
            && s.current_healthy == 2
            && s.disruptions_allowed == 1)
            .then_some(())
    })
    .await;
    // The client's default retries would wait out a 429 until the replacement is Ready.
    let api = Api::<Pod>::namespaced(admin_without_retries().await, ns);
    let standby = pods
        .iter()
        .map(name_of)
        .find(|n| n != leader)
        .expect("a standby");
    api.evict(&standby, &EvictParams::default())
        .await
        .unwrap_or_else(|e| panic!("evicting {standby} (the budget allows one): {e:?}"));
    match api.evict(leader, &EvictParams::default()).await {
        Err(kube::Error::Api(s)) if s.code == 429 => {
            eprintln!("second eviction refused: {}", s.message)
        }
        other => panic!("evicting {leader} as well must be refused with 429, got {other:?}"),
    }
    let p = api.get(leader).await.expect("the leader is still there");
    assert!(
        p.metadata.deletion_timestamp.is_none(),
        "the refused eviction deleted nothing"
    );
}

// ---------------------------------------------------------------- kustomize

/// `kubectl apply -k` of a kustomization that uses `overlay` as its base and sets only what this
/// machine needs: the image built here (never pulled), the cluster name, moto's address and the
/// AWS key pair from a Secret. Its Pods run and become Ready, and it serves exactly its
/// namespaces: a Bucket in `watched` becomes Ready, one in each of `unwatched` is never touched.
async fn overlay_runs(overlay: &str, watched: &[String], unwatched: &[String]) {
    let node = node();
    // The overlays' fixed names are shared with packaging.rs's kustomize and OLM tests: first
    // that lock, then the gate, as those tests take them.
    let _names = PACKAGE_NAMES.write().await;
    let _turn = cluster_wide().await;
    let started = Instant::now();
    let images = images(&node).await;
    for kind in ["servicemonitors", "prometheusrules"] {
        apply_crds(
            &Path::new(&tools_bin()).join(format!("../crds/monitoring.coreos.com_{kind}.yaml")),
        )
        .await;
    }
    install_crds().await;
    for ns in watched.iter().chain(unwatched) {
        ensure_namespace(ns).await;
    }
    let cluster = format!("k{}", random(6));
    let key = operator_key(&cluster).await;

    let dir = logs_dir().join(format!("kustomize-{overlay}-{cluster}"));
    std::fs::create_dir_all(&dir).unwrap();
    let mut manager_env = vec![
        json!({"name": "CLUSTER_NAME", "value": cluster}),
        json!({"name": "AWS_ENDPOINT_URL", "value": node.aws_endpoint}),
        json!({"name": "RUST_LOG", "value": "info,s3_operator=debug"}),
    ];
    manager_env.extend(aws_secret_env().as_array().unwrap().iter().cloned());
    let patch = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "s3-operator"},
        "spec": {"template": {"spec": {"containers": [{
            "name": "manager",
            "imagePullPolicy": "Never",
            "env": manager_env,
        }]}}},
    });
    let kustomization = json!({
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [
            relative(&dir, &repo().join("config/overlays").join(overlay)),
            "aws-secret.yaml",
        ],
        "images": [{
            "name": "ghcr.io/s3-operator/s3-operator",
            "newName": OPERATOR_REPO,
            "newTag": images.tag,
        }],
        "patches": [{
            "target": {"kind": "Deployment", "name": "s3-operator"},
            "patch": serde_json::to_string(&patch).unwrap(),
        }],
    });
    std::fs::write(
        dir.join("kustomization.yaml"),
        serde_json::to_string_pretty(&kustomization).unwrap(),
    )
    .unwrap();
    let secret = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": AWS_SECRET, "namespace": OVERLAY_NS},
        "stringData": {"AWS_ACCESS_KEY_ID": key.0, "AWS_SECRET_ACCESS_KEY": key.1},
    });
    std::fs::write(
        dir.join("aws-secret.yaml"),
        serde_json::to_string(&secret).unwrap(),
    )
    .unwrap();
    // What the test removes afterwards: everything but the CRDs (shared with every other test)
    // and the Namespace (the next overlay installs into it again).
    let dir_s = dir.display().to_string();
    let rendered = tool("kustomize", &["build", &dir_s], None);
    // The Deployment first: its Pods still have their RBAC to release the Lease as they stop.
    let mut removable: Vec<Value> = serde_yaml::Deserializer::from_str(&rendered)
        .map(|d| <Value as serde::Deserialize>::deserialize(d).expect("YAML"))
        .filter(|d| {
            !["CustomResourceDefinition", "Namespace"].contains(&d["kind"].as_str().unwrap_or(""))
        })
        .collect();
    removable.sort_by_key(|d| d["kind"] != "Deployment");
    let removable: Vec<String> = removable
        .iter()
        .map(|d| format!("---\n{}", serde_yaml::to_string(d).unwrap()))
        .collect();
    let removable_path = dir.join("operator.yaml");
    std::fs::write(&removable_path, removable.concat()).unwrap();

    let mut all_ns: Vec<&str> = vec![OVERLAY_NS];
    all_ns.extend(watched.iter().chain(unwatched).map(String::as_str));
    let mut scene = Scene::new(&all_ns);
    let removable_s = removable_path.display().to_string();
    scene.run(
        "kubectl",
        &[
            "delete",
            "-f",
            &removable_s,
            "--ignore-not-found",
            "--cascade=foreground",
            "--wait",
            "--timeout",
            "90s",
        ],
    );
    for ns in watched.iter().chain(unwatched) {
        scene.undo.push(Undo::Release(ns.clone()));
    }

    tool_async("kubectl", strings(&["apply", "-k", &dir_s])).await;
    let pods = wait_rolled_out(OVERLAY_NS, "s3-operator", 2).await;
    for p in &pods {
        let c = &p.spec.as_ref().unwrap().containers[0];
        assert_eq!(
            c.image.as_deref(),
            Some(format!("{OPERATOR_REPO}:{}", images.tag).as_str())
        );
    }
    wait_leader(OVERLAY_NS, "s3-operator-leader", &pods).await;
    eprintln!(
        "{overlay}: 2 Pods Ready, one leader at {:.0?}",
        started.elapsed()
    );

    // The unwatched Buckets first: by the time the watched ones are Ready, the operator has had
    // every chance to act on them.
    let client = admin().await;
    let name = format!("e2e-{}", random(5));
    for ns in unwatched.iter().chain(watched) {
        Api::<Bucket>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &bucket(&name))
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
        "{overlay}: Buckets in {watched:?} Ready at {:.0?}",
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
                "{overlay}: the Bucket in unwatched {ns} got a status: {:?}",
                b.status
            );
            assert!(
                b.metadata.finalizers.as_ref().is_none_or(|f| f.is_empty()),
                "{overlay}: the Bucket in unwatched {ns} got finalizers {:?}",
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
    let inv = inventory(&cluster).await;
    assert_eq!(
        of(watched, &inv).len(),
        watched.len(),
        "{overlay}: one bucket per watched namespace: {:?}",
        inv.buckets
    );
    assert!(
        of(unwatched, &inv).is_empty(),
        "{overlay}: buckets for unwatched namespaces: {:?}",
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
    let inv = inventory(&cluster).await;
    assert!(
        of(watched, &inv).is_empty(),
        "{overlay}: the deleted Buckets took their buckets with them: {:?}",
        inv.buckets
    );
    tool_async(
        "kubectl",
        strings(&[
            "delete",
            "-f",
            &removable_s,
            "--cascade=foreground",
            "--wait",
            "--timeout",
            "2m",
        ]),
    )
    .await;
    wait_for(
        &format!("{overlay}: the operator Pods to be gone"),
        T,
        || async {
            live_pods(OVERLAY_NS, "app.kubernetes.io/name=s3-operator")
                .await
                .is_empty()
                .then_some(())
        },
    )
    .await;
    scene.undo.clear();
    drop(scene);
    eprintln!("{overlay}: done in {:.0?}", started.elapsed());
}

/// `to` as a path relative to the directory `from` (kustomize refuses absolute paths).
fn relative(from: &Path, to: &Path) -> String {
    let (from, to) = (
        from.canonicalize().expect("from"),
        to.canonicalize().expect("to"),
    );
    let common = from
        .components()
        .zip(to.components())
        .take_while(|(a, b)| a == b)
        .count();
    let mut rel = PathBuf::new();
    for _ in from.components().skip(common) {
        rel.push("..");
    }
    rel.extend(to.components().skip(common));
    rel.display().to_string()
}

#[tokio::test]
async fn kustomize_cluster_overlay_runs_as_pods() {
    node();
    let client = admin().await;
    let a = namespace(&client, "kz-cluster-a").await;
    let b = namespace(&client, "kz-cluster-b").await;
    overlay_runs("cluster", &[a, b], &[]).await;
}

#[tokio::test]
async fn kustomize_namespaces_overlay_runs_as_pods() {
    node();
    let client = admin().await;
    let other = namespace(&client, "kz-ns-other").await;
    overlay_runs("namespaces", &["team-a".into(), "team-b".into()], &[other]).await;
}

#[tokio::test]
async fn kustomize_own_namespace_overlay_runs_as_pods() {
    node();
    let client = admin().await;
    let other = namespace(&client, "kz-own-other").await;
    overlay_runs(
        "own-namespace",
        &[OVERLAY_NS.into()],
        &[other, "team-a".into()],
    )
    .await;
}
