//! BucketClasses end to end: a default class fills in what a Bucket leaves unset, each
//! constraint is refused with its message, a namespace outside a class's selector may not use
//! it, and tightening a class on a live Bucket reports a violation without touching AWS, while
//! a principal it no longer allows (narrower than the operator's flag) goes at once; a
//! namespace's new label brings its Buckets under the class it selects.
//! Every class here selects only its test's namespaces (labelled with a random value), so tests
//! running beside them see no class.

use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use s3_operator::api::{Bucket, BucketClass};
use serde_json::json;

use crate::support::*;

const T: Duration = Duration::from_secs(60);
const LABEL: &str = "e2e-class";

/// A namespace labelled `e2e-class=<value>`.
async fn labelled_namespace(client: &kube::Client, tag: &str, value: &str) -> String {
    let ns = namespace(client, tag).await;
    label(client, &ns, value).await;
    ns
}

async fn label(client: &kube::Client, ns: &str, value: &str) {
    let patch = json!({"metadata": {"labels": {LABEL: value}}});
    Api::<Namespace>::all(client.clone())
        .patch(ns, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("label namespace");
}

/// Creates BucketClass `name` for the namespaces labelled `value`; returns its name.
async fn class(
    client: &kube::Client,
    value: &str,
    default: bool,
    spec: serde_json::Value,
) -> String {
    // The class may be made before any operator starts (and installs the CRDs).
    install_crds().await;
    let name = format!("e2e-{}", random(6));
    let mut spec = spec;
    spec["namespaceSelector"] = json!({"matchLabels": {LABEL: value}});
    let mut obj = json!({"apiVersion": "s3.operator.dev/v1alpha1", "kind": "BucketClass",
        "metadata": {"name": name}, "spec": spec});
    if default {
        obj["metadata"]["annotations"] = json!({"s3.operator.dev/is-default-class": "true"});
    }
    let class: BucketClass = serde_json::from_value(obj).expect("a BucketClass");
    Api::<BucketClass>::all(client.clone())
        .create(&PostParams::default(), &class)
        .await
        .expect("create BucketClass");
    name
}

/// An operator for `ns` without a resync in a test's time: only watch events (a class's or a
/// namespace's change among them) wake its Buckets, and it settles between them.
async fn without_resync(ns: &str, extra_args: Vec<String>) -> Operator {
    Operator::start(OperatorOpts {
        namespaces: vec![ns.to_string()],
        resync: "10m",
        extra_args,
        ..Default::default()
    })
    .await
}

async fn delete_class(client: &kube::Client, name: &str) {
    let _ = Api::<BucketClass>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await;
}

/// The namespace's default class fills in region, versioning and tags (the Bucket's own tag
/// wins); S3 holds them, and status and `kubectl get` name the class. A later default region
/// leaves the existing bucket where it is.
#[tokio::test]
async fn a_default_class_fills_in_what_the_bucket_leaves_unset() {
    let client = admin().await;
    let value = random(6);
    let ns = labelled_namespace(&client, "cdef", &value).await;
    let defaults = json!({"defaults": {"versioning": "Enabled", "region": "eu-west-1",
        "tags": {"cost": "shared", "team": "platform"}}});
    let name = class(&client, &value, true, defaults).await;
    let op = without_resync(&ns, vec![]).await;
    let api = Api::<Bucket>::namespaced(client.clone(), &ns);
    let spec = json!({"tags": {"team": "media"}, "deletionPolicy": "Delete"});
    api.create(&PostParams::default(), &bucket("b", spec))
        .await
        .unwrap();
    let s3_name = wait_ready(&api, "b").await;
    the_class_shows_in_s3_status_and_kubectl(&api, &ns, &name, &s3_name).await;
    a_new_default_region_leaves_the_bucket_where_it_is(&client, &api, &name, &s3_name).await;
    op.terminate().await;
    delete_class(&client, &name).await;
}

async fn the_class_shows_in_s3_status_and_kubectl(
    api: &Api<Bucket>,
    ns: &str,
    class: &str,
    s3_name: &str,
) {
    let tags = bucket_tags(s3_name).await;
    let tag = |k: &str| tags.get(k).cloned();
    assert_eq!(tag("cost").as_deref(), Some("shared"), "{tags:?}");
    assert_eq!(
        tag("team").as_deref(),
        Some("media"),
        "the Bucket's own tag wins"
    );
    let versioning = admin_s3()
        .get_bucket_versioning()
        .bucket(s3_name)
        .send()
        .await
        .unwrap();
    assert_eq!(versioning.status().map(|s| s.as_str()), Some("Enabled"));
    let st = api.get("b").await.unwrap().status.unwrap();
    assert_eq!(st.class_name.as_deref(), Some(class));
    assert_eq!(
        st.region.as_deref(),
        Some("eu-west-1"),
        "the class's region"
    );
    let table = tool(
        "kubectl",
        &["get", "buckets.s3.operator.dev", "b", "-n", ns],
        None,
    );
    let header = table.lines().next().unwrap_or_default();
    assert!(header.contains("CLASS") && table.contains(class), "{table}");
}

/// The class moves on: its new tag reaches the bucket, its new region does not.
async fn a_new_default_region_leaves_the_bucket_where_it_is(
    client: &kube::Client,
    api: &Api<Bucket>,
    class: &str,
    s3_name: &str,
) {
    let moved = json!({"spec": {"defaults": {"region": "us-west-2", "tags": {"cost": "moved"}}}});
    Api::<BucketClass>::all(client.clone())
        .patch(class, &PatchParams::default(), &Patch::Merge(&moved))
        .await
        .unwrap();
    wait_for("the class's new tag", T, || async {
        let tags = bucket_tags(s3_name).await;
        (tags.get("cost").map(String::as_str) == Some("moved")).then_some(())
    })
    .await;
    wait_ready(api, "b").await;
    let st = api.get("b").await.unwrap().status.unwrap();
    assert_eq!(
        st.region.as_deref(),
        Some("eu-west-1"),
        "the bucket stays where it is"
    );
}

/// A spec that breaks one constraint of the class, the field and the rule named.
fn violations(class: &str) -> Vec<(serde_json::Value, String)> {
    let case = |breaks, field: &str, rule: &str| {
        (
            breaks,
            format!("{field} breaks BucketClass {class}: constraints.{rule}"),
        )
    };
    vec![
        case(
            json!({"region": "eu-west-1"}),
            "spec.region eu-west-1",
            "allowedRegions is [us-east-1]",
        ),
        case(
            json!({"encryption": {"algorithm": "AES256"}}),
            "spec.encryption.algorithm AES256",
            "requiredEncryption is aws:kms",
        ),
        case(
            json!({"encryption": {"algorithm": "aws:kms", "kmsKeyId": "k2"}}),
            "spec.encryption.kmsKeyId k2",
            "allowedKmsKeys is [k1]",
        ),
        case(
            json!({"versioning": "Suspended"}),
            "spec.versioning Suspended",
            "requireVersioning is true",
        ),
        case(
            json!({"deletionPolicy": "Delete"}),
            "spec.deletionPolicy Delete",
            "allowedDeletionPolicies is [Retain]",
        ),
        case(
            json!({"forceDelete": true}),
            "spec.forceDelete true",
            "allowForceDelete is false",
        ),
        case(
            json!({"adoptExisting": true}),
            "spec.adoptExisting true",
            "allowAdoptExisting is false",
        ),
        case(
            json!({"transferAcceleration": "Enabled"}),
            "spec.transferAcceleration Enabled",
            "allowTransferAcceleration is false",
        ),
    ]
}

/// Each constraint refused with the field, the class and the rule, nothing created in S3; and a
/// namespace the class's selector leaves out may not name it.
#[tokio::test]
async fn each_constraint_is_refused_with_its_message() {
    let client = admin().await;
    let value = random(6);
    let ns = labelled_namespace(&client, "ccon", &value).await;
    let outside = namespace(&client, "cout").await;
    let constraints = json!({"constraints": {
        "allowedRegions": ["us-east-1"], "requiredEncryption": "aws:kms",
        "allowedKmsKeys": ["k1"], "requireVersioning": true,
        "allowedDeletionPolicies": ["Retain"], "allowForceDelete": false,
        "allowAdoptExisting": false, "allowTransferAcceleration": false}});
    let name = class(&client, &value, false, constraints).await;
    let op = Operator::start(OperatorOpts {
        namespaces: vec![ns.clone(), outside.clone()],
        ..Default::default()
    })
    .await;
    let api = Api::<Bucket>::namespaced(client.clone(), &ns);
    let compliant = json!({"className": name, "versioning": "Enabled",
        "encryption": {"algorithm": "aws:kms", "kmsKeyId": "k1"}});
    let mut created = vec![];
    for (i, (breaks, want)) in violations(&name).into_iter().enumerate() {
        let mut spec = compliant.clone();
        let s3_name = format!("{}cc-{i}-{}", prefix(&op.cluster), random(6));
        spec["bucketName"] = json!(s3_name);
        for (k, v) in breaks.as_object().unwrap() {
            spec[k] = v.clone();
        }
        let obj = format!("b{i}");
        api.create(&PostParams::default(), &bucket(&obj, spec))
            .await
            .unwrap();
        created.push((obj, s3_name, want));
    }
    for (obj, s3_name, want) in &created {
        let msg = wait_reason(&api, obj, "ClassViolation", T).await;
        assert_eq!(&msg, want);
        assert!(
            !bucket_exists(s3_name).await,
            "{s3_name} created despite {msg}"
        );
    }
    // The compliant spec passes the same class; in a namespace outside its selector it may not
    // name it.
    api.create(&PostParams::default(), &bucket("ok", compliant.clone()))
        .await
        .unwrap();
    wait_ready(&api, "ok").await;
    let elsewhere = Api::<Bucket>::namespaced(client.clone(), &outside);
    elsewhere
        .create(&PostParams::default(), &bucket("b", compliant))
        .await
        .unwrap();
    let msg = wait_reason(&elsewhere, "b", "ClassViolation", T).await;
    let want = format!("BucketClass {name} may not be used in namespace {outside}");
    assert!(msg.contains(&want), "{msg}");
    op.terminate().await;
    delete_class(&client, &name).await;
}

const P1: &str = "arn:aws:iam::999999999999:role/one";
const P2: &str = "arn:aws:iam::888888888888:role/two";

/// The operator allows two partners; the class narrows that to one: the other's statement is
/// removed from the live bucket's policy at once, with an event. Then the class requires
/// versioning and adds a tag: the Bucket reports the violation and nothing in AWS is written.
#[tokio::test]
async fn tightening_a_class_removes_principals_at_once_and_reports_the_rest() {
    let Partners {
        client,
        ns,
        op,
        class: name,
        api,
        s3_name,
    } = partners("ctight").await;
    a_narrower_principal_list_removes_the_statement(&client, &ns, &name, &s3_name).await;
    wait_ready(&api, "b").await;
    a_violation_writes_nothing(&op, &client, &api, &name, &s3_name).await;
    op.terminate().await;
    delete_class(&client, &name).await;
}

/// Observe never keeps what a tightened class forbids on a bucket the operator holds: the
/// statement goes (SecurityEnforced), and that is the only write while observed.
#[tokio::test]
async fn an_observed_bucket_still_loses_what_a_tightened_class_forbids() {
    let Partners {
        client,
        ns,
        op,
        class: name,
        api,
        s3_name,
    } = partners("cobs").await;
    let observe = json!({"spec": {"management": "Observe"}});
    api.patch("b", &PatchParams::default(), &Patch::Merge(&observe))
        .await
        .unwrap();
    wait_reason(&api, "b", "Observed", T).await;
    op.wait_settled(Duration::from_secs(2)).await;
    let sent = op.sent().await;
    patch_class(
        &client,
        &name,
        json!({"constraints": {"allowedPolicyPrincipals": [P1]}}),
    )
    .await;
    wait_for("the second partner's statement removed", T, || async {
        let p = statements(&s3_name).await;
        (!p.contains("888888888888") && p.contains("999999999999")).then_some(())
    })
    .await;
    wait_event(&ns, "SecurityEnforced", &["888888888888", "Observe"]).await;
    op.wait_settled(Duration::from_secs(2)).await;
    let aws: Vec<String> = (sent.writes().await.into_iter())
        .filter(|w| w.starts_with("AWS "))
        .collect();
    assert_eq!(
        aws,
        ["AWS PUT bucket?policy x1"],
        "Observe wrote more than the withdrawal"
    );
    op.terminate().await;
    delete_class(&client, &name).await;
}

/// A namespace under a default class allowing both partners, its operator (whose flags allow
/// both too) and Bucket `b` Ready with one statement for each partner.
struct Partners {
    client: kube::Client,
    ns: String,
    op: Operator,
    class: String,
    api: Api<Bucket>,
    s3_name: String,
}

async fn partners(tag: &str) -> Partners {
    let client = admin().await;
    let value = random(6);
    let ns = labelled_namespace(&client, tag, &value).await;
    let allowed = vec!["--allowed-policy-principals".into(), format!("{P1},{P2}")];
    let op = without_resync(&ns, allowed).await;
    let both = json!({"constraints": {"allowedPolicyPrincipals": [P1, P2]}});
    let class = class(&client, &value, true, both).await;
    let api = Api::<Bucket>::namespaced(client.clone(), &ns);
    let s3_name = format!("{}{tag}-{}", prefix(&op.cluster), random(6));
    let arn = format!("arn:aws:s3:::{s3_name}/*");
    let grant = |sid: &str, p: &str| {
        json!({"sid": sid, "effect": "Allow", "principal": {"aws": [p]},
        "action": ["s3:GetObject"], "resource": [arn]})
    };
    let spec = json!({"bucketName": s3_name, "policy": [grant("One", P1), grant("Two", P2)]});
    api.create(&PostParams::default(), &bucket("b", spec))
        .await
        .unwrap();
    wait_ready(&api, "b").await;
    assert!(statements(&s3_name).await.contains("888888888888"));
    Partners {
        client,
        ns,
        op,
        class,
        api,
        s3_name,
    }
}

async fn statements(s3_name: &str) -> String {
    let doc = bucket_policy(s3_name).await.unwrap_or_default();
    doc["Statement"].to_string()
}

async fn patch_class(client: &kube::Client, name: &str, spec: serde_json::Value) {
    Api::<BucketClass>::all(client.clone())
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": spec})),
        )
        .await
        .unwrap();
}

