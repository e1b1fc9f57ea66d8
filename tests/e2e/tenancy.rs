//! Tenant isolation past the features a tenant writes: a bucket policy grants only what the
//! permissions boundary grants anyway and never binds the operator; a grant never follows a
//! bucket name to its next owner; an edit that makes a spec invalid never turns a deletion into
//! an orphan. The operators here resync every 10 minutes, so "within seconds" is the operator
//! reacting, not a resync. Also the emulator's bucket-policy evaluation these tests rely on.

use std::time::{Duration, Instant};

use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use s3_operator::api::Bucket;
use serde_json::json;

use crate::access::access;
use crate::security::{code, s3_works};
use crate::support::*;

const T: Duration = Duration::from_secs(60);
/// How soon a grant on a name that changed hands is gone: seconds, against a 10-minute resync.
const SOON: Duration = Duration::from_secs(20);

async fn put_policy(bucket: &str, statements: serde_json::Value) {
    let doc = json!({"Version": "2012-10-17", "Statement": statements});
    admin_s3()
        .put_bucket_policy()
        .bucket(bucket)
        .policy(doc.to_string())
        .send()
        .await
        .expect("the admin writes the policy");
}

/// The admin identity's ARN, as IAM names it (with its path).
async fn admin_arn() -> String {
    let iam = admin_iam();
    let user = iam.get_user().send().await.expect("the admin reads itself");
    user.user.expect("a user").arn
}

/// What AWS does with a bucket policy in the caller's own account, which moto alone ignores: an
/// Allow naming a bounded user grants past its boundary (the road a tenant's `spec.policy` must
/// not open), one naming the account defers to identity policies, and a Deny binds everyone its
/// conditions leave in, the admin included.
#[tokio::test]
async fn emulator_evaluates_bucket_policies_as_aws_does() {
    let cluster = format!("t{}", random(6));
    let boundary = create_boundary(&cluster).await;
    let account = scope(&cluster).account;
    let bucket = format!("{}bp-{}", prefix(&cluster), random(6));
    admin_s3()
        .create_bucket()
        .bucket(&bucket)
        .send()
        .await
        .unwrap();
    let name = format!("bp-{}", random(6));
    let (k, s) = iam_user_with_policy(&name, "/team/", None).await;
    admin_iam()
        .put_user_permissions_boundary()
        .user_name(&name)
        .permissions_boundary(&boundary)
        .send()
        .await
        .unwrap();
    let user_arn = format!("arn:aws:iam::{account}:user/team/{name}");
    let s3 = s3_with(&k, &s);
    let read_policy = || async { code(s3.get_bucket_policy().bucket(&bucket).send().await) };
    let arn = format!("arn:aws:s3:::{bucket}");

    // Naming the account defers to identity policies: this user has none.
    put_policy(
        &bucket,
        json!([{"Effect": "Allow", "Principal": {"AWS": account},
        "Action": "s3:GetBucketPolicy", "Resource": arn}]),
    )
    .await;
    assert_eq!(
        read_policy().await,
        "AccessDenied",
        "the account alone grants nothing"
    );
    // Naming the user grants it, although its boundary allows no bucket configuration at all.
    put_policy(
        &bucket,
        json!([{"Effect": "Allow", "Principal": {"AWS": user_arn},
        "Action": "s3:GetBucketPolicy", "Resource": arn}]),
    )
    .await;
    assert_eq!(
        read_policy().await,
        "ok",
        "a direct grant is not capped by the boundary"
    );
    // Another action than the one granted stays refused.
    let tagging = s3.get_bucket_tagging().bucket(&bucket).send().await;
    assert_eq!(code(tagging), "AccessDenied");

    // A Deny binds whoever its condition leaves in: with the admin exempt, the user is refused
    // what the Allow grants (an explicit Deny wins), and the admin is not.
    let admin = admin_arn().await;
    put_policy(&bucket, json!([
        {"Effect": "Allow", "Principal": {"AWS": [user_arn]}, "Action": "s3:GetBucketPolicy", "Resource": arn},
        {"Effect": "Deny", "Principal": "*", "Action": "s3:*", "Resource": [arn, format!("{arn}/*")],
         "Condition": {"ArnNotLike": {"aws:PrincipalArn": [admin.clone()]}}},
    ]))
    .await;
    assert_eq!(
        read_policy().await,
        "AccessDenied",
        "an explicit Deny wins over an Allow"
    );
    let by_admin = admin_s3().get_bucket_policy().bucket(&bucket).send().await;
    assert_eq!(code(by_admin), "ok", "the exempt admin");
    // Without the exemption it binds the admin too (only the account's root escapes in AWS).
    put_policy(
        &bucket,
        json!([{"Effect": "Deny", "Principal": {"AWS": "*"}, "Action": "s3:GetObject",
        "Resource": format!("{arn}/*")}]),
    )
    .await;
    let get = admin_s3()
        .get_object()
        .bucket(&bucket)
        .key("k")
        .send()
        .await;
    assert_eq!(code(get), "AccessDenied");
    admin_s3()
        .delete_bucket_policy()
        .bucket(&bucket)
        .send()
        .await
        .unwrap();
    admin_s3()
        .delete_bucket()
        .bucket(&bucket)
        .send()
        .await
        .unwrap();
}

