//! Object lock, intelligent tiering and transfer acceleration: chosen
//! and kept through the operator, refused where S3 cannot serve them, and free when unused.

use std::collections::BTreeSet;
use std::time::Duration;

use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_sdk_s3::types::{
    BucketAccelerateStatus, ChecksumAlgorithm, DefaultRetention, IntelligentTieringAccessTier,
    IntelligentTieringConfiguration, IntelligentTieringStatus, ObjectLockConfiguration,
    ObjectLockEnabled, ObjectLockRetentionMode, ObjectLockRule, Tiering,
};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use s3_operator::api::Bucket;
use serde_json::json;

use crate::support::*;

const T: Duration = Duration::from_secs(60);

/// The S3 operations these features add, reads and writes.
const NEW_OPERATIONS: [&str; 7] = [
    "GetObjectLockConfiguration",
    "PutObjectLockConfiguration",
    "ListBucketIntelligentTieringConfigurations",
    "PutBucketIntelligentTieringConfiguration",
    "DeleteBucketIntelligentTieringConfiguration",
    "GetBucketAccelerateConfiguration",
    "PutBucketAccelerateConfiguration",
];

/// (enabled, mode, days, years) of the bucket's object lock; `None` without one.
async fn lock_of(bucket: &str) -> Option<(bool, Option<String>, Option<i32>, Option<i32>)> {
    let out = admin_s3()
        .get_object_lock_configuration()
        .bucket(bucket)
        .send()
        .await
        .ok()?;
    let c = out.object_lock_configuration?;
    let r = c.rule.and_then(|r| r.default_retention);
    Some((
        c.object_lock_enabled == Some(ObjectLockEnabled::Enabled),
        r.as_ref()
            .and_then(|r| r.mode.as_ref())
            .map(|m| m.as_str().to_string()),
        r.as_ref().and_then(|r| r.days).filter(|d| *d > 0),
        r.as_ref().and_then(|r| r.years).filter(|y| *y > 0),
    ))
}

pub(crate) fn lock_config(mode: ObjectLockRetentionMode, days: i32) -> ObjectLockConfiguration {
    ObjectLockConfiguration::builder()
        .object_lock_enabled(ObjectLockEnabled::Enabled)
        .rule(
            ObjectLockRule::builder()
                .default_retention(DefaultRetention::builder().mode(mode).days(days).build())
                .build(),
        )
        .build()
}

/// A bucket asked for with object lock is created with it (versioning on) and its default
/// retention; drift of the retention is put back and reported; a forced deletion never deletes
/// what retention holds: it is reported as blocked and goes on once the versions are gone.
#[tokio::test]
async fn object_lock_is_chosen_at_creation_and_retention_is_kept() {
    let (op, api, ns) = Operator::in_new_namespace("lock").await;
    let s3 = admin_s3();
    let spec = json!({
        "objectLock": {"defaultRetention": {"mode": "GOVERNANCE", "days": 1}},
        "deletionPolicy": "Delete", "forceDelete": true,
    });
    api.create(&PostParams::default(), &bucket("locked", spec))
        .await
        .unwrap();
    let name = wait_ready(&api, "locked").await;
    let want = (true, Some("GOVERNANCE".to_string()), Some(1), None);
    assert_eq!(lock_of(&name).await, Some(want.clone()));
    let versioning = s3.get_bucket_versioning().bucket(&name).send().await;
    assert_eq!(versioning.unwrap().status.unwrap().as_str(), "Enabled");

    // Steady state reads the lock and writes nothing.
    let puts = op.aws_calls("PutObjectLockConfiguration").await;
    op.two_more_calls("GetObjectLockConfiguration").await;
    assert_eq!(op.aws_calls("PutObjectLockConfiguration").await, puts);

    // An object is stored under the default retention, then the retention drifts.
    let put = s3
        .put_object()
        .bucket(&name)
        .key("kept.txt")
        .body(b"x".to_vec().into())
        .checksum_algorithm(ChecksumAlgorithm::Crc32)
        .send()
        .await
        .unwrap();
    let version = put.version_id.expect("a version id");
    s3.put_object_lock_configuration()
        .bucket(&name)
        .object_lock_configuration(lock_config(ObjectLockRetentionMode::Governance, 7))
        .send()
        .await
        .unwrap();
    wait_for("default retention restored", T, || async {
        (lock_of(&name).await == Some(want.clone())).then_some(())
    })
    .await;
    assert!(op.drift_corrections("objectLock").await >= 1.0);
    wait_event(&ns, "DriftCorrected", &["objectLock"]).await;

    // forceDelete: the retained version blocks deletion, which is reported; nothing is lost.
    api.delete("locked", &DeleteParams::default())
        .await
        .unwrap();
    let msg = wait_reason(&api, "locked", "DeletionBlocked", T).await;
    assert!(msg.contains("object lock") && msg.contains(&name), "{msg}");
    let head = s3
        .head_object()
        .bucket(&name)
        .key("kept.txt")
        .version_id(&version)
        .send()
        .await;
    assert!(
        head.is_ok(),
        "the retained version is still there: {head:?}"
    );
    assert!(bucket_exists(&name).await);

    // Once a person removes the version (bypassing governance), the deletion completes.
    s3.delete_object()
        .bucket(&name)
        .key("kept.txt")
        .version_id(&version)
        .bypass_governance_retention(true)
        .send()
        .await
        .unwrap();
    wait_for(
        "the locked Bucket to be deleted",
        Duration::from_secs(180),
        || async { api.get_opt("locked").await.unwrap().is_none().then_some(()) },
    )
    .await;
    assert!(!bucket_exists(&name).await);
}

