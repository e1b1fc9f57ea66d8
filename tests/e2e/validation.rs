//! Bad input is refused by the API server with a message naming the field and the rule.

use kube::api::{Api, Patch, PatchParams, PostParams};
use s3_operator::api::{Bucket, BucketAccess};
use serde_json::json;

use crate::support::*;

fn bka(name: &str, spec: serde_json::Value) -> serde_json::Value {
    json!({"apiVersion": "s3.operator.dev/v1alpha1", "kind": "BucketAccess", "metadata": {"name": name}, "spec": spec})
}

#[tokio::test]
async fn invalid_specs_are_refused_naming_field_and_rule() {
    install_crds().await;
    let client = admin().await;
    let ns = namespace(&client, "val").await;
    let buckets = Api::<Bucket>::namespaced(client.clone(), &ns);
    let accesses = Api::<BucketAccess>::namespaced(client.clone(), &ns);
    bucket_names_tags_encryption_lifecycle_and_versioning_are_checked(&buckets).await;
    bucket_policy_statements_are_checked(&buckets).await;
    object_ownership_must_be_enforced(&buckets).await;
    access_permission_credentials_and_rotation_are_checked(&accesses).await;
    access_prefix_is_checked(&accesses).await;
    bucket_name_and_region_are_immutable(&buckets).await;
    bucket_ref_is_immutable_and_permission_is_not(&accesses).await;
}

/// Bucket names, reserved tags, encryption, lifecycle rules and versioning.
async fn bucket_names_tags_encryption_lifecycle_and_versioning_are_checked(buckets: &Api<Bucket>) {
    for (name, want) in [
        ("Bad_Name", "spec.bucketName may contain only lowercase"),
        ("a..b", "two adjacent periods"),
        ("192.168.1.1", "IP address"),
        ("xn--abc", "reserved prefixes"),
        ("ab", "spec.bucketName"),
    ] {
        let msg = refused(buckets, raw_bucket("b", json!({"bucketName": name}))).await;
        assert!(msg.contains(want), "{name}: {msg}");
    }
    let msg = refused(
        buckets,
        raw_bucket("b", json!({"tags": {"s3.operator.dev/uid": "x"}})),
    )
    .await;
    assert!(
        msg.contains("spec.tags") && msg.contains("reserved"),
        "{msg}"
    );
    let msg = refused(
        buckets,
        raw_bucket(
            "b",
            json!({"encryption": {"algorithm": "AES256", "kmsKeyId": "k"}}),
        ),
    )
    .await;
    assert!(msg.contains("kmsKeyId"), "{msg}");
    let msg = refused(
        buckets,
        raw_bucket("b", json!({"lifecycleRules": [{"id": "x"}]})),
    )
    .await;
    assert!(msg.contains("at least one action"), "{msg}");
    let msg = refused(buckets, raw_bucket("b", json!({"versioning": "Off"}))).await;
    assert!(msg.contains("spec.versioning"), "{msg}");
}

/// Bucket policy statements: never public, principals, this bucket's ARN, S3 actions, the
/// operator's reserved and unique sids.
async fn bucket_policy_statements_are_checked(buckets: &Api<Bucket>) {
    let stmt = |over: serde_json::Value| {
        let mut s = json!({"effect": "Allow", "principal": {"aws": ["arn:aws:iam::123456789012:root"]},
                           "action": ["s3:GetObject"], "resource": ["arn:aws:s3:::s3op-x/*"]});
        for (k, v) in over.as_object().unwrap() {
            s[k] = v.clone();
        }
        raw_bucket("b", json!({"policy": [s]}))
    };
    for (over, want) in [
        (
            json!({"principal": {"aws": ["*"]}}),
            "would make the bucket public",
        ),
        (
            json!({"principal": {}}),
            "at least one aws or service principal",
        ),
        (
            json!({"resource": ["*"]}),
            "spec.policy[].resource must be this bucket's ARN",
        ),
        (
            json!({"action": ["iam:PassRole"]}),
            "spec.policy[].action must list S3 actions",
        ),
        (
            json!({"sid": "DenyInsecureTransport"}),
            "reserved for the operator's TLS-only statement",
        ),
        // An Allow naming the tenant's own user is not capped by its permissions boundary:
        // only object and listing actions, no wildcard, whatever the case.
        (
            json!({"action": ["s3:GetObject", "s3:PutBucketPolicy"]}),
            "spec.policy[0].action: Invalid value",
        ),
        (json!({"action": ["s3:*"]}), "of an Allow may list only"),
        (json!({"action": ["s3:Get*"]}), "of an Allow may list only"),
        (
            json!({"action": ["s3:DeleteBucket"]}),
            "of an Allow may list only",
        ),
        (
            json!({"action": ["s3:PutObjectRetention"]}),
            "of an Allow may list only",
        ),
        (
            json!({"action": ["s3:BYPASSGOVERNANCERETENTION"]}),
            "of an Allow may list only",
        ),
        (json!({"effect": "Maybe"}), "spec.policy[0].effect"),
    ] {
        let msg = refused(buckets, stmt(over.clone())).await;
        assert!(msg.contains(want), "{over}: {msg}");
    }
    let two = json!({"policy": [
        {"sid": "A", "effect": "Deny", "principal": {"aws": ["*"]}, "action": ["s3:*"], "resource": ["arn:aws:s3:::s3op-x"]},
        {"sid": "A", "effect": "Deny", "principal": {"aws": ["*"]}, "action": ["s3:*"], "resource": ["arn:aws:s3:::s3op-x"]},
    ]});
    assert!(
        refused(buckets, raw_bucket("b", two))
            .await
            .contains("spec.policy[].sid must be unique")
    );
}

