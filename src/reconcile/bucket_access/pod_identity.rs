//! `PodIdentity` credentials, planned (pure): the EKS Pod Identity association of the access's
//! ServiceAccount, to the access's own role or to the shared role narrowed by a session policy.

use kube::ResourceExt;
use serde_json::Value;

use super::plan::{Change, Found, Plan};
use crate::api::condition::Reason;
use crate::api::{BucketAccess, CredentialsType};
use crate::aws::eks::{Association, Desired};
use crate::reconcile::{Blocked, Settings};

/// EKS's limit on an association's `policy` (the session policy STS takes inline, in
/// characters).
pub const SESSION_POLICY_MAX: usize = 2048;

/// The association a `PodIdentity` access should have.
#[derive(Clone, Debug, PartialEq)]
pub struct AssociationPlan {
    /// The EKS cluster (`--eks-cluster-name`).
    pub cluster: String,
    pub namespace: String,
    pub service_account: String,
    /// The shared role (`--pod-identity-role-arn`); `None`: the access's own role.
    pub shared_role: Option<String>,
    /// Its id, once it exists.
    pub id: Option<String>,
}

/// The association `plan`'s access should have (`None` for other credential types), or why it
/// cannot: an operator without an EKS cluster, or a grant too long for a session policy.
pub(super) fn target(
    access: &BucketAccess,
    settings: &Settings,
    plan: &Plan,
) -> Result<Option<AssociationPlan>, Blocked> {
    if access.spec.credentials.type_ != CredentialsType::PodIdentity {
        return Ok(None);
    }
    let Some(cluster) = settings.eks_cluster_name.clone() else {
        let msg =
            "PodIdentity credentials need the operator's --eks-cluster-name, which is not set";
        return Err(Blocked::new(Reason::InvalidSpec, msg));
    };
    let shared_role = settings.pod_identity_role_arn.clone();
    let size = plan.policy.to_string().len();
    if shared_role.is_some() && size > SESSION_POLICY_MAX {
        // Not a quota anyone can raise: only a shorter grant (prefix) fits.
        let msg = format!(
            "the session policy of this grant is {size} characters, over EKS's limit of 2,048 for a Pod Identity association's policy: use a shorter spec.prefix"
        );
        return Err(Blocked::new(Reason::InvalidSpec, msg));
    }
    Ok(Some(AssociationPlan {
        cluster,
        namespace: access.namespace().unwrap_or_default(),
        service_account: access
            .spec
            .credentials
            .service_account_name
            .clone()
            .unwrap_or_default(),
        shared_role,
        id: None,
    }))
}

/// The association's writes: create it, or put its role and session policy back. One that is
/// not this access's (another object's or installation's, or made by hand) is never touched.
pub(super) fn plan_association(
    plan: &mut Plan,
    found: &Found<Association>,
    served: bool,
) -> Result<(), Blocked> {
    let Some(target) = &plan.association else {
        return Ok(());
    };
    let change = match found {
        Found::Foreign(who) => {
            let msg = format!(
                "the EKS Pod Identity association of ServiceAccount {} is {who}; it will not be modified",
                target.service_account
            );
            return Err(Blocked::new(Reason::OwnershipConflict, msg));
        }
        Found::Absent => Some(Change::CreateAssociation),
        Found::Ours(a) => {
            let role = plan.association_role(None).unwrap_or_else(|| {
                // The access's role is being created now, under the same ARN as before.
                let own = a
                    .role_arn
                    .ends_with(&format!(":role{}{}", plan.path, plan.name));
                if own {
                    a.role_arn.clone()
                } else {
                    String::new()
                }
            });
            let want = Desired {
                role_arn: &role,
                policy: plan.session_policy(),
            };
            (!a.is(&want)).then_some(Change::UpdateAssociation { drift: served })
        }
    };
    if let (Found::Ours(a), Some(target)) = (found, plan.association.as_mut()) {
        target.id = Some(a.id.clone());
    }
    plan.changes.extend(change);
    Ok(())
}

impl Plan {
    /// The role the association names: the shared one, else the access's own (`learned`: its
    /// ARN once created; `None` while unknown).
    pub fn association_role(&self, learned: Option<&str>) -> Option<String> {
        let target = self.association.as_ref()?;
        target
            .shared_role
            .clone()
            .or_else(|| self.arn.clone())
            .or_else(|| learned.filter(|a| !a.is_empty()).map(String::from))
    }

    /// The association's session policy: the access's grant, with the shared role only.
    pub fn session_policy(&self) -> Option<&Value> {
        let shared = self.association.as_ref()?.shared_role.is_some();
        shared.then_some(&self.policy)
    }
}
