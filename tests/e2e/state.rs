//! The operator's state is not in tenant hands (issue 34, item 2): rotation is decided from
//! what IAM holds (each key's CreateDate) and from status, never from the Secret's annotations,
//! which are outputs a tenant's edit of is written back.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use s3_operator::api::{Bucket, BucketAccess};
use serde_json::json;

use crate::access::access;
use crate::support::*;

const T: Duration = Duration::from_secs(60);
const ROTATED_AT: &str = "s3.operator.dev/rotated-at";
const PREVIOUS: &str = "s3.operator.dev/previous-access-key-id";
const INTERVAL: Duration = Duration::from_secs(20);
const GRACE: Duration = Duration::from_secs(8);
/// How late a deadline may be met: the pass, its IAM calls and our polling.
const SLACK: Duration = Duration::from_secs(8);

/// The user's access keys: (id, CreateDate).
async fn keys(user: &str) -> Vec<(String, jiff::Timestamp)> {
    let out = admin_iam().list_access_keys().user_name(user).send().await;
    out.map(|o| o.access_key_metadata)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|k| {
            let created = jiff::Timestamp::from_second(k.create_date?.secs()).ok()?;
            Some((k.access_key_id?, created))
        })
        .collect()
}

fn annotation(s: &Secret, key: &str) -> String {
    s.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .cloned()
        .unwrap_or_default()
}

/// During the grace period after a rotation, the tenant moves the Secret's rotated-at an hour
/// ahead (with the previous key named): the operator used to read that back, keeping the
/// previous key, holding the next rotation past its interval and re-reading IAM twice a second
/// once it was due. Now the annotation is written back within seconds, the previous key goes
/// when the current one is `grace` old by IAM's CreateDate, the next rotation comes on time,
/// and IAM is read only by the passes those deadlines need.
#[tokio::test]
async fn a_tenant_moving_the_rotation_annotations_steers_nothing() {
    let client = admin().await;
    let ns = namespace(&client, "state").await;
    let op = Operator::start(OperatorOpts {
        namespaces: vec![ns.clone()],
        resync: "10m",
        ..Default::default()
    })
    .await;
    let buckets = Api::<Bucket>::namespaced(client.clone(), &ns);
    let accesses = Api::<BucketAccess>::namespaced(client.clone(), &ns);
    let secrets = Api::<Secret>::namespaced(client.clone(), &ns);
    let spec = json!({"deletionPolicy": "Delete", "forceDelete": true});
    buckets
        .create(&PostParams::default(), &bucket("b", spec))
        .await
        .unwrap();
    wait_ready(&buckets, "b").await;
    let rotation = json!({"interval": format!("{}s", INTERVAL.as_secs()),
        "gracePeriod": format!("{}s", GRACE.as_secs())});
    let spec = json!({"bucketRef": {"name": "b"}, "permission": "ReadWrite",
        "credentials": {"rotation": rotation}});
    accesses
        .create(&PostParams::default(), &access("app", spec))
        .await
        .unwrap();
    wait_reason(&accesses, "app", "Available", T).await;
    let app_access = accesses.get("app").await.unwrap();
    let user = iam_user_of(&app_access);
    let status = app_access.status.unwrap();
    let first = status.access_key_id.unwrap();

    // The first rotation: B in the Secret, A kept through its grace period.
    let second = wait_for("the first rotation", INTERVAL + T, || async {
        let s = secrets.get("app").await.ok()?;
        let id = secret_data(&s).remove("AWS_ACCESS_KEY_ID")?;
        (id != first && annotation(&s, PREVIOUS) == first).then_some(id)
    })
    .await;
    let created = |id: &str, keys: &[(String, jiff::Timestamp)]| {
        keys.iter().find(|(k, _)| k == id).map(|(_, c)| *c)
    };
    let b_created = created(&second, &keys(&user).await).expect("B in IAM");
    let honest = b_created.to_string();

    // The tenant moves rotated-at an hour ahead, still naming A.
    let calls_before = op.aws_calls("ListAccessKeys").await;
    let ahead = (jiff::Timestamp::now() + jiff::SignedDuration::from_hours(1)).to_string();
    let tamper = json!({"metadata": {"annotations": {ROTATED_AT: ahead, PREVIOUS: first}}});
    secrets
        .patch("app", &PatchParams::default(), &Patch::Merge(&tamper))
        .await
        .unwrap();
    let tampered_at = Instant::now();
    // Written back, like an edited key.
    wait_for("rotated-at written back", SLACK, || async {
        let s = secrets.get("app").await.ok()?;
        (annotation(&s, ROTATED_AT) == honest).then_some(())
    })
    .await;
    eprintln!("written back {:?} after the edit", tampered_at.elapsed());

    // A goes when B is `grace` old, by IAM's clock.
    let grace_ends = b_created + jiff::SignedDuration::try_from(GRACE).unwrap();
    wait_for("the previous key deleted", GRACE + SLACK, || async {
        let ks = keys(&user).await;
        (!ks.iter().any(|(k, _)| *k == first)).then_some(())
    })
    .await;
    let late = jiff::Timestamp::now().duration_since(grace_ends);
    eprintln!("previous key deleted {late:?} after its grace period ended");
    assert!(
        late < jiff::SignedDuration::try_from(SLACK).unwrap(),
        "kept {late:?} past its grace period"
    );

    // The next rotation is not held: C replaces B once B is `interval` old.
    let due = b_created + jiff::SignedDuration::try_from(INTERVAL).unwrap();
    wait_for("the second rotation", INTERVAL + SLACK, || async {
        let s = secrets.get("app").await.ok()?;
        let id = secret_data(&s).remove("AWS_ACCESS_KEY_ID")?;
        (id != second).then_some(())
    })
    .await;
    let late = jiff::Timestamp::now().duration_since(due);
    eprintln!("second rotation {late:?} after it was due");
    assert!(
        late < jiff::SignedDuration::try_from(SLACK).unwrap(),
        "held {late:?}"
    );

    // IAM was read by the passes those deadlines need (the edit's, the grace period's end, the
    // rotation and the new key's first pass), not twice a second.
    let calls = op.aws_calls("ListAccessKeys").await - calls_before;
    eprintln!(
        "ListAccessKeys: {calls} calls in {:?} after the edit",
        tampered_at.elapsed()
    );
    assert!(calls <= 8.0, "{calls} ListAccessKeys calls");

    accesses
        .delete("app", &DeleteParams::default())
        .await
        .unwrap();
    buckets.delete("b", &DeleteParams::default()).await.unwrap();
}
