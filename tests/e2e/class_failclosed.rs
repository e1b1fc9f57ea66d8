//! Classes that fail closed and security constraints that hold whatever else is wrong: a
//! tightened class or flag withdraws a grant from a Bucket that is in violation; every class
//! value the API server accepts is one the operator reads; a class the operator cannot read
//! (stored under an older CRD: written here straight to etcd) fails the namespaces it may
//! govern closed, naming it, and stops nothing else.
//! Every class here selects only its test's namespaces (labelled with a random value).

use std::time::Duration;

use base64::Engine;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use s3_operator::api::{Bucket, BucketAccess, BucketAccessClass, BucketClass};
use serde_json::{Value, json};

use crate::support::*;

const T: Duration = Duration::from_secs(60);
const LABEL: &str = "e2e-failclosed";
const P1: &str = "arn:aws:iam::999999999999:role/partner";

async fn labelled_namespace(client: &kube::Client, tag: &str, value: &str) -> String {
    let ns = namespace(client, tag).await;
    let patch = json!({"metadata": {"labels": {LABEL: value}}});
    Api::<Namespace>::all(client.clone())
        .patch(&ns, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("label namespace");
    ns
}

/// A default class of `kind` (plural `plural`) for the namespaces labelled `value`.
async fn default_class(client: &kube::Client, kind: &str, value: &str, spec: Value) -> String {
    install_crds().await;
    let name = format!("e2e-{}", random(6));
    let mut spec = spec;
    spec["namespaceSelector"] = json!({"matchLabels": {LABEL: value}});
    let obj = json!({"apiVersion": "s3.operator.dev/v1alpha1", "kind": kind,
        "metadata": {"name": name, "annotations": {"s3.operator.dev/is-default-class": "true"}},
        "spec": spec});
    let created = match kind {
        "BucketClass" => Api::<BucketClass>::all(client.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(obj).unwrap(),
            )
            .await
            .map(|_| ()),
        _ => Api::<BucketAccessClass>::all(client.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(obj).unwrap(),
            )
            .await
            .map(|_| ()),
    };
    created.expect("create class");
    name
}

async fn delete_classes(client: &kube::Client, bucket: &[&str], access: &[&str]) {
    for n in bucket {
        let _ = Api::<BucketClass>::all(client.clone())
            .delete(n, &DeleteParams::default())
            .await;
    }
    for n in access {
        let _ = Api::<BucketAccessClass>::all(client.clone())
            .delete(n, &DeleteParams::default())
            .await;
    }
}

async fn statements(s3_name: &str) -> String {
    bucket_policy(s3_name).await.unwrap_or_default()["Statement"].to_string()
}

fn grant(s3_name: &str) -> Value {
    json!({"sid": "Partner", "effect": "Allow", "principal": {"aws": [P1]},
        "action": ["s3:GetObject"], "resource": [format!("arn:aws:s3:::{s3_name}/*")]})
}

/// Item 4: a Bucket grants a partner GetObject and sets forceDelete, both allowed; the class
/// then allows neither. The Bucket reports the forceDelete violation and, in the same pass,
/// the partner's statement leaves the bucket policy (the TLS-only statement stays), with a
/// SecurityEnforced event naming it. (Before, the violation returned first and the grant
/// stayed.)
#[tokio::test]
async fn a_tightened_class_withdraws_a_grant_from_a_bucket_in_violation() {
    let client = admin().await;
    let value = random(6);
    let ns = labelled_namespace(&client, "fc4", &value).await;
    let open = json!({"constraints": {"allowedPolicyPrincipals": [P1], "allowForceDelete": true}});
    let class = default_class(&client, "BucketClass", &value, open).await;
    let op = Operator::start(OperatorOpts {
        namespaces: vec![ns.clone()],
        resync: "10m",
        extra_args: vec!["--allowed-policy-principals".into(), P1.into()],
        ..Default::default()
    })
    .await;
    let api = Api::<Bucket>::namespaced(client.clone(), &ns);
    let s3_name = format!("{}fc-{}", prefix(&op.cluster), random(6));
    let spec = json!({"bucketName": s3_name, "forceDelete": true, "deletionPolicy": "Delete",
        "policy": [grant(&s3_name)]});
    api.create(&PostParams::default(), &bucket("b", spec))
        .await
        .unwrap();
    wait_ready(&api, "b").await;
    assert!(statements(&s3_name).await.contains("999999999999"));

    let tight = json!({"spec": {"constraints": {"allowedPolicyPrincipals": [], "allowForceDelete": false}}});
    Api::<BucketClass>::all(client.clone())
        .patch(&class, &PatchParams::default(), &Patch::Merge(&tight))
        .await
        .unwrap();
    let msg = wait_reason(&api, "b", "ClassViolation", T).await;
    assert!(msg.contains("spec.forceDelete true"), "{msg}");
    partner_withdrawn(&ns, &s3_name, &[&class, "allowedPolicyPrincipals"]).await;
    let msg = wait_reason(&api, "b", "ClassViolation", T).await;
    assert!(msg.contains("allowForceDelete"), "still reported: {msg}");
    op.terminate().await;
    delete_classes(&client, &[&class], &[]).await;
}

/// The partner's statement leaves the bucket policy (the TLS-only one stays), and the
/// `SecurityEnforced` event names it and `why`.
async fn partner_withdrawn(ns: &str, s3_name: &str, why: &[&str]) {
    wait_for(
        "the partner's statement withdrawn",
        Duration::from_secs(20),
        || async {
            let p = statements(s3_name).await;
            (!p.contains("999999999999") && p.contains("DenyInsecureTransport")).then_some(())
        },
    )
    .await;
    let mut words = vec!["999999999999"];
    words.extend_from_slice(why);
    wait_event(ns, "SecurityEnforced", &words).await;
}

/// Item 4, the flags: the operator allowed a partner, and is restarted without it. The Bucket
/// is InvalidSpec (its statement is refused) and the statement leaves S3 at that pass.
#[tokio::test]
async fn a_principal_dropped_from_the_flags_leaves_the_bucket_policy() {
    let client = admin().await;
    let ns = namespace(&client, "fc4f").await;
    let id = Identity::new(std::slice::from_ref(&ns), None).await;
    let with = OperatorOpts {
        namespaces: vec![ns.clone()],
        resync: "10m",
        extra_args: vec!["--allowed-policy-principals".into(), P1.into()],
        ..Default::default()
    };
    let op = Operator::start_as(&id, &with, "0").await;
    let api = Api::<Bucket>::namespaced(client.clone(), &ns);
    let s3_name = format!("{}ff-{}", prefix(&id.cluster), random(6));
    let spec =
        json!({"bucketName": s3_name, "deletionPolicy": "Delete", "policy": [grant(&s3_name)]});
    api.create(&PostParams::default(), &bucket("b", spec))
        .await
        .unwrap();
    wait_ready(&api, "b").await;
    assert!(statements(&s3_name).await.contains("999999999999"));
    op.terminate().await;

    let without = OperatorOpts {
        extra_args: vec![],
        ..with
    };
    let op = Operator::start_as(&id, &without, "0").await;
    let msg = wait_reason(&api, "b", "InvalidSpec", T).await;
    assert!(msg.contains("spec.policy[0]"), "{msg}");
    partner_withdrawn(&ns, &s3_name, &["--allowed-policy-principals"]).await;
    op.terminate().await;
}

/// Item 5 (i): what the API server refuses on a class, with the field and the rule; and every
/// value it accepts there is one the operator decodes.
#[tokio::test]
async fn class_values_the_operator_cannot_read_are_refused_by_the_api_server() {
    install_crds().await;
    let client = admin().await;
    let access = Api::<BucketAccessClass>::all(client.clone());
    let buckets = Api::<BucketClass>::all(client.clone());
    let bkac = |spec: Value| {
        json!({"apiVersion": "s3.operator.dev/v1alpha1", "kind": "BucketAccessClass",
            "metadata": {"name": format!("e2e-v-{}", random(6))}, "spec": spec})
    };
    let bktc = |spec: Value| {
        json!({"apiVersion": "s3.operator.dev/v1alpha1", "kind": "BucketClass",
            "metadata": {"name": format!("e2e-v-{}", random(6))}, "spec": spec})
    };
    let msg = refused(&access, bkac(json!({"rotation": {"maximum": "30d"}}))).await;
    assert!(
        msg.contains("spec.rotation.maximum must be a duration such as 720h"),
        "{msg}"
    );
    let msg = refused(&access, bkac(json!({"rotation": {"minimum": "-1h"}}))).await;
    assert!(
        msg.contains("spec.rotation.minimum must be a duration"),
        "{msg}"
    );
    let selector = |expr: Value| json!({"namespaceSelector": {"matchExpressions": [expr]}});
    let msg = refused(
        &buckets,
        bktc(selector(
            json!({"key": "tier", "operator": "Matches", "values": ["gold"]}),
        )),
    )
    .await;
    assert!(
        msg.contains("operator") && msg.contains("Unsupported value"),
        "{msg}"
    );
    let msg = refused(
        &access,
        bkac(selector(
            json!({"key": "tier", "operator": "Exists", "values": ["gold"]}),
        )),
    )
    .await;
    assert!(
        msg.contains("values must be non-empty for In and NotIn, and empty for Exists"),
        "{msg}"
    );
    let msg = refused(
        &access,
        bkac(selector(json!({"key": "tier", "operator": "In"}))),
    )
    .await;
    assert!(
        msg.contains("values must be non-empty for In and NotIn"),
        "{msg}"
    );
    let msg = refused(
        &buckets,
        bktc(json!({"namespaceSelector": {"matchLabels": {"env": "bad value!"}}})),
    )
    .await;
    assert!(
        msg.contains("spec.namespaceSelector.matchLabels values must be label values"),
        "{msg}"
    );
    let msg = refused(
        &buckets,
        bktc(selector(json!({"key": "bad key!", "operator": "Exists"}))),
    )
    .await;
    assert!(
        msg.contains("matchExpressions[].key must be a label key"),
        "{msg}"
    );
    let msg = refused(
        &buckets,
        bktc(json!({"constraints": {"allowedNotificationTargets": ["*"]}})),
    )
    .await;
    assert!(msg.contains("allowedNotificationTargets"), "{msg}");
    let msg = refused(
        &buckets,
        bktc(json!({"constraints": {"allowedRegions": ["Europe"]}})),
    )
    .await;
    assert!(msg.contains("allowedRegions"), "{msg}");

    // Accepted values, sent as written (as `kubectl apply` does: the typed client would
    // re-render a duration in seconds), come back as classes the operator decodes.
    let raw: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::erase::<BucketAccessClass>(&()),
    );
    for (i, d) in [
        "0",
        "720h",
        "1h30m",
        "1.5h",
        ".5s",
        "999999999h",
        "1h2m3s4ms5us6ns",
    ]
    .iter()
    .enumerate()
    {
        let name = format!("e2e-ok-{i}-{}", random(6));
        let obj = json!({"apiVersion": "s3.operator.dev/v1alpha1", "kind": "BucketAccessClass",
            "metadata": {"name": name}, "spec": {"rotation": {"maximum": d},
            "namespaceSelector": {"matchExpressions": [{"key": "example.com/tier", "operator": "NotIn", "values": ["a", ""]}]}}});
        let obj: DynamicObject = serde_json::from_value(obj).unwrap();
        raw.create(&PostParams::default(), &obj)
            .await
            .unwrap_or_else(|e| panic!("{d}: {e}"));
        let back = access.get(&name).await.expect("decodes");
        assert!(back.spec.rotation.and_then(|r| r.maximum).is_some(), "{d}");
        let _ = access.delete(&name, &DeleteParams::default()).await;
    }
}

