//! Which cached objects name a Bucket of their namespace: the BucketAccesses granted on it, the
//! Buckets that log or replicate into it. Each watch keeps one beside its store, updated from the
//! same events, so a Bucket's change or pass finds the objects it concerns without scanning the
//! whole cache (a scan per event grew with the square of the objects while they converged).

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::{Arc, RwLock};

use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::api::{Bucket, BucketAccess};

/// Per Bucket (namespace and name), the objects of kind `K` that name it.
pub struct Referrers<K> {
    /// The names of the Buckets of its namespace an object names.
    names: fn(&K) -> Vec<&str>,
    inner: RwLock<Inner>,
    kind: PhantomData<fn() -> K>,
}

#[derive(Default)]
struct Inner {
    /// Per `namespace/bucket`, the names of the objects naming it, sorted (most Buckets have
    /// one or two: a Vec is a tenth of the size of a set's node).
    by_bucket: HashMap<String, Vec<String>>,
    /// Per `namespace/object`, the Buckets it names (dropped from `by_bucket` when it changes).
    named_by: HashMap<String, Vec<String>>,
}

fn key(ns: &str, name: &str) -> String {
    format!("{ns}/{name}")
}

impl Inner {
    fn put(&mut self, ns: &str, object: &str, names: &[&str]) {
        self.remove(ns, object);
        if names.is_empty() {
            return;
        }
        for b in names {
            let at = self.by_bucket.entry(key(ns, b)).or_default();
            if let Err(i) = at.binary_search_by(|n| n.as_str().cmp(object)) {
                at.insert(i, object.to_string());
            }
        }
        let names = names.iter().map(|b| b.to_string()).collect();
        self.named_by.insert(key(ns, object), names);
    }

    fn remove(&mut self, ns: &str, object: &str) {
        for b in self.named_by.remove(&key(ns, object)).into_iter().flatten() {
            let k = key(ns, &b);
            if let Some(at) = self.by_bucket.get_mut(&k) {
                at.retain(|n| n != object);
                if at.is_empty() {
                    self.by_bucket.remove(&k);
                }
            }
        }
    }
}

fn ns_name<K: Resource>(o: &K) -> (&str, &str) {
    let m = o.meta();
    let ns = m.namespace.as_deref().unwrap_or_default();
    (ns, m.name.as_deref().unwrap_or_default())
}

impl<K: Resource<DynamicType = ()>> Referrers<K> {
    pub fn new(names: fn(&K) -> Vec<&str>) -> Self {
        Referrers {
            names,
            inner: Default::default(),
            kind: PhantomData,
        }
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    /// `o` as it is now (what an older version named is forgotten).
    pub fn put(&self, o: &K) {
        let (ns, name) = ns_name(o);
        self.write().put(ns, name, &(self.names)(o));
    }

    /// `o` is gone from the cache.
    pub fn remove(&self, o: &K) {
        let (ns, name) = ns_name(o);
        self.write().remove(ns, name);
    }

    /// Exactly `all`: after a (re-)list replaced the store's objects.
    pub fn reset<'a>(&self, all: impl IntoIterator<Item = &'a Arc<K>>)
    where
        K: 'a,
    {
        let mut fresh = Inner::default();
        for o in all {
            let (ns, name) = ns_name(o.as_ref());
            fresh.put(ns, name, &(self.names)(o));
        }
        *self.write() = fresh;
    }

    /// The objects of namespace `ns` that name Bucket `bucket`, sorted by name.
    pub fn naming(&self, ns: &str, bucket: &str) -> Vec<ObjectRef<K>> {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        let at = inner.by_bucket.get(&key(ns, bucket)).into_iter().flatten();
        at.map(|n| ObjectRef::new(n).within(ns)).collect()
    }
}

/// The BucketAccesses granted on a Bucket.
pub fn accesses() -> Referrers<BucketAccess> {
    Referrers::new(|a| a.spec.buckets().collect())
}