/// Object ownership is BucketOwnerEnforced.
async fn object_ownership_must_be_enforced(buckets: &Api<Bucket>) {
    let msg = refused(
        buckets,
        raw_bucket("b", json!({"objectOwnership": "Public"})),
    )
    .await;
    assert!(
        msg.contains("spec.objectOwnership") && msg.contains("BucketOwnerEnforced"),
        "{msg}"
    );
}

/// BucketAccess permission, ServiceAccountRole credentials and rotation periods.
async fn access_permission_credentials_and_rotation_are_checked(accesses: &Api<BucketAccess>) {
    let msg = refused(
        accesses,
        bka(
            "a",
            json!({"bucketRef": {"name": "b"}, "permission": "Admin"}),
        ),
    )
    .await;
    assert!(msg.contains("spec.permission"), "{msg}");
    let msg = refused(accesses, bka("a", json!({"bucketRef": {"name": "b"}, "permission": "ReadOnly", "credentials": {"type": "ServiceAccountRole"}}))).await;
    assert!(msg.contains("serviceAccountName is required"), "{msg}");
    let msg = refused(accesses, bka("a", json!({"bucketRef": {"name": "b"}, "permission": "ReadOnly", "credentials": {"type": "PodIdentity"}}))).await;
    assert!(
        msg.contains(
            "serviceAccountName is required when type is ServiceAccountRole or PodIdentity"
        ),
        "{msg}"
    );
    let msg = refused(accesses, bka("a", json!({"bucketRef": {"name": "b"}, "permission": "ReadOnly", "credentials": {"serviceAccountName": "app"}}))).await;
    assert!(
        msg.contains(
            "serviceAccountName is only allowed when type is ServiceAccountRole or PodIdentity"
        ),
        "{msg}"
    );
    let rot = json!({"bucketRef": {"name": "b"}, "permission": "ReadOnly", "credentials": {"rotation": {"interval": "1h", "gracePeriod": "2h"}}});
    assert!(
        refused(accesses, bka("a", rot))
            .await
            .contains("gracePeriod must be shorter than interval")
    );
    let rot = json!({"bucketRef": {"name": "b"}, "permission": "ReadOnly", "credentials": {"rotation": {"interval": "1s", "gracePeriod": "0s"}}});
    assert!(
        refused(accesses, bka("a", rot))
            .await
            .contains("interval must be at least 10s")
    );
}

/// BucketAccess prefix: relative, no wildcard, no IAM policy variable.
async fn access_prefix_is_checked(accesses: &Api<BucketAccess>) {
    let msg = refused(
        accesses,
        bka(
            "a",
            json!({"bucketRef": {"name": "b"}, "permission": "ReadOnly", "prefix": "/abs*"}),
        ),
    )
    .await;
    assert!(msg.contains("spec.prefix"), "{msg}");
    // An IAM policy variable would let the grant's resource follow the caller: refused.
    for prefix in ["${aws:username}/", "team/${s3:prefix}"] {
        let msg = refused(
            accesses,
            bka(
                "a",
                json!({"bucketRef": {"name": "b"}, "permission": "ReadOnly", "prefix": prefix}),
            ),
        )
        .await;
        assert!(msg.contains("spec.prefix") && msg.contains("${"), "{msg}");
    }
}

