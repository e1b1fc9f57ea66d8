//! A BucketAccess's whole pass (observe, apply, the Secret and status writes, withdrawal and
//! cleanup) against a fake API server and a fake IAM and S3: the paths the e2e suite cannot
//! reach cheaply (a write that loses to a newer version, a Secret created in between, a refusal
//! half way through a pass, a user not ours at deletion).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::core::{PartialObjectMeta, PartialObjectMetaExt};
use kube::runtime::{reflector, watcher};
use serde_json::json;

use super::keys::ANN_KEY_ID;
use super::reconcile;
use crate::api::condition::{self, Reason};
use crate::api::{Bucket, BucketAccess, BucketAccessClass, BucketClass, FINALIZER};
use crate::aws::naming;
use crate::aws::tags::Owner;
use crate::reconcile::class::Classes;
use crate::reconcile::testing::{
    Fake, Fakes, Reply, events_path, iam_keys, iam_user, ready_in, user_arn,
};
use crate::reconcile::{Context, Error, Requeue};

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
    under(fakes, buckets, Classes::default())
}

/// The same, with `classes`.
fn under(fakes: &Fakes, buckets: &[Bucket], classes: Classes) -> Arc<Context> {
    Arc::new(Context {
        buckets: vec![crate::reconcile::refs::Buckets::of(buckets)],
        classes,
        ..fakes.context()
    })
}

async fn pass(fakes: &Fakes, a: &BucketAccess) -> Result<Requeue, Error> {
    reconcile(Arc::new(a.clone()), context(fakes, &[bucket()])).await
}

/// The Ready condition's status and reason in a status write, and its message.
fn ready(status_patch: &serde_json::Value) -> ((String, String), String) {
    let (status, reason, message) = ready_in(status_patch);
    ((status, reason), message)
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
    // The user is looked for under its name only: an access without the finalizer has nothing
    // under the name of earlier releases.
    let mut reads = [TAGS.to_string(), iam("GetUser")];
    reads.sort();
    reads
        .into_iter()
        .chain(writes.iter().map(|w| iam(w)))
        .collect()
}

/// The AWS requests in order, the first reads (made together) sorted.
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
    let at = |fake: &Fake, p: &str| fake.matching(p)[0].at;
    assert!(at(&fakes.kube, &kube("PATCH", ACCESS)) < at(&fakes.aws, &iam("CreateUser")));
    let status = format!("PATCH {ACCESS}/status");
    assert!(at(&fakes.kube, &kube("PATCH", SECRET)) < at(&fakes.kube, &status));
    let secret = &fakes.kube.bodies(&kube("PATCH", SECRET))[0];
    assert_eq!(secret["data"]["AWS_ACCESS_KEY_ID"], "QUtORVc=", "AKNEW");
    assert_eq!(secret["metadata"]["annotations"][ANN_KEY_ID], "AKNEW");
    assert_eq!(secret["metadata"]["ownerReferences"][0]["uid"], "uid-a");
    let status = &fakes.kube.bodies(&status)[0];
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
        let note = &fakes.kube.bodies(&event())[0]["note"];
        let note = note.as_str().unwrap_or_default();
        let deleted = format!("Deleted access key AKNEW of IAM user {}", user());
        assert!(note.ends_with(&deleted), "{note}");
        // The next pass reads the Secret someone else made and refuses it.
        let out = reconcile(Arc::new(access("2", true)), ctx).await;
        assert!(matches!(out, Ok(Requeue::Resync(_))), "{out:?}");
        assert_eq!(
            fakes.aws.requests().len(),
            first_requests(&writes).len(),
            "no AWS request"
        );
        let status = fakes.kube.bodies(&format!("PATCH {ACCESS}/status"));
        assert_eq!(ready(&status[0]).0, pair("False", "OwnershipConflict"));
    }
}

