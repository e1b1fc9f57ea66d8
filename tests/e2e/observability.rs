//! Observability on real receivers: Prometheus (Debian's) scrapes the operator and PromQL sees
//! its series.

use std::path::PathBuf;
use std::time::Duration;

use kube::api::{Api, PostParams};
use s3_operator::api::Bucket;
use serde_json::{Value, json};

use crate::support::*;

/// A Prometheus server on loopback scraping `targets` every second; stopped on drop.
struct Prometheus {
    _child: tokio::process::Child,
    addr: String,
    _dir: PathBuf,
}

impl Prometheus {
    async fn start(targets: &[&str]) -> Prometheus {
        let dir = logs_dir().join(format!("prometheus-{}", random(6)));
        std::fs::create_dir_all(&dir).unwrap();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: s3-operator\n    static_configs:\n      - targets: {targets:?}\n"
        );
        std::fs::write(dir.join("prometheus.yml"), config).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = tokio::process::Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("prometheus from Debian's package (hack/tools.sh prometheus)");
        let p = Prometheus {
            _child: child,
            addr,
            _dir: dir,
        };
        wait_for("prometheus ready", Duration::from_secs(30), || async {
            (http_get(&p.addr, "/-/ready").await?.0 == 200).then_some(())
        })
        .await;
        p
    }

    /// The instant vector for `promql`, as (labels, value) pairs.
    async fn query(&self, promql: &str) -> Vec<(Value, f64)> {
        let q: String = promql
            .bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() {
                    (b as char).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect();
        let (status, body) = http_get(&self.addr, &format!("/api/v1/query?query={q}"))
            .await
            .expect("query");
        assert_eq!(status, 200, "{promql}: {body}");
        let v: Value = serde_json::from_str(&body).expect("JSON");
        assert_eq!(v["status"], "success", "{promql}: {body}");
        v["data"]["result"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["metric"].clone(),
                    r["value"][1].as_str().unwrap().parse().unwrap(),
                )
            })
            .collect()
    }

    async fn value(&self, promql: &str) -> Option<f64> {
        self.query(promql).await.first().map(|(_, v)| *v)
    }
}

