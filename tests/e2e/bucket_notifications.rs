//! Bucket `spec.notifications` end to end: events reach an allow-listed SQS queue, a target off
//! the allow-list is refused before anything is written, drift is corrected, EventBridge goes on
//! and off, and a Bucket without notifications makes no notification call at all.

use std::time::Duration;

use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_sdk_s3::types::{EventBridgeConfiguration, NotificationConfiguration};
use kube::api::{Api, Patch, PatchParams, PostParams};
use s3_operator::api::Bucket;
use serde::Deserialize;
use serde_json::json;

use crate::support::*;

const T: Duration = Duration::from_secs(60);
const GET: &str = "GetBucketNotificationConfiguration";
const PUT: &str = "PutBucketNotificationConfiguration";
/// Queues under this prefix are allow-listed but never created.
const MISSING: &str = "arn:aws:sqs:us-east-1:123456789012:s3op-missing-";

/// The moto virtualenv's python (with boto3), which `hack/env.sh` runs moto from: the tests
/// reach SQS through it, as the crate has no SQS client.
fn moto_python() -> String {
    let lib = std::fs::read_to_string(repo().join("hack/lib.sh")).expect("hack/lib.sh");
    let version = lib
        .lines()
        .find_map(|l| l.strip_prefix("MOTO_VERSION=\""))
        .and_then(|v| v.split('"').next())
        .expect("MOTO_VERSION in hack/lib.sh");
    let cache = std::env::var("S3OP_CACHE").unwrap_or_else(|_| {
        format!(
            "{}/.cache/s3-operator",
            std::env::var("HOME").unwrap_or_default()
        )
    });
    format!("{cache}/venv-moto-{version}/bin/python")
}

/// One SQS call as the test's admin identity: `create NAME` prints the queue's URL and ARN,
/// `receive URL` the bodies of the messages waiting (removing them).
fn sqs(args: &[&str]) -> serde_json::Value {
    const SCRIPT: &str = r#"
import json, os, sys
import boto3
sqs = boto3.client("sqs", endpoint_url=os.environ["EP"], region_name=os.environ["REGION"],
                   aws_access_key_id=os.environ["KEY"], aws_secret_access_key=os.environ["SECRET"])
if sys.argv[1] == "create":
    url = sqs.create_queue(QueueName=sys.argv[2])["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    print(json.dumps({"url": url, "arn": arn}))
else:
    out = sqs.receive_message(QueueUrl=sys.argv[2], MaxNumberOfMessages=10, WaitTimeSeconds=1)
    bodies = [json.loads(m["Body"]) for m in out.get("Messages", [])]
    for m in out.get("Messages", []):
        sqs.delete_message(QueueUrl=sys.argv[2], ReceiptHandle=m["ReceiptHandle"])
    print(json.dumps(bodies))
"#;
    let (key, secret) = &env().admin_key;
    let out = std::process::Command::new(moto_python())
        .arg("-c")
        .arg(SCRIPT)
        .args(args)
        .env("EP", &env().aws_endpoint)
        .env("REGION", &env().region)
        .env("KEY", key)
        .env("SECRET", secret)
        .output()
        .expect("the moto virtualenv's python");
    assert!(
        out.status.success(),
        "sqs {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON from the SQS helper")
}

/// The records S3 sent to the queue since the last call (test events left out).
fn records(queue_url: &str) -> Vec<serde_json::Value> {
    let bodies = sqs(&["receive", queue_url]);
    bodies
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| b["Records"].as_array())
        .flatten()
        .cloned()
        .collect()
}

