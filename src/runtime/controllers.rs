//! Controller wiring: one controller per kind and scope, worker slots, the root span and metrics
//! around every reconcile, error policy and the bookkeeping of deleted objects.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::{BoxFuture, join_all};
use futures::stream::BoxStream;
use futures::{FutureExt, Stream, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::Resource;
use kube::api::DynamicObject;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{self, Action};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::utils::CancelableJoinHandle;
use tokio::sync::{Semaphore, watch};
use tracing::{Instrument, Span};

use super::backoff::Backoff;
use super::class_watches::{ClassKind, Wake};
use super::drift_events;
use super::fair::{Gate, Turns};
use super::lifecycle::wait_true;
use super::sweep;
use super::wakes::{AccessFanout, accesses_touched, buckets_touched, granted_on, woken_by_classes};
use super::watches::{Gated, Watched, Watches, events, trigger};
use super::{Config, Error, telemetry};
use crate::api::condition::{IN_SYNC, is_ready};
use crate::api::{Bucket, BucketAccess};
use crate::aws::budget::{Key, Kind};
use crate::aws::drift_queue::Touched;
use crate::metrics::{self, Metrics};
use crate::reconcile::bucket::logging::Linked;
use crate::reconcile::refs::Referrers;
use crate::reconcile::{self, Context, Requeue, object_key};

/// Longest a reconcile may run; then it fails and is retried with backoff. Cancelling one is
/// like a crash at that point, which every reconcile is written to survive.
pub const RECONCILE_TIMEOUT: Duration = Duration::from_secs(300);

/// One Bucket and one BucketAccess controller per watched scope, fed by the warm watches.
pub(super) async fn run(
    config: &Config,
    ctx: Arc<Context>,
    scopes: Vec<Watches>,
    classes: &tokio::sync::broadcast::Sender<Wake>,
    shutdown: watch::Receiver<bool>,
) {
    let concurrency = config.max_concurrent_reconciles;
    for c in metrics::CONTROLLERS {
        ctx.metrics
            .max_concurrent_reconciles
            .with_label_values(&[c])
            .set(i64::from(concurrency) * scopes.len() as i64);
    }
    let bucket_stores: Vec<_> = scopes.iter().map(|w| w.buckets.clone()).collect();
    let access_stores: Vec<_> = scopes.iter().map(|w| w.accesses.clone()).collect();
    // Subscribed by every scope's controllers before the first event is read.
    let (touched, _) = tokio::sync::broadcast::channel(1024);
    let shared = Shared {
        queues: Queues {
            buckets: Queue::new("bucket", &ctx.metrics),
            accesses: Queue::new("bucketaccess", &ctx.metrics),
        },
        concurrency,
        ctx: &ctx,
        wakers: Wakers {
            classes,
            touched: &touched,
        },
        shutdown: &shutdown,
    };
    let runs: Vec<_> = scopes
        .into_iter()
        .flat_map(|w| start_scope(w, &shared))
        .collect();
    if let Some(url) = &config.drift_events_queue_url {
        let queue = ctx.accounts.home().aws.drift_queue(url);
        tokio::spawn(drift_events::poll(
            queue,
            ctx.clone(),
            touched,
            shutdown.clone(),
        ));
    }
    let live = sweep::Live {
        buckets: bucket_stores.clone(),
        accesses: access_stores.clone(),
        namespaces: config.watch_namespaces.clone(),
    };
    let period = config.orphan_sweep_period;
    tokio::spawn(sweep::run(ctx.clone(), live, period, shutdown.clone()));
    tokio::spawn(report_managed_objects(
        bucket_stores,
        access_stores,
        ctx.metrics.clone(),
        shutdown,
    ));
    join_all(runs).await;
}

/// What wakes objects besides their own watches: class changes and drift events.
struct Wakers<'a> {
    classes: &'a tokio::sync::broadcast::Sender<Wake>,
    touched: &'a tokio::sync::broadcast::Sender<Touched>,
}

/// Each kind's work queue, shared by its controllers in every scope.
struct Queues {
    buckets: Queue,
    accesses: Queue,
}

/// What the controllers of every watched scope share.
struct Shared<'a> {
    queues: Queues,
    /// Reconciles at once per kind and scope (`--max-concurrent-reconciles`).
    concurrency: u16,
    ctx: &'a Arc<Context>,
    wakers: Wakers<'a>,
    shutdown: &'a watch::Receiver<bool>,
}

/// The BucketAccess controller's watches besides its own objects: its Secrets and the Buckets
/// it grants on.
struct AccessWatches {
    secrets: Gated<PartialObjectMeta<Secret>>,
    config_maps: Gated<PartialObjectMeta<ConfigMap>>,
    buckets: Gated<Bucket>,
    /// Who of the scope's BucketAccesses is granted on each Bucket.
    granted: Arc<Referrers<BucketAccess>>,
}

