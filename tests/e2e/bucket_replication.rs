//! spec.replication end to end: the configuration S3 holds, the replication role the operator
//! owns (its trust, boundary, tags and exact policy), drift put back, refusals that write
//! nothing, a destination that goes withdrawing the grant, and cleanup with the Bucket. The
//! emulator stores and checks the configuration as S3 does but copies no object (README).

use std::time::Duration;

use aws_sdk_s3::types::{ReplicationConfiguration, ReplicationRule};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use s3_operator::api::Bucket;
use serde_json::{Value, json};

use crate::support::*;

const T: Duration = Duration::from_secs(60);

/// The replication configuration S3 holds for `bucket` (`None`: none).
async fn replication(bucket: &str) -> Option<ReplicationConfiguration> {
    match admin_s3()
        .get_bucket_replication()
        .bucket(bucket)
        .send()
        .await
    {
        Ok(out) => out.replication_configuration,
        Err(e) => {
            let code = e.into_service_error();
            assert_eq!(
                aws_sdk_s3::error::ProvideErrorMetadata::code(&code),
                Some("ReplicationConfigurationNotFoundError"),
                "{code:?}"
            );
            None
        }
    }
}

/// The role's name from its ARN.
fn role_name(arn: &str) -> String {
    arn.rsplit('/').next().unwrap().to_string()
}

/// The role (trust policy, boundary, tags) and its inline `replication` policy; `None`: no role.
async fn role(name: &str) -> Option<(Value, String, Vec<(String, String)>, Option<Value>)> {
    let iam = admin_iam();
    let r = match iam.get_role().role_name(name).send().await {
        Ok(out) => out.role.unwrap(),
        Err(e) => {
            let e = e.into_service_error();
            assert!(e.is_no_such_entity_exception(), "{e:?}");
            return None;
        }
    };
    let decode = |d: &str| -> Value {
        s3_operator::aws::policy::decode_document(d).expect("a policy document")
    };
    let trust = decode(r.assume_role_policy_document.as_deref().unwrap());
    let boundary = r
        .permissions_boundary
        .and_then(|b| b.permissions_boundary_arn);
    let tags = iam
        .list_role_tags()
        .role_name(name)
        .send()
        .await
        .unwrap()
        .tags;
    let tags = tags.into_iter().map(|t| (t.key, t.value)).collect();
    let policy = iam
        .get_role_policy()
        .role_name(name)
        .policy_name("replication")
        .send()
        .await
        .ok()
        .map(|p| decode(&p.policy_document));
    Some((trust, boundary.unwrap_or_default(), tags, policy))
}

/// Waits until `name`'s Ready condition has `reason` and a message containing `says`.
async fn wait_message(api: &Api<Bucket>, name: &str, reason: &str, says: &str) -> String {
    wait_for(&format!("{name} to report {reason}: {says}"), T, || async {
        let status = api.get(name).await.ok()?.status?;
        let ready = status.conditions.into_iter().find(|c| c.type_ == "Ready")?;
        (ready.reason == reason && ready.message.contains(says)).then_some(ready.message)
    })
    .await
}

fn rule_to(name: &str) -> Value {
    json!({"id": "to-dr", "priority": 1, "prefix": "docs/", "deleteMarkerReplication": true,
           "storageClass": "STANDARD_IA", "destination": {"bucketRef": {"name": name}}})
}

fn replicating(to: &str) -> Value {
    json!({"versioning": "Enabled", "deletionPolicy": "Delete",
           "replication": {"rules": [rule_to(to)]}})
}

fn rule_of(c: &ReplicationConfiguration) -> &ReplicationRule {
    assert_eq!(c.rules.len(), 1, "{c:?}");
    &c.rules[0]
}

