//! Cleanup a stripped finalizer cannot skip, and deletion by the rules a pass accepted: a
//! tenant that removes the operator's finalizer leaves nothing behind (the watch's last state, or
//! the orphan sweep for what was stripped while no operator ran), the sweep never touches a
//! foreign or untagged resource, and a deletion follows what the class allowed, never a refused
//! edit. The operators here resync every 10 minutes: what happens within seconds is the operator
//! reacting to the deletion, or its sweep.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use s3_operator::api::{Bucket, BucketAccess, BucketClass};
use serde_json::json;

use crate::access::access;
use crate::support::*;

const T: Duration = Duration::from_secs(60);
const UID: &str = "s3.operator.dev/uid";
const RELEASED_FROM: &str = "s3.operator.dev/released-from-namespace";

/// Deletes `name` and removes every finalizer from it, as a tenant may; waits until it is gone.
async fn delete_stripped<K>(api: &Api<K>, name: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let _ = api.delete(name, &DeleteParams::default()).await;
    let strip = json!({"metadata": {"finalizers": null}});
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(&strip))
        .await
    {
        // Already gone: it had no finalizer left.
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => panic!("the tenant strips the finalizer: {e}"),
    }
    wait_for("the stripped object to go", T, || async {
        api.get_opt(name).await.ok()?.is_none().then_some(())
    })
    .await;
}

/// Removes every finalizer from `name`, then deletes it: gone at once, never seen deleting.
async fn strip_then_delete<K>(api: &Api<K>, name: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let strip = json!({"metadata": {"finalizers": null}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&strip))
        .await
        .expect("the tenant strips the finalizer");
    delete_stripped(api, name).await;
}

async fn put_object(bucket: &str, key: &str) {
    admin_s3()
        .put_object()
        .bucket(bucket)
        .key(key)
        .body(b"kept".to_vec().into())
        .send()
        .await
        .expect("the admin writes an object");
}

async fn has_object(bucket: &str, key: &str) -> bool {
    let got = admin_s3().get_object().bucket(bucket).key(key).send().await;
    got.is_ok()
}

async fn user_exists(user: &str) -> bool {
    match admin_iam().get_user().user_name(user).send().await {
        Ok(_) => true,
        Err(e) => {
            let code = e.into_service_error().meta().code().map(String::from);
            assert_eq!(code.as_deref(), Some("NoSuchEntity"), "GetUser {user}");
            false
        }
    }
}

/// Waits until `bucket` is released to `ns`: no owner UID, the namespace it came from.
async fn wait_released(bucket: &str, ns: &str) -> BTreeMap<String, String> {
    wait_for("the bucket to be released", T, || async {
        let tags = bucket_tags(bucket).await;
        (!tags.contains_key(UID) && tags.get(RELEASED_FROM).map(String::as_str) == Some(ns))
            .then_some(tags)
    })
    .await
}

/// A Bucket (`spec`) holding an object and a ReadWrite access to it, both Ready: the S3 name and
/// the access's IAM user.
async fn bucket_with_access(
    client: &kube::Client,
    ns: &str,
    spec: serde_json::Value,
) -> (String, String) {
    let grant = json!({"bucketRef": {"name": "data"}, "permission": "ReadWrite"});
    let pair = AccessPair::create(client, ns, bucket("data", spec), access("app", grant)).await;
    put_object(&pair.s3_name, "keep.txt").await;
    (pair.s3_name.clone(), pair.user())
}

