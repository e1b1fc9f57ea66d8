//! The `reconcile-requested-at` annotation: each new value runs a full pass of its object at
//! once (drift corrected far inside the resync period, with AWS read afresh), and a requested
//! pass that finds nothing drifted writes nothing but the one event that says it was served.

use std::fmt::Debug;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};
use s3_operator::api::{Bucket, BucketAccess, RECONCILE_REQUESTED_AT};
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::access::access;
use crate::support::*;

const T: Duration = Duration::from_secs(60);
/// How soon a requested pass must have corrected the drift: far below the resync period.
const AT_ONCE: Duration = Duration::from_secs(10);

/// An operator whose periodic resync (an hour) never comes within a test: only the annotation
/// can explain a pass that reads AWS.
async fn operator(tag: &str) -> (Operator, String) {
    let ns = namespace(&admin().await, tag).await;
    let op = Operator::start(OperatorOpts {
        namespaces: vec![ns.clone()],
        resync: "1h",
        ..Default::default()
    })
    .await;
    (op, ns)
}

async fn request<K>(api: &Api<K>, name: &str, value: &str)
where
    K: kube::Resource + Clone + DeserializeOwned + Debug,
{
    let patch = json!({"metadata": {"annotations": {RECONCILE_REQUESTED_AT: value}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// Asks for a pass of `name` with the value `then` (nothing has drifted): it is served (its
/// event), it reads AWS (`read` calls), and it writes nothing else: no AWS write in the
/// emulator's request log, no status or other Kubernetes write in the audit log.
async fn requested_pass_without_drift_writes_only_its_event<K>(
    op: &Operator,
    api: &Api<K>,
    ns: &str,
    (name, then): (&str, &str),
    read: &str,
) where
    K: kube::Resource + Clone + DeserializeOwned + Debug,
{
    op.wait_settled(Duration::from_secs(2)).await;
    let (sent, reads) = (op.sent().await, op.aws_calls(read).await);
    request(api, name, then).await;
    wait_event(ns, "ReconcileRequested", &[then]).await;
    op.wait_settled(Duration::from_secs(2)).await;
    assert!(
        op.aws_calls(read).await > reads,
        "the requested pass read {read} afresh"
    );
    let writes = sent.writes().await;
    let (events, others): (Vec<_>, Vec<_>) = writes.iter().partition(|w| w.contains(" events/"));
    assert_eq!(others, Vec::<&String>::new(), "a pass with no drift wrote");
    assert_eq!(events.len(), 1, "one event for the request: {events:?}");
}

/// Drift the operator is not told of stays until the request (the resync is an hour away).
async fn still_drifted<F, Fut>(what: &str, drifted: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = bool>,
{
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(drifted().await, "{what} was corrected before any request");
}

#[tokio::test]
async fn a_requested_bucket_pass_corrects_drift_at_once_and_otherwise_writes_nothing() {
    let (op, ns) = operator("now").await;
    let api = Api::<Bucket>::namespaced(admin().await, &ns);
    let spec = json!({"deletionPolicy": "Delete"});
    api.create(&PostParams::default(), &bucket("b", spec))
        .await
        .unwrap();
    let name = wait_ready(&api, "b").await;
    op.wait_settled(Duration::from_secs(2)).await;

    let s3 = admin_s3();
    let blocked = || async {
        let got = s3.get_public_access_block().bucket(&name).send().await;
        got.ok()
            .and_then(|o| o.public_access_block_configuration)
            .is_some_and(|c| c.block_public_policy == Some(true))
    };
    s3.delete_public_access_block()
        .bucket(&name)
        .send()
        .await
        .unwrap();
    still_drifted("the public access block", || async { !blocked().await }).await;
    let asked = Instant::now();
    request(&api, "b", "2026-11-26T09:00:00Z").await;
    wait_for("public access block restored", AT_ONCE, || async {
        blocked().await.then_some(())
    })
    .await;
    let took = asked.elapsed();
    wait_event(&ns, "DriftCorrected", &["publicAccessBlock"]).await;
    wait_event(&ns, "ReconcileRequested", &["2026-11-26T09:00:00Z"]).await;
    eprintln!("drift corrected {took:?} after the request");

    // (Its ownership tags may come from a read of the last few seconds, as on every pass.)
    let then = ("b", "2026-11-26T09:05:00Z");
    let read = "GetPublicAccessBlock";
    requested_pass_without_drift_writes_only_its_event(&op, &api, &ns, then, read).await;
}

#[tokio::test]
async fn a_requested_access_pass_restores_its_policy_at_once_and_otherwise_writes_nothing() {
    let (op, ns) = operator("nowa").await;
    let client = admin().await;
    let (buckets, accesses) = (
        Api::<Bucket>::namespaced(client.clone(), &ns),
        Api::<BucketAccess>::namespaced(client.clone(), &ns),
    );
    let spec = json!({"deletionPolicy": "Delete", "forceDelete": true});
    buckets
        .create(&PostParams::default(), &bucket("b", spec))
        .await
        .unwrap();
    wait_ready(&buckets, "b").await;
    let spec = json!({"bucketRef": {"name": "b"}, "permission": "ReadWrite"});
    accesses
        .create(&PostParams::default(), &access("app", spec))
        .await
        .unwrap();
    wait_reason(&accesses, "app", "Available", T).await;
    assert!(
        Api::<Secret>::namespaced(client, &ns)
            .get("app")
            .await
            .is_ok()
    );
    op.wait_settled(Duration::from_secs(2)).await;

    let user = iam_user_of(&accesses.get("app").await.unwrap());
    let iam = admin_iam();
    let granted = || async {
        let got = iam.get_user_policy().user_name(&user);
        got.policy_name("s3-operator-access").send().await.is_ok()
    };
    let del = iam.delete_user_policy().user_name(&user);
    del.policy_name("s3-operator-access").send().await.unwrap();
    still_drifted("the user policy", || async { !granted().await }).await;
    request(&accesses, "app", "first").await;
    wait_for("user policy restored", AT_ONCE, || async {
        granted().await.then_some(())
    })
    .await;
    wait_event(&ns, "ReconcileRequested", &["first"]).await;

    // The bucket's ownership is read afresh too, not taken from the Bucket's last read.
    let then = ("app", "second");
    requested_pass_without_drift_writes_only_its_event(
        &op,
        &accesses,
        &ns,
        then,
        "GetBucketTagging",
    )
    .await;
}
