//! The chart's ServiceMonitor and PrometheusRule for real: prometheus-operator (from its Go
//! module, `hack/monitoring.sh install`) runs on the test node and turns a Prometheus object into
//! a Prometheus server (also built from its Go module, in a locally built image) that discovers
//! the operator's Pods through the chart's metrics Service, scrapes them over HTTPS with its own
//! ServiceAccount token, and loads the chart's alert rules. The test asks that Prometheus, over
//! its HTTP API, what it scrapes, what it stored and which rules it loaded.
//!
//! Needs the node (`hack/env.sh up --node`): without one it fails (never skips).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use s3_operator::api::Bucket;
use serde_json::{Value, json};

use crate::node::*;
use crate::support::*;

/// The release: its cluster-scoped names (`mon-s3-operator-metrics-reader`, ...) are its own, and
/// it contains "s3-operator", which the alerts' `job=~".*s3-operator.*"` needs.
const RELEASE: &str = "mon-s3-operator";
/// The Prometheus object (its StatefulSet is `prometheus-<name>`).
const PROMETHEUS: &str = "s3op";
/// Quick scrapes and rule evaluations, so the test does not wait for the chart's 30s default.
const INTERVAL: &str = "5s";

/// Prometheus's version, pinned in hack/lib.sh (hack/images/build.sh prometheus tags the image
/// with it). Told to prometheus-operator, which writes only flags and config that version
/// understands. Built from its Go module: Debian's Prometheus has no Kubernetes discovery.
fn prometheus_version() -> String {
    let lib = std::fs::read_to_string(repo().join("hack/lib.sh")).expect("hack/lib.sh");
    lib.lines()
        .find_map(|l| l.strip_prefix("PROMETHEUS_VERSION=\""))
        .and_then(|v| v.split('"').next())
        .expect("PROMETHEUS_VERSION in hack/lib.sh")
        .to_string()
}

/// The Prometheus image, once prometheus-operator is installed; installed once per test binary
/// and left running (`hack/monitoring.sh uninstall` removes it).
static PROMETHEUS_IMAGE: tokio::sync::OnceCell<String> = tokio::sync::OnceCell::const_new();

async fn prometheus_operator(node: &Node) -> &'static str {
    PROMETHEUS_IMAGE
        .get_or_init(|| async {
            let started = Instant::now();
            let out = monitoring_sh(node, "install").await;
            let image = out.lines().last().unwrap_or_default().trim().to_string();
            assert!(
                image.starts_with("localhost/s3op/prometheus:"),
                "hack/monitoring.sh install printed {out:?}"
            );
            eprintln!("prometheus-operator installed in {:.0?}", started.elapsed());
            image
        })
        .await
}

/// Runs `hack/monitoring.sh VERB` against the node's cluster; returns its stdout.
async fn monitoring_sh(node: &Node, verb: &'static str) -> String {
    let state_dir = node.state_dir.clone();
    tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new(repo().join("hack/monitoring.sh"))
            .arg(verb)
            .env("KUBECONFIG", &env().kubeconfig)
            .env("S3OP_ENV_DIR", &state_dir)
            .current_dir(repo())
            .stderr(std::process::Stdio::inherit())
            .output()
            .expect("running hack/monitoring.sh");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "hack/monitoring.sh {verb} failed:\n{stdout}"
        );
        stdout
    })
    .await
    .expect("hack/monitoring.sh thread")
}

/// On a failure, what prometheus-operator saw: its Pods and logs, the Prometheus objects and
/// their StatefulSets, events. Declared after the `Scene`, so it prints before the undo runs.
struct MonitoringStatus(std::path::PathBuf);

impl Drop for MonitoringStatus {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let out = std::process::Command::new(repo().join("hack/monitoring.sh"))
                .arg("status")
                .env("KUBECONFIG", &env().kubeconfig)
                .env("S3OP_ENV_DIR", &self.0)
                .output();
            if let Ok(o) = out {
                eprintln!(
                    "\n===== hack/monitoring.sh status\n{}{}",
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                );
            }
        }
    }
}

