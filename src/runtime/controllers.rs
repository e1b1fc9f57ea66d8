//! Controller wiring: one controller per kind and scope, worker slots, the root span and metrics
//! around every reconcile, error policy and the bookkeeping of deleted objects.

use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join_all;
use futures::{FutureExt, StreamExt};
use kube::api::DynamicObject;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use prometheus::IntGauge;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tracing::Instrument;

use super::lifecycle::wait_true;
use super::watches::{Gated, Watched, Watches, events, trigger};
use super::{Config, Error, telemetry};
use crate::api::condition::is_ready;
use crate::api::{Bucket, BucketAccess};
use crate::metrics::{self, METRICS};
use crate::reconcile::bucket::logging::Linked;
use crate::reconcile::{self, Backoff, Context, Requeue, Settled, object_key};

/// Longest a reconcile may run; then it fails and is retried with backoff. Cancelling one is
/// like a crash at that point, which every reconcile is written to survive.
pub const RECONCILE_TIMEOUT: Duration = Duration::from_secs(300);

/// One Bucket and one BucketAccess controller per watched scope, fed by the warm watches.
pub(super) async fn run(
    config: &Config,
    ctx: Arc<Context>,
    scopes: Vec<Watches>,
    shutdown: watch::Receiver<bool>,
) {
    let concurrency = config.max_concurrent_reconciles;
    for c in metrics::CONTROLLERS {
        METRICS
            .max_concurrent_reconciles
            .with_label_values(&[c])
            .set(i64::from(concurrency) * scopes.len() as i64);
    }
    let mut runs = Vec::new();
    let mut bucket_stores = Vec::new();
    let mut access_stores = Vec::new();
    for w in scopes {
        bucket_stores.push(w.buckets.clone());
        access_stores.push(w.accesses.clone());
        tokio::spawn(forget_deleted(w.bucket_deletions, ctx.clone()));
        tokio::spawn(forget_deleted(w.access_deletions, ctx.clone()));
        let (store, linked) = (w.buckets.clone(), Linked::default());
        let buckets = controller_for(&w.buckets, w.bucket_events, &shutdown).watches_shared_stream(
            events(w.bucket_events_for_logging),
            move |b: Arc<Bucket>| linked.related(&store, &b),
        );
        let run = drive(
            buckets,
            "bucket",
            reconcile::bucket::reconcile,
            concurrency,
            &ctx,
        );
        runs.push(run);
        let store = w.accesses.clone();
        let accesses = controller_for(&w.accesses, w.access_events, &shutdown)
            .owns_shared_stream(events(w.secret_events))
            .watches_shared_stream(
                events(w.bucket_events_for_accesses),
                move |b: Arc<Bucket>| accesses_of(&store, &b),
            );
        let reconcile = reconcile::bucket_access::reconcile;
        runs.push(drive(
            accesses,
            "bucketaccess",
            reconcile,
            concurrency,
            &ctx,
        ));
    }
    tokio::spawn(report_managed_objects(
        bucket_stores,
        access_stores,
        shutdown,
    ));
    join_all(runs).await;
}

/// A controller fed by a warm store: everything in it, then every change it hears of.
fn controller_for<K: Watched>(
    store: &Store<K>,
    changes: Gated<K>,
    shutdown: &watch::Receiver<bool>,
) -> Controller<K> {
    Controller::for_shared_stream(trigger(store.state(), changes), store.clone())
        .with_config(controller::Config::default())
        .graceful_shutdown_on(wait_true(shutdown.clone()))
}

/// A Bucket change wakes every BucketAccess that refers to it.
fn accesses_of(store: &Store<BucketAccess>, b: &Bucket) -> Vec<ObjectRef<BucketAccess>> {
    let ns = b.namespace();
    store
        .state()
        .into_iter()
        .filter(|a| a.namespace() == ns && a.spec.bucket_ref.name == b.name_any())
        .map(|a| ObjectRef::from_obj(a.as_ref()))
        .collect()
}

