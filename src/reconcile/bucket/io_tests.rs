//! A Bucket's whole pass (observe, apply, cleanup and the Kubernetes writes) against a fake API
//! server and a fake S3: the paths the e2e suite cannot reach cheaply (a write that loses to a
//! newer version, a refusal half way through a pass, a bucket gone or not ours at deletion).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::json;

use super::fixtures::owner;
use super::reconcile;
use crate::api::{Bucket, BucketSpec, DeletionPolicy, FINALIZER};
use crate::aws::{naming, policy};
use crate::reconcile::testing::{Fakes, Reply, events_path};
use crate::reconcile::{Error, Requeue};

const OBJECT: &str = "/apis/s3.operator.dev/v1alpha1/namespaces/ns/buckets/b";
const TAGS: &str = "GET /s3op-b/?tagging";
const CREATE: &str = "PUT /s3op-b/";

/// A request to the Bucket object: `""` itself, `"/status"` its status.
fn object(method: &str, sub: &str) -> String {
    format!("{method} {OBJECT}{sub}")
}

fn event() -> String {
    format!("POST {}", events_path("ns"))
}

/// Bucket `ns/b` naming S3 bucket `s3op-b`, as the cache holds it at `version`.
fn bucket(version: &str, finalizer: bool) -> Bucket {
    let spec = BucketSpec {
        bucket_name: Some("s3op-b".into()),
        ..Default::default()
    };
    let mut b = Bucket::new("b", spec);
    b.metadata.namespace = Some("ns".into());
    b.metadata.uid = Some("uid-1".into());
    b.metadata.resource_version = Some(version.into());
    b.metadata.generation = Some(1);
    if finalizer {
        b.metadata.finalizers = Some(vec![FINALIZER.into()]);
    }
    b
}

/// The same Bucket being deleted, with `spec.deletionPolicy: Delete` and `forceDelete`: the
/// spec that deletes the most.
fn deleting() -> Bucket {
    let mut b = bucket("5", true);
    b.spec.deletion_policy = Some(DeletionPolicy::Delete);
    b.spec.force_delete = true;
    // As a pass that accepted the spec recorded it: deletion follows the record.
    let status = b.status.get_or_insert_with(Default::default);
    status.deletion = Some(crate::api::AcceptedDeletion {
        policy: DeletionPolicy::Delete,
        force_delete: true,
    });
    b.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::now()));
    b
}

async fn pass(fakes: &Fakes, b: &Bucket) -> Result<Requeue, Error> {
    reconcile(Arc::new(b.clone()), Arc::new(fakes.context())).await
}

/// The bodies of the requests `pattern` chose, as JSON.
fn bodies(fakes: &Fakes, pattern: &str) -> Vec<serde_json::Value> {
    let seen = fakes.kube.matching(pattern);
    seen.iter().map(|s| s.json()).collect()
}

/// The Ready condition a status write carried.
fn ready(status_patch: &serde_json::Value) -> (String, String, String) {
    let c = &status_patch["status"]["conditions"][0];
    let text = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    (text("status"), text("reason"), text("message"))
}

/// The API server takes the finalizer (the object at version 2) and the status (version 3).
fn accept_writes(fakes: &Fakes) {
    fakes
        .kube
        .on(&object("PATCH", ""), Reply::json(200, bucket("2", true)))
        .on(
            &object("PATCH", "/status"),
            Reply::json(200, bucket("3", true)),
        );
}

/// S3 has no bucket `s3op-b` and creates it, with every aspect a new bucket is given.
fn creatable(fakes: &Fakes) {
    fakes
        .aws
        .once(TAGS, Reply::s3_error(404, "NoSuchBucket"))
        .on(CREATE, Reply::ok())
        .on("PUT /s3op-b/?publicAccessBlock", Reply::ok())
        .on("PUT /s3op-b/?encryption", Reply::ok())
        .on("PUT /s3op-b/?policy", Reply::ok());
}