/// Waits until the Bucket's current generation is served Ready.
async fn wait_served(api: &Api<Bucket>, name: &str) {
    wait_for(&format!("{name} to serve its spec"), T, || async {
        let b = api.get(name).await.ok()?;
        let st = b.status?;
        let ready = st
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        (ready && st.observed_generation == b.metadata.generation).then_some(())
    })
    .await;
}

async fn wait_gone_from_s3(bucket: &str) {
    wait_for(&format!("S3 bucket {bucket} to be deleted"), T, || async {
        (!bucket_exists(bucket).await).then_some(())
    })
    .await;
}

/// A tenant's Allow may grant only object and listing actions (within one account a bucket
/// policy naming its own BucketAccess user is not capped by the user's boundary), and its Deny
/// never binds the operator: the bucket stays managed and deletable.
#[tokio::test]
async fn a_tenant_policy_grants_only_object_actions_and_never_locks_the_operator_out() {
    let client = admin().await;
    let ns = namespace(&client, "pol").await;
    let op = Operator::start(OperatorOpts {
        namespaces: vec![ns.clone()],
        resync: "10m",
        ..Default::default()
    })
    .await;
    let spec = json!({"deletionPolicy": "Delete", "forceDelete": true});
    let grant = json!({"bucketRef": {"name": "b"}, "permission": "ReadWrite"});
    let pair = AccessPair::create(&client, &ns, bucket("b", spec), access("app", grant)).await;
    let user_arn = pair.user_arn();
    let creds = pair.secret_data().await;
    let AccessPair {
        buckets,
        accesses,
        s3_name: name,
        ..
    } = pair;
    let arn = format!("arn:aws:s3:::{name}");
    let app = s3_with(&creds["AWS_ACCESS_KEY_ID"], &creds["AWS_SECRET_ACCESS_KEY"]);
    admin_s3()
        .put_object()
        .bucket(&name)
        .key("data")
        .body(b"x".to_vec().into())
        .send()
        .await
        .unwrap();

    // Its own user, granted what its boundary withholds: refused by the API server.
    for action in [
        "s3:PutBucketPolicy",
        "s3:DeleteBucket",
        "s3:*",
        "s3:PutObjectRetention",
    ] {
        let evil = json!({"spec": {"policy": [{"effect": "Allow", "principal": {"aws": [user_arn]},
            "action": ["s3:GetObject", action], "resource": [arn, format!("{arn}/*")]}]}});
        let err = buckets
            .patch("b", &PatchParams::default(), &Patch::Merge(&evil))
            .await;
        let msg = format!("{:?}", err.expect_err(action));
        assert!(
            msg.contains("spec.policy[0].action") && msg.contains("object and listing"),
            "{msg}"
        );
    }
    let put = app
        .put_bucket_policy()
        .bucket(&name)
        .policy("{}")
        .send()
        .await;
    assert_eq!(
        code(put),
        "AccessDenied",
        "the app holds no bucket configuration"
    );

    // A Deny of everything for everyone but the tenant's break-glass admin: it binds the app,
    // and the operator still serves the next edit and deletes the bucket.
    let admin = admin_arn().await;
    let lock_out = json!({"spec": {"versioning": "Enabled", "policy": [{"sid": "LockOut",
        "effect": "Deny", "principal": {"aws": ["*"]}, "action": ["s3:*"],
        "resource": [arn, format!("{arn}/*")],
        "condition": {"ArnNotLike": {"aws:PrincipalArn": [admin.clone()]}}}]}});
    buckets
        .patch("b", &PatchParams::default(), &Patch::Merge(&lock_out))
        .await
        .unwrap();
    wait_served(&buckets, "b").await;
    let versioning = admin_s3()
        .get_bucket_versioning()
        .bucket(&name)
        .send()
        .await
        .unwrap();
    assert_eq!(versioning.status().map(|s| s.as_str()), Some("Enabled"));
    let doc = bucket_policy(&name).await.expect("a bucket policy");
    let deny = doc["Statement"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["Sid"] == "LockOut")
        .cloned();
    let exempt =
        deny.expect("the tenant's Deny")["Condition"]["ArnNotLike"]["aws:PrincipalArn"].clone();
    let exempt: Vec<String> = serde_json::from_value(match exempt {
        serde_json::Value::String(s) => json!([s]),
        v => v,
    })
    .unwrap();
    assert!(
        exempt.contains(&admin),
        "the tenant's own exemption stays: {exempt:?}"
    );
    assert!(exempt.len() > 1, "and the operator's is added: {exempt:?}");
    assert_eq!(
        s3_works(&creds, &name).await,
        "AccessDenied",
        "the Deny binds the app"
    );

    accesses
        .delete("app", &DeleteParams::default())
        .await
        .unwrap();
    buckets.delete("b", &DeleteParams::default()).await.unwrap();
    wait_gone_from_s3(&name).await;
    drop(op);
}