#[tokio::test]
async fn access_denied_half_way_stops_the_writes_and_hands_out_no_key() {
    let fakes = Fakes::start().await;
    fakes.aws.on(
        &iam("PutUserPolicy"),
        Reply::query_error(403, "AccessDenied"),
    );
    first_pass(&fakes);
    let out = pass(&fakes, &access("1", false)).await;
    // A refusal is a state to report, not a failed pass.
    assert!(matches!(out, Ok(Requeue::Resync(_))), "{out:?}");
    let writes = ["CreateUser", "PutUserPolicy"];
    assert_eq!(
        aws_requests(&fakes),
        first_requests(&writes),
        "no key after"
    );
    let status = format!("PATCH {ACCESS}/status");
    let mut then = [
        kube("GET", SECRET),
        kube("PATCH", ACCESS),
        event(),
        event(),
        status.clone(),
    ];
    then[2..].sort();
    let mut kube_requests = fakes.kube.requests();
    kube_requests[2..].sort();
    assert_eq!(kube_requests, then, "no Secret");
    let events = fakes.kube.bodies(&event());
    let created = format!("Created IAM user {}", user());
    assert_eq!(
        (&events[0]["reason"], &events[0]["note"]),
        (&json!("Created"), &json!(created))
    );
    assert_eq!(
        (&events[1]["type"], &events[1]["reason"]),
        (&json!("Warning"), &json!("AccessDenied"))
    );
    let (ready, message) = ready(&fakes.kube.bodies(&status)[0]);
    assert_eq!(ready, pair("False", "AccessDenied"));
    assert!(
        message.contains("AWS denied iam PutUserPolicy"),
        "{message}"
    );
}

/// A full IAM quota (a 409 `LimitExceeded`) is reported naming the quota, the refused write sent
/// once and the pass waiting for the resync, not backing off to send it again. Refused at the
/// key, the user and policy made before stay (the next pass finds them) and no Secret is written.
#[tokio::test]
async fn a_full_quota_is_reported_naming_it_and_not_retried() {
    let cases = [
        (
            "CreateUser",
            "IAM users per account (5,000, not adjustable)",
        ),
        ("CreateAccessKey", "access keys per user (2)"),
    ];
    for (refused, quota) in cases {
        let fakes = Fakes::start().await;
        fakes
            .aws
            .on(&iam(refused), Reply::query_error(409, "LimitExceeded"));
        first_pass(&fakes);
        let out = pass(&fakes, &access("1", false)).await;
        // The periodic resync (10 minutes in the test settings), not a backoff or an early requeue.
        let resync = matches!(out, Ok(Requeue::Resync(wait)) if wait > Duration::from_secs(500));
        assert!(resync, "{refused}: {out:?}");
        let writes = ["CreateUser", "PutUserPolicy", "CreateAccessKey"];
        let upto = writes.iter().position(|w| *w == refused).expect("a write") + 1;
        assert_eq!(aws_requests(&fakes), first_requests(&writes[..upto]));
        let kube_requests = fakes.kube.requests();
        assert!(!kube_requests.contains(&kube("PATCH", SECRET)), "no Secret");
        let status = fakes.kube.bodies(&format!("PATCH {ACCESS}/status"));
        let (ready, message) = ready(&status[0]);
        assert_eq!(ready, pair("False", "QuotaExceeded"), "{refused}");
        let said = format!("AWS refused iam {refused}, quota reached: {quota};");
        assert!(message.starts_with(&said), "{message}");
        assert!(
            message.ends_with("(LimitExceeded: LimitExceeded (fake))"),
            "{message}"
        );
        let events = fakes.kube.bodies(&event());
        let last = events.last().expect("an event");
        assert_eq!(
            (&last["type"], &last["reason"]),
            (&json!("Warning"), &json!("QuotaExceeded"))
        );
    }
}

#[tokio::test]
async fn a_finalizer_patch_from_a_stale_cache_writes_nothing_to_iam() {
    let fakes = Fakes::start().await;
    fakes
        .kube
        .on(&kube("PATCH", ACCESS), Reply::kube_error(409, "Conflict"));
    first_pass(&fakes);
    let err = pass(&fakes, &access("1", false)).await.unwrap_err();
    assert!(err.is_stale_write(), "{err}");
    assert_eq!(
        aws_requests(&fakes),
        first_requests(&[]),
        "read, never written"
    );
    assert_eq!(
        fakes.kube.requests(),
        [kube("GET", SECRET), kube("PATCH", ACCESS)]
    );
    // A compare-and-swap on the version the cache held.
    let patch = json!({"metadata": {"finalizers": [FINALIZER], "resourceVersion": "1"}});
    assert_eq!(fakes.kube.bodies(&kube("PATCH", ACCESS)), [patch]);
}

