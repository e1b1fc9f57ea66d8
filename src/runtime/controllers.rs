//! Controller wiring: one controller per kind and scope, worker slots, the root span and metrics
//! around every reconcile, error policy and the bookkeeping of deleted objects.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join_all;
use futures::{FutureExt, StreamExt};
use kube::api::DynamicObject;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use tokio::sync::{Semaphore, watch};
use tracing::Instrument;

use super::lifecycle::wait_true;
use super::watches::{Gated, Watched, Watches, events, trigger};
use super::{Config, Error, telemetry};
use crate::api::condition::is_ready;
use crate::api::{Bucket, BucketAccess};
use crate::metrics::{self, METRICS};
use crate::reconcile::{self, Backoff, Context, Settled, object_key};

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
        let stop = wait_true(shutdown.clone());
        let buckets = Controller::for_shared_stream(
            trigger(w.buckets.state(), w.bucket_events),
            w.buckets.clone(),
        )
        .with_config(controller::Config::default())
        .graceful_shutdown_on(stop);
        let slots = Arc::new(Semaphore::new(concurrency.into()));
        runs.push(drive(
            buckets,
            slots,
            "bucket",
            reconcile::bucket::reconcile,
            &ctx,
        ));
        let store = w.accesses.clone();
        let stop = wait_true(shutdown.clone());
        let accesses = Controller::for_shared_stream(
            trigger(w.accesses.state(), w.access_events),
            w.accesses.clone(),
        )
        .with_config(controller::Config::default())
        .graceful_shutdown_on(stop)
        .owns_shared_stream(events(w.secret_events))
        .watches_shared_stream(
            events(w.bucket_events_for_accesses),
            move |b: Arc<Bucket>| accesses_of(&store, &b),
        );
        let slots = Arc::new(Semaphore::new(concurrency.into()));
        runs.push(drive(
            accesses,
            slots,
            "bucketaccess",
            reconcile::bucket_access::reconcile,
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

/// Runs a controller with `reconcile`, each reconcile waiting for one of `slots`.
///
/// kube's own concurrency limit can strand a queued object for good: under load, objects queued
/// behind a full set of workers were never reconciled (seen in the leader-kill and AWS-fault
/// suites). The controller runs unbounded and each reconcile waits for a permit here instead;
/// kube still never runs two reconciles of one object at once.
fn drive<K, F, Fut>(
    controller: Controller<K>,
    slots: Arc<Semaphore>,
    name: &'static str,
    reconcile: F,
    ctx: &Arc<Context>,
) -> futures::future::BoxFuture<'static, ()>
where
    K: Watched,
    F: Fn(Arc<K>, Arc<Context>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, reconcile::Error>> + Send + 'static,
{
    let after = ctx.clone();
    controller
        .run(
            move |obj, c| with_slot(slots.clone(), name, obj, c, reconcile.clone()),
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

/// Runs `reconcile` once one of `slots` is free. The reconcile's future is built (and boxed)
/// only then: thousands of objects wait at once at startup, and a waiting object should cost
/// a few bytes, not a whole reconcile's state. The span starts after the wait, so traces and
/// the duration metric show the work, not the queue.
async fn with_slot<K, F, Fut>(
    slots: Arc<Semaphore>,
    controller: &'static str,
    obj: Arc<K>,
    ctx: Arc<Context>,
    reconcile: F,
) -> Result<Action, Error>
where
    K: Resource<DynamicType = ()>,
    F: FnOnce(Arc<K>, Arc<Context>) -> Fut,
    Fut: Future<Output = Result<Action, reconcile::Error>>,
{
    let _permit = slots
        .acquire_owned()
        .await
        .expect("worker slots are never closed");
    Box::pin(instrumented(controller, obj, ctx, reconcile)).await
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
    Fut: Future<Output = Result<Action, reconcile::Error>>,
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
    let result = match tokio::time::timeout(RECONCILE_TIMEOUT, run).await {
        Ok(r) => r.map_err(Error::from),
        Err(_) => Err(Error::ReconcileTimeout(RECONCILE_TIMEOUT)),
    };
    workers.dec();
    METRICS
        .reconcile_time_seconds
        .with_label_values(&[controller])
        .observe(start.elapsed().as_secs_f64());
    let outcome = match &result {
        Ok(_) => {
            ctx.backoff.reset(&key);
            "success"
        }
        // A deletion waiting for someone to act is a state, reported in status and events: it
        // is retried with backoff but is no failed reconcile.
        Err(Error::Reconcile(e)) if e.is_deletion_blocked() => {
            span.in_scope(|| tracing::info!(reason = %e, "deletion waits; retrying with backoff"));
            "requeue"
        }
        Err(e) => {
            METRICS
                .reconcile_errors_total
                .with_label_values(&[controller])
                .inc();
            span.in_scope(|| tracing::warn!(error = %e, "reconcile failed; retrying with backoff"));
            "error"
        }
    };
    span.record("outcome", outcome);
    span.in_scope(|| {
        tracing::debug!(
            outcome,
            seconds = start.elapsed().as_secs_f64(),
            "reconcile finished"
        )
    });
    METRICS
        .reconcile_total
        .with_label_values(&[controller, outcome])
        .inc();
    result
}

fn error_policy<K: Resource<DynamicType = ()>>(
    obj: Arc<K>,
    _e: &Error,
    ctx: Arc<Context>,
) -> Action {
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
}
