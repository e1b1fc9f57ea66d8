//! An upgrade from the operator as it was before classes existed to this tree's: the objects the
//! earlier release made stay Ready throughout, the new operator finds nothing to change in AWS,
//! the credentials already handed out keep working, and only a class made afterwards brings a
//! Bucket under it.
//! The CRDs are cluster-wide and shared with the tests running beside this one, so they cannot
//! be swapped for the earlier release's: both operators run with the current CRDs installed,
//! which only add optional fields the earlier release never reads or writes.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use s3_operator::api::{Bucket, BucketAccess, BucketClass};
use serde_json::json;

use crate::access::{access, get, put};
use crate::node::ReadyWatch;
use crate::support::*;

const T: Duration = Duration::from_secs(60);
/// The namespace label the test's default class selects: no other test's namespace has it.
const LABEL: &str = "e2e-upgrade";

/// The operator binary before classes existed: `S3OP_PREVIOUS_OPERATOR` (hack/test.sh sets it),
/// else built or reused by `hack/tools.sh previous_operator`.
fn previous_operator() -> PathBuf {
    if let Ok(path) = std::env::var("S3OP_PREVIOUS_OPERATOR") {
        return path.into();
    }
    let out = std::process::Command::new("bash")
        .args([
            "-c",
            "source hack/lib.sh && hack/tools.sh previous_operator >&2 && previous_operator_path",
        ])
        .current_dir(repo())
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("run hack/tools.sh previous_operator");
    assert!(
        out.status.success(),
        "hack/tools.sh previous_operator failed"
    );
    String::from_utf8_lossy(&out.stdout).trim().into()
}

