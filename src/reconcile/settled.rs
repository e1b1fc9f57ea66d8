//! The settled-echo record: the watch echo of the operator's own writes costs no second pass;
//! the `reconcile-requested-at` values served, whose every new one runs a full pass; and the
//! passes let through, so that metadata-only changes (a tenant's annotations and labels) are
//! coalesced to one pass per object per [`SPACING`].

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::api::ObjectMeta;

use crate::api::RECONCILE_REQUESTED_AT;

/// The shortest time between two passes of one object that only metadata changes ask for
/// (annotations and labels the operator does not decide from): a loop of annotations costs at
/// most one pass of each object per this interval, while a spec change, a new
/// `reconcile-requested-at` value, a deletion and every wake from outside the object (its
/// Bucket, its Secret, a class, a drift event, the resync) run at once.
pub const SPACING: Duration = Duration::from_secs(5);

/// The annotations a pass decides from: a change of one of them is no mere metadata.
const DECIDING: [&str; 3] = [
    RECONCILE_REQUESTED_AT,
    crate::domain_key!("region"),
    crate::api::PAUSED,
];

/// The resourceVersions a successful pass started from and left behind (its own writes), per
/// input object, and when the next full pass is due. The watch echo of the operator's own writes
/// (even from a cache that has not caught up with them) then costs no second round of AWS reads;
/// a change by anyone else comes with a version the pass never saw and runs the full pass, and
/// so does the periodic resync that looks for drift in AWS.
#[derive(Default)]
pub struct Settled {
    passes: Mutex<HashMap<String, Pass>>,
    /// Per object, the `reconcile-requested-at` value its last successful pass in this process
    /// saw (`None`: it carried none).
    requests: Mutex<HashMap<String, Option<String>>>,
    /// Per object, the last version a pass was let through for (see [`Settled::coalesce`]).
    let_through: Mutex<HashMap<String, LetThrough>>,
    /// Per object, the last versions written by passes that settled nothing (see
    /// [`Settled::wrote_unsettled`]).
    unsettled_writes: Mutex<HashMap<String, Vec<String>>>,
}

/// How many such versions are kept per object: a pass writes at most a finalizer and a status.
const UNSETTLED_KEPT: usize = 4;

/// A version of an object a pass was let through for: its resourceVersion, what a pass
/// decides from in its metadata ([`deciding`]), and when.
struct LetThrough {
    version: String,
    deciding: [u8; 32],
    at: Instant,
}

/// Per input object, the versions a pass saw or wrote; and when the next full pass is due.
struct Pass {
    seen: Vec<Vec<String>>,
    due: Instant,
}

impl Settled {
    /// How long until the next full pass, if every input of `key` is at a version its last
    /// pass saw or wrote.
    pub fn remaining(&self, key: &str, current: &[String]) -> Option<Duration> {
        let passes = self.passes.lock().expect("settled map poisoned");
        let Pass { seen, due } = passes.get(key)?;
        let now = Instant::now();
        let same =
            seen.len() == current.len() && seen.iter().zip(current).all(|(ok, v)| ok.contains(v));
        (same && now < *due).then(|| *due - now)
    }

    /// Records a successful pass: for each input, the versions it saw or wrote.
    pub fn record(&self, key: String, versions: Vec<Vec<String>>, next_pass: Duration) {
        self.passes.lock().expect("settled map poisoned").insert(
            key,
            Pass {
                seen: versions,
                due: Instant::now() + next_pass,
            },
        );
    }

    /// Did the last recorded pass of `key` see `version` of its input `input`? `None` when no
    /// pass of `key` is recorded (the first since this process started).
    pub fn saw(&self, key: &str, input: usize, version: &str) -> Option<bool> {
        let passes = self.passes.lock().expect("settled map poisoned");
        let pass = passes.get(key)?;
        Some(
            pass.seen
                .get(input)
                .is_some_and(|v| v.iter().any(|s| s == version)),
        )
    }

    /// Has a pass of `key` written over `version` of the object itself (its first input)? A
    /// cache still at `version` is then behind this operator's own write, whose watch event
    /// runs the pass again.
    pub fn wrote_over(&self, key: &str, version: &str) -> bool {
        let passes = self.passes.lock().expect("settled map poisoned");
        let Some(own) = passes.get(key).and_then(|p| p.seen.first()) else {
            return false;
        };
        own.iter()
            .position(|v| v == version)
            .is_some_and(|i| own[i + 1..].iter().any(|v| v != version))
    }

