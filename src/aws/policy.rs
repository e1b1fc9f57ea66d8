//! IAM policy documents: the least-privilege grants for applications, the IRSA trust policy, and
//! the operator's own policy (shipped in `config/iam/` and used verbatim by the tests).

use serde_json::{Value, json};

use crate::api::Permission;

const VERSION: &str = "2012-10-17";

/// The inline policy granting `permission` on `bucket` (and only keys under `prefix`).
pub fn access_policy(
    partition: &str,
    bucket: &str,
    permission: Permission,
    prefix: Option<&str>,
) -> Value {
    let bucket_arn = format!("arn:{partition}:s3:::{bucket}");
    let objects_arn = format!("{bucket_arn}/{}*", prefix.unwrap_or(""));
    let object_actions: &[&str] = match permission {
        Permission::ReadOnly => &["s3:GetObject", "s3:GetObjectVersion", "s3:GetObjectTagging"],
        Permission::ReadWrite => &[
            "s3:GetObject",
            "s3:GetObjectVersion",
            "s3:GetObjectTagging",
            "s3:PutObject",
            "s3:PutObjectTagging",
            "s3:DeleteObject",
            "s3:DeleteObjectVersion",
            "s3:AbortMultipartUpload",
            "s3:ListMultipartUploadParts",
        ],
        Permission::WriteOnly => &[
            "s3:PutObject",
            "s3:AbortMultipartUpload",
            "s3:ListMultipartUploadParts",
        ],
    };
    let mut statements = vec![json!({
        "Sid": "Objects",
        "Effect": "Allow",
        "Action": object_actions,
        "Resource": objects_arn,
    })];
    let bucket_actions: &[&str] = match permission {
        Permission::ReadOnly => &["s3:ListBucket", "s3:GetBucketLocation"],
        Permission::ReadWrite => &[
            "s3:ListBucket",
            "s3:GetBucketLocation",
            "s3:ListBucketMultipartUploads",
        ],
        Permission::WriteOnly => &["s3:GetBucketLocation"],
    };
    let mut bucket_statement = json!({
        "Sid": "Bucket",
        "Effect": "Allow",
        "Action": bucket_actions,
        "Resource": bucket_arn,
    });
    if let Some(prefix) = prefix {
        // Listing is limited to the prefix too; GetBucketLocation is harmless without it.
        bucket_statement["Action"] = json!(["s3:ListBucket"]);
        bucket_statement["Condition"] =
            json!({"StringLike": {"s3:prefix": [format!("{prefix}*")]}});
        statements.push(json!({
            "Sid": "Location",
            "Effect": "Allow",
            "Action": ["s3:GetBucketLocation"],
            "Resource": bucket_arn,
        }));
        if permission == Permission::WriteOnly {
            statements.pop();
            bucket_statement["Action"] = json!(["s3:GetBucketLocation"]);
            bucket_statement
                .as_object_mut()
                .unwrap()
                .remove("Condition");
        }
    }
    statements.insert(0, bucket_statement);
    json!({"Version": VERSION, "Statement": statements})
}

/// Trust policy letting one Kubernetes ServiceAccount assume a role through the cluster's OIDC
/// provider (IRSA).
pub fn irsa_trust_policy(oidc_provider_arn: &str, namespace: &str, service_account: &str) -> Value {
    // The provider ARN ends in the issuer host and path, which prefixes the condition keys.
    let issuer = oidc_provider_arn
        .split_once(":oidc-provider/")
        .map(|(_, i)| i)
        .unwrap_or(oidc_provider_arn);
    json!({
        "Version": VERSION,
        "Statement": [{
            "Effect": "Allow",
            "Principal": {"Federated": oidc_provider_arn},
            "Action": "sts:AssumeRoleWithWebIdentity",
            "Condition": {"StringEquals": {
                format!("{issuer}:sub"): format!("system:serviceaccount:{namespace}:{service_account}"),
                format!("{issuer}:aud"): "sts.amazonaws.com",
            }},
        }],
    })
}

