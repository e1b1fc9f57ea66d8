//! The class watches: BucketClasses, BucketAccessClasses and the namespaces' labels, always
//! cluster-wide (a class and a namespace are cluster-scoped, whatever namespaces the operator
//! watches). They feed `reconcile::class::Classes` and wake the objects a change may affect.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ApiResource, DynamicObject};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use tokio::sync::broadcast;

use super::watches::{CacheSync, Watched};
use crate::api::{BucketAccessClass, BucketClass, DEFAULT_CLASS_ANNOTATION};
use crate::metrics::Metrics;
use crate::reconcile::class::{Classes, Unreadable, Unreadables};

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
    unreadable: Unreadables,
    pub wakes: broadcast::Sender<Wake>,
}

impl ClassWatches {
    /// Starts the three watches. Wakes go to whoever subscribes (the controllers, once this
    /// replica leads); until then there is no one to wake, and a controller's first pass
    /// covers every object anyway.
    pub(super) fn start(
        client: &kube::Client,
        sync: &Arc<CacheSync>,
        metrics: &Arc<Metrics>,
    ) -> Self {
        let (wakes, _) = broadcast::channel(1024);
        let unreadable = Unreadables::default();
        let to = |kind, set: &Arc<RwLock<_>>| ClassWatch {
            kind,
            wakes: wakes.clone(),
            sync: sync.clone(),
            unreadable: set.clone(),
            metrics: metrics.clone(),
        };
        let buckets = class_watch(client, to(ClassKind::Bucket, &unreadable.buckets));
        let accesses = class_watch(client, to(ClassKind::Access, &unreadable.accesses));
        let namespaces = namespace_watch(client, &wakes, sync);
        ClassWatches {
            buckets,
            accesses,
            namespaces,
            unreadable,
            wakes,
        }
    }

    pub(super) fn classes(&self) -> Classes {
        Classes::new(
            self.buckets.clone(),
            self.accesses.clone(),
            self.namespaces.clone(),
            self.unreadable.clone(),
        )
    }

    pub(super) async fn synced(&self) {
        // Errors only when the writer is dropped, that is at shutdown.
        let _ = self.buckets.wait_until_ready().await;
        let _ = self.accesses.wait_until_ready().await;
        let _ = self.namespaces.wait_until_ready().await;
    }
}

/// Where one class kind's watch reports.
struct ClassWatch {
    kind: ClassKind,
    wakes: broadcast::Sender<Wake>,
    sync: Arc<CacheSync>,
    unreadable: Arc<RwLock<BTreeMap<String, Unreadable>>>,
    metrics: Arc<Metrics>,
}

/// The cluster-wide watch of one class kind, feeding a store; any change to a class (listed
/// again, changed or deleted) sends one wake for its kind. Classes are listed and watched as
/// untyped objects and decoded one by one: a class the operator cannot decode (made under an
/// older CRD, or one whose schema lets through what the types refuse) is kept aside as
/// [`Unreadable`] (logged, counted in `s3_operator_class_decode_errors{kind}`) and fails its
/// namespaces closed, instead of failing the whole list and with it every tenant's passes.
fn class_watch<C>(client: &kube::Client, to: ClassWatch) -> Store<C>
where
    C: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    C: Send + Sync + 'static,
{
    let (reader, mut writer) = reflector::store();
    let mut listed = false;
    let mut decoder = Decoder::default();
    let api = Api::<DynamicObject>::all_with(client.clone(), &ApiResource::erase::<C>(&()));
    let kind = C::kind(&()).to_string();
    let stream = watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .for_each(move |event| {
            let event = match event {
                Ok(e) => e,
                Err(e) => {
                    tracing::warn!(error = %e, kind = %kind, "class watch failed; retrying");
                    return std::future::ready(());
                }
            };
            let wake = !matches!(event, watcher::Event::Init | watcher::Event::InitApply(_));
            for typed in decoder.decode::<C>(event) {
                writer.apply_watcher_event(&typed);
            }
            if let Some(set) = decoder.settled() {
                report_unreadable(&kind, &set, &to);
                *to.unreadable.write().unwrap_or_else(|e| e.into_inner()) = set;
            }
            if decoder.listed() && !listed {
                listed = true;
                to.sync.listed();
            }
            if wake {
                let _ = to.wakes.send(Wake::Class(to.kind));
            }
            std::future::ready(())
        });
    tokio::spawn(stream);
    reader
}