/// Immutable fields: a Bucket's name and region.
async fn bucket_name_and_region_are_immutable(buckets: &Api<Bucket>) {
    let b: Bucket = serde_json::from_value(raw_bucket(
        "imm",
        json!({"bucketName": "s3op-immutable-test"}),
    ))
    .unwrap();
    buckets.create(&PostParams::default(), &b).await.unwrap();
    let err = buckets
        .patch(
            "imm",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"bucketName": "s3op-changed"}})),
        )
        .await
        .unwrap_err();
    assert!(
        format!("{err}").contains("spec.bucketName is immutable"),
        "{err}"
    );
    let err = buckets
        .patch(
            "imm",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"region": "eu-west-1"}})),
        )
        .await
        .unwrap_err();
    assert!(
        format!("{err}").contains("spec.region is immutable"),
        "{err}"
    );
    // COMPLIANCE, a one-way door, is chosen at creation: an edit to it is refused at apply time
    // instead of leaving a Bucket the operator would refuse (its deletion still works then).
    let governance = json!({"objectLock": {"defaultRetention": {"mode": "GOVERNANCE", "days": 1}}});
    let b: Bucket = serde_json::from_value(raw_bucket("lock", governance)).unwrap();
    buckets.create(&PostParams::default(), &b).await.unwrap();
    let to_compliance =
        json!({"spec": {"objectLock": {"defaultRetention": {"mode": "COMPLIANCE", "days": 1}}}});
    let err = buckets
        .patch(
            "lock",
            &PatchParams::default(),
            &Patch::Merge(to_compliance),
        )
        .await
        .unwrap_err();
    assert!(
        format!("{err}").contains("spec.objectLock.defaultRetention.mode COMPLIANCE can only be chosen when the Bucket is created"),
        "{err}"
    );
    let days =
        json!({"spec": {"objectLock": {"defaultRetention": {"mode": "GOVERNANCE", "days": 2}}}});
    buckets
        .patch("lock", &PatchParams::default(), &Patch::Merge(days))
        .await
        .expect("a GOVERNANCE period may change");
}

/// Immutable fields: a BucketAccess's bucketRef; mutable fields still change.
async fn bucket_ref_is_immutable_and_permission_is_not(accesses: &Api<BucketAccess>) {
    let a: BucketAccess = serde_json::from_value(bka(
        "imm",
        json!({"bucketRef": {"name": "imm"}, "permission": "ReadOnly"}),
    ))
    .unwrap();
    accesses.create(&PostParams::default(), &a).await.unwrap();
    let err = accesses
        .patch(
            "imm",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"bucketRef": {"name": "other"}}})),
        )
        .await
        .unwrap_err();
    assert!(
        format!("{err}").contains("spec.bucketRef is immutable"),
        "{err}"
    );
    // Mutable fields still change.
    accesses
        .patch(
            "imm",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"permission": "ReadWrite"}})),
        )
        .await
        .unwrap();
}

/// A ServiceAccount-bound access's `serviceAccountName` is a ServiceAccount name and stays with
/// it: a rename is refused (it would leave the first one's Pod Identity association behind),
/// and so is a name that is no ServiceAccount's, each naming the field and the rule.
#[tokio::test]
async fn service_account_names_are_checked_and_immutable() {
    install_crds().await;
    let client = admin().await;
    let ns = namespace(&client, "valsa").await;
    let accesses = Api::<BucketAccess>::namespaced(client.clone(), &ns);
    for kind in ["PodIdentity", "ServiceAccountRole"] {
        for bad in ["*", "App", "a_b", "-app", "app."] {
            let spec = json!({"bucketRef": {"name": "b"}, "permission": "ReadOnly",
                "credentials": {"type": kind, "serviceAccountName": bad}});
            let msg = refused(&accesses, bka("bad", spec)).await;
            assert!(
                msg.contains("spec.credentials.serviceAccountName must be a ServiceAccount name"),
                "{kind} {bad:?}: {msg}"
            );
        }
        let name = kind.to_lowercase();
        let spec = json!({"bucketRef": {"name": "b"}, "permission": "ReadOnly",
            "credentials": {"type": kind, "serviceAccountName": "app.v1-x"}});
        let a: BucketAccess = serde_json::from_value(bka(&name, spec)).unwrap();
        accesses.create(&PostParams::default(), &a).await.unwrap();
        let rename = json!({"spec": {"credentials": {"serviceAccountName": "other"}}});
        let err = accesses
            .patch(&name, &PatchParams::default(), &Patch::Merge(rename))
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("spec.credentials.serviceAccountName is immutable"),
            "{kind}: {err}"
        );
        // Other fields still change.
        let widen = json!({"spec": {"permission": "ReadWrite"}});
        accesses
            .patch(&name, &PatchParams::default(), &Patch::Merge(widen))
            .await
            .unwrap();
    }
}
