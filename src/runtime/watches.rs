//! The shared watches and their caches: one per kind and scope, warm on leader and standby alike,
//! feeding the controllers only while this replica leads.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher;
use tokio::sync::watch;

use super::lifecycle::Health;
use crate::api::{Bucket, BucketAccess};
use crate::reconcile::refs::{self, Referrers};
use crate::reconcile::{Object, bucket_access};

/// The watches of one scope (a namespace, or the whole cluster). They run from start-up on
/// leader and standby alike, so a replica that becomes leader starts with warm caches.
pub(super) struct Watches {
    pub buckets: Store<Bucket>,
    /// The Buckets of `buckets` that log or replicate into each Bucket.
    pub bucket_refs: Arc<Referrers<Bucket>>,
    pub accesses: Store<BucketAccess>,
    /// The BucketAccesses of `accesses` granted on each Bucket.
    pub access_refs: Arc<Referrers<BucketAccess>>,
    pub bucket_events: Gated<Bucket>,
    pub bucket_events_for_accesses: Gated<Bucket>,
    pub bucket_deletions: Gated<Bucket>,
    /// Wakes the Buckets a Bucket logs into, or that log into it (spec.logging).
    pub bucket_events_for_logging: Gated<Bucket>,
    pub access_events: Gated<BucketAccess>,
    pub access_deletions: Gated<BucketAccess>,
    pub secret_events: Gated<PartialObjectMeta<Secret>>,
    /// The ConfigMaps of bucket facts (`spec.configMap`), watched as the Secrets are.
    pub config_map_events: Gated<PartialObjectMeta<ConfigMap>>,
}

/// A kind that can be watched, cached and handed to a controller.
pub(super) trait Watched: Object + Send + Sync + 'static {}

impl<K: Object + Send + Sync + 'static> Watched for K {}

/// Objects from a shared watch, handed on only while this replica leads.
pub(super) type Gated<K> = tokio::sync::mpsc::UnboundedReceiver<Arc<K>>;

/// Counts the watches still to list their objects; /readyz turns ready at zero.
pub(super) struct CacheSync {
    pub pending: AtomicUsize,
    pub health: Arc<Health>,
}

impl CacheSync {
    /// One more watch has listed its objects.
    pub(super) fn listed(&self) {
        if self.pending.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.health.ready.store(true, Ordering::SeqCst);
            tracing::info!("caches synced");
        }
    }
}

impl Watches {
    pub(super) fn start(
        client: &kube::Client,
        ns: Option<&str>,
        sync: &Arc<CacheSync>,
        leading: &watch::Receiver<bool>,
    ) -> Self {
        fn api<K: Watched>(c: &kube::Client, ns: Option<&str>) -> Api<K> {
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
        // A deleted Bucket also leaves the logging grant of the Bucket it logged into.
        let hear = [Changes, ChangesAndDeletions, Deletions, ChangesAndDeletions];
        let bucket_refs = Arc::new(refs::buckets());
        let (buckets, mut b) =
            shared_watch(api(client, ns), all(), &hear, &bucket_refs, sync, leading);
        let hear = [Changes, Deletions];
        let access_refs = Arc::new(refs::accesses());
        let (accesses, mut a) =
            shared_watch(api(client, ns), all(), &hear, &access_refs, sync, leading);
        // Secrets only wake their BucketAccess (reconciles read them fresh): only their
        // metadata is watched, and none of it is kept.
        // An Api of PartialObjectMeta makes metadata-only requests.
        let secret_events = owned_watch::<Secret>(api(client, ns), managed.clone(), sync, leading);
        let config_map_events = owned_watch::<ConfigMap>(api(client, ns), managed, sync, leading);
        Watches {
            buckets,
            bucket_refs,
            accesses,
            access_refs,
            bucket_events: b.remove(0),
            bucket_events_for_accesses: b.remove(0),
            bucket_deletions: b.remove(0),
            bucket_events_for_logging: b.remove(0),
            access_events: a.remove(0),
            access_deletions: a.remove(0),
            secret_events,
            config_map_events,
        }
    }
}

pub(super) async fn caches_synced(watches: &[Watches]) {
    for w in watches {
        // Errors only when the writer is dropped, that is at shutdown.
        let _ = w.buckets.wait_until_ready().await;
        let _ = w.accesses.wait_until_ready().await;
    }
}

/// What a subscriber of a shared watch is handed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Hear {
    /// Every object listed or changed.
    Changes,
    /// Those, and the last state of every object deleted from the cluster.
    ChangesAndDeletions,
    /// Only deleted objects.
    Deletions,
}

/// The senders of a shared watch's subscribers.
pub(super) struct Fanout<K> {
    subscribers: Vec<(Hear, tokio::sync::mpsc::UnboundedSender<Arc<K>>)>,
}

impl<K> Fanout<K> {
    pub(super) fn new(hear: &[Hear]) -> (Self, Vec<Gated<K>>) {
        let (subscribers, receivers) = hear
            .iter()
            .map(|h| {
                let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
                ((*h, tx), rx)
            })
            .unzip();
        (Fanout { subscribers }, receivers)
    }

