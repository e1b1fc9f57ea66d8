//! Bucket: observe the S3 bucket, plan the difference from the spec (pure), apply it.
//!
//! A pass resolves the spec (`desired.rs`), reads what S3 holds (`observe.rs`), plans the writes
//! with a pure function (`plan.rs`) and makes them (`apply.rs`). Deletion has a pure planner of
//! its own, and its steps (`cleanup.rs`). A refused pass still withdraws what is no longer allowed
//! (`security.rs`, pure). Each feature group keeps its rules in a file of its
//! own: [`protection`] (object lock, tiering, acceleration), [`notifications`] and [`logging`].

mod apply;
mod cleanup;
mod desired;
#[cfg(test)]
mod fixtures;
pub(crate) mod in_sync;
#[cfg(test)]
mod io_tests;
pub mod logging;
pub mod notifications;
mod observe;
mod plan;
pub mod protection;
pub mod replication;
mod security;

use std::sync::Arc;

use kube::ResourceExt;

use super::{Blocked, Context, Error, InAccount, Requeue, accounts, object_key, paused};
use crate::api::Bucket;
use crate::api::condition::Reason;
use crate::aws::budget::Key;
use crate::aws::s3::tagging::ABAC_ENABLED;
use crate::reconcile::class::bucket as class;

pub use cleanup::{Ended, release_orphan, vanished};
pub use desired::{Address, Desired, REGION_ANNOTATION, address, bucket_name, desired};
pub use plan::{BucketState, Change, Found, Plan, plan};

/// What else an AccessDenied on a bucket may mean.
const DENIED_ALSO: &str = "the bucket may belong to another account, or ";

/// The Blocked an AWS refusal a person must fix amounts to; `None` for transient errors.
fn refusal(e: &crate::aws::Error) -> Option<Blocked> {
    if e.is(ABAC_ENABLED) {
        // Already says which setting refused what, and what to do.
        return Some(Blocked::new(Reason::InvalidSpec, e.message.clone()));
    }
    super::refusal(e, Some(Reason::NameConflict), DENIED_ALSO)
}

pub async fn reconcile(bucket: Arc<Bucket>, ctx: Arc<Context>) -> Result<Requeue, Error> {
    if paused::is_paused(bucket.as_ref()) {
        let previous = bucket.status.as_ref().map(|s| s.conditions.as_slice());
        return paused::report(&ctx, bucket.as_ref(), previous.unwrap_or_default()).await;
    }
    let recorded = bucket.status.as_ref().and_then(|s| s.account.as_ref());
    if bucket.metadata.deletion_timestamp.is_some() {
        // Deletion acts where the bucket lives, whatever the class says now.
        return match ctx.accounts.recorded(recorded).await {
            Ok(account) => cleanup::cleanup(&bucket, &InAccount::new(&ctx, account)).await,
            Err(why) => unavailable(&bucket, &ctx, &why).await,
        };
    }
    let key = object_key(bucket.as_ref());
    let start = bucket.resource_version().unwrap_or_default();
    // Its class is resolved once for the whole pass: a change to it, or to the namespace's
    // labels, runs a full pass, and what the pass applies and reports is that one version.
    let class = class::in_force(&ctx.classes, &bucket)?;
    let version = class::version(&class);
    // The account it lives in: recorded, or for a new Bucket its class's.
    let class_account = class.as_ref().ok().and_then(Option::as_ref);
    let class_account = class_account.and_then(|c| c.spec.account.as_deref());
    let begun = crate::reconcile::has_finalizer(bucket.as_ref());
    let placed = accounts::placement(recorded, begun, class_account, "bucket");
    let cx = match ctx.accounts.placed(&placed, recorded).await {
        Ok(account) => InAccount::new(&ctx, account),
        Err(why) => return unavailable(&bucket, &ctx, &why).await,
    };
    // The Buckets it logs into or that log into it are inputs too.
    let links = logging::links_in(&bucket, &cx);
    let linked = links.fingerprint();
    let inputs = [start.clone(), linked.clone(), version.clone()];
    if let Some(wait) = ctx.settled.remaining(&key, &inputs) {
        return Ok(Requeue::Resync(wait));
    }
    apply::apply(&bucket, &cx, start, &links, (class, version), placed).await
}

/// The budget a pass of `bucket` spends: its namespace's in the account the pass acts in, as
/// [`reconcile`] decides it, from what the caches hold (no call): the recorded account, or for
/// a new Bucket its class's; a class that cannot be read now gives the operator's own.
pub fn budget_key(bucket: &Bucket, ctx: &Context) -> Key {
    let ns = bucket.namespace().unwrap_or_default();
    let recorded = bucket.status.as_ref().and_then(|s| s.account.as_ref());
    if bucket.metadata.deletion_timestamp.is_some() {
        return Key::new(recorded.map(|r| r.name.as_str()), &ns);
    }
    let class = class::in_force(&ctx.classes, bucket).ok();
    let class_account = class.as_ref().and_then(|c| c.as_ref().ok()?.as_ref());
    let class_account = class_account.and_then(|c| c.spec.account.as_deref());
    let begun = crate::reconcile::has_finalizer(bucket);
    let placed = accounts::placement(recorded, begun, class_account, "bucket");
    Key::new(placed.account.as_deref(), &ns)
}