/// The Bucket and BucketAccess controllers of one watched scope, each reconcile waiting at a
/// gate of `concurrency` slots, and the bookkeeping of the objects deleted from it.
fn start_scope(w: Watches, s: &Shared) -> [BoxFuture<'static, ()>; 2] {
    forget_deletions(w.bucket_deletions, w.access_deletions, s);
    let logging = (w.bucket_events_for_logging, w.bucket_refs);
    let buckets = bucket_controller(&w.buckets, w.bucket_events, logging, s);
    let access_watches = AccessWatches {
        secrets: w.secret_events,
        config_maps: w.config_map_events,
        buckets: w.bucket_events_for_accesses,
        granted: w.access_refs,
    };
    let accesses = access_controller(&w.accesses, w.access_events, access_watches, &w.buckets, s);
    drive_both((buckets, w.buckets), (accesses, w.accesses), s)
}

/// Spawns the bookkeeping of the scope's deleted objects. Both kinds share one set of cleanup
/// slots: deletions the operator did not clean up after (a stripped finalizer) are cleaned up
/// at most `VANISHED_AT_ONCE` at a time of either kind, not that many of each.
fn forget_deletions(buckets: Gated<Bucket>, accesses: Gated<BucketAccess>, s: &Shared) {
    let slots = Arc::new(Semaphore::new(sweep::VANISHED_AT_ONCE));
    tokio::spawn(forget_deleted(
        buckets,
        s.ctx.clone(),
        s.queues.buckets.clone(),
        (sweep::vanished_bucket, slots.clone()),
    ));
    tokio::spawn(forget_deleted(
        accesses,
        s.ctx.clone(),
        s.queues.accesses.clone(),
        (sweep::vanished_access, slots),
    ));
}

/// The Bucket controller's triggers. Besides its own changes, a Bucket is woken by a change of
/// the Bucket it logs into (its target changed) or of one that logs or logged into it (the grant
/// it gives that Bucket changed), by its class changing and by drift events on its bucket.
fn bucket_controller(
    store: &Store<Bucket>,
    changes: Gated<Bucket>,
    (logging, refs): (Gated<Bucket>, Arc<Referrers<Bucket>>),
    s: &Shared,
) -> Triggers<Bucket> {
    let (queue, classes) = (&s.queues.buckets, s.wakers.classes);
    let (linked, mapped) = (Linked::default(), queue.clone());
    Triggers::of(store, changes, queue)
        .mapped(events(logging), move |b: Arc<Bucket>| {
            mapped.added(linked.related(&refs, &b))
        })
        .on(woken_by_classes(classes, store, ClassKind::Bucket, queue))
        .on(buckets_touched(s.wakers.touched, store, s.ctx, queue))
}

/// The BucketAccess controller's triggers. Besides its own changes, a BucketAccess is woken by
/// its Secret changing, by a change of its Bucket that it decides from, by the bucket behind the
/// name it grants on changing hands, by its class changing and by drift events on its identity.
fn access_controller(
    store: &Store<BucketAccess>,
    changes: Gated<BucketAccess>,
    watches: AccessWatches,
    buckets: &Store<Bucket>,
    s: &Shared,
) -> Triggers<BucketAccess> {
    let (queue, classes) = (&s.queues.accesses, s.wakers.classes);
    // The queue's metrics see a Secret's change as what it is: a wake of its owner.
    let owners = queue.clone();
    let secrets = events(watches.secrets).inspect(move |sec| owners.add_owner_of(sec.as_ref()));
    let owners = queue.clone();
    let config_maps =
        events(watches.config_maps).inspect(move |cm| owners.add_owner_of(cm.as_ref()));
    let (mapped, granted, buckets_seen) = (queue.clone(), watches.granted, buckets.clone());
    let fanout = AccessFanout::default();
    Triggers::of(store, changes, queue)
        .owning(secrets)
        .owning(config_maps)
        .mapped(events(watches.buckets), move |b: Arc<Bucket>| {
            mapped.added(fanout.accesses_of(&granted, &buckets_seen, &b))
        })
        .on(granted_on(store, s.ctx, queue))
        .on(woken_by_classes(classes, store, ClassKind::Access, queue))
        .on(accesses_touched(s.wakers.touched, store, s.ctx, queue))
}

/// Runs both controllers with their reconciles. Each kind has a gate of its own, as
/// controller-runtime's MaxConcurrentReconciles is per controller: a flood of Buckets does not
/// take the BucketAccesses' slots.
fn drive_both(
    (buckets, bucket_store): (Triggers<Bucket>, Store<Bucket>),
    (accesses, access_store): (Triggers<BucketAccess>, Store<BucketAccess>),
    s: &Shared,
) -> [BoxFuture<'static, ()>; 2] {
    let gate = || closed_on_shutdown(Gate::new(s.concurrency), s.shutdown);
    let bucket_turns = (s.queues.buckets.clone(), gate(), bucket_store);
    let access_turns = (s.queues.accesses.clone(), gate(), access_store);
    [
        drive(
            buckets,
            (reconcile::bucket::reconcile, reconcile::bucket::budget_key),
            bucket_turns,
            s,
        ),
        drive(
            accesses,
            (
                reconcile::bucket_access::reconcile,
                reconcile::bucket_access::budget_key,
            ),
            access_turns,
            s,
        ),
    ]
}

/// `gate`, closed when `shutdown` fires.
fn closed_on_shutdown(gate: Gate, shutdown: &watch::Receiver<bool>) -> Gate {
    let (closing, shutdown) = (gate.clone(), shutdown.clone());
    tokio::spawn(async move {
        wait_true(shutdown).await;
        closing.close();
    });
    gate
}

