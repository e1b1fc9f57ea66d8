//! BucketAccess end to end: scoped credentials that really work (and really fail), the Secret
//! restored, rotation with a grace period, and full IAM clean-up (IRSA roles: workload_identity.rs).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use s3_operator::api::{Bucket, BucketAccess, FINALIZER};
use s3_operator::aws::{naming, tags};
use serde_json::json;

use crate::support::*;

const T: Duration = Duration::from_secs(60);

pub fn access(name: &str, spec: serde_json::Value) -> BucketAccess {
    serde_json::from_value(json!({"apiVersion": "s3.operator.dev/v1alpha1", "kind": "BucketAccess", "metadata": {"name": name}, "spec": spec}))
        .expect("valid BucketAccess")
}

pub(crate) async fn keys_of(user: &str) -> Vec<String> {
    let out = admin_iam().list_access_keys().user_name(user).send().await;
    out.map(|o| {
        o.access_key_metadata
            .into_iter()
            .filter_map(|k| k.access_key_id)
            .collect()
    })
    .unwrap_or_default()
}

fn user_name(arn: &str) -> String {
    arn.rsplit('/').next().unwrap().to_string()
}

pub(crate) async fn put(s3: &aws_sdk_s3::Client, bucket: &str, key: &str) -> Result<(), String> {
    s3.put_object()
        .bucket(bucket)
        .key(key)
        .body(b"data".to_vec().into())
        .send()
        .await
        .map(drop)
        .map_err(|e| format!("{e:?}"))
}

pub(crate) async fn get(
    s3: &aws_sdk_s3::Client,
    bucket: &str,
    key: &str,
) -> Result<Vec<u8>, String> {
    let out = s3
        .get_object()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .map_err(|e| format!("{e:?}"))?;
    Ok(out
        .body
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .into_bytes()
        .to_vec())
}

#[tokio::test]
async fn credentials_grant_exactly_their_permission_and_are_cleaned_up() {
    let client = admin().await;
    let ns = namespace(&client, "bka").await;
    let op = Operator::start(OperatorOpts {
        namespaces: vec![ns.clone()],
        ..Default::default()
    })
    .await;
    let accesses = Api::<BucketAccess>::namespaced(client.clone(), &ns);
    let secrets = Api::<Secret>::namespaced(client.clone(), &ns);
    let (data, other) = grants_wait_for_their_bucket_then_become_available(&client, &ns).await;
    let (d, user_arn) =
        secret_holds_every_sdk_key_and_is_owned(&op, &accesses, &secrets, &data).await;
    let rw_s3 = read_write_works_on_its_bucket_only(&d, &data, &other).await;
    let ro = read_only_reads_but_cannot_write(&secrets, &data).await;
    let wo = write_only_writes_under_its_prefix_only(&secrets, &data).await;
    secrets_never_reach_status_events_logs_or_metrics(&op, &client, &ns, [&d, &ro, &wo]).await;
    access_key_age_is_exported(&op).await;
    deleting_an_access_removes_its_user_and_secret(&accesses, &secrets, &user_arn, &rw_s3, &data)
        .await;
}

/// Waits with a clear reason for a Bucket that does not exist yet; then `rw`, `ro` (its Secret
/// named `ro-creds`) and `wo` (under `inbox/`) on `data` become Available. Returns the physical
/// names of `data` and `other`.
async fn grants_wait_for_their_bucket_then_become_available(
    client: &kube::Client,
    ns: &str,
) -> (String, String) {
    let buckets = Api::<Bucket>::namespaced(client.clone(), ns);
    let accesses = Api::<BucketAccess>::namespaced(client.clone(), ns);
    accesses
        .create(
            &PostParams::default(),
            &access(
                "rw",
                json!({"bucketRef": {"name": "data"}, "permission": "ReadWrite"}),
            ),
        )
        .await
        .unwrap();
    wait_reason(&accesses, "rw", "BucketNotFound", T).await;
    buckets
        .create(
            &PostParams::default(),
            &bucket(
                "data",
                json!({"deletionPolicy": "Delete", "forceDelete": true}),
            ),
        )
        .await
        .unwrap();
    buckets
        .create(
            &PostParams::default(),
            &bucket(
                "other",
                json!({"deletionPolicy": "Delete", "forceDelete": true}),
            ),
        )
        .await
        .unwrap();
    let data = wait_ready(&buckets, "data").await;
    let other = wait_ready(&buckets, "other").await;
    wait_reason(&accesses, "rw", "Available", T).await;
    accesses
        .create(&PostParams::default(), &access("ro", json!({"bucketRef": {"name": "data"}, "permission": "ReadOnly", "credentials": {"secretName": "ro-creds"}})))
        .await
        .unwrap();
    accesses
        .create(&PostParams::default(), &access("wo", json!({"bucketRef": {"name": "data"}, "permission": "WriteOnly", "prefix": "inbox/"})))
        .await
        .unwrap();
    wait_reason(&accesses, "ro", "Available", T).await;
    wait_reason(&accesses, "wo", "Available", T).await;
    (data, other)
}