const CREATION: [&str; 5] = [
    TAGS,
    CREATE,
    "PUT /s3op-b/?publicAccessBlock",
    "PUT /s3op-b/?encryption",
    "PUT /s3op-b/?policy",
];

/// S3 holds `s3op-b`, ours and as its spec asks.
fn converged(fakes: &Fakes) {
    let all = [
        "BlockPublicAcls",
        "IgnorePublicAcls",
        "BlockPublicPolicy",
        "RestrictPublicBuckets",
    ];
    let block = all.map(|k| format!("<{k}>true</{k}>")).concat();
    let encryption = "<ServerSideEncryptionConfiguration><Rule><ApplyServerSideEncryptionByDefault>\
        <SSEAlgorithm>AES256</SSEAlgorithm></ApplyServerSideEncryptionByDefault></Rule>\
        </ServerSideEncryptionConfiguration>";
    let arn = naming::bucket_arn("aws", "s3op-b");
    let policy = policy::bucket_policy(&arn, &[]);
    fakes
        .aws
        .on(TAGS, Reply::s3_tags(&owner().tags()))
        .on(
            "GET /s3op-b/?publicAccessBlock",
            Reply::xml(
                200,
                format!("<PublicAccessBlockConfiguration>{block}</PublicAccessBlockConfiguration>"),
            ),
        )
        .on("GET /s3op-b/?encryption", Reply::xml(200, encryption))
        .on("GET /s3op-b/?policy", Reply::json(200, policy));
}

fn tags(cluster: &str, uid: &str) -> BTreeMap<String, String> {
    let mut tags = owner().tags();
    tags.insert(crate::aws::tags::CLUSTER.into(), cluster.into());
    tags.insert(crate::aws::tags::UID.into(), uid.into());
    tags
}

#[tokio::test]
async fn a_new_bucket_is_created_after_its_finalizer_and_its_echo_costs_nothing() {
    let fakes = Fakes::start().await;
    fakes.accept_events("ns");
    accept_writes(&fakes);
    creatable(&fakes);
    let ctx = Arc::new(fakes.context());
    let out = reconcile(Arc::new(bucket("1", false)), ctx.clone()).await;
    assert!(matches!(out, Ok(Requeue::Resync(_))), "{out:?}");
    assert_eq!(fakes.aws.requests(), CREATION);
    let finalizer = &fakes.kube.matching(&object("PATCH", ""))[0];
    let created = &fakes.aws.matching(CREATE)[0];
    assert!(finalizer.at < created.at, "the finalizer comes first");
    let mut kube = [event(), object("PATCH", ""), object("PATCH", "/status")];
    kube.sort();
    assert_eq!(fakes.kube.requests_sorted(), kube);
    let (status, reason, _) = ready(&bodies(&fakes, &object("PATCH", "/status"))[0]);
    assert_eq!((status.as_str(), reason.as_str()), ("True", "Available"));
    // The watch brings the pass's own writes back: each costs no request.
    for version in ["1", "2", "3"] {
        let echo = Arc::new(bucket(version, version != "1"));
        let out = reconcile(echo, ctx.clone()).await;
        assert!(matches!(out, Ok(Requeue::Resync(_))), "{out:?}");
    }
    assert_eq!(fakes.aws.requests().len(), CREATION.len());
    assert_eq!(fakes.kube.requests().len(), 3);
}

#[tokio::test]
async fn a_finalizer_patch_from_a_stale_cache_creates_nothing() {
    let fakes = Fakes::start().await;
    fakes
        .kube
        .on(&object("PATCH", ""), Reply::kube_error(409, "Conflict"));
    creatable(&fakes);
    let err = pass(&fakes, &bucket("1", false)).await.unwrap_err();
    assert!(err.is_stale_write(), "{err}");
    assert_eq!(fakes.kube.requests(), [object("PATCH", "")]);
    // A compare-and-swap on the version the cache held.
    let patch = json!({"metadata": {"finalizers": [FINALIZER], "resourceVersion": "1"}});
    assert_eq!(bodies(&fakes, &object("PATCH", "")), [patch]);
    assert_eq!(fakes.aws.requests(), [TAGS], "read, never created");
}

