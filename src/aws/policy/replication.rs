//! The replication role of a Bucket (`spec.replication`): trusted by S3 for that one source
//! bucket, allowed to read exactly it and to write replicas to exactly its destinations.

use serde_json::{Value, json};

use super::{Scope, VERSION};

/// The service principal S3 replicates as.
pub const S3_SERVICE: &str = "s3.amazonaws.com";
/// The name of the role's one inline policy.
pub const REPLICATION_POLICY: &str = "replication";

/// What S3 reads from the source to replicate it.
pub const SOURCE_BUCKET_ACTIONS: &[&str] = &["s3:GetReplicationConfiguration", "s3:ListBucket"];
pub const SOURCE_OBJECT_ACTIONS: &[&str] = &[
    "s3:GetObjectVersionForReplication",
    "s3:GetObjectVersionAcl",
    "s3:GetObjectVersionTagging",
];
/// What S3 writes into a destination.
pub const REPLICA_ACTIONS: &[&str] = &[
    "s3:ReplicateObject",
    "s3:ReplicateDelete",
    "s3:ReplicateTags",
];

/// The role's trust: S3, only for replicating `source_arn` of `account` (the confused-deputy
/// conditions AWS recommends, so no other bucket's configuration can use the role).
pub fn replication_trust(account: &str, source_arn: &str) -> Value {
    json!({
        "Version": VERSION,
        "Statement": [{
            "Effect": "Allow",
            "Principal": {"Service": S3_SERVICE},
            "Action": "sts:AssumeRole",
            "Condition": {
                "StringEquals": {"aws:SourceAccount": account},
                "ArnLike": {"aws:SourceArn": source_arn},
            },
        }],
    })
}

/// One destination of the role: its bucket ARN, and the KMS key its replicas are encrypted
/// with (if any).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicaTarget {
    pub bucket_arn: String,
    pub kms_key: Option<String>,
}

/// The role's inline policy: read `source_arn` for replication, write replicas to `targets`
/// (sorted, deduplicated, so the document is steady), and with SSE-KMS replicas decrypt the
/// source's objects and encrypt with the replicas' keys, through S3 only.
pub fn replication_policy(
    source_arn: &str,
    source_region: &str,
    targets: &[ReplicaTarget],
) -> Value {
    let mut replicas: Vec<String> = targets
        .iter()
        .map(|t| format!("{}/*", t.bucket_arn))
        .collect();
    replicas.sort();
    replicas.dedup();
    let mut statements = vec![
        json!({
            "Sid": "ReadSource",
            "Effect": "Allow",
            "Action": SOURCE_BUCKET_ACTIONS,
            "Resource": source_arn,
        }),
        json!({
            "Sid": "ReadSourceObjects",
            "Effect": "Allow",
            "Action": SOURCE_OBJECT_ACTIONS,
            "Resource": format!("{source_arn}/*"),
        }),
        json!({
            "Sid": "WriteReplicas",
            "Effect": "Allow",
            "Action": REPLICA_ACTIONS,
            "Resource": replicas,
        }),
    ];
    let mut keys: Vec<&str> = targets
        .iter()
        .filter_map(|t| t.kms_key.as_deref())
        .collect();
    keys.sort();
    keys.dedup();
    if !keys.is_empty() {
        statements.push(json!({
            "Sid": "DecryptSource",
            "Effect": "Allow",
            "Action": ["kms:Decrypt"],
            "Resource": "*",
            "Condition": {"StringLike": {"kms:ViaService": format!("s3.{source_region}.amazonaws.com")}},
        }));
        statements.push(json!({
            "Sid": "EncryptReplicas",
            "Effect": "Allow",
            "Action": ["kms:Encrypt", "kms:GenerateDataKey"],
            "Resource": keys,
            "Condition": {"StringLike": {"kms:ViaService": "s3.*.amazonaws.com"}},
        }));
    }
    json!({"Version": VERSION, "Statement": statements})
}

/// The boundary's statements for replication roles: S3 reading the installation's buckets for
/// replication and writing replicas into them, in its account.
pub(super) fn boundary_statements(scope: &Scope) -> [Value; 2] {
    let p = &scope.partition;
    let buckets = format!("arn:{p}:s3:::{}*", scope.bucket_prefix);
    let mut objects = SOURCE_OBJECT_ACTIONS.to_vec();
    objects.extend(REPLICA_ACTIONS);
    [
        json!({
            "Sid": "ReplicationSources",
            "Effect": "Allow",
            "Action": ["s3:GetReplicationConfiguration"],
            "Resource": buckets,
            "Condition": scope.in_account(),
        }),
        json!({
            "Sid": "ReplicationObjects",
            "Effect": "Allow",
            "Action": objects,
            "Resource": format!("{buckets}/*"),
            "Condition": scope.in_account(),
        }),
    ]
}