/// etcd's JSON gateway, to write what today's API server would refuse.
async fn etcd(path: &str, body: Value) -> Value {
    let url = std::fs::read_to_string(env().state_dir.join("etcd.url")).expect("etcd.url");
    let addr = url.trim().trim_start_matches("http://").to_string();
    let (status, out) = http_request(&addr, "POST", path, &body.to_string())
        .await
        .expect("etcd answers");
    assert_eq!(status, 200, "{path}: {out}");
    serde_json::from_str(&out).expect("etcd JSON")
}

/// Rewrites a stored object in etcd, past the API server's validation: an object stored under an
/// older CRD, as an operator restarted after an upgrade finds it.
async fn rewrite_stored(key: &str, edit: impl FnOnce(&mut Value)) {
    let b64 = base64::engine::general_purpose::STANDARD;
    let got = etcd("/v3/kv/range", json!({"key": b64.encode(key)})).await;
    let value = got["kvs"][0]["value"]
        .as_str()
        .unwrap_or_else(|| panic!("{key} not in etcd: {got}"));
    let mut obj: Value = serde_json::from_slice(&b64.decode(value).unwrap()).unwrap();
    edit(&mut obj);
    let put = json!({"key": b64.encode(key), "value": b64.encode(obj.to_string())});
    etcd("/v3/kv/put", put).await;
}