/// The operator's own policy: everything it calls, scoped to its bucket-name prefix and IAM path.
pub fn operator_policy(partition: &str, bucket_prefix: &str, iam_path: &str) -> Value {
    let buckets = format!("arn:{partition}:s3:::{bucket_prefix}*");
    let objects = format!("arn:{partition}:s3:::{bucket_prefix}*/*");
    let users = format!("arn:{partition}:iam::*:user{iam_path}*");
    let roles = format!("arn:{partition}:iam::*:role{iam_path}*");
    json!({
        "Version": VERSION,
        "Statement": [
            {
                "Sid": "ManageBuckets",
                "Effect": "Allow",
                "Action": [
                    "s3:CreateBucket", "s3:DeleteBucket", "s3:ListBucket", "s3:ListBucketVersions",
                    "s3:GetBucketLocation", "s3:GetBucketTagging", "s3:PutBucketTagging",
                    "s3:GetBucketVersioning", "s3:PutBucketVersioning",
                    "s3:GetEncryptionConfiguration", "s3:PutEncryptionConfiguration",
                    "s3:GetBucketPublicAccessBlock", "s3:PutBucketPublicAccessBlock",
                    "s3:GetLifecycleConfiguration", "s3:PutLifecycleConfiguration",
                    "s3:GetBucketCORS", "s3:PutBucketCORS",
                ],
                "Resource": buckets,
            },
            {
                "Sid": "EmptyBucketsOnForceDelete",
                "Effect": "Allow",
                "Action": ["s3:DeleteObject", "s3:DeleteObjectVersion"],
                "Resource": objects,
            },
            {
                "Sid": "ManageAppUsers",
                "Effect": "Allow",
                "Action": [
                    "iam:CreateUser", "iam:GetUser", "iam:DeleteUser", "iam:TagUser", "iam:UntagUser",
                    "iam:PutUserPolicy", "iam:GetUserPolicy", "iam:DeleteUserPolicy", "iam:ListUserPolicies",
                    "iam:CreateAccessKey", "iam:DeleteAccessKey", "iam:ListAccessKeys",
                ],
                "Resource": users,
            },
            {
                "Sid": "ManageAppRoles",
                "Effect": "Allow",
                "Action": [
                    "iam:CreateRole", "iam:GetRole", "iam:DeleteRole", "iam:TagRole", "iam:UntagRole",
                    "iam:UpdateAssumeRolePolicy",
                    "iam:PutRolePolicy", "iam:GetRolePolicy", "iam:DeleteRolePolicy", "iam:ListRolePolicies",
                ],
                "Resource": roles,
            },
        ],
    })
}

/// Policy documents as IAM returns them are URL-encoded JSON; compare them as JSON values so
/// formatting and key order never cause a spurious write.
pub fn decode_document(encoded: &str) -> Option<Value> {
    let decoded = percent_encoding::percent_decode_str(encoded)
        .decode_utf8()
        .ok()?;
    serde_json::from_str(&decoded)
        .or_else(|_| serde_json::from_str(encoded))
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn actions(doc: &Value) -> Vec<String> {
        doc["Statement"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|s| {
                s["Action"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|a| a.as_str().unwrap().to_string())
            })
            .collect()
    }

    #[test]
    fn read_only_grants_no_writes() {
        let doc = access_policy("aws", "b", Permission::ReadOnly, None);
        let a = actions(&doc);
        assert!(a.contains(&"s3:GetObject".into()) && a.contains(&"s3:ListBucket".into()));
        assert!(
            !a.iter()
                .any(|x| x.starts_with("s3:Put") || x.starts_with("s3:Delete"))
        );
        assert_eq!(doc["Statement"][1]["Resource"], "arn:aws:s3:::b/*");
    }

    #[test]
    fn write_only_cannot_read_or_list() {
        let a = actions(&access_policy(
            "aws",
            "b",
            Permission::WriteOnly,
            Some("in/"),
        ));
        assert!(a.contains(&"s3:PutObject".into()));
        assert!(
            !a.iter()
                .any(|x| x == "s3:GetObject" || x == "s3:ListBucket")
        );
    }

    #[test]
    fn prefix_scopes_objects_and_listing() {
        let doc = access_policy("aws", "b", Permission::ReadWrite, Some("team/"));
        let s = doc["Statement"].as_array().unwrap();
        assert_eq!(s[0]["Condition"]["StringLike"]["s3:prefix"][0], "team/*");
        assert!(s.iter().any(|st| st["Resource"] == "arn:aws:s3:::b/team/*"));
        assert!(!s.iter().any(|st| st["Resource"] == "arn:aws:s3:::b/*"));
    }

    #[test]
    fn trust_policy_names_exactly_one_service_account() {
        let arn = "arn:aws:iam::123456789012:oidc-provider/oidc.example.com/id/ABC";
        let doc = irsa_trust_policy(arn, "team", "app");
        let cond = &doc["Statement"][0]["Condition"]["StringEquals"];
        assert_eq!(
            cond["oidc.example.com/id/ABC:sub"],
            "system:serviceaccount:team:app"
        );
        assert_eq!(cond["oidc.example.com/id/ABC:aud"], "sts.amazonaws.com");
        assert_eq!(doc["Statement"][0]["Principal"]["Federated"], arn);
    }

    /// The shipped policy is exactly what `s3-operator iam-policy` prints for the defaults.
    #[test]
    fn shipped_operator_policy_matches_the_source() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/config/iam/operator-policy.json"
        );
        let shipped: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        assert!(
            shipped == operator_policy("aws", "s3op-", "/s3-operator/default/"),
            "config/iam/operator-policy.json is stale: run `cargo run -- iam-policy > config/iam/operator-policy.json`"
        );
    }

    #[test]
    fn operator_policy_is_scoped() {
        let doc = operator_policy("aws", "s3op-", "/s3-operator/prod/");
        for s in doc["Statement"].as_array().unwrap() {
            let r = s["Resource"].as_str().unwrap();
            assert!(
                r.contains("s3op-") || r.contains("/s3-operator/prod/"),
                "{r}"
            );
        }
    }

    #[test]
    fn documents_compare_after_url_decoding() {
        let v = json!({"a": [1, 2]});
        let enc: String = percent_encoding::utf8_percent_encode(
            &v.to_string(),
            percent_encoding::NON_ALPHANUMERIC,
        )
        .to_string();
        assert_eq!(decode_document(&enc), Some(v.clone()));
        assert_eq!(decode_document(&v.to_string()), Some(v));
    }
}
