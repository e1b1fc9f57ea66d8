//! The objects the reconcilers own: their kind, their key, whose AWS resources they own.

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;

use crate::api::condition::is_ready;
use crate::aws::tags::Owner;

/// What the reconcilers read and write: a namespaced kind with a typed body.
pub trait Object:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + DeserializeOwned
    + std::fmt::Debug
{
}

impl<K> Object for K where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
{
}

/// Field manager of every write the operator makes.
pub const MANAGER: &str = "s3-operator";

/// The Kubernetes object that owns what the operator creates in AWS for `obj`.
pub fn owner<K: Resource>(obj: &K, cluster: &str) -> Owner {
    Owner {
        cluster: cluster.to_string(),
        namespace: obj.namespace().unwrap_or_default(),
        name: obj.name_any(),
        uid: obj.uid().unwrap_or_default(),
    }
}

/// Was the current spec (`generation`) already served, Ready? Then a change found in AWS or in
/// the Secret was made outside the operator: drift.
pub fn served(generation: Option<i64>, observed: Option<i64>, conditions: &[Condition]) -> bool {
    observed == generation && is_ready(conditions)
}

/// The key of an object in `Settled` and in the backoff map.
pub fn object_key<K: Resource<DynamicType = ()>>(obj: &K) -> String {
    let meta = obj.meta();
    let (ns, name) = (
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default(),
    );
    format!("{}/{ns}/{name}", K::kind(&()))
}