/// What S3 holds, as the admin reads it: (EventBridge on, [(queue id, ARN, events, filter rules)]).
type Queues = Vec<(String, String, Vec<String>, Vec<(String, String)>)>;
async fn notifications(bucket: &str) -> (bool, Queues) {
    let out = admin_s3()
        .get_bucket_notification_configuration()
        .bucket(bucket)
        .send()
        .await
        .unwrap();
    let queues = out
        .queue_configurations
        .unwrap_or_default()
        .into_iter()
        .map(|q| {
            let rules = q
                .filter
                .and_then(|f| f.key)
                .and_then(|k| k.filter_rules)
                .unwrap_or_default()
                .into_iter()
                .map(|r| {
                    let name = r.name.map(|n| n.as_str().to_ascii_lowercase());
                    (name.unwrap_or_default(), r.value.unwrap_or_default())
                })
                .collect();
            let events = q.events.iter().map(|e| e.as_str().to_string()).collect();
            (q.id.unwrap_or_default(), q.queue_arn, events, rules)
        })
        .collect();
    (out.event_bridge_configuration.is_some(), queues)
}

async fn put_notifications(bucket: &str, config: NotificationConfiguration) {
    admin_s3()
        .put_bucket_notification_configuration()
        .bucket(bucket)
        .notification_configuration(config)
        .send()
        .await
        .unwrap();
}

async fn put_object(bucket: &str, key: &str) {
    admin_s3()
        .put_object()
        .bucket(bucket)
        .key(key)
        .body(b"x".to_vec().into())
        .send()
        .await
        .unwrap();
}

