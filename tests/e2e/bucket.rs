//! Bucket end to end: create, update, drift, quiet steady state, deletion policies, conflicts.

use std::time::Duration;

use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_sdk_s3::types::{
    ObjectCannedAcl, ObjectOwnership, OwnershipControls, OwnershipControlsRule,
};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use s3_operator::api::Bucket;
use serde_json::json;

use crate::support::*;

const T: Duration = Duration::from_secs(60);

pub(crate) async fn gone(api: &Api<Bucket>, name: &str) {
    wait_for(&format!("{name} to be deleted"), T, || async {
        api.get_opt(name).await.unwrap().is_none().then_some(())
    })
    .await;
}

#[tokio::test]
async fn bucket_is_created_updated_kept_in_shape_and_deleted() {
    let (op, api, ns) = Operator::in_new_namespace("bkt").await;
    let (name, uid) = created_bucket_reports_its_name_arn_and_region(&api, &ns, &op).await;
    s3_holds_the_tags_public_access_block_and_encryption(&op, &ns, &name, uid.as_ref()).await;
    s3_holds_the_versioning_lifecycle_and_cors(&ns, &name).await;
    steady_state_writes_nothing_and_rereads_aws(&op).await;
    drift_is_put_back(&op, &ns, &name).await;
    spec_update_is_applied(&api, &name).await;
    delete_policy_removes_the_empty_bucket(&api, &op, &name).await;
}

/// `photos` becomes Ready under the operator's prefix, with its ARN, region and generation in
/// status. Returns the S3 name and the object's uid.
async fn created_bucket_reports_its_name_arn_and_region(
    api: &Api<Bucket>,
    ns: &str,
    op: &Operator,
) -> (String, Option<String>) {
    let spec = json!({
        "versioning": "Enabled",
        "deletionPolicy": "Delete",
        "tags": {"team": "media"},
        "lifecycleRules": [{"id": "tmp", "prefix": "tmp/", "expirationDays": 7}],
        "cors": [{"allowedMethods": ["GET", "PUT"], "allowedOrigins": ["https://example.com"]}],
    });
    api.create(&PostParams::default(), &bucket("photos", spec))
        .await
        .unwrap();
    let name = wait_ready(api, "photos").await;
    let want = format!("{}{ns}-photos-", prefix(&op.cluster));
    assert!(name.starts_with(&want), "{name}");
    let b = api.get("photos").await.unwrap();
    let st = b.status.unwrap();
    assert_eq!(
        st.arn.as_deref(),
        Some(format!("arn:aws:s3:::{name}").as_str())
    );
    assert_eq!(st.region.as_deref(), Some("us-east-1"));
    assert_eq!(st.observed_generation, b.metadata.generation);
    (name, b.metadata.uid)
}

/// What S3 holds: our tags beside the user's, every public access blocked, AES256 by default.
async fn s3_holds_the_tags_public_access_block_and_encryption(
    op: &Operator,
    ns: &str,
    name: &str,
    uid: Option<&String>,
) {
    let s3 = admin_s3();
    let tags = bucket_tags(name).await;
    assert_eq!(tags.get("team").map(String::as_str), Some("media"));
    assert_eq!(
        tags.get("s3.operator.dev/namespace").map(String::as_str),
        Some(ns)
    );
    assert_eq!(
        tags.get("s3.operator.dev/name").map(String::as_str),
        Some("photos")
    );
    assert_eq!(tags.get("s3.operator.dev/uid"), uid);
    assert_eq!(tags.get("s3.operator.dev/cluster"), Some(&op.cluster));
    let pab = s3
        .get_public_access_block()
        .bucket(name)
        .send()
        .await
        .unwrap()
        .public_access_block_configuration
        .unwrap();
    assert_eq!(
        (
            pab.block_public_acls,
            pab.ignore_public_acls,
            pab.block_public_policy,
            pab.restrict_public_buckets
        ),
        (Some(true), Some(true), Some(true), Some(true))
    );
    let enc = s3
        .get_bucket_encryption()
        .bucket(name)
        .send()
        .await
        .unwrap();
    let rule = &enc.server_side_encryption_configuration.unwrap().rules[0];
    assert_eq!(
        rule.apply_server_side_encryption_by_default
            .as_ref()
            .unwrap()
            .sse_algorithm
            .as_str(),
        "AES256"
    );
}