#[tokio::test]
async fn prometheus_scrapes_reconciles_aws_calls_and_leadership() {
    let client = admin().await;
    let ns = namespace(&client, "prom").await;
    let mut opts = OperatorOpts {
        namespaces: vec![ns.clone()],
        leader_elect: true,
        ..Default::default()
    };
    opts.extra_args = vec!["--lease-duration".into(), "4s".into()];
    let op = Operator::start(opts).await;
    let prom = Prometheus::start(&[op.metrics_addr.as_str()]).await;
    wait_for("target up", Duration::from_secs(30), || async {
        (prom.value("up").await? == 1.0).then_some(())
    })
    .await;

    let buckets = Api::<Bucket>::namespaced(client.clone(), &ns);
    buckets
        .create(
            &PostParams::default(),
            &bucket("p1", json!({"deletionPolicy": "Delete"})),
        )
        .await
        .unwrap();
    wait_ready(&buckets, "p1").await;
    let successes =
        r#"sum(controller_runtime_reconcile_total{controller="bucket",result="success"})"#;
    let first = wait_for("reconciles scraped", Duration::from_secs(30), || async {
        prom.value(successes).await.filter(|v| *v > 0.0)
    })
    .await;
    buckets
        .create(
            &PostParams::default(),
            &bucket("p2", json!({"deletionPolicy": "Delete"})),
        )
        .await
        .unwrap();
    wait_ready(&buckets, "p2").await;
    wait_for(
        "reconcile total rising",
        Duration::from_secs(30),
        || async { prom.value(successes).await.filter(|v| *v > first) },
    )
    .await;

    // All four results are exported from the start, so rate() and alerts work before any error.
    let results = prom
        .query(r#"controller_runtime_reconcile_total{controller="bucketaccess"}"#)
        .await;
    let mut names: Vec<String> = results
        .iter()
        .map(|(m, _)| m["result"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    assert_eq!(names, ["error", "requeue", "requeue_after", "success"]);

    let creates = prom.value(r#"sum(s3_operator_aws_requests_total{service="s3",operation="CreateBucket",outcome="success"})"#).await;
    assert_eq!(creates, Some(2.0));
    let latency = prom
        .value(r#"sum(s3_operator_aws_request_duration_seconds_count{service="s3"})"#)
        .await;
    assert!(latency.unwrap_or(0.0) > 0.0);
    assert_eq!(
        prom.value(r#"leader_election_master_status{name="s3-operator-leader"}"#)
            .await,
        Some(1.0)
    );
    assert!(prom.value("histogram_quantile(0.99, sum by (le) (rate(controller_runtime_reconcile_time_seconds_bucket[1m])))").await.is_some());
    assert!(
        prom.value("process_resident_memory_bytes")
            .await
            .unwrap_or(0.0)
            > 0.0
    );
    dashboard_queries_return_data(&prom).await;
    // No label carries a per-object value.
    for (labels, _) in prom
        .query(r#"{__name__=~"controller_runtime_.*|s3_operator_.*"}"#)
        .await
    {
        let text = labels.to_string();
        assert!(
            !text.contains("p1") && !text.contains(&ns),
            "per-object label in {text}"
        );
    }
}

/// Every query of the shipped Grafana dashboard is valid PromQL against this operator's series,
/// and the panels a running operator always fills return data. Grafana's variables are replaced
/// as "All" would: the test Prometheus has one job and no namespace label.
async fn dashboard_queries_return_data(prom: &Prometheus) {
    let text = std::fs::read_to_string(repo().join("grafana/s3-operator.json")).unwrap();
    let dashboard: Value = serde_json::from_str(&text).unwrap();
    let mut filled = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        let title = panel["title"].as_str().unwrap();
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"]
                .as_str()
                .unwrap()
                .replace("$__rate_interval", "1m")
                .replace("$job", ".*")
                .replace("$namespace", ".*");
            assert!(
                !expr.contains('$'),
                "{title}: unreplaced variable in {expr}"
            );
            // `query` asserts Prometheus parsed and evaluated it.
            if !prom.query(&expr).await.is_empty() && !filled.contains(&title) {
                filled.push(title);
            }
        }
    }
    for title in [
        "Leader",
        "Not ready objects",
        "Reconcile rate by controller and result",
        "Reconcile errors by controller",
        "Reconcile latency p50 / p99",
        "Active workers vs max concurrent reconciles",
        "AWS request rate by service and operation",
        "AWS latency p99 by operation",
        "Kubernetes writes by kind and verb",
        "Managed objects by kind and readiness",
        "Managed objects by class and account",
        // Every controller's series start at zero (account "": the operator's own).
        "Passes deferred by AWS budget, by account",
        // Its zero series exists from the first round (no Bucket is observed here).
        "Observed objects out of sync, by kind, class and account",
        "CPU usage",
        "Memory (resident)",
        "Uptime",
    ] {
        assert!(
            filled.contains(&title),
            "dashboard panel {title:?} shows no data; panels with data: {filled:?}"
        );
    }
}

/// Jaeger v2 (built from its Go module) receiving OTLP on loopback; stopped on drop.
struct Jaeger {
    _child: tokio::process::Child,
    otlp_http: String,
    query: String,
}

impl Jaeger {
    async fn start() -> Jaeger {
        let dir = logs_dir().join(format!("jaeger-{}", random(6)));
        std::fs::create_dir_all(&dir).unwrap();
        let port = || {
            std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port()
        };
        let (otlp, query, query_grpc, grpc) = (port(), port(), port(), port());
        let config = format!(
            r#"service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
extensions:
  jaeger_query:
    storage:
      traces: mem
    http:
      endpoint: 127.0.0.1:{query}
    grpc:
      endpoint: 127.0.0.1:{query_grpc}
  jaeger_storage:
    backends:
      mem:
        memory:
          max_traces: 10000
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{otlp}
      grpc:
        endpoint: 127.0.0.1:{grpc}
processors:
  batch:
    timeout: 200ms
exporters:
  jaeger_storage_exporter:
    trace_storage: mem
"#
        );
        std::fs::write(dir.join("jaeger.yaml"), config).unwrap();
        let log = std::fs::File::create(dir.join("jaeger.log")).unwrap();
        let bin = format!("{}/jaeger", tools_bin());
        let child = tokio::process::Command::new(bin)
            .arg("--config")
            .arg(dir.join("jaeger.yaml"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("jaeger, built by hack/tools.sh jaeger into the cache");
        let j = Jaeger {
            _child: child,
            otlp_http: format!("http://127.0.0.1:{otlp}"),
            query: format!("127.0.0.1:{query}"),
        };
        wait_for("jaeger query API", Duration::from_secs(60), || async {
            (http_get(&j.query, "/api/services").await?.0 == 200).then_some(())
        })
        .await;
        j
    }

    async fn traces(&self, service: &str) -> Vec<Value> {
        let Some((200, body)) = http_get(
            &self.query,
            &format!("/api/traces?service={service}&limit=100"),
        )
        .await
        else {
            return vec![];
        };
        serde_json::from_str::<Value>(&body)
            .ok()
            .and_then(|v| v["data"].as_array().cloned())
            .unwrap_or_default()
    }
}

#[tokio::test]
async fn reconcile_traces_reach_jaeger_and_json_logs_carry_the_trace_id() {
    let jaeger = Jaeger::start().await;
    let client = admin().await;
    let ns = namespace(&client, "otel").await;
    let service = format!("s3-operator-{}", random(5));
    let op = Operator::start(OperatorOpts {
        namespaces: vec![ns.clone()],
        extra_args: vec!["--log-format".into(), "json".into()],
        env: vec![
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT".into(),
                jaeger.otlp_http.clone(),
            ),
            ("OTEL_EXPORTER_OTLP_PROTOCOL".into(), "http/protobuf".into()),
            ("OTEL_SERVICE_NAME".into(), service.clone()),
            ("OTEL_BSP_SCHEDULE_DELAY".into(), "200".into()),
        ],
        ..Default::default()
    })
    .await;
    let buckets = Api::<Bucket>::namespaced(client.clone(), &ns);
    buckets
        .create(
            &PostParams::default(),
            &bucket("traced", json!({"deletionPolicy": "Delete"})),
        )
        .await
        .unwrap();
    wait_ready(&buckets, "traced").await;

    // A reconcile trace whose child spans are the AWS calls that reconcile made.
    let trace = wait_for(
        "a reconcile trace with its root span and CreateBucket",
        Duration::from_secs(60),
        || async {
            // Spans are exported in batches as they end: the root ends last, so a trace may be
            // seen before its root has arrived.
            jaeger.traces(&service).await.into_iter().find(|t| {
                t["spans"].as_array().is_some_and(|s| {
                    s.iter().any(|s| s["operationName"] == "s3.CreateBucket")
                        && s.iter().any(|s| s["operationName"] == "reconcile Bucket")
                })
            })
        },
    )
    .await;
    let spans = trace["spans"].as_array().unwrap();
    let root = spans
        .iter()
        .find(|s| s["operationName"] == "reconcile Bucket")
        .expect("root span");
    let tag = |s: &Value, k: &str| {
        s["tags"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["key"] == k)
            .map(|t| t["value"].clone())
    };
    assert_eq!(tag(root, "k8s.namespace"), Some(json!(ns)));
    assert_eq!(tag(root, "k8s.name"), Some(json!("traced")));
    assert_eq!(tag(root, "outcome"), Some(json!("success")));
    for op_name in [
        "s3.GetBucketTagging",
        "s3.CreateBucket",
        "s3.PutPublicAccessBlock",
        "s3.PutBucketEncryption",
    ] {
        assert!(
            spans.iter().any(|s| s["operationName"] == op_name),
            "{op_name} missing from the trace"
        );
    }
    assert!(
        spans.iter().any(|s| s["operationName"] == "patch status"),
        "Kubernetes writes are spans too"
    );

    // JSON logs: every line parses, and reconcile lines carry the trace id Jaeger shows.
    let trace_id = trace["traceID"].as_str().unwrap().to_string();
    let log = op.log_text();
    let lines: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(
        lines.iter().any(|l| l["span"]["trace_id"]
            .as_str()
            .is_some_and(|t| trace_id.ends_with(t) || t.ends_with(&trace_id))),
        "no log line carries trace id {trace_id}"
    );
}
