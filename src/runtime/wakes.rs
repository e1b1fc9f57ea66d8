//! What wakes an object besides a change of its own: its Bucket (for an access), a class or a
//! namespace's labels, a Bucket pass that saw its S3 bucket change hands, and a drift event for
//! its bucket, user or role (`super::drift_events`).

use std::sync::Arc;

use futures::{Stream, StreamExt};
use kube::runtime::reflector::{ObjectRef, Store};
use tokio::sync::broadcast;

use super::class_watches::{ClassKind, Wake, wakes, woken};
use super::controllers::Queue;
use super::watches::Watched;
use crate::api::{Bucket, BucketAccess};
use crate::aws::drift_queue::Touched;
use crate::aws::naming;
use crate::reconcile::{self, Context, object_key};

/// A Bucket change wakes every BucketAccess that refers to it. This runs for every Bucket
/// event over every cached BucketAccess, so it compares in place and allocates only for a match.
pub(super) fn accesses_of(store: &Store<BucketAccess>, b: &Bucket) -> Vec<ObjectRef<BucketAccess>> {
    let (ns, name) = (&b.metadata.namespace, b.metadata.name.as_deref());
    store
        .state()
        .iter()
        .filter(|a| name == Some(a.spec.bucket_ref.name.as_str()) && a.metadata.namespace == *ns)
        .map(|a| ObjectRef::from_obj(a.as_ref()))
        .collect()
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
) -> impl futures::Stream<Item = ObjectRef<BucketAccess>> + Send + 'static {
    let (store, ctx, queue) = (store.clone(), ctx.clone(), queue.clone());
    let names = each(ctx.grants.subscribe());
    names.flat_map(move |name| {
        let state = store.state();
        let granted = state.iter().filter(|a| {
            let ns = a.metadata.namespace.as_deref().unwrap_or_default();
            ctx.bucket(ns, &a.spec.bucket_ref.name)
                .and_then(|b| {
                    let owner = reconcile::owner(b.as_ref(), &ctx.settings.cluster_name);
                    let region = &ctx.aws.region;
                    reconcile::bucket::address(&b, &ctx.settings, region, &owner).ok()
                })
                .is_some_and(|at| at.name == name)
        });
        // A full pass: the bucket behind the name has changed hands.
        futures::stream::iter(queue.added(full_passes(&ctx, granted)))
    })
}

/// The Buckets of `store` whose S3 bucket an event touched, each for a full pass.
pub(super) fn buckets_touched(
    touched: &broadcast::Sender<Touched>,
    store: &Store<Bucket>,
    ctx: &Arc<Context>,
    queue: &Queue,
) -> impl Stream<Item = ObjectRef<Bucket>> + Send + 'static {
    let (store, ctx) = (store.clone(), ctx.clone());
    touched_by(touched, queue, move |t| {
        let Touched::Bucket(name) = t else {
            return Vec::new();
        };
        let state = store.state();
        full_passes(
            &ctx,
            state.iter().filter(|b| {
                let owner = reconcile::owner(b.as_ref(), &ctx.settings.cluster_name);
                reconcile::bucket::address(b, &ctx.settings, &ctx.aws.region, &owner)
                    .is_ok_and(|at| at.name == *name)
            }),
        )
    })
}

/// The BucketAccesses of `store` whose IAM user or role an event touched, each for a full pass.
pub(super) fn accesses_touched(
    touched: &broadcast::Sender<Touched>,
    store: &Store<BucketAccess>,
    ctx: &Arc<Context>,
    queue: &Queue,
) -> impl Stream<Item = ObjectRef<BucketAccess>> + Send + 'static {
    let (store, ctx) = (store.clone(), ctx.clone());
    touched_by(touched, queue, move |t| {
        let Touched::Identity(name) = t else {
            return Vec::new();
        };
        let state = store.state();
        full_passes(
            &ctx,
            state.iter().filter(|a| {
                let meta = &a.metadata;
                let ns = meta.namespace.as_deref().unwrap_or_default();
                let uid = meta.uid.as_deref().unwrap_or_default();
                let n = meta.name.as_deref().unwrap_or_default();
                // An identity made before names carried the long UID hash keeps its name.
                [
                    naming::iam_name(ns, n, uid),
                    naming::legacy_iam_name(ns, n, uid),
                ]
                .contains(name)
            }),
        )
    })
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

/// The objects `find` names for each event, subscribed now (events before are not replayed).
fn touched_by<K, F>(
    touched: &broadcast::Sender<Touched>,
    queue: &Queue,
    find: F,
) -> impl Stream<Item = ObjectRef<K>> + Send + 'static
where
    K: kube::Resource<DynamicType = ()> + Send + Sync + 'static,
    F: Fn(&Touched) -> Vec<ObjectRef<K>> + Send + 'static,
{
    let queue = queue.clone();
    let events = each(touched.subscribe());
    events.flat_map(move |t| futures::stream::iter(queue.added(find(&t))))
}

/// Every value sent on a broadcast channel from now on; one that fell behind skips ahead.
fn each<T: Clone + Send + 'static>(rx: broadcast::Receiver<T>) -> impl Stream<Item = T> + Send {
    futures::stream::unfold(rx, |mut rx| async move {
        loop {
            match rx.recv().await {
                Ok(v) => return Some((v, rx)),
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    })
}
