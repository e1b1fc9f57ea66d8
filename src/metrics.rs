//! Prometheus metrics: controller-runtime's names, labels and buckets (so existing dashboards and
//! alerts work) plus `s3_operator_*` series. No label ever carries a per-object value.
//!
//! The runtime makes one [`Metrics`] at start and hands it to everything that records: the
//! reconcile context, the AWS and Kubernetes clients, leader election and the /metrics server.
//! It sits at the bottom of the crate (it depends on nothing here) so that `aws` and `reconcile`
//! can hold it without depending on `runtime`.

use prometheus::core::Collector;
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
/// `s3_operator_orphans_total`'s labels: what was found orphaned, and what became of it.
pub const ORPHAN_KINDS: [&str; 4] = ["bucket", "user", "role", "association"];
pub const ORPHAN_ACTIONS: [&str; 3] = ["deleted", "released", "failed"];

/// Every series the operator exports, in the registry /metrics renders.
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
    pub out_of_sync_objects: IntGaugeVec,
    pub assume_role_total: IntCounterVec,
    pub access_key_age_seconds: Gauge,
    pub access_key_rotation_overdue_seconds: Gauge,
    pub kube_writes_total: IntCounterVec,
    pub kube_write_duration_seconds: HistogramVec,
    pub reconcile_panics_total: IntCounterVec,
    pub workqueue_depth: IntGaugeVec,
    pub workqueue_adds_total: IntCounterVec,
    pub workqueue_queue_duration_seconds: HistogramVec,
    pub workqueue_work_duration_seconds: HistogramVec,
    pub gate_wait_seconds: HistogramVec,
    pub slot_seconds: HistogramVec,
    pub workqueue_retries_total: IntCounterVec,
    pub rest_client_requests_total: IntCounterVec,
    pub aws_write_budget_exhausted_total: IntCounterVec,
    pub aws_read_budget_exhausted_total: IntCounterVec,
    pub wake_overflows_total: IntCounterVec,
    pub drift_events_total: IntCounterVec,
    pub orphans_total: IntCounterVec,
    pub class_decode_errors: IntGaugeVec,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

const CONTROLLER: &[&str] = &["controller"];
/// controller-runtime labels its work queues by `name`, the controller's.
const QUEUE: &[&str] = &["name"];

