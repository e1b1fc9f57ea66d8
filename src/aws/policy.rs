//! IAM policy documents: the least-privilege grants for applications, the IRSA trust policy, and
//! the operator's own policy (shipped in `config/iam/` and used verbatim by the tests).

use serde_json::{Value, json};

use crate::api::{Permission, PolicyEffect, PolicyStatement};

const VERSION: &str = "2012-10-17";

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

/// Where one operator installation may act: its account, partition, bucket-name prefix and IAM
/// path. Every ARN in the operator's policy and in the permissions boundary comes from here, so
/// two installations in one account (different clusters) cannot reach each other's resources.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scope {
    pub partition: String,
    pub account: String,
    pub bucket_prefix: String,
    pub iam_path: String,
}

/// Name of the managed policy every user and role the operator creates carries as its
/// permissions boundary (under the installation's IAM path).
pub const BOUNDARY_NAME: &str = "s3-operator-boundary";

impl Scope {
    /// The ARN of the permissions boundary policy.
    pub fn boundary_arn(&self) -> String {
        format!(
            "arn:{}:iam::{}:policy{}{BOUNDARY_NAME}",
            self.partition, self.account, self.iam_path
        )
    }

    fn iam_arn(&self, kind: &str) -> String {
        format!(
            "arn:{}:iam::{}:{kind}{}*",
            self.partition, self.account, self.iam_path
        )
    }
}