async fn patch_notifications(api: &Api<Bucket>, name: &str, n: serde_json::Value) {
    let patch = json!({"spec": {"notifications": n}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

#[tokio::test]
async fn notifications_reach_allow_listed_queues_and_are_kept() {
    let client = admin().await;
    let ns = namespace(&client, "ntf").await;
    let queue = sqs(&["create", &format!("s3op-e2e-{}", random(8))]);
    let (url, arn) = (
        queue["url"].as_str().unwrap(),
        queue["arn"].as_str().unwrap(),
    );
    let op = Operator::start(OperatorOpts {
        namespaces: vec![ns.clone()],
        resync: "2s",
        // The queue by its ARN, and missing ones through a prefix entry.
        extra_args: vec![
            "--allowed-notification-targets".into(),
            format!("{arn},{MISSING}*"),
        ],
        ..Default::default()
    })
    .await;
    let api = Api::<Bucket>::namespaced(client.clone(), &ns);
    let plain = omitted_notifications_are_never_read(&op, &api).await;
    a_queue_off_the_allow_list_is_refused(&op, &api, arn).await;
    let (name, want) = allow_listed_events_arrive_filtered_by_key(&api, arn, url).await;
    notifications_are_kept_and_drift_corrected(&op, &ns, &name, &want).await;
    event_bridge_turns_on_and_off_and_targets_go(&api, &name, &want).await;
    omitted_again_notifications_are_unmanaged(&op, &api, &name, &plain).await;
    a_missing_queue_is_reported_as_s3_refuses_it(&api).await;
}

/// Omitted: never read nor written, on create or resync. Returns the
/// S3 name of that Bucket.
async fn omitted_notifications_are_never_read(op: &Operator, api: &Api<Bucket>) -> String {
    api.create(&PostParams::default(), &bucket("plain", json!({})))
        .await
        .unwrap();
    let plain = wait_ready(api, "plain").await;
    op.two_more_calls("GetBucketPolicy").await;
    for operation in [GET, PUT] {
        assert_eq!(op.aws_calls(operation).await, 0.0, "{operation}");
    }
    plain
}

/// A queue off the allow-list: refused naming the field and the rule; nothing is created.
async fn a_queue_off_the_allow_list_is_refused(op: &Operator, api: &Api<Bucket>, arn: &str) {
    let stranger = format!("{}ntf-{}", prefix(&op.cluster), random(6));
    let other_queue = arn.replace("s3op-e2e-", "s3op-other-");
    let spec = json!({"bucketName": stranger, "notifications": {"queues": [
        {"arn": other_queue, "events": ["s3:ObjectCreated:*"]}]}});
    api.create(&PostParams::default(), &bucket("stranger", spec))
        .await
        .unwrap();
    let msg = wait_reason(api, "stranger", "InvalidSpec", T).await;
    assert!(
        msg.contains("spec.notifications.queues[0].arn")
            && msg.contains(&other_queue)
            && msg.contains("--allowed-notification-targets"),
        "{msg}"
    );
    assert!(!bucket_exists(&stranger).await, "nothing created");
    assert_eq!(op.aws_calls(PUT).await, 0.0, "nothing written");
}

/// Allow-listed: the configuration is in S3 and S3's events arrive, filtered by key. Returns
/// the bucket and its configuration as read back.
async fn allow_listed_events_arrive_filtered_by_key(
    api: &Api<Bucket>,
    arn: &str,
    url: &str,
) -> (String, (bool, Queues)) {
    let spec = json!({"notifications": {"queues": [{"id": "uploads", "arn": arn,
        "events": ["s3:ObjectCreated:*"], "filter": {"prefix": "in/"}}]}});
    api.create(&PostParams::default(), &bucket("events", spec))
        .await
        .unwrap();
    let name = wait_ready(api, "events").await;
    let want = (
        false,
        vec![(
            "uploads".to_string(),
            arn.to_string(),
            vec!["s3:ObjectCreated:*".to_string()],
            vec![("prefix".to_string(), "in/".to_string())],
        )],
    );
    assert_eq!(notifications(&name).await, want);
    records(url);
    put_object(&name, "out/skipped.txt").await;
    put_object(&name, "in/photo.jpg").await;
    let got = wait_for("the event in the queue", T, || async {
        let r = records(url);
        (!r.is_empty()).then_some(r)
    })
    .await;
    let keys: Vec<&str> = got
        .iter()
        .map(|r| r["s3"]["object"]["key"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(keys, ["in%2Fphoto.jpg"], "{got:?}");
    assert_eq!(got[0]["s3"]["configurationId"], "uploads");
    assert_eq!(got[0]["s3"]["bucket"]["name"], name.as_str());
    (name, want)
}

/// Steady state: read on every resync, never rewritten. Drift: notifications removed outside
/// the operator are put back and reported.
async fn notifications_are_kept_and_drift_corrected(
    op: &Operator,
    ns: &str,
    name: &str,
    want: &(bool, Queues),
) {
    let puts = op.aws_calls(PUT).await;
    op.two_more_calls(GET).await;
    assert_eq!(op.aws_calls(PUT).await, puts);
    put_notifications(name, NotificationConfiguration::builder().build()).await;
    wait_for("notifications restored", T, || async {
        (notifications(name).await == *want).then_some(())
    })
    .await;
    assert!(op.drift_corrections("notifications").await >= 1.0);
    wait_event(ns, "DriftCorrected", &["notifications"]).await;
}

/// EventBridge on, then off (the queue stays); then every target removed empties the
/// configuration.
async fn event_bridge_turns_on_and_off_and_targets_go(
    api: &Api<Bucket>,
    name: &str,
    want: &(bool, Queues),
) {
    patch_notifications(api, "events", json!({"eventBridge": true})).await;
    wait_for("EventBridge on", T, || async {
        let (eb, queues) = notifications(name).await;
        (eb && queues == want.1).then_some(())
    })
    .await;
    patch_notifications(api, "events", json!({"eventBridge": false})).await;
    wait_for("EventBridge off", T, || async {
        (notifications(name).await == *want).then_some(())
    })
    .await;
    patch_notifications(api, "events", json!({"queues": null})).await;
    wait_for("notifications removed", T, || async {
        (notifications(name).await == (false, vec![])).then_some(())
    })
    .await;
}

/// Omitted again: unmanaged, so what is set outside the operator stays and is not read.
async fn omitted_again_notifications_are_unmanaged(
    op: &Operator,
    api: &Api<Bucket>,
    name: &str,
    plain: &str,
) {
    patch_notifications(api, "events", serde_json::Value::Null).await;
    wait_for("the spec served", T, || async {
        let b = api.get("events").await.ok()?;
        let st = b.status?;
        (st.observed_generation == b.metadata.generation).then_some(())
    })
    .await;
    // Two resync passes after the spec was served: whatever reconcile was in flight when it
    // changed has ended, so the baseline below counts only the unmanaged passes.
    op.two_more_calls("GetBucketPolicy").await;
    let eb = NotificationConfiguration::builder()
        .event_bridge_configuration(EventBridgeConfiguration::builder().build())
        .build();
    put_notifications(name, eb).await;
    let reads = op.aws_calls(GET).await;
    op.two_more_calls("GetBucketPolicy").await;
    assert_eq!(op.aws_calls(GET).await, reads, "unmanaged: not read");
    assert_eq!(notifications(name).await, (true, vec![]));
    // The plain Bucket was never concerned.
    assert_eq!(notifications(plain).await, (false, vec![]));
}

/// Allow-listed (by prefix) but missing: S3 refuses it, and the condition says why.
async fn a_missing_queue_is_reported_as_s3_refuses_it(api: &Api<Bucket>) {
    let missing = format!("{MISSING}{}", random(6));
    let spec = json!({"notifications": {"queues": [
        {"arn": missing, "events": ["s3:ObjectRemoved:*"]}]}});
    api.create(&PostParams::default(), &bucket("missing", spec))
        .await
        .unwrap();
    let msg = wait_reason(api, "missing", "InvalidSpec", T).await;
    assert!(
        msg.contains(PUT) && msg.contains("Unable to validate") && msg.contains(&missing),
        "{msg}"
    );
}

/// The CRD refuses a FIFO queue, a topic ARN among queues and an unknown event type.
#[tokio::test]
async fn invalid_notifications_are_refused_naming_field_and_rule() {
    install_crds().await;
    let client = admin().await;
    let ns = namespace(&client, "ntfval").await;
    let api = Api::<Bucket>::namespaced(client, &ns);
    let q = |arn: &str, event: &str| json!({"queues": [{"arn": arn, "events": [event]}]});
    let fifo = "arn:aws:sqs:us-east-1:123456789012:q.fifo";
    let topic = "arn:aws:sns:us-east-1:123456789012:t";
    let good = "arn:aws:sqs:us-east-1:123456789012:q";
    for (n, want) in [
        (
            q(fifo, "s3:ObjectCreated:*"),
            "spec.notifications.queues[].arn must be a standard SQS queue ARN",
        ),
        (
            q(topic, "s3:ObjectCreated:*"),
            "spec.notifications.queues[].arn must be a standard SQS queue ARN",
        ),
        (q(good, "s3:ObjectCreated:Bogus"), "s3:ObjectCreated:Bogus"),
        (
            json!({"topics": [{"arn": good, "events": ["s3:ObjectCreated:*"]}]}),
            "spec.notifications.topics[].arn must be a standard SNS topic ARN",
        ),
    ] {
        let err = api
            .create(
                &PostParams::default(),
                &bucket("b", json!({"notifications": n})),
            )
            .await
            .unwrap_err();
        let msg = match err {
            kube::Error::Api(e) => e.message,
            other => panic!("{other:?}"),
        };
        assert!(msg.contains(want), "{n}: {msg}");
    }
}

/// The emulator answers GetBucketNotificationConfiguration as S3 does (a root element the SDK
/// reads when there is no configuration, the EventBridge configuration when it is on), refuses
/// a queue that does not exist, and authorizes both calls with their IAM actions.
#[tokio::test]
async fn emulator_notifications_match_s3() {
    let pfx = format!("s3op-moto-{}", random(6));
    let s3 = s3_user(
        &pfx,
        "user",
        &[
            "s3:CreateBucket",
            "s3:GetBucketNotification",
            "s3:PutBucketNotification",
        ],
    )
    .await;
    let name = format!("{pfx}-eb");
    s3.create_bucket().bucket(&name).send().await.unwrap();
    let read = || async {
        s3.get_bucket_notification_configuration()
            .bucket(&name)
            .send()
            .await
            .unwrap()
            .event_bridge_configuration
            .is_some()
    };
    assert!(!read().await);
    let on = NotificationConfiguration::builder()
        .event_bridge_configuration(EventBridgeConfiguration::builder().build())
        .build();
    s3.put_bucket_notification_configuration()
        .bucket(&name)
        .notification_configuration(on.clone())
        .send()
        .await
        .unwrap();
    assert!(read().await);
    s3.put_bucket_notification_configuration()
        .bucket(&name)
        .notification_configuration(NotificationConfiguration::builder().build())
        .send()
        .await
        .unwrap();
    assert!(!read().await);
    let queue = aws_sdk_s3::types::QueueConfiguration::builder()
        .queue_arn(format!("{MISSING}{}", random(6)))
        .events(aws_sdk_s3::types::Event::S3ObjectCreated)
        .build()
        .unwrap();
    let err = s3
        .put_bucket_notification_configuration()
        .bucket(&name)
        .notification_configuration(
            NotificationConfiguration::builder()
                .queue_configurations(queue)
                .build(),
        )
        .send()
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("InvalidArgument"), "{err:?}");
    assert!(
        err.message()
            .unwrap_or_default()
            .contains("Unable to validate"),
        "{err:?}"
    );

    // Without the notification actions both calls are denied.
    let other = s3_user(&pfx, "other", &["s3:CreateBucket", "s3:ListBucket"]).await;
    let err = other
        .put_bucket_notification_configuration()
        .bucket(&name)
        .notification_configuration(on)
        .send()
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("AccessDenied"), "{err:?}");
    let err = other
        .get_bucket_notification_configuration()
        .bucket(&name)
        .send()
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("AccessDenied"), "{err:?}");
}

/// The chart passes both allow-lists and the COMPLIANCE consent to the operator (lists
/// comma-joined, as its flags read them), sets none by default (the container stays
/// config/manager's), and its schema refuses an entry that is no SQS or SNS ARN.
#[test]
fn helm_chart_passes_the_allow_lists_to_the_operator() {
    let env_of = |sets: &[(&str, &str)]| -> Vec<(String, String)> {
        let mut args = vec!["template", "x", "charts/s3-operator"];
        for (flag, s) in sets {
            args.extend([*flag, *s]);
        }
        let out = tool("helm", &args, None);
        serde_yaml::Deserializer::from_str(&out)
            .filter_map(|d| serde_json::to_value(serde_yaml::Value::deserialize(d).ok()?).ok())
            .filter(|d| d["kind"] == "Deployment")
            .flat_map(|d| {
                d["spec"]["template"]["spec"]["containers"][0]["env"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .filter(|e| e["name"].as_str().unwrap_or_default().starts_with("ALLOW"))
            .map(|e| {
                let name = e["name"].as_str().unwrap_or_default().to_string();
                (name, e["value"].as_str().unwrap_or_default().to_string())
            })
            .collect()
    };
    assert_eq!(env_of(&[]), vec![]);
    let queues = "arn:aws:sqs:us-east-1:123456789012:team-*";
    let topic = "arn:aws:sns:us-east-1:123456789012:t";
    let targets = format!("allowedNotificationTargets={{{queues},{topic}}}");
    let got = env_of(&[
        ("--set-string", &targets),
        (
            "--set-string",
            "allowedPolicyPrincipals={123456789012,logging.s3.amazonaws.com}",
        ),
        ("--set", "allowComplianceRetention=true"),
    ]);
    assert_eq!(
        got,
        vec![
            (
                "ALLOWED_POLICY_PRINCIPALS".to_string(),
                "123456789012,logging.s3.amazonaws.com".to_string()
            ),
            (
                "ALLOWED_NOTIFICATION_TARGETS".to_string(),
                format!("{queues},{topic}")
            ),
            ("ALLOW_COMPLIANCE_RETENTION".to_string(), "true".to_string()),
        ]
    );
    let (code, out, err) = try_tool(
        "helm",
        &[
            "template",
            "x",
            "charts/s3-operator",
            "--set",
            "allowedNotificationTargets={arn:aws:lambda:us-east-1:123456789012:function:f}",
        ],
        None,
    );
    assert_ne!(code, 0, "a Lambda ARN was accepted:\n{out}");
    assert!(err.contains("allowedNotificationTargets"), "{err}");
}
