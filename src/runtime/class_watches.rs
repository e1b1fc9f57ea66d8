//! The class watches: BucketClasses, BucketAccessClasses and the namespaces' labels, always
//! cluster-wide (a class and a namespace are cluster-scoped, whatever namespaces the operator
//! watches). They feed `reconcile::class::Classes` and wake the objects a change may affect.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use tokio::sync::broadcast;

use super::watches::{CacheSync, Watched};
use crate::api::{BucketAccessClass, BucketClass};
use crate::reconcile::class::Classes;

/// What a change in the class watches wakes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Wake {
    /// A class of this kind changed: every object of the kind may be under it now, or no longer.
    Class(ClassKind),
    /// A namespace appeared or its labels changed: the objects in it.
    Namespace(String),
    /// Wakes were lost (a slow subscriber): every object.
    All,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ClassKind {
    Bucket,
    Access,
}

/// The stores of the class watches, and the wakes they send.
pub(super) struct ClassWatches {
    buckets: Store<BucketClass>,
    accesses: Store<BucketAccessClass>,
    namespaces: Store<PartialObjectMeta<Namespace>>,
    pub wakes: broadcast::Sender<Wake>,
}

impl ClassWatches {
    /// Starts the three watches. Wakes go to whoever subscribes (the controllers, once this
    /// replica leads); until then there is no one to wake, and a controller's first pass
    /// covers every object anyway.
    pub(super) fn start(client: &kube::Client, sync: &Arc<CacheSync>) -> Self {
        let (wakes, _) = broadcast::channel(1024);
        let buckets = class_watch(client, ClassKind::Bucket, &wakes, sync);
        let accesses = class_watch(client, ClassKind::Access, &wakes, sync);
        let namespaces = namespace_watch(client, &wakes, sync);
        ClassWatches {
            buckets,
            accesses,
            namespaces,
            wakes,
        }
    }

    pub(super) fn classes(&self) -> Classes {
        Classes::new(
            self.buckets.clone(),
            self.accesses.clone(),
            self.namespaces.clone(),
        )
    }

    pub(super) async fn synced(&self) {
        // Errors only when the writer is dropped, that is at shutdown.
        let _ = self.buckets.wait_until_ready().await;
        let _ = self.accesses.wait_until_ready().await;
        let _ = self.namespaces.wait_until_ready().await;
    }
}

/// The cluster-wide watch of one class kind, feeding a store; any change to a class (listed
/// again, changed or deleted) sends one wake for its kind.
fn class_watch<C>(
    client: &kube::Client,
    kind: ClassKind,
    wakes: &broadcast::Sender<Wake>,
    sync: &Arc<CacheSync>,
) -> Store<C>
where
    C: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    C: Send + Sync + 'static,
{
    let (reader, writer) = reflector::store();
    let (wakes, sync) = (wakes.clone(), sync.clone());
    let mut listed = false;
    let stream = watcher::watcher(Api::<C>::all(client.clone()), watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .for_each(move |event| {
            match event {
                Ok(watcher::Event::InitDone) => {
                    if !listed {
                        listed = true;
                        sync.listed();
                    }
                    let _ = wakes.send(Wake::Class(kind));
                }
                Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_)) => {
                    let _ = wakes.send(Wake::Class(kind));
                }
                _ => {}
            }
            async {}
        });
    tokio::spawn(stream);
    reader
}

/// The cluster-wide metadata watch of namespaces, feeding a store; a namespace seen for the
/// first time or with other labels wakes the objects in it (other changes cannot move them to
/// another class).
fn namespace_watch(
    client: &kube::Client,
    wakes: &broadcast::Sender<Wake>,
    sync: &Arc<CacheSync>,
) -> Store<PartialObjectMeta<Namespace>> {
    let (reader, writer) = reflector::store();
    let (wakes, sync) = (wakes.clone(), sync.clone());
    let mut listed = false;
    let mut known = HashMap::new();
    // An Api of PartialObjectMeta makes metadata-only requests.
    let api = Api::<PartialObjectMeta<Namespace>>::all(client.clone());
    let stream = watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(|n| n.metadata.managed_fields = None)
        .reflect(writer)
        .for_each(move |event| {
            if let Ok(watcher::Event::InitDone) = &event
                && !listed
            {
                listed = true;
                sync.listed();
            }
            if let Ok(e) = &event
                && let Some(ns) = relabelled(&mut known, e)
            {
                let _ = wakes.send(Wake::Namespace(ns));
            }
            async {}
        });
    tokio::spawn(stream);
    reader
}