/// Every S3 action any access policy grants; the boundary allows no other.
fn app_actions() -> (Vec<&'static str>, Vec<&'static str>) {
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

/// The permissions boundary of every user and role the operator creates: at most the S3 actions
/// an access policy can grant, on the installation's buckets only, plus the KMS use S3 makes on
/// their behalf for SSE-KMS buckets. Whatever inline policy ends up on such an identity (even
/// one written by someone who controls the operator), it can never do more than this.
pub fn boundary_policy(scope: &Scope) -> Value {
    let (objects, buckets) = app_actions();
    let p = &scope.partition;
    json!({
        "Version": VERSION,
        "Statement": [
            {
                "Sid": "OperatorBuckets",
                "Effect": "Allow",
                "Action": buckets,
                "Resource": format!("arn:{p}:s3:::{}*", scope.bucket_prefix),
            },
            {
                "Sid": "OperatorObjects",
                "Effect": "Allow",
                "Action": objects,
                "Resource": format!("arn:{p}:s3:::{}*/*", scope.bucket_prefix),
            },
            {
                "Sid": "KmsThroughS3",
                "Effect": "Allow",
                "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
                "Resource": format!("arn:{p}:kms:*:{}:key/*", scope.account),
                "Condition": {"StringLike": {"kms:ViaService": "s3.*.amazonaws.com"}},
            },
        ],
    })
}

/// The operator's own policy: everything it calls, scoped to its account, bucket-name prefix
/// and IAM path. It may create and change users and roles only with the installation's
/// permissions boundary, and never remove or replace that boundary, so whoever controls the
/// operator's credentials cannot mint an identity that does more than the boundary allows.
pub fn operator_policy(scope: &Scope) -> Value {
    let p = &scope.partition;
    let buckets = format!("arn:{p}:s3:::{}*", scope.bucket_prefix);
    let objects = format!("arn:{p}:s3:::{}*/*", scope.bucket_prefix);
    let (users, roles) = (scope.iam_arn("user"), scope.iam_arn("role"));
    let boundary = scope.boundary_arn();
    json!({
        "Version": VERSION,
        "Statement": [
            {
                "Sid": "ManageBuckets",
                "Effect": "Allow",
                "Action": [
                    "s3:CreateBucket", "s3:DeleteBucket", "s3:ListBucket", "s3:ListBucketVersions",
                    "s3:GetBucketLocation", "s3:GetBucketTagging", "s3:PutBucketTagging",
                    "s3:TagResource",
                    "s3:GetBucketVersioning", "s3:PutBucketVersioning",
                    "s3:GetEncryptionConfiguration", "s3:PutEncryptionConfiguration",
                    "s3:GetBucketPublicAccessBlock", "s3:PutBucketPublicAccessBlock",
                    "s3:GetLifecycleConfiguration", "s3:PutLifecycleConfiguration",
                    "s3:GetBucketCORS", "s3:PutBucketCORS",
                    // CreateBucket with an ObjectOwnership needs the Put as well.
                    "s3:GetBucketOwnershipControls", "s3:PutBucketOwnershipControls",
                    "s3:GetBucketPolicy", "s3:PutBucketPolicy",
                    // CreateBucket with ObjectLockEnabledForBucket needs the Put (and
                    // s3:PutBucketVersioning) as well.
                    "s3:GetBucketObjectLockConfiguration", "s3:PutBucketObjectLockConfiguration",
                    "s3:GetIntelligentTieringConfiguration", "s3:PutIntelligentTieringConfiguration",
                    "s3:GetAccelerateConfiguration", "s3:PutAccelerateConfiguration",
                    // Get/PutBucketNotificationConfiguration (spec.notifications).
                    "s3:GetBucketNotification", "s3:PutBucketNotification",
                    // spec.logging: read only when set.
                    "s3:GetBucketLogging", "s3:PutBucketLogging",
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
                // A denied read of a bucket during deletion is checked against the account's
                // bucket list: only a bucket that is not there may be treated as gone.
                "Sid": "ConfirmBucketsGone",
                "Effect": "Allow",
                "Action": ["s3:ListAllMyBuckets"],
                "Resource": "*",
            },
            {
                // IAM authorizes a read of a missing user or role against an ARN without its
                // path; reading any name makes "does not exist" an answer, never a denial, so a
                // denial can fail closed.
                "Sid": "ReadIdentities",
                "Effect": "Allow",
                "Action": ["iam:GetUser", "iam:GetRole"],
                "Resource": [
                    format!("arn:{p}:iam::{}:user/*", scope.account),
                    format!("arn:{p}:iam::{}:role/*", scope.account),
                ],
            },
            {
                "Sid": "ReadBoundary",
                "Effect": "Allow",
                "Action": ["iam:GetPolicy"],
                "Resource": boundary,
            },
            {
                "Sid": "CreateAndChangeOnlyWithBoundary",
                "Effect": "Allow",
                "Action": [
                    "iam:CreateUser", "iam:PutUserPolicy", "iam:DeleteUserPolicy",
                    "iam:PutUserPermissionsBoundary",
                    "iam:CreateRole", "iam:PutRolePolicy", "iam:DeleteRolePolicy",
                    "iam:PutRolePermissionsBoundary",
                ],
                "Resource": [users, roles],
                "Condition": {"StringEquals": {"iam:PermissionsBoundary": boundary}},
            },
            {
                "Sid": "ManageAppUsers",
                "Effect": "Allow",
                "Action": [
                    "iam:DeleteUser", "iam:TagUser",
                    "iam:GetUserPolicy", "iam:ListUserPolicies",
                    "iam:CreateAccessKey", "iam:UpdateAccessKey", "iam:DeleteAccessKey",
                    "iam:ListAccessKeys",
                ],
                "Resource": users,
            },
            {
                "Sid": "ManageAppRoles",
                "Effect": "Allow",
                "Action": [
                    "iam:DeleteRole", "iam:TagRole", "iam:UpdateAssumeRolePolicy",
                    "iam:GetRolePolicy", "iam:ListRolePolicies",
                ],
                "Resource": roles,
            },
            {
                "Sid": "KeepTheBoundary",
                "Effect": "Deny",
                "Action": [
                    "iam:DeleteUserPermissionsBoundary", "iam:DeleteRolePermissionsBoundary",
                    "iam:AttachUserPolicy", "iam:AttachRolePolicy",
                    "iam:CreatePolicyVersion", "iam:DeletePolicy", "iam:DeletePolicyVersion",
                    "iam:SetDefaultPolicyVersion",
                ],
                "Resource": "*",
            },
        ],
    })
}

/// The condition operator and key that exempt the operator from a tenant's `Deny`.
pub const OPERATOR_EXEMPTION: (&str, &str) = ("ArnNotLike", "aws:PrincipalArn");

/// Sid of the statement every bucket policy of the operator starts with, and that it never drops.
pub const TLS_ONLY_SID: &str = "DenyInsecureTransport";

/// A bucket's policy: a Deny of every request not made over TLS (kept whatever the spec says),
/// then `statements`.
pub fn bucket_policy(bucket_arn: &str, statements: &[Value]) -> Value {
    let mut all = vec![json!({
        "Sid": TLS_ONLY_SID,
        "Effect": "Deny",
        "Principal": "*",
        "Action": "s3:*",
        "Resource": [bucket_arn, format!("{bucket_arn}/*")],
        "Condition": {"Bool": {"aws:SecureTransport": "false"}},
    })];
    all.extend_from_slice(statements);
    json!({"Version": VERSION, "Statement": all})
}

/// Sid of the operator's statement granting the S3 logging service delivery into a bucket.
pub const LOGGING_SID: &str = "S3ServerAccessLogs";

/// The service principal S3 server access logging delivers as.
pub const LOGGING_SERVICE: &str = "logging.s3.amazonaws.com";

/// AWS's grant for server access logs into a bucket with ACLs disabled: the logging service may
/// put objects, on behalf of exactly `sources` (bucket ARNs) of `account`. `None` without sources.
pub fn logging_statement(bucket_arn: &str, sources: &[String], account: &str) -> Option<Value> {
    (!sources.is_empty()).then(|| {
        json!({
            "Sid": LOGGING_SID,
            "Effect": "Allow",
            "Principal": {"Service": LOGGING_SERVICE},
            "Action": "s3:PutObject",
            "Resource": format!("{bucket_arn}/*"),
            "Condition": {
                "ArnLike": {"aws:SourceArn": sources},
                "StringEquals": {"aws:SourceAccount": account},
            },
        })
    })
}

/// The account an AWS principal belongs to: itself for an account id, the account field of an
/// IAM or STS ARN; `None` for anything else.
fn principal_account(p: &str) -> Option<&str> {
    if is_account_id(p) {
        return Some(p);
    }
    let mut parts = p.split(':');
    match (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) {
        (Some("arn"), Some(_), Some("iam" | "sts"), Some(""), Some(account))
            if is_account_id(account) =>
        {
            Some(account)
        }
        _ => None,
    }
}

/// The only actions a tenant's `Allow` may grant: the object and listing actions a BucketAccess
/// holds, exactly as IAM names them (no wildcard). Within one account a bucket policy that names
/// a user or a role session is not capped by that identity's permissions boundary, so any other
/// action (the bucket's policy, notifications, tags or deletion; retention, legal hold, bypass)
/// granted here would reach past the boundary. The CRD's rule on `spec.policy[].action` lists the
/// same, lowercased (a test keeps them equal).
pub fn grantable_actions() -> Vec<&'static str> {
    let (mut all, buckets) = app_actions();
    all.extend(buckets);
    all.sort_unstable();
    all
}

/// The `aws:PrincipalArn` patterns of the operator's own principal, from its STS caller ARN: a
/// user or role by name under any path (IAM names are unique in an account, and the session ARN
/// of a role names neither its path nor how `aws:PrincipalArn` will spell it). Empty for a caller
/// ARN of another shape, which no tenant Deny is then exempted for.
pub fn operator_principals(caller_arn: &str) -> Vec<String> {
    let parts: Vec<&str> = caller_arn.splitn(6, ':').collect();
    let [_, partition, service, _, account, resource] = parts[..] else {
        return vec![];
    };
    let (kind, name) = match (service, resource.split('/').collect::<Vec<_>>().as_slice()) {
        ("iam", ["user", .., name]) => ("user", *name),
        ("sts", ["assumed-role", role, _session]) => ("role", *role),
        ("iam", ["root"]) => return vec![format!("arn:{partition}:iam::{account}:root")],
        _ => return vec![],
    };
    vec![
        format!("arn:{partition}:iam::{account}:{kind}/{name}"),
        format!("arn:{partition}:iam::{account}:{kind}/*/{name}"),
    ]
}

/// What a tenant's statements are checked against and rendered with.
pub struct StatementRules<'a> {
    /// The operator's account: an `Allow` may name its principals.
    pub account: &'a str,
    /// The operator's `--allowed-policy-principals` (ARNs, account ids or service names).
    pub allowed: &'a [String],
    /// The operator's own principal ([`operator_principals`]): exempt from every tenant `Deny`.
    pub operator: &'a [String],
}

