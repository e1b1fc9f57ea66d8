//! s3-operator: self-service S3 buckets and least-privilege IAM access for Kubernetes.
//!
//! - [`api`]: the CRD types (the public contract)
//! - [`reconcile`]: one module per kind: observe, plan (pure), apply
//! - [`aws`]: every S3 and IAM call, naming, tags and policy documents
//! - [`runtime`]: leader election, web server, metrics, telemetry, shutdown
//! - [`fence`]: what stops a leader whose lease may have passed on from sending anything
//! - [`probe`]: the HTTP check `s3-operator probe` runs (the chart's `helm test`)
#![forbid(unsafe_code)]

pub mod api;
pub mod aws;
pub mod fence;
pub mod probe;
pub mod reconcile;
pub mod runtime;

/// The crate version: the image tag, chart appVersion and CSV version all carry it.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
