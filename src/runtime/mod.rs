//! The process around the reconcilers: configuration, leader election, the web server, metrics,
//! telemetry and one shutdown signal shared by all of them.

pub mod client;
pub mod leader;

pub mod telemetry;
mod web;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::future::join_all;
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::Secret;
use kube::api::DynamicObject;
use kube::runtime::WatchStreamExt;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use tokio::sync::{Semaphore, watch};
use tracing::Instrument;

use crate::api::condition::is_ready;
use crate::api::{Bucket, BucketAccess};
use crate::aws::Aws;
use crate::fence::Fence;
use crate::metrics::{self, METRICS};
use crate::reconcile::{self, Backoff, Context, Settled, bucket_access, object_key};

/// Longest a reconcile may run; then it fails and is retried with backoff. Cancelling one is
/// like a crash at that point, which every reconcile is written to survive.
pub const RECONCILE_TIMEOUT: Duration = Duration::from_secs(300);

/// Everything `s3-operator run` is configured with.
#[derive(Clone, Debug)]
pub struct Config {
    pub reconcile: reconcile::Settings,
    pub aws: crate::aws::Settings,
    /// Namespaces to watch; empty means all.
    pub watch_namespaces: Vec<String>,
    pub max_concurrent_reconciles: u16,
    pub metrics_addr: std::net::SocketAddr,
    pub probe_addr: std::net::SocketAddr,
    /// Serve /metrics over HTTPS with token authentication and authorization: `None` serves
    /// plain HTTP; `Some(dir)` the certificate in `dir`, or a self-signed one without it.
    pub metrics_secure: Option<Option<std::path::PathBuf>>,
    /// `None` runs without leader election (a single replica, or local development).
    pub leader_election: Option<leader::Settings>,
}