/// What S3 holds: the spec's versioning, lifecycle rule and CORS; creation is an event.
async fn s3_holds_the_versioning_lifecycle_and_cors(ns: &str, name: &str) {
    let s3 = admin_s3();
    let ver = s3
        .get_bucket_versioning()
        .bucket(name)
        .send()
        .await
        .unwrap();
    assert_eq!(ver.status.unwrap().as_str(), "Enabled");
    let lc = s3
        .get_bucket_lifecycle_configuration()
        .bucket(name)
        .send()
        .await
        .unwrap()
        .rules
        .unwrap();
    assert_eq!(
        (lc[0].id.as_deref(), lc[0].expiration.as_ref().unwrap().days),
        (Some("tmp"), Some(7))
    );
    let cors = s3
        .get_bucket_cors()
        .bucket(name)
        .send()
        .await
        .unwrap()
        .cors_rules
        .unwrap();
    assert_eq!(
        cors[0].allowed_origins,
        vec!["https://example.com".to_string()]
    );
    wait_event(ns, "Created", &[""]).await;
}

/// Quiet steady state: several resyncs (2s) make no AWS write and no Kubernetes write, as the
/// emulator's request log and the API server's audit log count them (the operator's own
/// counters must agree).
async fn steady_state_writes_nothing_and_rereads_aws(op: &Operator) {
    let sent = op.sent().await;
    let (aws0, kube0) = (op.aws_writes().await, op.kube_writes().await);
    let reads0 = op.aws_calls("GetBucketTagging").await;
    op.two_more_calls("GetBucketTagging").await;
    op.two_more_calls("GetBucketTagging").await;
    assert_eq!(
        sent.writes().await,
        Vec::<String>::new(),
        "steady state wrote"
    );
    assert_eq!(op.aws_writes().await, aws0, "steady state wrote to AWS");
    assert_eq!(
        op.kube_writes().await,
        kube0,
        "steady state wrote to Kubernetes"
    );
    let reads1 = op.aws_calls("GetBucketTagging").await;
    assert!(
        reads1 >= reads0 + 4.0,
        "resync re-reads AWS ({reads0} -> {reads1})"
    );
}

/// Drift: public access block switched off out of band is put back, counted and reported.
async fn drift_is_put_back(op: &Operator, ns: &str, name: &str) {
    let s3 = admin_s3();
    s3.delete_public_access_block()
        .bucket(name)
        .send()
        .await
        .unwrap();
    wait_for("public access block restored", T, || async {
        let c = s3
            .get_public_access_block()
            .bucket(name)
            .send()
            .await
            .ok()?
            .public_access_block_configuration?;
        (c.block_public_policy == Some(true)).then_some(())
    })
    .await;
    assert!(op.drift_corrections("publicAccessBlock").await >= 1.0);
    wait_event(ns, "DriftCorrected", &["publicAccessBlock"]).await;
}

