//! Prometheus metrics: controller-runtime's names, labels and buckets (so existing dashboards and
//! alerts work) plus `s3_operator_*` series. No label ever carries a per-object value.
//!
//! It sits at the bottom of the crate (it depends on nothing here) so that `aws` and `reconcile`
//! can record into it without depending on `runtime`.

use std::sync::LazyLock;

use prometheus::{
    Encoder, Gauge, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

/// controller-runtime's reconcile_time_seconds buckets.
const RECONCILE_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0,
];
const AWS_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// client-go's workqueue buckets: `ExponentialBuckets(10e-9, 10, 12)`, 10ns to 1000s.
const WORKQUEUE_BUCKETS: &[f64] = &[
    1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0,
];

pub const RESULTS: [&str; 4] = ["success", "error", "requeue", "requeue_after"];
pub const CONTROLLERS: [&str; 2] = ["bucket", "bucketaccess"];

pub struct Metrics {
    pub registry: Registry,
    pub reconcile_total: IntCounterVec,
    pub reconcile_errors_total: IntCounterVec,
    pub terminal_reconcile_errors_total: IntCounterVec,
    pub reconcile_time_seconds: HistogramVec,
    pub max_concurrent_reconciles: IntGaugeVec,
    pub active_workers: IntGaugeVec,
    pub leader_election_master_status: IntGaugeVec,
    pub aws_requests_total: IntCounterVec,
    pub aws_request_duration_seconds: HistogramVec,
    pub drift_corrections_total: IntCounterVec,
    pub managed_objects: IntGaugeVec,
    pub access_key_age_seconds: Gauge,
    pub access_key_rotation_overdue_seconds: Gauge,
    pub kube_writes_total: IntCounterVec,
    pub reconcile_panics_total: IntCounterVec,
    pub workqueue_depth: IntGaugeVec,
    pub workqueue_adds_total: IntCounterVec,
    pub workqueue_queue_duration_seconds: HistogramVec,
    pub workqueue_work_duration_seconds: HistogramVec,
    pub workqueue_retries_total: IntCounterVec,
    pub rest_client_requests_total: IntCounterVec,
    pub aws_write_budget_exhausted_total: IntCounterVec,
}

pub static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