/// The namespace whose labels this event shows for the first time (`known` keeps the last
/// labels seen of each namespace); `None` for anything else.
fn relabelled(
    known: &mut HashMap<String, BTreeMap<String, String>>,
    event: &watcher::Event<PartialObjectMeta<Namespace>>,
) -> Option<String> {
    match event {
        watcher::Event::InitApply(n) | watcher::Event::Apply(n) => {
            let (name, labels) = (n.name_any(), n.labels().clone());
            (known.insert(name.clone(), labels.clone()) != Some(labels)).then_some(name)
        }
        watcher::Event::Delete(n) => {
            known.remove(&n.name_any());
            None
        }
        watcher::Event::Init | watcher::Event::InitDone => None,
    }
}

/// The wakes a controller subscribed to, as a stream; lost wakes become one `All`.
pub(super) fn wakes(
    rx: broadcast::Receiver<Wake>,
) -> impl futures::Stream<Item = Wake> + Send + 'static {
    futures::stream::unfold(rx, |mut rx| async move {
        match rx.recv().await {
            Ok(w) => Some((w, rx)),
            Err(broadcast::error::RecvError::Lagged(_)) => Some((Wake::All, rx)),
            Err(broadcast::error::RecvError::Closed) => None,
        }
    })
}

/// The objects in `store` (of the kind `mine` classes govern) that `wake` may affect.
pub(super) fn woken<K: Watched>(
    store: &Store<K>,
    wake: &Wake,
    mine: ClassKind,
) -> Vec<ObjectRef<K>> {
    let affected = |o: &K| match wake {
        Wake::Class(kind) => *kind == mine,
        Wake::Namespace(ns) => o.meta().namespace.as_deref() == Some(ns.as_str()),
        Wake::All => true,
    };
    store
        .state()
        .iter()
        .filter(|o| affected(o.as_ref()))
        .map(|o| ObjectRef::from_obj(o.as_ref()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Bucket;

    fn namespace(name: &str, labels: &[(&str, &str)]) -> PartialObjectMeta<Namespace> {
        let mut n = PartialObjectMeta::<Namespace>::default();
        n.metadata.name = Some(name.into());
        n.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        n
    }

    #[test]
    fn a_namespace_wakes_its_objects_when_first_seen_or_relabelled_only() {
        use watcher::Event::*;
        let mut known = HashMap::new();
        let mut seen = |e| relabelled(&mut known, &e);
        assert_eq!(seen(InitApply(namespace("a", &[]))), Some("a".into()));
        assert_eq!(seen(Apply(namespace("a", &[]))), None, "same labels");
        let prod = namespace("a", &[("env", "prod")]);
        assert_eq!(seen(Apply(prod.clone())), Some("a".into()));
        // A relist showing the same labels wakes nothing.
        assert_eq!(seen(InitApply(prod.clone())), None);
        assert_eq!(seen(Delete(prod.clone())), None);
        assert_eq!(seen(Apply(prod)), Some("a".into()), "created again");
        assert_eq!(seen(InitDone), None);
    }

    #[tokio::test]
    async fn a_class_change_wakes_every_object_of_its_kind_and_a_namespace_only_its_own() {
        let (reader, mut writer) = reflector::store::<Bucket>();
        for (ns, name) in [("a", "x"), ("a", "y"), ("b", "z")] {
            let b = serde_json::json!({"apiVersion": "s3.operator.dev/v1alpha1", "kind": "Bucket",
                "metadata": {"name": name, "namespace": ns}, "spec": {}});
            writer.apply_watcher_event(&watcher::Event::Apply(serde_json::from_value(b).unwrap()));
        }
        let names = |w: &Wake, mine| {
            let mut n: Vec<_> = woken(&reader, w, mine)
                .into_iter()
                .map(|r| r.name)
                .collect();
            n.sort();
            n
        };
        assert_eq!(
            names(&Wake::Class(ClassKind::Bucket), ClassKind::Bucket),
            ["x", "y", "z"]
        );
        assert!(names(&Wake::Class(ClassKind::Access), ClassKind::Bucket).is_empty());
        assert_eq!(
            names(&Wake::Namespace("a".into()), ClassKind::Bucket),
            ["x", "y"]
        );
        assert_eq!(names(&Wake::All, ClassKind::Access), ["x", "y", "z"]);

        // A subscriber that fell behind is told to wake everything.
        let (tx, rx) = broadcast::channel(1);
        tx.send(Wake::Namespace("a".into())).unwrap();
        tx.send(Wake::Namespace("b".into())).unwrap();
        drop(tx);
        let got: Vec<_> = wakes(rx).collect().await;
        assert_eq!(got, [Wake::All, Wake::Namespace("b".into())]);
    }
}