/// Update: tags and versioning follow the spec.
async fn spec_update_is_applied(api: &Api<Bucket>, name: &str) {
    let s3 = admin_s3();
    let patch = json!({"spec": {"versioning": "Suspended", "tags": {"team": "video"}}});
    api.patch("photos", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    wait_for("spec update applied", T, || async {
        let v = s3
            .get_bucket_versioning()
            .bucket(name)
            .send()
            .await
            .ok()?
            .status?;
        (v.as_str() == "Suspended"
            && bucket_tags(name).await.get("team").map(String::as_str) == Some("video"))
        .then_some(())
    })
    .await;
}

/// Delete policy: the (empty) bucket goes with the object.
async fn delete_policy_removes_the_empty_bucket(api: &Api<Bucket>, op: &Operator, name: &str) {
    api.delete("photos", &DeleteParams::default())
        .await
        .unwrap();
    gone(api, "photos").await;
    assert!(!bucket_exists(name).await);
    let log = op.log_text();
    assert!(!log.contains("panicked"), "operator panicked:\n{log}");
}

#[tokio::test]
async fn deletion_respects_retain_and_blocks_on_non_empty_buckets() {
    let client = admin().await;
    let ns = namespace(&client, "del").await;
    let op = Operator::start(OperatorOpts {
        namespaces: vec![ns.clone()],
        ..Default::default()
    })
    .await;
    let api = Api::<Bucket>::namespaced(client.clone(), &ns);
    let s3 = admin_s3();

    // Default policy (the operator's flag default) is Retain: kept, ownership released, and the
    // bucket policy's grants with it (the TLS-only statement stays).
    let kept = format!("{}keep-{}", prefix(&op.cluster), random(6));
    let grant = json!({"effect": "Allow", "principal": {"aws": ["123456789012"]},
                       "action": ["s3:GetObject"], "resource": [format!("arn:aws:s3:::{kept}/*")]});
    api.create(
        &PostParams::default(),
        &bucket(
            "keep",
            json!({"bucketName": kept, "tags": {"app": "x"}, "policy": [grant]}),
        ),
    )
    .await
    .unwrap();
    wait_ready(&api, "keep").await;
    assert_eq!(
        bucket_policy(&kept).await.unwrap()["Statement"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    api.delete("keep", &DeleteParams::default()).await.unwrap();
    gone(&api, "keep").await;
    assert!(bucket_exists(&kept).await, "Retain keeps the bucket");
    let doc = bucket_policy(&kept)
        .await
        .expect("the TLS-only policy stays");
    assert!(has_tls_only_statement(&doc, &kept), "{doc}");
    assert_eq!(
        doc["Statement"].as_array().unwrap().len(),
        1,
        "grants removed: {doc}"
    );
    let tags = bucket_tags(&kept).await;
    assert_eq!(tags.get("app").map(String::as_str), Some("x"));
    // No owner is left, but the bucket remembers where it came from (only that namespace may
    // adopt it back).
    for k in ["cluster", "namespace", "name", "uid"] {
        let key = format!("s3.operator.dev/{k}");
        assert!(!tags.contains_key(&key), "ownership released: {tags:?}");
    }
    assert_eq!(
        tags.get("s3.operator.dev/released-from-namespace"),
        Some(&ns),
        "{tags:?}"
    );

    // Delete on a non-empty bucket blocks, reported in status and events, until forceDelete.
    api.create(
        &PostParams::default(),
        &bucket("full", json!({"deletionPolicy": "Delete"})),
    )
    .await
    .unwrap();
    let full = wait_ready(&api, "full").await;
    s3.put_object()
        .bucket(&full)
        .key("data.txt")
        .body(b"x".to_vec().into())
        .send()
        .await
        .unwrap();
    api.delete("full", &DeleteParams::default()).await.unwrap();
    let msg = wait_reason(&api, "full", "DeletionBlocked", T).await;
    assert!(msg.contains("forceDelete"), "{msg}");
    wait_event(&ns, "DeletionBlocked", &["forceDelete"]).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        bucket_exists(&full).await && api.get_opt("full").await.unwrap().is_some(),
        "nothing deleted"
    );
    api.patch(
        "full",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"forceDelete": true}})),
    )
    .await
    .unwrap();
    gone(&api, "full").await;
    assert!(
        !bucket_exists(&full).await,
        "forceDelete empties and deletes"
    );
}

#[tokio::test]
async fn foreign_and_unowned_buckets_are_never_touched_unless_adopted() {
    let client = admin().await;
    let ns = namespace(&client, "own").await;
    let op = Operator::start(OperatorOpts {
        namespaces: vec![ns.clone()],
        ..Default::default()
    })
    .await;
    let api = Api::<Bucket>::namespaced(client.clone(), &ns);
    a_foreign_bucket_is_never_touched(&api, &op).await;
    an_unowned_bucket_is_adopted_only_when_asked(&api, &op, &ns).await;
    a_name_outside_the_prefix_is_refused(&api).await;
    two_buckets_cannot_share_a_name(&api, &op).await;
}

pub(crate) fn tagging(pairs: &[(&str, &str)]) -> aws_sdk_s3::types::Tagging {
    let tags = pairs
        .iter()
        .map(|(k, v)| {
            aws_sdk_s3::types::Tag::builder()
                .key(*k)
                .value(*v)
                .build()
                .unwrap()
        })
        .collect();
    aws_sdk_s3::types::Tagging::builder()
        .set_tag_set(Some(tags))
        .build()
        .unwrap()
}