#[tokio::test]
async fn a_status_write_that_loses_leaves_the_pass_to_run_again_in_full() {
    let fakes = Fakes::start().await;
    fakes.accept_events("ns");
    fakes.kube.once(
        &object("PATCH", "/status"),
        Reply::kube_error(409, "Conflict"),
    );
    accept_writes(&fakes);
    creatable(&fakes);
    let ctx = Arc::new(fakes.context());
    let err = reconcile(Arc::new(bucket("1", false)), ctx.clone())
        .await
        .unwrap_err();
    assert!(err.is_stale_write(), "{err}");
    assert_eq!(fakes.aws.requests(), CREATION);
    // The newer version's watch event: not settled, so S3 is read again; it writes no S3 and
    // no second Created event, only the status.
    converged(&fakes);
    let out = reconcile(Arc::new(bucket("2", true)), ctx).await;
    assert!(matches!(out, Ok(Requeue::Resync(_))), "{out:?}");
    let mut again = fakes.aws.requests()[CREATION.len()..].to_vec();
    again.sort();
    let reads = ["encryption", "policy", "publicAccessBlock", "tagging"];
    assert_eq!(
        again,
        reads.map(|r| format!("GET /s3op-b/?{r}")),
        "reads only"
    );
    let kube = fakes.kube.requests();
    assert_eq!(kube.iter().filter(|r| **r == event()).count(), 1);
    assert_eq!(kube.last(), Some(&object("PATCH", "/status")));
    assert_eq!(fakes.kube.matching(&object("PATCH", "/status")).len(), 2);
}

#[tokio::test]
async fn access_denied_half_way_stops_the_writes_and_reports_what_was_done() {
    let fakes = Fakes::start().await;
    fakes.accept_events("ns");
    accept_writes(&fakes);
    fakes.aws.on(
        "PUT /s3op-b/?encryption",
        Reply::s3_error(403, "AccessDenied"),
    );
    creatable(&fakes);
    let out = pass(&fakes, &bucket("1", false)).await;
    // A refusal is a state to report, not a failed pass.
    assert!(matches!(out, Ok(Requeue::Resync(_))), "{out:?}");
    assert_eq!(fakes.aws.requests(), CREATION[..4], "no policy after");
    assert_eq!(
        fakes.kube.requests(),
        [
            object("PATCH", ""),
            event(),
            event(),
            object("PATCH", "/status")
        ]
    );
    let events = bodies(&fakes, &event());
    // What was done before the refusal, then the refusal.
    let note = "Created S3 bucket s3op-b in us-east-1 (publicAccessBlock)";
    assert_eq!(events[0]["reason"], "Created");
    assert_eq!(events[0]["note"], note);
    assert_eq!(events[1]["type"], "Warning");
    assert_eq!(events[1]["reason"], "AccessDenied");
    let (status, reason, message) = ready(&bodies(&fakes, &object("PATCH", "/status"))[0]);
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "AccessDenied")
    );
    assert!(
        message.contains("AWS denied s3 PutBucketEncryption"),
        "{message}"
    );
}