/// The namespaces of one run: the release, the team namespace it watches, Prometheus's.
struct Namespaces {
    release: String,
    team: String,
    prometheus: String,
}

/// The chart with the ServiceMonitor and PrometheusRule on: Prometheus, from another namespace,
/// finds the two operator Pods through the metrics Service and scrapes both (standbys serve
/// /metrics too), stores `controller_runtime_reconcile_total` with the leader's Bucket
/// reconcile in it, and loads exactly the chart's alerts.
#[tokio::test]
async fn prometheus_scrapes_the_chart_servicemonitor_and_loads_its_rules() {
    let node = node();
    // Its operator watches only the team namespace: no cluster-wide operator of another test may
    // reconcile the Bucket there meanwhile.
    let _turn = cluster_wide().await;
    let started = Instant::now();
    let prometheus_image = prometheus_operator(&node).await;
    let images = images(&node).await;
    let client = admin().await;
    let ns = Namespaces {
        release: namespace(&client, "mon").await,
        team: namespace(&client, "mon-team").await,
        prometheus: namespace(&client, "mon-prom").await,
    };
    let cluster = format!("m{}", random(6));
    let scene = scene(&ns);
    let _status = MonitoringStatus(node.state_dir.clone());

    let key = operator_key(&cluster).await;
    create_aws_secret(&ns.release, &key).await;
    install_chart(&node, &ns, &cluster, &images.tag).await;
    let pods = wait_rolled_out(&ns.release, RELEASE, 2).await;
    let leader = wait_leader(&ns.release, &format!("{RELEASE}-leader"), &pods).await;
    eprintln!("chart installed at {:.0?}", started.elapsed());

    create_prometheus(&ns, prometheus_image).await;
    let prometheus = prometheus_address(&ns.prometheus).await;
    eprintln!("Prometheus {prometheus} ready at {:.0?}", started.elapsed());

    // A Bucket, so the leader's reconcile counter moves.
    let buckets = Api::<Bucket>::namespaced(client.clone(), &ns.team);
    buckets
        .create(
            &PostParams::default(),
            &bucket("mon-bucket", json!({"deletionPolicy": "Delete"})),
        )
        .await
        .expect("create the Bucket");
    wait_reason(&buckets, "mon-bucket", "Available", T).await;

    both_pods_are_scraped_through_the_service(&prometheus, &ns.release, &pods).await;
    eprintln!("both targets up at {:.0?}", started.elapsed());
    reconcile_total_is_stored(&prometheus, &ns.release, &pods, &leader).await;
    eprintln!("reconcile counters queried at {:.0?}", started.elapsed());
    the_chart_alerts_are_loaded(&prometheus, &ns.release).await;
    eprintln!("rules loaded at {:.0?}", started.elapsed());

    drop(scene);
    purge_aws(&cluster).await;
    eprintln!("monitoring test done in {:.0?}", started.elapsed());
}

/// Diagnosis (Pods of all three namespaces and prometheus-operator's) and the undo: the Prometheus
/// object and its RBAC, the release, the team's objects, the namespaces.
fn scene(ns: &Namespaces) -> Scene {
    let mut scene = Scene::new(&[&ns.release, &ns.team, &ns.prometheus, "monitoring"]);
    scene.run(
        "kubectl",
        &[
            "delete",
            "prometheus",
            PROMETHEUS,
            "-n",
            &ns.prometheus,
            "--ignore-not-found",
            "--timeout",
            "60s",
        ],
    );
    scene.run(
        "kubectl",
        &[
            "delete",
            "clusterrolebinding",
            &reader_binding(&ns.prometheus),
            "--ignore-not-found",
        ],
    );
    scene.run(
        "helm",
        &[
            "uninstall",
            RELEASE,
            "-n",
            &ns.release,
            "--wait",
            "--timeout",
            "90s",
        ],
    );
    scene.undo.push(Undo::Release(ns.team.clone()));
    scene.run(
        "kubectl",
        &[
            "delete",
            "namespace",
            &ns.release,
            &ns.team,
            &ns.prometheus,
            "--wait=false",
        ],
    );
    scene
}