/// Deleting a Bucket whose spec no longer resolves (a COMPLIANCE retention the operator was
/// allowed to serve, then no longer is) still honours its deletion policy: Delete deletes the
/// bucket, Retain releases it (ownership tags and grants removed); neither is left owned by a
/// dead UID, and the deletion is not dropped.
#[tokio::test]
async fn an_invalid_edit_never_turns_a_deletion_into_an_orphan() {
    let client = admin().await;
    let ns = namespace(&client, "orph").await;
    let mut opts = OperatorOpts {
        namespaces: vec![ns.clone()],
        resync: "10m",
        extra_args: vec!["--allow-compliance-retention".into()],
        ..Default::default()
    };
    let id = Identity::new(&opts.namespaces, None).await;
    let allowing = Operator::start_as(&id, &opts, "0").await;
    let buckets = Api::<Bucket>::namespaced(client.clone(), &ns);
    let lock = json!({"defaultRetention": {"mode": "COMPLIANCE", "days": 1}});
    let del = json!({"deletionPolicy": "Delete", "forceDelete": true, "objectLock": lock});
    let keep = json!({"deletionPolicy": "Retain", "objectLock": lock});
    buckets
        .create(&PostParams::default(), &bucket("del", del))
        .await
        .unwrap();
    buckets
        .create(&PostParams::default(), &bucket("keep", keep))
        .await
        .unwrap();
    let (del, keep) = (
        wait_ready(&buckets, "del").await,
        wait_ready(&buckets, "keep").await,
    );
    allowing.terminate().await;
    // The same installation, no longer allowing COMPLIANCE: both specs are refused now.
    opts.extra_args.clear();
    let _op = Operator::start_as(&id, &opts, "1").await;
    for obj in ["del", "keep"] {
        let msg = wait_reason(&buckets, obj, "InvalidSpec", T).await;
        assert!(msg.contains("COMPLIANCE"), "{msg}");
    }
    buckets
        .delete("del", &DeleteParams::default())
        .await
        .unwrap();
    buckets
        .delete("keep", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone_from_s3(&del).await;
    wait_for("the Retain Bucket to go", T, || async {
        buckets.get_opt("keep").await.ok()?.is_none().then_some(())
    })
    .await;
    let tags = bucket_tags(&keep).await;
    assert!(
        !tags.contains_key("s3.operator.dev/uid"),
        "released, not owned by a dead UID: {tags:?}"
    );
    assert_eq!(
        tags.get("s3.operator.dev/released-from-namespace"),
        Some(&ns)
    );
    let doc = bucket_policy(&keep)
        .await
        .expect("the TLS-only policy stays");
    assert_eq!(
        doc["Statement"].as_array().unwrap().len(),
        1,
        "no grant stays: {doc}"
    );
    admin_s3()
        .delete_bucket()
        .bucket(&keep)
        .send()
        .await
        .unwrap();
}

/// A Bucket made not Ready by an invalid edit, its bucket deleted out of band and the name
/// created again by another namespace's Bucket: the first Bucket's access loses its grant within
/// seconds (the creation wakes every access whose Bucket names that S3 name, and an access of a
/// Bucket that is not Ready confirms ownership in AWS all the same), and never reads the new
/// owner's data.
#[tokio::test]
async fn a_grant_never_follows_a_bucket_name_to_its_next_owner() {
    let client = admin().await;
    let (a, b) = (
        namespace(&client, "gra").await,
        namespace(&client, "grb").await,
    );
    let op = Operator::start(OperatorOpts {
        namespaces: vec![a.clone(), b.clone()],
        resync: "10m",
        ..Default::default()
    })
    .await;
    let name = format!("{}shared-{}", prefix(&op.cluster), random(6));
    let spec = json!({"bucketName": name, "deletionPolicy": "Retain"});
    let grant = json!({"bucketRef": {"name": "data"}, "permission": "ReadOnly"});
    let pair = AccessPair::create(&client, &a, bucket("data", spec), access("app", grant)).await;
    let creds = pair.secret_data().await;
    let (ba, accesses) = (pair.buckets, pair.accesses);
    let bb = Api::<Bucket>::namespaced(client.clone(), &b);
    let app = s3_with(&creds["AWS_ACCESS_KEY_ID"], &creds["AWS_SECRET_ACCESS_KEY"]);
    let read = |key: &'static str| {
        let (app, name) = (app.clone(), name.clone());
        async move { code(app.get_object().bucket(&name).key(key).send().await) }
    };
    admin_s3()
        .put_object()
        .bucket(&name)
        .key("a.txt")
        .body(b"a".to_vec().into())
        .send()
        .await
        .unwrap();
    assert_eq!(read("a.txt").await, "ok");

    // An invalid edit: the Bucket is no longer Ready, and its pass stops before AWS.
    let invalid = json!({"spec": {"policy": [{"effect": "Allow", "principal": {"aws": ["999999999999"]},
        "action": ["s3:GetObject"], "resource": [format!("arn:aws:s3:::{name}/*")]}]}});
    ba.patch("data", &PatchParams::default(), &Patch::Merge(&invalid))
        .await
        .unwrap();
    wait_reason(&ba, "data", "InvalidSpec", T).await;
    wait_reason(&accesses, "app", "BucketNotReady", T).await;
    // Deleted out of band, then made again by another tenant, with its own data.
    admin_s3()
        .delete_object()
        .bucket(&name)
        .key("a.txt")
        .send()
        .await
        .unwrap();
    admin_s3()
        .delete_bucket_policy()
        .bucket(&name)
        .send()
        .await
        .unwrap();
    admin_s3()
        .delete_bucket()
        .bucket(&name)
        .send()
        .await
        .unwrap();
    let theirs = json!({"bucketName": name, "deletionPolicy": "Delete", "forceDelete": true});
    let start = Instant::now();
    bb.create(&PostParams::default(), &bucket("taken", theirs))
        .await
        .unwrap();
    wait_ready(&bb, "taken").await;
    admin_s3()
        .put_object()
        .bucket(&name)
        .key("b.txt")
        .body(b"b".to_vec().into())
        .send()
        .await
        .unwrap();

    let msg = wait_for("the old grant to be withdrawn", SOON, || async {
        let (_, reason, msg) = ready_of(
            serde_json::to_value(accesses.get("app").await.ok()?)
                .ok()?
                .get("status")
                .cloned(),
        )?;
        (reason == "BucketNotReady" && msg.contains("no access is granted")).then_some(msg)
    })
    .await;
    assert!(
        msg.contains("held by another object of this installation"),
        "{msg}"
    );
    assert!(!msg.contains(&b), "the new owner is not named: {msg}");
    assert!(start.elapsed() < SOON);
    // Withdrawn: the inline policy is gone and the key deactivated (S3 answers an inactive key
    // with InvalidAccessKeyId, as AWS does).
    let refused = read("b.txt").await;
    assert!(
        ["AccessDenied", "InvalidAccessKeyId"].contains(&refused.as_str()),
        "the new owner's data stays theirs: {refused}"
    );

    bb.delete("taken", &DeleteParams::default()).await.unwrap();
    wait_gone_from_s3(&name).await;
    accesses
        .delete("app", &DeleteParams::default())
        .await
        .unwrap();
    ba.delete("data", &DeleteParams::default()).await.unwrap();
}

