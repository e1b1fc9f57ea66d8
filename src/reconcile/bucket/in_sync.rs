//! What an `Observe` pass reports instead of writing: each field a `Manage` pass would change,
//! from what S3 holds to what the spec says (pure). The writes themselves are [`plan`]'s; this
//! only says them field by field, so switching to `Manage` applies exactly what was listed.
//!
//! The operator's ownership tags (`s3.operator.dev/...`) are its bookkeeping, not the spec's:
//! they are left out, and `Manage` adds them with the first tag write.
//!
//! [`plan`]: super::plan

use std::collections::BTreeMap;
use std::fmt::Debug;

use serde_json::Value;

use super::{BucketState, Change, Desired, Found, replication};
use crate::api::{PlannedChange, Versioning};
use crate::aws::s3::replication::ReplicationConfig;
use crate::aws::{naming, policy};

/// How many differences status lists; the `InSync` condition gives the full count.
pub const LISTED: usize = 20;
/// How long a value in the list may be, in characters (policies can be long).
const VALUE_CHARS: usize = 160;
/// What AWS holds where it holds nothing.
pub(crate) const ABSENT: &str = "absent";

/// The fields `changes` (the plan of `desired` against `found`) would change.
pub fn differences(desired: &Desired, found: &Found, changes: &[Change]) -> Vec<PlannedChange> {
    let Found::Present(state) = found else {
        return vec![entry("bucket", ABSENT, "present")];
    };
    changes
        .iter()
        .flat_map(|c| of_change(desired, state, c))
        .collect()
}

fn of_change(d: &Desired, s: &BucketState, change: &Change) -> Vec<PlannedChange> {
    match change {
        Change::Create => vec![entry("bucket", ABSENT, "present")],
        Change::Tags => tags(&s.tags, &d.tags),
        Change::PublicAccessBlock => {
            let from = s.public_access_block.map(|p| flags(&p));
            let to = flags(&d.public_access_block);
            (to.iter().enumerate())
                .filter(|(i, (_, want))| from.as_ref().map(|f| f[*i].1) != Some(*want))
                .map(|(i, (name, want))| {
                    let had = from.as_ref().map_or(ABSENT.into(), |f| f[i].1.to_string());
                    entry(
                        &format!("publicAccessBlock.{name}"),
                        &had,
                        &want.to_string(),
                    )
                })
                .collect()
        }
        Change::Encryption => vec![entry(
            "encryption",
            &shown(s.encryption.as_ref()),
            &shown(Some(&d.encryption)),
        )],
        Change::Versioning(v) => {
            let had = s.versioning.unwrap_or(Versioning::Suspended);
            vec![entry("versioning", &format!("{had:?}"), &format!("{v:?}"))]
        }
        Change::LifecycleRules => {
            let had = by_id(s.lifecycle_rules.iter().flatten(), |r| r.id.clone());
            let want = by_id(d.lifecycle_rules.iter().flatten(), |r| r.id.clone());
            keyed("lifecycleRules", &had, &want)
        }
        Change::Cors => vec![entry(
            "cors",
            &shown(s.cors.as_ref()),
            &shown(d.cors.as_ref()),
        )],
        Change::ObjectOwnership(o) => {
            let had = s
                .object_ownership
                .map_or(ABSENT.into(), |h| format!("{h:?}"));
            vec![entry("objectOwnership", &had, &format!("{o:?}"))]
        }
        Change::Policy => statements(d, s),
        Change::ObjectLock => {
            let had = s.object_lock.as_ref().and_then(|l| l.default_retention);
            let want = d.object_lock.as_ref().and_then(|l| l.default_retention);
            let field = "objectLock.defaultRetention";
            vec![entry(field, &shown(had.as_ref()), &shown(want.as_ref()))]
        }
        Change::IntelligentTiering { .. } => {
            let had = by_id(s.intelligent_tiering.iter().flatten(), |c| c.id.clone());
            let want = by_id(d.intelligent_tiering.iter().flatten(), |c| c.id.clone());
            keyed("intelligentTiering", &had, &want)
        }
        Change::TransferAcceleration(v) => {
            let had = s
                .transfer_acceleration
                .map_or(ABSENT.into(), |h| format!("{h:?}"));
            vec![entry("transferAcceleration", &had, &format!("{v:?}"))]
        }
        Change::Notifications => {
            let had = s.notifications.as_ref().map(|n| &n.config);
            let want = d.notifications.as_ref().and_then(|n| n.as_ref().ok());
            vec![entry("notifications", &shown(had), &shown(want))]
        }
        Change::Logging => {
            let show = |t: Option<&crate::aws::s3::logging::LogTarget>| {
                t.map_or("off".into(), |t| format!("{}/{}", t.bucket, t.prefix))
            };
            let had = s
                .logging
                .as_ref()
                .map_or(ABSENT.into(), |l| show(l.as_ref()));
            let want = show(d.logging.as_ref().and_then(Option::as_ref));
            vec![entry("logging", &had, &want)]
        }
        Change::ReplicationRole(write) => {
            let role = d.replication.as_ref().and_then(Option::as_ref);
            let name = role.map_or("", |w| w.role.as_str());
            let had = match write {
                replication::RoleWrite::Create => ABSENT,
                replication::RoleWrite::Update { .. } => "differs",
            };
            vec![entry("replication.role", had, &format!("IAM role {name}"))]
        }
        Change::Replication => {
            let show = |c: Option<&ReplicationConfig>| {
                c.map_or(ABSENT.into(), |c| {
                    let rules: Vec<String> = (c.rules.iter())
                        .map(|r| format!("{} -> {}", r.id, r.destination))
                        .collect();
                    rules.join(", ")
                })
            };
            let had = s.replication.as_ref().and_then(|r| r.config.as_ref());
            let want = d.replication.as_ref().and_then(Option::as_ref);
            vec![entry(
                "replication",
                &show(had),
                &show(want.map(|w| &w.config)),
            )]
        }
        Change::ReplicationOff => vec![entry("replication", "present", "off")],
        Change::ReplicationRoleOff => vec![entry("replication.role", "present", ABSENT)],
    }
}

