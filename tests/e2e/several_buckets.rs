//! One BucketAccess for several Buckets (`spec.additionalBuckets`): one IAM user and one Secret,
//! each Bucket on its own permission and prefix, each grant ending with its own Bucket; what
//! the schema and IAM's policy size limit refuse; and an application Pod writing to two buckets
//! with the one Secret.

use std::time::Duration;

use kube::api::{Api, DeleteParams, PostParams};
use s3_operator::api::{Bucket, BucketAccess};
use serde_json::{Value, json};

use crate::access::{access, get, keys_of, put};
use crate::node::{images, node};
use crate::support::*;

const T: Duration = Duration::from_secs(60);

/// Creates the Buckets `names` in `ns` and waits until each is Ready; returns their S3 names.
async fn ready_buckets(buckets: &Api<Bucket>, names: &[&str]) -> Vec<String> {
    for name in names {
        let b = bucket(name, json!({}));
        buckets.create(&PostParams::default(), &b).await.unwrap();
    }
    let mut s3_names = vec![];
    for name in names {
        s3_names.push(wait_ready(buckets, name).await);
    }
    s3_names
}

/// The spec of an access to `data` (ReadWrite) and `others` besides.
fn spec(others: Value) -> Value {
    json!({"bucketRef": {"name": "data"}, "permission": "ReadWrite", "additionalBuckets": others})
}