fn reader_binding(prometheus_ns: &str) -> String {
    format!("{prometheus_ns}-metrics-reader")
}

/// The labels the Prometheus object selects the chart's ServiceMonitor and PrometheusRule by
/// (the chart's `serviceMonitor.labels` / `prometheusRule.labels`).
fn selected_by(ns: &Namespaces) -> Value {
    json!({"e2e-prometheus": ns.prometheus})
}

async fn install_chart(node: &Node, ns: &Namespaces, cluster: &str, tag: &str) {
    let values = json!({
        "image": {"repository": OPERATOR_REPO, "tag": tag, "pullPolicy": "Never"},
        "replicaCount": 2,
        "clusterName": cluster,
        "watchNamespaces": [ns.team],
        // moto on the node's bridge address, which Pods reach.
        "aws": {"endpointUrl": node.aws_endpoint, "region": env().region},
        "extraEnv": aws_secret_env(),
        "serviceMonitor": {
            "enabled": true,
            "labels": selected_by(ns),
            "interval": INTERVAL,
            "scrapeTimeout": "4s",
        },
        "prometheusRule": {"enabled": true, "labels": selected_by(ns)},
    });
    let path = logs_dir().join(format!("helm-values-{cluster}-monitoring.yaml"));
    std::fs::write(&path, serde_json::to_string_pretty(&values).unwrap()).unwrap();
    let args = [
        "install",
        RELEASE,
        "charts/s3-operator",
        "-n",
        &ns.release,
        "-f",
        &path.display().to_string(),
        "--wait",
        "--timeout",
        "5m",
    ];
    tool_async("helm", strings(&args)).await;
}

/// Prometheus's ServiceAccount with what its service discovery reads in the release namespace
/// and the chart's metrics reader role (the operator authorizes each scrape's bearer token),
/// and the Prometheus object selecting the chart's ServiceMonitor and PrometheusRule by label in
/// the release namespace only.
async fn create_prometheus(ns: &Namespaces, image: &str) {
    let sa = "prometheus";
    let subject = json!([{"kind": "ServiceAccount", "name": sa, "namespace": ns.prometheus}]);
    let in_release = json!({"matchLabels": {"kubernetes.io/metadata.name": ns.release}});
    let objects = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": sa, "namespace": ns.prometheus}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": "prometheus-discovery", "namespace": ns.release},
         "rules": [
            {"apiGroups": [""], "resources": ["services", "endpoints", "pods"],
             "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
             "verbs": ["get", "list", "watch"]},
         ]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "prometheus-discovery", "namespace": ns.release},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                     "name": "prometheus-discovery"},
         "subjects": subject},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": reader_binding(&ns.prometheus)},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": format!("{RELEASE}-metrics-reader")},
         "subjects": subject},
        {"apiVersion": "monitoring.coreos.com/v1", "kind": "Prometheus",
         "metadata": {"name": PROMETHEUS, "namespace": ns.prometheus},
         "spec": {
            "image": image,
            "version": prometheus_version(),
            "replicas": 1,
            "serviceAccountName": sa,
            "scrapeInterval": INTERVAL,
            "evaluationInterval": INTERVAL,
            "serviceMonitorSelector": {"matchLabels": selected_by(ns)},
            "serviceMonitorNamespaceSelector": in_release,
            "ruleSelector": {"matchLabels": selected_by(ns)},
            "ruleNamespaceSelector": in_release,
            "securityContext": {"runAsNonRoot": true, "runAsUser": 65534, "runAsGroup": 65534,
                                "fsGroup": 65534, "seccompProfile": {"type": "RuntimeDefault"}},
         }},
    ]});
    tool_async(
        "kubectl",
        strings(&[
            "apply",
            "-f",
            &write_json("prometheus", &ns.prometheus, &objects),
        ]),
    )
    .await;
}

fn write_json(what: &str, ns: &str, v: &Value) -> String {
    let path = logs_dir().join(format!("{what}-{ns}.json"));
    std::fs::write(&path, serde_json::to_string_pretty(v).unwrap()).unwrap();
    path.display().to_string()
}

