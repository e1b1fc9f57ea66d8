//! What wakes an object besides a change of its own: its Bucket (for an access), a class or a
//! namespace's labels, a Bucket pass that saw its S3 bucket change hands, and a drift event for
//! its bucket, user or role (`super::drift_events`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::{Stream, StreamExt};
use kube::runtime::reflector::{ObjectRef, Store};
use sha2::{Digest, Sha256};
use tokio::sync::broadcast;

use super::class_watches::{ClassKind, Wake, wakes, woken};
use super::controllers::Queue;
use super::watches::Watched;
use crate::api::{Bucket, BucketAccess};
use crate::aws::drift_queue::Touched;
use crate::aws::naming;
use crate::reconcile::refs::Referrers;
use crate::reconcile::{self, Context, object_key};

/// A Bucket change wakes every BucketAccess that refers to it, when something an access decides
/// from changed ([`for_accesses`]): a Bucket's annotations and labels wake none.
#[derive(Clone, Default)]
pub(super) struct AccessFanout {
    /// Per Bucket, a digest of what its accesses last heard of it (a digest, not the status
    /// itself: this holds one entry per Bucket for the life of the process).
    heard: Arc<Mutex<HashMap<String, [u8; 32]>>>,
}

impl AccessFanout {
    pub(super) fn accesses_of(
        &self,
        granted: &Referrers<BucketAccess>,
        buckets: &Store<Bucket>,
        b: &Bucket,
    ) -> Vec<ObjectRef<BucketAccess>> {
        if !self.changed(buckets, b) {
            return Vec::new();
        }
        let ns = b.metadata.namespace.as_deref().unwrap_or_default();
        granted.naming(ns, b.metadata.name.as_deref().unwrap_or_default())
    }

    /// Whether `b` differs from what its accesses last heard. A Bucket gone from the store
    /// (deleted) always wakes them, and is forgotten.
    fn changed(&self, buckets: &Store<Bucket>, b: &Bucket) -> bool {
        let key = object_key(b);
        let mut heard = self.heard.lock().expect("fanout map poisoned");
        if buckets.get(&ObjectRef::from_obj(b)).is_none() {
            heard.remove(&key);
            return true;
        }
        let now: [u8; 32] = Sha256::digest(for_accesses(b)).into();
        heard.insert(key, now).is_none_or(|before| before != now)
    }
}

/// What a BucketAccess decides from in its Bucket: identity, spec (generation), deletion, the
/// region recorded for it and its status (readiness, the name it holds). Annotations and labels
/// a tenant sets are none of it.
fn for_accesses(b: &Bucket) -> String {
    let m = &b.metadata;
    let region = m
        .annotations
        .as_ref()
        .and_then(|a| a.get(reconcile::bucket::REGION_ANNOTATION));
    let status = serde_json::to_string(&b.status).unwrap_or_default();
    format!(
        "{:?}|{:?}|{}|{region:?}|{status}",
        m.uid,
        m.generation,
        m.deletion_timestamp.is_some()
    )
}

/// The objects of `store` a change of a class or of a namespace's labels may put under another
/// class (or under a changed one).
pub(super) fn woken_by_classes<K: Watched>(
    classes: &tokio::sync::broadcast::Sender<Wake>,
    store: &Store<K>,
    mine: ClassKind,
    queue: &Queue,
) -> impl futures::Stream<Item = ObjectRef<K>> + Send + 'static {
    let (store, queue) = (store.clone(), queue.clone());
    wakes(classes.subscribe())
        .flat_map(move |w| futures::stream::iter(queue.added(woken(&store, &w, mine))))
}