/// The Secret: every key an SDK needs, owned by its BucketAccess, labelled as ours. Returns its
/// data and the IAM user's ARN from status.
async fn secret_holds_every_sdk_key_and_is_owned(
    op: &Operator,
    accesses: &Api<BucketAccess>,
    secrets: &Api<Secret>,
    data: &str,
) -> (BTreeMap<String, String>, String) {
    let rw_secret = secrets.get("rw").await.unwrap();
    let d = secret_data(&rw_secret);
    for k in [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_REGION",
        "BUCKET_NAME",
        "BUCKET_ARN",
        "AWS_ENDPOINT_URL_S3",
    ] {
        assert!(d.contains_key(k), "Secret lacks {k}");
    }
    assert_eq!(d["BUCKET_NAME"], data);
    assert_eq!(d["AWS_ENDPOINT_URL_S3"], env().aws_endpoint);
    let rw = accesses.get("rw").await.unwrap();
    assert_eq!(
        rw_secret.metadata.owner_references.as_ref().unwrap()[0].uid,
        rw.metadata.uid.clone().unwrap()
    );
    assert_eq!(
        rw_secret.metadata.labels.as_ref().unwrap()["app.kubernetes.io/managed-by"],
        "s3-operator"
    );
    let st = rw.status.clone().unwrap();
    assert_eq!(
        st.access_key_id.as_deref(),
        Some(d["AWS_ACCESS_KEY_ID"].as_str())
    );
    let user_arn = st.user_arn.clone().unwrap();
    assert!(
        user_arn.contains(&format!(":user/s3-operator/{}/", op.cluster)),
        "{user_arn}"
    );
    (d, user_arn)
}

/// ReadWrite works on its bucket and nowhere else.
async fn read_write_works_on_its_bucket_only(
    d: &BTreeMap<String, String>,
    data: &str,
    other: &str,
) -> aws_sdk_s3::Client {
    let rw_s3 = s3_with(&d["AWS_ACCESS_KEY_ID"], &d["AWS_SECRET_ACCESS_KEY"]);
    put(&rw_s3, data, "a.txt")
        .await
        .expect("ReadWrite may write");
    assert_eq!(get(&rw_s3, data, "a.txt").await.unwrap(), b"data");
    let err = put(&rw_s3, other, "a.txt").await.unwrap_err();
    assert!(err.contains("AccessDenied"), "{err}");
    assert!(get(&rw_s3, other, "x").await.is_err());
    rw_s3
}

/// ReadOnly reads but may not write.
async fn read_only_reads_but_cannot_write(
    secrets: &Api<Secret>,
    data: &str,
) -> BTreeMap<String, String> {
    let ro = secret_data(&secrets.get("ro-creds").await.unwrap());
    let ro_s3 = s3_with(&ro["AWS_ACCESS_KEY_ID"], &ro["AWS_SECRET_ACCESS_KEY"]);
    assert_eq!(get(&ro_s3, data, "a.txt").await.unwrap(), b"data");
    assert!(
        put(&ro_s3, data, "b.txt")
            .await
            .unwrap_err()
            .contains("AccessDenied")
    );
    ro
}