#[derive(thiserror::Error, Debug)]
pub enum Error {
    #[error("cannot reach the Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("Kubernetes client configuration: {0}")]
    KubeConfig(#[from] kube::config::InferConfigError),
    #[error("cannot serve on {0}: {1}")]
    Bind(std::net::SocketAddr, std::io::Error),
    #[error(transparent)]
    Leader(#[from] leader::Error),
    #[error("AWS: {0}")]
    Aws(#[from] crate::aws::Error),
    #[error(transparent)]
    Reconcile(#[from] reconcile::Error),
    #[error("reconcile did not finish within {0:?}")]
    ReconcileTimeout(Duration),
}

/// Probe state shared with the web server.
#[derive(Default)]
pub struct Health {
    pub ready: AtomicBool,
    pub heartbeat: std::sync::Mutex<Option<Instant>>,
}

pub async fn run(config: Config) -> Result<(), Error> {
    let (shutdown_tx, shutdown) = watch::channel(false);
    tokio::spawn(signal_shutdown(shutdown_tx));
    // Once it closes, nothing that could change Kubernetes or AWS leaves this process.
    let fence = match &config.leader_election {
        Some(_) => Fence::leader_elected(),
        None => Fence::disabled(),
    };
    let identity = config.leader_election.as_ref().map(|l| l.identity.as_str());
    let client = client::build(identity, fence.clone()).await?;
    // Fail fast with one clear line when the API server is unreachable or refuses us; a signal
    // during start-up still stops the process.
    tokio::select! {
        v = client.apiserver_version() => { v?; }
        _ = wait_true(shutdown.clone()) => return Ok(()),
    }
    let aws = Aws::new(&config.aws).await.with_fence(fence.clone());
    let mut config = config;
    config.reconcile.boundary_arn = aws
        .boundary(
            &config.reconcile.boundary_arn,
            &crate::aws::naming::iam_path(&config.reconcile.cluster_name),
        )
        .await?;
    tracing::info!(boundary = %config.reconcile.boundary_arn, "permissions boundary");

    let health = Arc::new(Health::default());
    tokio::spawn(heartbeat(health.clone()));
    let servers = tokio::spawn(
        web::serve(
            config.metrics_addr,
            config.probe_addr,
            config.metrics_secure.clone(),
            health.clone(),
            shutdown.clone(),
        )
        .await?,
    );

    // Watches start now, on leader and standby alike: a new leader starts with warm caches, and
    // /readyz turns ready on every replica once they have listed.
    let (leading_tx, mut leading) = watch::channel(config.leader_election.is_none());
    let scopes: Vec<Option<String>> = if config.watch_namespaces.is_empty() {
        vec![None]
    } else {
        config.watch_namespaces.iter().cloned().map(Some).collect()
    };
    let sync = Arc::new(CacheSync {
        pending: AtomicUsize::new(3 * scopes.len()),
        health: health.clone(),
    });
    let watches: Vec<Watches> = scopes
        .iter()
        .map(|ns| Watches::start(&client, ns.as_deref(), &sync, &leading))
        .collect();

    // Leader election: standbys wait here; the leader goes on to reconcile.
    let (release_tx, release) = watch::channel(false);
    let mut lease_task = None;
    if let Some(le) = config.leader_election.clone() {
        let c = client.clone();
        lease_task = Some(tokio::spawn(async move {
            if let Err(e) = leader::run(c, le, fence, leading_tx, release).await {
                // Another replica may already act: stop at once, without draining.
                tracing::error!(error = %e, "leadership lost; exiting");
                std::process::exit(1);
            }
        }));
        let mut sd = shutdown.clone();
        tokio::select! {
            _ = leading.wait_for(|l| *l) => {}
            _ = sd.wait_for(|s| *s) => {}
        }
    }

    // A BucketAccess reconciled before the Bucket cache is full would find no Bucket and flip
    // to BucketNotFound for a moment: a needless status write and event on every restart.
    let mut sd = shutdown.clone();
    tokio::select! {
        _ = caches_synced(&watches) => {}
        _ = sd.wait_for(|s| *s) => {}
    }

    if !*shutdown.borrow() {
        let identity = config.leader_election.as_ref().map(|l| l.identity.clone());
        let reporter = Reporter {
            controller: "s3-operator".into(),
            instance: identity,
        };
        let ctx = Arc::new(Context {
            client: client.clone(),
            aws,
            settings: config.reconcile.clone(),
            recorder: Recorder::new(client.clone(), reporter),
            backoff: Default::default(),
            settled: Default::default(),
            buckets: watches.iter().map(|w| w.buckets.clone()).collect(),
        });
        run_controllers(&config, ctx, watches, shutdown.clone()).await;
    }
    // Controllers have drained; now hand the lease over so a standby takes over at once.
    let _ = release_tx.send(true);
    if let Some(t) = lease_task {
        let _ = t.await;
    }
    let _ = servers.await;
    tracing::info!("shut down cleanly");
    Ok(())
}

/// The watches of one scope (a namespace, or the whole cluster). They run from start-up on
/// leader and standby alike, so a replica that becomes leader starts with warm caches.
struct Watches {
    buckets: Store<Bucket>,
    accesses: Store<BucketAccess>,
    bucket_events: Gated<Bucket>,
    bucket_events_for_accesses: Gated<Bucket>,
    bucket_deletions: Gated<Bucket>,
    access_events: Gated<BucketAccess>,
    access_deletions: Gated<BucketAccess>,
    secret_events: Gated<Secret>,
}

/// Objects from a shared watch, handed on only while this replica leads.
type Gated<K> = tokio::sync::mpsc::UnboundedReceiver<Arc<K>>;

/// Counts the watches still to list their objects; /readyz turns ready at zero.
struct CacheSync {
    pending: AtomicUsize,
    health: Arc<Health>,
}

impl Watches {
    fn start(
        client: &kube::Client,
        ns: Option<&str>,
        sync: &Arc<CacheSync>,
        leading: &watch::Receiver<bool>,
    ) -> Self {
        fn api<K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>>(
            c: &kube::Client,
            ns: Option<&str>,
        ) -> Api<K> {
            ns.map_or_else(|| Api::all(c.clone()), |n| Api::namespaced(c.clone(), n))
        }
        let all = watcher::Config::default;
        let managed = all().labels(&format!(
            "{}={}",
            bucket_access::MANAGED_BY_LABEL,
            bucket_access::MANAGED_BY
        ));
        use Hear::*;
        // A deleted Bucket wakes the BucketAccesses that refer to it, as a change does.
        let hear = [Changes, ChangesAndDeletions, Deletions];
        let (buckets, mut b) = shared_watch(api(client, ns), all(), &hear, sync, leading, |_| {});
        let hear = [Changes, Deletions];
        let (accesses, mut a) = shared_watch(api(client, ns), all(), &hear, sync, leading, |_| {});
        // Secrets only wake their BucketAccess (reconciles read them fresh): keep no key
        // material in memory.
        let (_, mut s) = shared_watch(
            api(client, ns),
            managed,
            &[Changes],
            sync,
            leading,
            |s: &mut Secret| {
                s.data = None;
                s.string_data = None;
            },
        );
        Watches {
            buckets,
            accesses,
            bucket_events: b.remove(0),
            bucket_events_for_accesses: b.remove(0),
            bucket_deletions: b.remove(0),
            access_events: a.remove(0),
            access_deletions: a.remove(0),
            secret_events: s.remove(0),
        }
    }
}

async fn caches_synced(watches: &[Watches]) {
    for w in watches {
        // Errors only when the writer is dropped, that is at shutdown.
        let _ = w.buckets.wait_until_ready().await;
        let _ = w.accesses.wait_until_ready().await;
    }
}

/// What a subscriber of a shared watch is handed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hear {
    /// Every object listed or changed.
    Changes,
    /// Those, and the last state of every object deleted from the cluster.
    ChangesAndDeletions,
    /// Only deleted objects.
    Deletions,
}

/// The senders of a shared watch's subscribers.
struct Fanout<K> {
    subscribers: Vec<(Hear, tokio::sync::mpsc::UnboundedSender<Arc<K>>)>,
}

impl<K> Fanout<K> {
    fn new(hear: &[Hear]) -> (Self, Vec<Gated<K>>) {
        let (subscribers, receivers) = hear
            .iter()
            .map(|h| {
                let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
                ((*h, tx), rx)
            })
            .unzip();
        (Fanout { subscribers }, receivers)
    }

    fn send(&self, obj: &Arc<K>, deleted: bool) {
        for (hear, tx) in &self.subscribers {
            let wanted = match hear {
                Hear::Changes => !deleted,
                Hear::ChangesAndDeletions => true,
                Hear::Deletions => deleted,
            };
            if wanted {
                let _ = tx.send(obj.clone());
            }
        }
    }
}

/// A watch feeding a store, driven for the life of the process. Each subscriber gets the
/// objects it hears of (`hear`, one per subscriber) while `leading` is true; otherwise events
/// are dropped (the store still takes them), so a standby never blocks the watch.
///
/// The objects are handed on straight from the watch stream: kube's shared-store subscription
/// (`ReflectHandle`) stalls for good once it meets the reference of an object already deleted
/// from the store, which silently cut a leader off from Bucket changes under churn.
fn shared_watch<K>(
    api: Api<K>,
    cfg: watcher::Config,
    hear: &[Hear],
    sync: &Arc<CacheSync>,
    leading: &watch::Receiver<bool>,
    trim: fn(&mut K),
) -> (Store<K>, Vec<Gated<K>>)
where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let (fanout, receivers) = Fanout::new(hear);
    let store = reader.clone();
    let (sync, leading) = (sync.clone(), leading.clone());
    let mut listed = false;
    let stream = watcher::watcher(api, cfg)
        .default_backoff()
        // managedFields are most of an object's size and nothing here reads them.
        .modify(move |o| {
            o.meta_mut().managed_fields = None;
            trim(o);
        })
        .reflect(writer)
        .for_each(move |event| {
            match &event {
                // A (re-)list is complete and swapped into the store: hand on everything, so
                // changes missed while a watch was down are seen too.
                Ok(watcher::Event::InitDone) => {
                    if !listed {
                        listed = true;
                        if sync.pending.fetch_sub(1, Ordering::SeqCst) == 1 {
                            sync.health.ready.store(true, Ordering::SeqCst);
                            tracing::info!("caches synced");
                        }
                    }
                    if *leading.borrow() {
                        for obj in store.state() {
                            fanout.send(&obj, false);
                        }
                    }
                }
                // The store already holds this version; share its copy.
                Ok(watcher::Event::Apply(obj)) if *leading.borrow() => {
                    if let Some(obj) = store.get(&ObjectRef::from_obj(obj)) {
                        fanout.send(&obj, false);
                    }
                }
                // Already gone from the store: hand on its last state.
                Ok(watcher::Event::Delete(obj)) if *leading.borrow() => {
                    fanout.send(&Arc::new(obj.clone()), true);
                }
                _ => {}
            }
            async {}
        });
    tokio::spawn(stream);
    (reader, receivers)
}

/// A controller trigger: everything in the (warm) store, then every later change.
fn trigger<K: Send + Sync + 'static>(
    snapshot: Vec<Arc<K>>,
    rx: Gated<K>,
) -> impl futures::Stream<Item = Arc<K>> + Send + 'static {
    futures::stream::iter(snapshot).chain(events(rx))
}