#[tokio::test]
async fn upgrade_from_an_install_without_classes_keeps_every_object_ready() {
    let previous = previous_operator();
    let client = admin().await;
    let ns = namespace(&client, "upg").await;
    let value = random(6);
    let patch = json!({"metadata": {"labels": {LABEL: &value}}});
    Api::<Namespace>::all(client.clone())
        .patch(&ns, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("label namespace");
    // One installation (cluster name, ServiceAccount, IAM user) for both releases, as an
    // upgrade in place keeps them.
    let id = Identity::new(std::slice::from_ref(&ns), None).await;
    let opts = |binary: Option<PathBuf>| OperatorOpts {
        namespaces: vec![ns.clone()],
        resync: "3s",
        binary,
        ..Default::default()
    };
    let old = Operator::start_as(&id, &opts(Some(previous)), "0").await;
    let (s3_name, creds) = ready_under_the_previous_release(&client, &ns).await;
    assert_eq!(
        class_label(&old.metrics().await),
        Some(false),
        "the earlier release runs first"
    );
    let mut watch = ReadyWatch::start(&ns, "data", "rw");
    watch.listed().await;
    // The handover of an upgrade: the old process stops cleanly before the new one starts.
    assert_eq!(
        old.terminate().await,
        Some(0),
        "the earlier release stops cleanly"
    );

    let sent = Sent::now(&id.aws_key.0, &id.kube_user).await;
    let new = Operator::start_as(&id, &opts(None), "1").await;
    the_new_release_changes_nothing(&new, &client, &ns, &sent, &creds, &s3_name).await;
    let class = a_default_class_takes_the_bucket_in(&client, &ns, &value, &s3_name).await;

    let not_ready = watch.finish().await;
    delete_class(&client, &class).await;
    new.terminate().await;
    assert!(
        not_ready.is_empty(),
        "the objects stopped being Ready across the upgrade: {not_ready:?}"
    );
}

/// A Bucket and a ReadWrite BucketAccess become Ready under the earlier release, and the
/// credentials it wrote work. Returns the bucket's name and the Secret's data.
async fn ready_under_the_previous_release(
    client: &kube::Client,
    ns: &str,
) -> (String, BTreeMap<String, String>) {
    let buckets = Api::<Bucket>::namespaced(client.clone(), ns);
    let accesses = Api::<BucketAccess>::namespaced(client.clone(), ns);
    // Most of what a Bucket sets, so the new release compares each with what the old one wrote.
    let spec = json!({"deletionPolicy": "Delete", "forceDelete": true, "tags": {"team": "media"},
        "versioning": "Enabled", "encryption": {"algorithm": "AES256"},
        "lifecycleRules": [{"id": "expire-tmp", "prefix": "tmp/", "expirationDays": 7}]});
    buckets
        .create(&PostParams::default(), &bucket("data", spec))
        .await
        .unwrap();
    let grant = json!({"bucketRef": {"name": "data"}, "permission": "ReadWrite",
        "credentials": {"rotation": {"interval": "720h", "gracePeriod": "1h"}}});
    accesses
        .create(&PostParams::default(), &access("rw", grant))
        .await
        .unwrap();
    let s3_name = wait_ready(&buckets, "data").await;
    wait_reason(&accesses, "rw", "Available", T).await;
    let creds = secret_data(
        &Api::<Secret>::namespaced(client.clone(), ns)
            .get("rw")
            .await
            .unwrap(),
    );
    read_write(&creds, &s3_name, "before.txt").await;
    (s3_name, creds)
}

/// The current release, on what the earlier one made: through its first passes and two resyncs
/// it writes nothing to AWS, sets no class, leaves the Secret as it was, and those credentials
/// still read and write.
async fn the_new_release_changes_nothing(
    new: &Operator,
    client: &kube::Client,
    ns: &str,
    sent: &Sent,
    creds: &BTreeMap<String, String>,
    s3_name: &str,
) {
    new.two_more_calls("GetBucketTagging").await;
    new.two_more_calls("ListAccessKeys").await;
    assert_eq!(
        class_label(&new.metrics().await),
        Some(true),
        "this tree's release runs second"
    );
    let writes = sent.writes().await;
    eprintln!("writes of the upgraded operator so far: {writes:?}");
    let aws: Vec<&String> = writes.iter().filter(|w| w.starts_with("AWS ")).collect();
    assert!(
        aws.is_empty(),
        "the upgraded operator wrote to AWS: {aws:?}"
    );
    let buckets = Api::<Bucket>::namespaced(client.clone(), ns);
    let accesses = Api::<BucketAccess>::namespaced(client.clone(), ns);
    let b = buckets.get("data").await.unwrap().status.unwrap();
    let a = accesses.get("rw").await.unwrap().status.unwrap();
    assert_eq!(
        b.class_name, None,
        "no class exists, yet the Bucket has one"
    );
    assert_eq!(
        a.class_name, None,
        "no class exists, yet the BucketAccess has one"
    );
    let now = secret_data(
        &Api::<Secret>::namespaced(client.clone(), ns)
            .get("rw")
            .await
            .unwrap(),
    );
    assert_eq!(&now, creds, "the upgrade changed the Secret");
    read_write(creds, s3_name, "after.txt").await;
}

/// A default BucketClass for the namespace's label, with a tag default: the Bucket comes under
/// it (status.className) and S3 gets the tag beside the Bucket's own. Returns the class's name.
async fn a_default_class_takes_the_bucket_in(
    client: &kube::Client,
    ns: &str,
    value: &str,
    s3_name: &str,
) -> String {
    let name = format!("e2e-upg-{}", random(6));
    let class: BucketClass = serde_json::from_value(json!({
        "apiVersion": "s3.operator.dev/v1alpha1", "kind": "BucketClass",
        "metadata": {"name": name, "annotations": {"s3.operator.dev/is-default-class": "true"}},
        "spec": {"namespaceSelector": {"matchLabels": {LABEL: value}},
                 "defaults": {"tags": {"cost": "shared"}}},
    }))
    .expect("a BucketClass");
    Api::<BucketClass>::all(client.clone())
        .create(&PostParams::default(), &class)
        .await
        .expect("create BucketClass");
    let buckets = Api::<Bucket>::namespaced(client.clone(), ns);
    wait_for("the Bucket to come under the class", T, || async {
        let status = buckets.get("data").await.ok()?.status?;
        (status.class_name.as_deref() == Some(name.as_str())).then_some(())
    })
    .await;
    wait_for("the class's tag in S3", T, || async {
        let tags = bucket_tags(s3_name).await;
        (tags.get("cost").map(String::as_str) == Some("shared")).then_some(tags)
    })
    .await;
    let tags = bucket_tags(s3_name).await;
    assert_eq!(
        tags.get("team").map(String::as_str),
        Some("media"),
        "{tags:?}"
    );
    // What the class brought is an update of the Bucket, not drift someone made in AWS.
    wait_event(ns, "Updated", &["tags"]).await;
    let drift = events_with(ns, "DriftCorrected").await;
    assert!(
        drift.is_empty(),
        "a class edit reported as drift: {drift:?}"
    );
    name
}

async fn delete_class(client: &kube::Client, name: &str) {
    Api::<BucketClass>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await
        .expect("delete BucketClass");
}

/// Whether the managed-objects gauge has the class label this tree added (`None`: no series):
/// which release is running.
fn class_label(metrics: &str) -> Option<bool> {
    let series: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("s3_operator_managed_objects{"))
        .collect();
    (!series.is_empty()).then(|| series.iter().any(|l| l.contains("class=\"")))
}

/// Writes `key` with the Secret's credentials and reads it back.
async fn read_write(creds: &BTreeMap<String, String>, bucket: &str, key: &str) {
    let s3 = s3_with(&creds["AWS_ACCESS_KEY_ID"], &creds["AWS_SECRET_ACCESS_KEY"]);
    put(&s3, bucket, key)
        .await
        .unwrap_or_else(|e| panic!("the Secret's credentials write {key}: {e}"));
    let body = get(&s3, bucket, key)
        .await
        .unwrap_or_else(|e| panic!("the Secret's credentials read {key}: {e}"));
    assert_eq!(body, b"data");
}
