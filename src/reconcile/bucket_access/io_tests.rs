//! A BucketAccess's whole pass (observe, apply, the Secret and status writes, withdrawal and
//! cleanup) against a fake API server and a fake IAM and S3: the paths the e2e suite cannot
//! reach cheaply (a write that loses to a newer version, a Secret created in between, a refusal
//! half way through a pass, a user not ours at deletion).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::json;

use super::keys::ANN_KEY_ID;
use super::reconcile;
use crate::api::condition::{self, Reason};
use crate::api::{Bucket, BucketAccess, FINALIZER};
use crate::aws::naming;
use crate::aws::tags::Owner;
use crate::reconcile::testing::{Fakes, Reply, events_path, iam_keys, iam_user, user_arn};
use crate::reconcile::{Context, Error, Requeue, owner};

const ACCESS: &str = "/apis/s3.operator.dev/v1alpha1/namespaces/ns/bucketaccesses/a";
const SECRET: &str = "/api/v1/namespaces/ns/secrets/a";
const TAGS: &str = "GET /s3op-b/?tagging";
const BOUNDARY: &str = "arn:aws:iam::123456789012:policy/s3-operator/c/s3-operator-boundary";

fn iam(action: &str) -> String {
    format!("POST /?Action={action}")
}

fn kube(method: &str, path: &str) -> String {
    format!("{method} {path}")
}

fn event() -> String {
    format!("POST {}", events_path("ns"))
}

/// BucketAccess `ns/a`, read-write on Bucket `b`, as the cache holds it at `version`.
fn access(version: &str, finalizer: bool) -> BucketAccess {
    let finalizers = if finalizer { vec![FINALIZER] } else { vec![] };
    serde_json::from_value(json!({
        "apiVersion": "s3.operator.dev/v1alpha1", "kind": "BucketAccess",
        "metadata": {"name": "a", "namespace": "ns", "uid": "uid-a", "generation": 1,
            "resourceVersion": version, "finalizers": finalizers},
        "spec": {"bucketRef": {"name": "b"}, "permission": "ReadWrite"},
    }))
    .expect("a BucketAccess")
}

/// The same access being deleted.
fn deleting() -> BucketAccess {
    let mut a = access("5", true);
    a.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::now()));
    a
}

/// The access's IAM user.
fn user() -> String {
    naming::iam_name("ns", "a", "uid-a")
}

/// Bucket `ns/b`, Ready, naming S3 bucket `s3op-b`.
fn bucket() -> Bucket {
    let ready = condition::ready(
        &[],
        true,
        Reason::Available,
        "m",
        Some(1),
        jiff::Timestamp::now(),
    );
    serde_json::from_value(json!({
        "apiVersion": "s3.operator.dev/v1alpha1", "kind": "Bucket",
        "metadata": {"name": "b", "namespace": "ns", "uid": "uid-1", "generation": 1,
            "resourceVersion": "9"},
        "spec": {"bucketName": "s3op-b"},
        "status": {"observedGeneration": 1, "conditions": [ready]},
    }))
    .expect("a Bucket")
}

/// Ownership tags naming the object `ns/name` with `uid` of cluster `cluster`.
fn tags(cluster: &str, name: &str, uid: &str) -> BTreeMap<String, String> {
    let [cluster, namespace, name, uid] = [cluster, "ns", name, uid].map(String::from);
    Owner {
        cluster,
        namespace,
        name,
        uid,
    }
    .tags()
}

/// The Bucket's tags, and the access's user's.
fn bucket_tags() -> BTreeMap<String, String> {
    tags("c", "b", "uid-1")
}

fn user_tags() -> BTreeMap<String, String> {
    tags("c", "a", "uid-a")
}

/// A real context over both fakes whose Bucket cache holds `buckets`.
fn context(fakes: &Fakes, buckets: &[Bucket]) -> Arc<Context> {
    let (store, mut writer) = kube::runtime::reflector::store::<Bucket>();
    for b in buckets {
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(b.clone()));
    }
    Arc::new(Context {
        buckets: vec![store],
        ..fakes.context()
    })
}

async fn pass(fakes: &Fakes, a: &BucketAccess) -> Result<Requeue, Error> {
    reconcile(Arc::new(a.clone()), context(fakes, &[bucket()])).await
}