/// The tags that differ, the operator's own left out.
fn tags(had: &BTreeMap<String, String>, want: &BTreeMap<String, String>) -> Vec<PlannedChange> {
    let theirs = |m: &BTreeMap<String, String>| -> BTreeMap<String, Value> {
        m.iter()
            .filter(|(k, _)| !k.starts_with(crate::api::DOMAIN_PREFIX))
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect()
    };
    keyed("tags", &theirs(had), &theirs(want))
}

/// The bucket policy's statements that differ, by Sid (a statement without one by its place).
fn statements(d: &Desired, s: &BucketState) -> Vec<PlannedChange> {
    let partition = naming::partition(&d.region);
    let of = |p: Option<&Value>| by_sid(p.map(|p| policy::normalize_policy(p, partition)).as_ref());
    let want = d.policy.as_ref().ok();
    keyed("policy.statement", &of(s.policy.as_ref()), &of(want))
}

/// A policy document's statements by Sid (a statement without one by its place, `#0`).
pub(crate) fn by_sid(doc: Option<&Value>) -> BTreeMap<String, Value> {
    let list = doc
        .and_then(|p| p["Statement"].as_array().cloned())
        .unwrap_or_default();
    (list.into_iter().enumerate())
        .map(|(i, st)| {
            let sid = st["Sid"].as_str().map_or(format!("#{i}"), str::to_string);
            (sid, st)
        })
        .collect()
}

/// The entries of two maps by key that differ: `field[key]`.
pub(crate) fn keyed(
    field: &str,
    had: &BTreeMap<String, Value>,
    want: &BTreeMap<String, Value>,
) -> Vec<PlannedChange> {
    let keys: std::collections::BTreeSet<&String> = had.keys().chain(want.keys()).collect();
    keys.into_iter()
        .filter(|k| had.get(*k) != want.get(*k))
        .map(|k| {
            let show = |v: Option<&Value>| v.map_or(ABSENT.into(), short);
            entry(
                &format!("{field}[{k}]"),
                &show(had.get(k)),
                &show(want.get(k)),
            )
        })
        .collect()
}

fn by_id<'a, T: serde::Serialize + 'a>(
    items: impl Iterator<Item = &'a T>,
    id: impl Fn(&T) -> String,
) -> BTreeMap<String, Value> {
    items
        .map(|i| (id(i), serde_json::to_value(i).unwrap_or(Value::Null)))
        .collect()
}