/// Issue 34, item 0: the same name made again by hand (no tags, someone's object in it) while
/// the Bucket is not Ready, and only a metadata change of the access to run its pass. Its grant
/// is withdrawn at once (the inline policy gone, the key inactive), the access says why, and an
/// event reports the withdrawal. Before the emulator dropped a deleted bucket's tags (as S3
/// does), the bucket made again answered with the old owner's tags and the grant stayed.
#[tokio::test]
async fn a_grant_never_follows_a_name_made_again_by_hand() {
    let client = admin().await;
    let ns = namespace(&client, "grh").await;
    let op = Operator::start(OperatorOpts {
        namespaces: vec![ns.clone()],
        resync: "10m",
        ..Default::default()
    })
    .await;
    let name = format!("{}byhand-{}", prefix(&op.cluster), random(6));
    let spec = json!({"bucketName": name, "deletionPolicy": "Retain"});
    let grant = json!({"bucketRef": {"name": "data"}, "permission": "ReadWrite"});
    let pair = AccessPair::create(&client, &ns, bucket("data", spec), access("app", grant)).await;
    let user = pair.user();
    let creds = pair.secret_data().await;
    let AccessPair {
        buckets, accesses, ..
    } = pair;
    let app = s3_with(&creds["AWS_ACCESS_KEY_ID"], &creds["AWS_SECRET_ACCESS_KEY"]);
    let put = |s3: aws_sdk_s3::Client, key: &'static str| {
        let name = name.clone();
        async move {
            let body = b"x".to_vec().into();
            code(
                s3.put_object()
                    .bucket(&name)
                    .key(key)
                    .body(body)
                    .send()
                    .await,
            )
        }
    };
    assert_eq!(put(app.clone(), "mine.txt").await, "ok");

    // Not Ready: a spec.policy Allow naming another account.
    let invalid = json!({"spec": {"policy": [{"effect": "Allow", "principal": {"aws": ["999999999999"]},
        "action": ["s3:GetObject"], "resource": [format!("arn:aws:s3:::{name}/*")]}]}});
    buckets
        .patch("data", &PatchParams::default(), &Patch::Merge(&invalid))
        .await
        .unwrap();
    wait_reason(&buckets, "data", "InvalidSpec", T).await;
    wait_reason(&accesses, "app", "BucketNotReady", T).await;
    // Deleted out of band and made again by hand: no tags, someone else's object.
    let s3 = admin_s3();
    s3.delete_object()
        .bucket(&name)
        .key("mine.txt")
        .send()
        .await
        .unwrap();
    s3.delete_bucket_policy()
        .bucket(&name)
        .send()
        .await
        .unwrap();
    s3.delete_bucket().bucket(&name).send().await.unwrap();
    s3.create_bucket().bucket(&name).send().await.unwrap();
    assert_eq!(put(s3.clone(), "theirs.txt").await, "ok");

    // Any change runs a pass: here an annotation.
    let touch = json!({"metadata": {"annotations": {"example.com/touched": random(4)}}});
    accesses
        .patch("app", &PatchParams::default(), &Patch::Merge(&touch))
        .await
        .unwrap();
    let start = Instant::now();
    let iam = admin_iam();
    wait_for("the grant withdrawn in IAM", SOON, || async {
        let policy = iam
            .get_user_policy()
            .user_name(&user)
            .policy_name("s3-operator-access")
            .send()
            .await;
        let gone = matches!(&policy, Err(e) if e.as_service_error().is_some_and(|e| e.is_no_such_entity_exception()));
        let keys = iam.list_access_keys().user_name(&user).send().await.ok()?;
        let inactive = keys
            .access_key_metadata
            .iter()
            .all(|k| k.status != Some(aws_sdk_iam::types::StatusType::Active));
        (gone && inactive && !keys.access_key_metadata.is_empty()).then_some(())
    })
    .await;
    eprintln!("grant withdrawn {:?} after the annotation", start.elapsed());
    let msg = wait_for("the access to say why", SOON, || async {
        let status = serde_json::to_value(accesses.get("app").await.ok()?).ok()?;
        let (_, reason, msg) = ready_of(status.get("status").cloned())?;
        (reason == "BucketNotReady" && msg.contains("no access is granted")).then_some(msg)
    })
    .await;
    assert!(msg.contains("has no owner"), "{msg}");
    wait_event(
        &ns,
        "AccessRevoked",
        &["removed the access policy", "deactivated"],
    )
    .await;
    let refused = code(
        app.get_object()
            .bucket(&name)
            .key("theirs.txt")
            .send()
            .await,
    );
    assert!(
        ["AccessDenied", "InvalidAccessKeyId"].contains(&refused.as_str()),
        "the new owner's data stays theirs: {refused}"
    );
    // The cause: the bucket made again carries none of its predecessor's tags, as in S3.
    assert_eq!(bucket_tags(&name).await, Default::default());

    accesses
        .delete("app", &DeleteParams::default())
        .await
        .unwrap();
    buckets
        .delete("data", &DeleteParams::default())
        .await
        .unwrap();
    s3.delete_object()
        .bucket(&name)
        .key("theirs.txt")
        .send()
        .await
        .unwrap();
    s3.delete_bucket().bucket(&name).send().await.unwrap();
}

