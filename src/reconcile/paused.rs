//! Pause (`s3.operator.dev/paused: "true"`): during an incident a person stops the operator
//! touching one object's AWS resources. A paused object's pass makes no AWS call and writes
//! nothing but its `Paused` condition (its last `Ready` kept as it was); an out-of-band change
//! stays, a spec edit waits, and a deletion waits with its finalizer, so nothing is deleted
//! while paused. Removing the annotation (or any other value) runs a full pass at once: the
//! annotation's change is a new resourceVersion, which no settled pass has seen.
//!
//! A pause never keeps a grant alive past its Bucket: a BucketAccess whose Bucket is gone,
//! being deleted or not Ready runs its pass anyway (see `bucket_access::reconcile`), so its
//! credentials are withdrawn as always.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::{Context, Error, Object, Requeue};
use crate::api::PAUSED;
use crate::api::condition::READY;

/// The condition type a paused object reports.
pub const CONDITION: &str = "Paused";

/// Does `obj` carry `s3.operator.dev/paused: "true"`?
pub fn is_paused<K: kube::Resource>(obj: &K) -> bool {
    obj.annotations().get(PAUSED).is_some_and(|v| v == "true")
}

/// What a paused object reports: its last Ready as it was, and `Paused=True` saying what
/// waits. The transition time is kept while it stays paused, so a second pass writes nothing.
pub fn conditions(
    previous: &[Condition],
    deleting: bool,
    generation: Option<i64>,
    now: jiff::Timestamp,
) -> Vec<Condition> {
    let message = if deleting {
        "paused by the s3.operator.dev/paused annotation: the deletion waits, and nothing is deleted in AWS, until the annotation is removed"
    } else {
        "paused by the s3.operator.dev/paused annotation: the operator neither reads nor writes AWS for this object, and spec changes wait, until the annotation is removed"
    };
    let since = previous
        .iter()
        .find(|c| c.type_ == CONDITION && c.status == "True")
        .map(|c| c.last_transition_time.clone())
        .unwrap_or(Time(now));
    let mut out: Vec<Condition> = previous
        .iter()
        .filter(|c| c.type_ == READY)
        .cloned()
        .collect();
    out.push(Condition {
        type_: CONDITION.into(),
        status: "True".into(),
        reason: CONDITION.into(),
        message: message.into(),
        observed_generation: generation,
        last_transition_time: since,
    });
    out
}

/// Reports the pause (status and a Normal event, each only when the conditions change) and
/// waits for the next change of the object.
pub async fn report<K: Object>(
    ctx: &Context,
    obj: &K,
    previous: &[Condition],
) -> Result<Requeue, Error> {
    let deleting = obj.meta().deletion_timestamp.is_some();
    let now = jiff::Timestamp::now();
    let wanted = conditions(previous, deleting, obj.meta().generation, now);
    if wanted.as_slice() != previous {
        let ns = obj.namespace().ok_or(Error::NoNamespace)?;
        let api = Api::<K>::namespaced(ctx.client.clone(), &ns);
        let patch = Patch::Merge(json!({"status": {"conditions": wanted}}));
        let (name, params) = (obj.name_any(), PatchParams::default());
        let write = api.patch_status(&name, &params, &patch);
        (ctx.metrics)
            .kube_write(&K::kind(&()), "patch_status", write)
            .await?;
        let was_paused = previous.iter().any(|c| c.type_ == CONDITION);
        if !was_paused {
            ctx.event(
                obj,
                false,
                CONDITION,
                wanted[wanted.len() - 1].message.clone(),
            )
            .await;
        }
    }
    // Its annotation's removal is a change of the object, which wakes it.
    Ok(Requeue::OnChange)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::condition::{Reason, ready};

    #[test]
    fn a_paused_object_keeps_its_ready_and_says_what_waits() {
        let t0: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let t1: jiff::Timestamp = "2026-01-01T01:00:00Z".parse().unwrap();
        let was = vec![ready(&[], true, Reason::Available, "ok", Some(3), t0)];
        let paused = conditions(&was, false, Some(4), t1);
        assert_eq!(paused[0], was[0], "Ready is kept as it was");
        assert_eq!(paused.len(), 2);
        assert_eq!(
            (paused[1].type_.as_str(), paused[1].status.as_str()),
            ("Paused", "True")
        );
        assert!(paused[1].message.contains("spec changes wait"));
        // A second pass computes the same conditions: nothing to write.
        let t2: jiff::Timestamp = "2026-01-01T02:00:00Z".parse().unwrap();
        assert_eq!(conditions(&paused, false, Some(4), t2), paused);
        // Deleting while paused: the deletion waits, and it says so.
        let deleting = conditions(&paused, true, Some(4), t2);
        assert!(deleting[1].message.contains("the deletion waits"));
        assert_eq!(deleting[1].last_transition_time, Time(t1));
    }

    #[test]
    fn only_true_pauses() {
        let mut b = crate::api::Bucket::new("b", Default::default());
        assert!(!is_paused(&b));
        for (value, paused) in [
            ("true", true),
            ("false", false),
            ("yes", false),
            ("", false),
        ] {
            b.metadata.annotations = Some([(PAUSED.to_string(), value.to_string())].into());
            assert_eq!(is_paused(&b), paused, "{value:?}");
        }
    }
}