/// A class list narrower than the operator's flag: the other partner's statement goes at once.
async fn a_narrower_principal_list_removes_the_statement(
    client: &kube::Client,
    ns: &str,
    class: &str,
    s3_name: &str,
) {
    patch_class(
        client,
        class,
        json!({"constraints": {"allowedPolicyPrincipals": [P1]}}),
    )
    .await;
    wait_for("the second partner's statement removed", T, || async {
        let p = statements(s3_name).await;
        (!p.contains("888888888888") && p.contains("999999999999")).then_some(())
    })
    .await;
    wait_event(ns, "ClassEnforced", &["888888888888", class]).await;
}

/// A tag the class now adds would be a write; the violation beside it stops every write.
async fn a_violation_writes_nothing(
    op: &Operator,
    client: &kube::Client,
    api: &Api<Bucket>,
    class: &str,
    s3_name: &str,
) {
    op.wait_settled(Duration::from_secs(3)).await;
    let writes = op.aws_writes().await;
    let strict = json!({"defaults": {"tags": {"added": "later"}},
        "constraints": {"requireVersioning": true}});
    patch_class(client, class, strict).await;
    let msg = wait_reason(api, "b", "ClassViolation", T).await;
    assert!(
        msg.contains("spec.versioning (unset)") && msg.contains("requireVersioning"),
        "{msg}"
    );
    op.wait_settled(Duration::from_secs(3)).await;
    assert_eq!(
        op.aws_writes().await,
        writes,
        "a violation writes nothing to AWS"
    );
    assert!(!bucket_tags(s3_name).await.contains_key("added"));
    assert!(
        statements(s3_name).await.contains("999999999999"),
        "the policy stays"
    );
}