/// A bucket of the installation's name in another account, whose bucket policy lets our account
/// in (which AWS honours for a cross-account request the caller's own policy allows), is never
/// read, adopted, written or deleted: every S3 request the operator makes on a bucket expects
/// its own account to own it (`x-amz-expected-bucket-owner`), S3 refuses it, and the Bucket
/// reports NameConflict. The operator runs without its policy's `aws:ResourceAccount`
/// conditions here, so the header alone keeps it out (`hack/emulator_test.py` tests the
/// conditions). Before the header, it adopted the stranger's bucket.
#[tokio::test]
async fn a_bucket_name_held_by_another_account_is_never_touched() {
    let client = admin().await;
    let ns = namespace(&client, "acct").await;
    let cluster = format!("t{}", random(6));
    let name = format!("{}stranger-{}", prefix(&cluster), random(6));
    let other = other_account_s3();
    other.create_bucket().bucket(&name).send().await.unwrap();
    let grant = json!({"Version": "2012-10-17", "Statement": [{"Effect": "Allow",
        "Principal": {"AWS": format!("arn:aws:iam::{ACCOUNT}:root")}, "Action": "s3:*",
        "Resource": [format!("arn:aws:s3:::{name}"), format!("arn:aws:s3:::{name}/*")]}]});
    let put = other
        .put_bucket_policy()
        .bucket(&name)
        .policy(grant.to_string());
    put.send().await.unwrap();
    let mut policy = operator_policy(&cluster);
    for s in policy["Statement"].as_array_mut().unwrap() {
        if s["Condition"]["StringEqualsIfExists"]["aws:ResourceAccount"].is_string() {
            s.as_object_mut().unwrap().remove("Condition");
        }
    }
    let _op = Operator::start(OperatorOpts {
        namespaces: vec![ns.clone()],
        cluster: Some(cluster),
        resync: "10m",
        policy: Some(policy),
        ..Default::default()
    })
    .await;
    let buckets = Api::<Bucket>::namespaced(client.clone(), &ns);
    let spec = json!({"bucketName": name, "adoptExisting": true, "deletionPolicy": "Delete",
                      "forceDelete": true});
    let pp = PostParams::default();
    buckets.create(&pp, &bucket("b", spec)).await.unwrap();
    let msg = wait_reason(&buckets, "b", "NameConflict", T).await;
    assert!(msg.contains("another AWS account"), "{msg}");
    let untouched = || async {
        let tags = other.get_bucket_tagging().bucket(&name).send().await;
        let tags = tags.map(|t| t.tag_set).unwrap_or_default();
        assert_eq!(tags, [], "the stranger's bucket was tagged");
        let now = other
            .get_bucket_policy()
            .bucket(&name)
            .send()
            .await
            .unwrap();
        let now: serde_json::Value = serde_json::from_str(&now.policy.unwrap()).unwrap();
        assert_eq!(now, grant, "the stranger's policy was changed");
    };
    untouched().await;
    // Deleting the Bucket finds no bucket of its account under the name: it goes, and the
    // stranger's bucket stays as it was.
    buckets.delete("b", &DeleteParams::default()).await.unwrap();
    wait_for("the Bucket to go", T, || async {
        buckets.get_opt("b").await.ok()?.is_none().then_some(())
    })
    .await;
    untouched().await;
    other
        .delete_bucket_policy()
        .bucket(&name)
        .send()
        .await
        .unwrap();
    other.delete_bucket().bucket(&name).send().await.unwrap();
}