/// A bucket owned by another object: NameConflict, not modified, kept after deletion.
async fn a_foreign_bucket_is_never_touched(api: &Api<Bucket>, op: &Operator) {
    let s3 = admin_s3();
    let foreign = format!("{}foreign-{}", prefix(&op.cluster), random(6));
    s3.create_bucket().bucket(&foreign).send().await.unwrap();
    let theirs = [
        ("s3.operator.dev/cluster", "their-cluster"),
        ("s3.operator.dev/namespace", "their-ns"),
        ("s3.operator.dev/name", "their-obj"),
        ("s3.operator.dev/uid", "z"),
    ];
    s3.put_bucket_tagging()
        .bucket(&foreign)
        .tagging(tagging(&theirs))
        .send()
        .await
        .unwrap();
    api.create(&PostParams::default(), &bucket("f", json!({"bucketName": foreign, "deletionPolicy": "Delete", "adoptExisting": true, "forceDelete": true}))).await.unwrap();
    let msg = wait_reason(api, "f", "NameConflict", T).await;
    // Which object or installation holds it is not the tenant's to know.
    assert!(msg.contains("held by another installation"), "{msg}");
    assert!(!msg.contains("their-"), "{msg}");
    assert!(
        s3.get_public_access_block()
            .bucket(&foreign)
            .send()
            .await
            .is_err(),
        "no public access block was written"
    );
    assert_eq!(bucket_tags(&foreign).await.len(), 4, "tags untouched");
    api.delete("f", &DeleteParams::default()).await.unwrap();
    gone(api, "f").await;
    assert!(
        bucket_exists(&foreign).await,
        "a foreign bucket survives deletion with Delete + forceDelete"
    );
}

/// An unowned bucket: NameConflict until adoptExisting, then adopted with user tags kept.
async fn an_unowned_bucket_is_adopted_only_when_asked(api: &Api<Bucket>, op: &Operator, ns: &str) {
    let unowned = format!("{}unowned-{}", prefix(&op.cluster), random(6));
    admin_s3()
        .create_bucket()
        .bucket(&unowned)
        .send()
        .await
        .unwrap();
    api.create(
        &PostParams::default(),
        &bucket("u", json!({"bucketName": unowned, "tags": {"k": "v"}})),
    )
    .await
    .unwrap();
    let msg = wait_reason(api, "u", "NameConflict", T).await;
    assert!(msg.contains("adoptExisting"), "{msg}");
    assert!(bucket_tags(&unowned).await.is_empty(), "not modified");
    api.patch(
        "u",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"adoptExisting": true}})),
    )
    .await
    .unwrap();
    wait_ready(api, "u").await;
    let tags = bucket_tags(&unowned).await;
    assert_eq!(
        tags.get("s3.operator.dev/name").map(String::as_str),
        Some("u")
    );
    assert_eq!(tags.get("k").map(String::as_str), Some("v"));
    wait_event(ns, "NameConflict", &[""]).await;
}

/// A name outside the operator's prefix: refused before any AWS call, naming the rule.
async fn a_name_outside_the_prefix_is_refused(api: &Api<Bucket>) {
    api.create(
        &PostParams::default(),
        &bucket("outside", json!({"bucketName": "not-ours-bucket"})),
    )
    .await
    .unwrap();
    let msg = wait_reason(api, "outside", "InvalidSpec", T).await;
    assert!(
        msg.contains("spec.bucketName") && msg.contains(PREFIX),
        "{msg}"
    );
    assert!(!bucket_exists("not-ours-bucket").await);
}

/// Two Buckets asking for one name: the second is a NameConflict, the first keeps it.
async fn two_buckets_cannot_share_a_name(api: &Api<Bucket>, op: &Operator) {
    let shared = format!("{}shared-{}", prefix(&op.cluster), random(6));
    api.create(
        &PostParams::default(),
        &bucket("first", json!({"bucketName": shared})),
    )
    .await
    .unwrap();
    wait_ready(api, "first").await;
    api.create(
        &PostParams::default(),
        &bucket("second", json!({"bucketName": shared})),
    )
    .await
    .unwrap();
    wait_reason(api, "second", "NameConflict", T).await;
    assert_eq!(
        bucket_tags(&shared)
            .await
            .get("s3.operator.dev/name")
            .map(String::as_str),
        Some("first")
    );
}

