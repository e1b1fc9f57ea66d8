//! Buckets with attribute-based access control (ABAC) on: S3 then refuses PutBucketTagging, so
//! a tag change is reported as such (Ready=False naming the setting) while the ownership tags and
//! every other aspect stay as they should; the emulator refuses the way S3 does.

use std::time::Duration;

use aws_sdk_s3::types::{AbacStatus, BucketAbacStatus, Tag, Tagging};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::security::code;
use crate::support::*;

const T: Duration = Duration::from_secs(60);

fn tagging(key: &str, value: &str) -> Tagging {
    let tag = Tag::builder().key(key).value(value).build().unwrap();
    Tagging::builder().tag_set(tag).build().unwrap()
}

async fn set_abac(s3: &aws_sdk_s3::Client, bucket: &str, status: BucketAbacStatus) {
    s3.put_bucket_abac()
        .bucket(bucket)
        .abac_status(AbacStatus::builder().status(status).build())
        .send()
        .await
        .unwrap();
}

async fn abac_of(s3: &aws_sdk_s3::Client, bucket: &str) -> Option<BucketAbacStatus> {
    let out = s3.get_bucket_abac().bucket(bucket).send().await.unwrap();
    out.abac_status.and_then(|s| s.status)
}

/// The emulator extension: Get/PutBucketAbac under their own IAM actions; with ABAC on,
/// PutBucketTagging and DeleteBucketTagging are refused and GetBucketTagging still answers; off
/// again, tagging is accepted.
#[tokio::test]
async fn the_emulator_refuses_bucket_tagging_while_abac_is_on() {
    let pfx = format!("abac-{}", random(6));
    let name = format!("{pfx}-b");
    let s3 = admin_s3();
    s3.create_bucket().bucket(&name).send().await.unwrap();
    assert_eq!(abac_of(&s3, &name).await, Some(BucketAbacStatus::Disabled));
    let put = |v: &'static str| {
        s3.put_bucket_tagging()
            .bucket(&name)
            .tagging(tagging("k", v))
    };
    put("1")
        .send()
        .await
        .expect("tagging accepted with ABAC off");

    let reader = s3_user(&pfx, "reader", &["s3:GetBucketABAC"]).await;
    let on = AbacStatus::builder()
        .status(BucketAbacStatus::Enabled)
        .build();
    let r = reader
        .put_bucket_abac()
        .bucket(&name)
        .abac_status(on)
        .send()
        .await;
    assert_eq!(
        code(r),
        "AccessDenied",
        "PutBucketAbac needs s3:PutBucketABAC"
    );
    assert_eq!(
        abac_of(&reader, &name).await,
        Some(BucketAbacStatus::Disabled)
    );

    set_abac(&s3, &name, BucketAbacStatus::Enabled).await;
    assert_eq!(abac_of(&s3, &name).await, Some(BucketAbacStatus::Enabled));
    assert_eq!(code(put("2").send().await), "InvalidRequest");
    let r = s3.delete_bucket_tagging().bucket(&name).send().await;
    assert_eq!(code(r), "InvalidRequest");
    assert_eq!(
        bucket_tags(&name).await.get("k").map(String::as_str),
        Some("1")
    );

    set_abac(&s3, &name, BucketAbacStatus::Disabled).await;
    put("3")
        .send()
        .await
        .expect("tagging accepted with ABAC off again");
    assert_eq!(
        bucket_tags(&name).await.get("k").map(String::as_str),
        Some("3")
    );
}

/// A managed bucket whose ABAC is turned on out of band: a tag change is reported as refused
/// because of ABAC (no retry loop), the ownership tags stay, the other aspects are still kept;
/// with ABAC off again the change goes through. A retained deletion waits the same way.
#[tokio::test]
async fn a_tag_change_on_an_abac_bucket_is_refused_clearly_and_nothing_is_lost() {
    let (op, api, _ns) = Operator::in_new_namespace("abac").await;
    let spec = json!({"tags": {"team": "a"}, "deletionPolicy": "Retain"});
    api.create(&PostParams::default(), &bucket("t", spec))
        .await
        .unwrap();
    let name = wait_ready(&api, "t").await;
    let s3 = admin_s3();
    let owned = bucket_tags(&name).await;
    assert_eq!(
        owned.len(),
        5,
        "four ownership tags and the user's: {owned:?}"
    );
    set_abac(&s3, &name, BucketAbacStatus::Enabled).await;
    let change = json!({"spec": {"tags": {"team": "b"}}});
    api.patch("t", &PatchParams::default(), &Patch::Merge(change))
        .await
        .unwrap();
    let msg = wait_reason(&api, "t", "InvalidSpec", T).await;
    for words in [
        name.as_str(),
        "(ABAC) enabled",
        "PutBucketAbac",
        "TagResource",
    ] {
        assert!(msg.contains(words), "{words}: {msg}");
    }
    assert_eq!(bucket_tags(&name).await, owned, "tags untouched");
    // The refused tag write holds back no other aspect: drift is still put back.
    s3.delete_bucket_encryption()
        .bucket(&name)
        .send()
        .await
        .unwrap();
    wait_for("encryption to be put back", T, || async {
        let got = s3.get_bucket_encryption().bucket(&name).send().await;
        got.is_ok().then_some(())
    })
    .await;
    assert!(
        wait_reason(&api, "t", "InvalidSpec", T)
            .await
            .contains("ABAC")
    );

    // Re-checked at the resync (2s), never in a loop: at most one refused write a pass.
    let tag_writes = |c: &std::collections::BTreeMap<String, u64>| {
        c.get("PUT bucket?tagging").copied().unwrap_or(0)
    };
    // Other tests' class changes wake every Bucket too, so the bound is per pass, not per time.
    let passes = || async {
        let labels = [("controller", "bucket")];
        op.metric("controller_runtime_reconcile_total", &labels)
            .await as u64
    };
    let (before, passes_before) = (emulator_requests(&op.aws_key_id).await, passes().await);
    tokio::time::sleep(Duration::from_secs(6)).await;
    let after = emulator_requests(&op.aws_key_id).await;
    let refused = tag_writes(&after) - tag_writes(&before);
    let ran = passes().await - passes_before;
    assert!(
        refused >= 1 && refused <= ran,
        "{refused} refused tag writes in 6s, by {ran} passes"
    );
    assert!(after.contains_key("GET bucket?abac"), "{after:?}");

    set_abac(&s3, &name, BucketAbacStatus::Disabled).await;
    wait_ready(&api, "t").await;
    let tags = bucket_tags(&name).await;
    assert_eq!(tags.get("team").map(String::as_str), Some("b"));
    assert_eq!(tags.len(), 5, "{tags:?}");

    // Releasing a retained bucket rewrites its tags: it waits for ABAC too, still owned.
    set_abac(&s3, &name, BucketAbacStatus::Enabled).await;
    api.delete("t", &DeleteParams::default()).await.unwrap();
    let msg = wait_reason(&api, "t", "DeletionBlocked", T).await;
    assert!(msg.contains("(ABAC) enabled"), "{msg}");
    assert_eq!(bucket_tags(&name).await.len(), 5, "still ours");
    set_abac(&s3, &name, BucketAbacStatus::Disabled).await;
    wait_for("t to be deleted", T, || async {
        api.get_opt("t").await.unwrap().is_none().then_some(())
    })
    .await;
    let released = bucket_tags(&name).await;
    assert_eq!(released.get("team").map(String::as_str), Some("b"));
    assert!(
        !released.contains_key("s3.operator.dev/uid"),
        "{released:?}"
    );
    assert!(bucket_exists(&name).await, "retained");
}
