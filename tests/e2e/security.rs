//! Multi-tenant security, end to end, with the operator under exactly its shipped RBAC and IAM
//! policy: no escalation through the operator's credentials, no tenant reaching another
//! tenant's bucket, grants that end with ownership, status that is never an input, and cleanup
//! that fails closed. Also the emulator extensions these tests rely on.

use std::time::Duration;

use aws_sdk_iam::error::ProvideErrorMetadata;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use s3_operator::api::{Bucket, BucketAccess};
use serde_json::json;

use crate::access::access;
use crate::support::*;

const T: Duration = Duration::from_secs(60);

/// The AWS error code of a failed call, or "ok".
pub(crate) fn code<T, E: ProvideErrorMetadata>(r: Result<T, E>) -> String {
    match r {
        Ok(_) => "ok".into(),
        Err(e) => e.code().unwrap_or("no code").to_string(),
    }
}

fn admin_policy() -> String {
    json!({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]})
        .to_string()
}

/// Whoever holds the operator's credentials cannot mint an identity beyond the boundary.
#[tokio::test]
async fn operator_credentials_cannot_mint_an_admin() {
    let id = Identity::new(&[], None).await;
    let iam = iam_with(&id.aws_key.0, &id.aws_key.1);
    let s = scope(&id.cluster);
    let boundary = s.boundary_arn();
    let path = &s.iam_path;
    // IAM names are account-wide: this run's own, so an emulator an earlier run used (whose
    // users of these names sit in another path) answers for this run.
    let name = |n: &str| format!("{n}-{}", id.cluster);
    let (nb, ob, wb, outside, evil) = (
        name("nb"),
        name("ob"),
        name("wb"),
        name("outside"),
        name("evil"),
    );
    no_user_or_role_without_the_boundary(&iam, path, &nb, &ob).await;
    only_the_boundary_policy_is_readable_and_none_is_created(&iam, path, &boundary).await;
    // With the boundary it may, as it must to do its job.
    iam.create_user()
        .user_name(&wb)
        .path(path)
        .permissions_boundary(&boundary)
        .send()
        .await
        .expect("a user with the boundary");
    the_boundary_cannot_be_removed_replaced_or_escaped(&iam, &boundary, &wb, &outside).await;
    an_admin_policy_on_a_bounded_user_changes_nothing(&iam, &wb, &evil).await;
}

