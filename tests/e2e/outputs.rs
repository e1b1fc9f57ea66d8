//! Outputs other tools read: the Secret's keys renamed by a key map (COSI's names), the bucket's
//! facts in a ConfigMap with ObjectBucketClaim's keys, what may not be renamed or taken over, and
//! an application Pod that finds its bucket through the ConfigMap.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use s3_operator::api::BucketAccess;
use serde_json::{Value, json};

use crate::access::{access, get, put};
use crate::node::{images, node};
use crate::support::*;

const T: Duration = Duration::from_secs(60);

/// COSI's key names for what the operator writes under AWS's.
fn cosi_keys() -> Value {
    json!({
        "AWS_ACCESS_KEY_ID": "COSI_S3_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY": "COSI_S3_ACCESS_SECRET_KEY",
        "AWS_REGION": "COSI_S3_REGION",
        "BUCKET_NAME": "COSI_S3_BUCKET_ID",
        "AWS_ENDPOINT_URL_S3": "COSI_S3_ENDPOINT",
    })
}

fn config_map_data(cm: &ConfigMap) -> BTreeMap<String, String> {
    cm.data.clone().unwrap_or_default()
}

/// An operator on a new namespace (AWS at `endpoint` if given) and a pair in it whose access
/// asks for `credentials` and `extra` (merged into its spec).
async fn pair(
    tag: &str,
    endpoint: Option<String>,
    credentials: Value,
    extra: Value,
) -> (Operator, AccessPair, String) {
    let client = admin().await;
    let ns = namespace(&client, tag).await;
    let op = Operator::start(OperatorOpts {
        namespaces: vec![ns.clone()],
        aws_endpoint: endpoint,
        // No resync within the test: a ConfigMap or Secret put back is the watch's doing.
        resync: "1h",
        ..Default::default()
    })
    .await;
    let mut spec = json!({"bucketRef": {"name": "data"}, "permission": "ReadWrite",
        "credentials": credentials});
    for (k, v) in extra.as_object().into_iter().flatten() {
        spec[k] = v.clone();
    }
    let made = AccessPair::create(&client, &ns, bucket("data", json!({})), access("app", spec));
    (op, made.await, ns)
}

/// COSI's names in the Secret (and AWS's gone), the claim's keys in the ConfigMap (and no
/// credential there), both restored when deleted or edited; a new key map renames the keys of
/// the same key pair (no new key); both go with the BucketAccess.
#[tokio::test]
async fn an_access_writes_cosi_keys_and_a_claim_config_map_and_keeps_both() {
    let credentials = json!({"secretKeys": cosi_keys()});
    let (mut op, p, ns) = pair("outputs", None, credentials, json!({"configMap": {}})).await;
    let secret = p.secret_data().await;
    for key in [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "BUCKET_NAME",
        "AWS_REGION",
    ] {
        assert!(
            !secret.contains_key(key),
            "{key} renamed: {:?}",
            secret.keys()
        );
    }
    assert_eq!(secret["COSI_S3_BUCKET_ID"], p.s3_name);
    assert_eq!(secret["COSI_S3_ENDPOINT"], env().aws_endpoint);
    assert!(secret.contains_key("BUCKET_ARN"), "not renamed, kept");
    let (id, key) = (
        &secret["COSI_S3_ACCESS_KEY_ID"],
        &secret["COSI_S3_ACCESS_SECRET_KEY"],
    );
    let app = s3_with(id, key);
    put(&app, &p.s3_name, "cosi.txt")
        .await
        .expect("the renamed pair works");

    let config_maps = Api::<ConfigMap>::namespaced(admin().await, &ns);
    let facts = claim_facts_are_served(&config_maps, &p, [id, key]).await;
    restored_when_deleted_or_edited(&config_maps, &facts).await;

    // A new key map renames the keys of the same pair.
    let accesses = &p.accesses;
    let back = json!({"spec": {"credentials": {"secretKeys": {
        "AWS_ACCESS_KEY_ID": null, "AWS_SECRET_ACCESS_KEY": null, "BUCKET_NAME": null,
        "AWS_ENDPOINT_URL_S3": null, "AWS_REGION": "REGION"}}}});
    accesses
        .patch("app", &PatchParams::default(), &Patch::Merge(&back))
        .await
        .expect("a new key map");
    let renamed = wait_for("the Secret under the new names", T, || async {
        let data = p.secret_data().await;
        data.contains_key("REGION").then_some(data)
    })
    .await;
    assert_eq!(
        &renamed["AWS_ACCESS_KEY_ID"], id,
        "the same key: no new one"
    );
    assert_eq!(&renamed["AWS_SECRET_ACCESS_KEY"], key);
    assert!(
        !renamed.contains_key("COSI_S3_ACCESS_KEY_ID"),
        "{renamed:?}"
    );
    assert_eq!(renamed["BUCKET_NAME"], p.s3_name);
    let keys = admin_iam()
        .list_access_keys()
        .user_name(p.user())
        .send()
        .await
        .unwrap();
    assert_eq!(keys.access_key_metadata().len(), 1, "still one key");

    // Both go with the access (owner references; the API server's garbage collector).
    accesses
        .delete("app", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the ConfigMap to go with its access", T, || async {
        config_maps
            .get_opt("app")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    op.assert_no_reconcile_panic().await;
}

/// The ConfigMap named after the access holds exactly ObjectBucketClaim's keys for the bucket
/// (none of `secrets`), is controlled by the access and named in its status; returns it.
async fn claim_facts_are_served(
    config_maps: &Api<ConfigMap>,
    p: &AccessPair,
    secrets: [&String; 2],
) -> ConfigMap {
    let cm = config_maps
        .get("app")
        .await
        .expect("the access's ConfigMap");
    let data = config_map_data(&cm);
    let endpoint = env().aws_endpoint.trim_start_matches("http://");
    let (host, port) = endpoint.split_once(':').expect("host:port");
    let want = BTreeMap::from([
        ("BUCKET_NAME".to_string(), p.s3_name.clone()),
        ("BUCKET_HOST".to_string(), host.to_string()),
        ("BUCKET_PORT".to_string(), port.to_string()),
        ("BUCKET_REGION".to_string(), env().region.clone()),
        ("BUCKET_SUBREGION".to_string(), String::new()),
    ]);
    assert_eq!(data, want);
    assert!(
        data.values().all(|v| !secrets.contains(&v)),
        "no credential"
    );
    let owner = &cm.metadata.owner_references.clone().unwrap_or_default()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.controller),
        ("BucketAccess", Some(true))
    );
    assert_eq!(Some(&owner.uid), p.access.metadata.uid.as_ref());
    let status = p.access.status.clone().unwrap_or_default();
    assert_eq!(status.config_map_name.as_deref(), Some("app"));
    cm
}

