//! spec.logging end to end: server access logs into another Bucket of the namespace, the
//! target's policy granting exactly its sources, drift, refusals, and no cost when unused.

use std::time::Duration;

use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_sdk_s3::types::{BucketLoggingStatus, LoggingEnabled};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use s3_operator::api::Bucket;
use serde_json::{Value, json};

use crate::support::*;

const T: Duration = Duration::from_secs(60);
const SID: &str = "S3ServerAccessLogs";

/// (target bucket, prefix) of `bucket`'s server access logging; `None` when off.
async fn logging(bucket: &str) -> Option<(String, String)> {
    let out = admin_s3()
        .get_bucket_logging()
        .bucket(bucket)
        .send()
        .await
        .unwrap();
    out.logging_enabled
        .map(|l| (l.target_bucket, l.target_prefix))
}

/// The source ARNs the logging grant of `bucket`'s policy names (`None`: no grant).
async fn granted(bucket: &str) -> Option<Vec<String>> {
    let doc = bucket_policy(bucket).await?;
    let all = doc["Statement"].as_array()?.clone();
    let grant = all.into_iter().find(|s| s["Sid"] == SID)?;
    assert_eq!(grant["Effect"], "Allow");
    assert_eq!(grant["Principal"]["Service"], "logging.s3.amazonaws.com");
    assert_eq!(grant["Action"], "s3:PutObject");
    assert_eq!(grant["Resource"], format!("arn:aws:s3:::{bucket}/*"));
    assert_eq!(
        grant["Condition"]["StringEquals"]["aws:SourceAccount"],
        ACCOUNT
    );
    let arns = match &grant["Condition"]["ArnLike"]["aws:SourceArn"] {
        Value::Array(a) => a.iter().map(|v| v.as_str().unwrap().to_string()).collect(),
        v => vec![v.as_str().unwrap().to_string()],
    };
    Some(arns)
}

fn arn(bucket: &str) -> String {
    format!("arn:aws:s3:::{bucket}")
}

fn logs_to(target: &str, prefix: &str) -> Value {
    json!({"logging": {"targetBucketRef": {"name": target}, "targetPrefix": prefix}})
}

/// Two Buckets log into a third: each source's logging points at it, its policy grants the
/// logging service for exactly those two, steady state writes nothing, drift of either end is
/// put back, and a source that stops logging (or goes) leaves the grant.
#[tokio::test]
async fn logging_goes_to_a_bucket_of_the_namespace_whose_policy_grants_exactly_its_sources() {
    let (op, api, _ns) = Operator::in_new_namespace("log").await;
    let pp = PostParams::default();
    // Created in one go: the sources wait for their target to be Ready.
    for (name, spec) in [
        ("photos", logs_to("logs", "photos/")),
        (
            "docs",
            json!({"logging": {"targetBucketRef": {"name": "logs"}}, "deletionPolicy": "Delete"}),
        ),
        ("logs", json!({})),
    ] {
        api.create(&pp, &bucket(name, spec)).await.unwrap();
    }
    let logs = wait_ready(&api, "logs").await;
    let photos = wait_ready(&api, "photos").await;
    let docs = wait_ready(&api, "docs").await;
    assert_eq!(
        logging(&photos).await,
        Some((logs.clone(), "photos/".into()))
    );
    assert_eq!(logging(&docs).await, Some((logs.clone(), String::new())));
    assert_eq!(logging(&logs).await, None, "the target itself logs nowhere");
    let both = {
        let mut v = vec![arn(&docs), arn(&photos)];
        v.sort();
        v
    };
    wait_for("the grant to name both sources", T, || async {
        let mut g = granted(&logs).await?;
        g.sort();
        (g == both).then_some(())
    })
    .await;
    assert_eq!(granted(&photos).await, None, "a source grants nothing");

    // Steady state: logging is read on every resync, nothing is written (as the emulator's
    // request log and the API server's audit log count writes).
    let sent = op.sent().await;
    let puts = op.aws_calls("PutBucketLogging").await;
    let policy_puts = op.aws_calls("PutBucketPolicy").await;
    let gets = op.aws_calls("GetBucketLogging").await;
    // Two resync passes (each reads the logging of both sources), however slow the machine.
    wait_for("two resync passes", T, || async {
        (op.aws_calls("GetBucketLogging").await >= gets + 4.0).then_some(())
    })
    .await;
    assert_eq!(
        sent.writes().await,
        Vec::<String>::new(),
        "steady state wrote"
    );
    assert_eq!(op.aws_calls("PutBucketLogging").await, puts);
    assert_eq!(op.aws_calls("PutBucketPolicy").await, policy_puts);

    // Drift: logging turned off outside the operator is turned back on and reported.
    admin_s3()
        .put_bucket_logging()
        .bucket(&photos)
        .bucket_logging_status(BucketLoggingStatus::builder().build())
        .send()
        .await
        .unwrap();
    wait_for("logging restored", T, || async {
        (logging(&photos).await == Some((logs.clone(), "photos/".into()))).then_some(())
    })
    .await;
    assert!(op.drift_corrections("logging").await >= 1.0);
    // ... and the target's grant removed outside the operator comes back.
    admin_s3()
        .delete_bucket_policy()
        .bucket(&logs)
        .send()
        .await
        .unwrap();
    wait_for("grant restored", T, || async {
        granted(&logs).await.map(|g| g.len() == 2).filter(|b| *b)
    })
    .await;

    // `logging: {}` turns logging off; the grant then names the other source only.
    let off = json!({"spec": {"logging": {"targetBucketRef": null, "targetPrefix": null}}});
    api.patch("photos", &PatchParams::default(), &Patch::Merge(&off))
        .await
        .unwrap();
    wait_for("photos' logging off and out of the grant", T, || async {
        let off = logging(&photos).await.is_none();
        (off && granted(&logs).await == Some(vec![arn(&docs)])).then_some(())
    })
    .await;
    let spec = api.get("photos").await.unwrap().spec;
    assert_eq!(spec.logging, Some(Default::default()), "logging: {{}}");
    wait_reason(&api, "photos", "Available", T).await;

    // The last source deleted: no grant at all, the TLS-only policy alone.
    api.delete("docs", &DeleteParams::default()).await.unwrap();
    wait_for("the grant gone with its last source", T, || async {
        let doc = bucket_policy(&logs).await?;
        let all = doc["Statement"].as_array()?;
        (all.len() == 1 && all[0]["Sid"] == "DenyInsecureTransport").then_some(())
    })
    .await;
}