/// Object lock cannot be added to an existing Bucket (the API server refuses it), and a Bucket
/// asking for it on an S3 bucket created without it is refused with the reason, untouched.
#[tokio::test]
async fn object_lock_is_refused_for_an_existing_bucket() {
    let (op, api, _ns) = Operator::in_new_namespace("nolock").await;
    api.create(&PostParams::default(), &bucket("plain", json!({})))
        .await
        .unwrap();
    let plain = wait_ready(&api, "plain").await;
    let err = api
        .patch(
            "plain",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"objectLock": {}}})),
        )
        .await
        .unwrap_err();
    assert!(
        format!("{err}").contains("spec.objectLock can only be chosen when the Bucket is created"),
        "{err}"
    );
    assert_eq!(lock_of(&plain).await, None);

    let existing = format!("{}lockless-{}", prefix(&op.cluster), random(5));
    admin_s3()
        .create_bucket()
        .bucket(&existing)
        .send()
        .await
        .unwrap();
    let spec = json!({"bucketName": existing, "adoptExisting": true, "objectLock": {}});
    api.create(&PostParams::default(), &bucket("adopt", spec))
        .await
        .unwrap();
    let msg = wait_reason(&api, "adopt", "InvalidSpec", T).await;
    assert!(
        msg.contains("spec.objectLock")
            && msg.contains("only be chosen when the bucket is created")
            && msg.contains(&existing),
        "{msg}"
    );
    assert!(bucket_tags(&existing).await.is_empty(), "not adopted");
    assert_eq!(lock_of(&existing).await, None);

    // COMPLIANCE retention, which no one could shorten, needs the operator's consent.
    let spec = json!({"objectLock": {"defaultRetention": {"mode": "COMPLIANCE", "days": 1}}});
    api.create(&PostParams::default(), &bucket("compliance", spec))
        .await
        .unwrap();
    let msg = wait_reason(&api, "compliance", "InvalidSpec", T).await;
    assert!(msg.contains("--allow-compliance-retention"), "{msg}");
    assert!(
        api.get("compliance")
            .await
            .unwrap()
            .status
            .unwrap()
            .bucket_name
            .is_none()
    );
}

async fn tiering_ids(bucket: &str) -> BTreeSet<String> {
    let out = admin_s3()
        .list_bucket_intelligent_tiering_configurations()
        .bucket(bucket)
        .send()
        .await
        .unwrap();
    out.intelligent_tiering_configuration_list
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.id)
        .collect()
}

async fn acceleration(bucket: &str) -> Option<String> {
    let out = admin_s3()
        .get_bucket_accelerate_configuration()
        .bucket(bucket)
        .send()
        .await
        .unwrap();
    out.status.map(|s| s.as_str().to_string())
}