/// An access to `data` (ReadWrite) and `logs` (ReadOnly, under `app/`): one user with one
/// policy and one key; the Secret names each bucket; the key does in each bucket exactly what
/// its entry says and nothing in a Bucket it does not name. A Bucket it names that does not
/// exist (or exists only in another namespace) is left out, and Ready says so; deleting `logs`
/// withdraws its part of the grant only.
#[tokio::test]
async fn one_access_grants_several_buckets_each_on_its_own_terms() {
    let client = admin().await;
    let ns = namespace(&client, "several").await;
    let other_ns = namespace(&client, "several-other").await;
    let mut op = Operator::start(OperatorOpts {
        namespaces: vec![ns.clone(), other_ns.clone()],
        resync: "1h",
        ..Default::default()
    })
    .await;
    let buckets = Api::<Bucket>::namespaced(client.clone(), &ns);
    let s3 = ready_buckets(&buckets, &["data", "logs", "unnamed"]).await;
    let (data, logs, unnamed) = (&s3[0], &s3[1], &s3[2]);
    // A Bucket "ghost" exists only in another namespace: naming it here reaches nothing.
    let theirs = Api::<Bucket>::namespaced(client.clone(), &other_ns);
    let ghost = ready_buckets(&theirs, &["ghost"]).await.remove(0);

    let accesses = Api::<BucketAccess>::namespaced(client.clone(), &ns);
    let others = json!([
        {"bucketRef": {"name": "logs"}, "permission": "ReadOnly", "prefix": "app/"},
        {"bucketRef": {"name": "ghost"}, "permission": "ReadWrite"},
    ]);
    let made = access("app", spec(others));
    accesses
        .create(&PostParams::default(), &made)
        .await
        .unwrap();
    let msg = wait_reason(&accesses, "app", "BucketNotFound", T).await;
    assert!(
        msg.contains("Bucket ghost does not exist in namespace"),
        "{msg}"
    );
    assert!(
        msg.contains(&format!("{data}, {logs}")),
        "granted on both: {msg}"
    );

    let secrets = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), &ns);
    let secret = wait_for("the Secret", T, || async {
        Some(secret_data(&secrets.get_opt("app").await.ok()??))
    })
    .await;
    assert_eq!(&secret["BUCKET_NAME"], data, "the one-bucket keys stay");
    assert_eq!(&secret["BUCKET_NAME_DATA"], data);
    assert_eq!(&secret["BUCKET_NAME_LOGS"], logs);
    assert_eq!(secret["BUCKET_ARN_LOGS"], format!("arn:aws:s3:::{logs}"));
    assert!(
        !secret.contains_key("BUCKET_NAME_GHOST"),
        "{:?}",
        secret.keys()
    );

    // One identity: one user, one inline policy, one key.
    let user = iam_user_of(&accesses.get("app").await.unwrap());
    let policies = admin_iam()
        .list_user_policies()
        .user_name(&user)
        .send()
        .await;
    assert_eq!(policies.unwrap().policy_names().len(), 1);
    let doc = user_policy(&user)
        .await
        .expect("the access policy")
        .to_string();
    eprintln!("policy with 2 Buckets granted: {} characters", doc.len());
    assert!(
        !doc.contains(&ghost),
        "another namespace's bucket is never granted"
    );
    assert_eq!(keys_of(&user).await.len(), 1);

    // Each bucket on its own terms, and nothing in a Bucket not named.
    let app = s3_with(
        &secret["AWS_ACCESS_KEY_ID"],
        &secret["AWS_SECRET_ACCESS_KEY"],
    );
    let admin = admin_s3();
    for key in ["app/seen.txt", "other/hidden.txt"] {
        put(&admin, logs, key).await.unwrap();
    }
    put(&app, data, "written.txt")
        .await
        .expect("ReadWrite on data");
    get(&app, logs, "app/seen.txt")
        .await
        .expect("ReadOnly on logs under app/");
    assert!(
        get(&app, logs, "other/hidden.txt").await.is_err(),
        "outside its prefix"
    );
    assert!(
        put(&app, logs, "app/new.txt").await.is_err(),
        "ReadOnly on logs"
    );
    assert!(
        put(&app, unnamed, "x.txt").await.is_err(),
        "a Bucket it does not name"
    );
    assert!(
        put(&app, &ghost, "x.txt").await.is_err(),
        "another namespace's bucket"
    );

    // `logs` deleted: its part of the grant goes, and its keys; the rest stands.
    buckets
        .delete("logs", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the grant on logs to be withdrawn", T, || async {
        get(&app, logs, "app/seen.txt").await.is_err().then_some(())
    })
    .await;
    // Its keys go too, and Ready names it.
    let secret = wait_for("the Secret without logs' keys", T, || async {
        let data = secret_data(&secrets.get("app").await.ok()?);
        (!data.contains_key("BUCKET_NAME_LOGS")).then_some(data)
    })
    .await;
    assert_eq!(&secret["BUCKET_NAME_DATA"], data);
    // The pass writes the Secret, then the status that reports it.
    wait_for("Ready to name logs", T, || async {
        let status = accesses.get("app").await.ok()?.status;
        let (_, reason, msg) = ready_of(serde_json::to_value(status).ok())?;
        (reason == "BucketNotFound" && msg.contains("Bucket logs")).then_some(())
    })
    .await;
    put(&app, data, "still.txt")
        .await
        .expect("data is still granted");
    op.assert_no_reconcile_panic().await;
}