/// Everything that names an object of kind `K` for a reconcile: the warm store's objects, then
/// every change heard of them, and what each other watch or waker maps to them.
struct Triggers<K: Resource>(Vec<BoxStream<'static, ObjectRef<K>>>);

impl<K: Watched + Resource<DynamicType = ()>> Triggers<K> {
    fn of(store: &Store<K>, changes: Gated<K>, queue: &Queue) -> Triggers<K> {
        let queue = queue.clone();
        let objects = trigger(store.state(), changes).map(move |o| {
            queue.add(object_key(o.as_ref()));
            ObjectRef::from_obj(o.as_ref())
        });
        Triggers(vec![objects.boxed()])
    }

    fn on(mut self, wakes: impl Stream<Item = ObjectRef<K>> + Send + 'static) -> Self {
        self.0.push(wakes.boxed());
        self
    }

    /// Objects of another kind, each naming those of `K` that `map` gives.
    fn mapped<O: Send + Sync + 'static>(
        self,
        others: impl Stream<Item = Arc<O>> + Send + 'static,
        map: impl Fn(Arc<O>) -> Vec<ObjectRef<K>> + Send + 'static,
    ) -> Self {
        self.on(others.flat_map(move |o| futures::stream::iter(map(o))))
    }

    /// Objects `K` owns, each naming its owners of kind `K`.
    fn owning<C: Resource + Send + Sync + 'static>(
        self,
        children: impl Stream<Item = Arc<C>> + Send + 'static,
    ) -> Self {
        self.mapped(children, |c: Arc<C>| {
            let meta = c.meta();
            let ns = meta.namespace.as_deref();
            (meta.owner_references.iter().flatten())
                .filter_map(|o| ObjectRef::from_owner_ref(ns, o, ()))
                .collect()
        })
    }
}

/// The budget a pass of an object spends (its namespace's in its account), from the caches.
type BudgetKey<K> = fn(&K, &Context) -> Key;