/// Item 5 (ii, iii): a BucketAccessClass stored with `rotation.maximum: 30d` (which the operator
/// cannot decode) and a BucketClass whose selector has an operator it cannot evaluate, both
/// defaults for one namespace. An operator started after them serves an unrelated namespace's
/// Bucket; in the governed namespace, the Bucket and the BucketAccess are ClassViolation naming
/// their class, the unreadable one is counted, and fixing it lets the access through. (Before,
/// the typed class watch failed on the list and no Bucket anywhere became Ready.)
#[tokio::test]
async fn a_class_the_operator_cannot_read_fails_its_namespaces_closed_and_no_other() {
    let client = admin().await;
    let value = random(6);
    let governed = labelled_namespace(&client, "fc5", &value).await;
    let other = namespace(&client, "fc5o").await;
    let access_class = default_class(&client, "BucketAccessClass", &value, json!({})).await;
    let bucket_class = default_class(&client, "BucketClass", &value, json!({})).await;
    let prefix_key = "/registry/s3.operator.dev";
    rewrite_stored(
        &format!("{prefix_key}/bucketaccessclasses/{access_class}"),
        |o| {
            o["spec"]["rotation"] = json!({"maximum": "30d"});
        },
    )
    .await;
    rewrite_stored(&format!("{prefix_key}/bucketclasses/{bucket_class}"), |o| {
        o["spec"]["namespaceSelector"]["matchExpressions"] =
            json!([{"key": "tier", "operator": "Matches", "values": ["gold"]}]);
    })
    .await;
    let op = Operator::start(OperatorOpts {
        namespaces: vec![governed.clone(), other.clone()],
        resync: "10m",
        ..Default::default()
    })
    .await;
    let elsewhere = Api::<Bucket>::namespaced(client.clone(), &other);
    elsewhere
        .create(
            &PostParams::default(),
            &bucket("b", json!({"deletionPolicy": "Delete"})),
        )
        .await
        .unwrap();
    wait_ready(&elsewhere, "b").await;

    let buckets = Api::<Bucket>::namespaced(client.clone(), &governed);
    let accesses = Api::<BucketAccess>::namespaced(client.clone(), &governed);
    buckets
        .create(
            &PostParams::default(),
            &bucket("b", json!({"deletionPolicy": "Delete"})),
        )
        .await
        .unwrap();
    let msg = wait_reason(&buckets, "b", "ClassViolation", T).await;
    assert!(msg.contains(&format!("BucketClass {bucket_class} is a default class whose spec.namespaceSelector the operator cannot evaluate")), "{msg}");
    a_fixed_class_lets_the_bucket_through(&client, &buckets, &bucket_class, &value).await;
    let a = json!({"apiVersion": "s3.operator.dev/v1alpha1", "kind": "BucketAccess",
        "metadata": {"name": "a"}, "spec": {"bucketRef": {"name": "b"}, "permission": "ReadOnly"}});
    accesses
        .create(&PostParams::default(), &serde_json::from_value(a).unwrap())
        .await
        .unwrap();
    let msg = wait_reason(&accesses, "a", "ClassViolation", T).await;
    assert!(
        msg.contains(&format!(
            "BucketAccessClass {access_class} is a default class which the operator cannot read"
        )),
        "{msg}"
    );
    assert!(
        msg.contains("30d") || msg.contains("unit"),
        "the decode error is said: {msg}"
    );
    let kind = [("kind", "BucketAccessClass")];
    assert_eq!(
        op.metric("s3_operator_class_decode_errors", &kind).await,
        1.0
    );

    // Fixed through the API server (the duration removed: a maximum would have this access
    // rotate, which it does not ask for): the access is served, the gauge back to 0.
    let fixed = json!({"spec": {"rotation": null}});
    Api::<BucketAccessClass>::all(client.clone())
        .patch(
            &access_class,
            &PatchParams::default(),
            &Patch::Merge(&fixed),
        )
        .await
        .expect("the fix is accepted");
    wait_reason(&accesses, "a", "Available", T).await;
    assert_eq!(
        op.metric("s3_operator_class_decode_errors", &kind).await,
        0.0
    );
    op.terminate().await;
    delete_classes(&client, &[&bucket_class], &[&access_class]).await;
}

/// The selector fixed through the API server: the Bucket is served under its class.
async fn a_fixed_class_lets_the_bucket_through(
    client: &kube::Client,
    buckets: &Api<Bucket>,
    class: &str,
    value: &str,
) {
    let fixed = json!({"spec": {"namespaceSelector": {"matchLabels": {LABEL: value}, "matchExpressions": []}}});
    Api::<BucketClass>::all(client.clone())
        .patch(class, &PatchParams::default(), &Patch::Merge(&fixed))
        .await
        .expect("the fix is accepted");
    wait_ready(buckets, "b").await;
    let st = buckets.get("b").await.unwrap().status.unwrap();
    assert_eq!(st.class_name.as_deref(), Some(class));
}