/// WriteOnly under a prefix writes there only, and cannot read.
async fn write_only_writes_under_its_prefix_only(
    secrets: &Api<Secret>,
    data: &str,
) -> BTreeMap<String, String> {
    let wo = secret_data(&secrets.get("wo").await.unwrap());
    let wo_s3 = s3_with(&wo["AWS_ACCESS_KEY_ID"], &wo["AWS_SECRET_ACCESS_KEY"]);
    put(&wo_s3, data, "inbox/c.txt")
        .await
        .expect("WriteOnly may write under its prefix");
    assert!(
        put(&wo_s3, data, "c.txt")
            .await
            .unwrap_err()
            .contains("AccessDenied")
    );
    assert!(get(&wo_s3, data, "inbox/c.txt").await.is_err());
    // The trailing '/' is what keeps a sibling out: "inbox/" does not cover "inbox-other/".
    assert!(
        put(&wo_s3, data, "inbox-other/c.txt")
            .await
            .unwrap_err()
            .contains("AccessDenied")
    );
    wo
}

/// Secrets never reach status, events or logs.
async fn secrets_never_reach_status_events_logs_or_metrics(
    op: &Operator,
    client: &kube::Client,
    ns: &str,
    issued: [&BTreeMap<String, String>; 3],
) {
    let secret_values = issued.map(|d| &d["AWS_SECRET_ACCESS_KEY"]);
    let accesses = Api::<BucketAccess>::namespaced(client.clone(), ns);
    let status_text =
        serde_json::to_string(&accesses.list(&ListParams::default()).await.unwrap()).unwrap();
    let events_text = serde_json::to_string(
        &Api::<Event>::namespaced(client.clone(), ns)
            .list(&ListParams::default())
            .await
            .unwrap(),
    )
    .unwrap();
    let metrics_text = op.metrics().await;
    for s in secret_values {
        assert!(
            !status_text.contains(s.as_str())
                && !events_text.contains(s.as_str())
                && !op.log_text().contains(s.as_str())
                && !metrics_text.contains(s.as_str())
        );
    }
}

/// The oldest managed key's age is exported.
async fn access_key_age_is_exported(op: &Operator) {
    wait_for("access key age metric", T, || async {
        (op.metric("s3_operator_access_key_max_age_seconds", &[])
            .await
            > 0.0)
            .then_some(())
    })
    .await;
}

/// Deleting a BucketAccess removes its keys, policy and user; the Secret is garbage-collected.
async fn deleting_an_access_removes_its_user_and_secret(
    accesses: &Api<BucketAccess>,
    secrets: &Api<Secret>,
    user_arn: &str,
    rw_s3: &aws_sdk_s3::Client,
    data: &str,
) {
    let user = user_name(user_arn);
    assert_eq!(keys_of(&user).await.len(), 1);
    accesses
        .delete("rw", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("BucketAccess rw gone", T, || async {
        accesses
            .get_opt("rw")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    assert!(
        admin_iam()
            .get_user()
            .user_name(&user)
            .send()
            .await
            .is_err(),
        "IAM user deleted"
    );
    wait_for("Secret garbage-collected", T, || async {
        secrets.get_opt("rw").await.unwrap().is_none().then_some(())
    })
    .await;
    assert!(
        put(rw_s3, data, "z").await.is_err(),
        "old credentials no longer work"
    );
}

#[tokio::test]
async fn secret_is_restored_and_keys_rotate_without_outage() {
    let client = admin().await;
    let ns = namespace(&client, "rot").await;
    let _op = Operator::start(OperatorOpts {
        namespaces: vec![ns.clone()],
        resync: "30s",
        ..Default::default()
    })
    .await;
    let accesses = Api::<BucketAccess>::namespaced(client.clone(), &ns);
    let secrets = Api::<Secret>::namespaced(client.clone(), &ns);
    let (name, user, first) = rotating_access_becomes_available(&client, &ns).await;
    an_edited_secret_is_restored_without_a_new_key(&secrets, &name, &first).await;
    rotation_keeps_the_old_key_through_its_grace_period(&accesses, &secrets, &user, &name, &first)
        .await;
    a_deleted_secret_comes_back_with_working_credentials(&secrets, &name, &user).await;
}

/// BucketAccess `app` rotating every 12s with a 4s grace period becomes Available with both
/// rotation times in status. Returns the bucket's physical name, the IAM user and the first
/// Secret's data.
async fn rotating_access_becomes_available(
    client: &kube::Client,
    ns: &str,
) -> (String, String, BTreeMap<String, String>) {
    let b = bucket(
        "b",
        json!({"deletionPolicy": "Delete", "forceDelete": true}),
    );
    let spec = json!({"bucketRef": {"name": "b"}, "permission": "ReadWrite", "credentials": {"rotation": {"interval": "12s", "gracePeriod": "4s"}}});
    let pair = AccessPair::create(client, ns, b, access("app", spec)).await;
    let first = pair.secret_data().await;
    let status = pair.access.status.clone().unwrap();
    assert!(status.next_rotation_time.is_some() && status.last_rotation_time.is_some());
    (pair.s3_name.clone(), pair.user(), first)
}

/// An edited Secret is put back (non-credential data), without issuing a new key.
async fn an_edited_secret_is_restored_without_a_new_key(
    secrets: &Api<Secret>,
    name: &str,
    first: &BTreeMap<String, String>,
) {
    secrets
        .patch(
            "app",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"BUCKET_NAME": "tampered"}})),
        )
        .await
        .unwrap();
    wait_for("edited Secret restored", T, || async {
        let d = secret_data(&secrets.get("app").await.ok()?);
        (d["BUCKET_NAME"] == name).then_some(())
    })
    .await;
    assert_eq!(
        secret_data(&secrets.get("app").await.unwrap())["AWS_ACCESS_KEY_ID"],
        first["AWS_ACCESS_KEY_ID"]
    );
}