/// A target that does not exist, one of another namespace (only a name: it cannot be reached)
/// and the Bucket itself are refused naming spec.logging.targetBucketRef; a refused source is
/// served as soon as its target appears (woken by it: the resync is far off).
#[tokio::test]
async fn logging_targets_outside_the_namespace_missing_or_itself_are_refused() {
    let client = admin().await;
    let ns = namespace(&client, "logref").await;
    let other = namespace(&client, "logother").await;
    let _op = Operator::start(OperatorOpts {
        namespaces: vec![ns.clone(), other.clone()],
        resync: "300s",
        ..Default::default()
    })
    .await;
    let api = Api::<Bucket>::namespaced(client.clone(), &ns);
    let theirs_api = Api::<Bucket>::namespaced(client.clone(), &other);
    let pp = PostParams::default();
    theirs_api
        .create(&pp, &bucket("theirs", json!({})))
        .await
        .unwrap();
    let theirs = wait_ready(&theirs_api, "theirs").await;

    for (name, target) in [
        ("lost", "nowhere"),
        ("spy", "theirs"),
        ("narcissus", "narcissus"),
    ] {
        api.create(&pp, &bucket(name, logs_to(target, "x/")))
            .await
            .unwrap();
    }
    for (name, reason, says) in [
        ("lost", "BucketNotFound", "does not exist"),
        ("spy", "BucketNotFound", "does not exist"),
        ("narcissus", "InvalidSpec", "itself"),
    ] {
        let msg = wait_reason(&api, name, reason, T).await;
        assert!(
            msg.contains("spec.logging.targetBucketRef") && msg.contains(says),
            "{name}: {msg}"
        );
    }
    assert_eq!(
        granted(&theirs).await,
        None,
        "another namespace's bucket grants nothing"
    );

    // The missing target appears: the source is woken and served.
    api.create(&pp, &bucket("nowhere", json!({})))
        .await
        .unwrap();
    let target = wait_ready(&api, "nowhere").await;
    let lost = wait_ready(&api, "lost").await;
    assert_eq!(logging(&lost).await, Some((target.clone(), "x/".into())));
    assert_eq!(granted(&target).await, Some(vec![arn(&lost)]));
}

