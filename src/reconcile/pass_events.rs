//! What one pass changed, published as a single event when the pass ends.

use kube::Resource;

use super::context::Context;

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

#[cfg(test)]
mod tests {
    use super::*;

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
