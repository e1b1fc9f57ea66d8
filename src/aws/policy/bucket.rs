//! A bucket's policy: the TLS-only deny, the logging grant, and the tenant's `spec.policy`
//! statements, checked against the boundary and rendered with the operator's exemption.

use serde_json::{Value, json};

use super::{OPERATOR_EXEMPTION, VERSION, grant::app_actions, is_account_id};
use crate::api::{PolicyEffect, PolicyStatement};

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

/// May an `Allow` name AWS principal `p`: one of the operator's `account`, or one `allowed`
/// lists (by ARN, or by its account id)?
pub fn principal_allowed(p: &str, account: &str, allowed: &[String]) -> bool {
    let acct = principal_account(p);
    acct == Some(account) || allowed.iter().any(|a| a == p || Some(a.as_str()) == acct)
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
    shape_refused(s, bucket_arn).or_else(|| match s.effect {
        PolicyEffect::Deny => None,
        PolicyEffect::Allow => allow_refused(s, account, allowed),
    })
}

/// Rules for every statement: no reserved sid, S3 actions only, this bucket only, a principal.
fn shape_refused(s: &PolicyStatement, bucket_arn: &str) -> Option<String> {
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
    None
}

/// Rules for an `Allow`: not public, only grantable actions, principals of the operator's
/// account or allow-listed.
pub fn allow_refused(s: &PolicyStatement, account: &str, allowed: &[String]) -> Option<String> {
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
        .find(|p| !principal_allowed(p, account, allowed))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aws::policy::*;

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