/// A Bucket without spec.logging costs no logging call: not on create, resync or delete.
#[tokio::test]
async fn a_bucket_without_logging_makes_no_logging_calls() {
    let (op, api, _ns) = Operator::in_new_namespace("nolog").await;
    let spec = json!({"deletionPolicy": "Delete"});
    api.create(&PostParams::default(), &bucket("plain", spec))
        .await
        .unwrap();
    let name = wait_ready(&api, "plain").await;
    op.two_more_calls("GetBucketPolicy").await;
    api.delete("plain", &DeleteParams::default()).await.unwrap();
    wait_for("plain to be deleted", T, || async {
        api.get_opt("plain").await.unwrap().is_none().then_some(())
    })
    .await;
    assert!(
        admin_s3().head_bucket().bucket(&name).send().await.is_err(),
        "deleted"
    );
    for operation in ["GetBucketLogging", "PutBucketLogging"] {
        assert_eq!(op.aws_calls(operation).await, 0.0, "{operation}");
    }
}

/// The emulator's logging is S3's for buckets with ACLs disabled: PutBucketLogging needs a
/// target policy granting the logging service for this very source (in any form S3 takes), and
/// Get/PutBucketLogging are checked against their own IAM actions.
#[tokio::test]
async fn emulator_logging_needs_a_grant_naming_the_source() {
    let pfx = format!("s3op-moto-{}", random(6));
    let s3 = s3_user(
        &pfx,
        "user",
        &[
            "s3:CreateBucket",
            "s3:PutBucketPolicy",
            "s3:PutBucketLogging",
        ],
    )
    .await;
    let (target, a, b) = (format!("{pfx}-t"), format!("{pfx}-a"), format!("{pfx}-b"));
    for name in [&target, &a, &b] {
        s3.create_bucket().bucket(name).send().await.unwrap();
    }
    let log_into = |source: String| {
        let s3 = s3.clone();
        let enabled = LoggingEnabled::builder()
            .target_bucket(&target)
            .target_prefix("logs/")
            .build()
            .unwrap();
        async move {
            s3.put_bucket_logging()
                .bucket(source)
                .bucket_logging_status(
                    BucketLoggingStatus::builder()
                        .logging_enabled(enabled)
                        .build(),
                )
                .send()
                .await
                .map(drop)
                .map_err(|e| e.code().unwrap_or("unknown").to_string())
        }
    };
    let refused = Err("InvalidTargetBucketForLogging".to_string());
    assert_eq!(log_into(a.clone()).await, refused, "no grant at all");
    // S3's list forms, a wildcard resource, and conditions naming source `a` only.
    let grant = json!({"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow",
        "Principal": {"Service": ["logging.s3.amazonaws.com"]},
        "Action": ["s3:PutObject"],
        "Resource": [format!("arn:aws:s3:::{target}/logs/*")],
        "Condition": {
            "ArnLike": {"aws:SourceArn": [arn(&a)]},
            "StringEquals": {"aws:SourceAccount": ACCOUNT},
        },
    }]});
    s3.put_bucket_policy()
        .bucket(&target)
        .policy(grant.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(log_into(a.clone()).await, Ok(()));
    assert_eq!(logging(&a).await, Some((target.clone(), "logs/".into())));
    assert_eq!(log_into(b.clone()).await, refused, "another source");
    let err = s3.get_bucket_logging().bucket(&a).send().await.unwrap_err();
    assert_eq!(err.code(), Some("AccessDenied"), "{err:?}");
}

/// The API server refuses what the CRD can judge alone, naming the field and the rule.
#[tokio::test]
async fn invalid_logging_specs_are_refused_naming_field_and_rule() {
    install_crds().await;
    let client = admin().await;
    let ns = namespace(&client, "logval").await;
    let api = Api::<Bucket>::namespaced(client.clone(), &ns);
    let msg = refused(
        &api,
        raw_bucket("bad", json!({"logging": {"targetPrefix": "logs/"}})),
    )
    .await;
    assert!(
        msg.contains("spec.logging.targetPrefix needs spec.logging.targetBucketRef"),
        "{msg}"
    );
    let msg = refused(
        &api,
        raw_bucket("bad", json!({"logging": {"targetBucketRef": {"name": ""}}})),
    )
    .await;
    assert!(msg.contains("spec.logging.targetBucketRef.name"), "{msg}");
    let msg = refused(
        &api,
        raw_bucket(
            "bad",
            json!({"policy": [{"sid": SID, "effect": "Allow",
        "principal": {"service": ["logging.s3.amazonaws.com"]}, "action": ["s3:PutObject"],
        "resource": ["arn:aws:s3:::s3op-x/*"]}]}),
        ),
    )
    .await;
    assert!(msg.contains("S3ServerAccessLogs is reserved"), "{msg}");
}