/// `spec.policy` as policy statements, or why one is refused, naming its field and the rule.
/// The guard is the operator's, not only the CRD's: objects stored before a rule existed, and
/// rules CEL cannot express (this bucket's ARN, the operator's account), are checked here.
pub fn bucket_statements(
    statements: &[PolicyStatement],
    bucket_arn: &str,
    rules: &StatementRules,
) -> Result<Vec<Value>, String> {
    statements
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let field = format!("spec.policy[{i}]");
            statement_refused(s, bucket_arn, rules.account, rules.allowed).map_or_else(
                || Ok(statement_json(s, rules.operator)),
                |why| Err(format!("{field}{why}")),
            )
        })
        .collect()
}

/// Why statement `s` may not go into the policy of `bucket_arn`, said after the field's name
/// (`.resource ...`).
fn statement_refused(
    s: &PolicyStatement,
    bucket_arn: &str,
    account: &str,
    allowed: &[String],
) -> Option<String> {
    let objects_arn = format!("{bucket_arn}/*");
    if s.sid.as_deref() == Some(TLS_ONLY_SID) {
        return Some(format!(
            ".sid {TLS_ONLY_SID} is reserved for the operator's TLS-only statement"
        ));
    }
    if s.sid.as_deref() == Some(LOGGING_SID) {
        return Some(format!(
            ".sid {LOGGING_SID} is reserved for the operator's server access logging grant"
        ));
    }
    if let Some(a) = s.action.iter().find(|a| !a.starts_with("s3:")) {
        return Some(format!(".action {a:?} is not an S3 action (s3:...)"));
    }
    if s.resource.is_empty() {
        return Some(".resource must name this bucket".into());
    }
    if let Some(r) = s
        .resource
        .iter()
        .find(|r| **r != bucket_arn && **r != objects_arn)
    {
        return Some(format!(
            ".resource {r:?} is not this bucket: a statement may name only {bucket_arn} and {objects_arn}"
        ));
    }
    if s.principal.aws.is_empty() && s.principal.service.is_empty() {
        return Some(".principal names no principal".into());
    }
    if s.effect == PolicyEffect::Deny {
        return None;
    }
    if s.principal.aws.iter().any(|p| p == "*") {
        return Some(
            ".principal.aws \"*\" in an Allow would make the bucket public; refused".into(),
        );
    }
    let grantable = grantable_actions();
    if let Some(a) = s
        .action
        .iter()
        .find(|a| !grantable.iter().any(|g| g.eq_ignore_ascii_case(a)))
    {
        return Some(format!(
            ".action {a:?} may not be granted by an Allow: only the object and listing actions a BucketAccess holds may ({}), never a wildcard, bucket configuration, retention, legal hold or bypass",
            grantable.join(", ")
        ));
    }
    let outside = s
        .principal
        .aws
        .iter()
        .find(|p| {
            let acct = principal_account(p);
            acct != Some(account) && !allowed.iter().any(|a| a == *p || Some(a.as_str()) == acct)
        })
        .or_else(|| s.principal.service.iter().find(|p| !allowed.contains(p)));
    outside.map(|p| {
        format!(
            ".principal {p:?} is outside the operator's AWS account {account}; an Allow may name it only if the operator's --allowed-policy-principals lists it"
        )
    })
}

