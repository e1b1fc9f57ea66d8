//! The public contract: the `Bucket` and `BucketAccess` custom resources, and the classes
//! (`BucketClass`, `BucketAccessClass`) a platform team sets them up with.
//!
//! Every doc comment here becomes `kubectl explain` text, and every `x_kube(validation)` rule is
//! enforced by the API server, so bad input is refused before the operator ever sees it.

mod account;
mod bucket;
mod bucket_access;
mod bucket_notifications;
mod bucket_replication;
mod class;
pub mod condition;

pub use account::*;
pub use bucket::*;
pub use bucket_access::*;
pub use bucket_notifications::*;
pub use bucket_replication::*;
pub use class::*;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use kube::core::crd::merge_crds;

/// API group of both kinds.
pub const GROUP: &str = "s3.operator.dev";
/// A key under the operator's domain, `s3.operator.dev/<name>`: the one place that spells the
/// prefix of every label, annotation, tag and finalizer the operator owns (a macro, so the keys
/// stay `&'static str` constants).
#[macro_export]
macro_rules! domain_key {
    ($name:literal) => {
        concat!("s3.operator.dev/", $name)
    };
}

/// Prefix of every label, annotation, tag and finalizer the operator owns.
pub const DOMAIN_PREFIX: &str = domain_key!("");
/// Finalizer the operator puts on both kinds so AWS clean-up runs before the object goes.
pub const FINALIZER: &str = domain_key!("finalizer");
/// Annotation on a Bucket or BucketAccess: each new value (any string; a timestamp by
/// convention) asks for one full pass of the object at once, AWS read afresh.
pub const RECONCILE_REQUESTED_AT: &str = domain_key!("reconcile-requested-at");
/// Annotation on a Bucket or BucketAccess: `"true"` stops its passes (no AWS call, no write
/// but the `Paused` condition) until it is removed or set to anything else; for incidents.
pub const PAUSED: &str = domain_key!("paused");

/// Every CRD as the Rust types generate them (every packaged copy is made from these).
pub fn crds() -> Vec<CustomResourceDefinition> {
    [
        Bucket::crd(),
        BucketAccess::crd(),
        BucketClass::crd(),
        BucketAccessClass::crd(),
        AWSAccount::crd(),
    ]
    .into_iter()
    // merge_crds validates the single-version CRD shape kube expects.
    .map(|crd| merge_crds(vec![crd], "v1alpha1").expect("single-version CRD"))
    .collect()
}

/// All CRDs, as one multi-document YAML stream (what `s3-operator crd` prints).
pub fn crds_yaml() -> String {
    crds()
        .iter()
        .map(|crd| {
            format!(
                "---\n{}",
                serde_yaml::to_string(crd).expect("CRD serializes")
            )
        })
        .collect()
}