fn flags(p: &crate::api::PublicAccessBlock) -> [(&'static str, bool); 4] {
    [
        ("blockPublicAcls", p.block_public_acls),
        ("ignorePublicAcls", p.ignore_public_acls),
        ("blockPublicPolicy", p.block_public_policy),
        ("restrictPublicBuckets", p.restrict_public_buckets),
    ]
}

/// A value as compact JSON (or its debug form), cut to [`VALUE_CHARS`].
fn shown<T: serde::Serialize + Debug>(v: Option<&T>) -> String {
    match v {
        None => ABSENT.into(),
        Some(v) => serde_json::to_value(v).map_or_else(|_| format!("{v:?}"), |v| short(&v)),
    }
}

pub(crate) fn short(v: &Value) -> String {
    let text = match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    match text.char_indices().nth(VALUE_CHARS) {
        Some((at, _)) => format!("{}...", &text[..at]),
        None => text,
    }
}

pub(crate) fn entry(field: &str, from: &str, to: &str) -> PlannedChange {
    PlannedChange {
        field: field.into(),
        from: from.into(),
        to: to.into(),
    }
}

/// The `InSync` message for `all` differences of `subject` (`S3 bucket x`, `IAM user y`);
/// status lists the first [`LISTED`].
pub fn message(subject: &str, all: &[PlannedChange]) -> String {
    if all.is_empty() {
        return format!("{subject} is as the spec says");
    }
    let fields: Vec<&str> = all.iter().take(5).map(|c| c.field.as_str()).collect();
    let more = all.len().saturating_sub(fields.len());
    let tail = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    format!(
        "{subject} differs from the spec in {} field(s): {}{tail} (status.plan lists them)",
        all.len(),
        fields.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{
        BucketSpec, PolicyEffect, PolicyPrincipal, PolicyStatement, PublicAccessBlock,
    };
    use crate::reconcile::bucket::fixtures::{converged, desired_for, rule};
    use crate::reconcile::bucket::{Plan, plan};

    fn listed(d: &Desired, found: &Found) -> Vec<(String, String, String)> {
        let Plan::Apply(changes) = plan(d, found) else {
            panic!("not blocked")
        };
        differences(d, found, &changes)
            .into_iter()
            .map(|c| (c.field, c.from, c.to))
            .collect()
    }

    fn owned(d: &Desired, change: impl FnOnce(&mut BucketState)) -> Found {
        let mut s = converged(d);
        change(&mut s);
        Found::Present(Box::new(s))
    }

    #[test]
    fn a_bucket_as_the_spec_says_lists_nothing() {
        let d = desired_for(BucketSpec::default());
        assert_eq!(listed(&d, &owned(&d, |_| {})), vec![]);
        assert_eq!(
            message("S3 bucket b", &[]),
            "S3 bucket b is as the spec says"
        );
    }

    #[test]
    fn an_absent_bucket_is_one_difference() {
        let d = desired_for(BucketSpec::default());
        let want = vec![("bucket".into(), "absent".into(), "present".into())];
        assert_eq!(listed(&d, &Found::Absent), want);
    }

    #[test]
    fn each_field_is_said_with_what_s3_holds_and_what_the_spec_asks() {
        let d = desired_for(BucketSpec {
            versioning: Some(Versioning::Enabled),
            lifecycle_rules: Some(vec![rule("expire")]),
            tags: [("team".to_string(), "a".to_string())].into(),
            ..Default::default()
        });
        let found = owned(&d, |s| {
            s.versioning = Some(Versioning::Suspended);
            s.public_access_block = Some(PublicAccessBlock {
                block_public_policy: false,
                ..PublicAccessBlock::default()
            });
            s.lifecycle_rules = Some(vec![]);
            s.tags.insert("team".into(), "b".into());
            s.tags.insert("extra".into(), "x".into());
        });
        let got = listed(&d, &found);
        let has = |f: &str, from: &str, to: &str| {
            assert!(
                got.contains(&(f.into(), from.into(), to.into())),
                "{f}: {from} -> {to} in {got:?}"
            )
        };
        has("versioning", "Suspended", "Enabled");
        has("publicAccessBlock.blockPublicPolicy", "false", "true");
        has("tags[team]", "b", "a");
        has("tags[extra]", "x", "absent");
        assert!(
            got.iter()
                .any(|(f, from, _)| f == "lifecycleRules[expire]" && from == "absent")
        );
        assert_eq!(got.len(), 5, "nothing else: {got:?}");
    }

    #[test]
    fn the_operators_ownership_tags_are_not_a_difference() {
        let d = desired_for(BucketSpec::default());
        // An unowned bucket being observed: only the ownership tags differ.
        let found = owned(&d, |s| {
            s.tags
                .retain(|k, _| !k.starts_with(crate::api::DOMAIN_PREFIX));
        });
        assert_eq!(listed(&d, &found), vec![]);
    }

    #[test]
    fn policy_statements_are_said_by_sid() {
        let d = desired_for(BucketSpec {
            bucket_name: Some("s3op-team-b".into()),
            policy: vec![PolicyStatement {
                sid: Some("Readers".into()),
                effect: PolicyEffect::Allow,
                principal: PolicyPrincipal {
                    aws: vec!["arn:aws:iam::123456789012:root".into()],
                    service: vec![],
                },
                action: vec!["s3:GetObject".into()],
                resource: vec!["arn:aws:s3:::s3op-team-b/*".into()],
                condition: Default::default(),
            }],
            ..Default::default()
        });
        // S3 holds the TLS-only statement alone.
        let plain = desired_for(BucketSpec {
            bucket_name: Some("s3op-team-b".into()),
            ..Default::default()
        });
        let found = owned(&d, |s| s.policy = plain.policy.clone().ok());
        let got = listed(&d, &found);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].0, "policy.statement[Readers]");
        assert_eq!(got[0].1, "absent");
        assert!(got[0].2.contains("s3:GetObject"), "{}", got[0].2);
        // No policy at all: every statement is added, the TLS-only one included.
        let got = listed(&d, &owned(&d, |s| s.policy = None));
        assert!(
            got.iter()
                .any(|(f, _, _)| f == "policy.statement[DenyInsecureTransport]")
        );
    }

    #[test]
    fn long_values_are_cut_and_the_message_counts_them_all() {
        let long = Value::String("x".repeat(500));
        assert_eq!(short(&long).chars().count(), VALUE_CHARS + 3);
        let all: Vec<PlannedChange> = (0..7).map(|i| entry(&format!("f{i}"), "a", "b")).collect();
        let m = message("S3 bucket b", &all);
        assert!(
            m.contains("in 7 field(s): f0, f1, f2, f3, f4 and 2 more"),
            "{m}"
        );
    }
}