/// A namespace labelled after its Bucket exists brings the Bucket under the default class the
/// label selects, without a resync.
#[tokio::test]
async fn labelling_a_namespace_brings_its_buckets_under_its_class() {
    let client = admin().await;
    let value = random(6);
    let ns = namespace(&client, "clab").await;
    let defaults = json!({"defaults": {"tags": {"cost": "labelled"}}});
    let name = class(&client, &value, true, defaults).await;
    let op = without_resync(&ns, vec![]).await;
    let api = Api::<Bucket>::namespaced(client.clone(), &ns);
    let spec = json!({"deletionPolicy": "Delete"});
    api.create(&PostParams::default(), &bucket("b", spec))
        .await
        .unwrap();
    let s3_name = wait_ready(&api, "b").await;
    let st = api.get("b").await.unwrap().status.unwrap();
    assert_eq!(st.class_name, None, "no class selects the namespace yet");
    assert!(!bucket_tags(&s3_name).await.contains_key("cost"));

    label(&client, &ns, &value).await;
    wait_for("the class's tag", T, || async {
        let tags = bucket_tags(&s3_name).await;
        (tags.get("cost").map(String::as_str) == Some("labelled")).then_some(())
    })
    .await;
    wait_for("status.className", T, || async {
        let st = api.get("b").await.ok()?.status?;
        (st.class_name.as_deref() == Some(name.as_str())).then_some(())
    })
    .await;
    op.terminate().await;
    delete_class(&client, &name).await;
}
