//! The security-only plan of a Bucket that is not Ready (pure): what its bucket's policy and
//! notifications still grant that the operator's flags or the class in force no longer allow.
//! A pass that reports a violation or an invalid spec changes nothing else in AWS, but it
//! withdraws those grants at once: a tighter ceiling holds whatever else is wrong. It works on
//! what S3 holds, not on the spec (which may be what is wrong), and only ever removes.

use serde_json::Value;

use super::notifications::allows;
use crate::api::{NotificationTarget, Notifications};
use crate::aws::policy::{self, LOGGING_SERVICE, LOGGING_SID};

/// What the bucket may still grant: the operator's flags, narrowed by the class's lists.
pub struct Allowed<'a> {
    /// The operator's account: its principals are always allowed.
    pub account: &'a str,
    /// `--allowed-policy-principals`.
    pub principals: &'a [String],
    /// `--allowed-notification-targets`.
    pub targets: &'a [String],
    /// The class in force: its name and its constraints' lists (`None`: no list of its own).
    pub class: Option<ClassLists<'a>>,
}

pub struct ClassLists<'a> {
    pub name: String,
    pub principals: Option<&'a [String]>,
    pub targets: Option<&'a [String]>,
}

/// The writes that withdraw what is no longer allowed, and what they remove (for the event).
#[derive(Debug, Default, PartialEq)]
pub struct Withdrawal {
    /// The policy without the statements no longer allowed; `None`: nothing to remove.
    pub policy: Option<Value>,
    /// The notifications without the targets no longer allowed; `None`: nothing to remove.
    pub notifications: Option<Notifications>,
    pub removed: Vec<String>,
}

/// What `policy` and `notifications` (as S3 holds them; `None`: none, or not read) grant
/// beyond `allowed`, and the documents without it.
pub fn withdrawal(
    policy: Option<&Value>,
    notifications: Option<&Notifications>,
    allowed: &Allowed,
) -> Withdrawal {
    let mut removed = vec![];
    let policy = policy.and_then(|p| narrowed_policy(p, allowed, &mut removed));
    let notifications =
        notifications.and_then(|n| narrowed_notifications(n, allowed, &mut removed));
    Withdrawal {
        policy,
        notifications,
        removed,
    }
}

/// `policy` without its `Allow` statements naming a principal no longer allowed; `None` when
/// every statement stays.
fn narrowed_policy(policy: &Value, allowed: &Allowed, removed: &mut Vec<String>) -> Option<Value> {
    let statements = match &policy["Statement"] {
        Value::Array(list) => list.clone(),
        one @ Value::Object(_) => vec![one.clone()],
        _ => return None,
    };
    let before = removed.len();
    let kept: Vec<Value> = statements
        .into_iter()
        .enumerate()
        .filter(|(i, st)| match refused_principal(st, allowed) {
            None => true,
            Some(why) => {
                let name = st["Sid"]
                    .as_str()
                    .map_or(format!("#{i}"), |s| format!("{s:?}"));
                removed.push(format!("bucket policy statement {name} ({why})"));
                false
            }
        })
        .map(|(_, st)| st)
        .collect();
    (removed.len() > before).then(|| {
        let mut p = policy.clone();
        p["Statement"] = Value::Array(kept);
        p
    })
}

/// Why `st` may no longer stand: an `Allow` naming a principal outside the flags or the
/// class's list (or everyone, or by `NotPrincipal`). The operator's own logging grant stays.
fn refused_principal(st: &Value, allowed: &Allowed) -> Option<String> {
    if st["Effect"].as_str() != Some("Allow") {
        return None;
    }
    let principals = principals(st);
    let logging = [("Service", LOGGING_SERVICE.to_string())];
    if st["Sid"].as_str() == Some(LOGGING_SID) && principals == logging {
        return None;
    }
    if st.get("NotPrincipal").is_some() || principals.is_empty() {
        return Some("an Allow by NotPrincipal, for everyone else: not allowed".into());
    }
    principals.iter().find_map(|(kind, p)| {
        let (flags, class) = match *kind {
            "AWS" if p != "*" => (
                policy::principal_allowed(p, allowed.account, allowed.principals),
                class_list(allowed, |c| c.principals)
                    .is_none_or(|c| policy::principal_allowed(p, allowed.account, c)),
            ),
            "Service" => (
                allowed.principals.contains(p),
                class_list(allowed, |c| c.principals).is_none_or(|c| c.contains(p)),
            ),
            _ => (false, true),
        };
        rule(
            flags,
            class,
            allowed,
            "--allowed-policy-principals",
            "allowedPolicyPrincipals",
        )
        .map(|rule| format!("principal {kind} {p}: {rule}"))
    })
}

