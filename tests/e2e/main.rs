//! End-to-end tests on a real kube-apiserver (RBAC, ServiceAccount tokens, garbage collection)
//! and moto with IAM enforcement. Run through `hack/test.sh`, or with a bare `cargo test`, which
//! starts a private environment (`hack/env.sh`) for the run.

mod access;
mod access_classes;
mod accounts;
mod audit;
mod benchmark_smoke;
mod bucket;
mod bucket_abac;
mod bucket_classes;
mod bucket_logging;
mod bucket_notifications;
mod bucket_protection;
mod class_admission;
mod class_failclosed;
mod cli;
mod cluster;
mod drift_bench;
mod drift_events;
mod fairness;
mod faults;
mod import;
mod monitoring;
mod node;
mod observability;
mod observe;
mod olm;
mod orphans;
mod outputs;
mod packaging;
mod paused;
mod pod_identity;
mod proxy;
mod read_budget;
mod reconcile_now;
mod runtime;
mod scale;
mod security;
mod several_buckets;
mod smoke;
mod state;
mod support;
mod tenancy;
mod upgrade;
mod validation;
mod workload_identity;
