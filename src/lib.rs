//! s3-operator: self-service S3 buckets and least-privilege IAM access for Kubernetes.
//!
//! - [`api`]: the CRD types (the public contract)
//! - [`reconcile`]: one module per kind: observe, plan (pure), apply
//! - [`aws`]: every S3 and IAM call, naming, tags and policy documents
//! - [`runtime`]: leader election, web server, metrics, telemetry, shutdown
//! - [`fence`]: what stops a leader whose lease may have passed on from sending anything
//! - [`metrics`]: the Prometheus series; a bottom layer, handed to whatever records into it
//! - [`probe`]: the HTTP check `s3-operator probe` runs (the chart's `helm test`)
//!
//! Dependencies run one way: `runtime` -> `reconcile` -> `aws` -> `api`, and all of them may use
//! `fence` and `metrics`, which depend on none of them.
#![forbid(unsafe_code)]

pub mod api;
pub mod aws;
pub mod fence;
pub mod import;
pub mod metrics;
pub mod probe;
pub mod reconcile;
pub mod runtime;

/// The crate version: the image tag, chart appVersion and CSV version all carry it.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