/// The address (Pod IP:9090) of the Prometheus Pod prometheus-operator made, once it is Running
/// and Ready (its readiness probe is Prometheus's /-/ready) and its API answers.
async fn prometheus_address(prometheus_ns: &str) -> String {
    let pods = Api::<Pod>::namespaced(admin().await, prometheus_ns);
    let name = format!("prometheus-{PROMETHEUS}-0");
    let addr = wait_for(
        &format!("the Pod {prometheus_ns}/{name} to be Running and Ready"),
        T,
        || async {
            let p = pods.get_opt(&name).await.ok()??;
            let ip = p.status.as_ref()?.pod_ip.clone()?;
            (phase(&p) == "Running" && is_ready(&p)).then(|| format!("{ip}:9090"))
        },
    )
    .await;
    let build = api(&addr, "/api/v1/status/buildinfo").await;
    let version = prometheus_version();
    assert_eq!(
        build["version"].as_str(),
        Some(version.trim_start_matches('v')),
        "the Prometheus that runs is the one built here: {build}"
    );
    addr
}

/// GET on Prometheus's HTTP API; its `data`, or a failure naming the answer.
async fn api(addr: &str, path: &str) -> Value {
    try_api(addr, path)
        .await
        .unwrap_or_else(|e| panic!("Prometheus {addr}{path}: {e}"))
}

async fn try_api(addr: &str, path: &str) -> Result<Value, String> {
    let (status, body) = http_get(addr, path)
        .await
        .ok_or_else(|| "no answer".to_string())?;
    let v: Value = serde_json::from_str(&body).map_err(|e| format!("{status} {body}: {e}"))?;
    if status != 200 || v["status"] != "success" {
        return Err(format!("{status} {body}"));
    }
    Ok(v["data"].clone())
}

/// Polls `f` every second until it returns `Ok`; after `timeout` fails with its last `Err`.
async fn wait_until<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let start = Instant::now();
    loop {
        match f().await {
            Ok(v) => return v,
            Err(e) if start.elapsed() >= timeout => {
                panic!("timed out after {timeout:?} waiting for {what}; last seen: {e}")
            }
            Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    }
}

/// Prometheus's active targets of the chart's ServiceMonitor are exactly the two operator Pods,
/// found through the metrics Service's endpoints, both `up`: the HTTPS scrape with its token
/// passed the operator's TokenReview and SubjectAccessReview.
async fn both_pods_are_scraped_through_the_service(addr: &str, ns: &str, pods: &[Pod]) {
    let service = format!("{RELEASE}-metrics");
    let want: BTreeSet<String> = pods.iter().map(name_of).collect();
    let pool = format!("serviceMonitor/{ns}/{RELEASE}/0");
    let targets = wait_until(
        &format!("Prometheus to scrape {want:?} through {ns}/{service}"),
        T,
        || async {
            let data = try_api(addr, "/api/v1/targets?state=active").await?;
            let ours: Vec<Value> = data["activeTargets"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|t| t["scrapePool"] == pool)
                .cloned()
                .collect();
            let up: BTreeSet<String> = ours
                .iter()
                .filter(|t| t["health"] == "up")
                .filter_map(|t| t["labels"]["pod"].as_str().map(String::from))
                .collect();
            if ours.len() == want.len() && up == want {
                Ok(ours)
            } else {
                let brief: Vec<Value> = ours
                    .iter()
                    .map(|t| {
                        json!({"pod": t["labels"]["pod"], "health": t["health"],
                               "lastError": t["lastError"], "scrapeUrl": t["scrapeUrl"]})
                    })
                    .collect();
                Err(format!("targets of {pool}: {}", Value::from(brief)))
            }
        },
    )
    .await;
    for t in &targets {
        let (labels, found) = (&t["labels"], &t["discoveredLabels"]);
        assert_eq!(labels["job"], service.as_str(), "{t}");
        assert_eq!(labels["service"], service.as_str(), "{t}");
        assert_eq!(labels["namespace"], ns, "{t}");
        assert_eq!(
            found["__meta_kubernetes_service_name"],
            service.as_str(),
            "{t}"
        );
        let url = t["scrapeUrl"].as_str().unwrap_or_default();
        assert!(
            url.starts_with("https://") && url.ends_with(":8080/metrics"),
            "{t}"
        );
    }
}

