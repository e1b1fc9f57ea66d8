//! What an `Observe` pass of a BucketAccess reports instead of writing (pure): each write its
//! plan holds, said as the field it changes, from what IAM (or the Secret) holds to what the
//! spec asks. The writes are [`plan`]'s, so switching to `Manage` makes exactly what was listed.
//! Nothing secret is ever said: keys by id, the Secret only as present or not.
//!
//! [`plan`]: super::plan

use super::plan::{Change, Found, IdentityState, Kind, Plan, Snapshot};
use crate::api::PlannedChange;
use crate::reconcile::bucket::in_sync::{ABSENT, by_sid, entry, keyed, short};

/// What the access's Secret (or ConfigMap) holds, against what a `Manage` pass would write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SecretView {
    /// As the pass would write it.
    InShape,
    Absent,
    /// There, but a pass would rewrite it (edited, or a new key or identity goes in).
    Differs,
}

/// The fields `plan` (made from `observed`) would change; `secret` and `config_map`: how the
/// Secret and the ConfigMap (when the access asks for one) compare.
pub fn differences(
    plan: &Plan,
    observed: &Snapshot,
    secret: SecretView,
    config_map: SecretView,
) -> Vec<PlannedChange> {
    let found = match &observed.identity {
        Found::Ours(state) => Some(state),
        _ => None,
    };
    let mut all: Vec<PlannedChange> = (plan.changes.iter())
        .flat_map(|c| of_change(plan, found, observed, c))
        .collect();
    let outputs = std::iter::once((format!("secret[{}]", plan.secret_name), secret));
    let config_map = (plan.config_map.as_ref()).map(|n| (format!("configMap[{n}]"), config_map));
    for (name, view) in outputs.chain(config_map) {
        match view {
            SecretView::InShape => {}
            SecretView::Absent => all.push(entry(&name, ABSENT, "present")),
            SecretView::Differs => all.push(entry(&name, "present", "rewritten")),
        }
    }
    all
}

fn of_change(
    plan: &Plan,
    found: Option<&IdentityState>,
    observed: &Snapshot,
    change: &Change,
) -> Vec<PlannedChange> {
    let identity = plan.identity().to_string();
    match change {
        // The operator's bookkeeping on the object, not the spec's.
        Change::AddFinalizer => vec![],
        Change::CreateUser => vec![entry("identity", ABSENT, &identity)],
        Change::CreateRole(_) => {
            let to = match &plan.kind {
                Kind::Role { service_account } => {
                    format!("{identity} for ServiceAccount {service_account}")
                }
                _ => identity,
            };
            vec![entry("identity", ABSENT, &to)]
        }
        Change::PutBoundary { .. } => {
            let had = found.and_then(|f| f.boundary.as_deref()).unwrap_or(ABSENT);
            vec![entry("permissionsBoundary", had, &plan.boundary)]
        }
        Change::PutTrustPolicy { trust, .. } => {
            let had = found.and_then(|f| f.trust_policy.as_ref());
            vec![entry(
                "trustPolicy",
                &had.map_or(ABSENT.into(), short),
                &short(trust),
            )]
        }
        Change::PutPolicy { .. } => statements(found, plan),
        Change::DeleteKey(id) => {
            let had = key_state(found, id);
            vec![entry(&format!("accessKeys[{id}]"), &had, ABSENT)]
        }
        Change::ReactivateKey(id) => {
            vec![entry(&format!("accessKeys[{id}]"), "Inactive", "Active")]
        }
        Change::CreateKey => vec![entry("accessKeys[new]", ABSENT, "Active")],
        Change::CreateAssociation { .. } => {
            let role = plan.association_role(None).unwrap_or(identity);
            vec![entry("podIdentityAssociation", ABSENT, &role)]
        }
        Change::UpdateAssociation { .. } => {
            let had = match &observed.association {
                Found::Ours(a) => a.role_arn.clone(),
                _ => ABSENT.into(),
            };
            let role = plan.association_role(None).unwrap_or(identity);
            vec![entry("podIdentityAssociation", &had, &role)]
        }
    }
}

/// The inline access policy's statements that differ, by Sid.
fn statements(found: Option<&IdentityState>, plan: &Plan) -> Vec<PlannedChange> {
    let had = by_sid(found.and_then(|f| f.policy.as_ref()));
    keyed("policy.statement", &had, &by_sid(Some(&plan.policy)))
}

/// A key as IAM holds it: `Active`, `Inactive`, or absent.
fn key_state(found: Option<&IdentityState>, id: &str) -> String {
    let key = found.and_then(|f| f.keys.iter().find(|k| k.id == id));
    match key {
        Some(k) if k.active => "Active".into(),
        Some(_) => "Inactive".into(),
        None => ABSENT.into(),
    }
}
