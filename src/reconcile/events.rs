//! Kubernetes Events (events.k8s.io/v1) about the operator's objects.
//!
//! kube's `Recorder` keeps a full copy of every event it sent for six minutes, to fold repeats
//! into a series, and scans that cache on every publish. Under churn the cache was the largest
//! part of the operator's heap (a few KiB per event, thousands of events within six minutes).
//! Here each object keeps only its last event's name and fingerprint, dropped with the object.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Mutex;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Resource};
use serde_json::json;

use super::object::object_key;

/// A repeat of an object's last event within this time joins its series, as with kube's
/// `Recorder`, instead of making another Event object.
const SERIES_WINDOW: SignedDuration = SignedDuration::from_mins(6);

/// The API server refuses a longer `note`.
const NOTE_LIMIT: usize = 1024;

/// Publishes events and remembers each object's last one.
pub struct Events {
    client: kube::Client,
    controller: String,
    instance: String,
    last: Mutex<HashMap<String, Last>>,
}

/// The last event published about one object.
#[derive(Debug)]
struct Last {
    /// Hash of what it said (type, reason, note) and of the object's uid.
    what: u64,
    name: String,
    count: i32,
    at: Timestamp,
}

/// What publishing an event writes.
#[derive(Debug, PartialEq)]
enum Send {
    Create,
    /// The same event again: the next count of the last event's series.
    Repeat {
        name: String,
        count: i32,
    },
}

/// A new Event, unless `what` repeats the object's last event within the series window.
fn plan(last: Option<&Last>, what: u64, now: Timestamp) -> Send {
    match last {
        Some(l) if l.what == what && l.at + SERIES_WINDOW > now => Send::Repeat {
            name: l.name.clone(),
            count: l.count.saturating_add(1),
        },
        _ => Send::Create,
    }
}

impl Events {
    /// `instance` tells replicas apart (the leader-election identity); the controller otherwise.
    pub fn new(client: kube::Client, controller: &str, instance: Option<String>) -> Events {
        Events {
            client,
            controller: controller.to_string(),
            instance: instance.unwrap_or_else(|| controller.to_string()),
            last: Mutex::default(),
        }
    }

    /// Publishes an event about `obj`, or counts a repeat of its last one.
    pub async fn publish<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        warning: bool,
        reason: &str,
        note: &str,
    ) -> Result<(), kube::Error> {
        let (key, now) = (object_key(obj), Timestamp::now());
        let what = fingerprint(obj, warning, reason, note);
        let send = plan(self.lock().get(&key), what, now);
        let api: Api<Event> = Api::namespaced(
            self.client.clone(),
            obj.meta().namespace.as_deref().unwrap_or("default"),
        );
        if let Send::Repeat { name, count } = send {
            let series = EventSeries {
                count,
                last_observed_time: MicroTime(now),
            };
            let series = json!({ "series": series });
            match api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&series))
                .await
            {
                Ok(_) => {
                    self.record(key, what, name, count, now);
                    return Ok(());
                }
                // The API server has let it expire: start a new one.
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        let event = self.event(obj, warning, reason, note, now);
        let name = event.metadata.name.clone().unwrap_or_default();
        api.create(&PostParams::default(), &event).await?;
        self.record(key, what, name, 1, now);
        Ok(())
    }

    /// Drops the memory of a deleted object's events.
    pub fn forget(&self, key: &str) {
        self.lock().remove(key);
    }

    fn record(&self, key: String, what: u64, name: String, count: i32, at: Timestamp) {
        let last = Last {
            what,
            name,
            count,
            at,
        };
        self.lock().insert(key, last);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Last>> {
        self.last.lock().expect("event map poisoned")
    }

    fn event<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        warning: bool,
        reason: &str,
        note: &str,
        now: Timestamp,
    ) -> Event {
        let regarding = obj.object_ref(&());
        Event {
            metadata: ObjectMeta {
                name: Some(event_name(
                    regarding.name.as_deref().unwrap_or_default(),
                    now,
                )),
                namespace: regarding.namespace.clone(),
                ..Default::default()
            },
            action: Some(reason.to_string()),
            reason: Some(reason.to_string()),
            note: Some(truncate(note, NOTE_LIMIT).to_string()),
            type_: Some(if warning { "Warning" } else { "Normal" }.to_string()),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            ..Default::default()
        }
    }
}