/// The class's list chosen by `pick`, if the class has one.
fn class_list<'a>(
    allowed: &Allowed<'a>,
    pick: impl Fn(&ClassLists<'a>) -> Option<&'a [String]>,
) -> Option<&'a [String]> {
    allowed.class.as_ref().and_then(pick)
}

/// Which list refuses: the operator's flag first, then the class's constraint.
fn rule(
    flags: bool,
    class: bool,
    allowed: &Allowed,
    flag: &str,
    constraint: &str,
) -> Option<String> {
    if !flags {
        return Some(format!("not on the operator's {flag}"));
    }
    let name = allowed.class.as_ref().map_or("", |c| c.name.as_str());
    (!class).then(|| format!("not on BucketClass {name} constraints.{constraint}"))
}

/// Every principal a statement names, as (kind, value): `Principal: "*"` is ("*", "*").
fn principals(st: &Value) -> Vec<(&'static str, String)> {
    let strings = |v: &Value| -> Vec<String> {
        match v {
            Value::String(s) => vec![s.clone()],
            Value::Array(a) => a
                .iter()
                .map(|s| s.as_str().unwrap_or("*").to_string())
                .collect(),
            _ => vec!["*".into()],
        }
    };
    match &st["Principal"] {
        Value::Object(m) => m
            .iter()
            .flat_map(|(k, v)| {
                let kind = match k.as_str() {
                    "AWS" => "AWS",
                    "Service" => "Service",
                    _ => "other",
                };
                strings(v).into_iter().map(move |p| (kind, p))
            })
            .collect(),
        Value::Null => vec![],
        other => strings(other).into_iter().map(|p| ("*", p)).collect(),
    }
}

