//! Orphans: AWS resources this installation tagged for an object that no longer exists (its
//! finalizer stripped before the operator cleaned up). What the sweep may touch is decided here,
//! purely from a resource's tags ([`judge`]); [`Finalized`] tells a deletion the operator
//! finished itself from one it never saw.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::Api;
use kube::api::ListParams;

use crate::api::{Bucket, BucketAccess};
use crate::aws::tags::{CLUSTER, NAME, NAMESPACE, Owner, UID};
use crate::metrics::Metrics;

/// How long a finished cleanup is remembered waiting for its object's deletion event.
const REMEMBERED: Duration = Duration::from_secs(3600);

/// The UIDs whose cleanup this process finished (it removed its finalizer): their deletion
/// events need no cleanup. Any other deleted object may have been stripped of its finalizer.
#[derive(Default)]
pub struct Finalized(Mutex<HashMap<String, Instant>>);

impl Finalized {
    pub fn record(&self, uid: &str) {
        let mut done = self.0.lock().expect("finalized map poisoned");
        // A deletion event that never came (a watch gap) must not be remembered forever.
        done.retain(|_, at| at.elapsed() < REMEMBERED);
        done.insert(uid.to_string(), Instant::now());
    }

    /// Whether `uid`'s cleanup was finished here; forgets it.
    pub fn take(&self, uid: &str) -> bool {
        let mut done = self.0.lock().expect("finalized map poisoned");
        done.remove(uid).is_some()
    }
}

/// What the sweep does with a resource under the installation's prefix or path.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Not an orphan of this installation: another cluster's, untagged, released, owned by a
    /// live object, or of a namespace this operator does not watch.
    Keep,
    /// Tagged by this installation for `Owner`, whose UID no live object has.
    Orphan(Owner),
}

/// The pure rule: a resource is an orphan only when its tags name this installation (`cluster`)
/// and a complete owner whose UID no live object has (`live`), in a namespace this operator
/// watches (`watched`). Anything else (foreign, untagged, released) is never touched.
pub fn judge(
    tags: &BTreeMap<String, String>,
    cluster: &str,
    live: impl Fn(&str) -> bool,
    watched: impl Fn(&str) -> bool,
) -> Verdict {
    if tags.get(CLUSTER).map(String::as_str) != Some(cluster) {
        return Verdict::Keep;
    }
    let (Some(namespace), Some(name), Some(uid)) =
        (tags.get(NAMESPACE), tags.get(NAME), tags.get(UID))
    else {
        return Verdict::Keep;
    };
    if uid.is_empty() || live(uid) || !watched(namespace) {
        return Verdict::Keep;
    }
    Verdict::Orphan(Owner {
        cluster: cluster.to_string(),
        namespace: namespace.clone(),
        name: name.clone(),
        uid: uid.clone(),
    })
}

/// Whether the API server has an object (Bucket or BucketAccess) named as `owner` with its UID:
/// the caches may lag behind it (a new leader's), and a cache miss is no proof of absence.
/// (LISTs by name: the operator's RBAC grants list, not get.)
pub async fn still_exists(client: &kube::Client, owner: &Owner) -> Result<bool, kube::Error> {
    let by_name = ListParams::default().fields(&format!("metadata.name={}", owner.name));
    let ns = owner.namespace.as_str();
    let buckets = Api::<Bucket>::namespaced(client.clone(), ns)
        .list(&by_name)
        .await?;
    let accesses = Api::<BucketAccess>::namespaced(client.clone(), ns)
        .list(&by_name)
        .await?;
    let uids = buckets.items.iter().map(|b| b.metadata.uid.as_deref());
    let mut uids = uids.chain(accesses.items.iter().map(|a| a.metadata.uid.as_deref()));
    Ok(uids.any(|u| u == Some(owner.uid.as_str())))
}

/// Counts one orphan handled (`kind` and `action` of `metrics::ORPHAN_KINDS`/`ORPHAN_ACTIONS`).
pub fn count(metrics: &Metrics, kind: &str, action: &str) {
    metrics
        .orphans_total
        .with_label_values(&[kind, action])
        .inc();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(cluster: &str, ns: &str, uid: &str) -> BTreeMap<String, String> {
        Owner {
            cluster: cluster.into(),
            namespace: ns.into(),
            name: "n".into(),
            uid: uid.into(),
        }
        .tags()
    }

    #[test]
    fn only_this_installations_tags_for_a_dead_uid_in_a_watched_namespace_make_an_orphan() {
        let live = |u: &str| u == "alive";
        let watched = |ns: &str| ns != "elsewhere";
        let judge = |t: &BTreeMap<String, String>| judge(t, "c", live, watched);
        assert_eq!(
            judge(&tags("c", "team-a", "dead")),
            Verdict::Orphan(Owner {
                cluster: "c".into(),
                namespace: "team-a".into(),
                name: "n".into(),
                uid: "dead".into(),
            })
        );
        assert_eq!(judge(&tags("c", "team-a", "alive")), Verdict::Keep, "live");
        assert_eq!(
            judge(&tags("other", "team-a", "dead")),
            Verdict::Keep,
            "foreign"
        );
        assert_eq!(
            judge(&tags("c", "elsewhere", "dead")),
            Verdict::Keep,
            "unwatched"
        );
        assert_eq!(judge(&BTreeMap::new()), Verdict::Keep, "untagged");
        let mut partial = tags("c", "team-a", "dead");
        partial.remove(NAME);
        assert_eq!(judge(&partial), Verdict::Keep, "an incomplete owner");
        // A released bucket carries no ownership keys, only where it came from.
        let owner = Owner {
            cluster: "c".into(),
            namespace: "team-a".into(),
            name: "n".into(),
            uid: "dead".into(),
        };
        let released = crate::aws::tags::released(&owner.tags(), &owner);
        assert_eq!(judge(&released), Verdict::Keep, "released");
    }

    #[test]
    fn a_finished_cleanup_is_remembered_once() {
        let f = Finalized::default();
        f.record("u1");
        assert!(f.take("u1"));
        assert!(!f.take("u1"), "taken once");
        assert!(!f.take("u2"), "never finished here");
    }
}