/// Logs each class newly found unreadable and sets the gauge of its kind.
fn report_unreadable(kind: &str, set: &BTreeMap<String, Unreadable>, to: &ClassWatch) {
    let before = to
        .unreadable
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    for (name, u) in set {
        if before.get(name) != Some(u) {
            tracing::error!(kind, class = %name, error = %u.error, "class cannot be read: the namespaces it may govern fail closed (ClassViolation) until it is fixed");
        }
    }
    to.metrics
        .class_decode_errors
        .with_label_values(&[kind])
        .set(set.len() as i64);
}

/// Turns the untyped watch's events into typed ones, keeping the classes that do not decode
/// aside (pure but for its state: the unreadable classes, and those of a relist in progress).
#[derive(Default)]
struct Decoder {
    unreadable: BTreeMap<String, Unreadable>,
    /// The unreadable classes of a relist in progress.
    relist: Option<BTreeMap<String, Unreadable>>,
    /// The set changed since the last [`Decoder::settled`].
    changed: bool,
    done: bool,
}

impl Decoder {
    /// The typed events for one untyped event: a class that does not decode is none (and, once
    /// listed, removes any earlier version of it from the store).
    fn decode<C: Resource<DynamicType = ()> + serde::de::DeserializeOwned>(
        &mut self,
        event: watcher::Event<DynamicObject>,
    ) -> Vec<watcher::Event<C>> {
        use watcher::Event::*;
        match event {
            Init => {
                self.relist = Some(BTreeMap::new());
                vec![Init]
            }
            InitApply(o) => match typed::<C>(&o) {
                Ok(c) => vec![InitApply(c)],
                Err(u) => {
                    self.relist
                        .get_or_insert_default()
                        .insert(u.name.clone(), *u);
                    vec![]
                }
            },
            InitDone => {
                let set = self.relist.take().unwrap_or_default();
                self.changed |= set != self.unreadable;
                self.unreadable = set;
                self.done = true;
                vec![InitDone]
            }
            Apply(o) => match typed::<C>(&o) {
                Ok(c) => {
                    self.changed |= self.unreadable.remove(&c.name_any()).is_some();
                    vec![Apply(c)]
                }
                Err(u) => {
                    let gone = placeholder::<C>(&o).map(Delete);
                    self.changed |=
                        self.unreadable.insert(u.name.clone(), (*u).clone()) != Some(*u);
                    gone.into_iter().collect()
                }
            },
            Delete(o) => {
                self.changed |= self.unreadable.remove(&o.name_any()).is_some();
                placeholder::<C>(&o).map(Delete).into_iter().collect()
            }
        }
    }

    /// The unreadable classes, when they changed since last asked (and the list is done).
    fn settled(&mut self) -> Option<BTreeMap<String, Unreadable>> {
        (self.done && std::mem::take(&mut self.changed)).then(|| self.unreadable.clone())
    }

    fn listed(&self) -> bool {
        self.done
    }
}

/// `o` decoded as a `C`, or what the operator can tell of it when it cannot be.
fn typed<C: serde::de::DeserializeOwned>(o: &DynamicObject) -> Result<C, Box<Unreadable>> {
    let value = serde_json::to_value(o).unwrap_or_default();
    serde_json::from_value(value.clone()).map_err(|e| {
        let selector =
            o.data
                .get("spec")
                .map_or(Some(None), |spec| match spec.get("namespaceSelector") {
                    None | Some(serde_json::Value::Null) => Some(None),
                    Some(s) => serde_json::from_value(s.clone()).ok().map(Some),
                });
        Box::new(Unreadable {
            name: o.name_any(),
            error: culprit::<C>(&value).unwrap_or_else(|| e.to_string()),
            default: o
                .annotations()
                .get(DEFAULT_CLASS_ANNOTATION)
                .map(String::as_str)
                == Some("true"),
            created: o.metadata.creation_timestamp.as_ref().map(|t| t.0),
            selector,
        })
    })
}