/// An operator whose IAM policy lacks a permission reports AccessDenied in the condition and an
/// event, and waits for the resync instead of hot-looping on the refusal.
#[tokio::test]
async fn access_denied_lands_in_the_condition_without_a_hot_loop() {
    let client = admin().await;
    let ns = namespace(&client, "deny").await;
    let cluster = format!("t{}", random(6));
    let mut doc = operator_policy(&cluster);
    // Take s3:PutEncryptionConfiguration away from the shipped policy.
    let actions = doc["Statement"][0]["Action"].as_array_mut().unwrap();
    actions.retain(|a| a != "s3:PutEncryptionConfiguration");
    let op = Operator::start(OperatorOpts {
        namespaces: vec![ns.clone()],
        cluster: Some(cluster),
        resync: "30s",
        policy: Some(doc),
        ..Default::default()
    })
    .await;
    let api = Api::<Bucket>::namespaced(client.clone(), &ns);
    api.create(&PostParams::default(), &bucket("denied", json!({})))
        .await
        .unwrap();
    let msg = wait_reason(&api, "denied", "AccessDenied", T).await;
    assert!(msg.contains("PutBucketEncryption"), "{msg}");
    wait_event(&ns, "AccessDenied", &["PutBucketEncryption"]).await;
    // The refused pass says what it had left to write, from the refused write on: the bucket
    // it already created is not listed, its encryption is first.
    let status = serde_json::to_value(api.get("denied").await.unwrap().status).unwrap();
    let in_sync = (status["conditions"].as_array().unwrap().iter())
        .find(|c| c["type"] == "InSync")
        .unwrap_or_else(|| panic!("no InSync condition: {status}"));
    assert_eq!(
        (&in_sync["status"], &in_sync["reason"]),
        (&json!("False"), &json!("Blocked"))
    );
    let fields: Vec<&str> = (status["plan"].as_array().unwrap().iter())
        .filter_map(|p| p["field"].as_str())
        .collect();
    assert_eq!(fields.first(), Some(&"encryption"), "{status}");
    assert!(!fields.contains(&"bucket"), "{fields:?}");
    let before = op.aws_calls("GetBucketTagging").await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = op.aws_calls("GetBucketTagging").await;
    assert!(
        after - before <= 1.0,
        "hot loop: {before} -> {after} reads in 5s"
    );
}

/// The bucket's object ownership as S3 reports it (`None`: no ownership controls).
async fn ownership(bucket: &str) -> Option<String> {
    let out = admin_s3()
        .get_bucket_ownership_controls()
        .bucket(bucket)
        .send()
        .await
        .ok()?;
    let rules = out.ownership_controls?.rules;
    rules
        .first()
        .map(|r| r.object_ownership.as_str().to_string())
}

async fn set_ownership(bucket: &str, o: ObjectOwnership) {
    let rule = OwnershipControlsRule::builder()
        .object_ownership(o)
        .build()
        .unwrap();
    let controls = OwnershipControls::builder().rules(rule).build().unwrap();
    admin_s3()
        .put_bucket_ownership_controls()
        .bucket(bucket)
        .ownership_controls(controls)
        .send()
        .await
        .unwrap();
}

/// Writes an object with a (private) ACL: the error code when S3 refuses it.
async fn put_with_acl(s3: &aws_sdk_s3::Client, bucket: &str) -> Result<(), String> {
    s3.put_object()
        .bucket(bucket)
        .key("acl.txt")
        .acl(ObjectCannedAcl::BucketOwnerRead)
        .body(b"x".to_vec().into())
        .send()
        .await
        .map(drop)
        .map_err(|e| e.code().unwrap_or("unknown").to_string())
}