/// The BucketAccesses whose Bucket names an S3 bucket a Bucket pass woke (`Grants`): across
/// namespaces, since a name can change hands between them.
pub(super) fn granted_on(
    store: &Store<BucketAccess>,
    ctx: &Arc<Context>,
    queue: &Queue,
) -> impl Stream<Item = ObjectRef<BucketAccess>> + Send + 'static {
    let (c, names) = (ctx.clone(), BucketNames::default());
    // A full pass: the bucket behind the name has changed hands.
    woken_by(ctx.grants.subscribe(), store, ctx, queue, move |woke, a| {
        let ns = a.metadata.namespace.as_deref().unwrap_or_default();
        (a.spec.buckets()).any(|n| {
            c.bucket(ns, n)
                .is_some_and(|b| names.names_one(&c, &b, |n| woke.iter().any(|w| w == n)))
        })
    })
}

/// The S3 bucket name each Bucket names, as its passes compute it (under the bucket-name prefix
/// of the account recorded for it, else the operator's), kept per Bucket version: every wake
/// asks it of every cached object, and computing the name each time (a hash and two formats)
/// was a seventh of the operator's CPU while 1,000 pairs converged.
#[derive(Default)]
struct BucketNames(Mutex<HashMap<String, (String, Option<String>)>>);

/// Past this many Buckets remembered, those of deleted Buckets are dropped (all are, and the
/// live ones computed again as they are asked for).
const NAMES_KEPT: usize = 20_000;

impl BucketNames {
    /// Does `b` name the S3 bucket `name`?
    #[cfg(test)]
    fn names(&self, c: &Context, b: &Bucket, name: &str) -> bool {
        self.names_one(c, b, |n| n == name)
    }

    /// Does `b` name an S3 bucket that `wanted`?
    fn names_one(&self, c: &Context, b: &Bucket, wanted: impl Fn(&str) -> bool) -> bool {
        let uid = b.metadata.uid.as_deref().unwrap_or_default();
        let version = b.metadata.resource_version.as_deref().unwrap_or_default();
        let mut known = self.0.lock().expect("bucket names poisoned");
        if let Some((v, n)) = known.get(uid)
            && v == version
        {
            return n.as_deref().is_some_and(wanted);
        }
        if known.len() >= NAMES_KEPT {
            known.clear();
        }
        let recorded = b.status.as_ref().and_then(|s| s.account.as_ref());
        let prefix = recorded.and_then(|r| r.bucket_name_prefix.as_deref());
        let prefix = prefix.unwrap_or(&c.settings.bucket_name_prefix);
        let owner = reconcile::owner(b, &c.settings.cluster_name);
        let named = reconcile::bucket::bucket_name(b, prefix, &owner).ok();
        let hit = named.as_deref().is_some_and(wanted);
        known.insert(uid.to_string(), (version.to_string(), named));
        hit
    }
}

/// The Buckets of `store` whose S3 bucket an event touched, each for a full pass.
pub(super) fn buckets_touched(
    touched: &broadcast::Sender<Touched>,
    store: &Store<Bucket>,
    ctx: &Arc<Context>,
    queue: &Queue,
) -> impl Stream<Item = ObjectRef<Bucket>> + Send + 'static {
    let (c, names) = (ctx.clone(), BucketNames::default());
    woken_by(touched.subscribe(), store, ctx, queue, move |events, b| {
        if !events.iter().any(|t| matches!(t, Touched::Bucket { .. })) {
            return false;
        }
        // Bucket names are global, but the event's account, where known, is still checked.
        let recorded = b.status.as_ref().and_then(|s| s.account.as_ref());
        let here = lives_in(&c, recorded);
        names.names_one(&c, b, |n| {
            events.iter().any(|t| {
                matches!(t, Touched::Bucket { name, account }
                    if name == n && account.as_ref().is_none_or(|a| a == here))
            })
        })
    })
}