/// The bodies of the Kubernetes requests `pattern` chose, as JSON.
fn bodies(fakes: &Fakes, pattern: &str) -> Vec<serde_json::Value> {
    let seen = fakes.kube.matching(pattern);
    seen.iter().map(|s| s.json()).collect()
}

/// The Ready condition's status and reason in a status write, and its message.
fn ready(status_patch: &serde_json::Value) -> ((String, String), String) {
    let c = &status_patch["status"]["conditions"][0];
    let text = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    ((text("status"), text("reason")), text("message"))
}

fn pair(a: &str, b: &str) -> (String, String) {
    (a.into(), b.into())
}

/// A parameter of every AWS request `pattern` chose.
fn params(fakes: &Fakes, pattern: &str, key: &str) -> Vec<String> {
    let seen = fakes.aws.matching(pattern);
    seen.iter()
        .map(|s| s.param(key).unwrap_or_default().to_string())
        .collect()
}

/// The bucket is the Bucket's; the access has no user and no Secret yet, and every write of a
/// first pass succeeds (the user created, the access at version 2 with its finalizer, 3 with
/// its status).
fn first_pass(fakes: &Fakes) {
    fakes.accept_events("ns");
    fakes
        .kube
        .on(&kube("GET", SECRET), Reply::kube_error(404, "NotFound"))
        .on(&kube("PATCH", ACCESS), Reply::json(200, access("2", true)))
        .on(&kube("PATCH", SECRET), Reply::Echo(200))
        .on(
            &format!("PATCH {ACCESS}/status"),
            Reply::json(200, access("3", true)),
        );
    let created = iam_user(&user(), Some(BOUNDARY), &user_tags());
    let key = "<AccessKey><UserName>u</UserName><AccessKeyId>AKNEW</AccessKeyId>\
        <Status>Active</Status><SecretAccessKey>s3cr3t</SecretAccessKey>\
        <CreateDate>2026-01-02T00:00:00Z</CreateDate></AccessKey>";
    fakes
        .aws
        .on(TAGS, Reply::s3_tags(&bucket_tags()))
        .on(&iam("GetUser"), Reply::query_error(404, "NoSuchEntity"))
        .on(&iam("CreateUser"), Reply::iam("CreateUser", &created))
        .on(&iam("PutUserPolicy"), Reply::iam("PutUserPolicy", ""))
        .on(&iam("CreateAccessKey"), Reply::iam("CreateAccessKey", key))
        .on(&iam("DeleteAccessKey"), Reply::iam("DeleteAccessKey", ""));
}

/// The AWS requests of a first pass that gets as far as `writes` (reads first: the bucket's
/// tags and the user, read together).
fn first_requests(writes: &[&str]) -> Vec<String> {
    let mut reads = [TAGS.to_string(), iam("GetUser")];
    reads.sort();
    reads
        .into_iter()
        .chain(writes.iter().map(|w| iam(w)))
        .collect()
}

/// The AWS requests in order, the two reads made together sorted.
fn aws_requests(fakes: &Fakes) -> Vec<String> {
    let mut all = fakes.aws.requests();
    all[..2].sort();
    all
}