/// New buckets have ACLs disabled (`BucketOwnerEnforced`) without a request of their own; an
/// omitted `objectOwnership` is not read on resync and not corrected; a set one is created,
/// kept, and its drift corrected and reported.
#[tokio::test]
async fn object_ownership_disables_acls_by_default_and_is_kept_when_set() {
    let (op, api, ns) = Operator::in_new_namespace("own").await;
    let s3 = admin_s3();

    // Omitted: created with ACLs disabled, in the CreateBucket call itself.
    api.create(&PostParams::default(), &bucket("plain", json!({})))
        .await
        .unwrap();
    let plain = wait_ready(&api, "plain").await;
    assert_eq!(
        ownership(&plain).await.as_deref(),
        Some("BucketOwnerEnforced")
    );
    assert_eq!(
        put_with_acl(&s3, &plain).await,
        Err("AccessControlListNotSupported".into())
    );
    op.two_more_calls("GetBucketPolicy").await;
    for operation in ["GetBucketOwnershipControls", "PutBucketOwnershipControls"] {
        assert_eq!(op.aws_calls(operation).await, 0.0, "{operation}");
    }
    // ... and unmanaged afterwards: a change made outside the operator stays.
    set_ownership(&plain, ObjectOwnership::ObjectWriter).await;
    op.two_more_calls("GetBucketPolicy").await;
    assert_eq!(ownership(&plain).await.as_deref(), Some("ObjectWriter"));
    assert_eq!(op.aws_calls("GetBucketOwnershipControls").await, 0.0);

    // Set: created with it (ACLs work), steady state writes nothing, drift is put back.
    api.create(
        &PostParams::default(),
        &bucket("writer", json!({"objectOwnership": "ObjectWriter"})),
    )
    .await
    .unwrap();
    let writer = wait_ready(&api, "writer").await;
    assert_eq!(ownership(&writer).await.as_deref(), Some("ObjectWriter"));
    assert_eq!(put_with_acl(&s3, &writer).await, Ok(()));
    let puts = op.aws_calls("PutBucketOwnershipControls").await;
    op.two_more_calls("GetBucketOwnershipControls").await;
    assert_eq!(op.aws_calls("PutBucketOwnershipControls").await, puts);
    set_ownership(&writer, ObjectOwnership::BucketOwnerEnforced).await;
    wait_for("object ownership restored", T, || async {
        (ownership(&writer).await.as_deref() == Some("ObjectWriter")).then_some(())
    })
    .await;
    assert!(op.drift_corrections("objectOwnership").await >= 1.0);
    wait_event(&ns, "DriftCorrected", &["objectOwnership"]).await;
    // The same drift again is one Event counted twice, not a second Event.
    set_ownership(&writer, ObjectOwnership::BucketOwnerEnforced).await;
    let about_writer = || async {
        let events = events_with(&ns, "DriftCorrected").await.into_iter();
        let named = |e: &Event| e.regarding.as_ref()?.name.clone();
        events
            .filter(|e| named(e).as_deref() == Some("writer"))
            .collect::<Vec<_>>()
    };
    wait_for("the second correction's count", T, || async {
        let counted = about_writer().await.iter().any(|e| e.series.is_some());
        counted.then_some(())
    })
    .await;
    let events = about_writer().await;
    assert_eq!(events.len(), 1, "{events:?}");
    let count = events[0].series.as_ref().map(|s| s.count);
    assert_eq!(count, Some(2), "{events:?}");
    assert_eq!(ownership(&writer).await.as_deref(), Some("ObjectWriter"));

    // Setting it later manages an existing bucket from then on.
    let patch = json!({"spec": {"objectOwnership": "BucketOwnerEnforced"}});
    api.patch("plain", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    wait_for("object ownership applied", T, || async {
        (ownership(&plain).await.as_deref() == Some("BucketOwnerEnforced")).then_some(())
    })
    .await;
}

/// The emulator's object ownership is S3's: new buckets have ACLs disabled, CreateBucket with an
/// ObjectOwnership needs s3:PutBucketOwnershipControls, and the ownership controls have their
/// own IAM actions.
#[tokio::test]
async fn emulator_object_ownership_matches_s3() {
    let pfx = format!("s3op-moto-{}", random(6));
    let s3 = s3_user(
        &pfx,
        "user",
        &["s3:CreateBucket", "s3:PutObject", "s3:PutObjectAcl"],
    )
    .await;
    let plain = format!("{pfx}-plain");
    s3.create_bucket().bucket(&plain).send().await.unwrap();
    assert_eq!(
        ownership(&plain).await.as_deref(),
        Some("BucketOwnerEnforced")
    );
    assert_eq!(
        put_with_acl(&s3, &plain).await,
        Err("AccessControlListNotSupported".into())
    );
    let err = s3
        .create_bucket()
        .bucket(format!("{pfx}-writer"))
        .object_ownership(ObjectOwnership::ObjectWriter)
        .send()
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("AccessDenied"), "{err:?}");
    let err = s3
        .get_bucket_ownership_controls()
        .bucket(&plain)
        .send()
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("AccessDenied"), "{err:?}");
}