/// The BucketAccesses of `store` whose IAM user or role an event touched, each for a full pass.
pub(super) fn accesses_touched(
    touched: &broadcast::Sender<Touched>,
    store: &Store<BucketAccess>,
    ctx: &Arc<Context>,
    queue: &Queue,
) -> impl Stream<Item = ObjectRef<BucketAccess>> + Send + 'static {
    let c = ctx.clone();
    woken_by(touched.subscribe(), store, ctx, queue, move |events, a| {
        // A user's or role's name is unique only in its account: a same-named identity in
        // another account is not this access's (an event without one is the operator's own).
        let recorded = a.status.as_ref().and_then(|s| s.account.as_ref());
        let here = lives_in(&c, recorded);
        let mut named = (events.iter()).filter_map(|t| match t {
            Touched::Identity { name, account }
                if account.as_deref().unwrap_or(&c.accounts.home().id) == here =>
            {
                Some(name)
            }
            _ => None,
        });
        let Some(first) = named.next() else {
            return false;
        };
        let meta = &a.metadata;
        let ns = meta.namespace.as_deref().unwrap_or_default();
        let uid = meta.uid.as_deref().unwrap_or_default();
        let n = meta.name.as_deref().unwrap_or_default();
        // An identity made before names carried the long UID hash keeps its name.
        let mine = [
            naming::iam_name(ns, n, uid),
            naming::legacy_iam_name(ns, n, uid),
        ];
        std::iter::once(first)
            .chain(named)
            .any(|name| mine.contains(name))
    })
}

/// The id of the account an object lives in: the one its status records, else the operator's.
fn lives_in<'a>(ctx: &'a Context, recorded: Option<&'a crate::api::AccountRecord>) -> &'a str {
    recorded.map_or(ctx.accounts.home().id.as_str(), |r| r.id.as_str())
}

/// Each object for a full pass: its inputs in Kubernetes have not changed, AWS has. What its
/// last pass wrote is kept, so a pass from a cache behind those writes is still skipped.
fn full_passes<'a, K>(ctx: &Context, objects: impl Iterator<Item = &'a Arc<K>>) -> Vec<ObjectRef<K>>
where
    K: kube::Resource<DynamicType = ()> + 'a,
{
    objects
        .map(|o| {
            ctx.settled.expire(&object_key(o.as_ref()));
            ObjectRef::from_obj(o.as_ref())
        })
        .collect()
}

/// The objects of `store` that `wakes` of the values sent on `rx` from now on (events before
/// are not replayed), each for a full pass. Values sent while the last were served are served
/// together, by one look at each object (one per value made the wakes of N new buckets cost N
/// scans of N accesses). A receiver that fell behind the channel cannot know
/// which values it lost: it wakes every object of `store` for a full pass instead, counted in
/// `s3_operator_wake_overflows_total` (the budgets spread the reads that costs).
fn woken_by<K, T, F>(
    rx: broadcast::Receiver<T>,
    store: &Store<K>,
    ctx: &Arc<Context>,
    queue: &Queue,
    wakes: F,
) -> impl Stream<Item = ObjectRef<K>> + Send + 'static
where
    K: Watched,
    T: Clone + Send + 'static,
    F: Fn(&[T], &K) -> bool + Send + 'static,
{
    let (store, ctx, queue) = (store.clone(), ctx.clone(), queue.clone());
    each(rx).flat_map(move |heard| {
        let state = store.state();
        let woken = match &heard {
            Heard::Values(v) => full_passes(&ctx, state.iter().filter(|o| wakes(v, o))),
            Heard::Missed => {
                let name = queue.name;
                tracing::warn!(
                    controller = name,
                    "fell behind a wake channel: a full pass of every object"
                );
                ctx.metrics
                    .wake_overflows_total
                    .with_label_values(&[name])
                    .inc();
                full_passes(&ctx, state.iter())
            }
        };
        futures::stream::iter(queue.added(woken))
    })
}

/// What a receiver of a broadcast channel hears: values, or that it fell behind and lost some.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Heard<T> {
    Values(Vec<T>),
    Missed,
}