/// The IAM JSON of an accepted statement.
/// `operator`: the patterns of the operator's own principal, which a `Deny` never binds (an
/// `ArnNotLike` on `aws:PrincipalArn` added to the statement's conditions; values under the same
/// operator and key are alternatives, so a tenant's own exemptions stay as they were).
fn statement_json(s: &PolicyStatement, operator: &[String]) -> Value {
    let mut st = serde_json::Map::new();
    if let Some(sid) = &s.sid {
        st.insert("Sid".into(), json!(sid));
    }
    let effect = match s.effect {
        PolicyEffect::Allow => "Allow",
        PolicyEffect::Deny => "Deny",
    };
    st.insert("Effect".into(), json!(effect));
    let mut principal = serde_json::Map::new();
    if !s.principal.aws.is_empty() {
        principal.insert("AWS".into(), json!(s.principal.aws));
    }
    if !s.principal.service.is_empty() {
        principal.insert("Service".into(), json!(s.principal.service));
    }
    st.insert("Principal".into(), Value::Object(principal));
    st.insert("Action".into(), json!(s.action));
    st.insert("Resource".into(), json!(s.resource));
    let mut condition = s.condition.clone();
    if s.effect == PolicyEffect::Deny && !operator.is_empty() {
        let exempt = condition
            .entry(OPERATOR_EXEMPTION.0.into())
            .or_default()
            .entry(OPERATOR_EXEMPTION.1.into())
            .or_default();
        exempt.extend(operator.iter().cloned());
        exempt.sort();
        exempt.dedup();
    }
    if !condition.is_empty() {
        st.insert("Condition".into(), json!(condition));
    }
    Value::Object(st)
}

/// A policy document in one canonical form, so two documents that mean the same compare equal
/// and a resync never rewrites a policy only because S3 formats or orders it differently: a
/// single value and a one-element list are the same, lists are sets, `"*"` is `{"AWS": "*"}`,
/// an account id is its root ARN (S3 stores it so), condition values are strings, and the
/// statements are in a fixed order.
pub fn normalize_policy(doc: &Value, partition: &str) -> Value {
    let statements = match &doc["Statement"] {
        Value::Array(a) => a.clone(),
        Value::Null => vec![],
        one => vec![one.clone()],
    };
    let mut statements: Vec<Value> = statements
        .iter()
        .map(|s| normalize_statement(s, partition))
        .collect();
    statements.sort_by_key(|s| s.to_string());
    statements.dedup();
    json!({"Version": doc.get("Version").cloned().unwrap_or(json!(VERSION)), "Statement": statements})
}