/// Runs a controller with `reconcile`, at most `concurrency` reconciles at once.
///
/// kube's own concurrency limit can strand a queued object for good: under load, objects queued
/// behind a full set of workers were never reconciled (seen in the leader-kill and AWS-fault
/// suites). The controller runs unbounded and each reconcile waits for a permit here instead;
/// kube still never runs two reconciles of one object at once.
fn drive<K, F, Fut>(
    controller: Controller<K>,
    name: &'static str,
    reconcile: F,
    concurrency: u16,
    ctx: &Arc<Context>,
) -> futures::future::BoxFuture<'static, ()>
where
    K: Watched,
    F: Fn(Arc<K>, Arc<Context>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<Requeue, reconcile::Error>> + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(concurrency.into()));
    let after = ctx.clone();
    controller
        .run(
            move |obj, c| {
                let reconcile = reconcile.clone();
                with_slot(slots.clone(), name, move || {
                    Box::pin(instrumented(name, obj, c, reconcile))
                })
            },
            error_policy,
            ctx.clone(),
        )
        .for_each(move |r| {
            after_reconcile(r, &after);
            async {}
        })
        .boxed()
}

/// Failed reconciles are logged by `instrumented`, and an object deleted before its turn is
/// no news; anything else from the controller machinery is.
fn after_reconcile<T, E, Q>(result: Result<T, controller::Error<E, Q>>, ctx: &Context)
where
    E: std::error::Error,
    Q: std::error::Error,
{
    match result {
        Ok(_) | Err(controller::Error::ReconcilerFailed(..)) => {}
        // Its bookkeeping goes too, should a reconcile have finished after its Delete event, or
        // that event have been missed while the watch was down.
        Err(controller::Error::ObjectNotFound(r)) => {
            forget(&ctx.settled, &ctx.backoff, &ref_key(&r))
        }
        Err(e) => tracing::warn!(error = %e, "controller error"),
    }
}

/// Drops the bookkeeping of every object deleted from the cluster.
async fn forget_deleted<K: Resource<DynamicType = ()>>(mut deleted: Gated<K>, ctx: Arc<Context>) {
    while let Some(obj) = deleted.recv().await {
        forget(&ctx.settled, &ctx.backoff, &object_key(obj.as_ref()));
    }
}

fn forget(settled: &Settled, backoff: &Backoff, key: &str) {
    settled.forget(key);
    backoff.reset(key);
}

/// `object_key` of the object a controller reference names.
fn ref_key(r: &ObjectRef<DynamicObject>) -> String {
    let ns = r.namespace.as_deref().unwrap_or_default();
    format!("{}/{ns}/{}", r.dyntype.kind, r.name)
}

/// Runs a reconcile once one of `slots` is free. Its future is built (and boxed) by `start`
/// only then: thousands of objects wait at once at startup, and a waiting object should cost
/// a few bytes, not a whole reconcile's state. The span starts after the wait, so traces and
/// the duration metric show the work, not the queue.
async fn with_slot<F>(
    slots: Arc<Semaphore>,
    controller: &'static str,
    start: F,
) -> Result<Action, Error>
where
    F: FnOnce() -> Pin<Box<dyn Future<Output = Result<Action, Error>> + Send>>,
{
    let _permit = queued(slots, controller).await;
    start().await
}

/// Waits for a worker slot. This wait is the controller's work queue as far as it can be
/// seen (kube-runtime's scheduler is not), so it feeds controller-runtime's workqueue metrics.
async fn queued(slots: Arc<Semaphore>, name: &str) -> OwnedSemaphorePermit {
    /// Leaves the queue also when the wait is cancelled (at shutdown).
    struct InQueue(IntGauge);
    impl Drop for InQueue {
        fn drop(&mut self) {
            self.0.dec();
        }
    }
    METRICS
        .workqueue_adds_total
        .with_label_values(&[name])
        .inc();
    let depth = METRICS.workqueue_depth.with_label_values(&[name]);
    depth.inc();
    let in_queue = InQueue(depth);
    let start = Instant::now();
    let permit = slots
        .acquire_owned()
        .await
        .expect("worker slots are never closed");
    drop(in_queue);
    METRICS
        .workqueue_queue_duration_seconds
        .with_label_values(&[name])
        .observe(start.elapsed().as_secs_f64());
    permit
}