/// Rotation: a new key reaches the Secret; the old one keeps working through the grace period
/// and is deleted after it; the user never holds more than two keys.
async fn rotation_keeps_the_old_key_through_its_grace_period(
    accesses: &Api<BucketAccess>,
    secrets: &Api<Secret>,
    user: &str,
    name: &str,
    first: &BTreeMap<String, String>,
) {
    let max_keys = std::sync::atomic::AtomicUsize::new(0);
    let rotated = wait_for("a rotated key", Duration::from_secs(40), || async {
        max_keys.fetch_max(
            keys_of(user).await.len(),
            std::sync::atomic::Ordering::SeqCst,
        );
        let d = secret_data(&secrets.get("app").await.ok()?);
        (d["AWS_ACCESS_KEY_ID"] != first["AWS_ACCESS_KEY_ID"]).then_some(d)
    })
    .await;
    let old_s3 = s3_with(&first["AWS_ACCESS_KEY_ID"], &first["AWS_SECRET_ACCESS_KEY"]);
    let new_s3 = s3_with(
        &rotated["AWS_ACCESS_KEY_ID"],
        &rotated["AWS_SECRET_ACCESS_KEY"],
    );
    put(&new_s3, name, "new")
        .await
        .expect("new key works at once");
    put(&old_s3, name, "old")
        .await
        .expect("old key still works during the grace period");
    wait_for(
        "old key deleted after the grace period",
        Duration::from_secs(20),
        || async {
            max_keys.fetch_max(
                keys_of(user).await.len(),
                std::sync::atomic::Ordering::SeqCst,
            );
            (!keys_of(user).await.contains(&first["AWS_ACCESS_KEY_ID"])).then_some(())
        },
    )
    .await;
    assert!(put(&old_s3, name, "late").await.is_err(), "old key revoked");
    let max_keys = max_keys.into_inner();
    assert!(max_keys <= 2, "never more than two keys (saw {max_keys})");
    let status = accesses.get("app").await.unwrap().status.unwrap();
    assert_eq!(
        status.access_key_id.as_deref(),
        Some(rotated["AWS_ACCESS_KEY_ID"].as_str())
    );
}