/// The status write loses to a newer version after the key is handed out: the pass fails as
/// stale, and the Secret it wrote keeps naming the key.
#[tokio::test]
async fn a_status_write_that_loses_leaves_the_key_in_its_secret() {
    let fakes = Fakes::start().await;
    let status = format!("PATCH {ACCESS}/status");
    fakes.kube.on(&status, Reply::kube_error(409, "Conflict"));
    first_pass(&fakes);
    let err = pass(&fakes, &access("1", false)).await.unwrap_err();
    assert!(err.is_stale_write(), "{err}");
    let writes = ["CreateUser", "PutUserPolicy", "CreateAccessKey"];
    assert_eq!(
        aws_requests(&fakes),
        first_requests(&writes),
        "the key stays"
    );
    let secret = &fakes.kube.bodies(&kube("PATCH", SECRET))[0];
    assert_eq!(secret["metadata"]["annotations"][ANN_KEY_ID], "AKNEW");
    assert_eq!(fakes.kube.matching(&status).len(), 1);
}

/// The user's policy and keys, as IAM has them: `keys` (id, active).
fn granted(fakes: &Fakes, owner_tags: &BTreeMap<String, String>, keys: &[(&str, bool)]) {
    let policy = "<UserName>u</UserName><PolicyName>s3-operator-access</PolicyName>\
        <PolicyDocument>%7B%7D</PolicyDocument>";
    let names = "<PolicyNames><member>s3-operator-access</member></PolicyNames>\
        <IsTruncated>false</IsTruncated>";
    let found = iam_user(&user(), Some(BOUNDARY), owner_tags);
    fakes
        .aws
        .on(&iam("GetUser"), Reply::iam("GetUser", &found))
        .on(&iam("GetUserPolicy"), Reply::iam("GetUserPolicy", policy))
        .on(
            &iam("ListUserPolicies"),
            Reply::iam("ListUserPolicies", names),
        )
        .on(
            &iam("ListAccessKeys"),
            Reply::iam("ListAccessKeys", &iam_keys(&user(), keys)),
        );
    for write in [
        "DeleteAccessKey",
        "UpdateAccessKey",
        "DeleteUserPolicy",
        "DeleteUser",
    ] {
        fakes.aws.on(&iam(write), Reply::iam(write, ""));
    }
}

/// Deletion takes the user's keys, then its policies, then the user; the Secret is left to
/// the garbage collector (its owner reference). The finalizer's removal, lost to a newer
/// version, is retried by a pass that finds the user gone.
#[tokio::test]
async fn deletion_removes_keys_policy_and_user_then_the_finalizer() {
    let fakes = Fakes::start().await;
    fakes.accept_events("ns");
    fakes
        .aws
        .once(
            &iam("GetUser"),
            Reply::iam("GetUser", &iam_user(&user(), None, &user_tags())),
        )
        .on(&iam("GetUser"), Reply::query_error(404, "NoSuchEntity"));
    granted(&fakes, &user_tags(), &[("AK1", true), ("AK2", false)]);
    fakes
        .kube
        .once(&kube("PATCH", ACCESS), Reply::kube_error(409, "Conflict"))
        .on(&kube("PATCH", ACCESS), Reply::json(200, deleting()));
    let err = pass(&fakes, &deleting()).await.unwrap_err();
    assert!(err.is_stale_write(), "{err}");
    let out = pass(&fakes, &deleting()).await;
    assert!(matches!(out, Ok(Requeue::OnChange)), "{out:?}");
    // Rounds of calls made together (each sorted here, as they may arrive in any order): both
    // names (this release's and earlier releases'), the user's keys and policies, their
    // deletions, the user; then the retry finds neither name.
    let rounds: [&[&str]; 5] = [
        &["GetUser", "GetUser"],
        &["ListAccessKeys", "ListUserPolicies"],
        &["DeleteAccessKey", "DeleteAccessKey", "DeleteUserPolicy"],
        &["DeleteUser"],
        &["GetUser", "GetUser"],
    ];
    let mut requests = fakes.aws.requests().into_iter();
    for round in rounds {
        let mut got: Vec<String> = requests.by_ref().take(round.len()).collect();
        got.sort();
        assert_eq!(got, round.iter().map(|c| iam(c)).collect::<Vec<_>>());
    }
    assert_eq!(requests.next(), None, "no other call");
    let mut keys = params(&fakes, &iam("DeleteAccessKey"), "AccessKeyId");
    keys.sort();
    assert_eq!(keys, ["AK1", "AK2"]);
    assert_eq!(
        params(&fakes, &iam("DeleteUserPolicy"), "PolicyName"),
        ["s3-operator-access"]
    );
    let finalizer = kube("PATCH", ACCESS);
    assert_eq!(
        fakes.kube.requests(),
        [event(), finalizer.clone(), finalizer.clone()]
    );
    let removal = json!({"metadata": {"finalizers": [], "resourceVersion": "5"}});
    assert_eq!(fakes.kube.bodies(&finalizer), [removal.clone(), removal]);
    let note = format!("Deleted IAM user {} and its keys", user());
    assert_eq!(fakes.kube.bodies(&event())[0]["note"], note);
}

