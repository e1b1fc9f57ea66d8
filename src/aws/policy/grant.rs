//! What an application identity may do: the grant of a BucketAccess and the IRSA trust policy.

use serde_json::{Value, json};

use super::VERSION;
use crate::api::Permission;

/// A prefix goes into the grant's ARNs and conditions verbatim, so anything IAM would expand
/// there (policy variables such as `${aws:username}`, the wildcards `*` and `?`) could widen the
/// grant: refused. The CRD refuses the same; this guards objects stored before that rule.
pub fn check_prefix(prefix: &str) -> Result<(), String> {
    if prefix.contains("${") || prefix.contains('*') || prefix.contains('?') {
        return Err(format!(
            "spec.prefix {prefix:?} must not contain '*', '?' or '${{': IAM would expand them and widen the grant"
        ));
    }
    if prefix.is_empty() || prefix.starts_with('/') {
        return Err(format!(
            "spec.prefix {prefix:?} must be non-empty and must not start with '/'"
        ));
    }
    Ok(())
}

/// The object and bucket actions of `permission`.
fn actions(permission: Permission) -> (&'static [&'static str], &'static [&'static str]) {
    match permission {
        Permission::ReadOnly => (
            &["s3:GetObject", "s3:GetObjectVersion", "s3:GetObjectTagging"],
            &["s3:ListBucket", "s3:GetBucketLocation"],
        ),
        Permission::ReadWrite => (
            &[
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
            &[
                "s3:ListBucket",
                "s3:GetBucketLocation",
                "s3:ListBucketMultipartUploads",
            ],
        ),
        Permission::WriteOnly => (
            &[
                "s3:PutObject",
                "s3:AbortMultipartUpload",
                "s3:ListMultipartUploadParts",
            ],
            &["s3:GetBucketLocation"],
        ),
    }
}

/// The inline policy granting `permission` on `bucket` (and only keys under `prefix`).
pub fn access_policy(
    partition: &str,
    bucket: &str,
    permission: Permission,
    prefix: Option<&str>,
) -> Value {
    let bucket_arn = format!("arn:{partition}:s3:::{bucket}");
    let objects_arn = format!("{bucket_arn}/{}*", prefix.unwrap_or(""));
    let (object_actions, bucket_actions) = actions(permission);
    let mut statements = vec![json!({
        "Sid": "Objects",
        "Effect": "Allow",
        "Action": object_actions,
        "Resource": objects_arn,
    })];
    let mut bucket_statement = json!({
        "Sid": "Bucket",
        "Effect": "Allow",
        "Action": bucket_actions,
        "Resource": bucket_arn,
    });
    // WriteOnly lists nothing, so only the listing of the others needs the prefix too;
    // GetBucketLocation is harmless without it.
    if let Some(prefix) = prefix.filter(|_| permission != Permission::WriteOnly) {
        bucket_statement["Action"] = json!(["s3:ListBucket"]);
        bucket_statement["Condition"] =
            json!({"StringLike": {"s3:prefix": [format!("{prefix}*")]}});
        statements.push(json!({
            "Sid": "Location",
            "Effect": "Allow",
            "Action": ["s3:GetBucketLocation"],
            "Resource": bucket_arn,
        }));
    }
    statements.insert(0, bucket_statement);
    json!({"Version": VERSION, "Statement": statements})
}

/// One bucket's part of an access's grant.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Grant<'a> {
    pub bucket: &'a str,
    pub permission: Permission,
    pub prefix: Option<&'a str>,
}