fn has_tls_only_statement(doc: &serde_json::Value, bucket: &str) -> bool {
    let arn = format!("arn:aws:s3:::{bucket}");
    doc["Statement"].as_array().is_some_and(|all| {
        all.iter().any(|s| {
            s["Sid"] == "DenyInsecureTransport"
                && s["Effect"] == "Deny"
                && s["Principal"] == "*"
                && s["Condition"]["Bool"]["aws:SecureTransport"] == "false"
                && s["Resource"] == json!([arn, format!("{arn}/*")])
        })
    })
}

/// Every bucket gets a policy denying requests without TLS; steady state neither rewrites it
/// nor writes anything else; a policy deleted or replaced out of band is rewritten and reported.
#[tokio::test]
async fn tls_only_policy_is_written_by_default_and_kept() {
    let (op, api, ns) = Operator::in_new_namespace("tls").await;
    let s3 = admin_s3();
    api.create(&PostParams::default(), &bucket("tls", json!({})))
        .await
        .unwrap();
    let name = wait_ready(&api, "tls").await;
    let doc = bucket_policy(&name).await.expect("a bucket policy");
    assert!(has_tls_only_statement(&doc, &name), "{doc}");

    // Steady state: the policy is read on every resync and never rewritten.
    let puts = op.aws_calls("PutBucketPolicy").await;
    op.two_more_calls("GetBucketPolicy").await;
    assert_eq!(op.aws_calls("PutBucketPolicy").await, puts);

    // Deleted, then replaced by another policy: rewritten each time, and reported.
    s3.delete_bucket_policy()
        .bucket(&name)
        .send()
        .await
        .unwrap();
    wait_for("bucket policy restored", T, || async {
        bucket_policy(&name)
            .await
            .filter(|d| has_tls_only_statement(d, &name))
    })
    .await;
    let other = json!({"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::123456789012:root"},
        "Action": "s3:GetObject", "Resource": format!("arn:aws:s3:::{name}/*"),
    }]});
    s3.put_bucket_policy()
        .bucket(&name)
        .policy(other.to_string())
        .send()
        .await
        .unwrap();
    wait_for("bucket policy rewritten", T, || async {
        let doc = bucket_policy(&name).await?;
        (has_tls_only_statement(&doc, &name) && doc["Statement"].as_array()?.len() == 1)
            .then_some(())
    })
    .await;
    assert!(op.drift_corrections("policy").await >= 2.0);
    wait_event(&ns, "DriftCorrected", &["policy"]).await;
}