/// Every value sent on a broadcast channel from now on, those already waiting taken together,
/// and `Missed` where values were lost.
fn each<T: Clone + Send + 'static>(
    rx: broadcast::Receiver<T>,
) -> impl Stream<Item = Heard<T>> + Send {
    use broadcast::error::{RecvError, TryRecvError};
    futures::stream::unfold(rx, |mut rx| async move {
        let mut values = match rx.recv().await {
            Ok(v) => vec![v],
            Err(RecvError::Lagged(_)) => return Some((Heard::Missed, rx)),
            Err(RecvError::Closed) => return None,
        };
        loop {
            match rx.try_recv() {
                Ok(v) => values.push(v),
                Err(TryRecvError::Lagged(_)) => return Some((Heard::Missed, rx)),
                Err(_) => return Some((Heard::Values(values), rx)),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector::store::Writer;
    use kube::runtime::watcher::Event;
    use std::time::Duration;

    fn bucket(name: &str, annotations: serde_json::Value, status: serde_json::Value) -> Bucket {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "s3.operator.dev/v1alpha1", "kind": "Bucket",
            "metadata": {"name": name, "namespace": "team-a", "uid": format!("uid-{name}"),
                "generation": 1, "annotations": annotations},
            "spec": {}, "status": status}))
        .unwrap()
    }

    fn store_of(buckets: &[Bucket]) -> (Writer<Bucket>, Store<Bucket>) {
        let mut writer = Writer::<Bucket>::default();
        for b in buckets {
            writer.apply_watcher_event(&Event::Apply(b.clone()));
        }
        let reader = writer.as_reader();
        (writer, reader)
    }

    /// A wake by bucket name finds the Bucket its passes address: in an account with a
    /// bucket-name prefix of its own, under that prefix (the operator's own prefix named
    /// another bucket, so a name changing hands there woke none of its grants); and a
    /// remembered name is computed again once the Bucket changes.
    #[tokio::test]
    async fn a_bucket_is_found_by_the_name_its_passes_address() {
        let ctx = Context::for_tests();
        let names = BucketNames::default();
        let mut b = bucket("b", serde_json::json!({}), serde_json::json!(null));
        b.metadata.resource_version = Some("1".into());
        let owner = reconcile::owner(&b, &ctx.settings.cluster_name);
        let at = |b: &Bucket, prefix: &str| {
            let settings = crate::reconcile::Settings {
                bucket_name_prefix: prefix.into(),
                ..ctx.settings.clone()
            };
            reconcile::bucket::address(b, &settings, "eu-west-1", &owner)
                .unwrap()
                .name
        };
        let home = at(&b, &ctx.settings.bucket_name_prefix);
        assert!(names.names(&ctx, &b, &home));
        assert!(!names.names(&ctx, &b, "s3op-other"));
        // Recorded in an account with its own prefix: that prefix's name, not the home one.
        b.status = serde_json::from_value(serde_json::json!({"account":
            {"name": "t", "id": "222222222222", "bucketNamePrefix": "team-t-"}}))
        .unwrap();
        b.metadata.resource_version = Some("2".into());
        let theirs = at(&b, "team-t-");
        assert!(theirs.starts_with("team-t-"));
        assert!(names.names(&ctx, &b, &theirs));
        assert!(!names.names(&ctx, &b, &home));
        // A named bucket outside the account's prefix names none.
        b.spec.bucket_name = Some("s3op-fixed".into());
        b.metadata.resource_version = Some("3".into());
        assert!(!names.names(&ctx, &b, "s3op-fixed"));
        b.spec.bucket_name = Some("team-t-fixed".into());
        b.metadata.resource_version = Some("4".into());
        assert!(names.names(&ctx, &b, "team-t-fixed"));
    }

    /// Values sent while the last were served come together, so one look at the cache serves
    /// them all; a later one comes on its own, and a closed channel ends the stream.
    #[tokio::test]
    async fn values_already_waiting_are_heard_together() {
        let (tx, rx) = broadcast::channel(8);
        let mut heard = Box::pin(each(rx));
        for v in ["a", "b", "c"] {
            tx.send(v.to_string()).unwrap();
        }
        let together = ["a", "b", "c"].map(String::from).to_vec();
        assert_eq!(heard.next().await, Some(Heard::Values(together)));
        tx.send("d".to_string()).unwrap();
        assert_eq!(heard.next().await, Some(Heard::Values(vec!["d".into()])));
        drop(tx);
        assert_eq!(heard.next().await, None);
    }

    /// A receiver that falls behind the drift-event channel cannot know what it lost: every
    /// object of its kind gets a full pass, and the overflow is counted (the wakes were dropped
    /// silently before).
    #[tokio::test]
    async fn a_receiver_that_falls_behind_wakes_every_object_for_a_full_pass() {
        let ctx = Arc::new(Context::for_tests());
        let names = ["a", "b", "c"];
        let all: Vec<_> = names
            .iter()
            .map(|n| bucket(n, serde_json::json!({}), serde_json::json!(null)))
            .collect();
        let (_writer, store) = store_of(&all);
        for b in &all {
            let key = object_key(b);
            ctx.settled
                .record(key, vec![vec!["1".into()]], Duration::from_secs(600));
        }
        let queue = Queue::new("bucket", &ctx.metrics);
        let (tx, _) = broadcast::channel(2);
        let mut woken = Box::pin(buckets_touched(&tx, &store, &ctx, &queue));
        // Three events for buckets no object owns, on a channel of two: one is lost.
        for i in 0..3 {
            tx.send(Touched::Bucket {
                name: format!("unowned-{i}"),
                account: None,
            })
            .unwrap();
        }
        let mut got = Vec::new();
        for _ in 0..3 {
            let next = tokio::time::timeout(Duration::from_secs(5), woken.next()).await;
            got.push(next.expect("woken").expect("a stream").name);
        }
        got.sort();
        assert_eq!(got, names);
        for b in &all {
            let key = object_key(b);
            assert_eq!(
                ctx.settled.remaining(&key, &["1".into()]),
                None,
                "{key}: a full pass"
            );
        }
        let overflows = ctx
            .metrics
            .wake_overflows_total
            .with_label_values(&["bucket"]);
        assert_eq!(overflows.get(), 1);
        // The two events it did hear name no object: nothing more is woken.
        let more = tokio::time::timeout(Duration::from_millis(200), woken.next()).await;
        assert!(more.is_err(), "{more:?}");
    }

    /// A Bucket's annotations and labels wake none of its accesses; what they decide from
    /// (its status, spec, deletion) does, and so does its disappearance.
    #[test]
    fn only_what_an_access_decides_from_wakes_it() {
        let fanout = AccessFanout::default();
        let plain = bucket("b", serde_json::json!({}), serde_json::json!(null));
        let (mut writer, buckets) = store_of(std::slice::from_ref(&plain));
        let access: BucketAccess = serde_json::from_value(serde_json::json!({
            "apiVersion": "s3.operator.dev/v1alpha1", "kind": "BucketAccess",
            "metadata": {"name": "app", "namespace": "team-a"},
            "spec": {"bucketRef": {"name": "b"}, "permission": "ReadOnly"}}))
        .unwrap();
        let accesses = crate::reconcile::refs::accesses();
        accesses.put(&access);
        let woken = |b: &Bucket| fanout.accesses_of(&accesses, &buckets, b).len();
        assert_eq!(woken(&plain), 1, "first heard of");
        assert_eq!(woken(&plain), 0, "nothing new");
        let annotated = bucket(
            "b",
            serde_json::json!({"team": "x"}),
            serde_json::json!(null),
        );
        assert_eq!(woken(&annotated), 0, "an annotation");
        let ready = bucket(
            "b",
            serde_json::json!({"team": "y"}),
            serde_json::json!({"bucketName": "s3op-b"}),
        );
        assert_eq!(woken(&ready), 1, "its status changed");
        let mut edited = ready.clone();
        edited.metadata.generation = Some(2);
        assert_eq!(woken(&edited), 1, "its spec changed");
        writer.apply_watcher_event(&Event::Delete(edited.clone()));
        assert_eq!(woken(&edited), 1, "deleted");
    }

    /// IAM names are per account: an event for the access's identity name wakes it only in
    /// the account it lives in (its recorded one, else the operator's); the same name in
    /// another account wakes nothing. A bucket's event from another account wakes nothing.
    #[tokio::test]
    async fn an_identity_event_wakes_only_the_access_in_that_account() {
        let ctx = Arc::new(Context::for_tests());
        let home = ctx.accounts.home().id.clone();
        let member = "222222222222".to_string();
        let access = |name: &str, account: serde_json::Value| -> BucketAccess {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "s3.operator.dev/v1alpha1", "kind": "BucketAccess",
                "metadata": {"name": name, "namespace": "team-a", "uid": format!("uid-{name}")},
                "spec": {"bucketRef": {"name": "b"}, "permission": "ReadOnly"},
                "status": {"account": account}}))
            .unwrap()
        };
        let at_home = access("h", serde_json::Value::Null);
        let there = access("m", serde_json::json!({"name": "acct", "id": member}));
        let mut writer = Writer::<BucketAccess>::default();
        for a in [&at_home, &there] {
            writer.apply_watcher_event(&Event::Apply(a.clone()));
        }
        let store = writer.as_reader();
        let queue = Queue::new("bucketaccess", &ctx.metrics);
        let (tx, _) = broadcast::channel(16);
        let mut woken = Box::pin(accesses_touched(&tx, &store, &ctx, &queue));
        let user = |a: &BucketAccess| {
            naming::iam_name(
                "team-a",
                &a.metadata.name.clone().unwrap(),
                &a.metadata.uid.clone().unwrap(),
            )
        };
        let send = |name: String, account: &str| {
            tx.send(Touched::Identity {
                name,
                account: Some(account.to_string()),
            })
            .unwrap();
        };
        // Same names, wrong accounts: nothing.
        send(user(&at_home), &member);
        send(user(&there), &home);
        send(user(&there), "333333333333");
        let none = tokio::time::timeout(Duration::from_millis(200), woken.next()).await;
        assert!(none.is_err(), "{none:?}");
        // Each in its own account: woken.
        send(user(&there), &member);
        let got = tokio::time::timeout(Duration::from_secs(5), woken.next()).await;
        assert_eq!(got.unwrap().unwrap().name, "m");
        send(user(&at_home), &home);
        let got = tokio::time::timeout(Duration::from_secs(5), woken.next()).await;
        assert_eq!(got.unwrap().unwrap().name, "h");

        // A bucket event from another account than the Bucket's: nothing.
        let b = bucket("b", serde_json::json!({}), serde_json::json!(null));
        let (_w, buckets) = store_of(std::slice::from_ref(&b));
        let bqueue = Queue::new("bucket", &ctx.metrics);
        let (btx, _) = broadcast::channel(16);
        let mut bwoken = Box::pin(buckets_touched(&btx, &buckets, &ctx, &bqueue));
        let owner = reconcile::owner(&b, &ctx.settings.cluster_name);
        let name =
            reconcile::bucket::address(&b, &ctx.settings, &ctx.accounts.home().aws.region, &owner)
                .unwrap()
                .name;
        for account in [Some(member.clone()), Some(home.clone()), None] {
            btx.send(Touched::Bucket {
                name: name.clone(),
                account: account.clone(),
            })
            .unwrap();
            let got = tokio::time::timeout(Duration::from_millis(300), bwoken.next()).await;
            match account {
                Some(a) if a == member => assert!(got.is_err(), "{got:?}"),
                _ => assert_eq!(got.unwrap().unwrap().name, "b", "{account:?}"),
            }
        }
    }
}