#[tokio::test]
async fn a_first_pass_writes_the_finalizer_then_user_policy_key_secret_and_status() {
    let fakes = Fakes::start().await;
    first_pass(&fakes);
    let out = pass(&fakes, &access("1", false)).await;
    assert!(matches!(out, Ok(Requeue::Resync(_))), "{out:?}");
    let writes = ["CreateUser", "PutUserPolicy", "CreateAccessKey"];
    assert_eq!(aws_requests(&fakes), first_requests(&writes));
    // The user is created under the operator's path with its boundary and ownership tags.
    let created = &fakes.aws.matching(&iam("CreateUser"))[0];
    assert_eq!(created.param("UserName"), Some(user().as_str()));
    assert_eq!(created.param("Path"), Some("/s3-operator/c/"));
    assert_eq!(created.param("PermissionsBoundary"), Some(BOUNDARY));
    assert_eq!(
        created.param("Tags.member.1.Key"),
        Some("s3.operator.dev/cluster")
    );
    assert_eq!(
        params(&fakes, &iam("PutUserPolicy"), "PolicyName"),
        ["s3-operator-access"]
    );
    let mut then = vec![
        kube("GET", SECRET),
        kube("PATCH", ACCESS),
        kube("PATCH", SECRET),
    ];
    assert_eq!(fakes.kube.requests()[..3], then);
    then.extend([event(), format!("PATCH {ACCESS}/status")]);
    then[3..].sort();
    let mut kube_requests = fakes.kube.requests();
    kube_requests[3..].sort();
    assert_eq!(kube_requests, then);
    // The finalizer before anything in IAM; the Secret before the status says it is there.
    let at = |fake: &crate::reconcile::testing::Fake, p: &str| fake.matching(p)[0].at;
    assert!(at(&fakes.kube, &kube("PATCH", ACCESS)) < at(&fakes.aws, &iam("CreateUser")));
    let status = format!("PATCH {ACCESS}/status");
    assert!(at(&fakes.kube, &kube("PATCH", SECRET)) < at(&fakes.kube, &status));
    let secret = &bodies(&fakes, &kube("PATCH", SECRET))[0];
    assert_eq!(secret["data"]["AWS_ACCESS_KEY_ID"], "QUtORVc=", "AKNEW");
    assert_eq!(secret["metadata"]["annotations"][ANN_KEY_ID], "AKNEW");
    assert_eq!(secret["metadata"]["ownerReferences"][0]["uid"], "uid-a");
    let status = &bodies(&fakes, &status)[0];
    assert_eq!(status["status"]["accessKeyId"], "AKNEW");
    assert_eq!(status["status"]["userArn"], user_arn(&user()));
    assert_eq!(ready(status).0, pair("True", "Available"));
}

/// A Secret someone else created after the pass found none: the pass's apply, not forced,
/// conflicts with that Secret's own fields (409), or the API server refuses a second
/// controller (422). Either way no Secret names the key the pass just made: it is deleted, and
/// the next pass finds the foreign Secret and refuses it, writing nothing more to AWS.
#[tokio::test]
async fn a_secret_created_in_between_is_not_taken_over_and_the_new_key_goes() {
    for (code, reason) in [(409, "Conflict"), (422, "Invalid")] {
        let fakes = Fakes::start().await;
        // Found by the second pass only.
        let foreign = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "8"}});
        fakes
            .kube
            .once(&kube("GET", SECRET), Reply::kube_error(404, "NotFound"))
            .once(&kube("GET", SECRET), Reply::json(200, foreign))
            .once(&kube("PATCH", SECRET), Reply::kube_error(code, reason));
        first_pass(&fakes);
        let ctx = context(&fakes, &[bucket()]);
        let out = reconcile(Arc::new(access("1", false)), ctx.clone()).await;
        assert!(matches!(out, Err(Error::Kube(_))), "{out:?}");
        let writes = [
            "CreateUser",
            "PutUserPolicy",
            "CreateAccessKey",
            "DeleteAccessKey",
        ];
        assert_eq!(aws_requests(&fakes), first_requests(&writes), "{code}");
        assert_eq!(
            params(&fakes, &iam("DeleteAccessKey"), "AccessKeyId"),
            ["AKNEW"]
        );
        let apply = &fakes.kube.matching(&kube("PATCH", SECRET))[0];
        assert_ne!(
            apply.param("force"),
            Some("true"),
            "a Secret read as absent is not forced"
        );
        let kube_requests = fakes.kube.requests();
        assert!(!kube_requests.contains(&format!("PATCH {ACCESS}/status")));
        let note = &bodies(&fakes, &event())[0]["note"];
        let note = note.as_str().unwrap_or_default();
        let deleted = format!("Deleted access key AKNEW of IAM user {}", user());
        assert!(note.ends_with(&deleted), "{note}");
        // The next pass reads the Secret someone else made and refuses it.
        let out = reconcile(Arc::new(access("2", true)), ctx).await;
        assert!(matches!(out, Ok(Requeue::Resync(_))), "{out:?}");
        assert_eq!(
            fakes.aws.requests().len(),
            writes.len() + 2,
            "no AWS request"
        );
        let status = bodies(&fakes, &format!("PATCH {ACCESS}/status"));
        assert_eq!(ready(&status[0]).0, pair("False", "OwnershipConflict"));
    }
}