/// One root span, metrics, a deadline and backoff bookkeeping around every reconcile.
async fn instrumented<K, F, Fut>(
    controller: &'static str,
    obj: Arc<K>,
    ctx: Arc<Context>,
    reconcile: F,
) -> Result<Action, Error>
where
    K: Resource<DynamicType = ()>,
    F: FnOnce(Arc<K>, Arc<Context>) -> Fut,
    Fut: Future<Output = Result<Requeue, reconcile::Error>>,
{
    let kind = K::kind(&());
    let span = tracing::info_span!(
        parent: None,
        "reconcile",
        otel.name = format!("reconcile {kind}"),
        otel.kind = "internal",
        k8s.namespace = obj.meta().namespace.as_deref().unwrap_or_default(),
        k8s.name = obj.meta().name.as_deref().unwrap_or_default(),
        kind = kind.as_ref(),
        generation = obj.meta().generation.unwrap_or_default(),
        outcome = tracing::field::Empty,
        trace_id = tracing::field::Empty,
    );
    span.record(
        "trace_id",
        span.in_scope(telemetry::current_trace_id).as_str(),
    );
    let key = object_key(obj.as_ref());
    let workers = METRICS.active_workers.with_label_values(&[controller]);
    workers.inc();
    let start = Instant::now();
    let run = reconcile(obj, ctx.clone()).instrument(span.clone());
    let result = guarded(controller, run).await;
    workers.dec();
    let seconds = start.elapsed().as_secs_f64();
    for histogram in [
        &METRICS.reconcile_time_seconds,
        &METRICS.workqueue_work_duration_seconds,
    ] {
        histogram.with_label_values(&[controller]).observe(seconds);
    }
    let outcome = result_label(&result);
    match &result {
        Ok(_) => ctx.backoff.reset(&key),
        // A deletion waiting for someone to act is a state, reported in status and events: it
        // is retried with backoff but is no failed reconcile.
        Err(Error::Reconcile(e)) if e.is_deletion_blocked() => {
            span.in_scope(|| tracing::info!(reason = %e, "deletion waits; retrying with backoff"));
        }
        Err(Error::Reconcile(e)) if e.is_stale_write() => {
            span.in_scope(
                || tracing::debug!(error = %e, "stale cache; the newer version runs again"),
            );
        }
        Err(e) => {
            METRICS
                .reconcile_errors_total
                .with_label_values(&[controller])
                .inc();
            span.in_scope(|| tracing::warn!(error = %e, "reconcile failed; retrying with backoff"));
        }
    }
    span.record("outcome", outcome);
    span.in_scope(|| tracing::debug!(outcome, seconds, "reconcile finished"));
    METRICS
        .reconcile_total
        .with_label_values(&[controller, outcome])
        .inc();
    result.map(Requeue::action)
}

/// Runs a reconcile within its deadline. A panic becomes an error, retried with backoff and
/// counted, as controller-runtime recovers panics: one bad object cannot stop a controller.
async fn guarded<Fut>(controller: &str, run: Fut) -> Result<Requeue, Error>
where
    Fut: Future<Output = Result<Requeue, reconcile::Error>>,
{
    match tokio::time::timeout(RECONCILE_TIMEOUT, AssertUnwindSafe(run).catch_unwind()).await {
        Ok(Ok(result)) => result.map_err(Error::from),
        Ok(Err(panic)) => {
            METRICS
                .reconcile_panics_total
                .with_label_values(&[controller])
                .inc();
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            Err(Error::ReconcilePanic(what))
        }
        Err(_) => Err(Error::ReconcileTimeout(RECONCILE_TIMEOUT)),
    }
}

/// The `result` label of `controller_runtime_reconcile_total`, in controller-runtime's terms:
/// a requeue sooner than the resync is `requeue_after`; a blocked deletion, retried with
/// backoff, and a write lost to a newer version of the object are `requeue`.
fn result_label(result: &Result<Requeue, Error>) -> &'static str {
    match result {
        Ok(Requeue::OnChange | Requeue::Resync(_)) => "success",
        Ok(Requeue::After(_)) => "requeue_after",
        Err(Error::Reconcile(e)) if e.is_deletion_blocked() || e.is_stale_write() => "requeue",
        Err(_) => "error",
    }
}

