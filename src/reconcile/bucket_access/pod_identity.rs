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
            "the session policy of this grant is {size} characters, over EKS's limit of 2,048 for a Pod Identity association's policy: grant fewer Buckets (spec.additionalBuckets) or use shorter prefixes"
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
        Found::Absent => Some(Change::CreateAssociation { drift: served }),
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::plan::{Learned, Revoke, Snapshot, plan, withdrawal};
    use super::*;
    use crate::api::condition;
    use crate::aws::iam::Identity;
    use crate::aws::policy;
    use crate::aws::tags::Owner;
    use crate::reconcile::bucket_access::plan::{BucketFacts, IdentityState};

    const BOUNDARY: &str = "arn:aws:iam::123456789012:policy/s3-operator/c/s3-operator-boundary";
    const SHARED: &str = "arn:aws:iam::123456789012:role/platform/s3-shared";

    fn access(prefix: Option<&str>, served: bool) -> BucketAccess {
        let mut a: BucketAccess = serde_json::from_value(json!({
            "apiVersion": "s3.operator.dev/v1alpha1", "kind": "BucketAccess",
            "metadata": {"name": "a", "namespace": "ns", "uid": "uid-a", "generation": 1,
                         "finalizers": [crate::api::FINALIZER]},
            "spec": {"bucketRef": {"name": "b"}, "permission": "ReadWrite", "prefix": prefix,
                     "credentials": {"type": "PodIdentity", "serviceAccountName": "app"}},
        }))
        .unwrap();
        if served {
            let ready = condition::ready(&[], true, Reason::Available, "ok", Some(1), now());
            a.status = Some(crate::api::BucketAccessStatus {
                conditions: vec![ready],
                observed_generation: Some(1),
                ..Default::default()
            });
        }
        a
    }

    fn now() -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_800_000_000).unwrap()
    }

    fn settings(shared: bool) -> Settings {
        Settings {
            pod_identity_role_arn: shared.then(|| SHARED.to_string()),
            ..Settings::for_tests()
        }
    }

    fn owner() -> Owner {
        Owner {
            cluster: "c".into(),
            namespace: "ns".into(),
            name: "a".into(),
            uid: "uid-a".into(),
        }
    }

    fn grant(prefix: Option<&str>) -> Value {
        let permission = crate::api::Permission::ReadWrite;
        policy::access_policy("aws", "s3op-b", permission, prefix)
    }

    fn observed(identity: Found<IdentityState>, association: Found<Association>) -> Snapshot {
        Snapshot {
            bucket: BucketFacts {
                name: "s3op-b".into(),
                region: "us-east-1".into(),
                arn: "arn:aws:s3:::s3op-b".into(),
            },
            also: vec![],
            identity,
            association,
            secret: None,
            config_map: None,
            now: now(),
        }
    }

    fn role_name() -> String {
        crate::aws::naming::iam_name("ns", "a", "uid-a")
    }

    /// The cluster of `Settings::for_tests`.
    const CLUSTER_ARN: &str = "arn:aws:eks:us-east-1:123456789012:cluster/eks";

    fn role_arn() -> String {
        format!(
            "arn:aws:iam::123456789012:role/s3-operator/c/{}",
            role_name()
        )
    }

    /// The access's own role as the first pass leaves it.
    fn role() -> Found<IdentityState> {
        Found::Ours(IdentityState {
            arn: role_arn(),
            boundary: Some(BOUNDARY.into()),
            policy: Some(grant(None)),
            trust_policy: Some(policy::pod_identity_trust_policy(CLUSTER_ARN, "ns", "app")),
            keys: vec![],
        })
    }

    fn association(role: &str, policy: Option<Value>) -> Association {
        Association {
            id: "a-1".into(),
            role_arn: role.into(),
            disable_session_tags: policy.is_some(),
            policy,
            tags: owner().tags(),
        }
    }

    fn learned(arn: &str) -> Learned {
        Learned {
            arn: arn.into(),
            key: None,
            version: None,
            association: Some("a-1".into()),
        }
    }

    /// A role of its own: created with the Pod Identity trust (this cluster, namespace and
    /// ServiceAccount), its grant, then the association naming it; the Secret carries bucket
    /// facts only. The next pass writes nothing.
    #[test]
    fn a_role_per_access_is_created_then_associated_and_then_left_alone() {
        let a = access(None, false);
        let p = plan(
            &a,
            &settings(false),
            &observed(Found::Absent, Found::Absent),
        )
        .unwrap();
        let trust = policy::pod_identity_trust_policy(CLUSTER_ARN, "ns", "app");
        assert_eq!(
            p.changes,
            [
                Change::CreateRole(trust),
                Change::PutPolicy { drift: false },
                Change::CreateAssociation { drift: false }
            ]
        );
        assert_eq!(p.association_role(Some(&role_arn())), Some(role_arn()));
        assert_eq!(p.session_policy(), None, "no session policy on an own role");
        let out = p.outcome(&a, &learned(&role_arn()), Some("http://moto:5000"), now());
        let keys: Vec<&str> = out.data.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "AWS_ENDPOINT_URL_S3",
                "AWS_REGION",
                "BUCKET_ARN",
                "BUCKET_NAME"
            ],
            "no keys and no role: the Pod Identity agent hands out the credentials"
        );
        assert_eq!(out.status.role_arn, Some(role_arn()));
        assert_eq!(
            out.status.pod_identity_association_id.as_deref(),
            Some("a-1")
        );
        assert!(condition::is_ready(&out.status.conditions));

        let a = access(None, true);
        let steady = observed(role(), Found::Ours(association(&role_arn(), None)));
        let p = plan(&a, &settings(false), &steady).unwrap();
        assert_eq!(p.changes, []);
        assert_eq!(p.association.as_ref().unwrap().id.as_deref(), Some("a-1"));
    }

    /// The shared role: no IAM write at all, one association whose session policy is the
    /// access's grant (the document a role of its own would carry), with session tags off as
    /// EKS requires; the next pass writes nothing.
    #[test]
    fn the_shared_role_is_narrowed_by_the_grant_without_an_iam_write() {
        let a = access(Some("team/"), false);
        let p = plan(&a, &settings(true), &observed(Found::Absent, Found::Absent)).unwrap();
        assert_eq!(p.changes, [Change::CreateAssociation { drift: false }]);
        assert_eq!(p.session_policy(), Some(&grant(Some("team/"))));
        assert_eq!(p.association_role(None).as_deref(), Some(SHARED));
        let out = p.outcome(&a, &learned(""), None, now());
        assert_eq!(out.status.role_arn.as_deref(), Some(SHARED));
        assert!(!out.data.contains_key("AWS_ROLE_ARN"));

        let a = access(Some("team/"), true);
        let found = association(SHARED, Some(grant(Some("team/"))));
        let p = plan(
            &a,
            &settings(true),
            &observed(Found::Absent, Found::Ours(found)),
        );
        assert_eq!(p.unwrap().changes, []);
    }

    /// An association whose role, policy or session-tag setting was changed outside is put
    /// back, as drift once the spec was served.
    #[test]
    fn an_association_changed_outside_is_put_back() {
        let shared = Some(grant(None));
        let changed = [
            association("arn:aws:iam::123456789012:role/other", shared.clone()),
            association(
                SHARED,
                Some(json!({"Version": "2012-10-17", "Statement": []})),
            ),
            association(SHARED, None),
            Association {
                disable_session_tags: false,
                ..association(SHARED, shared)
            },
        ];
        for found in changed {
            for served in [false, true] {
                let o = observed(Found::Absent, Found::Ours(found.clone()));
                let p = plan(&access(None, served), &settings(true), &o).unwrap();
                let update = Change::UpdateAssociation { drift: served };
                assert_eq!(p.changes, [update], "{found:?}");
            }
        }
        // Deleted outside: made again, as drift.
        let o = observed(Found::Absent, Found::Absent);
        let p = plan(&access(None, true), &settings(true), &o).unwrap();
        assert_eq!(p.changes, [Change::CreateAssociation { drift: true }]);
        // A role of its own: the association must name it.
        let o = observed(role(), Found::Ours(association(SHARED, None)));
        let p = plan(&access(None, true), &settings(false), &o).unwrap();
        assert_eq!(p.changes, [Change::UpdateAssociation { drift: true }]);
    }

    /// A role deleted outside is created again under the same ARN: the association that
    /// names it needs no write.
    #[test]
    fn a_recreated_role_keeps_its_association() {
        let o = observed(Found::Absent, Found::Ours(association(&role_arn(), None)));
        let p = plan(&access(None, true), &settings(false), &o).unwrap();
        assert!(
            !p.changes
                .iter()
                .any(|c| matches!(c, Change::UpdateAssociation { .. }))
        );
        assert!(matches!(p.changes[0], Change::CreateRole(_)), "{p:?}");
    }

    /// Another object's, installation's or hand-made association on the ServiceAccount is
    /// never touched, and the refusal names none of them.
    #[test]
    fn an_association_of_someone_else_is_never_touched() {
        for who in [
            "held by another object of this installation",
            "held by another installation",
            "not made by the operator",
        ] {
            for shared in [false, true] {
                let o = observed(Found::Absent, Found::Foreign(who.into()));
                let refused = plan(&access(None, true), &settings(shared), &o).unwrap_err();
                assert_eq!(refused.reason, Reason::OwnershipConflict);
                assert_eq!(
                    refused.message,
                    format!(
                        "the EKS Pod Identity association of ServiceAccount app is {who}; it will not be modified"
                    )
                );
            }
        }
    }

    /// Without the operator's EKS cluster nothing can be associated; a grant over EKS's
    /// 2,048 characters cannot be a session policy (a role of its own takes it).
    #[test]
    fn no_cluster_or_a_grant_too_long_is_refused_before_any_write() {
        let o = observed(Found::Absent, Found::Absent);
        let s = Settings {
            eks_cluster_name: None,
            ..settings(false)
        };
        let refused = plan(&access(None, false), &s, &o).unwrap_err();
        assert_eq!(refused.reason, Reason::InvalidSpec);
        assert!(refused.message.contains("--eks-cluster-name"), "{refused}");

        let long = "p".repeat(800);
        let refused = plan(&access(Some(&long), false), &settings(true), &o).unwrap_err();
        assert_eq!(refused.reason, Reason::InvalidSpec);
        assert!(refused.message.contains("2,048"), "{refused}");
        assert!(grant(Some(&long)).to_string().len() > SESSION_POLICY_MAX);
        let fits = "p".repeat(500);
        assert!(grant(Some(&fits)).to_string().len() <= SESSION_POLICY_MAX);
        assert!(plan(&access(Some(&fits), false), &settings(true), &o).is_ok());
        assert!(plan(&access(Some(&long), false), &settings(false), &o).is_ok());
    }

    /// A grant that may no longer stand: the shared role's association goes (its session
    /// policy is all that narrows the role); a role of its own loses its policy and keeps its
    /// association (then unread, so passed as absent).
    #[test]
    fn a_withdrawal_deletes_the_shared_association_or_the_own_roles_policy() {
        let why = Blocked::new(Reason::BucketNotFound, "Bucket b does not exist");
        let role_id = Identity::Role(role_name());
        let ours = Found::Ours(association(SHARED, Some(grant(None))));
        let w = withdrawal(role_id.clone(), &Found::Absent, &ours, why.clone());
        assert_eq!(w.changes, [Revoke::DeleteAssociation("a-1".into())]);
        assert!(
            w.note()
                .unwrap()
                .ends_with("deleted EKS Pod Identity association a-1")
        );
        let foreign = Found::Foreign("held by another installation".into());
        let w = withdrawal(role_id.clone(), &Found::Absent, &foreign, why.clone());
        assert_eq!(w.changes, [], "someone else's association stays");
        let w = withdrawal(role_id, &role(), &Found::Absent, why);
        assert_eq!(w.changes, [Revoke::DeletePolicy]);
    }
}