/// Reports that the Bucket's account cannot be used: nothing is written to AWS.
async fn unavailable(
    bucket: &Bucket,
    ctx: &Context,
    why: &accounts::Unavailable,
) -> Result<Requeue, Error> {
    let why = Blocked::new(Reason::AccountUnavailable, why.0.clone());
    let class = bucket.status.as_ref().and_then(|s| s.class_name.clone());
    let at = bucket.status.as_ref().and_then(|s| {
        let (name, region) = (s.bucket_name.clone()?, s.region.clone()?);
        Some(Address { name, region })
    });
    let cx = InAccount::home(ctx);
    apply::blocked(bucket, &cx, class.as_deref(), at.as_ref(), &why).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aws::{Error as AwsError, ErrorKind};

    /// The classes' stores with `classes` (BucketClasses) and namespace "ns" seen.
    fn classes(classes: &[serde_json::Value]) -> crate::reconcile::class::Classes {
        use k8s_openapi::api::core::v1::Namespace;
        use kube::core::{PartialObjectMeta, PartialObjectMetaExt};
        use kube::runtime::{reflector, watcher};
        let (buckets, mut writer) = reflector::store::<crate::api::BucketClass>();
        for c in classes {
            let c = serde_json::from_value(c.clone()).expect("a BucketClass");
            writer.apply_watcher_event(&watcher::Event::Apply(c));
        }
        let (accesses, _) = reflector::store::<crate::api::BucketAccessClass>();
        let (namespaces, mut writer) = reflector::store::<PartialObjectMeta<Namespace>>();
        // Labelled with its name, as the API server labels every namespace.
        let ns = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some("ns".into()),
            labels: Some([("kubernetes.io/metadata.name".into(), "ns".into())].into()),
            ..Default::default()
        };
        writer.apply_watcher_event(&watcher::Event::Apply(ns.into_request_partial()));
        crate::reconcile::class::Classes::new(buckets, accesses, namespaces, Default::default())
    }

    fn a_bucket(class: &str, account: Option<&str>, finalizer: bool, deleting: bool) -> Bucket {
        let mut b: Bucket = serde_json::from_value(serde_json::json!({
            "apiVersion": "s3.operator.dev/v1alpha1", "kind": "Bucket",
            "metadata": {"name": "b", "namespace": "ns"},
            "spec": {"className": class},
            "status": {"account": account.map(|a| serde_json::json!({"name": a, "id": "111111111111"}))},
        }))
        .expect("a Bucket");
        if finalizer {
            b.metadata.finalizers = Some(vec![crate::api::FINALIZER.into()]);
        }
        if deleting {
            b.metadata.deletion_timestamp = Some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now()),
            );
        }
        b
    }

    /// A pass is charged where it acts, learnt from the caches before it takes a slot: the
    /// recorded account, else a new Bucket's class's. A class the namespace may not use (or
    /// that cannot be read) cannot put a tenant's passes on another account's budget.
    #[tokio::test]
    async fn a_pass_spends_the_budget_of_the_account_it_acts_in() {
        let class = |name: &str, ns: &str, account: &str| {
            serde_json::json!({"apiVersion": "s3.operator.dev/v1alpha1", "kind": "BucketClass",
                "metadata": {"name": name},
                "spec": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
                         "account": account}})
        };
        let ctx = Context {
            classes: classes(&[class("pay", "ns", "a"), class("theirs", "other", "c")]),
            ..Context::for_tests()
        };
        let key = |b: Bucket| budget_key(&b, &ctx);
        // New: the class's account.
        assert_eq!(
            key(a_bucket("pay", None, false, false)),
            Key::new(Some("a"), "ns")
        );
        // Recorded: that account, whatever the class says now, its deletion included.
        assert_eq!(
            key(a_bucket("pay", Some("b"), true, false)),
            Key::new(Some("b"), "ns")
        );
        assert_eq!(
            key(a_bucket("pay", Some("b"), true, true)),
            Key::new(Some("b"), "ns")
        );
        // Made before accounts existed: the operator's own.
        assert_eq!(key(a_bucket("pay", None, true, false)), Key::home("ns"));
        // A class whose selector leaves the namespace out, or that does not exist: home.
        assert_eq!(key(a_bucket("theirs", None, false, false)), Key::home("ns"));
        assert_eq!(
            key(a_bucket("missing", None, false, false)),
            Key::home("ns")
        );
        // A namespace the caches have not seen yet (the class cannot be read): home.
        let mut unseen = a_bucket("pay", None, false, false);
        unseen.metadata.namespace = Some("new".into());
        assert_eq!(key(unseen), Key::home("new"));
    }

    #[test]
    fn a_tag_write_refused_under_abac_is_reported_in_its_own_words() {
        let e = AwsError {
            service: "s3",
            operation: "PutBucketTagging",
            code: ABAC_ENABLED.into(),
            message: "S3 bucket b has attribute-based access control (ABAC) enabled".into(),
            kind: ErrorKind::Invalid,
        };
        let why = refusal(&e).expect("a refusal, not a retry");
        assert_eq!(why.reason, Reason::InvalidSpec);
        assert_eq!(why.message, e.message);
        let other = AwsError {
            code: "InvalidRequest".into(),
            ..e
        };
        let why = refusal(&other).expect("a refusal");
        assert!(why.message.starts_with("AWS rejected PutBucketTagging"));
    }
}