/// Which field of `value`'s spec fails to decode, and why: serde's message names no path.
fn culprit<C: serde::de::DeserializeOwned>(value: &serde_json::Value) -> Option<String> {
    let spec = value.get("spec")?.as_object()?;
    spec.iter().find_map(|(k, v)| {
        let mut one = value.clone();
        one["spec"] = serde_json::json!({ k: v });
        serde_json::from_value::<C>(one)
            .err()
            .map(|e| format!("spec.{k}: {e}"))
    })
}

/// A `C` with `o`'s metadata and an empty spec, to remove `o` from a typed store.
fn placeholder<C: Resource<DynamicType = ()> + serde::de::DeserializeOwned>(
    o: &DynamicObject,
) -> Option<C> {
    let value = serde_json::json!({
        "apiVersion": C::api_version(&()),
        "kind": C::kind(&()),
        "metadata": o.metadata,
        "spec": {},
    });
    serde_json::from_value(value).ok()
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

    fn access_class(name: &str, maximum: &str) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "s3.operator.dev/v1alpha1", "kind": "BucketAccessClass",
            "metadata": {"name": name, "annotations": {DEFAULT_CLASS_ANNOTATION: "true"}},
            "spec": {"namespaceSelector": {"matchLabels": {"env": "prod"}},
                "rotation": {"maximum": maximum}}}))
        .unwrap()
    }

    fn names(events: &[watcher::Event<BucketAccessClass>]) -> Vec<String> {
        use watcher::Event::*;
        events
            .iter()
            .map(|e| match e {
                Init => "init".into(),
                InitApply(c) => format!("init-apply {}", c.name_any()),
                InitDone => "init-done".into(),
                Apply(c) => format!("apply {}", c.name_any()),
                Delete(c) => format!("delete {}", c.name_any()),
            })
            .collect()
    }

    /// One class that does not decode is kept aside with its name, default annotation,
    /// selector and the field that failed; the others reach the store, and it leaves the store
    /// when an edit breaks it and comes back when one fixes it.
    #[test]
    fn a_class_that_does_not_decode_is_set_aside_and_the_rest_go_on() {
        use watcher::Event::*;
        let mut d = Decoder::default();
        let mut decode = |e| names(&d.decode::<BucketAccessClass>(e));
        assert_eq!(decode(Init), ["init"]);
        assert_eq!(
            decode(InitApply(access_class("good", "720h"))),
            ["init-apply good"]
        );
        assert!(decode(InitApply(access_class("bad", "30d"))).is_empty());
        assert_eq!(decode(InitDone), ["init-done"]);
        let set = d.settled().expect("the first list settles the set");
        assert_eq!(set.keys().collect::<Vec<_>>(), ["bad"]);
        let bad = &set["bad"];
        assert!(bad.default);
        assert!(
            bad.error.starts_with("spec.rotation: invalid unit"),
            "{}",
            bad.error
        );
        let selector = bad
            .selector
            .clone()
            .flatten()
            .expect("the selector is read");
        assert_eq!(selector.match_labels.unwrap()["env"], "prod");
        assert_eq!(d.settled(), None, "no change, nothing to report");

        let mut decode = |e| names(&d.decode::<BucketAccessClass>(e));
        assert_eq!(decode(Apply(access_class("good", "1d"))), ["delete good"]);
        assert_eq!(decode(Apply(access_class("bad", "48h"))), ["apply bad"]);
        let set = d.settled().unwrap();
        assert_eq!(set.keys().collect::<Vec<_>>(), ["good"]);
        let mut decode = |e| names(&d.decode::<BucketAccessClass>(e));
        assert_eq!(decode(Delete(access_class("good", "1d"))), ["delete good"]);
        assert!(d.settled().unwrap().is_empty());
    }

    #[test]
    fn an_unreadable_selector_is_unknown_not_none() {
        let mut o = access_class("x", "30d");
        o.data["spec"]["namespaceSelector"] = serde_json::json!({"matchLabels": "not a map"});
        let u = typed::<BucketAccessClass>(&o).unwrap_err();
        assert_eq!(u.selector, None);
        o.data["spec"]
            .as_object_mut()
            .unwrap()
            .remove("namespaceSelector");
        let u = typed::<BucketAccessClass>(&o).unwrap_err();
        assert_eq!(u.selector, Some(None), "no selector: every namespace");
    }
}