#[tokio::test]
async fn a_user_of_another_cluster_or_object_is_never_touched_by_deletion() {
    for foreign in [tags("other", "a", "uid-a"), tags("c", "a", "uid-2")] {
        let fakes = Fakes::start().await;
        granted(&fakes, &foreign, &[("AK1", true)]);
        fakes
            .kube
            .on(&kube("PATCH", ACCESS), Reply::json(200, deleting()));
        let out = pass(&fakes, &deleting()).await;
        assert!(matches!(out, Ok(Requeue::OnChange)), "{out:?}");
        // Under both names the access's user may have.
        let looked = [iam("GetUser"), iam("GetUser")];
        assert_eq!(fakes.aws.requests(), looked, "{foreign:?}");
        assert_eq!(fakes.kube.requests(), [kube("PATCH", ACCESS)]);
    }
}

/// A PodIdentity access's deletion removes its association (ours) before its role; a refused
/// removal keeps the finalizer, deletes nothing else and says why.
#[tokio::test]
async fn deletion_removes_the_association_first_and_fails_closed() {
    let list = "GET /clusters/eks/pod-identity-associations";
    let one = "/clusters/eks/pod-identity-associations/a-1";
    let found = json!({"association": {"associationId": "a-1", "tags": user_tags(),
        "roleArn": "arn:aws:iam::123456789012:role/s3-operator/c/r"}});
    let mut a = deleting();
    a.spec.credentials =
        serde_json::from_value(json!({"type": "PodIdentity", "serviceAccountName": "app"}))
            .unwrap();
    let denied = Reply::Body {
        status: 403,
        content_type: "application/json",
        body: json!({"__type": "AccessDeniedException", "message": "no"}).to_string(),
    };
    for refused in [true, false] {
        let fakes = Fakes::start().await;
        fakes.accept_events("ns");
        let listed = json!({"associations": [{"associationId": "a-1"}]});
        fakes
            .aws
            .on(list, Reply::json(200, listed))
            .on(&format!("GET {one}"), Reply::json(200, &found))
            .on(&iam("GetRole"), Reply::query_error(404, "NoSuchEntity"));
        match refused {
            true => fakes.aws.on(&format!("DELETE {one}"), denied.clone()),
            false => fakes
                .aws
                .on(&format!("DELETE {one}"), Reply::json(200, &found)),
        };
        (fakes.kube)
            .on(
                &kube("PATCH", &format!("{ACCESS}/status")),
                Reply::json(200, &a),
            )
            .on(&kube("PATCH", ACCESS), Reply::json(200, &a));
        let out = pass(&fakes, &a).await;
        let mut sent = vec![
            list.to_string(),
            format!("GET {one}"),
            format!("DELETE {one}"),
        ];
        if refused {
            assert!(matches!(out, Err(Error::DeletionBlocked(_))), "{out:?}");
            assert_eq!(fakes.aws.requests(), sent, "nothing after the refusal");
            let patched = fakes.kube.matching(&kube("PATCH", ACCESS));
            assert!(patched.is_empty(), "the finalizer stays");
        } else {
            assert!(matches!(out, Ok(Requeue::OnChange)), "{out:?}");
            sent.extend([iam("GetRole"), iam("GetRole")]);
            let why = "the association, then the role under both its names";
            assert_eq!(fakes.aws.requests(), sent, "{why}");
            let note = &fakes.kube.bodies(&event())[0]["note"];
            assert_eq!(note, "Deleted EKS Pod Identity association a-1");
        }
    }
}