/// Runs a controller with `reconcile`: kube's runner gets the objects its `triggers` name a few
/// at a time from [`Turns`], and each reconcile waits its namespace's turn at `gate` and its
/// budget's (`budget_key`) before it. A waiting reconcile is a small future that is polled
/// only when the gate wakes it.
fn drive<K, F, Fut>(
    triggers: Triggers<K>,
    (reconcile, budget_key): (F, BudgetKey<K>),
    (queue, gate, store): (Queue, Gate, Store<K>),
    s: &Shared,
) -> BoxFuture<'static, ()>
where
    K: Watched + Resource<DynamicType = ()>,
    F: Fn(Arc<K>, Arc<Context>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<Requeue, reconcile::Error>> + Send + 'static,
{
    let after = s.ctx.clone();
    let (retries, forget) = (queue.clone(), queue.clone());
    // Twice the slots: a pass gives its slot back before its Kubernetes writes, and the next
    // one is already waiting at the gate.
    let named = futures::stream::select_all(triggers.0).take_until(wait_true(s.shutdown.clone()));
    let (turns, finished) = Turns::new(named.boxed(), 2 * usize::from(s.concurrency));
    let reader = store.clone();
    let run = move |obj: Arc<K>, c: Arc<Context>| {
        let (queue, gate, store, reconcile) = (
            queue.clone(),
            gate.clone(),
            store.clone(),
            reconcile.clone(),
        );
        let pass = async move {
            let ns = obj.meta().namespace.clone().unwrap_or_default();
            let key = object_key(obj.as_ref());
            // A pass asked for by a metadata-only change soon after the last one
            // waits its turn, unless something that matters changed (see `coalesce`).
            if let Some(wait) = c.settled.coalesce(&key, obj.meta()) {
                queue.started(&key);
                return Ok(Action::requeue(wait));
            }
            // A namespace that has spent its AWS writes or reads in the object's account
            // waits without taking a slot (or making a read) until its budget refills.
            let budget = budget_key(obj.as_ref(), &c);
            if let Some((kind, wait)) = c.budgets.defer(&budget) {
                queue.started(&key);
                // Boxed: its event write is large, and a reconcile waiting for a slot
                // would otherwise carry its size.
                Box::pin(over_budget(queue.name, kind, obj.as_ref(), &budget, &c)).await;
                return Ok(Action::requeue(wait));
            }
            // Shutting down: a reconcile that has not started yet never will.
            let Some(slot) = queue.gate_wait(gate.enter(&ns)).await else {
                queue.forget(&key);
                return Ok(Action::await_change());
            };
            // The object as it is now, not as it was when its turn was asked for.
            let Some(obj) = store.get(&ObjectRef::from_obj(obj.as_ref())) else {
                queue.forget(&key);
                return Ok(Action::await_change());
            };
            queue.started(&key);
            // Charged where the pass acts, as the object is now (its token was taken
            // from the same key but when the object was recorded meanwhile).
            let budget = budget_key(obj.as_ref(), &c);
            // The pass gives its slot back once its AWS calls are done.
            let (held, name) = (std::time::Instant::now(), queue.name);
            let timer = c.metrics.slot_seconds.with_label_values(&[name]);
            let give_back = move || {
                drop(slot);
                timer.observe(held.elapsed().as_secs_f64());
            };
            // Boxed: a waiting reconcile holds only the gate's small future.
            let pass = Box::pin(instrumented(&queue, obj, c, reconcile, budget));
            reconcile::slot::holding(give_back, pass).await
        };
        // Spawned, as kube's own `Controller::run` does: passes run on every worker thread.
        CancelableJoinHandle::spawn(pass, &tokio::runtime::Handle::current())
    };
    controller::applier(
        run,
        move |obj, e, c| error_policy(&retries, obj, e, c, budget_key),
        s.ctx.clone(),
        reader,
        turns.map(Ok::<_, std::convert::Infallible>),
        controller::Config::default(),
    )
    .for_each(move |r| {
        if let Some(r) = ran(&r) {
            finished.done(&r);
        }
        after_reconcile(r, &after, &forget);
        async {}
    })
    .boxed()
}

/// The object a run the runner reports was for (queue and runner errors name none; neither
/// occurs here: the queue cannot fail).
fn ran<K: Resource<DynamicType = ()>, E, Q>(
    result: &Result<(ObjectRef<K>, Action), controller::Error<E, Q>>,
) -> Option<ObjectRef<K>> {
    let erased = match result {
        Ok((r, _)) => return Some(r.clone()),
        Err(controller::Error::ObjectNotFound(r) | controller::Error::ReconcilerFailed(_, r)) => r,
        Err(_) => return None,
    };
    let r = ObjectRef::new(&erased.name);
    Some(match &erased.namespace {
        Some(ns) => r.within(ns),
        None => r,
    })
}

/// Failed reconciles are logged by `instrumented`, and an object deleted before its turn is
/// no news; anything else from the controller machinery is.
fn after_reconcile<T, E, Q>(
    result: Result<T, controller::Error<E, Q>>,
    ctx: &Context,
    queue: &Queue,
) where
    E: std::error::Error,
    Q: std::error::Error,
{
    match result {
        Ok(_) | Err(controller::Error::ReconcilerFailed(..)) => {}
        // Its bookkeeping goes too, should a reconcile have finished after its Delete event, or
        // that event have been missed while the watch was down.
        Err(controller::Error::ObjectNotFound(r)) => forget(ctx, queue, &ref_key(&r)),
        Err(e) => tracing::warn!(error = %e, "controller error"),
    }
}

/// Drops the bookkeeping of every object deleted from the cluster, and cleans up after each
/// whose cleanup this process did not finish: the operator removes its finalizer only once it has
/// cleaned up, so any other deletion may have been stripped of it (`cleanup`, run from the last
/// state the watch saw, at most `slots` at once).
async fn forget_deleted<K, F, Fut>(
    mut deleted: Gated<K>,
    ctx: Arc<Context>,
    queue: Queue,
    (cleanup, slots): (F, Arc<Semaphore>),
) where
    K: Resource<DynamicType = ()>,
    F: Fn(Arc<K>, Arc<Context>, Arc<Semaphore>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    while let Some(obj) = deleted.recv().await {
        forget(&ctx, &queue, &object_key(obj.as_ref()));
        let uid = obj.meta().uid.as_deref().unwrap_or_default();
        if !ctx.finalized.take(uid) {
            tokio::spawn(cleanup(obj, ctx.clone(), slots.clone()));
        }
    }
}

fn forget(ctx: &Context, queue: &Queue, key: &str) {
    queue.forget(key);
    queue.backoff.reset(key);
    ctx.settled.forget(key);
    ctx.events.forget(key);
}

/// `object_key` of the object a controller reference names.
fn ref_key(r: &ObjectRef<DynamicObject>) -> String {
    let ns = r.namespace.as_deref().unwrap_or_default();
    format!("{}/{ns}/{}", r.dyntype.kind, r.name)
}

/// The work queue as controller-runtime reports it (`workqueue_depth`, `workqueue_adds_total`,
/// `workqueue_queue_duration_seconds`): objects a trigger has named whose reconcile has not
/// started. kube's scheduler holds them and reports nothing, so triggers are recorded as they go
/// in and reconciles as they start. A requeue timer going off is an add at its start, as a
/// client-go AddAfter becomes one when due. Like client-go's rate-limited queue, it also keeps
/// each object's backoff.
#[derive(Clone)]
pub(super) struct Queue {
    pub(super) name: &'static str,
    since: Arc<Mutex<HashMap<String, Instant>>>,
    backoff: Arc<Backoff>,
    metrics: Arc<Metrics>,
}

impl Queue {
    pub(super) fn new(name: &'static str, metrics: &Arc<Metrics>) -> Queue {
        Queue {
            name,
            since: Arc::default(),
            backoff: Arc::default(),
            metrics: metrics.clone(),
        }
    }

    /// An object named by a trigger; one already waiting stays one entry, as in client-go.
    fn add(&self, key: String) {
        let mut since = self.since.lock().expect("queue map poisoned");
        if let std::collections::hash_map::Entry::Vacant(e) = since.entry(key) {
            e.insert(Instant::now());
            self.counter(&self.metrics.workqueue_adds_total).inc();
            self.gauge(&self.metrics.workqueue_depth).inc();
        }
    }

    /// `add` for every object a mapper names; hands them on.
    pub(super) fn added<K: Resource<DynamicType = ()>>(
        &self,
        refs: Vec<ObjectRef<K>>,
    ) -> Vec<ObjectRef<K>> {
        for r in &refs {
            let ns = r.namespace.as_deref().unwrap_or_default();
            self.add(format!("{}/{ns}/{}", K::kind(&()), r.name));
        }
        refs
    }

    /// An owned object wakes its controlling BucketAccess.
    fn add_owner_of<O: Resource>(&self, owned: &O) {
        let meta = owned.meta();
        let ns = meta.namespace.as_deref().unwrap_or_default();
        for o in meta.owner_references.iter().flatten() {
            if o.controller == Some(true) && o.kind == BucketAccess::kind(&()) {
                self.add(format!("{}/{ns}/{}", o.kind, o.name));
            }
        }
    }

    fn started(&self, key: &str) {
        let waited = self.since.lock().expect("queue map poisoned").remove(key);
        let seconds = match waited {
            Some(at) => {
                self.gauge(&self.metrics.workqueue_depth).dec();
                at.elapsed().as_secs_f64()
            }
            None => {
                self.counter(&self.metrics.workqueue_adds_total).inc();
                0.0
            }
        };
        self.metrics
            .workqueue_queue_duration_seconds
            .with_label_values(&[self.name])
            .observe(seconds);
    }

    /// Waits at the fair gate, timed: the gate's part of the queue's time.
    async fn gate_wait<F: Future>(&self, enter: F) -> F::Output {
        let timer = (self.metrics.gate_wait_seconds)
            .with_label_values(&[self.name])
            .start_timer();
        let slot = enter.await;
        timer.observe_duration();
        slot
    }

    /// An object gone before its turn leaves the queue.
    fn forget(&self, key: &str) {
        let mut since = self.since.lock().expect("queue map poisoned");
        if since.remove(key).is_some() {
            self.gauge(&self.metrics.workqueue_depth).dec();
        }
    }

    fn counter(&self, family: &prometheus::IntCounterVec) -> prometheus::IntCounter {
        family.with_label_values(&[self.name])
    }

    fn gauge(&self, family: &prometheus::IntGaugeVec) -> prometheus::IntGauge {
        family.with_label_values(&[self.name])
    }
}

/// One root span, metrics, a deadline and backoff bookkeeping around every reconcile.
async fn instrumented<K, F, Fut>(
    queue: &Queue,
    obj: Arc<K>,
    ctx: Arc<Context>,
    reconcile: F,
    budget: Key,
) -> Result<Action, Error>
where
    K: Resource<DynamicType = ()>,
    F: FnOnce(Arc<K>, Arc<Context>) -> Fut,
    Fut: Future<Output = Result<Requeue, reconcile::Error>>,
{
    let (controller, metrics) = (queue.name, &ctx.metrics);
    let span = reconcile_span(obj.as_ref());
    let worker = Worker::start(metrics, controller);
    // Boxed: the pass's future is large, and an unoptimised build keeps a copy of it in each
    // wrapper on the worker thread's stack (one wrapper more overflowed it); boxed, the
    // wrappers hold a pointer.
    let run = Box::pin(reconcile(obj.clone(), ctx.clone())).instrument(span.clone());
    let pass = ctx
        .budgets
        .pass(budget.clone(), guarded(metrics, controller, run));
    let result = reconcile::serve_request(&ctx, obj.as_ref(), pass)
        .instrument(span.clone())
        .await;
    let seconds = worker.done();
    let outcome = result_label(&result);
    settle(queue, (obj.as_ref(), &budget), &ctx, &span, &result).await;
    span.record("outcome", outcome);
    span.in_scope(|| tracing::debug!(outcome, seconds, "reconcile finished"));
    metrics
        .reconcile_total
        .with_label_values(&[controller, outcome])
        .inc();
    result.map(Requeue::action)
}

/// The root span of a reconcile of `obj`, its trace id recorded for the log lines.
fn reconcile_span<K: Resource<DynamicType = ()>>(obj: &K) -> Span {
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
    span
}

/// A reconcile running as one of its controller's active workers; its seconds go into the
/// reconcile and work-duration histograms when it is done.
struct Worker<'a> {
    metrics: &'a Metrics,
    controller: &'a str,
    start: Instant,
}