fn events<K: Send + Sync + 'static>(
    rx: Gated<K>,
) -> impl futures::Stream<Item = Arc<K>> + Send + 'static {
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|o| (o, rx)) })
}

/// One Bucket and one BucketAccess controller per watched scope, fed by the warm watches.
async fn run_controllers(
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
        // kube's own concurrency limit can strand a queued object for good: under load, objects
        // queued behind a full set of workers were never reconciled (seen in the leader-kill and
        // AWS-fault suites). The controller runs unbounded and each reconcile waits for a permit
        // here instead; kube still never runs two reconciles of one object at once.
        let cfg = controller::Config::default();
        let (bucket_slots, access_slots) = (
            Arc::new(Semaphore::new(concurrency.into())),
            Arc::new(Semaphore::new(concurrency.into())),
        );
        bucket_stores.push(w.buckets.clone());
        access_stores.push(w.accesses.clone());
        tokio::spawn(forget_deleted(w.bucket_deletions, ctx.clone()));
        tokio::spawn(forget_deleted(w.access_deletions, ctx.clone()));
        let bc = Controller::for_shared_stream(
            trigger(w.buckets.state(), w.bucket_events),
            w.buckets.clone(),
        )
        .with_config(cfg.clone())
        .graceful_shutdown_on(wait_true(shutdown.clone()));
        runs.push(
            bc.run(
                move |b, c| {
                    with_slot(
                        bucket_slots.clone(),
                        "bucket",
                        b,
                        c,
                        reconcile::bucket::reconcile,
                    )
                },
                error_policy,
                ctx.clone(),
            )
            .for_each({
                let ctx = ctx.clone();
                move |r| {
                    after_reconcile(r, &ctx);
                    async {}
                }
            })
            .boxed(),
        );
        let store = w.accesses.clone();
        let ac = Controller::for_shared_stream(
            trigger(w.accesses.state(), w.access_events),
            w.accesses.clone(),
        )
        .with_config(cfg)
        .graceful_shutdown_on(wait_true(shutdown.clone()))
        .owns_shared_stream(events(w.secret_events))
        .watches_shared_stream(
            events(w.bucket_events_for_accesses),
            move |b: Arc<Bucket>| {
                // A Bucket change wakes every BucketAccess that refers to it.
                let ns = b.namespace();
                store
                    .state()
                    .into_iter()
                    .filter(|a| a.namespace() == ns && a.spec.bucket_ref.name == b.name_any())
                    .map(|a| ObjectRef::from_obj(a.as_ref()))
                    .collect::<Vec<_>>()
            },
        );
        runs.push(
            ac.run(
                move |a, c| {
                    with_slot(
                        access_slots.clone(),
                        "bucketaccess",
                        a,
                        c,
                        reconcile::bucket_access::reconcile,
                    )
                },
                error_policy,
                ctx.clone(),
            )
            .for_each({
                let ctx = ctx.clone();
                move |r| {
                    after_reconcile(r, &ctx);
                    async {}
                }
            })
            .boxed(),
        );
    }
    tokio::spawn(report_managed_objects(
        bucket_stores,
        access_stores,
        shutdown,
    ));
    join_all(runs).await;
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

async fn wait_true(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|v| *v).await;
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

async fn heartbeat(health: Arc<Health>) {
    loop {
        *health.heartbeat.lock().expect("heartbeat lock") = Some(Instant::now());
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn signal_shutdown(tx: watch::Sender<bool>) {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("shutdown signal received; draining in-flight reconciles");
    let _ = tx.send(true);
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
        use Hear::*;
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
