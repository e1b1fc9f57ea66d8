//! `spec.management: Observe`: the operator reads the bucket, reports what differs from the spec
//! (`InSync`, `status.plan`) and writes nothing to AWS; switching to Manage applies exactly the
//! plan; deleting an observed Bucket releases its bucket. Writes are counted at the emulator's
//! request log, where the operator cannot leave one out.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use s3_operator::api::condition::IN_SYNC;
use s3_operator::api::{Bucket, BucketAccess, RECONCILE_REQUESTED_AT};
use serde_json::json;

use crate::bucket::gone;
use crate::support::*;

const T: Duration = Duration::from_secs(60);

/// The InSync condition's (status, reason) and `status.plan` as (field, from, to).
type InSync = (String, String, Vec<(String, String, String)>);

/// A kind the tests read and patch as JSON: Bucket and BucketAccess.
trait Object:
    kube::Resource<DynamicType = ()>
    + Clone
    + serde::de::DeserializeOwned
    + serde::Serialize
    + std::fmt::Debug
{
}
impl Object for Bucket {}
impl Object for BucketAccess {}

async fn in_sync<K: Object>(api: &Api<K>, name: &str) -> Option<InSync> {
    let b = serde_json::to_value(api.get(name).await.ok()?).ok()?;
    let status = b.get("status")?;
    let c = (status["conditions"].as_array()?.iter()).find(|c| c["type"] == IN_SYNC)?;
    let plan = (status["plan"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter())
    .map(|p| {
        let s = |k: &str| p[k].as_str().unwrap_or_default().to_string();
        (s("field"), s("from"), s("to"))
    })
    .collect();
    Some((
        c["status"].as_str()?.into(),
        c["reason"].as_str()?.into(),
        plan,
    ))
}

/// Waits until InSync has `status`; returns its plan.
async fn wait_in_sync<K: Object>(
    api: &Api<K>,
    name: &str,
    status: &str,
) -> Vec<(String, String, String)> {
    let what = format!("{name} to report InSync={status}");
    wait_for(&what, T, || async {
        let (s, _, plan) = in_sync(api, name).await?;
        (s == status).then_some(plan)
    })
    .await
}

async fn set_management<K: Object>(api: &Api<K>, name: &str, mode: &str) {
    let patch = json!({"spec": {"management": mode}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// An operator without a resync inside the test (so it can settle), the Bucket API and the
/// namespace it watches: a pass is asked for with `reconcile_now`.
async fn quiet_operator(tag: &str) -> (Operator, Api<Bucket>, String) {
    let client = admin().await;
    let ns = namespace(&client, tag).await;
    let op = Operator::start(OperatorOpts {
        namespaces: vec![ns.clone()],
        resync: "1h",
        ..Default::default()
    })
    .await;
    (op, Api::namespaced(client, &ns), ns)
}

async fn reconcile_now<K: Object>(api: &Api<K>, name: &str) {
    let patch = json!({"metadata": {"annotations": {RECONCILE_REQUESTED_AT: random(8)}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// A bucket the operator made, switched to Observe: in sync, then changed out of band (the
/// plan names exactly those fields, nothing is written), then switched to Manage (exactly
/// those are written), then deleted while observed (the bucket and its data stay).
#[tokio::test]
async fn an_observed_bucket_reports_its_plan_and_manage_applies_exactly_it() {
    let (op, api, ns) = quiet_operator("observe").await;
    let spec = json!({"versioning": "Enabled", "deletionPolicy": "Delete", "forceDelete": true,
        "tags": {"team": "a"}});
    api.create(&PostParams::default(), &bucket("m", spec))
        .await
        .unwrap();
    let name = wait_ready(&api, "m").await;
    let s3 = admin_s3();
    s3.put_object()
        .bucket(&name)
        .key("data")
        .body(b"kept".to_vec().into())
        .send()
        .await
        .unwrap();
    assert!(wait_in_sync(&api, "m", "True").await.is_empty());

    set_management(&api, "m", "Observe").await;
    wait_reason(&api, "m", "Observed", T).await;
    op.wait_settled(Duration::from_secs(2)).await;
    let sent = op.sent().await;

    // Out of band: versioning suspended, one public access flag off.
    s3.put_bucket_versioning()
        .bucket(&name)
        .versioning_configuration(
            aws_sdk_s3::types::VersioningConfiguration::builder()
                .status(aws_sdk_s3::types::BucketVersioningStatus::Suspended)
                .build(),
        )
        .send()
        .await
        .unwrap();
    let pab = aws_sdk_s3::types::PublicAccessBlockConfiguration::builder()
        .block_public_acls(true)
        .ignore_public_acls(true)
        .block_public_policy(false)
        .restrict_public_buckets(true)
        .build();
    s3.put_public_access_block()
        .bucket(&name)
        .public_access_block_configuration(pab)
        .send()
        .await
        .unwrap();
    // The next pass (the resync, a drift event, or asked for here) reads it again.
    reconcile_now(&api, "m").await;
    let mut plan = wait_in_sync(&api, "m", "False").await;
    plan.sort();
    let want = |f: &str, from: &str, to: &str| (f.to_string(), from.to_string(), to.to_string());
    assert_eq!(
        plan,
        vec![
            want("publicAccessBlock.blockPublicPolicy", "false", "true"),
            want("versioning", "Suspended", "Enabled"),
        ],
        "exactly the fields changed out of band"
    );
    let (_, reason, _) = in_sync(&api, "m").await.unwrap();
    assert_eq!(reason, "Differs");
    wait_event(&ns, "OutOfSync", &["versioning"]).await;
    op.wait_settled(Duration::from_secs(3)).await;
    assert_eq!(
        sent.aws_writes().await,
        Vec::<String>::new(),
        "Observe wrote to AWS"
    );
    let pab_now = s3.get_public_access_block().bucket(&name).send().await;
    let flag = pab_now.unwrap().public_access_block_configuration.unwrap();
    assert_eq!(flag.block_public_policy, Some(false), "left as found");
    counted_out_of_sync(&op, "Bucket").await;

    // Manage applies exactly the plan.
    let sent = op.sent().await;
    set_management(&api, "m", "Manage").await;
    assert!(
        wait_in_sync(&api, "m", "True").await.is_empty(),
        "plan cleared"
    );
    wait_reason(&api, "m", "Available", T).await;
    op.wait_settled(Duration::from_secs(2)).await;
    let writes = sent.aws_writes().await;
    assert_eq!(
        writes,
        vec![
            "AWS PUT bucket?publicAccessBlock x1".to_string(),
            "AWS PUT bucket?versioning x1".to_string(),
        ],
        "Manage wrote more than the plan"
    );

    // Deleting an observed Bucket releases the bucket, whatever its deletionPolicy says.
    set_management(&api, "m", "Observe").await;
    wait_reason(&api, "m", "Observed", T).await;
    api.delete("m", &DeleteParams::default()).await.unwrap();
    gone(&api, "m").await;
    assert!(bucket_exists(&name).await, "an observed bucket was deleted");
    let kept = s3.get_object().bucket(&name).key("data").send().await;
    assert!(kept.is_ok(), "its data was deleted");
}

/// Waits for `s3_operator_out_of_sync_objects` to count an object of `kind`: the gauge is
/// counted from the caches every 5 s, not at the status write that reports the plan.
async fn counted_out_of_sync(op: &Operator, kind: &str) {
    let what = format!("an out-of-sync {kind} counted");
    wait_for(&what, Duration::from_secs(12), || async {
        let n = op
            .metric("s3_operator_out_of_sync_objects", &[("kind", kind)])
            .await;
        (n >= 1.0).then_some(())
    })
    .await;
}

/// A bucket made by hand: Observe without adoptExisting is NameConflict as before; with it the
/// bucket is read and listed, nothing written (not even the ownership tags); another Bucket
/// naming a bucket already held is NameConflict and learns nothing of its settings.
#[tokio::test]
async fn a_hand_made_bucket_is_observed_without_a_write() {
    let (op, api, _ns) = quiet_operator("observeh").await;
    let s3 = admin_s3();
    let name = format!("{}hand-{}", prefix(&op.cluster), random(6));
    s3.create_bucket().bucket(&name).send().await.unwrap();
    op.wait_settled(Duration::from_secs(2)).await;
    let sent = op.sent().await;
    let spec = json!({"bucketName": name, "management": "Observe"});
    api.create(&PostParams::default(), &bucket("h", spec.clone()))
        .await
        .unwrap();
    let msg = wait_reason(&api, "h", "NameConflict", T).await;
    assert!(msg.contains("adoptExisting"), "{msg}");
    let patch = json!({"spec": {"adoptExisting": true}});
    api.patch("h", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    wait_reason(&api, "h", "Observed", T).await;
    let plan = wait_in_sync(&api, "h", "False").await;
    let fields: Vec<&str> = plan.iter().map(|(f, _, _)| f.as_str()).collect();
    // What the spec's defaults ask that a bare bucket lacks.
    for f in [
        "publicAccessBlock.blockPublicAcls",
        "policy.statement[DenyInsecureTransport]",
    ] {
        assert!(fields.contains(&f), "{f} not in {fields:?}");
    }
    assert!(
        !fields.iter().any(|f| f.contains("s3.operator.dev")),
        "ownership tags are not a difference: {fields:?}"
    );
    let b = api.get("h").await.unwrap();
    assert!(
        b.metadata.finalizers.unwrap_or_default().is_empty(),
        "an observed Bucket needs no finalizer"
    );
    op.wait_settled(Duration::from_secs(3)).await;
    assert_eq!(
        sent.aws_writes().await,
        Vec::<String>::new(),
        "Observe wrote to AWS"
    );
    assert!(
        bucket_tags(&name).await.is_empty(),
        "not even ownership tags"
    );

    // Switched to Manage, the same Bucket adopts it; a second Bucket observing the same name
    // is NameConflict and its status holds none of the bucket's settings.
    set_management(&api, "h", "Manage").await;
    wait_reason(&api, "h", "Available", T).await;
    let spec = json!({"bucketName": name, "management": "Observe", "adoptExisting": true});
    api.create(&PostParams::default(), &bucket("other", spec))
        .await
        .unwrap();
    wait_reason(&api, "other", "NameConflict", T).await;
    let other = serde_json::to_value(api.get("other").await.unwrap()).unwrap();
    let plan = &other["status"]["plan"];
    assert!(
        plan.is_null() || plan.as_array().is_some_and(Vec::is_empty),
        "{plan}"
    );
    assert!(
        !(other["status"].to_string()).contains("DenyInsecureTransport"),
        "{}",
        other["status"]
    );
    for n in ["other", "h"] {
        api.delete(n, &DeleteParams::default()).await.unwrap();
        gone(&api, n).await;
    }
    // h's deletion policy is the default, Retain.
    assert!(bucket_exists(&name).await);
}

/// A BucketAccess in Observe: a new one makes nothing (Ready=False `Observed`, no finalizer, no
/// Secret) and its plan lists the identity, its grant, its key and its Secret; made under
/// Manage and observed again, a grant widened out of band is listed and left as it is; Manage
/// puts back exactly that; deleting the observed access still deletes the identity it made.
#[tokio::test]
async fn an_observed_access_reports_its_plan_and_manage_applies_exactly_it() {
    let (op, buckets, ns) = quiet_operator("observea").await;
    let client = admin().await;
    let api = Api::<BucketAccess>::namespaced(client.clone(), &ns);
    let secrets = Api::<Secret>::namespaced(client, &ns);
    let bucket_spec = json!({"deletionPolicy": "Delete", "forceDelete": true});
    (buckets.create(&PostParams::default(), &bucket("b", bucket_spec)))
        .await
        .unwrap();
    let bucket_name = wait_ready(&buckets, "b").await;
    op.wait_settled(Duration::from_secs(2)).await;
    let sent = op.sent().await;

    let spec =
        json!({"bucketRef": {"name": "b"}, "permission": "ReadOnly", "management": "Observe"});
    (api.create(&PostParams::default(), &crate::access::access("a", spec)))
        .await
        .unwrap();
    let msg = wait_reason(&api, "a", "Observed", T).await;
    assert!(msg.contains("does not exist"), "{msg}");
    let plan = wait_in_sync(&api, "a", "False").await;
    let fields: Vec<&str> = plan.iter().map(|(f, _, _)| f.as_str()).collect();
    assert_eq!(
        fields,
        [
            "identity",
            "policy.statement[Bucket]",
            "policy.statement[Objects]",
            "accessKeys[new]",
            "secret[a]"
        ]
    );
    assert!(plan[1].2.contains(&bucket_name), "{plan:?}");
    let a = api.get("a").await.unwrap();
    assert!(
        a.metadata.finalizers.unwrap_or_default().is_empty(),
        "an access that made nothing needs no finalizer"
    );
    assert!(secrets.get_opt("a").await.unwrap().is_none(), "no Secret");
    op.wait_settled(Duration::from_secs(3)).await;
    assert_eq!(
        sent.aws_writes().await,
        Vec::<String>::new(),
        "Observe wrote to AWS"
    );

    // Managed: made, in sync; then observed again.
    set_management(&api, "a", "Manage").await;
    wait_reason(&api, "a", "Available", T).await;
    assert!(
        wait_in_sync(&api, "a", "True").await.is_empty(),
        "plan cleared"
    );
    let a = api.get("a").await.unwrap();
    let user = (a.status.as_ref().and_then(|s| s.user_arn.clone()))
        .and_then(|arn| arn.rsplit('/').next().map(String::from))
        .expect("the user's ARN in status");
    set_management(&api, "a", "Observe").await;
    let msg = wait_reason(&api, "a", "Observed", T).await;
    assert!(msg.contains("is observed"), "{msg}");
    op.wait_settled(Duration::from_secs(2)).await;
    let sent = op.sent().await;

    // Out of band: the grant widened to every bucket's objects.
    let iam = admin_iam();
    let policy = iam
        .get_user_policy()
        .user_name(&user)
        .policy_name("s3-operator-access")
        .send()
        .await
        .unwrap();
    // IAM returns the document URL-encoded.
    let text = percent_encoding::percent_decode_str(policy.policy_document()).decode_utf8_lossy();
    let mut doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    for st in doc["Statement"].as_array_mut().unwrap() {
        if st["Sid"] == "Objects" {
            st["Resource"] = json!("arn:aws:s3:::*/*");
        }
    }
    iam.put_user_policy()
        .user_name(&user)
        .policy_name("s3-operator-access")
        .policy_document(doc.to_string())
        .send()
        .await
        .unwrap();
    reconcile_now(&api, "a").await;
    let plan = wait_in_sync(&api, "a", "False").await;
    assert_eq!(plan.len(), 1, "exactly the statement changed: {plan:?}");
    assert_eq!(plan[0].0, "policy.statement[Objects]");
    assert!(plan[0].1.contains("arn:aws:s3:::*/*"), "{plan:?}");
    assert!(plan[0].2.contains(&bucket_name), "{plan:?}");
    wait_event(&ns, "OutOfSync", &["policy.statement[Objects]"]).await;
    op.wait_settled(Duration::from_secs(3)).await;
    assert_eq!(
        sent.aws_writes().await,
        Vec::<String>::new(),
        "Observe wrote to AWS"
    );
    counted_out_of_sync(&op, "BucketAccess").await;

    // Manage puts back exactly that.
    let sent = op.sent().await;
    set_management(&api, "a", "Manage").await;
    assert!(wait_in_sync(&api, "a", "True").await.is_empty());
    wait_reason(&api, "a", "Available", T).await;
    op.wait_settled(Duration::from_secs(2)).await;
    assert_eq!(
        sent.aws_writes().await,
        vec!["AWS PutUserPolicy x1".to_string()],
        "Manage wrote more than the plan"
    );

    // Deleting the observed access deletes the user it made: no credential outlives its object.
    set_management(&api, "a", "Observe").await;
    wait_reason(&api, "a", "Observed", T).await;
    api.delete("a", &DeleteParams::default()).await.unwrap();
    wait_for("the access to go", T, || async {
        api.get_opt("a").await.unwrap().is_none().then_some(())
    })
    .await;
    let left = iam.get_user().user_name(&user).send().await;
    assert!(left.is_err(), "the observed access's user was left behind");
    assert!(
        bucket_exists(&bucket_name).await,
        "the bucket is not the access's to delete"
    );
}