/// No grant may stand: the plan's withdrawal deletes the policy and deactivates the active key
/// (the inactive one is left), and the access reports why.
fn assert_withdrawn(fakes: &Fakes, reason: &str) {
    let writes = [iam("DeleteUserPolicy"), iam("UpdateAccessKey")];
    let all = fakes.aws.requests();
    let (reads, written) = all.split_at(all.len() - 2);
    assert_eq!(written, writes, "after every read");
    assert!(reads.contains(&iam("GetUserPolicy")) && reads.contains(&iam("ListAccessKeys")));
    let deactivated = &fakes.aws.matching(&iam("UpdateAccessKey"))[0];
    assert_eq!(deactivated.param("AccessKeyId"), Some("AK1"));
    assert_eq!(deactivated.param("Status"), Some("Inactive"));
    let events = fakes.kube.bodies(&event());
    assert_eq!(events[0]["reason"], "AccessRevoked");
    let note = events[0]["note"].as_str().unwrap_or_default();
    assert!(note.ends_with("deactivated access key AK1"), "{note}");
    let status = fakes.kube.bodies(&format!("PATCH {ACCESS}/status"));
    let (ready, message) = ready(&status[0]);
    assert_eq!(ready, pair("False", reason));
    assert!(message.ends_with("; no access is granted"), "{message}");
}

#[tokio::test]
async fn a_bucket_gone_withdraws_the_grant() {
    let fakes = Fakes::start().await;
    fakes.accept_events("ns");
    granted(&fakes, &user_tags(), &[("AK0", false), ("AK1", true)]);
    let buckets = "/apis/s3.operator.dev/v1alpha1/namespaces/ns/buckets";
    let none = json!({"apiVersion": "s3.operator.dev/v1alpha1", "kind": "BucketList",
        "metadata": {}, "items": []});
    let status = format!("PATCH {ACCESS}/status");
    fakes
        .kube
        .on(&kube("GET", buckets), Reply::json(200, none))
        .on(&status, Reply::json(200, access("5", true)));
    // Not in the cache, nor on the API server.
    let ctx = context(&fakes, &[]);
    let out = reconcile(Arc::new(access("4", true)), ctx).await;
    assert!(matches!(out, Ok(Requeue::Resync(_))), "{out:?}");
    let mut reads = [iam("GetUserPolicy"), iam("ListAccessKeys")];
    reads.sort();
    let mut all = fakes.aws.requests();
    all[1..3].sort();
    assert_eq!(all[..3], [vec![iam("GetUser")], reads.to_vec()].concat());
    assert_withdrawn(&fakes, "BucketNotFound");
    let looked_up = &fakes.kube.matching(&kube("GET", buckets))[0];
    assert_eq!(looked_up.param("fieldSelector"), Some("metadata.name=b"));
    assert_eq!(
        fakes.kube.requests(),
        [kube("GET", buckets), event(), event(), status]
    );
}

/// What a pass reads of a grant in place, sorted: the bucket's tags, the user, its policy and
/// its keys.
fn grant_reads() -> Vec<String> {
    let iam_reads = ["GetUser", "GetUserPolicy", "ListAccessKeys"].map(iam);
    [vec![TAGS.to_string()], iam_reads.to_vec()].concat()
}

/// An access whose user holds its policy and key AK1 (AK0 inactive) on a bucket whose tags now
/// name another owner; returns the status write's request.
fn granted_on_a_bucket_of_another(fakes: &Fakes) -> String {
    fakes.accept_events("ns");
    granted(fakes, &user_tags(), &[("AK0", false), ("AK1", true)]);
    fakes
        .aws
        .on(TAGS, Reply::s3_tags(&tags("other", "b", "uid-1")));
    let status = format!("PATCH {ACCESS}/status");
    fakes
        .kube
        .on(&kube("GET", SECRET), Reply::kube_error(404, "NotFound"))
        .on(&status, Reply::json(200, access("5", true)));
    status
}

