//! The public contract: the `Bucket` and `BucketAccess` custom resources.
//!
//! Every doc comment here becomes `kubectl explain` text, and every `x_kube(validation)` rule is
//! enforced by the API server, so bad input is refused before the operator ever sees it.

mod bucket;
mod bucket_access;
pub mod condition;

pub use bucket::*;
pub use bucket_access::*;

use kube::CustomResourceExt;
use kube::core::crd::merge_crds;

/// API group of both kinds.
pub const GROUP: &str = "s3.operator.dev";
/// Prefix of every label, annotation, tag and finalizer the operator owns.
pub const DOMAIN_PREFIX: &str = "s3.operator.dev/";
/// Finalizer the operator puts on both kinds so AWS clean-up runs before the object goes.
pub const FINALIZER: &str = "s3.operator.dev/finalizer";

/// All CRDs, as one multi-document YAML stream (what `s3-operator crd` prints).
pub fn crds_yaml() -> String {
    [Bucket::crd(), BucketAccess::crd()]
        .iter()
        .map(|crd| {
            // merge_crds validates the single-version CRD shape kube expects.
            let crd = merge_crds(vec![crd.clone()], "v1alpha1").expect("single-version CRD");
            format!(
                "---\n{}",
                serde_yaml::to_string(&crd).expect("CRD serializes")
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    /// The committed CRDs are exactly what the Rust types generate (`s3-operator crd`).
    #[test]
    fn committed_crds_match_the_types() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/config/crd/s3.operator.dev_crds.yaml"
        );
        let committed = std::fs::read_to_string(path).expect("config/crd file");
        assert!(
            committed == super::crds_yaml(),
            "config/crd is stale: run `cargo run -- crd > config/crd/s3.operator.dev_crds.yaml`"
        );
    }
}