/// The inline policy granting each of `grants`. The first keeps the statement ids of a
/// one-bucket grant, so an access that names no other Bucket keeps the policy it had; the
/// others' ids end in their position.
pub fn access_policy_of(partition: &str, grants: &[Grant<'_>]) -> Value {
    let mut statements = Vec::new();
    for (i, g) in grants.iter().enumerate() {
        let mut one = access_policy(partition, g.bucket, g.permission, g.prefix);
        let Some(all) = one["Statement"].as_array_mut() else {
            continue;
        };
        for mut statement in all.drain(..) {
            if i > 0
                && let Some(sid) = statement["Sid"].as_str()
            {
                statement["Sid"] = json!(format!("{sid}{i}"));
            }
            statements.push(statement);
        }
    }
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

/// The service EKS Pod Identity assumes roles as, and the audience of the ServiceAccount tokens
/// its agent exchanges.
pub const POD_IDENTITY_SERVICE: &str = "pods.eks.amazonaws.com";

/// Trust policy letting EKS Pod Identity assume a role for one ServiceAccount of one cluster:
/// the session tags it sets (EKS's documented way to narrow such a role) must name them, so an
/// association made elsewhere for this role gets nothing. The cluster is named by its ARN
/// (`eks-cluster-arn`), not its name: a cluster of the same name in another account or region
/// (whose associations may name this role) sets the same `eks-cluster-name`.
pub fn pod_identity_trust_policy(
    cluster_arn: &str,
    namespace: &str,
    service_account: &str,
) -> Value {
    json!({
        "Version": VERSION,
        "Statement": [{
            "Effect": "Allow",
            "Principal": {"Service": POD_IDENTITY_SERVICE},
            "Action": ["sts:AssumeRole", "sts:TagSession"],
            "Condition": {"StringEquals": {
                "aws:RequestTag/eks-cluster-arn": cluster_arn,
                "aws:RequestTag/kubernetes-namespace": namespace,
                "aws:RequestTag/kubernetes-service-account": service_account,
            }},
        }],
    })
}

/// Every S3 action any access policy grants; the boundary allows no other.
pub(super) fn app_actions() -> (Vec<&'static str>, Vec<&'static str>) {
    let mut objects = Vec::new();
    let mut buckets = Vec::new();
    for p in [
        Permission::ReadOnly,
        Permission::ReadWrite,
        Permission::WriteOnly,
    ] {
        let (o, b) = actions(p);
        objects.extend_from_slice(o);
        buckets.extend_from_slice(b);
    }
    for v in [&mut objects, &mut buckets] {
        v.sort_unstable();
        v.dedup();
    }
    (objects, buckets)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aws::policy::testing::*;
    #[test]
    fn read_only_grants_no_writes() {
        let doc = access_policy("aws", "b", Permission::ReadOnly, None);
        let a = doc_actions(&doc);
        assert!(a.contains(&"s3:GetObject".into()) && a.contains(&"s3:ListBucket".into()));
        assert!(
            !a.iter()
                .any(|x| x.starts_with("s3:Put") || x.starts_with("s3:Delete"))
        );
        assert_eq!(doc["Statement"][1]["Resource"], "arn:aws:s3:::b/*");
    }

    #[test]
    fn write_only_cannot_read_or_list() {
        let a = doc_actions(&access_policy(
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
    fn prefixes_that_iam_would_expand_are_refused() {
        for bad in ["${aws:username}/", "a/${*}", "*", "a?b", "/abs", ""] {
            let err = check_prefix(bad).unwrap_err();
            assert!(err.contains("spec.prefix"), "{err}");
        }
        for good in ["team/", "team", "a$b/", "2026-11/"] {
            assert_eq!(check_prefix(good), Ok(()), "{good}");
        }
        // Without a trailing '/', a prefix is a plain key prefix: "team" covers "team-b/x" too.
        let doc = access_policy("aws", "b", Permission::ReadOnly, Some("team"));
        assert_eq!(doc["Statement"][1]["Resource"], "arn:aws:s3:::b/team*");
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

    #[test]
    fn pod_identity_trust_names_the_service_and_exactly_one_service_account() {
        let arn = "arn:aws:eks:eu-west-1:123456789012:cluster/prod";
        let doc = pod_identity_trust_policy(arn, "team", "app");
        let st = &doc["Statement"][0];
        assert_eq!(st["Principal"]["Service"], "pods.eks.amazonaws.com");
        assert_eq!(st["Action"], json!(["sts:AssumeRole", "sts:TagSession"]));
        let cond = &st["Condition"]["StringEquals"];
        assert_eq!(cond["aws:RequestTag/eks-cluster-arn"], arn);
        assert!(cond["aws:RequestTag/eks-cluster-name"].is_null(), "{cond}");
        assert_eq!(cond.as_object().unwrap().len(), 3, "{cond}");
        assert_eq!(cond["aws:RequestTag/kubernetes-namespace"], "team");
        assert_eq!(cond["aws:RequestTag/kubernetes-service-account"], "app");
    }

    /// The sizes the README quotes: with bucket names as long as the operator's (33
    /// characters), a user's 2,048 characters hold a ReadWrite grant and 3 ReadOnly ones under a
    /// short prefix, not 4; a role's 10,240 hold all 10 an access may name. A first grant keeps
    /// the one-bucket policy as it was.
    #[test]
    fn several_grants_in_one_policy_and_what_fits_iams_limits() {
        let first = Grant {
            bucket: "s3op-0123456789abcdef-team-a-data",
            permission: Permission::ReadWrite,
            prefix: None,
        };
        let other = Grant {
            bucket: "s3op-0123456789abcdef-team-a-logs",
            permission: Permission::ReadOnly,
            prefix: Some("app/"),
        };
        let size = |n: usize| {
            let grants: Vec<Grant> = std::iter::once(first)
                .chain(std::iter::repeat_n(other, n - 1))
                .collect();
            access_policy_of("aws", &grants).to_string().len()
        };
        let one = access_policy_of("aws", &[first]);
        assert_eq!(
            one,
            access_policy("aws", first.bucket, first.permission, None)
        );
        assert_eq!(size(1), 517);
        assert!(size(4) <= 2048 && size(5) > 2048, "{} {}", size(4), size(5));
        assert!(size(10) <= 10240, "{}", size(10));
        let two = access_policy_of("aws", &[first, other]);
        let sids: Vec<&str> = two["Statement"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["Sid"].as_str().unwrap())
            .collect();
        assert_eq!(
            sids,
            ["Bucket", "Objects", "Bucket1", "Objects1", "Location1"]
        );
    }
}