/// S3's bucket quota is reported naming it, with one CreateBucket sent and the pass waiting for
/// the periodic resync rather than backing off to send it again.
#[tokio::test]
async fn a_full_bucket_quota_is_reported_naming_it_and_not_retried() {
    let fakes = Fakes::start().await;
    fakes.accept_events("ns");
    accept_writes(&fakes);
    fakes.aws.on(CREATE, Reply::s3_error(400, "TooManyBuckets"));
    creatable(&fakes);
    let out = pass(&fakes, &bucket("1", false)).await;
    // The periodic resync (10 minutes in the test settings), not a backoff or an early requeue.
    let resync = matches!(out, Ok(Requeue::Resync(wait)) if wait > Duration::from_secs(500));
    assert!(resync, "{out:?}");
    assert_eq!(fakes.aws.requests(), CREATION[..2]);
    let events = bodies(&fakes, &event());
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["reason"], "QuotaExceeded");
    let (status, reason, message) = ready(&bodies(&fakes, &object("PATCH", "/status"))[0]);
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "QuotaExceeded")
    );
    let said = "AWS refused s3 CreateBucket, quota reached: S3 buckets per account (10,000 by \
                default, adjustable);";
    assert!(message.starts_with(said), "{message}");
    assert!(
        message.ends_with("(TooManyBuckets: TooManyBuckets (fake))"),
        "{message}"
    );
}

#[tokio::test]
async fn a_bucket_of_another_owner_blocks_the_pass_on_a_fresh_read() {
    let fakes = Fakes::start().await;
    fakes.accept_events("ns");
    accept_writes(&fakes);
    fakes.aws.on(TAGS, Reply::s3_tags(&tags("other", "uid-1")));
    let out = pass(&fakes, &bucket("1", false)).await;
    assert!(matches!(out, Ok(Requeue::Resync(_))), "{out:?}");
    // A shared read may not refuse a bucket: it is read again before the pass says so.
    assert_eq!(fakes.aws.requests(), [TAGS, TAGS]);
    let (status, reason, _) = ready(&bodies(&fakes, &object("PATCH", "/status"))[0]);
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "NameConflict")
    );
}

#[tokio::test]
async fn a_bucket_gone_from_s3_completes_deletion_and_a_lost_finalizer_removal_is_retried() {
    let fakes = Fakes::start().await;
    fakes
        .kube
        .once(&object("PATCH", ""), Reply::kube_error(409, "Conflict"))
        .on(&object("PATCH", ""), Reply::json(200, deleting()));
    fakes.aws.on(TAGS, Reply::s3_error(404, "NoSuchBucket"));
    let b = deleting();
    let err = pass(&fakes, &b).await.unwrap_err();
    assert!(err.is_stale_write(), "{err}");
    let out = pass(&fakes, &b).await;
    assert!(matches!(out, Ok(Requeue::OnChange)), "{out:?}");
    // Each pass reads S3 again rather than trusting the last one's read.
    assert_eq!(fakes.aws.requests(), [TAGS, TAGS]);
    let removal = json!({"metadata": {"finalizers": [], "resourceVersion": "5"}});
    assert_eq!(
        bodies(&fakes, &object("PATCH", "")),
        [removal.clone(), removal]
    );
}

#[tokio::test]
async fn a_bucket_deleted_meanwhile_still_completes_deletion() {
    let fakes = Fakes::start().await;
    fakes.accept_events("ns");
    fakes
        .kube
        .on(&object("PATCH", ""), Reply::json(200, deleting()));
    let listing = "<ListVersionsResult><Name>s3op-b</Name><IsTruncated>false</IsTruncated>\
        </ListVersionsResult>";
    fakes
        .aws
        .on(TAGS, Reply::s3_tags(&owner().tags()))
        .on("GET /s3op-b/?versions", Reply::xml(200, listing))
        .on("DELETE /s3op-b/", Reply::s3_error(404, "NoSuchBucket"));
    let out = pass(&fakes, &deleting()).await;
    assert!(matches!(out, Ok(Requeue::OnChange)), "{out:?}");
    assert_eq!(
        fakes.aws.requests(),
        [TAGS, "GET /s3op-b/?versions", "DELETE /s3op-b/"]
    );
    assert_eq!(fakes.kube.requests(), [event(), object("PATCH", "")]);
    assert_eq!(bodies(&fakes, &event())[0]["reason"], "Deleted");
}