impl<'a> Worker<'a> {
    fn start(metrics: &'a Metrics, controller: &'a str) -> Worker<'a> {
        metrics
            .active_workers
            .with_label_values(&[controller])
            .inc();
        Worker {
            metrics,
            controller,
            start: Instant::now(),
        }
    }

    fn done(self) -> f64 {
        let m = self.metrics;
        m.active_workers.with_label_values(&[self.controller]).dec();
        let seconds = self.start.elapsed().as_secs_f64();
        for histogram in [
            &m.reconcile_time_seconds,
            &m.workqueue_work_duration_seconds,
        ] {
            histogram
                .with_label_values(&[self.controller])
                .observe(seconds);
        }
        seconds
    }
}

/// What a finished reconcile leaves: a success resets the object's backoff; each kind of
/// failure is logged in the reconcile's span, and counted or reported as it needs.
async fn settle<K: Resource<DynamicType = ()>>(
    queue: &Queue,
    (obj, budget): (&K, &Key),
    ctx: &Context,
    span: &Span,
    result: &Result<Requeue, Error>,
) {
    match result {
        Ok(_) => queue.backoff.reset(&object_key(obj)),
        // A deletion waiting for someone to act is a state, reported in status and events: it
        // is retried with backoff but is no failed reconcile.
        Err(Error::Reconcile(e)) if e.is_deletion_blocked() => {
            span.in_scope(|| tracing::info!(reason = %e, "deletion waits; retrying with backoff"));
        }
        Err(Error::Reconcile(e)) if e.over_budget().is_some() => {
            span.in_scope(|| tracing::info!(reason = %e, "namespace over its AWS write budget"));
            over_budget(queue.name, Kind::Writes, obj, budget, ctx)
                .instrument(span.clone())
                .await;
        }
        Err(Error::Reconcile(e)) if e.is_stale_write() => {
            span.in_scope(
                || tracing::debug!(error = %e, "stale cache; the newer version runs again"),
            );
        }
        Err(e) => {
            ctx.metrics
                .reconcile_errors_total
                .with_label_values(&[queue.name])
                .inc();
            span.in_scope(|| tracing::warn!(error = %e, "reconcile failed; retrying with backoff"));
        }
    }
}