/// The Buckets that log or replicate into a Bucket.
pub fn buckets() -> Referrers<Bucket> {
    Referrers::new(|b| crate::reconcile::bucket::logging::named(b).collect())
}

/// A scope's Bucket cache and who in it names each Bucket.
#[derive(Clone)]
pub struct Buckets {
    pub store: Store<Bucket>,
    pub refs: Arc<Referrers<Bucket>>,
}

impl Buckets {
    /// A cache holding exactly `objects`, for tests.
    #[cfg(test)]
    pub fn of(objects: &[Bucket]) -> Buckets {
        use kube::runtime::watcher::Event;
        let mut writer = kube::runtime::reflector::store::Writer::<Bucket>::default();
        let refs = buckets();
        for b in objects {
            writer.apply_watcher_event(&Event::Apply(b.clone()));
            refs.put(b);
        }
        Buckets {
            store: writer.as_reader(),
            refs: Arc::new(refs),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access(ns: &str, name: &str, buckets: &[&str]) -> Arc<BucketAccess> {
        let extra: Vec<_> = (buckets[1..].iter())
            .map(|b| serde_json::json!({"bucketRef": {"name": b}, "permission": "ReadOnly"}))
            .collect();
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "s3.operator.dev/v1alpha1", "kind": "BucketAccess",
                "metadata": {"name": name, "namespace": ns},
                "spec": {"bucketRef": {"name": buckets[0]}, "permission": "ReadOnly",
                    "additionalBuckets": extra}}))
            .unwrap(),
        )
    }

    fn names(refs: Vec<ObjectRef<BucketAccess>>) -> Vec<String> {
        refs.into_iter()
            .map(|r| format!("{}/{}", r.namespace.unwrap_or_default(), r.name))
            .collect()
    }

    #[test]
    fn an_object_is_found_under_each_bucket_it_names_now_and_only_in_its_namespace() {
        let refs = accesses();
        refs.put(&access("a", "reader", &["photos", "logs"]));
        refs.put(&access("a", "writer", &["photos"]));
        refs.put(&access("b", "reader", &["photos"]));
        assert_eq!(names(refs.naming("a", "photos")), ["a/reader", "a/writer"]);
        assert_eq!(names(refs.naming("a", "logs")), ["a/reader"]);
        assert_eq!(names(refs.naming("b", "photos")), ["b/reader"]);
        assert!(refs.naming("c", "photos").is_empty());
        // It moved to another bucket: it is no longer found under the old one.
        refs.put(&access("a", "reader", &["archive"]));
        assert_eq!(names(refs.naming("a", "photos")), ["a/writer"]);
        assert!(refs.naming("a", "logs").is_empty());
        assert_eq!(names(refs.naming("a", "archive")), ["a/reader"]);
        refs.remove(&access("a", "writer", &["photos"]));
        assert!(refs.naming("a", "photos").is_empty());
        // Nothing is kept for a bucket nobody names any more.
        let inner = refs.inner.read().unwrap();
        assert_eq!(inner.by_bucket.len(), 2);
        assert_eq!(inner.named_by.len(), 2);
    }

    #[test]
    fn a_relist_keeps_exactly_what_it_listed() {
        let refs = accesses();
        refs.put(&access("a", "gone", &["photos"]));
        refs.put(&access("a", "kept", &["photos"]));
        refs.reset(&[
            access("a", "kept", &["photos"]),
            access("a", "new", &["logs"]),
        ]);
        assert_eq!(names(refs.naming("a", "photos")), ["a/kept"]);
        assert_eq!(names(refs.naming("a", "logs")), ["a/new"]);
    }

    #[test]
    fn an_object_naming_one_bucket_twice_is_found_once_and_forgotten_whole() {
        let refs = accesses();
        refs.put(&access("a", "twice", &["photos", "photos"]));
        assert_eq!(names(refs.naming("a", "photos")), ["a/twice"]);
        refs.remove(&access("a", "twice", &["photos", "photos"]));
        assert!(refs.naming("a", "photos").is_empty());
        assert!(refs.inner.read().unwrap().by_bucket.is_empty());
    }
}