/// `boundary` with replicas allowed into buckets of `accounts` (the operator's
/// `--allowed-replication-accounts`): only the replica writes, only in those accounts.
pub fn with_replication_accounts(mut boundary: Value, scope: &Scope, accounts: &[String]) -> Value {
    if accounts.is_empty() {
        return boundary;
    }
    let statement = json!({
        "Sid": "ReplicasToAllowedAccounts",
        "Effect": "Allow",
        "Action": REPLICA_ACTIONS,
        "Resource": format!("arn:{}:s3:::*/*", scope.partition),
        "Condition": {"StringEquals": {"aws:ResourceAccount": accounts}},
    });
    if let Some(list) = boundary["Statement"].as_array_mut() {
        list.push(statement);
    }
    boundary
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOURCE: &str = "arn:aws:s3:::s3op-c-ns-photos-1234abcd";

    fn target(name: &str, key: Option<&str>) -> ReplicaTarget {
        ReplicaTarget {
            bucket_arn: format!("arn:aws:s3:::{name}"),
            kms_key: key.map(str::to_string),
        }
    }

    /// S3 alone may assume the role, and only for this bucket of this account.
    #[test]
    fn the_trust_admits_s3_for_this_bucket_only() {
        let t = replication_trust("123456789012", SOURCE);
        let s = &t["Statement"][0];
        assert_eq!(s["Principal"], json!({"Service": "s3.amazonaws.com"}));
        assert_eq!(s["Action"], "sts:AssumeRole");
        assert_eq!(s["Condition"]["ArnLike"]["aws:SourceArn"], SOURCE);
        assert_eq!(
            s["Condition"]["StringEquals"]["aws:SourceAccount"],
            "123456789012"
        );
        assert_eq!(t["Statement"].as_array().unwrap().len(), 1);
    }

    /// Reads on the source, replica writes on exactly the destinations' objects, nothing
    /// else: no bucket configuration, no plain PutObject or DeleteObject, no wildcard.
    #[test]
    fn the_policy_names_exactly_the_source_and_the_destinations() {
        let doc = replication_policy(
            SOURCE,
            "us-east-1",
            &[target("b", None), target("a", None), target("b", None)],
        );
        let statements = doc["Statement"].as_array().unwrap();
        assert_eq!(statements.len(), 3);
        assert_eq!(statements[0]["Resource"], SOURCE);
        assert_eq!(statements[1]["Resource"], format!("{SOURCE}/*"));
        assert_eq!(
            statements[2]["Resource"],
            json!(["arn:aws:s3:::a/*", "arn:aws:s3:::b/*"])
        );
        for s in statements {
            for a in s["Action"].as_array().unwrap() {
                let a = a.as_str().unwrap();
                assert!(!a.contains('*'), "{a}");
                assert!(
                    !["s3:PutObject", "s3:DeleteObject", "s3:PutBucketPolicy"].contains(&a),
                    "{a}"
                );
            }
        }
    }

    #[test]
    fn kms_replicas_add_decrypt_through_s3_and_encrypt_with_their_keys_only() {
        let key = "arn:aws:kms:eu-west-1:123456789012:key/k";
        let doc = replication_policy(SOURCE, "us-east-1", &[target("a", Some(key))]);
        let statements = doc["Statement"].as_array().unwrap();
        assert_eq!(statements.len(), 5);
        assert_eq!(
            statements[3]["Condition"]["StringLike"]["kms:ViaService"],
            "s3.us-east-1.amazonaws.com"
        );
        assert_eq!(statements[4]["Resource"], json!([key]));
    }

    #[test]
    fn other_accounts_are_reached_only_when_listed_and_only_for_replicas() {
        let scope = Scope {
            partition: "aws".into(),
            account: "123456789012".into(),
            bucket_prefix: "s3op-c-".into(),
            iam_path: "/s3-operator/c/".into(),
        };
        let doc = json!({"Statement": []});
        assert_eq!(with_replication_accounts(doc.clone(), &scope, &[]), doc);
        let doc = with_replication_accounts(doc, &scope, &["210987654321".into()]);
        let s = &doc["Statement"][0];
        assert_eq!(s["Action"], json!(REPLICA_ACTIONS));
        assert_eq!(
            s["Condition"]["StringEquals"]["aws:ResourceAccount"],
            json!(["210987654321"])
        );
    }
}
