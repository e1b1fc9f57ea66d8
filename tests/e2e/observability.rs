//! Observability on real receivers: Prometheus (Debian's) scrapes the operator and PromQL sees
//! its series.

use std::path::PathBuf;
use std::time::Duration;

use kube::api::{Api, PostParams};
use s3_operator::api::Bucket;
use serde_json::{Value, json};

use crate::bucket::{bucket, wait_ready};
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