    /// Makes the next pass of `key` a full one, keeping what its last pass wrote: a pass from a
    /// cache still behind those writes is skipped (`wrote_over`) rather than run on stale input,
    /// where it would write its status again or have its finalizer patch refused.
    pub fn expire(&self, key: &str) {
        if let Some(p) = self
            .passes
            .lock()
            .expect("settled map poisoned")
            .get_mut(key)
        {
            p.due = Instant::now();
        }
    }

    /// Before a pass of `key`, whose object's metadata is `meta`: how long to wait when all
    /// that changed since the last pass let through is metadata the pass does not decide from,
    /// and that pass was less than [`SPACING`] ago. `None` lets the pass through (and notes it):
    /// the first pass, a change of spec, deletion, finalizers or a deciding annotation, a
    /// version this operator wrote (its echo is settled for free), a wake from another input
    /// (the object's own version did not move), and a full pass that is due.
    pub fn coalesce(&self, key: &str, meta: &ObjectMeta) -> Option<Duration> {
        let now = Instant::now();
        let version = meta.resource_version.clone().unwrap_or_default();
        let deciding = deciding(meta);
        let unsettled = self
            .unsettled_writes
            .lock()
            .expect("settled map poisoned")
            .get(key)
            .is_some_and(|own| own.contains(&version));
        let mut lets = self.let_through.lock().expect("settled map poisoned");
        if let Some(last) = lets.get(key)
            && !unsettled
            && last.version != version
            && last.deciding == deciding
            && !self.own_or_due(key, &version, now)
            && let Some(wait) = (last.at + SPACING).checked_duration_since(now)
            && !wait.is_zero()
        {
            return Some(wait);
        }
        let at = now;
        lets.insert(
            key.to_string(),
            LetThrough {
                version,
                deciding,
                at,
            },
        );
        None
    }

    /// Notes `version` of `key`'s object as written by a pass that settled nothing (a refusal
    /// reported in status): neither the echo of that write (which may come after the echo of
    /// the pass's finalizer write) nor a wake from another input with the object at that
    /// version (its Bucket, its Secret) waits out the spacing, as no tenant changed anything.
    pub fn wrote_unsettled(&self, key: &str, version: String) {
        let mut all = self.unsettled_writes.lock().expect("settled map poisoned");
        let own = all.entry(key.to_string()).or_default();
        if own.len() == UNSETTLED_KEPT {
            own.remove(0);
        }
        own.push(version);
    }

    /// Is `version` of `key`'s object one its last recorded pass saw or wrote, or is a full
    /// pass of it due (the resync, a drift event, a request)?
    fn own_or_due(&self, key: &str, version: &str, now: Instant) -> bool {
        let passes = self.passes.lock().expect("settled map poisoned");
        passes.get(key).is_some_and(|p| {
            now >= p.due
                || p.seen
                    .first()
                    .is_some_and(|own| own.iter().any(|v| v == version))
        })
    }

    pub fn forget(&self, key: &str) {
        self.passes
            .lock()
            .expect("settled map poisoned")
            .remove(key);
        self.requests
            .lock()
            .expect("settled map poisoned")
            .remove(key);
        self.let_through
            .lock()
            .expect("settled map poisoned")
            .remove(key);
        self.unsettled_writes
            .lock()
            .expect("settled map poisoned")
            .remove(key);
    }

    /// Does `value`, the object's `reconcile-requested-at` now, ask for a full pass of `key`
    /// that no pass of this process has served yet?
    pub fn requested(&self, key: &str, value: Option<&str>) -> bool {
        let requests = self.requests.lock().expect("settled map poisoned");
        asks(requests.get(key), value)
    }

    /// Before a pass of `key`: a new request makes it a full one (see `expire`). Returns
    /// whether it was one.
    pub fn request(&self, key: &str, value: Option<&str>) -> bool {
        let new = self.requested(key, value);
        if new {
            self.expire(key);
        }
        new
    }