fn tiering_config(id: &str, days: i32) -> IntelligentTieringConfiguration {
    IntelligentTieringConfiguration::builder()
        .id(id)
        .status(IntelligentTieringStatus::Enabled)
        .tierings(
            Tiering::builder()
                .days(days)
                .access_tier(IntelligentTieringAccessTier::ArchiveAccess)
                .build()
                .unwrap(),
        )
        .build()
        .unwrap()
}

fn ids(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// A Bucket using none of the new fields makes no call to their APIs; intelligent tiering and
/// acceleration are created, kept quietly, drift-corrected and reported, and an empty tiering
/// list removes every configuration.
#[tokio::test]
async fn intelligent_tiering_and_acceleration_are_kept_and_free_when_unused() {
    let (op, api, ns) = Operator::in_new_namespace("tier").await;
    a_plain_bucket_reads_none_of_them(&op, &api).await;
    let name = tiering_and_acceleration_are_created(&api).await;
    steady_state_reads_and_writes_nothing(&op).await;
    tiering_and_acceleration_drift_is_corrected(&op, &ns, &name).await;
    an_empty_list_removes_every_configuration(&api, &name).await;
    deleting_never_reads_object_lock(&op, &api).await;
}

async fn a_plain_bucket_reads_none_of_them(op: &Operator, api: &Api<Bucket>) {
    api.create(&PostParams::default(), &bucket("plain", json!({})))
        .await
        .unwrap();
    wait_ready(api, "plain").await;
    op.two_more_calls("GetBucketPolicy").await;
    for operation in NEW_OPERATIONS {
        assert_eq!(op.aws_calls(operation).await, 0.0, "{operation}");
    }
}

/// Returns the S3 name of the Bucket `tiered`.
async fn tiering_and_acceleration_are_created(api: &Api<Bucket>) -> String {
    let spec = json!({
        "intelligentTiering": [
            {"id": "archive", "prefix": "logs/",
             "tierings": [{"accessTier": "ARCHIVE_ACCESS", "days": 90}]},
            {"id": "deep", "status": "Disabled", "tags": {"team": "a", "env": "prod"},
             "tierings": [{"accessTier": "DEEP_ARCHIVE_ACCESS", "days": 180},
                          {"accessTier": "ARCHIVE_ACCESS", "days": 120}]},
        ],
        "transferAcceleration": "Enabled",
    });
    api.create(&PostParams::default(), &bucket("tiered", spec))
        .await
        .unwrap();
    let name = wait_ready(api, "tiered").await;
    assert_eq!(tiering_ids(&name).await, ids(&["archive", "deep"]));
    let deep = admin_s3()
        .get_bucket_intelligent_tiering_configuration()
        .bucket(&name)
        .id("deep")
        .send()
        .await
        .unwrap()
        .intelligent_tiering_configuration
        .unwrap();
    assert_eq!(deep.status, IntelligentTieringStatus::Disabled);
    assert_eq!(deep.tierings.len(), 2);
    let and = deep.filter.and_then(|f| f.and).expect("an And filter");
    assert_eq!(and.tags.unwrap_or_default().len(), 2);
    assert_eq!(acceleration(&name).await.as_deref(), Some("Enabled"));
    name
}

/// Read on every resync, nothing written (as the emulator's request log and the API server's
/// audit log count writes; the operator's own counters must agree); the plain Bucket still costs
/// nothing.
async fn steady_state_reads_and_writes_nothing(op: &Operator) {
    let sent = op.sent().await;
    let writes: Vec<f64> = new_writes(op).await;
    let (tiering, acceleration) = tiering_and_acceleration_reads(op).await;
    // Two more resync passes (2 s apart), however slow the machine: each reads, none writes.
    wait_for("two resync passes", T, || async {
        let (t, a) = tiering_and_acceleration_reads(op).await;
        (t >= tiering + 2.0 && a >= acceleration + 2.0).then_some(())
    })
    .await;
    assert_eq!(
        sent.writes().await,
        Vec::<String>::new(),
        "steady state wrote"
    );
    assert_eq!(new_writes(op).await, writes);
    // Only "tiered" reads these.
    assert_eq!(op.aws_calls("GetObjectLockConfiguration").await, 0.0);
}

async fn tiering_and_acceleration_reads(op: &Operator) -> (f64, f64) {
    let tiering = op
        .aws_calls("ListBucketIntelligentTieringConfigurations")
        .await;
    (
        tiering,
        op.aws_calls("GetBucketAccelerateConfiguration").await,
    )
}

/// Acceleration suspended, one configuration changed, one deleted, one added: all put back,
/// writing only what differs, reported as drift.
async fn tiering_and_acceleration_drift_is_corrected(op: &Operator, ns: &str, name: &str) {
    let archive_puts = op
        .aws_calls("PutBucketIntelligentTieringConfiguration")
        .await;
    drift_tiering_and_acceleration(name).await;
    wait_for("tiering and acceleration restored", T, || async {
        let archive = admin_s3()
            .get_bucket_intelligent_tiering_configuration()
            .bucket(name)
            .id("archive")
            .send()
            .await
            .ok()?
            .intelligent_tiering_configuration?;
        let restored = tiering_ids(name).await == ids(&["archive", "deep"])
            && archive.tierings.first().map(|t| t.days) == Some(90)
            && acceleration(name).await.as_deref() == Some("Enabled");
        restored.then_some(())
    })
    .await;
    // Only the two that differed were written (not the whole list again), and one deleted.
    assert_eq!(
        op.aws_calls("PutBucketIntelligentTieringConfiguration")
            .await,
        archive_puts + 2.0
    );
    assert!(
        op.aws_calls("DeleteBucketIntelligentTieringConfiguration")
            .await
            >= 1.0
    );
    for aspect in ["intelligentTiering", "transferAcceleration"] {
        assert!(op.drift_corrections(aspect).await >= 1.0, "{aspect}");
    }
    let aspects = ["intelligentTiering", "transferAcceleration"];
    wait_event(ns, "DriftCorrected", &aspects).await;
}

/// What someone outside the operator does to the bucket `name`.
async fn drift_tiering_and_acceleration(name: &str) {
    let s3 = admin_s3();
    s3.put_bucket_accelerate_configuration()
        .bucket(name)
        .accelerate_configuration(
            aws_sdk_s3::types::AccelerateConfiguration::builder()
                .status(BucketAccelerateStatus::Suspended)
                .build(),
        )
        .send()
        .await
        .unwrap();
    for (id, days) in [("archive", 300), ("extra", 90)] {
        s3.put_bucket_intelligent_tiering_configuration()
            .bucket(name)
            .id(id)
            .intelligent_tiering_configuration(tiering_config(id, days))
            .send()
            .await
            .unwrap();
    }
    s3.delete_bucket_intelligent_tiering_configuration()
        .bucket(name)
        .id("deep")
        .send()
        .await
        .unwrap();
}

/// An empty list removes every configuration; acceleration can be suspended.
async fn an_empty_list_removes_every_configuration(api: &Api<Bucket>, name: &str) {
    let patch = json!({"spec": {"intelligentTiering": [], "transferAcceleration": "Suspended"}});
    api.patch("tiered", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    wait_for("configurations removed", T, || async {
        let done = tiering_ids(name).await.is_empty()
            && acceleration(name).await.as_deref() == Some("Suspended");
        done.then_some(())
    })
    .await;
}

/// Deleting Buckets without object lock never reads it either.
async fn deleting_never_reads_object_lock(op: &Operator, api: &Api<Bucket>) {
    for b in ["plain", "tiered"] {
        api.delete(b, &DeleteParams::default()).await.unwrap();
    }
    wait_for("both Buckets deleted", T, || async {
        let left = api.list(&ListParams::default()).await.ok()?.items;
        left.is_empty().then_some(())
    })
    .await;
    for operation in ["GetObjectLockConfiguration", "PutObjectLockConfiguration"] {
        assert_eq!(op.aws_calls(operation).await, 0.0, "{operation}");
    }
}

/// The operator's writes to the APIs these features add, in [`NEW_OPERATIONS`] order.
async fn new_writes(op: &Operator) -> Vec<f64> {
    let mut all = Vec::new();
    for operation in NEW_OPERATIONS
        .iter()
        .filter(|o| !o.starts_with("Get") && !o.starts_with("List"))
    {
        all.push(op.aws_calls(operation).await);
    }
    all
}

#[tokio::test]
async fn protection_specs_are_refused_naming_field_and_rule() {
    install_crds().await;
    let client = admin().await;
    let ns = namespace(&client, "protval").await;
    let api = Api::<Bucket>::namespaced(client, &ns);
    let tier = |t: serde_json::Value| json!({"intelligentTiering": [{"id": "a", "tierings": t}]});
    for (spec, want) in [
        (
            json!({"objectLock": {"defaultRetention": {"mode": "COMPLIANCE", "days": 1, "years": 1}}}),
            "spec.objectLock.defaultRetention needs exactly one of days or years",
        ),
        (
            json!({"objectLock": {"defaultRetention": {"mode": "GOVERNANCE"}}}),
            "spec.objectLock.defaultRetention needs exactly one of days or years",
        ),
        (
            json!({"objectLock": {}, "versioning": "Suspended"}),
            "spec.versioning must not be Suspended with spec.objectLock",
        ),
        (
            json!({"bucketName": "s3op-a.b", "transferAcceleration": "Enabled"}),
            "spec.transferAcceleration is not available for a bucket name containing '.'",
        ),
        (
            json!({"intelligentTiering": [
                {"id": "a", "tierings": [{"accessTier": "ARCHIVE_ACCESS", "days": 90}]},
                {"id": "a", "tierings": [{"accessTier": "ARCHIVE_ACCESS", "days": 91}]}]}),
            "spec.intelligentTiering[].id must be unique",
        ),
        (
            tier(json!([{"accessTier": "ARCHIVE_ACCESS", "days": 89}])),
            "must be 90-730 for ARCHIVE_ACCESS and 180-730 for DEEP_ARCHIVE_ACCESS",
        ),
        (
            tier(json!([{"accessTier": "DEEP_ARCHIVE_ACCESS", "days": 179}])),
            "must be 90-730 for ARCHIVE_ACCESS and 180-730 for DEEP_ARCHIVE_ACCESS",
        ),
        (
            tier(json!([{"accessTier": "ARCHIVE_ACCESS", "days": 90},
                        {"accessTier": "ARCHIVE_ACCESS", "days": 100}])),
            "spec.intelligentTiering[].tierings[].accessTier must be unique",
        ),
    ] {
        let msg = refused(&api, raw_bucket("bad", spec.clone())).await;
        assert!(msg.contains(want), "{spec}: {msg}");
    }
    // Valid neighbours are accepted: the rules refuse only what they name.
    let ok = json!({"objectLock": {"defaultRetention": {"mode": "COMPLIANCE", "years": 1}},
        "versioning": "Enabled", "transferAcceleration": "Enabled",
        "intelligentTiering": [{"id": "a", "tierings": [
            {"accessTier": "ARCHIVE_ACCESS", "days": 90},
            {"accessTier": "DEEP_ARCHIVE_ACCESS", "days": 730}]}]});
    api.create(&PostParams::default(), &bucket("good", ok))
        .await
        .unwrap();
    // Removing object lock from the spec is allowed (it stops managing the retention).
    let remove = json!({"spec": {"objectLock": null}});
    api.patch("good", &PatchParams::default(), &Patch::Merge(&remove))
        .await
        .unwrap();
}

/// The emulator's object lock, intelligent tiering and acceleration are S3's: each API has its
/// own IAM action, CreateBucket with object lock needs s3:PutBucketObjectLockConfiguration and
/// s3:PutBucketVersioning, the default retention of a bucket holding objects can change, and
/// intelligent-tiering configurations are stored, listed and deleted by id.
#[tokio::test]
async fn emulator_protection_apis_match_s3() {
    let pfx = format!("s3op-moto-{}", random(6));
    let plain = emulator_refuses_them_without_their_actions(&pfx).await;
    let full = emulator_allows_them_with_their_actions(&pfx, &plain).await;
    emulator_keeps_tiering_configurations_by_id(&full, &plain).await;
}

/// The error code of a call expected to fail.
fn code_of<T: std::fmt::Debug, E: ProvideErrorMetadata>(r: Result<T, E>) -> Option<String> {
    r.unwrap_err().code().map(String::from)
}

/// Without their own actions, each API is denied. Returns the plain bucket it creates.
async fn emulator_refuses_them_without_their_actions(pfx: &str) -> String {
    let bare = s3_user(pfx, "bare", &["s3:CreateBucket", "s3:PutBucketVersioning"]).await;
    let err = bare
        .create_bucket()
        .bucket(format!("{pfx}-locked"))
        .object_lock_enabled_for_bucket(true)
        .send()
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("AccessDenied"), "{err:?}");
    let plain = format!("{pfx}-plain");
    bare.create_bucket().bucket(&plain).send().await.unwrap();
    let denied = [
        code_of(
            bare.get_object_lock_configuration()
                .bucket(&plain)
                .send()
                .await,
        ),
        code_of(
            bare.list_bucket_intelligent_tiering_configurations()
                .bucket(&plain)
                .send()
                .await,
        ),
        code_of(
            bare.put_bucket_intelligent_tiering_configuration()
                .bucket(&plain)
                .id("a")
                .intelligent_tiering_configuration(tiering_config("a", 90))
                .send()
                .await,
        ),
        code_of(
            bare.get_bucket_accelerate_configuration()
                .bucket(&plain)
                .send()
                .await,
        ),
    ];
    assert!(
        denied.iter().all(|c| c.as_deref() == Some("AccessDenied")),
        "{denied:?}"
    );

    plain
}

/// With them, object lock is created, set and read back as S3 does. Returns the identity.
async fn emulator_allows_them_with_their_actions(pfx: &str, plain: &str) -> aws_sdk_s3::Client {
    let full = s3_user(
        pfx,
        "full",
        &[
            "s3:CreateBucket",
            "s3:PutBucketVersioning",
            "s3:PutObject",
            "s3:GetBucketObjectLockConfiguration",
            "s3:PutBucketObjectLockConfiguration",
            "s3:GetIntelligentTieringConfiguration",
            "s3:PutIntelligentTieringConfiguration",
        ],
    )
    .await;
    let locked = format!("{pfx}-locked");
    full.create_bucket()
        .bucket(&locked)
        .object_lock_enabled_for_bucket(true)
        .send()
        .await
        .unwrap();
    full.put_object()
        .bucket(&locked)
        .key("o")
        .body(b"x".to_vec().into())
        .checksum_algorithm(ChecksumAlgorithm::Crc32)
        .send()
        .await
        .unwrap();
    full.put_object_lock_configuration()
        .bucket(&locked)
        .object_lock_configuration(lock_config(ObjectLockRetentionMode::Compliance, 2))
        .send()
        .await
        .unwrap();
    assert_eq!(
        lock_of(&locked).await,
        Some((true, Some("COMPLIANCE".into()), Some(2), None))
    );
    // A bucket created without object lock has no configuration (S3's own error).
    let err = full
        .get_object_lock_configuration()
        .bucket(plain)
        .send()
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("ObjectLockConfigurationNotFoundError"));

    full
}

/// Intelligent-tiering configurations are put, read, listed and deleted by id.
async fn emulator_keeps_tiering_configurations_by_id(full: &aws_sdk_s3::Client, plain: &str) {
    for (id, days) in [("b", 200), ("a", 90)] {
        full.put_bucket_intelligent_tiering_configuration()
            .bucket(plain)
            .id(id)
            .intelligent_tiering_configuration(tiering_config(id, days))
            .send()
            .await
            .unwrap();
    }
    assert_eq!(tiering_ids(plain).await, ids(&["a", "b"]));
    let b = full
        .get_bucket_intelligent_tiering_configuration()
        .bucket(plain)
        .id("b")
        .send()
        .await
        .unwrap()
        .intelligent_tiering_configuration
        .unwrap();
    assert_eq!(b.tierings[0].days, 200);
    full.delete_bucket_intelligent_tiering_configuration()
        .bucket(plain)
        .id("b")
        .send()
        .await
        .unwrap();
    assert_eq!(tiering_ids(plain).await, ids(&["a"]));
    let err = full
        .get_bucket_intelligent_tiering_configuration()
        .bucket(plain)
        .id("b")
        .send()
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("NoSuchConfiguration"), "{err:?}");
}