#[tokio::test]
async fn a_bucket_of_another_owner_withdraws_the_grant() {
    let fakes = Fakes::start().await;
    let status = granted_on_a_bucket_of_another(&fakes);
    let out = pass(&fakes, &access("4", true)).await;
    assert!(matches!(out, Ok(Requeue::Resync(_))), "{out:?}");
    let mut all = fakes.aws.requests();
    all[..4].sort();
    assert_eq!(all[..4], grant_reads());
    assert_withdrawn(&fakes, "BucketNotOwned");
    assert_eq!(
        fakes.kube.requests(),
        [kube("GET", SECRET), event(), event(), status]
    );
}

/// The classes' stores with `classes` and, unless `ns_seen` is false, namespace `ns` unlabelled.
fn classes(classes: &[&str], ns_seen: bool) -> Classes {
    let (buckets, _) = reflector::store::<BucketClass>();
    let (accesses, mut writer) = reflector::store::<BucketAccessClass>();
    for c in classes {
        let c = serde_json::from_str::<BucketAccessClass>(c).expect("a BucketAccessClass");
        writer.apply_watcher_event(&watcher::Event::Apply(c));
    }
    let (namespaces, mut writer) = reflector::store::<PartialObjectMeta<Namespace>>();
    if ns_seen {
        let ns = ObjectMeta {
            name: Some("ns".into()),
            ..Default::default()
        };
        writer.apply_watcher_event(&watcher::Event::Apply(ns.into_request_partial()));
    }
    Classes::new(buckets, accesses, namespaces, Default::default())
}

/// The namespace's default class allows only reads.
const READ_ONLY: &str = r#"{"apiVersion": "s3.operator.dev/v1alpha1", "kind": "BucketAccessClass",
    "metadata": {"name": "sandbox", "resourceVersion": "3",
        "annotations": {"s3.operator.dev/is-default-class": "true"}},
    "spec": {"allowedPermissions": ["ReadOnly"]}}"#;

/// A read-write access with its user, policy and key in place, under a class that now allows
/// only reads: the pass reads, reports the violation under the class, and writes nothing to
/// AWS or to the Secret (what was granted stays; its key does not rotate).
#[tokio::test]
async fn a_class_violation_on_a_live_access_reports_and_writes_nothing_to_aws() {
    let fakes = Fakes::start().await;
    fakes.accept_events("ns");
    granted(&fakes, &user_tags(), &[("AK1", true)]);
    fakes.aws.on(TAGS, Reply::s3_tags(&bucket_tags()));
    let status = format!("PATCH {ACCESS}/status");
    fakes
        .kube
        .on(&kube("GET", SECRET), Reply::kube_error(404, "NotFound"))
        .on(&status, Reply::json(200, access("5", true)));
    let ctx = under(&fakes, &[bucket()], classes(&[READ_ONLY], true));
    let out = reconcile(Arc::new(access("4", true)), ctx).await;
    assert!(matches!(out, Ok(Requeue::Resync(_))), "{out:?}");
    let mut all = fakes.aws.requests();
    all.sort();
    assert_eq!(all, grant_reads(), "reads only");
    assert_eq!(
        fakes.kube.requests(),
        [kube("GET", SECRET), event(), status.clone()]
    );
    let body = &fakes.kube.bodies(&status)[0];
    assert_eq!(body["status"]["className"], "sandbox");
    let (ready, message) = ready(body);
    assert_eq!(ready, pair("False", "ClassViolation"));
    assert_eq!(
        message,
        "spec.permission ReadWrite breaks BucketAccessClass sandbox: allowedPermissions is [ReadOnly]"
    );
    assert_eq!(fakes.kube.bodies(&event())[0]["reason"], "ClassViolation");
}