/// A deleted ConfigMap comes back, and so does an edited value; a key someone else added is
/// theirs and stays.
async fn restored_when_deleted_or_edited(config_maps: &Api<ConfigMap>, facts: &ConfigMap) {
    let want = config_map_data(facts);
    config_maps
        .delete("app", &DeleteParams::default())
        .await
        .unwrap();
    let back = || async {
        let have = config_map_data(&config_maps.get_opt("app").await.ok()??);
        want.iter()
            .all(|(k, v)| have.get(k) == Some(v))
            .then_some(have)
    };
    wait_for("the deleted ConfigMap back", T, back).await;
    let edit = json!({"data": {"BUCKET_NAME": "someone-elses-bucket", "EXTRA": "x"}});
    config_maps
        .patch("app", &PatchParams::default(), &Patch::Merge(&edit))
        .await
        .unwrap();
    let have = wait_for("the edited ConfigMap put back", T, back).await;
    assert_eq!(
        have.get("EXTRA").map(String::as_str),
        Some("x"),
        "another's key stays"
    );
}

/// Key maps that would lose a value, or make a key Kubernetes refuses, and a ConfigMap changed
/// or removed after it was asked for, are refused by the API server naming the field and rule.
#[tokio::test]
async fn key_maps_and_config_maps_that_would_lose_something_are_refused() {
    install_crds().await;
    let client = admin().await;
    let ns = namespace(&client, "outputs-refused").await;
    let accesses = Api::<BucketAccess>::namespaced(client, &ns);
    let raw = |name: &str, keys: Value| {
        json!({"apiVersion": "s3.operator.dev/v1alpha1", "kind": "BucketAccess",
            "metadata": {"name": name}, "spec": {"bucketRef": {"name": "b"},
            "permission": "ReadOnly", "credentials": {"secretKeys": keys}}})
    };
    let cases = [
        (
            json!({"PASSWORD": "X"}),
            "may rename only the keys the operator writes",
        ),
        (
            json!({"AWS_REGION": "X", "BUCKET_NAME": "X"}),
            "renames two keys to one name",
        ),
        (
            json!({"BUCKET_NAME": "AWS_SECRET_ACCESS_KEY"}),
            "another key the operator writes",
        ),
        (
            json!({"AWS_REGION": "a/b"}),
            "spec.credentials.secretKeys.AWS_REGION",
        ),
    ];
    for (keys, says) in cases {
        let msg = refused(&accesses, raw("bad", keys.clone())).await;
        assert!(msg.contains(says), "{keys}: {msg}");
    }
    let pp = PostParams::default();
    let mut named = raw("named", json!({}));
    named["spec"]["configMap"] = json!({"name": "facts"});
    let named: BucketAccess = serde_json::from_value(named).unwrap();
    accesses
        .create(&pp, &named)
        .await
        .expect("a ConfigMap asked for");
    for change in [
        json!({"configMap": null}),
        json!({"configMap": {"name": "other"}}),
    ] {
        let patch = Patch::Merge(json!({"spec": change}));
        let e = accesses
            .patch("named", &PatchParams::default(), &patch)
            .await;
        let msg = format!("{e:?}");
        assert!(
            msg.contains("spec.configMap can be added but not changed or removed"),
            "{msg}"
        );
    }
    let later: BucketAccess = serde_json::from_value(raw("later", json!({}))).unwrap();
    accesses.create(&pp, &later).await.unwrap();
    let add = Patch::Merge(json!({"spec": {"configMap": {}}}));
    let added = accesses.patch("later", &PatchParams::default(), &add).await;
    assert!(
        added.is_ok(),
        "a ConfigMap may be asked for later: {added:?}"
    );
}