/// Without the boundary, or with another one, no user or role is created in its own path.
async fn no_user_or_role_without_the_boundary(
    iam: &aws_sdk_iam::Client,
    path: &str,
    nb: &str,
    ob: &str,
) {
    let r = iam.create_user().user_name(nb).path(path).send().await;
    assert_eq!(code(r), "AccessDenied", "a user without the boundary");
    let r = iam
        .create_user()
        .user_name(ob)
        .path(path)
        .permissions_boundary("arn:aws:iam::aws:policy/AdministratorAccess")
        .send()
        .await;
    assert_eq!(code(r), "AccessDenied", "a user with another boundary");
    let trust = json!({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"}]});
    let r = iam
        .create_role()
        .role_name(nb)
        .path(path)
        .assume_role_policy_document(trust.to_string())
        .send()
        .await;
    assert_eq!(code(r), "AccessDenied", "a role without the boundary");
}

/// It may read the boundary (to check at start-up that it exists), and no other policy; nor
/// create a managed policy (changing the boundary is refused later).
async fn only_the_boundary_policy_is_readable_and_none_is_created(
    iam: &aws_sdk_iam::Client,
    path: &str,
    boundary: &str,
) {
    iam.get_policy()
        .policy_arn(boundary)
        .send()
        .await
        .expect("GetPolicy on the boundary");
    let r = iam
        .get_policy()
        .policy_arn("arn:aws:iam::aws:policy/AdministratorAccess")
        .send()
        .await;
    assert_eq!(code(r), "AccessDenied", "GetPolicy on another policy");
    let r = iam
        .create_policy()
        .policy_name("mine")
        .path(path)
        .policy_document(admin_policy())
        .send()
        .await;
    assert_eq!(code(r), "AccessDenied", "a managed policy of its own");
}

/// The boundary cannot be removed, replaced, nor an admin managed policy attached; and no user
/// is made outside the operator's path, even with the boundary.
async fn the_boundary_cannot_be_removed_replaced_or_escaped(
    iam: &aws_sdk_iam::Client,
    boundary: &str,
    wb: &str,
    outside: &str,
) {
    let r = iam
        .delete_user_permissions_boundary()
        .user_name(wb)
        .send()
        .await;
    assert_eq!(code(r), "AccessDenied", "delete the boundary");
    let r = iam
        .put_user_permissions_boundary()
        .user_name(wb)
        .permissions_boundary("arn:aws:iam::aws:policy/AdministratorAccess")
        .send()
        .await;
    assert_eq!(code(r), "AccessDenied", "replace the boundary");
    let r = iam
        .attach_user_policy()
        .user_name(wb)
        .policy_arn("arn:aws:iam::aws:policy/AdministratorAccess")
        .send()
        .await;
    assert_eq!(code(r), "AccessDenied", "attach an admin policy");
    let r = iam
        .create_policy_version()
        .policy_arn(boundary)
        .policy_document(admin_policy())
        .set_as_default(true)
        .send()
        .await;
    assert_eq!(code(r), "AccessDenied", "rewrite the boundary itself");
    let r = iam
        .create_user()
        .user_name(outside)
        .path("/")
        .permissions_boundary(boundary)
        .send()
        .await;
    assert_eq!(code(r), "AccessDenied", "a user outside the path");
}

/// An admin inline policy on a bounded user changes nothing: the boundary caps it.
async fn an_admin_policy_on_a_bounded_user_changes_nothing(
    iam: &aws_sdk_iam::Client,
    wb: &str,
    evil: &str,
) {
    iam.put_user_policy()
        .user_name(wb)
        .policy_name("admin")
        .policy_document(admin_policy())
        .send()
        .await
        .expect("IAM accepts the document");
    let key = iam
        .create_access_key()
        .user_name(wb)
        .send()
        .await
        .unwrap()
        .access_key
        .unwrap();
    let (minted_iam, minted_s3) = (
        iam_with(&key.access_key_id, &key.secret_access_key),
        s3_with(&key.access_key_id, &key.secret_access_key),
    );
    let r = minted_iam.create_user().user_name(evil).send().await;
    assert_eq!(code(r), "AccessDenied", "a bounded user cannot use IAM");
    let outside = format!("elsewhere-{}", random(6));
    let r = minted_s3.create_bucket().bucket(&outside).send().await;
    assert_eq!(code(r), "AccessDenied", "nor S3 outside the prefix");
    let r = minted_s3.list_buckets().send().await;
    assert_eq!(code(r), "AccessDenied", "nor list the account's buckets");
}

/// The emulator evaluates what the security tests depend on, the way AWS does.
#[tokio::test]
async fn emulator_evaluates_conditions_boundaries_and_key_status() {
    let cluster = format!("t{}", random(6));
    let boundary = create_boundary(&cluster).await;
    let bucket = format!("{}cond-{}", prefix(&cluster), random(6));
    let name = format!("cond-{}", random(6));
    let doc = conditions_policy(&boundary, &bucket);
    let (k, s) = iam_user_with_policy(&name, "/", Some(&doc)).await;
    let (iam, s3) = (iam_with(&k, &s), s3_with(&k, &s));
    string_equals_fails_on_a_missing_key(&iam, &name, &boundary).await;
    tags_at_creation_need_tag_resource(&s3, &bucket).await;
    s3_prefix_condition_limits_listing(&s3, &bucket).await;
    a_boundary_caps_a_user_and_an_inactive_key_is_refused(&format!("{name}-b"), &bucket, &boundary)
        .await;
}

fn conditions_policy(boundary: &str, bucket: &str) -> serde_json::Value {
    json!({"Version": "2012-10-17", "Statement": [
        // A missing key fails StringEquals: without a boundary, no user is created.
        {"Effect": "Allow", "Action": "iam:CreateUser", "Resource": "*",
         "Condition": {"StringEquals": {"iam:PermissionsBoundary": boundary}}},
        // Listing only under a prefix (s3:prefix from the request).
        {"Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": format!("arn:aws:s3:::{bucket}"),
         "Condition": {"StringLike": {"s3:prefix": ["team/*"]}}},
        {"Effect": "Allow", "Action": ["s3:CreateBucket", "s3:GetBucketTagging"], "Resource": format!("arn:aws:s3:::{bucket}")},
        // A Deny whose condition does not hold does not apply (stock moto denied); requests
        // count as made over TLS.
        {"Effect": "Deny", "Action": "s3:CreateBucket", "Resource": "*",
         "Condition": {"Bool": {"aws:SecureTransport": "false"}}},
    ]})
}

/// StringEquals on a missing key fails; on a matching key it holds (and makes `{name}-b`).
async fn string_equals_fails_on_a_missing_key(
    iam: &aws_sdk_iam::Client,
    name: &str,
    boundary: &str,
) {
    let r = iam
        .create_user()
        .user_name(format!("{name}-a"))
        .send()
        .await;
    assert_eq!(code(r), "AccessDenied", "StringEquals on a missing key");
    iam.create_user()
        .user_name(format!("{name}-b"))
        .permissions_boundary(boundary)
        .send()
        .await
        .expect("StringEquals on a matching key");
}

/// CreateBucket without s3:TagResource: tags at creation are refused and nothing is made; the
/// admin creates it with tags in the same call.
async fn tags_at_creation_need_tag_resource(s3: &aws_sdk_s3::Client, bucket: &str) {
    let tagged = aws_sdk_s3::types::CreateBucketConfiguration::builder()
        .tags(
            aws_sdk_s3::types::Tag::builder()
                .key("k")
                .value("v")
                .build()
                .unwrap(),
        )
        .build();
    let r = s3
        .create_bucket()
        .bucket(bucket)
        .create_bucket_configuration(tagged.clone())
        .send()
        .await;
    assert_eq!(
        code(r),
        "AccessDenied",
        "tags at creation need s3:TagResource"
    );
    assert!(!bucket_exists(bucket).await);
    admin_s3()
        .create_bucket()
        .bucket(bucket)
        .create_bucket_configuration(tagged)
        .send()
        .await
        .unwrap();
    assert_eq!(
        bucket_tags(bucket).await.get("k").map(String::as_str),
        Some("v")
    );
}

/// StringLike on s3:prefix: only listings under `team/` are allowed, and none without a prefix.
async fn s3_prefix_condition_limits_listing(s3: &aws_sdk_s3::Client, bucket: &str) {
    let list = |p: Option<&str>| {
        s3.list_objects_v2()
            .bucket(bucket)
            .set_prefix(p.map(Into::into))
            .send()
    };
    assert_eq!(code(list(Some("team/x")).await), "ok", "s3:prefix matches");
    assert_eq!(code(list(Some("other/")).await), "AccessDenied");
    assert_eq!(
        code(list(None).await),
        "AccessDenied",
        "no prefix, no match"
    );
}

/// A user's boundary caps it; an inactive key authenticates nothing.
async fn a_boundary_caps_a_user_and_an_inactive_key_is_refused(
    user: &str,
    bucket: &str,
    boundary: &str,
) {
    let iam_admin = admin_iam();
    iam_admin
        .put_user_policy()
        .user_name(user)
        .policy_name("admin")
        .policy_document(admin_policy())
        .send()
        .await
        .unwrap();
    let key = iam_admin
        .create_access_key()
        .user_name(user)
        .send()
        .await
        .unwrap()
        .access_key
        .unwrap();
    let bounded = s3_with(&key.access_key_id, &key.secret_access_key);
    assert_eq!(
        code(bounded.list_objects_v2().bucket(bucket).send().await),
        "ok"
    );
    let r = iam_with(&key.access_key_id, &key.secret_access_key)
        .list_users()
        .send()
        .await;
    assert_eq!(code(r), "AccessDenied", "the boundary allows no IAM");
    let got = iam_admin.get_user().user_name(user).send().await.unwrap();
    let reported = got.user.unwrap().permissions_boundary.unwrap();
    assert_eq!(reported.permissions_boundary_arn(), Some(boundary));
    iam_admin
        .update_access_key()
        .user_name(user)
        .access_key_id(&key.access_key_id)
        .status(aws_sdk_iam::types::StatusType::Inactive)
        .send()
        .await
        .unwrap();
    let r = bounded.list_objects_v2().bucket(bucket).send().await;
    assert_eq!(code(r), "InvalidAccessKeyId", "an inactive key is refused");
}

/// Every user the operator creates carries the boundary.
async fn assert_bounded(user_arn: &str, cluster: &str) {
    let name = user_arn.rsplit('/').next().unwrap();
    let user = admin_iam().get_user().user_name(name).send().await.unwrap();
    let b = user.user.unwrap().permissions_boundary.unwrap();
    assert_eq!(
        b.permissions_boundary_arn(),
        Some(scope(cluster).boundary_arn().as_str())
    );
}

pub(crate) async fn s3_works(
    d: &std::collections::BTreeMap<String, String>,
    bucket: &str,
) -> String {
    let s3 = s3_with(&d["AWS_ACCESS_KEY_ID"], &d["AWS_SECRET_ACCESS_KEY"]);
    code(
        s3.put_object()
            .bucket(bucket)
            .key("probe")
            .body(b"x".to_vec().into())
            .send()
            .await,
    )
}

/// A retained bucket goes back only to its namespace, and the grants on it end with the
/// Bucket: revoked within one pass, restored when the same namespace adopts it back.
#[tokio::test]
async fn retained_buckets_stay_with_their_namespace_and_grants_end_with_ownership() {
    let client = admin().await;
    let (a, b) = (
        namespace(&client, "tena").await,
        namespace(&client, "tenb").await,
    );
    let op = Operator::start(OperatorOpts {
        namespaces: vec![a.clone(), b.clone()],
        resync: "30s",
        ..Default::default()
    })
    .await;
    let name = format!("{}kept-{}", prefix(&op.cluster), random(6));
    let spec = json!({"bucketName": name, "deletionPolicy": "Retain", "adoptExisting": true});
    let grant = json!({"bucketRef": {"name": "kept"}, "permission": "ReadWrite"});
    let kept = bucket("kept", spec.clone());
    let pair = AccessPair::create(&client, &a, kept, access("app", grant)).await;
    assert_bounded(&pair.user_arn(), &op.cluster).await;
    let creds = pair.secret_data().await;
    let (ba, accesses) = (pair.buckets, pair.accesses);
    let bb = Api::<Bucket>::namespaced(client.clone(), &b);
    assert_eq!(s3_works(&creds, &name).await, "ok");

    // Deleting the Bucket (Retain) revokes the grant and says why; the data stays.
    ba.delete("kept", &DeleteParams::default()).await.unwrap();
    let msg = wait_reason(&accesses, "app", "BucketNotFound", T).await;
    assert!(msg.contains("no access is granted"), "{msg}");
    wait_for("the key to stop working", T, || async {
        (s3_works(&creds, &name).await != "ok").then_some(())
    })
    .await;
    assert!(bucket_exists(&name).await, "a retained bucket stays");
    let tags = bucket_tags(&name).await;
    assert_eq!(
        tags.get("s3.operator.dev/released-from-namespace"),
        Some(&a)
    );
    assert!(!tags.contains_key("s3.operator.dev/uid"));

    // Another tenant cannot adopt it, even asking to.
    bb.create(&PostParams::default(), &bucket("steal", spec.clone()))
        .await
        .unwrap();
    let msg = wait_reason(&bb, "steal", "NameConflict", T).await;
    // The refusal does not say which namespace retained it.
    assert!(msg.contains("retained by another namespace"), "{msg}");
    assert!(!msg.contains(&a), "{msg}");
    assert!(!bucket_tags(&name).await.contains_key("s3.operator.dev/uid"));

    // Its own namespace adopts it back, and the same Secret works again.
    ba.create(&PostParams::default(), &bucket("kept", spec))
        .await
        .unwrap();
    wait_ready(&ba, "kept").await;
    wait_reason(&accesses, "app", "Available", T).await;
    wait_for("the key to work again", T, || async {
        (s3_works(&creds, &name).await == "ok").then_some(())
    })
    .await;
    let tags = bucket_tags(&name).await;
    assert_eq!(tags.get("s3.operator.dev/namespace"), Some(&a));
    assert!(!tags.contains_key("s3.operator.dev/released-from-namespace"));
}

/// Status is a report: a tenant who writes status (or names another tenant's bucket) gets no
/// grant on it and cannot make the operator delete it.
#[tokio::test]
async fn status_cannot_redirect_a_grant_or_a_deletion() {
    let client = admin().await;
    let (victim_ns, attacker_ns) = (
        namespace(&client, "vict").await,
        namespace(&client, "attk").await,
    );
    let op = Operator::start(OperatorOpts {
        namespaces: vec![victim_ns.clone(), attacker_ns.clone()],
        ..Default::default()
    })
    .await;
    let target = victim_keeps_an_object_in_a_retained_bucket(&client, &victim_ns).await;
    let attacker = Attacker::in_namespace(&client, &attacker_ns);
    let (own, forged) = attacker_forges_status_to_name_the_victims_bucket(&attacker, &target).await;
    its_own_bucket_never_grants_the_one_status_names(&attacker, &own, &target).await;
    a_forged_ready_never_grants_the_victims_bucket(&attacker, &forged, &target).await;
    deleting_the_attackers_buckets_leaves_the_victims_whole(&attacker, &own, &target, &victim_ns)
        .await;
    drop(op);
}

/// What an attacker owning one namespace works with.
struct Attacker {
    buckets: Api<Bucket>,
    accesses: Api<BucketAccess>,
    secrets: Api<Secret>,
    events: Api<Event>,
}

impl Attacker {
    fn in_namespace(client: &kube::Client, ns: &str) -> Attacker {
        Attacker {
            buckets: Api::namespaced(client.clone(), ns),
            accesses: Api::namespaced(client.clone(), ns),
            secrets: Api::namespaced(client.clone(), ns),
            events: Api::namespaced(client.clone(), ns),
        }
    }
}

/// The victim's Retain Bucket `data`, holding `secret.txt`. Returns its S3 name.
async fn victim_keeps_an_object_in_a_retained_bucket(client: &kube::Client, ns: &str) -> String {
    let victim = Api::<Bucket>::namespaced(client.clone(), ns);
    victim
        .create(
            &PostParams::default(),
            &bucket("data", json!({"deletionPolicy": "Retain"})),
        )
        .await
        .unwrap();
    let target = wait_ready(&victim, "data").await;
    admin_s3()
        .put_object()
        .bucket(&target)
        .key("secret.txt")
        .body(b"victim".to_vec().into())
        .send()
        .await
        .unwrap();
    target
}

/// The attacker's Bucket `mine` names nothing and `named` names the victim's bucket (refused as
/// another owner's); both get a status forged to name the victim's, and a ReadOnly access each.
/// Returns `mine`'s own S3 name and the forged status.
async fn attacker_forges_status_to_name_the_victims_bucket(
    attacker: &Attacker,
    target: &str,
) -> (String, serde_json::Value) {
    attacker
        .buckets
        .create(
            &PostParams::default(),
            &bucket(
                "mine",
                json!({"deletionPolicy": "Delete", "forceDelete": true}),
            ),
        )
        .await
        .unwrap();
    let own = wait_ready(&attacker.buckets, "mine").await;
    // The victim's bucket, by explicit name: refused as another owner's.
    attacker
        .buckets
        .create(
            &PostParams::default(),
            &bucket(
                "named",
                json!({"bucketName": target, "deletionPolicy": "Delete", "forceDelete": true}),
            ),
        )
        .await
        .unwrap();
    let msg = wait_reason(&attacker.buckets, "named", "NameConflict", T).await;
    // It says the name is held, never by which namespace or object.
    assert_eq!(
        msg,
        format!(
            "bucket {target} already exists and is held by another object of this installation; it will not be modified"
        )
    );
    let forged = json!({"status": {"bucketName": target, "conditions": [{"type": "Ready", "status": "True", "reason": "Available", "message": "forged", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
    for name in ["mine", "named"] {
        attacker
            .buckets
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&forged))
            .await
            .unwrap();
    }
    for (name, bucket_ref) in [("via-mine", "mine"), ("via-named", "named")] {
        attacker
            .accesses
            .create(
                &PostParams::default(),
                &access(
                    name,
                    json!({"bucketRef": {"name": bucket_ref}, "permission": "ReadOnly"}),
                ),
            )
            .await
            .unwrap();
    }
    (own, forged)
}

/// Through its own Bucket it gets its own bucket, never the one status names.
async fn its_own_bucket_never_grants_the_one_status_names(
    attacker: &Attacker,
    own: &str,
    target: &str,
) {
    wait_reason(&attacker.accesses, "via-mine", "Available", T).await;
    let d = secret_data(&attacker.secrets.get("via-mine").await.unwrap());
    assert_eq!(d["BUCKET_NAME"], own);
    let s3 = s3_with(&d["AWS_ACCESS_KEY_ID"], &d["AWS_SECRET_ACCESS_KEY"]);
    let r = s3
        .get_object()
        .bucket(target)
        .key("secret.txt")
        .send()
        .await;
    assert_eq!(code(r), "AccessDenied");
}

/// Through the Bucket that names the victim's bucket: nothing, however often the attacker
/// forges its status back to Ready. The operator corrects the Bucket's status (NameConflict,
/// so the access waits: BucketNotReady); each forged Ready makes the access look the bucket
/// up in AWS, where its tags name the victim (BucketNotOwned). Never a grant.
async fn a_forged_ready_never_grants_the_victims_bucket(
    attacker: &Attacker,
    forged: &serde_json::Value,
    target: &str,
) {
    let Attacker {
        buckets,
        accesses,
        secrets,
        events,
    } = attacker;
    let msg = wait_for("via-named to be refused as not owned", T, || async {
        buckets
            .patch_status("named", &PatchParams::default(), &Patch::Merge(forged))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let st = accesses.get("via-named").await.unwrap().status;
        let (_, reason, _) =
            ready_of(st.map(|s| serde_json::to_value(s).unwrap())).unwrap_or_default();
        assert!(
            ["BucketNotReady", "BucketNotOwned", ""].contains(&reason.as_str()),
            "via-named: {reason}"
        );
        assert!(secrets.get_opt("via-named").await.unwrap().is_none());
        let refused = events.list(&ListParams::default()).await.unwrap().items;
        refused
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("via-named"))
            .find(|e| e.reason.as_deref() == Some("BucketNotOwned"))
            .and_then(|e| e.note)
    })
    .await;
    assert!(msg.contains(target), "{msg}");
    assert!(secrets.get_opt("via-named").await.unwrap().is_none());
}

/// Deleting both attacker Buckets (Delete + forceDelete) leaves the victim's bucket whole.
async fn deleting_the_attackers_buckets_leaves_the_victims_whole(
    attacker: &Attacker,
    own: &str,
    target: &str,
    victim_ns: &str,
) {
    for name in ["mine", "named"] {
        attacker
            .buckets
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }
    wait_for("the attacker's Buckets to go", T, || async {
        let left = attacker
            .buckets
            .list(&Default::default())
            .await
            .unwrap()
            .items;
        left.is_empty().then_some(())
    })
    .await;
    assert!(!bucket_exists(own).await, "its own bucket was deleted");
    let body = admin_s3()
        .get_object()
        .bucket(target)
        .key("secret.txt")
        .send()
        .await
        .expect("the victim's object survives");
    assert_eq!(
        body.body.collect().await.unwrap().into_bytes().as_ref(),
        b"victim"
    );
    assert_eq!(
        bucket_tags(target)
            .await
            .get("s3.operator.dev/namespace")
            .map(String::as_str),
        Some(victim_ns)
    );
}

/// A refusal during deletion keeps the finalizer and names the refused operation; once the
/// policy is whole again the deletion finishes and nothing is left behind.
#[tokio::test]
async fn cleanup_fails_closed_under_a_narrowed_policy() {
    let client = admin().await;
    let ns = namespace(&client, "closed").await;
    let id = Identity::new(std::slice::from_ref(&ns), None).await;
    let opts = OperatorOpts {
        namespaces: vec![ns.clone()],
        resync: "5s",
        ..Default::default()
    };
    let op = Operator::start_as(&id, &opts, "0").await;
    let b = bucket("b", json!({"deletionPolicy": "Delete"}));
    let grant = json!({"bucketRef": {"name": "b"}, "permission": "ReadOnly"});
    let pair = AccessPair::create(&client, &ns, b, access("a", grant)).await;
    let user = pair.user();
    let AccessPair {
        buckets,
        accesses,
        s3_name: name,
        ..
    } = pair;

    // Take iam:GetUser and s3:GetBucketTagging away from the operator.
    let operator_user = operator_user(&id.cluster);
    let mut narrowed = operator_policy(&id.cluster);
    for s in narrowed["Statement"].as_array_mut().unwrap() {
        if let Some(actions) = s["Action"].as_array_mut() {
            actions.retain(|a| a != "iam:GetUser" && a != "s3:GetBucketTagging");
        }
    }
    let set_policy = |doc: serde_json::Value| {
        let user = operator_user.clone();
        async move {
            admin_iam()
                .put_user_policy()
                .user_name(user)
                .policy_name("p")
                .policy_document(doc.to_string())
                .send()
                .await
                .unwrap();
        }
    };
    set_policy(narrowed).await;
    accesses
        .delete("a", &DeleteParams::default())
        .await
        .unwrap();
    buckets.delete("b", &DeleteParams::default()).await.unwrap();
    let msg = wait_reason(&accesses, "a", "DeletionBlocked", T).await;
    assert!(msg.contains("GetUser"), "{msg}");
    let msg = wait_reason(&buckets, "b", "DeletionBlocked", T).await;
    assert!(msg.contains("GetBucketTagging"), "{msg}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        accesses.get_opt("a").await.unwrap().is_some(),
        "finalizer kept"
    );
    assert!(
        buckets.get_opt("b").await.unwrap().is_some(),
        "finalizer kept"
    );
    let r = admin_iam().get_user().user_name(&user).send().await;
    assert_eq!(code(r), "ok", "the user was not forgotten");

    // The policy is whole again: both deletions finish, and nothing leaks.
    set_policy(operator_policy(&id.cluster)).await;
    wait_for("both objects to go", Duration::from_secs(120), || async {
        let a = accesses.get_opt("a").await.unwrap();
        let b = buckets.get_opt("b").await.unwrap();
        (a.is_none() && b.is_none()).then_some(())
    })
    .await;
    let r = admin_iam().get_user().user_name(&user).send().await;
    assert_eq!(code(r), "NoSuchEntity", "the user is deleted");
    assert!(!bucket_exists(&name).await, "the bucket is deleted");
    drop(op);
}