/// (a) A Bucket (`Delete`) holding an object waits as DeletionBlocked; its access is deleted
/// too. The tenant strips both finalizers while the operator is stopped (so the strip beats its
/// cleanup of the access); resumed, the operator sees them disappear and cleans up from their last
/// state: the user and its key are deleted, and the bucket, which a `Delete` cannot remove while
/// it holds data and nobody is left to empty it, is released with its object kept.
#[tokio::test]
async fn a_stripped_finalizer_is_cleaned_up_from_the_last_state() {
    let client = admin().await;
    let ns = namespace(&client, "strip").await;
    let op = Operator::start(OperatorOpts {
        namespaces: vec![ns.clone()],
        resync: "10m",
        ..Default::default()
    })
    .await;
    let (s3_name, user) =
        bucket_with_access(&client, &ns, json!({"deletionPolicy": "Delete"})).await;
    let buckets = Api::<Bucket>::namespaced(client.clone(), &ns);
    let accesses = Api::<BucketAccess>::namespaced(client.clone(), &ns);
    buckets
        .delete("data", &DeleteParams::default())
        .await
        .unwrap();
    wait_reason(&buckets, "data", "DeletionBlocked", T).await;
    // Stopped, so the strip beats the operator's own cleanup of the access.
    op.signal("STOP");
    strip_then_delete(&accesses, "app").await;
    delete_stripped(&buckets, "data").await;
    let stripped = Instant::now();
    op.signal("CONT");
    wait_for("the access's user to be deleted", T, || async {
        (!user_exists(&user).await).then_some(())
    })
    .await;
    let user_gone = stripped.elapsed();
    wait_released(&s3_name, &ns).await;
    let bucket_released = stripped.elapsed();
    eprintln!(
        "figure: stripped finalizer to user gone {user_gone:?}, to bucket released {bucket_released:?}"
    );
    assert!(has_object(&s3_name, "keep.txt").await, "the data is kept");
    let doc = bucket_policy(&s3_name).await.expect("the TLS-only policy");
    assert_eq!(doc["Statement"].as_array().unwrap().len(), 1, "{doc}");
    let orphans = |kind: &'static str, action: &'static str| {
        let op = &op;
        async move {
            op.metric(
                "s3_operator_orphans_total",
                &[("kind", kind), ("action", action)],
            )
            .await
        }
    };
    // Counted once each cleanup has returned, which what it removed being gone can precede.
    wait_for("both cleanups to be counted", T, || async {
        let user = orphans("user", "deleted").await;
        let bucket = orphans("bucket", "released").await;
        (user > 0.0 && bucket > 0.0).then_some(())
    })
    .await;
    assert_eq!(orphans("user", "deleted").await, 1.0);
    assert_eq!(orphans("bucket", "released").await, 1.0);
    assert!(
        op.log_text()
            .contains("deleted without the operator's cleanup"),
        "a log line names what was cleaned up"
    );
}

/// (b) A Bucket (`Delete`, `forceDelete`) and its access deleted and stripped while no operator
/// runs: the sweep of the operator started afterwards deletes the user with its key and policy
/// and releases the bucket (the sweep never deletes data), while a bucket under the prefix
/// made by hand, a bucket tagged by another installation and an untagged user under the IAM
/// path stay exactly as they were.
#[tokio::test]
async fn what_was_stripped_while_no_operator_ran_is_swept() {
    let client = admin().await;
    let ns = namespace(&client, "swept").await;
    let opts = OperatorOpts {
        namespaces: vec![ns.clone()],
        resync: "10m",
        ..Default::default()
    };
    let id = Identity::new(&opts.namespaces, None).await;
    let first = Operator::start_as(&id, &opts, "0").await;
    let spec = json!({"deletionPolicy": "Delete", "forceDelete": true});
    let (s3_name, user) = bucket_with_access(&client, &ns, spec).await;
    let foreign = foreign_resources(&id.cluster, &ns).await;
    first.terminate().await;
    let buckets = Api::<Bucket>::namespaced(client.clone(), &ns);
    let accesses = Api::<BucketAccess>::namespaced(client.clone(), &ns);
    delete_stripped(&accesses, "app").await;
    delete_stripped(&buckets, "data").await;
    let sweeping = OperatorOpts {
        extra_args: vec!["--orphan-sweep-period".into(), "2s".into()],
        ..opts
    };
    let started = Instant::now();
    let op = Operator::start_as(&id, &sweeping, "1").await;
    wait_for("the sweep to delete the user", T, || async {
        (!user_exists(&user).await).then_some(())
    })
    .await;
    wait_released(&s3_name, &ns).await;
    eprintln!(
        "figure: operator start to orphans swept {:?}",
        started.elapsed()
    );
    assert!(
        has_object(&s3_name, "keep.txt").await,
        "the sweep never deletes data"
    );
    // Counted once the deletion has returned, which the user being gone can precede.
    wait_for("the orphan to be counted", T, || async {
        let labels = [("kind", "user"), ("action", "deleted")];
        let n = op.metric("s3_operator_orphans_total", &labels).await;
        (n > 0.0).then_some(n)
    })
    .await;
    assert_eq!(
        op.metric(
            "s3_operator_orphans_total",
            &[("kind", "user"), ("action", "deleted")]
        )
        .await,
        1.0
    );
    // A few sweeps more: nothing foreign is ever touched.
    let listed = op.aws_calls("ListUsers").await;
    wait_for("two more sweeps", T, || async {
        (op.aws_calls("ListUsers").await >= listed + 2.0).then_some(())
    })
    .await;
    foreign.unchanged().await;
    for call in [
        "ListBuckets",
        "ListUsers",
        "ListRoles",
        "GetBucketTagging",
        "ListUserTags",
        "ListRoleTags",
    ] {
        eprintln!("figure: {call} calls so far {}", op.aws_calls(call).await);
    }
}

/// What the sweep must leave alone, made beside an installation's own resources.
struct Foreign {
    by_hand: String,
    other_installation: (String, BTreeMap<String, String>),
    untagged_user: String,
}