/// A ConfigMap of the name the access asks for that someone else made is never written: the
/// access reports OwnershipConflict, and nothing is made for it in IAM or as a Secret.
#[tokio::test]
async fn a_config_map_someone_else_made_is_never_taken_over() {
    let (mut op, api, ns) = Operator::in_new_namespace("outputs-taken").await;
    let client = admin().await;
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    let theirs: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "app-config"}, "data": {"LOG_LEVEL": "debug"}}))
    .unwrap();
    config_maps
        .create(&PostParams::default(), &theirs)
        .await
        .unwrap();
    api.create(&PostParams::default(), &bucket("data", json!({})))
        .await
        .unwrap();
    wait_ready(&api, "data").await;
    let accesses = Api::<BucketAccess>::namespaced(client.clone(), &ns);
    let spec = json!({"bucketRef": {"name": "data"}, "permission": "ReadOnly",
        "configMap": {"name": "app-config"}});
    accesses
        .create(&PostParams::default(), &access("app", spec))
        .await
        .unwrap();
    let msg = wait_reason(&accesses, "app", "OwnershipConflict", T).await;
    assert!(
        msg.contains("ConfigMap app-config (spec.configMap)"),
        "{msg}"
    );
    let kept = config_maps.get("app-config").await.unwrap();
    assert_eq!(
        config_map_data(&kept),
        BTreeMap::from([("LOG_LEVEL".into(), "debug".into())])
    );
    assert!(kept.metadata.owner_references.is_none(), "not taken over");
    let status = accesses
        .get("app")
        .await
        .unwrap()
        .status
        .unwrap_or_default();
    assert!(status.user_arn.is_none(), "no IAM user made: {status:?}");
    let secrets = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client, &ns);
    assert!(secrets.get_opt("app").await.unwrap().is_none(), "no Secret");
    op.assert_no_reconcile_panic().await;
}

/// An application Pod given the ConfigMap and a Secret whose bucket and endpoint keys are renamed
/// away finds its bucket as a claim's consumer does (`BUCKET_NAME`, `BUCKET_HOST`,
/// `BUCKET_PORT`), and writes and reads it with the Secret's key pair.
#[tokio::test]
async fn a_pod_finds_its_bucket_through_the_config_map() {
    let node = node();
    let images = images(&node).await;
    let away = json!({"secretKeys": {"BUCKET_NAME": "UNUSED_BUCKET",
        "AWS_ENDPOINT_URL_S3": "UNUSED_ENDPOINT"}});
    let endpoint = Some(node.aws_endpoint.clone());
    let (mut op, p, ns) = pair("outputs-pod", endpoint, away, json!({"configMap": {}})).await;
    let secret = p.secret_data().await;
    assert!(!secret.contains_key("BUCKET_NAME") && !secret.contains_key("AWS_ENDPOINT_URL_S3"));
    let key = format!("claim/{}.txt", random(6));
    let env_from = json!([{"configMapRef": {"name": "app"}}, {"secretRef": {"name": "app"}}]);
    crate::cluster::run_app_from(&ns, "claim-app", &images.app, env_from, &key).await;
    let got = get(&admin_s3(), &p.s3_name, &key)
        .await
        .expect("the Pod's object");
    assert!(String::from_utf8_lossy(&got).starts_with("written by bucket-app"));
    op.assert_no_reconcile_panic().await;
}