    pub(super) fn send(&self, obj: &Arc<K>, deleted: bool) {
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

/// A watch feeding a store and who in it names each Bucket (`refs`), driven for the life of the
/// process. Each subscriber gets the objects it hears of (`hear`, one per subscriber) while
/// `leading` is true; otherwise events are dropped (the store still takes them), so a standby
/// never blocks the watch.
///
/// The objects are handed on straight from the watch stream: kube's shared-store subscription
/// (`ReflectHandle`) stalls for good once it meets the reference of an object already deleted
/// from the store, which silently cut a leader off from Bucket changes under churn.
fn shared_watch<K>(
    api: Api<K>,
    cfg: watcher::Config,
    hear: &[Hear],
    refs: &Arc<Referrers<K>>,
    sync: &Arc<CacheSync>,
    leading: &watch::Receiver<bool>,
) -> (Store<K>, Vec<Gated<K>>)
where
    K: Watched,
{
    let (reader, writer) = reflector::store();
    let (fanout, receivers) = Fanout::new(hear);
    let store = reader.clone();
    let (refs, sync, leading) = (refs.clone(), sync.clone(), leading.clone());
    let mut listed = false;
    let stream = watcher::watcher(api, cfg)
        .default_backoff()
        .modify(trim)
        .reflect(writer)
        .for_each(move |event| {
            let lead = *leading.borrow();
            match &event {
                // A (re-)list is complete and swapped into the store: hand on everything, so
                // changes missed while a watch was down are seen too.
                Ok(watcher::Event::InitDone) => {
                    let all = store.state();
                    refs.reset(&all);
                    if !listed {
                        listed = true;
                        sync.listed();
                    }
                    if lead {
                        for obj in all {
                            fanout.send(&obj, false);
                        }
                    }
                }
                // The store already holds this version; share its copy.
                Ok(watcher::Event::Apply(obj)) => {
                    refs.put(obj);
                    if let Some(obj) = store.get(&ObjectRef::from_obj(obj)).filter(|_| lead) {
                        fanout.send(&obj, false);
                    }
                }
                // Already gone from the store: hand on its last state.
                Ok(watcher::Event::Delete(obj)) => {
                    refs.remove(obj);
                    if lead {
                        fanout.send(&Arc::new(obj.clone()), true);
                    }
                }
                _ => {}
            }
            async {}
        });
    tokio::spawn(stream);
    (reader, receivers)
}

/// Drops what nothing here reads from a cached object: managedFields, most of an object's size,
/// and the copy of the whole object `kubectl apply` keeps in an annotation.
fn trim<K: kube::Resource>(o: &mut K) {
    let meta = o.meta_mut();
    meta.managed_fields = None;
    if let Some(a) = meta.annotations.as_mut() {
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}

/// The metadata of owned objects, handed on (listed ones too, so changes missed while a watch
/// was down are seen) while this replica leads, and kept nowhere: they only wake their owner.
fn owned_watch<K>(
    api: Api<PartialObjectMeta<K>>,
    cfg: watcher::Config,
    sync: &Arc<CacheSync>,
    leading: &watch::Receiver<bool>,
) -> Gated<PartialObjectMeta<K>>
where
    K: Watched,
{
    let (fanout, mut receivers) = Fanout::new(&[OWNED]);
    let (sync, leading) = (sync.clone(), leading.clone());
    let mut listed = false;
    let stream = watcher::watcher(api, cfg)
        .default_backoff()
        .for_each(move |event| {
            if let Ok(watcher::Event::InitDone) = &event
                && !listed
            {
                listed = true;
                sync.listed();
            }
            if *leading.borrow()
                && let Some((mut o, deleted)) = owned_change(event)
            {
                trim(&mut o);
                fanout.send(&Arc::new(o), deleted);
            }
            async {}
        });
    tokio::spawn(stream);
    receivers.remove(0)
}

/// What the owner of an owned object hears of: its changes and its deletion.
const OWNED: Hear = Hear::ChangesAndDeletions;

/// What an owned object's watch event wakes its owner with: the object listed, changed or
/// deleted (`true`). A deletion wakes it too: the owner restores what it owns at once, not at
/// its next resync.
fn owned_change<K>(event: Result<watcher::Event<K>, watcher::Error>) -> Option<(K, bool)> {
    match event {
        Ok(watcher::Event::InitApply(o) | watcher::Event::Apply(o)) => Some((o, false)),
        Ok(watcher::Event::Delete(o)) => Some((o, true)),
        Ok(watcher::Event::Init | watcher::Event::InitDone) | Err(_) => None,
    }
}

/// A controller trigger: everything in the (warm) store, then every later change.
pub(super) fn trigger<K: Send + Sync + 'static>(
    snapshot: Vec<Arc<K>>,
    rx: Gated<K>,
) -> impl futures::Stream<Item = Arc<K>> + Send + 'static {
    futures::stream::iter(snapshot).chain(events(rx))
}

pub(super) fn events<K: Send + Sync + 'static>(
    rx: Gated<K>,
) -> impl futures::Stream<Item = Arc<K>> + Send + 'static {
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|o| (o, rx)) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(name: &str) -> Secret {
        let mut s = Secret::default();
        s.metadata.name = Some(name.into());
        s
    }

    /// A deleted Secret wakes its BucketAccess as a changed one does: deletions were dropped,
    /// so a deleted Secret came back only at the next resync (10 minutes by default).
    #[test]
    fn an_owned_object_wakes_its_owner_when_listed_changed_or_deleted() {
        use watcher::Event::*;
        let woken =
            |e| owned_change(Ok(e)).map(|(s, deleted): (Secret, _)| (s.metadata.name, deleted));
        assert_eq!(
            woken(InitApply(secret("a"))),
            Some((Some("a".into()), false))
        );
        assert_eq!(woken(Apply(secret("b"))), Some((Some("b".into()), false)));
        assert_eq!(woken(Delete(secret("c"))), Some((Some("c".into()), true)));
        assert_eq!(woken(Init), None);
        assert_eq!(woken(InitDone), None);

        // And the fanout of the owned watch hands deletions on.
        let (fanout, mut rx) = Fanout::new(&[OWNED]);
        fanout.send(&Arc::new(secret("c")), true);
        assert_eq!(
            rx[0].try_recv().unwrap().metadata.name.as_deref(),
            Some("c")
        );
    }
}