fn error_policy<K: Resource<DynamicType = ()>>(
    obj: Arc<K>,
    _e: &Error,
    ctx: Arc<Context>,
) -> Action {
    let controller = K::kind(&()).to_lowercase();
    METRICS
        .workqueue_retries_total
        .with_label_values(&[controller.as_str()])
        .inc();
    Action::requeue(ctx.backoff.next(&object_key(obj.as_ref())))
}

async fn report_managed_objects(
    buckets: Vec<Store<Bucket>>,
    accesses: Vec<Store<BucketAccess>>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let count = |ready: Vec<bool>| {
            (
                ready.iter().filter(|r| **r).count() as i64,
                ready.iter().filter(|r| !**r).count() as i64,
            )
        };
        let b = count(
            buckets
                .iter()
                .flat_map(|s| s.state())
                .map(|b| b.status.as_ref().is_some_and(|s| is_ready(&s.conditions)))
                .collect(),
        );
        // One snapshot of the BucketAccess caches for every figure below.
        let all_accesses: Vec<_> = accesses.iter().flat_map(|s| s.state()).collect();
        let a = count(
            all_accesses
                .iter()
                .map(|a| a.status.as_ref().is_some_and(|s| is_ready(&s.conditions)))
                .collect(),
        );
        // Age of the oldest active access key: the key's creation time is in status.
        let now = jiff::Timestamp::now();
        let oldest = all_accesses
            .iter()
            .filter_map(|a| a.status.as_ref()?.last_rotation_time.as_ref().map(|t| t.0))
            .min();
        METRICS
            .access_key_age_seconds
            .set(oldest.map_or(0.0, |t| now.duration_since(t).as_secs_f64().max(0.0)));
        // Rotation is checked on every resync; a key far past its time means rotation is failing.
        let overdue = all_accesses
            .iter()
            .filter_map(|a| a.status.as_ref()?.next_rotation_time.as_ref().map(|t| t.0))
            .map(|next| now.duration_since(next).as_secs_f64())
            .fold(0.0, f64::max);
        METRICS.access_key_rotation_overdue_seconds.set(overdue);
        for (kind, (ready, not_ready)) in [("Bucket", b), ("BucketAccess", a)] {
            METRICS
                .managed_objects
                .with_label_values(&[kind, "true"])
                .set(ready);
            METRICS
                .managed_objects
                .with_label_values(&[kind, "false"])
                .set(not_ready);
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(5)) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket(name: &str) -> Arc<Bucket> {
        let b = serde_json::json!({"apiVersion": "s3.operator.dev/v1alpha1", "kind": "Bucket",
            "metadata": {"name": name, "namespace": "team-a"}, "spec": {}});
        Arc::new(serde_json::from_value(b).unwrap())
    }

    #[tokio::test]
    async fn deleted_objects_lose_their_bookkeeping_and_wake_their_accesses() {
        let (settled, backoff) = (Settled::default(), Backoff::default());
        let (gone, kept) = (bucket("gone"), bucket("kept"));
        for b in [&gone, &kept] {
            let key = object_key(b.as_ref());
            settled.record(key.clone(), vec![vec!["1".into()]], Duration::from_secs(60));
            for _ in 0..4 {
                backoff.next(&key);
            }
        }

        // The watch hands a deletion only to the subscribers that hear of deletions.
        use crate::runtime::watches::{Fanout, Hear::*};
        let (fanout, mut rx) = Fanout::new(&[Changes, ChangesAndDeletions, Deletions]);
        fanout.send(&kept, false);
        fanout.send(&gone, true);
        let names = |rx: &mut Gated<Bucket>| {
            std::iter::from_fn(|| rx.try_recv().ok())
                .map(|b| b.name_any())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&mut rx[0]), ["kept"], "the Bucket controller");
        assert_eq!(
            names(&mut rx[1]),
            ["kept", "gone"],
            "the BucketAccess mapper"
        );
        assert_eq!(names(&mut rx[2]), ["gone"], "the bookkeeping");

        // What `forget_deleted` does with each deleted object.
        forget(&settled, &backoff, &object_key(gone.as_ref()));
        let (gone_key, kept_key) = (object_key(gone.as_ref()), object_key(kept.as_ref()));
        assert_eq!(settled.remaining(&gone_key, &["1".into()]), None);
        assert!(
            backoff.next(&gone_key) < Duration::from_millis(1200),
            "backoff reset"
        );
        assert!(settled.remaining(&kept_key, &["1".into()]).is_some());
        assert!(
            backoff.next(&kept_key) >= Duration::from_secs(16),
            "kept its backoff"
        );

        // What `after_reconcile` does when a scheduled reconcile finds its object gone.
        let r = ObjectRef::from_obj(kept.as_ref()).erase();
        assert_eq!(ref_key(&r), kept_key);
        forget(&settled, &backoff, &ref_key(&r));
        assert_eq!(settled.remaining(&kept_key, &["1".into()]), None);
    }

    #[test]
    fn a_requeue_before_the_resync_is_counted_as_requeue_after() {
        let d = Duration::from_secs(1);
        assert_eq!(result_label(&Ok(Requeue::Resync(d))), "success");
        assert_eq!(result_label(&Ok(Requeue::OnChange)), "success");
        assert_eq!(result_label(&Ok(Requeue::After(d))), "requeue_after");
        let blocked = reconcile::Error::DeletionBlocked("bucket not empty".into());
        assert_eq!(result_label(&Err(Error::Reconcile(blocked))), "requeue");
        let status = |code: u16| {
            reconcile::Error::Kube(kube::Error::Api(
                kube::core::Status::failure("finalizer patch", "Reason")
                    .with_code(code)
                    .boxed(),
            ))
        };
        assert_eq!(result_label(&Err(Error::Reconcile(status(409)))), "requeue");
        assert_eq!(result_label(&Err(Error::Reconcile(status(500)))), "error");
        assert_eq!(result_label(&Err(Error::ReconcileTimeout(d))), "error");
        // Every label is one the metric starts with, so dashboards see it from the first scrape.
        assert!(
            ["success", "requeue_after", "requeue", "error"]
                .iter()
                .all(|l| metrics::RESULTS.contains(l))
        );
    }

    #[tokio::test]
    async fn a_panicking_reconcile_is_counted_and_becomes_an_error() {
        let panics = || {
            METRICS
                .reconcile_panics_total
                .with_label_values(&["panic-test"])
                .get()
        };
        let run = async { panic!("bad object") };
        let err = guarded("panic-test", run).await.unwrap_err();
        assert!(
            matches!(&err, Error::ReconcilePanic(m) if m == "bad object"),
            "{err}"
        );
        assert_eq!(panics(), 1);
        let ok = guarded("panic-test", async { Ok(Requeue::OnChange) }).await;
        assert_eq!(ok.unwrap(), Requeue::OnChange);
        assert_eq!(panics(), 1);
    }

    #[tokio::test]
    async fn reconciles_waiting_for_a_slot_are_the_work_queue() {
        let name = "queue-test";
        let depth = || METRICS.workqueue_depth.with_label_values(&[name]).get();
        let slots = Arc::new(Semaphore::new(1));
        let busy = slots.clone().acquire_owned().await.unwrap();
        let waiting = tokio::spawn(queued(slots.clone(), name));
        let cancelled = tokio::spawn(queued(slots.clone(), name));
        while depth() < 2 {
            tokio::task::yield_now().await;
        }
        cancelled.abort();
        let _ = cancelled.await;
        assert_eq!(depth(), 1, "a cancelled wait leaves the queue");
        drop(busy);
        drop(waiting.await.unwrap());
        assert_eq!(depth(), 0);
        let adds = METRICS.workqueue_adds_total.with_label_values(&[name]);
        assert_eq!(adds.get(), 2);
        let waited = METRICS
            .workqueue_queue_duration_seconds
            .with_label_values(&[name]);
        assert_eq!(waited.get_sample_count(), 1);
    }
}