    /// A pass of `key` that saw `value` succeeded: that request is served.
    pub fn served(&self, key: &str, value: Option<&str>) {
        self.requests
            .lock()
            .expect("settled map poisoned")
            .insert(key.to_string(), value.map(str::to_string));
    }
}

/// The object's `reconcile-requested-at` value.
pub fn requested_at(meta: &ObjectMeta) -> Option<&str> {
    meta.annotations
        .as_ref()?
        .get(RECONCILE_REQUESTED_AT)
        .map(String::as_str)
}

/// What of an object's metadata a pass decides from: its identity, generation (the spec),
/// deletion, finalizers and the deciding annotations. Everything else (other annotations,
/// labels, managedFields, the resourceVersion itself) is a tenant's business.
/// A digest, not the values: one is kept per object, and a tenant sets their lengths.
fn deciding(meta: &ObjectMeta) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    let annotations = meta.annotations.as_ref();
    let values = DECIDING.map(|k| annotations.and_then(|a| a.get(k)).cloned());
    let all = format!(
        "{:?}|{:?}|{}|{:?}|{values:?}",
        meta.uid,
        meta.generation,
        meta.deletion_timestamp.is_some(),
        meta.finalizers,
    );
    Sha256::digest(all).into()
}

/// Does `value` ask for a full pass? Only a value other than the one `served` (what the last
/// successful pass in this process saw) does. Before any such pass (`served` is `None`) the
/// answer is no: that pass is a full one anyway, as nothing is settled yet, and whether the
/// value was served before this process started is unknown; taking it for new would announce
/// every annotated object again at each restart or change of leader.
fn asks(served: Option<&Option<String>>, value: Option<&str>) -> bool {
    match (served, value) {
        (Some(last), Some(v)) => last.as_deref() != Some(v),
        (None, _) | (_, None) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settled_passes_skip_only_versions_they_saw_and_only_until_due() {
        let s = Settled::default();
        let v = |x: &str| x.to_string();
        assert_eq!(s.remaining("k", &[v("1")]), None, "never recorded");
        s.record(
            "k".into(),
            vec![vec![v("1"), v("2")], vec![v("7")]],
            Duration::from_secs(60),
        );
        let left = s.remaining("k", &[v("2"), v("7")]).expect("its own write");
        assert!(left <= Duration::from_secs(60) && left > Duration::from_secs(59));
        assert!(
            s.remaining("k", &[v("1"), v("7")]).is_some(),
            "a cache behind its write"
        );
        assert_eq!(
            s.remaining("k", &[v("3"), v("7")]),
            None,
            "someone else's change"
        );
        assert_eq!(
            s.remaining("k", &[v("2"), v("8")]),
            None,
            "an input changed"
        );
        assert_eq!(s.remaining("k", &[v("2")]), None, "different inputs");
        s.record("k".into(), vec![vec![v("2")]], Duration::ZERO);
        assert_eq!(s.remaining("k", &[v("2")]), None, "due: the full pass runs");
        s.forget("k");
        assert_eq!(s.remaining("k", &[v("2")]), None);
    }

    #[test]
    fn a_cache_behind_the_operators_own_write_is_known() {
        let s = Settled::default();
        let v = |x: &str| x.to_string();
        assert!(!s.wrote_over("k", "1"), "never recorded");
        s.record("k".into(), vec![vec![v("1"), v("1")]], Duration::ZERO);
        assert!(!s.wrote_over("k", "1"), "a pass that wrote nothing");
        s.record(
            "k".into(),
            vec![vec![v("1"), v("2"), v("3")]],
            Duration::ZERO,
        );
        assert!(s.wrote_over("k", "1") && s.wrote_over("k", "2"));
        assert!(!s.wrote_over("k", "3"), "the newest version");
        assert!(!s.wrote_over("k", "4"), "someone else's change");
        s.forget("k");
        assert!(!s.wrote_over("k", "1"));
    }

    #[test]
    fn an_expired_pass_runs_in_full_but_still_knows_its_own_writes() {
        let s = Settled::default();
        let v = |x: &str| x.to_string();
        s.record(
            "k".into(),
            vec![vec![v("1"), v("2"), v("3")]],
            Duration::from_secs(600),
        );
        assert!(s.remaining("k", &[v("3")]).is_some());
        s.expire("k");
        assert_eq!(s.remaining("k", &[v("3")]), None, "the full pass runs");
        assert!(
            s.wrote_over("k", "2"),
            "a cache behind its writes is still known"
        );
        s.expire("never-recorded");
        assert!(!s.wrote_over("never-recorded", "1"));
    }

    #[test]
    fn only_a_value_other_than_the_one_served_asks_for_a_full_pass() {
        let served = |v: Option<&str>| Some(v.map(str::to_string));
        let t1 = "2026-11-26T09:00:00Z";
        assert!(asks(served(None).as_ref(), Some(t1)), "annotated");
        assert!(asks(served(Some("a")).as_ref(), Some(t1)), "a new value");
        assert!(!asks(served(Some(t1)).as_ref(), Some(t1)), "served already");
        assert!(!asks(served(Some(t1)).as_ref(), None), "annotation removed");
        assert!(!asks(served(None).as_ref(), None), "never annotated");
        assert!(
            !asks(None, Some(t1)),
            "the first pass since start: full anyway, and not announced"
        );
    }

    #[test]
    fn a_new_request_makes_the_next_pass_full_until_it_is_served() {
        let s = Settled::default();
        let v = |x: &str| x.to_string();
        s.record(
            "k".into(),
            vec![vec![v("1"), v("2")]],
            Duration::from_secs(600),
        );
        assert!(!s.request("k", Some("t1")), "no pass served yet");
        s.served("k", None);
        assert!(s.remaining("k", &[v("2")]).is_some(), "settled");
        assert!(!s.request("k", None), "no request");
        assert!(s.remaining("k", &[v("2")]).is_some(), "still settled");
        assert!(s.request("k", Some("t1")));
        assert_eq!(s.remaining("k", &[v("2")]), None, "the full pass runs");
        assert!(s.wrote_over("k", "1"), "its own writes still known");
        // A failed pass serves nothing: the retry is asked for still.
        assert!(s.requested("k", Some("t1")));
        s.served("k", Some("t1"));
        assert!(!s.requested("k", Some("t1")), "served");
        assert!(s.requested("k", Some("t2")), "another value");
        s.forget("k");
        assert!(!s.requested("k", Some("t2")), "forgotten with the object");
    }

    fn meta(version: &str, generation: i64, annotations: &[(&str, &str)]) -> ObjectMeta {
        ObjectMeta {
            uid: Some("u1".into()),
            resource_version: Some(version.into()),
            generation: Some(generation),
            annotations: Some(
                annotations
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    /// A loop of annotations costs one pass per object per SPACING; whatever a pass decides
    /// from, and every wake from outside the object, still runs at once.
    #[test]
    fn metadata_only_changes_are_coalesced_and_nothing_else_is() {
        let s = Settled::default();
        assert_eq!(s.coalesce("k", &meta("1", 1, &[])), None, "the first pass");
        // Its pass wrote version 2 (status): the echo is let through (and settled for free).
        s.record(
            "k".into(),
            vec![vec!["1".into(), "2".into()]],
            Duration::from_secs(600),
        );
        assert_eq!(s.coalesce("k", &meta("2", 1, &[])), None, "its own write");
        // A tenant's annotation right after: it waits for the rest of the spacing.
        let wait = s
            .coalesce("k", &meta("3", 1, &[("team", "x")]))
            .expect("coalesced");
        assert!(
            wait > SPACING - Duration::from_secs(1) && wait <= SPACING,
            "{wait:?}"
        );
        assert!(
            s.coalesce("k", &meta("4", 1, &[("team", "y")])).is_some(),
            "and again"
        );
        // A wake from another input: the object's own version did not move since the last
        // pass let through... (version 2, above)
        assert_eq!(
            s.coalesce("k", &meta("2", 1, &[])),
            None,
            "a wake from elsewhere"
        );
        // What a pass decides from runs at once.
        assert_eq!(s.coalesce("k", &meta("5", 2, &[])), None, "a spec change");
        let asked = [(RECONCILE_REQUESTED_AT, "t1")];
        assert_eq!(s.coalesce("k", &meta("6", 2, &asked)), None, "a request");
        assert!(
            s.coalesce(
                "k",
                &meta("7", 2, &[(RECONCILE_REQUESTED_AT, "t1"), ("a", "b")])
            )
            .is_some()
        );
        let mut deleting = meta("8", 2, &asked);
        deleting.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            jiff::Timestamp::now(),
        ));
        assert_eq!(s.coalesce("k", &deleting), None, "deletion");
        let mut stripped = meta("9", 2, &asked);
        stripped.finalizers = Some(vec![]);
        assert_eq!(s.coalesce("k", &stripped), None, "finalizers changed");
        // A full pass that is due (a drift event, the resync) is never held back.
        let mut annotated = meta("10", 2, &[(RECONCILE_REQUESTED_AT, "t1"), ("x", "1")]);
        annotated.finalizers = Some(vec![]);
        assert!(s.coalesce("k", &annotated).is_some());
        s.expire("k");
        assert_eq!(s.coalesce("k", &annotated), None, "due");
        // Another object is its own.
        assert_eq!(s.coalesce("other", &meta("3", 1, &[])), None);
        s.forget("k");
        assert_eq!(
            s.coalesce("k", &meta("11", 2, &[("x", "2")])),
            None,
            "forgotten"
        );
    }

    /// A refused pass settles nothing but writes its status: the echo of that write, and a wake
    /// from another input with the object at that version, are let through at once (as before
    /// the spacing existed), never held for it; a tenant's annotation after it still waits.
    #[test]
    fn the_status_write_of_a_refused_pass_is_no_tenant_change() {
        let s = Settled::default();
        assert_eq!(s.coalesce("k", &meta("1", 1, &[])), None);
        // The pass put its finalizer on (version 2), then wrote its refusal (version 3).
        s.wrote_unsettled("k", "3".into());
        let at = |version: &str, labels: &[(&str, &str)]| {
            let mut m = meta(version, 1, labels);
            m.finalizers = Some(vec!["f".into()]);
            m
        };
        assert_eq!(s.coalesce("k", &at("2", &[])), None, "the finalizer's echo");
        assert_eq!(s.coalesce("k", &at("3", &[])), None, "the status echo");
        assert_eq!(
            s.coalesce("k", &at("3", &[])),
            None,
            "a wake from its Bucket"
        );
        let annotated = at("4", &[("a", "b")]);
        assert!(
            s.coalesce("k", &annotated).is_some(),
            "a tenant's annotation"
        );
        s.forget("k");
        assert!(s.unsettled_writes.lock().unwrap().is_empty());
    }

    #[test]
    fn a_coalesced_pass_runs_once_the_spacing_is_over() {
        let s = Settled::default();
        assert_eq!(s.coalesce("k", &meta("1", 1, &[])), None);
        // As if the last pass let through were a spacing ago.
        s.let_through.lock().unwrap().get_mut("k").unwrap().at -= SPACING;
        assert_eq!(s.coalesce("k", &meta("2", 1, &[("a", "b")])), None);
        assert!(s.coalesce("k", &meta("3", 1, &[("a", "c")])).is_some());
    }

    #[test]
    fn the_request_is_read_from_the_annotation() {
        let mut meta = ObjectMeta::default();
        assert_eq!(requested_at(&meta), None);
        meta.annotations = Some(
            [(RECONCILE_REQUESTED_AT.to_string(), "now".to_string())]
                .into_iter()
                .collect(),
        );
        assert_eq!(requested_at(&meta), Some("now"));
        assert_eq!(
            RECONCILE_REQUESTED_AT,
            "s3.operator.dev/reconcile-requested-at"
        );
    }

    #[test]
    fn what_the_last_pass_saw_of_an_input_is_known_once_one_is_recorded() {
        let s = Settled::default();
        assert_eq!(s.saw("k", 2, "gold@1"), None);
        s.record(
            "k".into(),
            vec![vec!["1".into()], vec![], vec!["gold@1".into()]],
            Duration::from_secs(60),
        );
        assert_eq!(s.saw("k", 2, "gold@1"), Some(true));
        assert_eq!(s.saw("k", 2, "gold@2"), Some(false));
        assert_eq!(s.saw("k", 7, "gold@1"), Some(false));
    }
}