fn fingerprint<K: Resource>(obj: &K, warning: bool, reason: &str, note: &str) -> u64 {
    let mut h = DefaultHasher::new();
    (obj.meta().uid.as_deref(), warning, reason, note).hash(&mut h);
    h.finish()
}

/// `<object>.<nanoseconds, hex>`, as kube and client-go name events; the object's name is cut
/// so the whole stays a valid name (at most 253 characters, ending alphanumeric).
fn event_name(object: &str, now: Timestamp) -> String {
    let stem = truncate(object, 200).trim_end_matches(['-', '.']);
    format!("{stem}.{:x}", now.as_nanosecond())
}

/// At most `max` bytes of `s`, cut at a character boundary.
fn truncate(s: &str, max: usize) -> &str {
    let end = (0..=max.min(s.len()))
        .rev()
        .find(|i| s.is_char_boundary(*i))
        .unwrap_or(0);
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last(what: u64, at: Timestamp) -> Last {
        Last {
            what,
            name: "b.1".into(),
            count: 3,
            at,
        }
    }

    #[test]
    fn a_repeat_within_the_window_joins_the_series_anything_else_is_new() {
        let now = Timestamp::now();
        assert_eq!(plan(None, 7, now), Send::Create);
        let recent = last(7, now - SignedDuration::from_mins(5));
        assert_eq!(
            plan(Some(&recent), 7, now),
            Send::Repeat {
                name: "b.1".into(),
                count: 4
            }
        );
        assert_eq!(plan(Some(&recent), 8, now), Send::Create, "other words");
        let old = last(7, now - SignedDuration::from_mins(7));
        assert_eq!(plan(Some(&old), 7, now), Send::Create, "window passed");
    }

    #[test]
    fn the_fingerprint_tells_objects_and_words_apart() {
        let bucket = |uid: &str| {
            let mut b = crate::api::Bucket::new("b", Default::default());
            b.metadata.uid = Some(uid.into());
            b
        };
        let (a, b) = (bucket("1"), bucket("2"));
        let base = fingerprint(&a, false, "Created", "x");
        assert_eq!(base, fingerprint(&a, false, "Created", "x"));
        for other in [
            fingerprint(&b, false, "Created", "x"),
            fingerprint(&a, true, "Created", "x"),
            fingerprint(&a, false, "Deleted", "x"),
            fingerprint(&a, false, "Created", "y"),
        ] {
            assert_ne!(base, other);
        }
    }

    #[test]
    fn names_and_notes_stay_within_the_api_limits() {
        let now = Timestamp::now();
        let long = format!("{}-x", "a".repeat(199));
        let name = event_name(&long, now);
        assert!(name.starts_with(&format!("{}.", "a".repeat(199))), "{name}");
        assert!(name.len() <= 253);
        assert_eq!(truncate("héllo", 2), "h", "cut at a character boundary");
        assert_eq!(truncate("short", NOTE_LIMIT), "short");
    }

    #[tokio::test]
    async fn a_deleted_object_leaves_nothing_behind() {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let events = Events::new(kube::Client::try_from(config).unwrap(), "s3-operator", None);
        events.record("Bucket/ns/a".into(), 1, "a.1".into(), 1, Timestamp::now());
        events.record("Bucket/ns/b".into(), 2, "b.1".into(), 1, Timestamp::now());
        events.forget("Bucket/ns/a");
        let keys: Vec<String> = events.lock().keys().cloned().collect();
        assert_eq!(keys, ["Bucket/ns/b"]);
    }
}