fn string_set(v: &Value) -> Value {
    let mut items: Vec<String> = match v {
        Value::Array(a) => a.iter().map(scalar).collect(),
        other => vec![scalar(other)],
    };
    items.sort();
    items.dedup();
    json!(items)
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn normalize_statement(s: &Value, partition: &str) -> Value {
    let Value::Object(fields) = s else {
        return s.clone();
    };
    let mut out = serde_json::Map::new();
    for (key, value) in fields {
        let value = match key.as_str() {
            "Action" | "NotAction" | "Resource" | "NotResource" => string_set(value),
            "Principal" | "NotPrincipal" => normalize_principal(value, partition),
            "Condition" => match value {
                Value::Object(ops) => Value::Object(
                    ops.iter()
                        .map(|(op, keys)| {
                            let keys = match keys {
                                Value::Object(k) => Value::Object(
                                    k.iter().map(|(k, v)| (k.clone(), string_set(v))).collect(),
                                ),
                                other => other.clone(),
                            };
                            (op.clone(), keys)
                        })
                        .collect(),
                ),
                other => other.clone(),
            },
            _ => value.clone(),
        };
        out.insert(key.clone(), value);
    }
    Value::Object(out)
}

fn normalize_principal(p: &Value, partition: &str) -> Value {
    let map = match p {
        Value::String(s) if s == "*" => {
            return json!({"AWS": ["*"]});
        }
        Value::Object(m) => m.clone(),
        other => return other.clone(),
    };
    Value::Object(
        map.into_iter()
            .map(|(kind, v)| {
                let mut v = string_set(&v);
                if kind == "AWS"
                    && let Value::Array(items) = &mut v
                {
                    for item in items.iter_mut() {
                        if let Some(id) = item.as_str().filter(|s| is_account_id(s)) {
                            *item = json!(format!("arn:{partition}:iam::{id}:root"));
                        }
                    }
                    v = string_set(&v);
                }
                (kind, v)
            })
            .collect(),
    )
}

/// A 12-digit AWS account id.
pub fn is_account_id(s: &str) -> bool {
    s.len() == 12 && s.bytes().all(|b| b.is_ascii_digit())
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

    fn actions_of(statement: &Value) -> Vec<String> {
        statement["Action"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_string())
            .collect()
    }

    fn actions(doc: &Value) -> Vec<String> {
        doc["Statement"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(actions_of)
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

    fn scope() -> Scope {
        Scope {
            partition: "aws".into(),
            account: "123456789012".into(),
            bucket_prefix: "s3op-prod-".into(),
            iam_path: "/s3-operator/prod/".into(),
        }
    }

    /// The shipped policies are exactly what `s3-operator iam-policy` prints for the example.
    #[test]
    fn shipped_policies_match_the_source() {
        let example = Scope {
            bucket_prefix: "s3op-default-".into(),
            iam_path: "/s3-operator/default/".into(),
            ..scope()
        };
        for (file, doc) in [
            ("operator-policy.json", operator_policy(&example)),
            ("boundary-policy.json", boundary_policy(&example)),
        ] {
            let path = format!("{}/config/iam/{file}", env!("CARGO_MANIFEST_DIR"));
            let shipped: Value =
                serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            assert!(
                shipped == doc,
                "config/iam/{file} is stale: regenerate it with `s3-operator iam-policy --account-id 123456789012` (add `--boundary` for the boundary)"
            );
        }
    }

    /// Every resource names this installation's account, prefix or path; the only wildcards
    /// are the bucket list and the reads that make a missing identity answer NoSuchEntity.
    #[test]
    fn operator_policy_is_scoped_to_the_installation() {
        let doc = operator_policy(&scope());
        for s in doc["Statement"].as_array().unwrap() {
            let resources: Vec<&str> = match &s["Resource"] {
                Value::String(r) => vec![r.as_str()],
                Value::Array(a) => a.iter().map(|r| r.as_str().unwrap()).collect(),
                other => panic!("{other}"),
            };
            for r in resources {
                let scoped = r.starts_with("arn:aws:s3:::s3op-prod-")
                    || r.starts_with("arn:aws:iam::123456789012:user/s3-operator/prod/")
                    || r.starts_with("arn:aws:iam::123456789012:role/s3-operator/prod/")
                    || r == "arn:aws:iam::123456789012:policy/s3-operator/prod/s3-operator-boundary";
                let allowed_wildcard = match s["Sid"].as_str().unwrap() {
                    "ConfirmBucketsGone" | "KeepTheBoundary" => r == "*",
                    "ReadIdentities" => r.starts_with("arn:aws:iam::123456789012:"),
                    _ => false,
                };
                assert!(scoped || allowed_wildcard, "{} {r}", s["Sid"]);
            }
        }
    }

    /// Creating or changing an identity needs the boundary, and removing it is denied.
    #[test]
    fn identities_are_created_and_changed_only_with_the_boundary() {
        let doc = operator_policy(&scope());
        let statements = doc["Statement"].as_array().unwrap();
        let conditioned = statements
            .iter()
            .find(|s| s["Sid"] == "CreateAndChangeOnlyWithBoundary")
            .unwrap();
        assert_eq!(
            conditioned["Condition"]["StringEquals"]["iam:PermissionsBoundary"],
            "arn:aws:iam::123456789012:policy/s3-operator/prod/s3-operator-boundary"
        );
        for action in [
            "iam:CreateUser",
            "iam:CreateRole",
            "iam:PutUserPolicy",
            "iam:PutRolePolicy",
        ] {
            let holders: Vec<&str> = statements
                .iter()
                .filter(|s| s["Effect"] == "Allow" && actions_of(s).contains(&action.to_string()))
                .map(|s| s["Sid"].as_str().unwrap())
                .collect();
            assert_eq!(holders, ["CreateAndChangeOnlyWithBoundary"], "{action}");
        }
        let denied = statements.iter().find(|s| s["Effect"] == "Deny").unwrap();
        for action in [
            "iam:DeleteUserPermissionsBoundary",
            "iam:DeleteRolePermissionsBoundary",
            "iam:AttachUserPolicy",
            "iam:CreatePolicyVersion",
        ] {
            assert!(actions_of(denied).contains(&action.to_string()), "{action}");
        }
    }

    /// The boundary covers every action an access policy grants, on the prefix only.
    #[test]
    fn boundary_caps_identities_to_the_installations_buckets() {
        let doc = boundary_policy(&scope());
        let allowed = actions(&doc);
        for p in [
            Permission::ReadOnly,
            Permission::ReadWrite,
            Permission::WriteOnly,
        ] {
            for a in actions(&access_policy("aws", "s3op-prod-b", p, Some("x/"))) {
                assert!(allowed.contains(&a), "{a}");
            }
        }
        assert!(!allowed.iter().any(|a| a.starts_with("iam:") || a == "s3:*"));
        // Applications never reconfigure their bucket: what the operator manages stays its own.
        for a in [
            "s3:PutBucketOwnershipControls",
            "s3:PutBucketNotification",
            "s3:PutBucketAcl",
            "s3:PutObjectAcl",
            "s3:PutBucketPolicy",
            "s3:DeleteBucketPolicy",
            "s3:PutBucketPublicAccessBlock",
        ] {
            assert!(!allowed.contains(&a.to_string()), "{a}");
        }
        assert_eq!(doc["Statement"][0]["Resource"], "arn:aws:s3:::s3op-prod-*");
        assert_eq!(
            doc["Statement"][1]["Resource"],
            "arn:aws:s3:::s3op-prod-*/*"
        );
    }

    #[test]
    fn the_crds_allow_rule_lists_exactly_the_grantable_actions() {
        let listed: Vec<String> = crate::api::ALLOW_ACTIONS_RULE
            .split('[')
            .nth(1)
            .and_then(|l| l.split(']').next())
            .unwrap()
            .split(", ")
            .map(|a| a.trim_matches('\'').to_string())
            .collect();
        let want: Vec<String> = grantable_actions()
            .iter()
            .map(|a| a.to_ascii_lowercase())
            .collect();
        assert_eq!(listed, want);
    }

    fn tenant(effect: PolicyEffect, actions: &[&str]) -> PolicyStatement {
        PolicyStatement {
            sid: None,
            effect,
            principal: crate::api::PolicyPrincipal {
                aws: vec!["arn:aws:iam::123456789012:user/s3-operator/c/ns-app-1234abcd".into()],
                service: vec![],
            },
            action: actions.iter().map(|a| a.to_string()).collect(),
            resource: vec!["arn:aws:s3:::s3op-b".into(), "arn:aws:s3:::s3op-b/*".into()],
            condition: Default::default(),
        }
    }

    /// An Allow naming the tenant's own user is not capped by its boundary in AWS: only what the
    /// boundary grants anyway may be granted there, whatever the case or wildcard.
    #[test]
    fn an_allow_grants_only_object_and_listing_actions() {
        let rules = StatementRules {
            account: "123456789012",
            allowed: &[],
            operator: &[],
        };
        let arn = "arn:aws:s3:::s3op-b";
        for refused in [
            "s3:*",
            "s3:Get*",
            "s3:PutBucketPolicy",
            "s3:DeleteBucket",
            "s3:PutBucketTagging",
            "s3:PutBucketNotification",
            "s3:PutObjectRetention",
            "s3:PutObjectLegalHold",
            "s3:BypassGovernanceRetention",
            "s3:GetObject?",
            "s3:PUTBUCKETPOLICY",
        ] {
            let st = tenant(PolicyEffect::Allow, &["s3:GetObject", refused]);
            let why = bucket_statements(&[st], arn, &rules).unwrap_err();
            assert!(
                why.starts_with("spec.policy[0].action") && why.contains(refused),
                "{why}"
            );
        }
        let ok = tenant(
            PolicyEffect::Allow,
            &["s3:getobject", "s3:ListBucket", "s3:PutObject"],
        );
        assert!(bucket_statements(&[ok], arn, &rules).is_ok());
        // A Deny may name anything.
        let deny = tenant(PolicyEffect::Deny, &["s3:*"]);
        assert!(bucket_statements(&[deny], arn, &rules).is_ok());
    }

    #[test]
    fn a_tenant_deny_never_binds_the_operator() {
        let operator = operator_principals("arn:aws:sts::123456789012:assumed-role/op/i-1");
        assert_eq!(
            operator,
            [
                "arn:aws:iam::123456789012:role/op",
                "arn:aws:iam::123456789012:role/*/op"
            ]
        );
        let rules = StatementRules {
            account: "123456789012",
            allowed: &[],
            operator: &operator,
        };
        let mut deny = tenant(PolicyEffect::Deny, &["s3:*"]);
        // The tenant's own exemption stays, next to the operator's.
        deny.condition.insert(
            "ArnNotLike".into(),
            [(
                "aws:PrincipalArn".into(),
                vec!["arn:aws:iam::123456789012:role/ci".into()],
            )]
            .into(),
        );
        deny.condition.insert(
            "StringNotEquals".into(),
            [("aws:SourceVpce".into(), vec!["vpce-1".into()])].into(),
        );
        let allow = tenant(PolicyEffect::Allow, &["s3:GetObject"]);
        let out = bucket_statements(&[deny, allow], "arn:aws:s3:::s3op-b", &rules).unwrap();
        assert_eq!(
            out[0]["Condition"]["ArnNotLike"]["aws:PrincipalArn"],
            json!([
                "arn:aws:iam::123456789012:role/*/op",
                "arn:aws:iam::123456789012:role/ci",
                "arn:aws:iam::123456789012:role/op"
            ])
        );
        assert_eq!(
            out[0]["Condition"]["StringNotEquals"]["aws:SourceVpce"],
            json!(["vpce-1"])
        );
        assert!(
            out[1].get("Condition").is_none(),
            "an Allow is left as written"
        );
        for (caller, want) in [
            (
                "arn:aws:iam::123456789012:user/s3-operator/op",
                vec![
                    "arn:aws:iam::123456789012:user/op",
                    "arn:aws:iam::123456789012:user/*/op",
                ],
            ),
            (
                "arn:aws:iam::123456789012:root",
                vec!["arn:aws:iam::123456789012:root"],
            ),
            ("arn:aws:sts::123456789012:federated-user/x", vec![]),
            ("nonsense", vec![]),
        ] {
            assert_eq!(operator_principals(caller), want, "{caller}");
        }
    }

    #[test]
    fn bucket_policies_always_start_with_the_tls_only_deny() {
        let doc = bucket_policy("arn:aws:s3:::b", &[]);
        let s = &doc["Statement"][0];
        assert_eq!(s["Sid"], TLS_ONLY_SID);
        assert_eq!(s["Effect"], "Deny");
        assert_eq!(s["Principal"], "*");
        assert_eq!(s["Condition"]["Bool"]["aws:SecureTransport"], "false");
        assert_eq!(s["Resource"], json!(["arn:aws:s3:::b", "arn:aws:s3:::b/*"]));
        let extra = json!({"Sid": "X", "Effect": "Allow"});
        let doc = bucket_policy("arn:aws:s3:::b", std::slice::from_ref(&extra));
        assert_eq!(doc["Statement"][0]["Sid"], TLS_ONLY_SID);
        assert_eq!(doc["Statement"][1], extra);
    }

    #[test]
    fn policies_that_mean_the_same_normalize_the_same() {
        let ours = bucket_policy(
            "arn:aws:s3:::b",
            &[
                json!({"Sid": "Read", "Effect": "Allow", "Principal": {"AWS": ["111122223333"]},
                     "Action": ["s3:GetObject", "s3:ListBucket"], "Resource": ["arn:aws:s3:::b/*"]}),
            ],
        );
        // As S3 may return it: statements reordered, singletons unwrapped, lists reordered,
        // the account id as its root ARN, a boolean condition value.
        let theirs = json!({"Version": "2012-10-17", "Statement": [
            {"Sid": "Read", "Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::111122223333:root"},
             "Action": ["s3:ListBucket", "s3:GetObject"], "Resource": "arn:aws:s3:::b/*"},
            {"Sid": TLS_ONLY_SID, "Effect": "Deny", "Principal": {"AWS": "*"}, "Action": ["s3:*"],
             "Resource": ["arn:aws:s3:::b/*", "arn:aws:s3:::b"],
             "Condition": {"Bool": {"aws:SecureTransport": false}}},
        ]});
        assert_eq!(
            normalize_policy(&ours, "aws"),
            normalize_policy(&theirs, "aws")
        );
        let mut changed = theirs.clone();
        changed["Statement"][1]["Condition"]["Bool"]["aws:SecureTransport"] = json!("true");
        assert_ne!(
            normalize_policy(&ours, "aws"),
            normalize_policy(&changed, "aws")
        );
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

    /// Object lock, intelligent tiering and acceleration: the operator gains exactly their
    /// Get/Put actions, on its prefix only, and never the right to bypass retention; the
    /// identities it creates gain none of them.
    #[test]
    fn protection_actions_are_the_operators_alone() {
        let new = [
            "s3:GetBucketObjectLockConfiguration",
            "s3:PutBucketObjectLockConfiguration",
            "s3:GetIntelligentTieringConfiguration",
            "s3:PutIntelligentTieringConfiguration",
            "s3:GetAccelerateConfiguration",
            "s3:PutAccelerateConfiguration",
        ];
        let doc = operator_policy(&scope());
        let manage = doc["Statement"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["Sid"] == "ManageBuckets")
            .unwrap();
        assert_eq!(manage["Resource"], "arn:aws:s3:::s3op-prod-*");
        let granted = actions_of(manage);
        for a in new {
            assert!(granted.contains(&a.to_string()), "{a}");
        }
        let all = actions(&doc);
        assert!(!all.iter().any(|a| a.contains("Bypass")), "{all:?}");
        let boundary = actions(&boundary_policy(&scope()));
        for a in new.iter().chain(&["s3:BypassGovernanceRetention"]) {
            assert!(!boundary.contains(&a.to_string()), "{a}");
        }
    }

    /// A tenant statement reading objects, for the bucket `s3op-b` the checks below use.
    fn team(effect: PolicyEffect, aws: &[&str], resource: &str) -> PolicyStatement {
        PolicyStatement {
            sid: Some("Team".into()),
            effect,
            principal: crate::api::PolicyPrincipal {
                aws: aws.iter().map(|p| p.to_string()).collect(),
                service: vec![],
            },
            action: vec!["s3:GetObject".into()],
            resource: vec![resource.into()],
            condition: Default::default(),
        }
    }

    /// `statements` checked for the bucket `s3op-b`, with `allowed` as the operator's
    /// `--allowed-policy-principals`.
    fn checked(statements: Vec<PolicyStatement>, allowed: &[&str]) -> Result<Vec<Value>, String> {
        let allowed: Vec<String> = allowed.iter().map(|p| p.to_string()).collect();
        let rules = StatementRules {
            account: "123456789012",
            allowed: &allowed,
            operator: &[],
        };
        bucket_statements(&statements, "arn:aws:s3:::s3op-b", &rules)
    }

    #[test]
    fn a_public_allow_is_refused_naming_the_field_and_rule() {
        for who in [&["*"][..], &["arn:aws:iam::123456789012:root", "*"]] {
            let st = team(PolicyEffect::Allow, who, "arn:aws:s3:::s3op-b/*");
            let msg = checked(vec![st], &["*"]).unwrap_err();
            assert!(
                msg.contains("spec.policy[0].principal") && msg.contains("public"),
                "{msg}"
            );
        }
        // A Deny for everyone narrows access: accepted.
        let deny = team(PolicyEffect::Deny, &["*"], "arn:aws:s3:::s3op-b");
        assert!(checked(vec![deny], &[]).is_ok());
    }

    #[test]
    fn a_foreign_principal_is_refused_unless_allow_listed() {
        let foreign = "arn:aws:iam::999999999999:role/partner";
        let st = || team(PolicyEffect::Allow, &[foreign], "arn:aws:s3:::s3op-b/*");
        let msg = checked(vec![st()], &[]).unwrap_err();
        assert!(
            msg.contains("spec.policy[0].principal")
                && msg.contains("999999999999")
                && msg.contains("--allowed-policy-principals"),
            "{msg}"
        );
        let by_account = "999999999999";
        let ws = |s: &str| checked(vec![st()], &[s]);
        assert!(ws(foreign).is_ok(), "allow-listed by ARN");
        assert!(ws(by_account).is_ok(), "allow-listed by account");
        assert!(ws("888888888888").is_err(), "another account");
        // A foreign account id, and a service principal, are outside the account too.
        let by_id = team(
            PolicyEffect::Allow,
            &["999999999999"],
            "arn:aws:s3:::s3op-b",
        );
        assert!(checked(vec![by_id], &[]).is_err());
        let mut svc = st();
        svc.principal = crate::api::PolicyPrincipal {
            aws: vec![],
            service: vec!["logging.s3.amazonaws.com".into()],
        };
        assert!(checked(vec![svc.clone()], &[]).is_err());
        assert!(checked(vec![svc], &["logging.s3.amazonaws.com"]).is_ok());
    }

    #[test]
    fn statements_may_name_only_this_bucket_and_not_replace_the_tls_statement() {
        let own = ["arn:aws:iam::123456789012:root"];
        for resource in [
            "arn:aws:s3:::s3op-other/*",
            "arn:aws:s3:::s3op-b-more",
            "arn:aws:s3:::s3op-b/private/*",
            "*",
        ] {
            let st = team(PolicyEffect::Allow, &own, resource);
            let msg = checked(vec![st], &[]).unwrap_err();
            assert!(
                msg.contains("spec.policy[0].resource") && msg.contains("not this bucket"),
                "{msg}"
            );
        }
        let mut tls = team(PolicyEffect::Allow, &own, "arn:aws:s3:::s3op-b");
        tls.sid = Some(TLS_ONLY_SID.into());
        let msg = checked(vec![tls], &[]).unwrap_err();
        assert!(
            msg.contains("spec.policy[0].sid") && msg.contains("reserved"),
            "{msg}"
        );
        let mut iam = team(PolicyEffect::Allow, &own, "arn:aws:s3:::s3op-b");
        iam.action = vec!["iam:CreateUser".into()];
        assert!(
            checked(vec![iam], &[])
                .unwrap_err()
                .contains("spec.policy[0].action")
        );
    }

    #[test]
    fn the_logging_grant_cannot_be_spoofed_through_spec_policy() {
        let st = PolicyStatement {
            sid: Some(LOGGING_SID.into()),
            effect: PolicyEffect::Allow,
            principal: crate::api::PolicyPrincipal {
                aws: vec![],
                service: vec![LOGGING_SERVICE.into()],
            },
            action: vec!["s3:PutObject".into()],
            resource: vec!["arn:aws:s3:::s3op-b/*".into()],
            condition: Default::default(),
        };
        // Even with the service allow-listed, the Sid stays the operator's.
        let err = checked(vec![st], &[LOGGING_SERVICE]).unwrap_err();
        assert!(
            err.contains("spec.policy[0].sid") && err.contains("reserved"),
            "{err}"
        );
    }
}
