//! EKS calls for `PodIdentity` credentials: the Pod Identity association of one ServiceAccount.

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;

use super::{Aws, Error};

const EKS: &str = "eks";

/// A Pod Identity association as the operator compares it.
#[derive(Clone, Debug, PartialEq)]
pub struct Association {
    pub id: String,
    pub role_arn: String,
    /// The session policy that narrows the role, if any.
    pub policy: Option<Value>,
    pub disable_session_tags: bool,
    pub tags: BTreeMap<String, String>,
}

/// What an association should be: its role, and the session policy that narrows it (which EKS
/// takes only with its session tags disabled).
#[derive(Clone, Debug, PartialEq)]
pub struct Desired<'a> {
    pub role_arn: &'a str,
    pub policy: Option<&'a Value>,
}

impl Desired<'_> {
    fn disable_session_tags(&self) -> bool {
        self.policy.is_some()
    }
}

/// The association as EKS describes it.
fn association(a: aws_sdk_eks::types::PodIdentityAssociation) -> Association {
    Association {
        id: a.association_id.unwrap_or_default(),
        role_arn: a.role_arn.unwrap_or_default(),
        policy: a
            .policy
            .as_deref()
            .and_then(|p| serde_json::from_str(p).ok()),
        disable_session_tags: a.disable_session_tags.unwrap_or(false),
        tags: a.tags.unwrap_or_default().into_iter().collect(),
    }
}

impl Aws {
    pub fn eks(&self) -> &aws_sdk_eks::Client {
        &self.eks
    }

    /// The association of ServiceAccount `sa` in `namespace` (EKS allows one): a List, and a
    /// Describe only when one exists.
    pub async fn find_association(
        &self,
        cluster: &str,
        namespace: &str,
        sa: &str,
    ) -> Result<Option<Association>, Error> {
        let req = self
            .eks()
            .list_pod_identity_associations()
            .cluster_name(cluster)
            .namespace(namespace)
            .service_account(sa)
            .send();
        let listed = Aws::call(EKS, "ListPodIdentityAssociations", req).await?;
        let Some(id) = listed
            .associations
            .unwrap_or_default()
            .into_iter()
            .find_map(|a| a.association_id)
        else {
            return Ok(None);
        };
        let req = self
            .eks()
            .describe_pod_identity_association()
            .cluster_name(cluster)
            .association_id(id)
            .send();
        match Aws::call(EKS, "DescribePodIdentityAssociation", req).await {
            Ok(out) => Ok(out.association.map(association)),
            // Deleted between the two reads.
            Err(e) if e.not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Every association of the cluster: (id, namespace, ServiceAccount), pages of up to 100
    /// (the orphan sweep's list; EKS's list carries no tags).
    pub async fn associations(
        &self,
        cluster: &str,
    ) -> Result<Vec<(String, String, String)>, Error> {
        let (mut found, mut token) = (vec![], None);
        loop {
            let req = self
                .eks()
                .list_pod_identity_associations()
                .cluster_name(cluster)
                .max_results(100)
                .set_next_token(token)
                .send();
            let out = Aws::call(EKS, "ListPodIdentityAssociations", req).await?;
            found.extend(
                out.associations
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(|a| Some((a.association_id?, a.namespace?, a.service_account?))),
            );
            match out.next_token {
                Some(t) if !t.is_empty() => token = Some(t),
                _ => return Ok(found),
            }
        }
    }

    /// The association's tags; `None` when it no longer exists.
    pub async fn association_tags(
        &self,
        cluster: &str,
        id: &str,
    ) -> Result<Option<BTreeMap<String, String>>, Error> {
        let req = self
            .eks()
            .describe_pod_identity_association()
            .cluster_name(cluster)
            .association_id(id)
            .send();
        match Aws::call(EKS, "DescribePodIdentityAssociation", req).await {
            Ok(out) => Ok(out.association.map(|a| association(a).tags)),
            Err(e) if e.not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Creates the association of `sa`, tagged with `tags` (the operator's ownership tags);
    /// returns its id.
    pub async fn create_association(
        &self,
        cluster: &str,
        namespace: &str,
        sa: &str,
        want: &Desired<'_>,
        tags: &BTreeMap<String, String>,
    ) -> Result<String, Error> {
        let tags: HashMap<String, String> = tags.clone().into_iter().collect();
        let req = self
            .eks()
            .create_pod_identity_association()
            .cluster_name(cluster)
            .namespace(namespace)
            .service_account(sa)
            .role_arn(want.role_arn)
            .set_policy(want.policy.map(Value::to_string))
            .disable_session_tags(want.disable_session_tags())
            .set_tags(Some(tags))
            .send();
        let out = Aws::call(EKS, "CreatePodIdentityAssociation", req).await?;
        Ok(out
            .association
            .and_then(|a| a.association_id)
            .unwrap_or_default())
    }

    /// Puts the association's role and session policy back to `want` (an empty policy removes
    /// one).
    pub async fn update_association(
        &self,
        cluster: &str,
        id: &str,
        want: &Desired<'_>,
    ) -> Result<(), Error> {
        let req = self
            .eks()
            .update_pod_identity_association()
            .cluster_name(cluster)
            .association_id(id)
            .role_arn(want.role_arn)
            .policy(want.policy.map(Value::to_string).unwrap_or_default())
            .disable_session_tags(want.disable_session_tags())
            .send();
        Aws::call(EKS, "UpdatePodIdentityAssociation", req).await?;
        Ok(())
    }

    /// Deletes the association; one already gone is deleted.
    pub async fn delete_association(&self, cluster: &str, id: &str) -> Result<(), Error> {
        let req = self
            .eks()
            .delete_pod_identity_association()
            .cluster_name(cluster)
            .association_id(id)
            .send();
        match Aws::call(EKS, "DeletePodIdentityAssociation", req).await {
            Err(e) if !e.not_found() => Err(e),
            _ => Ok(()),
        }
    }
}

impl Association {
    /// Is it what `want` says? The session-tag setting counts only as EKS ties it to a policy.
    pub fn is(&self, want: &Desired<'_>) -> bool {
        self.role_arn == want.role_arn
            && self.policy.as_ref() == want.policy
            && self.disable_session_tags == want.disable_session_tags()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_association_matches_only_its_role_policy_and_tag_setting() {
        let policy = serde_json::json!({"Version": "2012-10-17", "Statement": []});
        let shared = Desired {
            role_arn: "arn:aws:iam::1:role/shared",
            policy: Some(&policy),
        };
        let found = Association {
            id: "a-1".into(),
            role_arn: shared.role_arn.into(),
            policy: Some(policy.clone()),
            disable_session_tags: true,
            tags: BTreeMap::new(),
        };
        assert!(found.is(&shared));
        let own = Desired {
            role_arn: "arn:aws:iam::1:role/own",
            policy: None,
        };
        assert!(!found.is(&own), "another role and no policy");
        let without_policy = Association {
            policy: None,
            ..found.clone()
        };
        assert!(!without_policy.is(&shared), "the policy was removed");
        let tagged = Association {
            disable_session_tags: false,
            ..found
        };
        assert!(!tagged.is(&shared), "a policy needs the session tags off");
    }
}