/// A deleted Secret comes back with working credentials.
async fn a_deleted_secret_comes_back_with_working_credentials(
    secrets: &Api<Secret>,
    name: &str,
    user: &str,
) {
    secrets
        .delete("app", &DeleteParams::default())
        .await
        .unwrap();
    let restored = wait_for("deleted Secret restored", T, || async {
        secrets.get_opt("app").await.ok()?.map(|s| secret_data(&s))
    })
    .await;
    let s3 = s3_with(
        &restored["AWS_ACCESS_KEY_ID"],
        &restored["AWS_SECRET_ACCESS_KEY"],
    );
    put(&s3, name, "after-restore")
        .await
        .expect("restored credentials work");
    assert!(keys_of(user).await.len() <= 2);
}

/// How soon a deleted or edited Secret must be back: its own watch event, not a resync.
const RESTORED_WITHIN: Duration = Duration::from_secs(15);

/// A deleted or edited Secret is put back within seconds, with working credentials, by an
/// operator at its default resync period (10 minutes) on an access that does not rotate: only
/// the Secret's own watch event can bring it back in time. The Secret is deleted right after
/// the pass that created it, whose record of its own writes must not take the deletion for
/// their echo.
#[tokio::test]
async fn a_deleted_or_edited_secret_is_restored_within_seconds_without_a_resync() {
    let client = admin().await;
    let ns = namespace(&client, "restore").await;
    let op = Operator::start(OperatorOpts {
        namespaces: vec![ns.clone()],
        resync: "10m",
        ..Default::default()
    })
    .await;
    let b = bucket(
        "b",
        json!({"deletionPolicy": "Delete", "forceDelete": true}),
    );
    let spec = json!({"bucketRef": {"name": "b"}, "permission": "ReadWrite"});
    let pair = AccessPair::create(&client, &ns, b, access("app", spec)).await;
    let user = pair.user();
    let first = pair.secret_data().await;
    let AccessPair {
        accesses,
        secrets,
        s3_name: name,
        ..
    } = pair;
    let drift_before = op.drift_corrections("secret").await;

    // Deleted: back within seconds, with a new key (the old secret key is lost with it), the
    // only key the user holds, and reported in status.
    secrets
        .delete("app", &DeleteParams::default())
        .await
        .unwrap();
    let recreated = restored(&accesses, &secrets, "the deleted Secret", |d| {
        d.get("AWS_ACCESS_KEY_ID") != first.get("AWS_ACCESS_KEY_ID")
    })
    .await;
    credentials_work(&recreated, &name, "after-delete").await;
    assert_eq!(
        keys_of(&user).await,
        [recreated["AWS_ACCESS_KEY_ID"].clone()]
    );
    assert!(op.drift_corrections("secret").await > drift_before);

    // A value other than the credentials edited: put back, with the same key.
    secrets
        .patch(
            "app",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"BUCKET_NAME": "tampered"}})),
        )
        .await
        .unwrap();
    let back = restored(&accesses, &secrets, "the edited BUCKET_NAME", |d| {
        d["BUCKET_NAME"] == name
    })
    .await;
    assert_eq!(back, recreated, "nothing else changed, no new key");

    // The secret key overwritten: the pair is no longer the one issued, so a new key replaces
    // it and the old one goes.
    secrets
        .patch(
            "app",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"AWS_SECRET_ACCESS_KEY": "tampered"}})),
        )
        .await
        .unwrap();
    let reissued = restored(&accesses, &secrets, "the overwritten secret key", |d| {
        d["AWS_SECRET_ACCESS_KEY"] != "tampered"
            && d["AWS_ACCESS_KEY_ID"] != recreated["AWS_ACCESS_KEY_ID"]
    })
    .await;
    credentials_work(&reissued, &name, "after-edit").await;
    assert_eq!(
        keys_of(&user).await,
        [reissued["AWS_ACCESS_KEY_ID"].clone()]
    );
}