#[tokio::test]
async fn a_bucket_of_another_cluster_or_object_is_never_touched_by_deletion() {
    for foreign in [tags("other", "uid-1"), tags("c", "uid-2")] {
        let fakes = Fakes::start().await;
        fakes.accept_events("ns");
        fakes
            .kube
            .on(&object("PATCH", ""), Reply::json(200, deleting()));
        fakes.aws.on(TAGS, Reply::s3_tags(&foreign));
        let out = pass(&fakes, &deleting()).await;
        assert!(matches!(out, Ok(Requeue::OnChange)), "{out:?}");
        assert_eq!(fakes.aws.requests(), [TAGS], "{foreign:?}");
        assert_eq!(fakes.kube.requests(), [event(), object("PATCH", "")]);
        let note = &bodies(&fakes, &event())[0]["note"];
        assert_eq!(
            note,
            "S3 bucket s3op-b is not owned by this object; left untouched"
        );
    }
}

/// Another account's bucket of that name answers AccessDenied (every request expects our
/// account to own it): a name taken, reported as NameConflict, and nothing else is asked of it.
/// A bucket of our own account that we may not read stays AccessDenied.
#[tokio::test]
async fn a_denied_tag_read_is_a_name_conflict_if_the_account_lists_no_such_bucket() {
    let listed = "<ListAllMyBucketsResult><Buckets><Bucket><Name>s3op-b</Name></Bucket>\
        </Buckets></ListAllMyBucketsResult>";
    let unlisted = "<ListAllMyBucketsResult><Buckets></Buckets></ListAllMyBucketsResult>";
    for (list, reason) in [(unlisted, "NameConflict"), (listed, "AccessDenied")] {
        let fakes = Fakes::start().await;
        fakes.accept_events("ns");
        accept_writes(&fakes);
        fakes
            .aws
            .on(TAGS, Reply::s3_error(403, "AccessDenied"))
            .on("GET /", Reply::xml(200, list));
        let out = pass(&fakes, &bucket("1", false)).await;
        assert!(matches!(out, Ok(Requeue::Resync(_))), "{out:?}");
        assert_eq!(fakes.aws.requests(), [TAGS, "GET /"]);
        let statuses = bodies(&fakes, &object("PATCH", "/status"));
        let (status, got, message) = ready(statuses.last().expect("a status"));
        assert_eq!(
            (status.as_str(), got.as_str()),
            ("False", reason),
            "{message}"
        );
    }
}

#[tokio::test]
async fn a_denied_tag_read_is_gone_only_if_the_account_lists_no_such_bucket() {
    let listed = "<ListAllMyBucketsResult><Buckets><Bucket><Name>s3op-b</Name></Bucket>\
        </Buckets></ListAllMyBucketsResult>";
    let unlisted = "<ListAllMyBucketsResult><Buckets></Buckets></ListAllMyBucketsResult>";
    for (list, gone) in [(unlisted, true), (listed, false)] {
        let fakes = Fakes::start().await;
        fakes.accept_events("ns");
        accept_writes(&fakes);
        fakes
            .aws
            .on(TAGS, Reply::s3_error(403, "AccessDenied"))
            .on("GET /", Reply::xml(200, list));
        let out = pass(&fakes, &deleting()).await;
        assert_eq!(fakes.aws.requests(), [TAGS, "GET /"]);
        assert_eq!(fakes.aws.seen()[1].param("prefix"), Some("s3op-b"));
        if gone {
            assert!(matches!(out, Ok(Requeue::OnChange)), "{out:?}");
            assert_eq!(fakes.kube.requests(), [object("PATCH", "")]);
            continue;
        }
        // Ours, but unreadable: deletion waits and says why; the finalizer stays.
        assert!(matches!(out, Err(Error::DeletionBlocked(_))), "{out:?}");
        assert_eq!(fakes.kube.requests(), [event(), object("PATCH", "/status")]);
        let (_, reason, _) = ready(&bodies(&fakes, &object("PATCH", "/status"))[0]);
        assert_eq!(reason, "DeletionBlocked");
    }
}
