//! What one pass changed, published as a single event when the pass ends; and the pass a
//! `reconcile-requested-at` value asks for, said once served.

use kube::Resource;

use super::context::Context;
use super::object::object_key;
use super::settled::requested_at;

/// What one pass changed, published as a single event when the pass ends, so a new pair or a
/// rotation costs one event write and reads as one line in `kubectl describe`.
#[derive(Debug, Default)]
pub struct PassEvents {
    items: Vec<Note>,
    /// Aspects corrected after a change outside the operator, counted when the pass publishes.
    corrected: Vec<String>,
}

/// One change of a pass, or the event that sums a pass up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    pub warning: bool,
    pub reason: &'static str,
    pub note: String,
}

impl PassEvents {
    pub fn add(&mut self, warning: bool, reason: &'static str, note: String) {
        self.items.push(Note {
            warning,
            reason,
            note,
        });
    }

    /// `aspect` was changed outside the operator and the pass set it back.
    pub fn corrected(&mut self, aspect: &str) {
        self.corrected.push(aspect.to_string());
    }

    /// The event for this pass: a warning if any change was one (its reason leads), else the
    /// first change's reason; the notes in the order they happened.
    fn summary(&self) -> Option<Note> {
        let warning = self.items.iter().any(|i| i.warning);
        let lead = self.items.iter().find(|i| i.warning == warning)?;
        let notes: Vec<&str> = self.items.iter().map(|i| i.note.as_str()).collect();
        Some(Note {
            warning,
            reason: lead.reason,
            note: notes.join("; "),
        })
    }

    pub async fn publish<K: Resource<DynamicType = ()>>(self, ctx: &Context, obj: &K) {
        let kind = K::kind(&());
        for aspect in &self.corrected {
            ctx.metrics
                .drift_corrections_total
                .with_label_values(&[kind.as_ref(), aspect])
                .inc();
        }
        if let Some(Note {
            warning,
            reason,
            note,
        }) = self.summary()
        {
            ctx.event(obj, warning, reason, note).await;
        }
    }
}

/// Runs `pass` of `obj`. A new `reconcile-requested-at` value makes it a full one (see
/// `Settled::request`), served once it succeeds, and said in one Normal event per value: a
/// request is an explicit act of a person, so its one write is worth it. A failed pass serves
/// nothing, so its retry is still a requested one. A pass nobody asked for says nothing.
pub async fn serve_request<K, T, E>(
    ctx: &Context,
    obj: &K,
    pass: impl Future<Output = Result<T, E>>,
) -> Result<T, E>
where
    K: Resource<DynamicType = ()>,
{
    let (key, value) = (object_key(obj), requested_at(obj.meta()));
    let asked = ctx.settled.request(&key, value);
    let result = pass.await;
    if result.is_ok() {
        ctx.settled.served(&key, value);
        if let Some(value) = value.filter(|_| asked) {
            let note = request_note(value);
            ctx.event(obj, false, "ReconcileRequested", note).await;
        }
    }
    result
}