/// A class violation never shields a grant whose bucket changed hands: it is withdrawn. And a
/// namespace the watch has not shown yet is retried before anything is read.
#[tokio::test]
async fn a_class_violation_does_not_stop_a_withdrawal() {
    let fakes = Fakes::start().await;
    granted_on_a_bucket_of_another(&fakes);
    let unseen = under(&fakes, &[bucket()], classes(&[READ_ONLY], false));
    let out = reconcile(Arc::new(access("4", true)), unseen).await;
    assert!(matches!(out, Err(Error::UnknownNamespace(_))), "{out:?}");
    assert!(fakes.aws.requests().is_empty() && fakes.kube.requests().is_empty());
    let ctx = under(&fakes, &[bucket()], classes(&[READ_ONLY], true));
    let out = reconcile(Arc::new(access("4", true)), ctx).await;
    assert!(matches!(out, Ok(Requeue::Resync(_))), "{out:?}");
    assert_withdrawn(&fakes, "BucketNotOwned");
}

/// The SDK resends a CreateUser whose answer was lost, and IAM says the user exists: a user
/// tagged as this access's is the one the lost answer created, and the pass goes on with it;
/// one tagged for anyone else is an ownership conflict, and nothing more is written to it.
#[tokio::test]
async fn a_resent_create_finds_its_own_user_and_goes_on() {
    for (tags, ok) in [(user_tags(), true), (tags("c", "other", "uid-x"), false)] {
        let fakes = Fakes::start().await;
        let found = iam_user(&user(), Some(BOUNDARY), &tags);
        fakes
            .aws
            .once(&iam("GetUser"), Reply::query_error(404, "NoSuchEntity"))
            .on(&iam("GetUser"), Reply::iam("GetUser", &found))
            .once(
                &iam("CreateUser"),
                Reply::query_error(409, "EntityAlreadyExists"),
            );
        first_pass(&fakes);
        let out = pass(&fakes, &access("1", false)).await;
        let status = fakes.kube.bodies(&format!("PATCH {ACCESS}/status"));
        let said = ready(status.last().expect("a status write"));
        if ok {
            assert!(matches!(out, Ok(Requeue::Resync(_))), "{out:?}");
            assert_eq!(said.0, pair("True", "Available"));
            let writes = ["CreateUser", "GetUser", "PutUserPolicy", "CreateAccessKey"];
            assert_eq!(aws_requests(&fakes), first_requests(&writes));
        } else {
            assert_eq!(said.0, pair("False", "OwnershipConflict"), "{out:?}");
            assert_eq!(
                aws_requests(&fakes),
                first_requests(&["CreateUser", "GetUser"])
            );
        }
    }
}

/// A CreateAccessKey that failed may still have made its key (IAM made it and its answer was
/// lost): the call is not resent, and the pass fails. The pass that retries it finds that key on
/// the user, held by no Secret, and deletes it before it makes the key it hands out, so no key
/// nobody holds outlives the retry.
#[tokio::test]
async fn a_key_a_failed_create_made_goes_before_the_next_is_made() {
    let fakes = Fakes::start().await;
    let failure = Reply::query_error(500, "ServiceFailure");
    fakes.aws.once(&iam("CreateAccessKey"), failure);
    first_pass(&fakes);
    let out = pass(&fakes, &access("1", false)).await;
    assert!(out.is_err(), "{out:?}");
    let writes = ["CreateUser", "PutUserPolicy", "CreateAccessKey"];
    assert_eq!(aws_requests(&fakes), first_requests(&writes), "not resent");
    assert!(fakes.kube.matching(&kube("PATCH", SECRET)).is_empty());

    // The retry, against what IAM now holds: the user, its policy and the lost key.
    let fakes = Fakes::start().await;
    granted(&fakes, &user_tags(), &[("AKLOST", true)]);
    first_pass(&fakes);
    let out = pass(&fakes, &access("2", true)).await;
    assert!(matches!(out, Ok(Requeue::Resync(_))), "{out:?}");
    let deleted = params(&fakes, &iam("DeleteAccessKey"), "AccessKeyId");
    assert_eq!(deleted, ["AKLOST"]);
    let at = |p: &str| fakes.aws.matching(p)[0].at;
    assert!(at(&iam("DeleteAccessKey")) < at(&iam("CreateAccessKey")));
    let secret = &fakes.kube.bodies(&kube("PATCH", SECRET))[0];
    assert_eq!(secret["metadata"]["annotations"][ANN_KEY_ID], "AKNEW");
}