/// `n` without the queues and topics no longer allowed; `None` when every target stays.
fn narrowed_notifications(
    n: &Notifications,
    allowed: &Allowed,
    removed: &mut Vec<String>,
) -> Option<Notifications> {
    let before = removed.len();
    let mut out = n.clone();
    let class = class_list(allowed, |c| c.targets);
    let keep = |kind: &str, t: &NotificationTarget, removed: &mut Vec<String>| {
        let flags = allowed.targets.iter().any(|e| allows(e, &t.arn));
        let by_class = class.is_none_or(|c| c.iter().any(|e| allows(e, &t.arn)));
        let flag = "--allowed-notification-targets";
        match rule(flags, by_class, allowed, flag, "allowedNotificationTargets") {
            None => true,
            Some(rule) => {
                removed.push(format!("notification {kind} {}: {rule}", t.arn));
                false
            }
        }
    };
    out.queues.retain(|t| keep("queue", t, removed));
    out.topics.retain(|t| keep("topic", t, removed));
    (removed.len() > before).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const ACCOUNT: &str = "123456789012";

    fn flags() -> (Vec<String>, Vec<String>) {
        (
            vec!["111111111111".into(), "222222222222".into()],
            vec!["arn:aws:sqs:us-east-1:123456789012:*".into()],
        )
    }

    fn policy(statements: Vec<Value>) -> Value {
        let tls = json!({"Sid": policy::TLS_ONLY_SID, "Effect": "Deny", "Principal": "*",
            "Action": "s3:*", "Resource": ["arn:aws:s3:::b", "arn:aws:s3:::b/*"]});
        let all: Vec<Value> = [tls].into_iter().chain(statements).collect();
        json!({"Version": "2012-10-17", "Statement": all})
    }

    fn allow(sid: &str, principal: Value) -> Value {
        json!({"Sid": sid, "Effect": "Allow", "Principal": principal,
            "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/*"})
    }

    fn sids(p: &Value) -> Vec<&str> {
        p["Statement"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["Sid"].as_str().unwrap_or(""))
            .collect()
    }

    #[test]
    fn nothing_is_withdrawn_while_everything_is_allowed() {
        let (principals, targets) = flags();
        let allowed = Allowed {
            account: ACCOUNT,
            principals: &principals,
            targets: &targets,
            class: None,
        };
        let p = policy(vec![
            allow("Partner", json!({"AWS": "arn:aws:iam::111111111111:root"})),
            allow(
                "Own",
                json!({"AWS": ["arn:aws:iam::123456789012:role/app"]}),
            ),
            json!({"Sid": "Vpc", "Effect": "Deny", "Principal": "*", "Action": "s3:*"}),
            json!({"Sid": LOGGING_SID, "Effect": "Allow", "Principal": {"Service": LOGGING_SERVICE},
                "Action": "s3:PutObject"}),
        ]);
        let n = Notifications {
            event_bridge: true,
            queues: vec![target("arn:aws:sqs:us-east-1:123456789012:q")],
            topics: vec![],
        };
        assert_eq!(
            withdrawal(Some(&p), Some(&n), &allowed),
            Withdrawal::default()
        );
        assert_eq!(withdrawal(None, None, &allowed), Withdrawal::default());
    }

    fn target(arn: &str) -> NotificationTarget {
        NotificationTarget {
            id: Some(arn.rsplit(':').next().unwrap().into()),
            arn: arn.into(),
            events: vec!["s3:ObjectCreated:*".into()],
            filter: None,
        }
    }

    /// A tighter class withdraws what it no longer allows, and names the rule; the rest of the
    /// documents (the TLS deny, Deny statements, the logging grant, EventBridge) stays.
    #[test]
    fn a_tighter_class_withdraws_statements_and_targets_naming_the_rule() {
        let (principals, targets) = flags();
        let none: Vec<String> = vec![];
        let team_a = vec!["arn:aws:sqs:us-east-1:123456789012:team-a-*".to_string()];
        let allowed = Allowed {
            account: ACCOUNT,
            principals: &principals,
            targets: &targets,
            class: Some(ClassLists {
                name: "sandbox".into(),
                principals: Some(&none),
                targets: Some(&team_a),
            }),
        };
        let p = policy(vec![
            allow("Partner", json!({"AWS": "arn:aws:iam::111111111111:root"})),
            allow("Own", json!({"AWS": "arn:aws:iam::123456789012:role/app"})),
            json!({"Sid": "Vpc", "Effect": "Deny", "Principal": "*", "Action": "s3:*"}),
        ]);
        let n = Notifications {
            event_bridge: true,
            queues: vec![
                target("arn:aws:sqs:us-east-1:123456789012:team-a-q"),
                target("arn:aws:sqs:us-east-1:123456789012:team-b-q"),
            ],
            topics: vec![],
        };
        let w = withdrawal(Some(&p), Some(&n), &allowed);
        assert_eq!(
            sids(w.policy.as_ref().unwrap()),
            [policy::TLS_ONLY_SID, "Own", "Vpc"]
        );
        let n = w.notifications.unwrap();
        assert!(n.event_bridge);
        assert_eq!(
            n.queues,
            [target("arn:aws:sqs:us-east-1:123456789012:team-a-q")]
        );
        assert_eq!(
            w.removed,
            [
                "bucket policy statement \"Partner\" (principal AWS arn:aws:iam::111111111111:root: not on BucketClass sandbox constraints.allowedPolicyPrincipals)",
                "notification queue arn:aws:sqs:us-east-1:123456789012:team-b-q: not on BucketClass sandbox constraints.allowedNotificationTargets",
            ]
        );
    }

    /// The flags are the ceiling: what they no longer list goes, class or not, and so does an
    /// Allow for everyone however it is written.
    #[test]
    fn the_flags_withdraw_what_they_no_longer_list_and_public_grants_always_go() {
        let principals = vec!["222222222222".to_string()];
        let targets: Vec<String> = vec![];
        let allowed = Allowed {
            account: ACCOUNT,
            principals: &principals,
            targets: &targets,
            class: None,
        };
        let p = policy(vec![
            allow(
                "Partner",
                json!({"AWS": ["arn:aws:iam::222222222222:root", "111111111111"]}),
            ),
            allow("Kept", json!({"AWS": "arn:aws:iam::222222222222:role/r"})),
            allow("Public", json!("*")),
            allow("AlsoPublic", json!({"AWS": "*"})),
            allow("Svc", json!({"Service": "sns.amazonaws.com"})),
            json!({"Effect": "Allow", "NotPrincipal": {"AWS": "arn:aws:iam::123456789012:root"}, "Action": "s3:GetObject"}),
        ]);
        let n = Notifications {
            event_bridge: false,
            queues: vec![],
            topics: vec![target("arn:aws:sns:us-east-1:123456789012:t")],
        };
        let w = withdrawal(Some(&p), Some(&n), &allowed);
        assert_eq!(
            sids(w.policy.as_ref().unwrap()),
            [policy::TLS_ONLY_SID, "Kept"]
        );
        assert!(w.notifications.unwrap().topics.is_empty());
        assert_eq!(w.removed.len(), 6, "{:?}", w.removed);
        assert!(
            w.removed[0].contains(
                "principal AWS 111111111111: not on the operator's --allowed-policy-principals"
            ),
            "{:?}",
            w.removed
        );
        assert!(
            w.removed[4].starts_with("bucket policy statement #6 (an Allow by NotPrincipal"),
            "{:?}",
            w.removed
        );
        assert!(w.removed[5].contains("not on the operator's --allowed-notification-targets"));
        // A single statement (not a list) is read too.
        let one = json!({"Statement": allow("Public", json!("*"))});
        let w = withdrawal(Some(&one), None, &allowed);
        assert_eq!(w.policy.unwrap()["Statement"], json!([]));
    }
}