/// Waits up to `RESTORED_WITHIN` for the Secret to satisfy `ok` and the access to report it
/// (Available, with the Secret's key id in status); returns the Secret's data.
async fn restored(
    accesses: &Api<BucketAccess>,
    secrets: &Api<Secret>,
    what: &str,
    ok: impl Fn(&BTreeMap<String, String>) -> bool,
) -> BTreeMap<String, String> {
    let start = std::time::Instant::now();
    let data = wait_for(&format!("{what} restored"), RESTORED_WITHIN, || async {
        let d = secret_data(&secrets.get_opt("app").await.ok()??);
        let status = accesses.get("app").await.ok()?.status?;
        let key = status.access_key_id.as_deref()?;
        let available = status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True" && c.reason == "Available");
        (ok(&d) && available && d.get("AWS_ACCESS_KEY_ID").map(String::as_str) == Some(key))
            .then_some(d)
    })
    .await;
    eprintln!("{what} restored in {:.1}s", start.elapsed().as_secs_f64());
    data
}

async fn credentials_work(d: &BTreeMap<String, String>, bucket: &str, key: &str) {
    let s3 = s3_with(&d["AWS_ACCESS_KEY_ID"], &d["AWS_SECRET_ACCESS_KEY"]);
    put(&s3, bucket, key)
        .await
        .expect("restored credentials work");
}

/// A BucketAccess created right after its Bucket reports once, Available, even when the
/// Bucket's watch events reach the operator seconds after the access's (as a loaded API server
/// may deliver them: nothing orders two kinds' events): it never reports a Bucket that exists
/// as not found, then its progress. (Under load in CI that flip was half a status write per
/// access more than the benchmark's one.)
#[tokio::test]
async fn an_access_reports_once_when_its_buckets_events_come_late() {
    let client = admin().await;
    let ns = namespace(&client, "lag").await;
    let opts = OperatorOpts {
        namespaces: vec![ns.clone()],
        resync: "10m",
        ..Default::default()
    };
    let id = Identity::new(&opts.namespaces, None).await;
    let lag = WatchLag::start("buckets", Duration::from_secs(3)).await;
    let op = Operator::start_as(&id.via(&lag.url), &opts, "0").await;
    let buckets = Api::<Bucket>::namespaced(client.clone(), &ns);
    let accesses = Api::<BucketAccess>::namespaced(client.clone(), &ns);
    let reported = tokio::spawn(reasons_until_available(accesses.clone(), "app"));
    buckets
        .create(
            &PostParams::default(),
            &bucket("b", json!({"deletionPolicy": "Delete"})),
        )
        .await
        .unwrap();
    let spec = json!({"bucketRef": {"name": "b"}, "permission": "ReadWrite"});
    accesses
        .create(&PostParams::default(), &access("app", spec))
        .await
        .unwrap();
    let reasons = tokio::time::timeout(T, reported)
        .await
        .expect("app Available in time")
        .unwrap();
    assert_eq!(reasons, ["Available"], "every status app reported");
    let writes = [("kind", "BucketAccess"), ("verb", "patch_status")];
    assert_eq!(
        op.metric("s3_operator_kube_writes_total", &writes).await,
        1.0
    );
}

/// The Ready reason of every status `name` reports, in order, until it is Available.
async fn reasons_until_available(api: Api<BucketAccess>, name: &'static str) -> Vec<String> {
    use futures::TryStreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut objects = std::pin::pin!(watcher(api, cfg).applied_objects());
    let mut reasons: Vec<String> = Vec::new();
    while let Some(a) = objects.try_next().await.expect("watch") {
        let reason = a.status.as_ref().and_then(|s| {
            let ready = s.conditions.iter().find(|c| c.type_ == "Ready")?;
            Some(ready.reason.clone())
        });
        if let Some(r) = reason
            && reasons.last() != Some(&r)
        {
            reasons.push(r);
        }
        if reasons.last().is_some_and(|r| r == "Available") {
            return reasons;
        }
    }
    panic!("watch ended");
}

