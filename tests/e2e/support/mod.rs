//! The end-to-end harness: the real API server and moto from `hack/env.sh`, clients for them, and
//! the operator binary run as a local process under its own ServiceAccount, RBAC and IAM policy.
//! One module per job; every test imports them all through `crate::support::*`.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DynamicObject, ListParams, ObjectMeta, Patch, PatchParams, PostParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use s3_operator::api::Bucket;
use s3_operator::api::condition::READY;
use s3_operator::aws::{naming, policy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod accounts;
mod aws;
mod env;
mod gates;
mod http;
mod identities;
mod operator;
mod pair;
mod rbac_audit;
mod tools;
mod watch_lag;

pub use accounts::*;
pub use aws::*;
pub use env::*;
pub use gates::*;
pub use http::*;
pub use identities::*;
pub use operator::*;
pub use pair::*;
pub use tools::*;
pub use watch_lag::*;