/// `spec.policy` statements join the TLS-only one; a statement granting a principal outside the
/// operator's account is refused (Ready=False naming the field and the rule, nothing created)
/// unless the operator's allow-list names it; one naming another bucket is refused; a policy
/// changed out of band is rewritten with both.
#[tokio::test]
async fn policy_statements_are_merged_guarded_and_kept() {
    let client = admin().await;
    let ns = namespace(&client, "pol").await;
    let partner = "arn:aws:iam::999999999999:role/partner";
    let op = Operator::start(OperatorOpts {
        namespaces: vec![ns.clone()],
        resync: "2s",
        extra_args: vec!["--allowed-policy-principals".into(), partner.into()],
        ..Default::default()
    })
    .await;
    let api = Api::<Bucket>::namespaced(client.clone(), &ns);
    let name = format!("{}pol-{}", prefix(&op.cluster), random(6));
    let arn = format!("arn:aws:s3:::{name}");
    let grant = |principal: &str, resource: &str| {
        json!({"sid": "Read", "effect": "Allow", "principal": {"aws": [principal]},
               "action": ["s3:GetObject"], "resource": [resource]})
    };

    // A principal outside the account, not allow-listed: refused before anything is created.
    let stranger = "arn:aws:iam::888888888888:role/stranger";
    let spec = json!({"bucketName": name, "policy": [grant(stranger, &format!("{arn}/*"))]});
    api.create(&PostParams::default(), &bucket("p", spec))
        .await
        .unwrap();
    let msg = wait_reason(&api, "p", "InvalidSpec", T).await;
    assert!(
        msg.contains("spec.policy[0].principal")
            && msg.contains("888888888888")
            && msg.contains("--allowed-policy-principals"),
        "{msg}"
    );
    assert!(!bucket_exists(&name).await, "nothing created");

    // Another bucket's objects: refused, naming the rule.
    let other = format!("{arn}-other/*");
    let patch = json!({"spec": {"policy": [grant("123456789012", &other)]}});
    api.patch("p", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    wait_for("resource refused", T, || async {
        let st = api.get("p").await.ok()?.status?;
        let c = st.conditions.first()?;
        c.message.contains("not this bucket").then_some(())
    })
    .await;

    // The allow-listed partner and the own account: merged after the TLS-only statement.
    let patch = json!({"spec": {"policy": [
        grant(partner, &format!("{arn}/*")),
        {"sid": "OwnList", "effect": "Allow", "principal": {"aws": ["123456789012"]},
         "action": ["s3:ListBucket"], "resource": [arn],
         "condition": {"StringLike": {"s3:prefix": ["shared/*"]}}},
    ]}});
    api.patch("p", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    wait_ready(&api, "p").await;
    let doc = bucket_policy(&name).await.expect("a bucket policy");
    assert!(has_tls_only_statement(&doc, &name), "{doc}");
    let all = doc["Statement"].as_array().unwrap();
    assert_eq!(all.len(), 3, "{doc}");
    assert!(
        all.iter()
            .any(|s| s["Principal"]["AWS"] == json!([partner])),
        "{doc}"
    );
    assert!(
        all.iter().any(|s| s["Sid"] == "OwnList"
            && s["Condition"]["StringLike"]["s3:prefix"] == json!(["shared/*"])),
        "{doc}"
    );

    // Steady state: no rewrite.
    let puts = op.aws_calls("PutBucketPolicy").await;
    op.two_more_calls("GetBucketPolicy").await;
    assert_eq!(op.aws_calls("PutBucketPolicy").await, puts);

    // Out of band, the TLS statement dropped: rewritten with every statement.
    let mut without_tls = doc.clone();
    without_tls["Statement"]
        .as_array_mut()
        .unwrap()
        .retain(|s| s["Sid"] != "DenyInsecureTransport");
    admin_s3()
        .put_bucket_policy()
        .bucket(&name)
        .policy(without_tls.to_string())
        .send()
        .await
        .unwrap();
    wait_for("TLS-only statement restored", T, || async {
        let d = bucket_policy(&name).await?;
        (has_tls_only_statement(&d, &name) && d["Statement"].as_array()?.len() == 3).then_some(())
    })
    .await;
}

/// The emulator enforces BlockPublicPolicy as S3 does: a public policy is refused while the flag
/// is on (the operator's default), accepted without it.
#[tokio::test]
async fn emulator_refuses_public_policies_under_block_public_policy() {
    let s3 = admin_s3();
    let name = format!("s3op-moto-pub-{}", random(6));
    s3.create_bucket().bucket(&name).send().await.unwrap();
    let public = json!({"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
        "Resource": format!("arn:aws:s3:::{name}/*"),
    }]})
    .to_string();
    let block = aws_sdk_s3::types::PublicAccessBlockConfiguration::builder()
        .block_public_policy(true)
        .build();
    s3.put_public_access_block()
        .bucket(&name)
        .public_access_block_configuration(block)
        .send()
        .await
        .unwrap();
    let err = s3
        .put_bucket_policy()
        .bucket(&name)
        .policy(&public)
        .send()
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("AccessDenied"), "{err:?}");
    assert!(bucket_policy(&name).await.is_none());
    s3.delete_public_access_block()
        .bucket(&name)
        .send()
        .await
        .unwrap();
    s3.put_bucket_policy()
        .bucket(&name)
        .policy(&public)
        .send()
        .await
        .unwrap();
}