/// Runs a reconcile within its deadline. A panic becomes an error, retried with backoff and
/// counted, as controller-runtime recovers panics: one bad object cannot stop a controller.
async fn guarded<Fut>(metrics: &Metrics, controller: &str, run: Fut) -> Result<Requeue, Error>
where
    Fut: Future<Output = Result<Requeue, reconcile::Error>>,
{
    match tokio::time::timeout(RECONCILE_TIMEOUT, AssertUnwindSafe(run).catch_unwind()).await {
        Ok(Ok(result)) => result.map_err(Error::from),
        Ok(Err(panic)) => {
            metrics
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

/// Counts a pass deferred by its namespace's AWS write or read budget in an account (`key`),
/// and says so in an event on the first object that meets the exhausted budget (once per
/// episode, not once per pass).
async fn over_budget<K: Resource<DynamicType = ()>>(
    controller: &str,
    kind: Kind,
    obj: &K,
    key: &Key,
    ctx: &Context,
) {
    let counter = match kind {
        Kind::Writes => &ctx.metrics.aws_write_budget_exhausted_total,
        Kind::Reads => &ctx.metrics.aws_read_budget_exhausted_total,
    };
    counter
        .with_label_values(&[controller, key.account_label()])
        .inc();
    let budget = ctx.budgets.of(kind);
    if budget.report(key) {
        let (rate, burst, calls) = (budget.rate(), budget.burst(), kind.calls());
        // "namespace a" or "namespace a in AWSAccount b": whose budget ran out.
        let note = format!(
            "{key} has spent its budget of AWS {calls} ({rate} per second, {burst} at once): its objects wait their turn as it refills"
        );
        ctx.event(obj, true, kind.reason(), note).await;
    }
}

/// The `result` label of `controller_runtime_reconcile_total`, in controller-runtime's terms:
/// a requeue sooner than the resync is `requeue_after`; a blocked deletion, retried with
/// backoff, and a write lost to a newer version of the object are `requeue`.
fn result_label(result: &Result<Requeue, Error>) -> &'static str {
    match result {
        Ok(Requeue::OnChange | Requeue::Resync(_)) => "success",
        Ok(Requeue::After(_)) => "requeue_after",
        Err(Error::Reconcile(e))
            if e.is_deletion_blocked() || e.is_stale_write() || e.over_budget().is_some() =>
        {
            "requeue"
        }
        Err(_) => "error",
    }
}

fn error_policy<K: Resource<DynamicType = ()>>(
    queue: &Queue,
    obj: Arc<K>,
    e: &Error,
    ctx: Arc<Context>,
    budget_key: BudgetKey<K>,
) -> Action {
    queue.counter(&queue.metrics.workqueue_retries_total).inc();
    // Over budget: its turn as the namespace's budget refills, not an exponential backoff.
    if let Error::Reconcile(over) = e
        && let Some(wait) = over.over_budget()
    {
        let turn = ctx.budgets.defer(&budget_key(&obj, &ctx)).map(|(_, w)| w);
        return Action::requeue(turn.unwrap_or(wait));
    }
    Action::requeue(queue.backoff.next(&object_key(obj.as_ref())))
}

/// Every 5 seconds until shutdown, what the caches hold: objects by readiness, and how old and
/// how overdue the access keys are.
async fn report_managed_objects(
    buckets: Vec<Store<Bucket>>,
    accesses: Vec<Store<BucketAccess>>,
    metrics: Arc<Metrics>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        record_managed_objects(&buckets, &accesses, &metrics);
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(5)) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}

fn record_managed_objects(
    buckets: &[Store<Bucket>],
    accesses: &[Store<BucketAccess>],
    metrics: &Metrics,
) {
    // One snapshot of each kind's caches for every figure below.
    let all_buckets: Vec<_> = buckets.iter().flat_map(|s| s.state()).collect();
    let all_accesses: Vec<_> = accesses.iter().flat_map(|s| s.state()).collect();
    let b: Vec<Option<StatusView>> = (all_buckets.iter())
        .map(|b| (b.status.as_ref()).map(|s| (&s.conditions, &s.class_name, &s.account)))
        .collect();
    let a: Vec<Option<StatusView>> = (all_accesses.iter())
        .map(|a| (a.status.as_ref()).map(|s| (&s.conditions, &s.class_name, &s.account)))
        .collect();
    record_key_ages(&all_accesses, metrics);
    // A class deleted since the last round must lose its series: start from none.
    metrics.managed_objects.reset();
    metrics.out_of_sync_objects.reset();
    for (kind, views) in [("Bucket", b), ("BucketAccess", a)] {
        for ready in ["true", "false"] {
            metrics
                .managed_objects
                .with_label_values(&[kind, ready, "", ""])
                .set(0);
        }
        // Labelled like managed_objects: a `namespace` label would clash with the scrape
        // target's, and grow with the tenants.
        (metrics.out_of_sync_objects)
            .with_label_values(&[kind, "", ""])
            .set(0);
        for view in views {
            let differs = view.is_some_and(|(conditions, _, _)| {
                (conditions.iter()).any(|c| c.type_ == IN_SYNC && c.status == "False")
            });
            let (ready, class, account) = state_of(view);
            metrics
                .managed_objects
                .with_label_values(&[kind, ready, class.as_str(), account.as_str()])
                .inc();
            if differs {
                (metrics.out_of_sync_objects)
                    .with_label_values(&[kind, class.as_str(), account.as_str()])
                    .inc();
            }
        }
    }
}

/// What an object's status says of it.
type StatusView<'a> = (
    &'a Vec<Condition>,
    &'a Option<String>,
    &'a Option<crate::api::AccountRecord>,
);