/// `controller_runtime_reconcile_total` of the operator's job is stored for both Pods, and the
/// leader's successful Bucket reconciles are counted.
async fn reconcile_total_is_stored(addr: &str, ns: &str, pods: &[Pod], leader: &str) {
    let selector = format!(r#"{{job="{RELEASE}-metrics",namespace="{ns}"}}"#);
    let query = format!(
        "/api/v1/query?query={}",
        encode(&format!("controller_runtime_reconcile_total{selector}"))
    );
    let want: BTreeSet<String> = pods.iter().map(name_of).collect();
    wait_until(
        &format!("controller_runtime_reconcile_total{selector} of {want:?}, the leader {leader} counting Buckets"),
        T,
        || async {
            let data = try_api(addr, &query).await?;
            let series = data["result"].as_array().cloned().unwrap_or_default();
            let seen: BTreeSet<String> = series
                .iter()
                .filter_map(|s| s["metric"]["pod"].as_str().map(String::from))
                .collect();
            let leader_buckets: f64 = series
                .iter()
                .filter(|s| {
                    let m = &s["metric"];
                    m["pod"] == leader && m["controller"] == "bucket" && m["result"] == "success"
                })
                .filter_map(|s| s["value"][1].as_str()?.parse::<f64>().ok())
                .sum();
            if seen == want && leader_buckets > 0.0 {
                Ok(())
            } else {
                Err(serde_json::to_string(&series).unwrap())
            }
        },
    )
    .await;
}

/// Percent-encoding of a query parameter (everything but unreserved characters).
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Prometheus loaded the chart's PrometheusRule: exactly the alerts and recording rules of the
/// chart's files/rules.yaml, from the rule file prometheus-operator wrote for it, and evaluated
/// them without error.
async fn the_chart_alerts_are_loaded(addr: &str, ns: &str) {
    let text = std::fs::read_to_string(repo().join("charts/s3-operator/files/rules.yaml"))
        .expect("charts/s3-operator/files/rules.yaml");
    let file: Value = serde_yaml::from_str(&text).expect("rules.yaml");
    let rules = |groups: &[Value]| -> Vec<Value> {
        groups
            .iter()
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .collect()
    };
    let chart = rules(file["groups"].as_array().expect("groups in rules.yaml"));
    let named = |rules: &[Value], key: &str| -> BTreeSet<String> {
        rules
            .iter()
            .filter_map(|r| r[key].as_str().map(String::from))
            .collect()
    };
    let (alerts, records) = (named(&chart, "alert"), named(&chart, "record"));
    assert!(!alerts.is_empty(), "the chart has alerts");
    // prometheus-operator names the rule file <namespace>-<PrometheusRule name>-<uid>.yaml.
    let rule_file = format!("{ns}-{RELEASE}-");
    wait_until(
        &format!("Prometheus to load and evaluate the alerts {alerts:?} and records {records:?}"),
        T,
        || async {
            let data = try_api(addr, "/api/v1/rules").await?;
            let groups: Vec<Value> = data["groups"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|g| g["file"].as_str().is_some_and(|f| f.contains(&rule_file)))
                .cloned()
                .collect();
            let loaded = rules(&groups);
            let of_type = |t: &str| -> BTreeSet<String> {
                let typed: Vec<Value> = loaded.iter().filter(|r| r["type"] == t).cloned().collect();
                named(&typed, "name")
            };
            let evaluated = loaded.iter().all(|r| r["health"] == "ok");
            if of_type("alerting") == alerts
                && of_type("recording") == records
                && loaded.len() == chart.len()
                && evaluated
            {
                Ok(())
            } else {
                Err(serde_json::to_string(&groups).unwrap())
            }
        },
    )
    .await;
}