/// A Bucket replicates into another of its namespace: S3 holds the rule as the spec says, with
/// a role of the operator's (path, boundary, ownership tags) trusted by S3 for this bucket
/// only and allowed exactly the two buckets; steady state writes nothing; drift on the
/// configuration and on the role's policy is put back; `rules: []` removes both.
#[tokio::test]
async fn replication_to_a_bucket_of_the_namespace_with_a_role_scoped_to_the_two() {
    let (op, api, ns) = Operator::in_new_namespace("repl").await;
    let pp = PostParams::default();
    let dr_spec = json!({"versioning": "Enabled", "deletionPolicy": "Delete"});
    api.create(&pp, &bucket("dr", dr_spec)).await.unwrap();
    api.create(&pp, &bucket("photos", replicating("dr")))
        .await
        .unwrap();
    let dr = wait_ready(&api, "dr").await;
    let photos = wait_ready(&api, "photos").await;
    let status = api.get("photos").await.unwrap().status.unwrap();
    let role_arn = status.replication_role.expect("status names the role");
    let name = role_name(&role_arn);
    assert!(
        role_arn.starts_with(&format!(
            "arn:aws:iam::{ACCOUNT}:role/s3-operator/{}/",
            op.cluster
        )),
        "{role_arn}"
    );

    // The configuration, as S3 holds it.
    let config = replication(&photos).await.expect("a configuration");
    assert_eq!(config.role, role_arn);
    let rule = rule_of(&config);
    assert_eq!(rule.id.as_deref(), Some("to-dr"));
    assert_eq!(rule.priority, Some(1));
    let filter = rule.filter.as_ref().expect("a V2 filter");
    assert_eq!(filter.prefix.as_deref(), Some("docs/"));
    let markers = rule.delete_marker_replication.as_ref().unwrap();
    assert_eq!(markers.status.as_ref().unwrap().as_str(), "Enabled");
    let dest = rule.destination.as_ref().unwrap();
    assert_eq!(dest.bucket, format!("arn:aws:s3:::{dr}"));
    assert_eq!(dest.storage_class.as_ref().unwrap().as_str(), "STANDARD_IA");

    // The role: the installation's boundary and the Bucket's ownership tags.
    let (trust, boundary, tags, policy) = role(&name).await.expect("the role");
    assert_eq!(
        boundary,
        format!(
            "arn:aws:iam::{ACCOUNT}:policy/s3-operator/{}/s3-operator-boundary",
            op.cluster
        )
    );
    let uid = api.get("photos").await.unwrap().metadata.uid.unwrap();
    assert!(
        tags.contains(&("s3.operator.dev/uid".into(), uid.clone())),
        "{tags:?}"
    );
    assert!(tags.contains(&("s3.operator.dev/namespace".into(), ns.clone())));
    // Trusted by S3, for this bucket of this account only.
    let t = &trust["Statement"][0];
    assert_eq!(t["Principal"]["Service"], "s3.amazonaws.com");
    assert_eq!(
        t["Condition"]["ArnLike"]["aws:SourceArn"],
        format!("arn:aws:s3:::{photos}")
    );
    assert_eq!(t["Condition"]["StringEquals"]["aws:SourceAccount"], ACCOUNT);
    assert_eq!(trust["Statement"].as_array().unwrap().len(), 1);
    // Exactly the two buckets.
    let policy = policy.expect("the role's policy");
    let expected = json!([
        {"Sid": "ReadSource", "Effect": "Allow",
         "Action": ["s3:GetReplicationConfiguration", "s3:ListBucket"],
         "Resource": format!("arn:aws:s3:::{photos}")},
        {"Sid": "ReadSourceObjects", "Effect": "Allow",
         "Action": ["s3:GetObjectVersionForReplication", "s3:GetObjectVersionAcl",
                    "s3:GetObjectVersionTagging"],
         "Resource": format!("arn:aws:s3:::{photos}/*")},
        {"Sid": "WriteReplicas", "Effect": "Allow",
         "Action": ["s3:ReplicateObject", "s3:ReplicateDelete", "s3:ReplicateTags"],
         "Resource": [format!("arn:aws:s3:::{dr}/*")]},
    ]);
    assert_eq!(policy["Statement"], expected);

    // Steady state: two resync passes of the source, nothing written.
    let sent = op.sent().await;
    let gets = op.aws_calls("GetBucketReplication").await;
    wait_for("two resync passes", T, || async {
        (op.aws_calls("GetBucketReplication").await >= gets + 2.0).then_some(())
    })
    .await;
    assert_eq!(
        sent.writes().await,
        Vec::<String>::new(),
        "steady state wrote"
    );
    assert_eq!(
        sent.aws_writes().await,
        Vec::<String>::new(),
        "steady state wrote"
    );

    // Drift: the configuration removed, then the role's policy widened, outside the operator.
    admin_s3()
        .delete_bucket_replication()
        .bucket(&photos)
        .send()
        .await
        .unwrap();
    wait_for("the configuration restored", T, || async {
        replication(&photos).await.map(|_| ())
    })
    .await;
    assert!(op.drift_corrections("replication").await >= 1.0);
    let wide = json!({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": "s3:ReplicateObject", "Resource": "arn:aws:s3:::*/*"}]});
    admin_iam()
        .put_role_policy()
        .role_name(&name)
        .policy_name("replication")
        .policy_document(wide.to_string())
        .send()
        .await
        .unwrap();
    wait_for("the role's policy restored", T, || async {
        let p = role(&name).await?.3?;
        (p["Statement"] == expected).then_some(())
    })
    .await;

    // Off: the configuration and the role go; Ready again.
    let off = json!({"spec": {"replication": {"rules": []}}});
    api.patch("photos", &PatchParams::default(), &Patch::Merge(&off))
        .await
        .unwrap();
    wait_for("replication off and the role deleted", T, || async {
        let gone = replication(&photos).await.is_none() && role(&name).await.is_none();
        gone.then_some(())
    })
    .await;
    wait_reason(&api, "photos", "Available", T).await;
    assert_eq!(
        api.get("photos")
            .await
            .unwrap()
            .status
            .unwrap()
            .replication_role,
        None
    );
}

/// What cannot be served is refused naming the field and the rule, and no role is made: the
/// schema's rules, a source without versioning, a destination missing, of another namespace
/// (a name only), unversioned, or by ARN without the operator's flag or in its own account.
#[tokio::test]
async fn replication_refusals_name_the_field_and_make_no_role() {
    let (op, api, ns) = Operator::in_new_namespace("replref").await;
    let client = admin().await;
    let other = namespace(&client, "replother").await;
    let pp = PostParams::default();
    // The schema.
    let msg = refused(
        &api,
        raw_bucket(
            "b",
            json!({"versioning": "Suspended", "replication": {"rules": [rule_to("x")]}}),
        ),
    )
    .await;
    assert!(
        msg.contains("spec.versioning must not be Suspended"),
        "{msg}"
    );
    let both = json!({"id": "r", "priority": 1, "destination": {"bucketRef": {"name": "x"},
        "bucketArn": "arn:aws:s3:::x-y", "account": "210987654321"}});
    let msg = refused(
        &api,
        raw_bucket("b", json!({"replication": {"rules": [both]}})),
    )
    .await;
    assert!(
        msg.contains("exactly one of bucketRef or bucketArn"),
        "{msg}"
    );
    let no_account = json!({"id": "r", "priority": 1,
        "destination": {"bucketArn": "arn:aws:s3:::x-y"}});
    let msg = refused(
        &api,
        raw_bucket("b", json!({"replication": {"rules": [no_account]}})),
    )
    .await;
    assert!(msg.contains("account is required with bucketArn"), "{msg}");
    let twice = json!({"replication": {"rules": [rule_to("x"), rule_to("y")]}});
    let msg = refused(&api, raw_bucket("b", twice)).await;
    assert!(msg.contains("rules[].id must be unique"), "{msg}");
    let mut tagged = rule_to("x");
    tagged["tags"] = json!({"team": "a"});
    let msg = refused(
        &api,
        raw_bucket("b", json!({"replication": {"rules": [tagged]}})),
    )
    .await;
    assert!(
        msg.contains("deleteMarkerReplication cannot be true with tags"),
        "{msg}"
    );

    // The operator's refusals.
    Api::<Bucket>::namespaced(client.clone(), &other)
        .create(&pp, &bucket("theirs", json!({"versioning": "Enabled"})))
        .await
        .unwrap();
    api.create(&pp, &bucket("plain", json!({}))).await.unwrap();
    let arn_rule = |account: &str| {
        json!({"versioning": "Enabled", "replication": {"rules": [{"id": "out", "priority": 1,
            "destination": {"bucketArn": "arn:aws:s3:::partner-dr", "account": account}}]}})
    };
    let mut unversioned = replicating("dr");
    unversioned.as_object_mut().unwrap().remove("versioning");
    let cases = [
        (
            "unversioned",
            unversioned,
            "InvalidSpec",
            "spec.versioning: Enabled",
        ),
        (
            "lost",
            replicating("nowhere"),
            "BucketNotFound",
            "does not exist",
        ),
        (
            "spy",
            replicating("theirs"),
            "BucketNotFound",
            "does not exist",
        ),
        ("selfish", replicating("selfish"), "InvalidSpec", "itself"),
        (
            "flat",
            replicating("plain"),
            "BucketNotReady",
            "versioning Enabled",
        ),
        (
            "abroad",
            arn_rule("210987654321"),
            "InvalidSpec",
            "--allowed-replication-accounts",
        ),
        ("home", arn_rule(ACCOUNT), "InvalidSpec", "own account"),
    ];
    for (name, spec, _, _) in &cases {
        api.create(&pp, &bucket(name, spec.clone())).await.unwrap();
    }
    wait_ready(&api, "plain").await;
    // Each waits for its own message: `flat` reports `plain` not Ready (the same reason) until
    // plain's pass wakes it.
    for (name, _, reason, says) in &cases {
        let msg = wait_message(&api, name, reason, says).await;
        assert!(msg.contains("spec.replication"), "{name}: {msg}");
    }
    assert_eq!(op.aws_calls("CreateRole").await, 0.0, "no role was made");
    assert_eq!(op.aws_calls("PutBucketReplication").await, 0.0);
    let _ = ns;
}

/// A destination deleted withdraws the role's grant within seconds (its Bucket is woken by the
/// deletion, not the resync) and the source says why; made again, the grant is back. Deleting
/// the source deletes its role; a retained source loses its configuration with its ownership.
#[tokio::test]
async fn a_destination_gone_withdraws_the_grant_and_the_role_goes_with_the_bucket() {
    let client = admin().await;
    let ns = namespace(&client, "replgone").await;
    let _op = Operator::start(OperatorOpts {
        namespaces: vec![ns.clone()],
        resync: "300s",
        ..Default::default()
    })
    .await;
    let api = Api::<Bucket>::namespaced(client.clone(), &ns);
    let pp = PostParams::default();
    let dr_spec = json!({"versioning": "Enabled", "deletionPolicy": "Delete"});
    api.create(&pp, &bucket("dr", dr_spec.clone()))
        .await
        .unwrap();
    let mut kept = replicating("dr");
    kept["deletionPolicy"] = json!("Retain");
    api.create(&pp, &bucket("photos", kept)).await.unwrap();
    wait_ready(&api, "dr").await;
    let photos = wait_ready(&api, "photos").await;
    let arn = api
        .get("photos")
        .await
        .unwrap()
        .status
        .unwrap()
        .replication_role;
    let name = role_name(&arn.expect("a role"));
    assert!(role(&name).await.unwrap().3.is_some());

    api.delete("dr", &DeleteParams::default()).await.unwrap();
    let msg = wait_reason(&api, "photos", "BucketNotFound", T).await;
    assert!(
        msg.contains("spec.replication.rules[0].destination.bucketRef"),
        "{msg}"
    );
    wait_for("the grant withdrawn", T, || async {
        role(&name).await?.3.is_none().then_some(())
    })
    .await;
    assert!(
        !events_with(&ns, "ReplicationWithdrawn").await.is_empty(),
        "the withdrawal is reported"
    );

    // Made again (a new bucket: a new UID): served again.
    wait_for("dr gone", T, || async {
        api.get_opt("dr").await.unwrap().is_none().then_some(())
    })
    .await;
    api.create(&pp, &bucket("dr", dr_spec)).await.unwrap();
    let dr = wait_ready(&api, "dr").await;
    wait_ready(&api, "photos").await;
    let policy = role(&name).await.unwrap().3.expect("the grant back");
    assert_eq!(
        policy["Statement"][2]["Resource"],
        json!([format!("arn:aws:s3:::{dr}/*")])
    );
    let config = replication(&photos).await.unwrap();
    assert_eq!(
        rule_of(&config).destination.as_ref().unwrap().bucket,
        format!("arn:aws:s3:::{dr}")
    );

    // The source deleted (Retain): its configuration and its role go, the bucket stays.
    api.delete("photos", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("photos gone", T, || async {
        api.get_opt("photos").await.unwrap().is_none().then_some(())
    })
    .await;
    assert!(bucket_exists(&photos).await, "retained");
    assert!(
        replication(&photos).await.is_none(),
        "no configuration left"
    );
    assert!(role(&name).await.is_none(), "no role left");
}
