//! The ground every other test stands on is real: CRDs are served, RBAC and IAM really refuse.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::PolicyRule;
use kube::api::{Api, ListParams, ObjectMeta, PostParams};
use s3_operator::api::Bucket;
use serde_json::json;

use crate::support::*;

#[tokio::test]
async fn crds_are_served_and_the_server_reports_its_version() {
    install_crds().await;
    let client = admin().await;
    let v = client.apiserver_version().await.unwrap();
    assert_eq!((v.major.as_str(), v.minor.as_str()), ("1", "34"), "{v:?}");
    let ns = namespace(&client, "smoke").await;
    let buckets = Api::<Bucket>::namespaced(client, &ns);
    assert!(
        buckets
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}

#[tokio::test]
async fn rbac_allows_what_a_role_grants_and_denies_the_rest() {
    let client = admin().await;
    let ns = namespace(&client, "rbac").await;
    let rules = vec![PolicyRule {
        api_groups: Some(vec!["".into()]),
        resources: Some(vec!["configmaps".into()]),
        verbs: vec!["get".into(), "list".into()],
        ..Default::default()
    }];
    let token = service_account(&client, &ns, "reader", &[(ns.as_str(), rules)]).await;
    let as_sa = client_with_token(&token).await;
    Api::<ConfigMap>::namespaced(as_sa.clone(), &ns)
        .list(&ListParams::default())
        .await
        .expect("list is granted");
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some("x".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let err = Api::<ConfigMap>::namespaced(as_sa.clone(), &ns)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref e) if e.code == 403),
        "{err:?}"
    );
    let err = Api::<ConfigMap>::namespaced(as_sa, "default")
        .list(&ListParams::default())
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref e) if e.code == 403),
        "other namespaces are denied: {err:?}"
    );
}

#[tokio::test]
async fn a_lease_can_be_created() {
    let client = admin().await;
    let ns = namespace(&client, "lease").await;
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some("l".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let api = Api::<Lease>::namespaced(client, &ns);
    api.create(&PostParams::default(), &lease).await.unwrap();
    assert!(api.get_opt("l").await.unwrap().is_some());
}

#[tokio::test]
async fn moto_enforces_iam_policies() {
    let name = format!("smoke-{}", random(6));
    // No policy: refused.
    let (k, s) = iam_user_with_policy(&format!("{name}-none"), "/", None).await;
    let err = s3_with(&k, &s).list_buckets().send().await.unwrap_err();
    assert!(format!("{err:?}").contains("AccessDenied"), "{err:?}");
    // Unknown key: refused.
    assert!(
        s3_with("AKIAUNKNOWN", "nope")
            .list_buckets()
            .send()
            .await
            .is_err()
    );
    // A policy scoped to one bucket prefix: allowed there, refused elsewhere.
    let bucket = format!("{PREFIX}smoke-{}", random(6));
    let doc = json!({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": ["s3:CreateBucket", "s3:PutObject", "s3:GetObject"],
         "Resource": [format!("arn:aws:s3:::{bucket}"), format!("arn:aws:s3:::{bucket}/*")]}]});
    let (k, s) = iam_user_with_policy(&format!("{name}-scoped"), "/", Some(&doc)).await;
    let s3 = s3_with(&k, &s);
    s3.create_bucket()
        .bucket(&bucket)
        .send()
        .await
        .expect("allowed bucket");
    s3.put_object()
        .bucket(&bucket)
        .key("a")
        .body("hi".as_bytes().to_vec().into())
        .send()
        .await
        .expect("allowed put");
    let body = s3
        .get_object()
        .bucket(&bucket)
        .key("a")
        .send()
        .await
        .unwrap()
        .body
        .collect()
        .await
        .unwrap()
        .into_bytes();
    assert_eq!(&body[..], b"hi");
    let err = s3
        .create_bucket()
        .bucket(format!("other-{bucket}"))
        .send()
        .await
        .unwrap_err();
    assert!(format!("{err:?}").contains("AccessDenied"), "{err:?}");
    // IAM actions are checked against the user's real ARN, path included.
    let doc = json!({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": ["iam:CreateUser", "iam:GetUser"], "Resource": "arn:aws:iam::*:user/s3-operator/smoke/*"}]});
    let (k, s) = iam_user_with_policy(&format!("{name}-iam"), "/", Some(&doc)).await;
    let iam = iam_with(&k, &s);
    iam.create_user()
        .user_name(format!("{name}-in"))
        .path("/s3-operator/smoke/")
        .send()
        .await
        .expect("in path");
    assert!(
        iam.create_user()
            .user_name(format!("{name}-out"))
            .send()
            .await
            .is_err(),
        "outside the path is refused"
    );
}

#[tokio::test]
async fn buckets_and_iam_users_round_trip() {
    let s3 = admin_s3();
    let bucket = format!("{PREFIX}rt-{}", random(6));
    s3.create_bucket().bucket(&bucket).send().await.unwrap();
    assert!(bucket_exists(&bucket).await);
    s3.delete_bucket().bucket(&bucket).send().await.unwrap();
    assert!(!bucket_exists(&bucket).await);
    let iam = admin_iam();
    let user = format!("rt-{}", random(6));
    iam.create_user().user_name(&user).send().await.unwrap();
    assert!(iam.get_user().user_name(&user).send().await.is_ok());
    iam.delete_user().user_name(&user).send().await.unwrap();
    assert!(iam.get_user().user_name(&user).send().await.is_err());
}
