//! Ownership tags: who in which cluster owns an AWS resource. The operator never changes or
//! deletes a resource whose tags name another owner.

use std::collections::BTreeMap;

pub const CLUSTER: &str = crate::domain_key!("cluster");
pub const NAMESPACE: &str = crate::domain_key!("namespace");
pub const NAME: &str = crate::domain_key!("name");
pub const UID: &str = crate::domain_key!("uid");
/// The ownership keys, all four on every resource the operator owns.
pub const KEYS: [&str; 4] = [CLUSTER, NAMESPACE, NAME, UID];
/// Where a retained bucket came from: only that namespace (of that cluster) may adopt it back,
/// unless the operator is started with `--allow-cross-namespace-adoption`.
pub const RELEASED_CLUSTER: &str = crate::domain_key!("released-from-cluster");
pub const RELEASED_NAMESPACE: &str = crate::domain_key!("released-from-namespace");

/// The Kubernetes object that owns an AWS resource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    pub cluster: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// What a resource's tags say about its owner, seen from one owner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ownership {
    /// Tagged as ours (same cluster and UID).
    Ours,
    /// No ownership tags at all.
    Unowned,
    /// Retained by a deleted object: no owner, but it remembers its cluster and namespace.
    Released { cluster: String, namespace: String },
    /// Tagged for another object, cluster or installation: a description that names none of
    /// them (it reaches the status of a tenant that does not own it).
    Foreign(String),
}

impl Owner {
    pub fn tags(&self) -> BTreeMap<String, String> {
        KEYS.iter()
            .zip([&self.cluster, &self.namespace, &self.name, &self.uid])
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    pub fn judge(&self, tags: &BTreeMap<String, String>) -> Ownership {
        if !KEYS.iter().any(|k| tags.contains_key(*k)) {
            return match (tags.get(RELEASED_CLUSTER), tags.get(RELEASED_NAMESPACE)) {
                (None, None) => Ownership::Unowned,
                (c, n) => Ownership::Released {
                    cluster: c.cloned().unwrap_or_default(),
                    namespace: n.cloned().unwrap_or_default(),
                },
            };
        }
        if tags.get(CLUSTER) == Some(&self.cluster) && tags.get(UID) == Some(&self.uid) {
            return Ownership::Ours;
        }
        // Said to the tenant asking: never which namespace or object holds it.
        Ownership::Foreign(if tags.get(CLUSTER) == Some(&self.cluster) {
            "held by another object of this installation".into()
        } else {
            "held by another installation".into()
        })
    }
}

/// User tags plus ownership tags; ownership keys always win.
pub fn with_ownership(user: &BTreeMap<String, String>, owner: &Owner) -> BTreeMap<String, String> {
    let mut all = user.clone();
    all.extend(owner.tags());
    all
}

/// What a retained resource keeps: `tags` without the ownership keys, plus where it came from.
pub fn released(tags: &BTreeMap<String, String>, owner: &Owner) -> BTreeMap<String, String> {
    let mut kept: BTreeMap<String, String> = tags
        .iter()
        .filter(|(k, _)| !KEYS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    kept.insert(RELEASED_CLUSTER.into(), owner.cluster.clone());
    kept.insert(RELEASED_NAMESPACE.into(), owner.namespace.clone());
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner() -> Owner {
        Owner {
            cluster: "c".into(),
            namespace: "ns".into(),
            name: "n".into(),
            uid: "u1".into(),
        }
    }

    #[test]
    fn ownership_is_judged_by_cluster_and_uid() {
        let o = owner();
        assert_eq!(o.judge(&o.tags()), Ownership::Ours);
        assert_eq!(
            o.judge(&BTreeMap::from([("team".into(), "x".into())])),
            Ownership::Unowned
        );
        let mut other = o.tags();
        other.insert(UID.into(), "u2".into());
        let held = o.judge(&other);
        assert_eq!(
            held,
            Ownership::Foreign("held by another object of this installation".into())
        );
        other.insert(CLUSTER.into(), "c2".into());
        assert_eq!(
            o.judge(&other),
            Ownership::Foreign("held by another installation".into())
        );
    }

    #[test]
    fn ownership_tags_cannot_be_overridden() {
        let user = BTreeMap::from([
            (UID.to_string(), "evil".to_string()),
            ("team".into(), "a".into()),
        ]);
        let all = with_ownership(&user, &owner());
        assert_eq!(all[UID], "u1");
        assert_eq!(all["team"], "a");
        let kept = released(&all, &owner());
        assert_eq!(kept["team"], "a");
        assert!(!kept.contains_key(UID) && !kept.contains_key(NAME));
        assert_eq!(
            owner().judge(&kept),
            Ownership::Released {
                cluster: "c".into(),
                namespace: "ns".into()
            }
        );
    }
}