/// An object's readiness label, the class in force and the AWSAccount it lives in (empty: the
/// operator's own), from its status. Both names are an admin's (classes and accounts are
/// cluster-scoped), so the labels stay bounded.
fn state_of(status: Option<StatusView>) -> (&'static str, String, String) {
    let ready = status.is_some_and(|(c, _, _)| is_ready(c));
    let class = status.and_then(|(_, c, _)| c.clone()).unwrap_or_default();
    let account = status.and_then(|(_, _, a)| a.as_ref().map(|a| a.name.clone()));
    (
        if ready { "true" } else { "false" },
        class,
        account.unwrap_or_default(),
    )
}

/// The age of the oldest active access key (its creation time is in status), and how far past
/// its rotation time the most overdue key is: rotation is checked on every resync, so a key far
/// past its time means rotation is failing.
fn record_key_ages(accesses: &[Arc<BucketAccess>], metrics: &Metrics) {
    let now = jiff::Timestamp::now();
    let oldest = accesses
        .iter()
        .filter_map(|a| a.status.as_ref()?.last_rotation_time.as_ref().map(|t| t.0))
        .min();
    metrics
        .access_key_age_seconds
        .set(oldest.map_or(0.0, |t| now.duration_since(t).as_secs_f64().max(0.0)));
    let overdue = accesses
        .iter()
        .filter_map(|a| a.status.as_ref()?.next_rotation_time.as_ref().map(|t| t.0))
        .map(|next| now.duration_since(next).as_secs_f64())
        .fold(0.0, f64::max);
    metrics.access_key_rotation_overdue_seconds.set(overdue);
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::ResourceExt;

    fn bucket(name: &str) -> Arc<Bucket> {
        let b = serde_json::json!({"apiVersion": "s3.operator.dev/v1alpha1", "kind": "Bucket",
            "metadata": {"name": name, "namespace": "team-a"}, "spec": {}});
        Arc::new(serde_json::from_value(b).unwrap())
    }

    #[tokio::test]
    async fn deleted_objects_lose_their_bookkeeping_and_wake_their_accesses() {
        let ctx = Context::for_tests();
        let queue = Queue::new("bucket", &ctx.metrics);
        let (settled, backoff) = (&ctx.settled, &queue.backoff);
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
        forget(&ctx, &queue, &object_key(gone.as_ref()));
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
        forget(&ctx, &queue, &ref_key(&r));
        assert_eq!(settled.remaining(&kept_key, &["1".into()]), None);
    }

    /// A deletion whose cleanup this process finished needs nothing more; any other (a stripped
    /// finalizer) is cleaned up from the last state the watch saw.
    #[tokio::test]
    async fn a_deletion_the_operator_did_not_finish_is_cleaned_up_from_its_last_state() {
        let ctx = Arc::new(Context::for_tests());
        let queue = Queue::new("bucket", &ctx.metrics);
        let with_uid = |name: &str| {
            let mut b = (*bucket(name)).clone();
            b.metadata.uid = Some(format!("uid-{name}"));
            Arc::new(b)
        };
        let (finished, stripped) = (with_uid("finished"), with_uid("stripped"));
        ctx.finalized.record("uid-finished");
        let (tx, deleted) = tokio::sync::mpsc::unbounded_channel();
        let (cleaned_tx, mut cleaned) = tokio::sync::mpsc::unbounded_channel();
        let cleanup = move |b: Arc<Bucket>, _: Arc<Context>, _: Arc<Semaphore>| {
            let _ = cleaned_tx.send(b.name_any());
            async {}
        };
        tx.send(finished).unwrap();
        tx.send(stripped).unwrap();
        drop(tx);
        let slots = Arc::new(Semaphore::new(1));
        forget_deleted(deleted, ctx.clone(), queue, (cleanup, slots)).await;
        assert_eq!(cleaned.recv().await.as_deref(), Some("stripped"));
        assert_eq!(
            cleaned.recv().await,
            None,
            "the finished one is not cleaned up again"
        );
        assert!(
            !ctx.finalized.take("uid-finished"),
            "forgotten once its deletion came"
        );
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
        let metrics = Metrics::new();
        let panics = || {
            metrics
                .reconcile_panics_total
                .with_label_values(&["bucket"])
                .get()
        };
        let run = async { panic!("bad object") };
        let err = guarded(&metrics, "bucket", run).await.unwrap_err();
        assert!(
            matches!(&err, Error::ReconcilePanic(m) if m == "bad object"),
            "{err}"
        );
        assert_eq!(panics(), 1);
        let ok = guarded(&metrics, "bucket", async { Ok(Requeue::OnChange) }).await;
        assert_eq!(ok.unwrap(), Requeue::OnChange);
        assert_eq!(panics(), 1);
    }

    #[test]
    fn the_work_queue_holds_each_waiting_object_once_until_its_reconcile_starts() {
        let q = Queue::new("bucket", &Arc::new(Metrics::new()));
        let depth = || q.gauge(&q.metrics.workqueue_depth).get();
        let adds = || q.counter(&q.metrics.workqueue_adds_total).get();
        q.add("Bucket/a/x".into());
        q.add("Bucket/a/x".into());
        q.add("Bucket/a/y".into());
        assert_eq!((depth(), adds()), (2, 2), "one entry per waiting object");
        q.started("Bucket/a/x");
        assert_eq!(depth(), 1);
        // A requeue timer going off is an add at its start.
        q.started("Bucket/a/z");
        assert_eq!((depth(), adds()), (1, 3));
        // An object deleted before its turn leaves the queue.
        q.forget("Bucket/a/y");
        assert_eq!(depth(), 0);
        let waited = q
            .metrics
            .workqueue_queue_duration_seconds
            .with_label_values(&["bucket"]);
        assert_eq!(waited.get_sample_count(), 2);

        // A mapper's objects are added; a Secret adds only the BucketAccess controlling it.
        let mapped = q.added(vec![ObjectRef::<BucketAccess>::new("m").within("a")]);
        assert_eq!((mapped.len(), depth()), (1, 1));
        q.started("BucketAccess/a/m");
        let secret: k8s_openapi::api::core::v1::Secret =
            serde_json::from_value(serde_json::json!({
            "metadata": {"name": "s", "namespace": "a", "ownerReferences": [
                {"apiVersion": "s3.operator.dev/v1alpha1", "kind": "BucketAccess", "name": "own",
                 "uid": "1", "controller": true},
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "other", "uid": "2"}]}}))
            .unwrap();
        q.add_owner_of(&secret);
        assert_eq!(depth(), 1);
        q.started("BucketAccess/a/own");
        assert_eq!(depth(), 0);
    }

    /// Objects are counted by kind, readiness and class, and a class no object is under any
    /// more loses its series.
    #[test]
    fn managed_objects_are_counted_by_class() {
        let with = |name: &str, class: Option<&str>, ready: bool| {
            let mut b = (*bucket(name)).clone();
            b.status = Some(crate::api::BucketStatus {
                class_name: class.map(String::from),
                account: (name == "c").then(|| crate::api::AccountRecord {
                    name: "team-a".into(),
                    id: "111111111111".into(),
                    ..Default::default()
                }),
                conditions: vec![crate::api::condition::ready(
                    &[],
                    ready,
                    crate::api::condition::Reason::Available,
                    String::new(),
                    None,
                    jiff::Timestamp::now(),
                )],
                ..Default::default()
            });
            b
        };
        let mut writer = kube::runtime::reflector::store::Writer::<Bucket>::default();
        for b in [
            with("a", Some("prod"), true),
            with("b", Some("prod"), false),
            with("c", None, true),
        ] {
            writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(b));
        }
        let metrics = Metrics::new();
        let stores = [writer.as_reader()];
        record_managed_objects(&stores, &[], &metrics);
        let value = |kind, ready, class, account| {
            metrics
                .managed_objects
                .with_label_values(&[kind, ready, class, account])
                .get()
        };
        assert_eq!(value("Bucket", "true", "prod", ""), 1);
        assert_eq!(value("Bucket", "false", "prod", ""), 1);
        assert_eq!(value("Bucket", "true", "", "team-a"), 1);
        assert_eq!(value("Bucket", "true", "", ""), 0);
        assert_eq!(value("BucketAccess", "false", "", ""), 0);
        for name in ["a", "b"] {
            writer.apply_watcher_event(&kube::runtime::watcher::Event::Delete(with(
                name,
                Some("prod"),
                true,
            )));
        }
        record_managed_objects(&stores, &[], &metrics);
        let text = metrics.render();
        assert!(!text.contains("class=\"prod\""), "{text}");
        assert!(
            text.contains(
                "s3_operator_managed_objects{account=\"team-a\",class=\"\",kind=\"Bucket\",ready=\"true\"} 1"
            ),
            "{text}"
        );
    }
}
