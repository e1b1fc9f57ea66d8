//! The `s3.operator.dev/paused` annotation: a paused object gets no pass (no AWS call, no write
//! but its `Paused` condition), an out-of-band change stays, a spec edit and a deletion wait;
//! unpausing applies what waited. A pause never keeps a grant alive past its Bucket.

use std::time::Duration;

use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use s3_operator::api::{Bucket, PAUSED, RECONCILE_REQUESTED_AT};
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::access::access;
use crate::support::*;

const T: Duration = Duration::from_secs(60);

async fn annotate<K>(api: &Api<K>, name: &str, key: &str, value: Option<&str>)
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let patch = json!({"metadata": {"annotations": {key: value}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// The object's condition `type_` as (status, reason, message), if it has one.
async fn condition(api: &Api<Bucket>, name: &str, type_: &str) -> Option<(String, String, String)> {
    let b = api.get(name).await.ok()?;
    let c = b
        .status?
        .conditions
        .into_iter()
        .find(|c| c.type_ == type_)?;
    Some((c.status, c.reason, c.message))
}

async fn wait_paused(api: &Api<Bucket>, name: &str, says: &str) {
    wait_for(&format!("{name} Paused ({says})"), T, || async {
        let (status, _, message) = condition(api, name, "Paused").await?;
        (status == "True" && message.contains(says)).then_some(())
    })
    .await;
}

async fn pab_blocks(name: &str) -> bool {
    let got = admin_s3()
        .get_public_access_block()
        .bucket(name)
        .send()
        .await;
    got.ok()
        .and_then(|o| o.public_access_block_configuration)
        .is_some_and(|c| c.block_public_policy == Some(true))
}

async fn versioning(name: &str) -> Option<String> {
    let got = admin_s3().get_bucket_versioning().bucket(name).send().await;
    got.unwrap().status.map(|s| s.as_str().to_string())
}

/// A paused Bucket: out-of-band drift stays and a spec edit waits even through a requested
/// pass, with no AWS call at all; unpausing corrects the drift and applies the edit; paused
/// again, its deletion waits with the bucket kept; unpaused, it is deleted.
#[tokio::test]
async fn a_paused_bucket_gets_no_pass_until_unpaused() {
    let client = admin().await;
    let ns = namespace(&client, "pause").await;
    let op = Operator::start(OperatorOpts {
        namespaces: vec![ns.clone()],
        resync: "1h",
        ..Default::default()
    })
    .await;
    // A Bucket alone: no access's passes (which read AWS when their Bucket changes) to count.
    let api = Api::<Bucket>::namespaced(client.clone(), &ns);
    let spec = json!({"deletionPolicy": "Delete", "forceDelete": true});
    api.create(&PostParams::default(), &bucket("b", spec))
        .await
        .unwrap();
    let name = wait_ready(&api, "b").await;
    op.wait_settled(Duration::from_secs(2)).await;

    annotate(&api, "b", PAUSED, Some("true")).await;
    wait_paused(&api, "b", "spec changes wait").await;
    let ready = condition(&api, "b", "Ready").await.expect("Ready kept");
    assert_eq!((ready.0.as_str(), ready.1.as_str()), ("True", "Available"));
    wait_event(&ns, "Paused", &["paused by the s3.operator.dev/paused"]).await;
    op.wait_settled(Duration::from_secs(2)).await;

    // Drift, a spec edit and a requested pass: none reaches AWS.
    let calls = op.metric("s3_operator_aws_requests_total", &[]).await;
    admin_s3()
        .delete_public_access_block()
        .bucket(&name)
        .send()
        .await
        .unwrap();
    let edit = json!({"spec": {"versioning": "Enabled"}});
    api.patch("b", &PatchParams::default(), &Patch::Merge(&edit))
        .await
        .unwrap();
    annotate(&api, "b", RECONCILE_REQUESTED_AT, Some("during-pause")).await;
    op.wait_settled(Duration::from_secs(3)).await;
    assert!(
        !pab_blocks(&name).await,
        "the drift was corrected while paused"
    );
    assert_eq!(
        versioning(&name).await,
        None,
        "the edit was applied while paused"
    );
    assert_eq!(
        op.metric("s3_operator_aws_requests_total", &[]).await,
        calls,
        "a paused Bucket's passes called AWS"
    );

    // Unpaused: the drift is put back and the edit applied; the Paused condition goes.
    annotate(&api, "b", PAUSED, None).await;
    wait_for("drift corrected and edit applied", T, || async {
        (pab_blocks(&name).await && versioning(&name).await.as_deref() == Some("Enabled"))
            .then_some(())
    })
    .await;
    wait_for("Paused condition gone", T, || async {
        condition(&api, "b", "Paused").await.is_none().then_some(())
    })
    .await;

    // A paused deletion waits, bucket kept; unpaused, it goes.
    annotate(&api, "b", PAUSED, Some("true")).await;
    wait_paused(&api, "b", "spec changes wait").await;
    api.delete("b", &DeleteParams::default()).await.unwrap();
    wait_paused(&api, "b", "the deletion waits").await;
    op.wait_settled(Duration::from_secs(2)).await;
    assert!(
        api.get_opt("b").await.unwrap().is_some(),
        "deleted while paused"
    );
    assert!(
        admin_s3().head_bucket().bucket(&name).send().await.is_ok(),
        "the bucket was deleted while paused"
    );
    annotate(&api, "b", PAUSED, None).await;
    wait_for("Bucket gone once unpaused", T, || async {
        api.get_opt("b").await.unwrap().is_none().then_some(())
    })
    .await;
    assert!(admin_s3().head_bucket().bucket(&name).send().await.is_err());
}

/// A paused BucketAccess keeps its grant only while its Bucket stands: its Bucket deleted, the
/// access's pass runs anyway and its keys stop working, as for any access whose Bucket is gone.
#[tokio::test]
async fn a_pause_never_keeps_a_grant_alive_past_its_bucket() {
    let client = admin().await;
    let ns = namespace(&client, "pausea").await;
    let _op = Operator::start(OperatorOpts {
        namespaces: vec![ns.clone()],
        resync: "1h",
        ..Default::default()
    })
    .await;
    let spec = json!({"deletionPolicy": "Delete", "forceDelete": true});
    let b = bucket("b", spec);
    let a = access(
        "a",
        json!({"bucketRef": {"name": "b"}, "permission": "ReadWrite"}),
    );
    let pair = AccessPair::create(&client, &ns, b, a).await;
    let data = pair.secret_data().await;
    let app = s3_with(&data["AWS_ACCESS_KEY_ID"], &data["AWS_SECRET_ACCESS_KEY"]);
    annotate(&pair.accesses, "a", PAUSED, Some("true")).await;
    wait_for("access Paused", T, || async {
        let a = pair.accesses.get("a").await.ok()?;
        let paused = a.status?.conditions.iter().any(|c| c.type_ == "Paused");
        paused.then_some(())
    })
    .await;
    let listed = app.list_objects_v2().bucket(&pair.s3_name).send().await;
    listed.expect("the paused access's keys still work on its standing Bucket");

    pair.buckets
        .delete("b", &DeleteParams::default())
        .await
        .unwrap();
    let reason = wait_for("access no longer Paused", T, || async {
        let a = pair.accesses.get("a").await.ok()?;
        let conditions = a.status?.conditions;
        let paused = conditions.iter().any(|c| c.type_ == "Paused");
        let ready = conditions.iter().find(|c| c.type_ == "Ready")?;
        (!paused && ready.status == "False").then(|| ready.reason.clone())
    })
    .await;
    assert!(
        ["BucketNotFound", "BucketNotReady", "BucketNotOwned"].contains(&reason.as_str()),
        "{reason}"
    );
    // Its user's grant is withdrawn: the keys reach nothing, whatever bucket takes the name.
    let iam = admin_iam();
    let user = pair.user();
    wait_for("grant withdrawn", T, || async {
        let got = iam.get_user_policy().user_name(&user);
        got.policy_name("s3-operator-access")
            .send()
            .await
            .is_err()
            .then_some(())
    })
    .await;
}
