//! The reconcilers, one module per kind. Each pass observes AWS and Kubernetes, computes a plan
//! with a pure function, and applies only the difference, so a steady-state pass writes nothing.

pub mod bucket;
pub mod bucket_access;
pub mod events;
pub mod tag_reads;

mod backoff;
mod context;
mod error;
mod settled;
mod writes;

use std::time::Duration;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;

use crate::api::condition::is_ready;
use crate::aws::tags::Owner;

pub use backoff::Backoff;
pub use context::{Context, Grants, Settings, deletion_policy};
pub use error::{Blocked, Error, refusal};
pub use events::PassEvents;
pub use settled::Settled;
pub use writes::{
    ensure_finalizer, has_finalizer, remove_finalizer, report_blocked, update_status,
};

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

/// When a successful pass wants to run again if nothing changes before (its `Action`, typed so
/// the runtime can tell a periodic resync from an early requeue).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Requeue {
    /// Only on a change (an object whose clean-up is done).
    OnChange,
    /// At the periodic resync, or what is left of it.
    Resync(Duration),
    /// Sooner than the resync: a key rotation, a grace period, the next step of a long job.
    After(Duration),
}

impl Requeue {
    pub fn action(self) -> Action {
        match self {
            Requeue::OnChange => Action::await_change(),
            Requeue::Resync(d) | Requeue::After(d) => Action::requeue(d),
        }
    }
}

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