/// The schema refuses a list that names a Bucket twice, names `bucketRef`'s again or is too
/// long, and a prefix IAM would expand; a grant over IAM's 2,048 characters for a user is
/// InvalidSpec naming the limit, and no IAM user is made for it.
#[tokio::test]
async fn what_several_buckets_may_not_ask_for_is_refused_and_nothing_is_written() {
    let client = admin().await;
    let ns = namespace(&client, "several-refused").await;
    let accesses = Api::<BucketAccess>::namespaced(client.clone(), &ns);
    let raw = |others: Value| {
        json!({"apiVersion": "s3.operator.dev/v1alpha1", "kind": "BucketAccess",
            "metadata": {"name": "bad"}, "spec": spec(others)})
    };
    let one = |name: &str| json!({"bucketRef": {"name": name}, "permission": "ReadOnly"});
    let msg = refused(&accesses, raw(json!([one("a"), one("a")]))).await;
    assert!(
        msg.contains("spec.additionalBuckets names a Bucket twice"),
        "{msg}"
    );
    let msg = refused(&accesses, raw(json!([one("data")]))).await;
    assert!(
        msg.contains("names the Bucket of spec.bucketRef again"),
        "{msg}"
    );
    let ten: Vec<Value> = (0..10).map(|i| one(&format!("b{i}"))).collect();
    let msg = refused(&accesses, raw(json!(ten))).await;
    assert!(msg.contains("spec.additionalBuckets"), "{msg}");
    assert!(msg.contains("must have at most 9 items"), "{msg}");
    let wild = json!([{"bucketRef": {"name": "a"}, "permission": "ReadOnly", "prefix": "*"}]);
    let msg = refused(&accesses, raw(wild)).await;
    assert!(
        msg.contains("spec.additionalBuckets[].prefix must not"),
        "{msg}"
    );

    let mut op = Operator::start(OperatorOpts {
        namespaces: vec![ns.clone()],
        resync: "1h",
        ..Default::default()
    })
    .await;
    let buckets = Api::<Bucket>::namespaced(client.clone(), &ns);
    ready_buckets(&buckets, &["data", "b0", "b1", "b2"]).await;
    let long = "p".repeat(300);
    let others: Vec<Value> = (0..3)
        .map(|i| json!({"bucketRef": {"name": format!("b{i}")}, "permission": "ReadWrite", "prefix": long}))
        .collect();
    let big = access("big", spec(json!(others)));
    accesses.create(&PostParams::default(), &big).await.unwrap();
    let msg = wait_reason(&accesses, "big", "InvalidSpec", T).await;
    assert!(msg.contains("over IAM's limit of 2048"), "{msg}");
    let status = accesses
        .get("big")
        .await
        .unwrap()
        .status
        .unwrap_or_default();
    assert!(status.user_arn.is_none(), "no IAM user made: {status:?}");
    let uid = accesses.get("big").await.unwrap().metadata.uid.unwrap();
    let user = s3_operator::aws::naming::iam_name(&ns, "big", &uid);
    let found = admin_iam().get_user().user_name(&user).send().await;
    assert!(found.is_err(), "no IAM user {user} for the refused access");
    op.assert_no_reconcile_panic().await;
}

/// An application Pod with two containers, both given the one Secret: one writes to the
/// access's Bucket (`BUCKET_NAME`), the other to its second Bucket (`BUCKET_NAME_LOGS` as its
/// bucket), with the same key pair.
#[tokio::test]
async fn a_pod_writes_to_two_buckets_with_one_secret() {
    let node = node();
    let images = images(&node).await;
    let client = admin().await;
    let ns = namespace(&client, "several-pod").await;
    let mut op = Operator::start(OperatorOpts {
        namespaces: vec![ns.clone()],
        aws_endpoint: Some(node.aws_endpoint.clone()),
        resync: "1h",
        ..Default::default()
    })
    .await;
    let buckets = Api::<Bucket>::namespaced(client.clone(), &ns);
    let s3 = ready_buckets(&buckets, &["data", "logs"]).await;
    let accesses = Api::<BucketAccess>::namespaced(client.clone(), &ns);
    let others =
        json!([{"bucketRef": {"name": "logs"}, "permission": "ReadWrite", "prefix": "several/"}]);
    let made = access("app", spec(others));
    accesses
        .create(&PostParams::default(), &made)
        .await
        .unwrap();
    wait_reason(&accesses, "app", "Available", T).await;
    let key = format!("several/{}.txt", random(6));
    let env_from = json!([{"secretRef": {"name": "app"}}]);
    let to_logs = json!([{"name": "BUCKET_NAME",
        "valueFrom": {"secretKeyRef": {"name": "app", "key": "BUCKET_NAME_LOGS"}}}]);
    let containers = [(env_from.clone(), json!([])), (env_from, to_logs)];
    crate::cluster::run_app_containers(&ns, "two-buckets", &images.app, &containers, &key).await;
    for bucket in &s3 {
        let got = get(&admin_s3(), bucket, &key)
            .await
            .expect("the Pod's object");
        assert!(String::from_utf8_lossy(&got).starts_with("written by bucket-app"));
    }
    op.assert_no_reconcile_panic().await;
}