impl Metrics {
    /// A registry of its own holding every family, the per-controller series already at zero.
    pub fn new() -> Self {
        let r = Families(Registry::new());
        #[cfg(target_os = "linux")]
        r.0.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))
        .expect("process collector registers once");
        let m = Metrics {
            reconcile_total: r.counter(
                "controller_runtime_reconcile_total",
                "Total number of reconciliations per controller",
                &["controller", "result"],
            ),
            reconcile_errors_total: r.counter(
                "controller_runtime_reconcile_errors_total",
                "Total number of reconciliation errors per controller",
                CONTROLLER,
            ),
            terminal_reconcile_errors_total: r.counter(
                "controller_runtime_terminal_reconcile_errors_total",
                "Total number of terminal reconciliation errors per controller",
                CONTROLLER,
            ),
            reconcile_panics_total: r.counter(
                "controller_runtime_reconcile_panics_total",
                "Total number of reconciliation panics per controller",
                CONTROLLER,
            ),
            reconcile_time_seconds: r.histogram(
                "controller_runtime_reconcile_time_seconds",
                "Length of time per reconciliation per controller",
                CONTROLLER,
                RECONCILE_BUCKETS,
            ),
            max_concurrent_reconciles: r.gauge(
                "controller_runtime_max_concurrent_reconciles",
                "Maximum number of concurrent reconciles per controller",
                CONTROLLER,
            ),
            active_workers: r.gauge(
                "controller_runtime_active_workers",
                "Number of currently used workers per controller",
                CONTROLLER,
            ),
            // The work queue of a controller here is its reconciles waiting for a worker slot
            // (kube-runtime's own scheduler is not observable).
            workqueue_depth: r.gauge("workqueue_depth", "Current depth of workqueue", QUEUE),
            workqueue_adds_total: r.counter(
                "workqueue_adds_total",
                "Total number of adds handled by workqueue",
                QUEUE,
            ),
            workqueue_queue_duration_seconds: r.histogram(
                "workqueue_queue_duration_seconds",
                "How long in seconds an item stays in workqueue before being requested",
                QUEUE,
                WORKQUEUE_BUCKETS,
            ),
            workqueue_work_duration_seconds: r.histogram(
                "workqueue_work_duration_seconds",
                "How long in seconds processing an item from workqueue takes",
                QUEUE,
                WORKQUEUE_BUCKETS,
            ),
            // Part of the queue's time: the wait for a slot at the controller's fair gate.
            gate_wait_seconds: r.histogram(
                "s3_operator_gate_wait_seconds",
                "How long in seconds a due reconcile waited for a reconcile slot, taking turns between namespaces (part of workqueue_queue_duration_seconds)",
                CONTROLLER,
                WORKQUEUE_BUCKETS,
            ),
            // Part of the work's time: the slot is given back once the pass's AWS calls are
            // done, before the writes that report them.
            slot_seconds: r.histogram(
                "s3_operator_reconcile_slot_seconds",
                "How long in seconds a reconcile held its reconcile slot: until its AWS calls were done (part of workqueue_work_duration_seconds)",
                CONTROLLER,
                WORKQUEUE_BUCKETS,
            ),
            workqueue_retries_total: r.counter(
                "workqueue_retries_total",
                "Total number of retries handled by workqueue",
                QUEUE,
            ),
            leader_election_master_status: r.gauge(
                "leader_election_master_status",
                "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease.",
                &["name"],
            ),
            rest_client_requests_total: r.counter(
                "rest_client_requests_total",
                "Number of HTTP requests, partitioned by status code, method, and host",
                &["code", "method", "host"],
            ),
            aws_requests_total: r.counter(
                "s3_operator_aws_requests_total",
                "AWS API requests (every attempt, SDK retries included) by service, operation and outcome (success, not_found, throttled, error, no_response)",
                &["service", "operation", "outcome"],
            ),
            aws_request_duration_seconds: r.histogram(
                "s3_operator_aws_request_duration_seconds",
                "Latency of AWS API calls, SDK retries included, by service and operation",
                &["service", "operation"],
                AWS_BUCKETS,
            ),
            aws_write_budget_exhausted_total: r.counter(
                "s3_operator_aws_write_budget_exhausted_total",
                "Reconciles deferred because their namespace had spent its budget of AWS writes in an account (account: the AWSAccount's name, empty for the operator's own)",
                &["controller", "account"],
            ),
            aws_read_budget_exhausted_total: r.counter(
                "s3_operator_aws_read_budget_exhausted_total",
                "Reconciles deferred because their namespace had spent its budget of AWS reads in an account (account: the AWSAccount's name, empty for the operator's own)",
                &["controller", "account"],
            ),
            wake_overflows_total: r.counter(
                "s3_operator_wake_overflows_total",
                "Times a controller fell behind a wake channel (drift events, grants) and scheduled a full pass of every object it may have missed",
                CONTROLLER,
            ),
            drift_events_total: r.counter(
                "s3_operator_drift_events_total",
                "Messages read from the drift-event queue, by outcome: touched (a bucket, user or role someone else changed), own (the operator's own write), refused (a call AWS refused), other",
                &["outcome"],
            ),
            orphans_total: r.counter(
                "s3_operator_orphans_total",
                "AWS resources of this installation whose owner was gone (a stripped finalizer), by kind and what was done",
                &["kind", "action"],
            ),
            drift_corrections_total: r.counter(
                "s3_operator_drift_corrections_total",
                "Out-of-band changes found in AWS or Kubernetes and corrected, by kind and aspect",
                &["kind", "aspect"],
            ),
            kube_writes_total: r.counter(
                "s3_operator_kube_writes_total",
                "Writes the operator made to the Kubernetes API, by kind and verb",
                &["kind", "verb"],
            ),
            kube_write_duration_seconds: r.histogram(
                "s3_operator_kube_write_duration_seconds",
                "Latency of the operator's writes to the Kubernetes API, by kind and verb",
                &["kind", "verb"],
                AWS_BUCKETS,
            ),
            class_decode_errors: r.gauge(
                "s3_operator_class_decode_errors",
                "Classes the operator cannot read, by kind; the namespaces they may govern fail closed (ClassViolation)",
                &["kind"],
            ),
            managed_objects: r.gauge(
                "s3_operator_managed_objects",
                "Objects the operator manages, by kind, readiness, the class in force and the AWSAccount they live in (empty: none; the operator's own account)",
                &["kind", "ready", "class", "account"],
            ),
            out_of_sync_objects: r.gauge(
                "s3_operator_out_of_sync_objects",
                "Observed objects whose AWS resources differ from their spec (condition InSync=False; status.plan lists what switching them to Manage would change), by kind, class and AWSAccount",
                &["kind", "class", "account"],
            ),
            assume_role_total: r.counter(
                "s3_operator_assume_role_total",
                "STS AssumeRole calls the operator made for an AWSAccount's credentials, by AWSAccount and outcome (ok, error): once per account until the credentials near expiry",
                &["account", "outcome"],
            ),
            access_key_age_seconds: r.single_gauge(
                "s3_operator_access_key_max_age_seconds",
                "Age of the oldest active access key the operator manages",
            ),
            access_key_rotation_overdue_seconds: r.single_gauge(
                "s3_operator_access_key_rotation_overdue_seconds",
                "How far past its next rotation time the most overdue rotating access key is (0: none)",
            ),
            registry: r.0,
        };
        m.start_at_zero();
        m
    }

    /// Every controller's series exist from the first scrape, as controller-runtime's do, so a
    /// dashboard's `rate()` sees the first event.
    fn start_at_zero(&self) {
        for kind in ["BucketClass", "BucketAccessClass"] {
            self.class_decode_errors.with_label_values(&[kind]);
        }
        for c in CONTROLLERS {
            for r in RESULTS {
                self.reconcile_total.with_label_values(&[c, r]);
            }
            for counter in [
                &self.reconcile_errors_total,
                &self.terminal_reconcile_errors_total,
                &self.reconcile_panics_total,
                &self.wake_overflows_total,
                &self.workqueue_adds_total,
                &self.workqueue_retries_total,
            ] {
                counter.with_label_values(&[c]);
            }
            for counter in [
                &self.aws_write_budget_exhausted_total,
                &self.aws_read_budget_exhausted_total,
            ] {
                counter.with_label_values(&[c, ""]);
            }
            self.active_workers.with_label_values(&[c]);
            self.workqueue_depth.with_label_values(&[c]);
            self.workqueue_queue_duration_seconds
                .with_label_values(&[c]);
            self.workqueue_work_duration_seconds.with_label_values(&[c]);
            self.gate_wait_seconds.with_label_values(&[c]);
            self.slot_seconds.with_label_values(&[c]);
        }
        for kind in ORPHAN_KINDS {
            for action in ORPHAN_ACTIONS {
                self.orphans_total.with_label_values(&[kind, action]);
            }
        }
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

    /// Makes `write` to the Kubernetes API, counted and timed by kind and verb.
    pub async fn kube_write<F: Future>(&self, kind: &str, verb: &str, write: F) -> F::Output {
        self.kube_writes_total
            .with_label_values(&[kind, verb])
            .inc();
        let timer = self
            .kube_write_duration_seconds
            .with_label_values(&[kind, verb])
            .start_timer();
        let written = write.await;
        timer.observe_duration();
        written
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

/// A registry that each family joins as it is made.
struct Families(Registry);

impl Families {
    fn add<C: Collector + Clone + 'static>(&self, family: C) -> C {
        self.0
            .register(Box::new(family.clone()))
            .expect("unique metric");
        family
    }

    fn counter(&self, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
        self.add(IntCounterVec::new(Opts::new(name, help), labels).expect("valid counter"))
    }

    fn gauge(&self, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
        self.add(IntGaugeVec::new(Opts::new(name, help), labels).expect("valid gauge"))
    }

    fn single_gauge(&self, name: &str, help: &str) -> Gauge {
        self.add(Gauge::new(name, help).expect("valid gauge"))
    }

    fn histogram(&self, name: &str, help: &str, labels: &[&str], buckets: &[f64]) -> HistogramVec {
        let opts = HistogramOpts::new(name, help).buckets(buckets.to_vec());
        self.add(HistogramVec::new(opts, labels).expect("valid histogram"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconcile_results_start_at_zero_for_every_controller() {
        let text = Metrics::new().render();
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
                format!("controller_runtime_reconcile_errors_total{{controller=\"{c}\"}} 0"),
                format!("workqueue_depth{{name=\"{c}\"}} 0"),
                format!("workqueue_adds_total{{name=\"{c}\"}} 0"),
                format!("workqueue_retries_total{{name=\"{c}\"}} 0"),
            ] {
                assert!(text.contains(&line), "missing {line}");
            }
        }
        for family in [
            "workqueue_queue_duration_seconds",
            "workqueue_work_duration_seconds",
            "s3_operator_gate_wait_seconds",
            "s3_operator_reconcile_slot_seconds",
        ] {
            assert!(
                text.contains(&format!("# TYPE {family} ")),
                "missing {family}"
            );
        }
    }

    #[tokio::test]
    async fn each_registry_counts_alone() {
        let (a, b) = (Metrics::new(), Metrics::new());
        a.kube_write("Secret", "apply", async {}).await;
        let applied = |m: &Metrics| {
            m.kube_writes_total
                .with_label_values(&["Secret", "apply"])
                .get()
        };
        assert_eq!((applied(&a), applied(&b)), (1, 0));
        let timed = |m: &Metrics| {
            m.kube_write_duration_seconds
                .with_label_values(&["Secret", "apply"])
                .get_sample_count()
        };
        assert_eq!((timed(&a), timed(&b)), (1, 0));
    }
}