/// An IAM user named as operators before this one named them (the UID's hash cut to 8 hex
/// digits) keeps its name: the access goes on with it, with no second user, even after a tenant
/// wipes `status.userArn`, and deleting the access deletes it. A new access's user carries 16
/// hex digits (before: 8, which this test refuses).
#[tokio::test]
async fn identities_carry_a_long_uid_hash_and_legacy_names_are_kept_and_cleaned_up() {
    let client = admin().await;
    let ns = namespace(&client, "names").await;
    let opts = OperatorOpts {
        namespaces: vec![ns.clone()],
        resync: "10m",
        ..Default::default()
    };
    let id = Identity::new(&opts.namespaces, None).await;
    let op = Operator::start_as(&id, &opts, "0").await;
    let spec = json!({"bucketRef": {"name": "b"}, "permission": "ReadOnly"});
    let b = bucket("b", json!({"deletionPolicy": "Delete"}));
    let pair = AccessPair::create(&client, &ns, b, access("fresh", spec.clone())).await;
    let (fresh_uid, arn) = (pair.uid(), pair.user_arn());
    let AccessPair { accesses, .. } = pair;
    assert_eq!(
        arn.rsplit('/').next(),
        Some(naming::iam_name(&ns, "fresh", &fresh_uid).as_str())
    );
    let hash = arn.rsplit('-').next().unwrap();
    assert!(hash.len() >= 12, "the UID's hash in {arn} is short");

    // What an earlier operator left: the access with its finalizer (which every release puts
    // on before making anything) and its user under the short name, made as it made it (path,
    // boundary, ownership tags), while no operator runs.
    op.terminate().await;
    let mut old = access("old", spec);
    old.metadata.finalizers = Some(vec![FINALIZER.to_string()]);
    let created = accesses.create(&PostParams::default(), &old).await.unwrap();
    let legacy_uid = created.metadata.uid.unwrap();
    let legacy = naming::legacy_iam_name(&ns, "old", &legacy_uid);
    let owner = tags::Owner {
        cluster: id.cluster.clone(),
        namespace: ns.clone(),
        name: "old".into(),
        uid: legacy_uid.clone(),
    };
    let mut create = admin_iam()
        .create_user()
        .user_name(&legacy)
        .path(naming::iam_path(&id.cluster))
        .permissions_boundary(scope(&id.cluster).boundary_arn());
    for (k, v) in owner.tags() {
        create = create.tags(
            aws_sdk_iam::types::Tag::builder()
                .key(k)
                .value(v)
                .build()
                .unwrap(),
        );
    }
    create.send().await.expect("the legacy user");
    let _op = Operator::start_as(&id, &opts, "1").await;
    wait_reason(&accesses, "old", "Available", T).await;
    let new = naming::iam_name(&ns, "old", &legacy_uid);
    let kept = |want: &'static str| {
        let (accesses, legacy, new) = (accesses.clone(), legacy.clone(), new.clone());
        async move {
            let arn = user_arn_of(&accesses, "old").await;
            assert!(arn.ends_with(&format!("/{legacy}")), "{want}: {arn}");
            let got = admin_iam().get_user().user_name(&new).send().await;
            assert!(got.is_err(), "{want}: a second user {new} was made");
            let keys = admin_iam()
                .list_access_keys()
                .user_name(&legacy)
                .send()
                .await;
            assert_eq!(keys.unwrap().access_key_metadata.len(), 1, "{want}");
        }
    };
    kept("after the upgrade").await;

    // A tenant wipes the status that recorded the name: the next pass finds the user by its
    // tags under the short name and records it again.
    let wipe = json!({"status": {"userArn": null}});
    let params = PatchParams::default();
    accesses
        .patch_status("old", &params, &Patch::Merge(&wipe))
        .await
        .unwrap();
    let now = json!({"metadata": {"annotations": {
        "s3.operator.dev/reconcile-requested-at": jiff::Timestamp::now().to_string()}}});
    accesses
        .patch("old", &params, &Patch::Merge(&now))
        .await
        .unwrap();
    wait_for("the name recorded again", T, || async {
        let a = accesses.get("old").await.ok()?;
        a.status?
            .user_arn
            .filter(|arn| arn.ends_with(&legacy))
            .map(drop)
    })
    .await;
    kept("after a wiped status").await;

    accesses
        .delete("old", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the legacy user to go", T, || async {
        let got = admin_iam().get_user().user_name(&legacy).send().await;
        got.is_err().then_some(())
    })
    .await;
}

async fn user_arn_of(accesses: &Api<BucketAccess>, name: &str) -> String {
    let a = accesses.get(name).await.unwrap();
    a.status.and_then(|s| s.user_arn).expect("status.userArn")
}
