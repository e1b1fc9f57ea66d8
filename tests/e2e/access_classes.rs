//! BucketAccessClass end to end: a namespace's default class fills in the rotation, each limit
//! refuses an access with a message naming field, class and rule (and nothing is created), a
//! namespace outside a class's selector may not use it, and a class tightened under a live
//! access reports the violation while the access's credentials keep working.
//!
//! Classes are cluster-scoped and tests run side by side: every class here selects only the
//! namespaces labelled with its test's own group.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use s3_operator::api::{Bucket, BucketAccess, BucketAccessClass};
use s3_operator::aws::naming;
use serde_json::{Value, json};

use crate::access::access;
use crate::support::*;

const T: Duration = Duration::from_secs(60);
const GROUP: &str = "e2e.s3.operator.dev/class-group";

/// A new namespace labelled with a group of its own; returns it and the group. (The CRDs are
/// installed first: classes are made before the operator starts.)
async fn grouped_namespace(client: &kube::Client, tag: &str) -> (String, String) {
    install_crds().await;
    let ns = namespace(client, tag).await;
    let group = random(8);
    label(client, &ns, &group).await;
    (ns, group)
}

async fn label(client: &kube::Client, ns: &str, group: &str) {
    let patch = json!({"metadata": {"labels": {GROUP: group}}});
    Api::<Namespace>::all(client.clone())
        .patch(ns, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("label namespace");
}

fn selecting(group: &str) -> Value {
    json!({"matchLabels": {GROUP: group}})
}

/// Creates BucketAccessClass `name` (the default of the namespaces it selects if `default`).
async fn create_class(client: &kube::Client, name: &str, default: bool, spec: Value) {
    let mut meta = json!({"name": name});
    if default {
        meta["annotations"] = json!({"s3.operator.dev/is-default-class": "true"});
    }
    let class: BucketAccessClass = serde_json::from_value(json!({
        "apiVersion": "s3.operator.dev/v1alpha1", "kind": "BucketAccessClass",
        "metadata": meta, "spec": spec,
    }))
    .expect("a BucketAccessClass");
    Api::<BucketAccessClass>::all(client.clone())
        .create(&PostParams::default(), &class)
        .await
        .expect("create BucketAccessClass");
}

async fn delete_classes(client: &kube::Client, names: &[&str]) {
    let api = Api::<BucketAccessClass>::all(client.clone());
    for name in names {
        let _ = api.delete(name, &DeleteParams::default()).await;
    }
}

/// A Ready Bucket `data` in `ns`; returns its S3 name.
async fn ready_bucket(client: &kube::Client, ns: &str) -> String {
    let buckets = Api::<Bucket>::namespaced(client.clone(), ns);
    let spec = json!({"deletionPolicy": "Delete", "forceDelete": true});
    buckets
        .create(&PostParams::default(), &bucket("data", spec))
        .await
        .unwrap();
    wait_ready(&buckets, "data").await
}

async fn create_access(api: &Api<BucketAccess>, name: &str, mut spec: Value) {
    spec["bucketRef"] = json!({"name": "data"});
    api.create(&PostParams::default(), &access(name, spec))
        .await
        .unwrap();
}

/// Does AWS hold a user or role for access `name` (as the operator would name it)?
async fn identity_exists(api: &Api<BucketAccess>, ns: &str, name: &str) -> bool {
    let a = api.get(name).await.unwrap();
    let iam_name = naming::iam_name(ns, name, a.metadata.uid.as_deref().unwrap());
    let iam = admin_iam();
    iam.get_user().user_name(&iam_name).send().await.is_ok()
        || iam.get_role().role_name(&iam_name).send().await.is_ok()
}

/// The operator for `ns`, with a rotation floor of `min_rotation` (`--min-rotation-interval`).
async fn operator_for(ns: &str, min_rotation: &str) -> Operator {
    Operator::start(OperatorOpts {
        namespaces: vec![ns.to_string()],
        env: vec![("MIN_ROTATION_INTERVAL".into(), min_rotation.into())],
        ..Default::default()
    })
    .await
}

#[tokio::test]
async fn a_default_class_fills_in_the_rotation_and_is_shown_in_status() {
    let client = admin().await;
    let (ns, group) = grouped_namespace(&client, "bkac-default").await;
    let ours = format!("e2e-{group}-default");
    let rotation = json!({"default": {"interval": "720h", "gracePeriod": "1h"}});
    let spec = json!({"namespaceSelector": selecting(&group), "rotation": rotation});
    create_class(&client, &ours, true, spec).await;
    // A newer default class that does not select the namespace is not in force there.
    let elsewhere = format!("e2e-{group}-elsewhere");
    let other = json!({"matchLabels": {GROUP: format!("not-{group}")}});
    let spec = json!({"namespaceSelector": other, "allowedPermissions": ["ReadOnly"]});
    create_class(&client, &elsewhere, true, spec).await;
    let _op = operator_for(&ns, "10s").await;
    ready_bucket(&client, &ns).await;
    let accesses = Api::<BucketAccess>::namespaced(client.clone(), &ns);
    create_access(&accesses, "rw", json!({"permission": "ReadWrite"})).await;
    wait_reason(&accesses, "rw", "Available", T).await;
    let rw = accesses.get("rw").await.unwrap();
    assert_eq!(
        rw.spec.credentials.rotation, None,
        "spec is left as written"
    );
    let st = rw.status.unwrap();
    assert_eq!(st.class_name.as_deref(), Some(ours.as_str()));
    let (last, next) = (st.last_rotation_time.unwrap().0, st.next_rotation_time);
    let next = next.expect("the class's rotation is in force").0;
    assert_eq!(
        next.duration_since(last),
        jiff::SignedDuration::from_hours(720)
    );
    delete_classes(&client, &[&ours, &elsewhere]).await;
}

/// Accesses naming `class`, each breaking one of its limits, and the message each gets.
fn breaking(class: &str) -> Vec<(&'static str, Value, String)> {
    let every = |i: &str| json!({"rotation": {"interval": i, "gracePeriod": "1m"}});
    let day = every("24h");
    let breaks =
        |field: &str, rule: &str| format!("{field} breaks BucketAccessClass {class}: {rule}");
    vec![
        (
            "role",
            json!({"permission": "ReadOnly", "prefix": "in/",
                "credentials": {"type": "ServiceAccountRole", "serviceAccountName": "app"}}),
            breaks(
                "spec.credentials.type ServiceAccountRole",
                "allowedCredentialTypes is [AccessKey]",
            ),
        ),
        (
            "rw",
            json!({"permission": "ReadWrite", "prefix": "in/", "credentials": day}),
            breaks(
                "spec.permission ReadWrite",
                "allowedPermissions is [ReadOnly, WriteOnly]",
            ),
        ),
        (
            "whole",
            json!({"permission": "ReadOnly", "credentials": day}),
            breaks("spec.prefix unset", "requirePrefix is true"),
        ),
        (
            "fast",
            json!({"permission": "ReadOnly", "prefix": "in/", "credentials": every("90m")}),
            breaks(
                "spec.credentials.rotation.interval 1h 30m",
                "rotation.minimum is 2h",
            ),
        ),
        (
            "slow",
            json!({"permission": "ReadOnly", "prefix": "in/", "credentials": every("72h")}),
            breaks(
                "spec.credentials.rotation.interval 72h",
                "rotation.maximum is 48h",
            ),
        ),
        (
            "never",
            json!({"permission": "ReadOnly", "prefix": "in/"}),
            breaks(
                "spec.credentials.rotation unset",
                "rotation.maximum is 48h, so AccessKey credentials must rotate",
            ),
        ),
    ]
}

#[tokio::test]
async fn each_class_limit_is_refused_with_its_message_and_nothing_is_created() {
    let client = admin().await;
    let (ns, group) = grouped_namespace(&client, "bkac-limits").await;
    let strict = format!("e2e-{group}-strict");
    let spec = json!({"namespaceSelector": selecting(&group),
        "allowedCredentialTypes": ["AccessKey"], "allowedPermissions": ["ReadOnly", "WriteOnly"],
        "requirePrefix": true, "rotation": {"minimum": "2h", "maximum": "48h"}});
    create_class(&client, &strict, false, spec).await;
    // The operator's --min-rotation-interval (1h here) stays the floor under a class's default.
    let floor = format!("e2e-{group}-floor");
    let rotation = json!({"default": {"interval": "30m", "gracePeriod": "1m"}});
    let spec = json!({"namespaceSelector": selecting(&group), "rotation": rotation});
    create_class(&client, &floor, false, spec).await;
    class_rules_are_checked_at_apply_time(&client, &group).await;
    let _op = operator_for(&ns, "1h").await;
    ready_bucket(&client, &ns).await;
    let accesses = Api::<BucketAccess>::namespaced(client.clone(), &ns);
    let mut cases = breaking(&strict);
    let below = format!(
        "spec.credentials.rotation unset breaks BucketAccessClass {floor}: its rotation.default interval 30m is shorter than the operator's --min-rotation-interval 1h"
    );
    cases.push((
        "below",
        json!({"permission": "ReadOnly", "className": floor}),
        below,
    ));
    for (name, mut spec, _) in cases.clone() {
        if spec.get("className").is_none() {
            spec["className"] = json!(strict);
        }
        create_access(&accesses, name, spec).await;
    }
    let ok = json!({"className": strict, "permission": "WriteOnly", "prefix": "in/",
        "credentials": {"rotation": {"interval": "48h", "gracePeriod": "1h"}}});
    create_access(&accesses, "ok", ok).await;
    wait_reason(&accesses, "ok", "Available", T).await;
    let secrets = Api::<Secret>::namespaced(client.clone(), &ns);
    for (name, _, message) in cases {
        let got = wait_reason(&accesses, name, "ClassViolation", T).await;
        assert_eq!(got, message, "{name}");
        assert!(
            !identity_exists(&accesses, &ns, name).await,
            "{name}: no IAM identity"
        );
        assert!(
            secrets.get_opt(name).await.unwrap().is_none(),
            "{name}: no Secret"
        );
        let st = accesses.get(name).await.unwrap().status.unwrap();
        let class = if name == "below" { &floor } else { &strict };
        assert_eq!(
            st.class_name.as_ref(),
            Some(class),
            "{name}: the class in force"
        );
    }
    delete_classes(&client, &[&strict, &floor]).await;
}

/// What the API server refuses itself: a rotation default outside the class's own bounds.
async fn class_rules_are_checked_at_apply_time(client: &kube::Client, group: &str) {
    let api = Api::<BucketAccessClass>::all(client.clone());
    let rotation = json!({"maximum": "48h", "default": {"interval": "72h", "gracePeriod": "1h"}});
    let class: BucketAccessClass = serde_json::from_value(json!({
        "apiVersion": "s3.operator.dev/v1alpha1", "kind": "BucketAccessClass",
        "metadata": {"name": format!("e2e-{group}-broken")}, "spec": {"rotation": rotation},
    }))
    .unwrap();
    match api.create(&PostParams::default(), &class).await {
        Err(kube::Error::Api(e)) => {
            assert_eq!(e.code, 422, "{e:?}");
            let want =
                "spec.rotation.default.interval must not be longer than spec.rotation.maximum";
            assert!(e.message.contains(want), "{}", e.message);
        }
        other => panic!("expected a 422, got {other:?}"),
    }
}

#[tokio::test]
async fn a_namespace_outside_a_class_selector_may_not_use_it() {
    let client = admin().await;
    let (ns, group) = grouped_namespace(&client, "bkac-selector").await;
    let prod = format!("e2e-{group}-prod");
    let prod_group = format!("prod-{group}");
    let spec = json!({"namespaceSelector": selecting(&prod_group)});
    create_class(&client, &prod, false, spec).await;
    let _op = operator_for(&ns, "10s").await;
    ready_bucket(&client, &ns).await;
    let accesses = Api::<BucketAccess>::namespaced(client.clone(), &ns);
    let spec = json!({"className": prod, "permission": "ReadOnly"});
    create_access(&accesses, "named", spec).await;
    let missing = format!("e2e-{group}-missing");
    let spec = json!({"className": missing, "permission": "ReadOnly"});
    create_access(&accesses, "missing", spec).await;
    let got = wait_reason(&accesses, "named", "ClassViolation", T).await;
    assert_eq!(
        got,
        format!(
            "spec.className: BucketAccessClass {prod} may not be used in namespace {ns} (its spec.namespaceSelector does not match the namespace's labels)"
        )
    );
    let got = wait_reason(&accesses, "missing", "ClassViolation", T).await;
    assert_eq!(
        got,
        format!("spec.className names BucketAccessClass {missing}, which does not exist")
    );
    assert!(!identity_exists(&accesses, &ns, "named").await);
    // Namespace labels are read live: once the class selects the namespace, the access goes on.
    label(&client, &ns, &prod_group).await;
    wait_reason(&accesses, "named", "Available", T).await;
    let st = accesses.get("named").await.unwrap().status.unwrap();
    assert_eq!(st.class_name.as_deref(), Some(prod.as_str()));
    delete_classes(&client, &[&prod]).await;
}

/// What a live access `rw` was granted, to compare after its class changed.
struct Granted {
    key: String,
    s3: aws_sdk_s3::Client,
    user: String,
    policy: Option<String>,
}

/// The live access's credentials (key id, and an S3 client with them), IAM user and policy.
async fn granted(accesses: &Api<BucketAccess>, secrets: &Api<Secret>) -> Granted {
    let d = secret_data(&secrets.get("rw").await.unwrap());
    let s3 = s3_with(&d["AWS_ACCESS_KEY_ID"], &d["AWS_SECRET_ACCESS_KEY"]);
    let st = accesses.get("rw").await.unwrap().status.unwrap();
    let user = st.user_arn.unwrap().rsplit('/').next().unwrap().to_string();
    let policy = admin_iam()
        .get_user_policy()
        .user_name(&user)
        .policy_name("s3-operator-access")
        .send()
        .await;
    Granted {
        key: d["AWS_ACCESS_KEY_ID"].clone(),
        s3,
        policy: policy.ok().map(|p| p.policy_document),
        user,
    }
}

/// Nothing of `before` was taken back: the same Secret, key (active), policy, and the key
/// still writes to `bucket`.
async fn still_granted(
    before: &Granted,
    accesses: &Api<BucketAccess>,
    secrets: &Api<Secret>,
    bucket: &str,
) {
    let now = granted(accesses, secrets).await;
    assert_eq!((&now.key, &now.policy), (&before.key, &before.policy));
    let keys = admin_iam()
        .list_access_keys()
        .user_name(&before.user)
        .send();
    let keys = keys.await.unwrap().access_key_metadata;
    let active = Some(aws_sdk_iam::types::StatusType::Active);
    let keys: Vec<_> = keys
        .into_iter()
        .map(|k| (k.access_key_id, k.status))
        .collect();
    assert_eq!(keys, [(Some(before.key.clone()), active)]);
    assert!(
        writes(&before.s3, bucket, "after.txt").await,
        "the key still works"
    );
}

async fn writes(s3: &aws_sdk_s3::Client, bucket: &str, key: &str) -> bool {
    let body = b"data".to_vec().into();
    let put = s3.put_object().bucket(bucket).key(key).body(body);
    put.send().await.is_ok()
}

async fn set_permissions(client: &kube::Client, class: &str, allowed: Value) {
    let patch = json!({"spec": {"allowedPermissions": allowed}});
    Api::<BucketAccessClass>::all(client.clone())
        .patch(class, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch BucketAccessClass");
}

#[tokio::test]
async fn tightening_a_class_reports_the_violation_and_keeps_the_credentials_working() {
    let client = admin().await;
    let (ns, group) = grouped_namespace(&client, "bkac-tighten").await;
    let team = format!("e2e-{group}-team");
    let spec = json!({"namespaceSelector": selecting(&group)});
    create_class(&client, &team, true, spec).await;
    let _op = operator_for(&ns, "10s").await;
    let data = ready_bucket(&client, &ns).await;
    let accesses = Api::<BucketAccess>::namespaced(client.clone(), &ns);
    let secrets = Api::<Secret>::namespaced(client.clone(), &ns);
    create_access(&accesses, "rw", json!({"permission": "ReadWrite"})).await;
    wait_reason(&accesses, "rw", "Available", T).await;
    let before = granted(&accesses, &secrets).await;
    assert!(before.policy.is_some() && writes(&before.s3, &data, "before.txt").await);

    set_permissions(&client, &team, json!(["ReadOnly"])).await;
    let got = wait_reason(&accesses, "rw", "ClassViolation", T).await;
    let want = format!(
        "spec.permission ReadWrite breaks BucketAccessClass {team}: allowedPermissions is [ReadOnly]"
    );
    assert_eq!(got, want);
    still_granted(&before, &accesses, &secrets, &data).await;
    let st = accesses.get("rw").await.unwrap().status.unwrap();
    assert_eq!(st.class_name.as_ref(), Some(&team));

    // Loosened again, it is Available with the same key; tightened, it can still be deleted.
    set_permissions(&client, &team, Value::Null).await;
    wait_reason(&accesses, "rw", "Available", T).await;
    assert_eq!(
        granted(&accesses, &secrets).await.key,
        before.key,
        "no new key"
    );
    set_permissions(&client, &team, json!(["ReadOnly"])).await;
    wait_reason(&accesses, "rw", "ClassViolation", T).await;
    accesses
        .delete("rw", &DeleteParams::default())
        .await
        .unwrap();
    let deleted = || async {
        let left = accesses.get_opt("rw").await.unwrap();
        left.is_none().then_some(())
    };
    wait_for("BucketAccess rw gone", T, deleted).await;
    let user = admin_iam().get_user().user_name(&before.user).send().await;
    assert!(user.is_err(), "its IAM user is deleted");
    delete_classes(&client, &[&team]).await;
}