/// Names the request by its value, cut short: an annotation may be long.
fn request_note(value: &str) -> String {
    const SHOWN: usize = 64;
    let mut shown: String = value.chars().take(SHOWN).collect();
    if value.chars().nth(SHOWN).is_some() {
        shown.push('…');
    }
    format!("Ran a full pass with AWS read afresh, as requested at {shown:?}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::testing;

    #[test]
    fn a_request_is_named_by_its_value_cut_short() {
        let note = request_note("2026-11-26T09:00:00Z");
        assert!(note.ends_with("\"2026-11-26T09:00:00Z\""), "{note}");
        let long = "x".repeat(300);
        let note = request_note(&long);
        assert!(note.contains(&format!("\"{}…\"", "x".repeat(64))), "{note}");
        assert!(!note.contains(&"x".repeat(65)), "{note}");
    }

    /// Access "a" in "ns" at version "1", annotated with `value`.
    fn requested(value: &str) -> crate::api::BucketAccess {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "s3.operator.dev/v1alpha1", "kind": "BucketAccess",
            "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "1",
                "annotations": {crate::api::RECONCILE_REQUESTED_AT: value}},
            "spec": {"bucketRef": {"name": "b"}, "permission": "ReadOnly"}}))
        .unwrap()
    }

    #[tokio::test]
    async fn each_new_request_runs_one_full_pass_announced_once_it_succeeds() {
        let fakes = crate::reconcile::testing::Fakes::start().await;
        fakes.accept_events("ns");
        let ctx = fakes.context();
        let key = object_key(&requested("t0"));
        let settled = || {
            let ten_minutes = std::time::Duration::from_secs(600);
            ctx.settled
                .record(key.clone(), vec![vec!["1".into()]], ten_minutes);
        };
        // A pass reports whether it would run in full (nothing settled).
        let full = || async { Ok::<_, ()>(ctx.settled.remaining(&key, &["1".into()]).is_none()) };
        let notes = || {
            let posted = fakes
                .kube
                .bodies(&format!("POST {}", testing::events_path("ns")));
            posted
                .iter()
                .map(|e| e["note"].to_string())
                .collect::<Vec<_>>()
        };
        settled();
        let first = serve_request(&ctx, &requested("t0"), full()).await;
        assert_eq!(first, Ok(false), "the first pass since start: not asked");
        assert_eq!(
            serve_request(&ctx, &requested("t0"), full()).await,
            Ok(false)
        );
        assert!(notes().is_empty(), "{:?}", notes());

        assert_eq!(
            serve_request(&ctx, &requested("t1"), full()).await,
            Ok(true)
        );
        settled();
        assert_eq!(notes().len(), 1);
        assert!(notes()[0].contains("t1"), "{:?}", notes());
        assert_eq!(
            serve_request(&ctx, &requested("t1"), full()).await,
            Ok(false)
        );

        // Failed: not served, so the retry is full and announced.
        let failed = serve_request(&ctx, &requested("t2"), async { Err::<bool, _>(()) }).await;
        assert_eq!((failed, notes().len()), (Err(()), 1));
        settled();
        assert_eq!(
            serve_request(&ctx, &requested("t2"), full()).await,
            Ok(true)
        );
        assert_eq!(notes().len(), 2);
        assert!(notes()[1].contains("t2"), "{:?}", notes());
    }

    #[test]
    fn a_pass_is_one_event_led_by_its_warning() {
        assert_eq!(PassEvents::default().summary(), None, "no change, no event");
        let mut e = PassEvents::default();
        e.add(false, "Created", "Created IAM user u".into());
        e.add(false, "KeyCreated", "Created access key K".into());
        assert_eq!(
            e.summary(),
            Some(Note {
                warning: false,
                reason: "Created",
                note: "Created IAM user u; Created access key K".into()
            })
        );
        e.add(true, "DriftCorrected", "Recreated Secret s".into());
        let Note {
            warning,
            reason,
            note,
        } = e.summary().unwrap();
        assert!(warning);
        assert_eq!(reason, "DriftCorrected");
        assert!(note.ends_with("; Recreated Secret s"), "{note}");
    }

    #[tokio::test]
    async fn corrections_are_counted_by_kind_and_aspect_when_the_pass_publishes() {
        let ctx = Context::for_tests();
        let corrected = |aspect: &str| {
            ctx.metrics
                .drift_corrections_total
                .with_label_values(&["BucketAccess", aspect])
                .get()
        };
        let mut e = PassEvents::default();
        e.corrected("secret");
        e.add(true, "DriftCorrected", "Recreated Secret s".into());
        assert_eq!(corrected("secret"), 0, "not before the pass ends");
        let access: crate::api::BucketAccess = serde_json::from_value(serde_json::json!({
            "apiVersion": "s3.operator.dev/v1alpha1", "kind": "BucketAccess",
            "metadata": {"name": "a", "namespace": "team-a"},
            "spec": {"bucketRef": {"name": "b"}, "permission": "ReadOnly"}}))
        .unwrap();
        e.publish(&ctx, &access).await;
        assert_eq!((corrected("secret"), corrected("policy")), (1, 0));
    }
}