impl Metrics {
    fn new() -> Self {
        let registry = Registry::new();
        #[cfg(target_os = "linux")]
        registry
            .register(Box::new(
                prometheus::process_collector::ProcessCollector::for_self(),
            ))
            .expect("process collector registers once");
        let counter = |name: &str, help: &str, labels: &[&str]| {
            let c = IntCounterVec::new(Opts::new(name, help), labels).expect("valid counter");
            registry
                .register(Box::new(c.clone()))
                .expect("unique metric");
            c
        };
        let gauge = |name: &str, help: &str, labels: &[&str]| {
            let g = IntGaugeVec::new(Opts::new(name, help), labels).expect("valid gauge");
            registry
                .register(Box::new(g.clone()))
                .expect("unique metric");
            g
        };
        let histogram = |name: &str, help: &str, labels: &[&str], buckets: &[f64]| {
            let h = HistogramVec::new(
                HistogramOpts::new(name, help).buckets(buckets.to_vec()),
                labels,
            )
            .expect("valid histogram");
            registry
                .register(Box::new(h.clone()))
                .expect("unique metric");
            h
        };
        let access_key_age_seconds = Gauge::new(
            "s3_operator_access_key_max_age_seconds",
            "Age of the oldest active access key the operator manages",
        )
        .expect("valid gauge");
        registry
            .register(Box::new(access_key_age_seconds.clone()))
            .expect("unique metric");
        let access_key_rotation_overdue_seconds = Gauge::new(
            "s3_operator_access_key_rotation_overdue_seconds",
            "How far past its next rotation time the most overdue rotating access key is (0: none)",
        )
        .expect("valid gauge");
        registry
            .register(Box::new(access_key_rotation_overdue_seconds.clone()))
            .expect("unique metric");
        let m = Metrics {
            reconcile_total: counter(
                "controller_runtime_reconcile_total",
                "Total number of reconciliations per controller",
                &["controller", "result"],
            ),
            reconcile_errors_total: counter(
                "controller_runtime_reconcile_errors_total",
                "Total number of reconciliation errors per controller",
                &["controller"],
            ),
            terminal_reconcile_errors_total: counter(
                "controller_runtime_terminal_reconcile_errors_total",
                "Total number of terminal reconciliation errors per controller",
                &["controller"],
            ),
            reconcile_time_seconds: histogram(
                "controller_runtime_reconcile_time_seconds",
                "Length of time per reconciliation per controller",
                &["controller"],
                RECONCILE_BUCKETS,
            ),
            max_concurrent_reconciles: gauge(
                "controller_runtime_max_concurrent_reconciles",
                "Maximum number of concurrent reconciles per controller",
                &["controller"],
            ),
            active_workers: gauge(
                "controller_runtime_active_workers",
                "Number of currently used workers per controller",
                &["controller"],
            ),
            leader_election_master_status: gauge(
                "leader_election_master_status",
                "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease.",
                &["name"],
            ),
            aws_requests_total: counter(
                "s3_operator_aws_requests_total",
                "AWS API requests (every attempt, SDK retries included) by service, operation and outcome",
                &["service", "operation", "outcome"],
            ),
            aws_request_duration_seconds: histogram(
                "s3_operator_aws_request_duration_seconds",
                "Latency of AWS API calls, SDK retries included, by service and operation",
                &["service", "operation"],
                AWS_BUCKETS,
            ),
            drift_corrections_total: counter(
                "s3_operator_drift_corrections_total",
                "Out-of-band changes found in AWS or Kubernetes and corrected, by kind and aspect",
                &["kind", "aspect"],
            ),
            managed_objects: gauge(
                "s3_operator_managed_objects",
                "Objects the operator manages, by kind and readiness",
                &["kind", "ready"],
            ),
            kube_writes_total: counter(
                "s3_operator_kube_writes_total",
                "Writes the operator made to the Kubernetes API, by kind and verb",
                &["kind", "verb"],
            ),
            reconcile_panics_total: counter(
                "controller_runtime_reconcile_panics_total",
                "Total number of reconciliation panics per controller",
                &["controller"],
            ),
            // The work queue of a controller here is its reconciles waiting for a worker slot
            // (kube-runtime's own scheduler is not observable).
            workqueue_depth: gauge("workqueue_depth", "Current depth of workqueue", &["name"]),
            workqueue_adds_total: counter(
                "workqueue_adds_total",
                "Total number of adds handled by workqueue",
                &["name"],
            ),
            workqueue_queue_duration_seconds: histogram(
                "workqueue_queue_duration_seconds",
                "How long in seconds an item stays in workqueue before being requested",
                &["name"],
                WORKQUEUE_BUCKETS,
            ),
            workqueue_work_duration_seconds: histogram(
                "workqueue_work_duration_seconds",
                "How long in seconds processing an item from workqueue takes",
                &["name"],
                WORKQUEUE_BUCKETS,
            ),
            workqueue_retries_total: counter(
                "workqueue_retries_total",
                "Total number of retries handled by workqueue",
                &["name"],
            ),
            rest_client_requests_total: counter(
                "rest_client_requests_total",
                "Number of HTTP requests, partitioned by status code, method, and host",
                &["code", "method", "host"],
            ),
            aws_write_budget_exhausted_total: counter(
                "s3_operator_aws_write_budget_exhausted_total",
                "Reconciles deferred because their namespace had spent its budget of AWS writes",
                &["controller"],
            ),
            access_key_age_seconds,
            access_key_rotation_overdue_seconds,
            registry,
        };
        for c in CONTROLLERS {
            for r in RESULTS {
                m.reconcile_total.with_label_values(&[c, r]);
            }
            m.reconcile_errors_total.with_label_values(&[c]);
            m.terminal_reconcile_errors_total.with_label_values(&[c]);
            m.active_workers.with_label_values(&[c]);
            m.reconcile_panics_total.with_label_values(&[c]);
            m.aws_write_budget_exhausted_total.with_label_values(&[c]);
            m.workqueue_depth.with_label_values(&[c]);
            m.workqueue_adds_total.with_label_values(&[c]);
            m.workqueue_retries_total.with_label_values(&[c]);
            m.workqueue_queue_duration_seconds.with_label_values(&[c]);
            m.workqueue_work_duration_seconds.with_label_values(&[c]);
        }
        m
    }

    pub fn aws_request(&self, service: &str, operation: &str, outcome: &str) {
        self.aws_requests_total
            .with_label_values(&[service, operation, outcome])
            .inc();
    }

    pub fn aws_call_duration(&self, service: &str, operation: &str, seconds: f64) {
        self.aws_request_duration_seconds
            .with_label_values(&[service, operation])
            .observe(seconds);
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut buf)
            .expect("text encoding cannot fail");
        String::from_utf8(buf).expect("metrics are UTF-8")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconcile_results_start_at_zero_for_every_controller() {
        let text = METRICS.render();
        for c in CONTROLLERS {
            for r in RESULTS {
                let line = format!(
                    "controller_runtime_reconcile_total{{controller=\"{c}\",result=\"{r}\"}} 0"
                );
                assert!(text.contains(&line), "missing {line}");
            }
        }
        // controller-runtime's other per-controller families, labelled as it labels them.
        for c in CONTROLLERS {
            for line in [
                format!("controller_runtime_reconcile_panics_total{{controller=\"{c}\"}} 0"),
                format!("workqueue_depth{{name=\"{c}\"}} 0"),
                format!("workqueue_adds_total{{name=\"{c}\"}} "),
                format!("workqueue_retries_total{{name=\"{c}\"}} "),
            ] {
                assert!(text.contains(&line), "missing {line}");
            }
        }
        for family in [
            "workqueue_queue_duration_seconds",
            "workqueue_work_duration_seconds",
        ] {
            assert!(
                text.contains(&format!("# TYPE {family} ")),
                "missing {family}"
            );
        }
    }
}