async fn foreign_resources(cluster: &str, ns: &str) -> Foreign {
    let s3 = admin_s3();
    let by_hand = format!("{}byhand-{}", prefix(cluster), random(6));
    let other = format!("{}other-{}", prefix(cluster), random(6));
    for name in [&by_hand, &other] {
        s3.create_bucket().bucket(name).send().await.unwrap();
    }
    // Tagged for a dead UID in the same namespace, but by another installation.
    let tags = BTreeMap::from([
        ("s3.operator.dev/cluster".to_string(), format!("{cluster}x")),
        ("s3.operator.dev/namespace".to_string(), ns.to_string()),
        ("s3.operator.dev/name".to_string(), "gone".to_string()),
        (UID.to_string(), "00000000-dead".to_string()),
    ]);
    let tag_set: Vec<_> = tags
        .iter()
        .map(|(k, v)| {
            aws_sdk_s3::types::Tag::builder()
                .key(k)
                .value(v)
                .build()
                .unwrap()
        })
        .collect();
    let tagging = aws_sdk_s3::types::Tagging::builder()
        .set_tag_set(Some(tag_set))
        .build()
        .unwrap();
    s3.put_bucket_tagging()
        .bucket(&other)
        .tagging(tagging)
        .send()
        .await
        .unwrap();
    let untagged_user = format!("byhand-{}", random(6));
    admin_iam()
        .create_user()
        .user_name(&untagged_user)
        .path(format!("/s3-operator/{cluster}/"))
        .send()
        .await
        .unwrap();
    Foreign {
        by_hand,
        other_installation: (other, tags),
        untagged_user,
    }
}

impl Foreign {
    async fn unchanged(&self) {
        assert!(bucket_exists(&self.by_hand).await);
        assert!(
            bucket_tags(&self.by_hand).await.is_empty(),
            "untagged stays so"
        );
        let (other, tags) = &self.other_installation;
        assert_eq!(&bucket_tags(other).await, tags, "another installation's");
        assert!(user_exists(&self.untagged_user).await, "an untagged user");
    }
}

/// (3) Under a class allowing only `Retain` and no `forceDelete`, a tenant's edit to `Delete`
/// with `forceDelete` is refused (ClassViolation) and deleting the Bucket then releases its
/// bucket with its object: deletion follows the rules a pass accepted.
#[tokio::test]
async fn deletion_follows_what_the_class_allowed_never_a_refused_edit() {
    let client = admin().await;
    let ns = namespace(&client, "keep").await;
    let value = random(8);
    let patch = json!({"metadata": {"labels": {"e2e-class": value}}});
    Api::<Namespace>::all(client.clone())
        .patch(&ns, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    install_crds().await;
    let class_name = format!("e2e-{}", random(6));
    let class: BucketClass = serde_json::from_value(json!({
        "apiVersion": "s3.operator.dev/v1alpha1", "kind": "BucketClass",
        "metadata": {"name": class_name,
            "annotations": {"s3.operator.dev/is-default-class": "true"}},
        "spec": {"namespaceSelector": {"matchLabels": {"e2e-class": value}},
            "constraints": {"allowedDeletionPolicies": ["Retain"], "allowForceDelete": false}}}))
    .unwrap();
    let classes = Api::<BucketClass>::all(client.clone());
    classes
        .create(&PostParams::default(), &class)
        .await
        .unwrap();
    let op = Operator::start(OperatorOpts {
        namespaces: vec![ns.clone()],
        resync: "10m",
        ..Default::default()
    })
    .await;
    let buckets = Api::<Bucket>::namespaced(client.clone(), &ns);
    buckets
        .create(&PostParams::default(), &bucket("data", json!({})))
        .await
        .unwrap();
    let s3_name = wait_ready(&buckets, "data").await;
    put_object(&s3_name, "keep.txt").await;
    let edit = json!({"spec": {"deletionPolicy": "Delete", "forceDelete": true}});
    buckets
        .patch("data", &PatchParams::default(), &Patch::Merge(&edit))
        .await
        .unwrap();
    let msg = wait_reason(&buckets, "data", "ClassViolation", T).await;
    assert!(msg.contains(&class_name), "{msg}");
    buckets
        .delete("data", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the Bucket to go", T, || async {
        buckets.get_opt("data").await.ok()?.is_none().then_some(())
    })
    .await;
    assert!(
        bucket_exists(&s3_name).await,
        "a refused Delete deleted the bucket"
    );
    assert!(
        has_object(&s3_name, "keep.txt").await,
        "a refused forceDelete emptied it"
    );
    wait_released(&s3_name, &ns).await;
    let _ = classes.delete(&class_name, &DeleteParams::default()).await;
    drop(op);
}
