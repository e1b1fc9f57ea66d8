//! The audit: every AWS resource that carries one installation's ownership (its cluster tag, or
//! its IAM path) checked against the objects in the cluster. Fault and benchmark runs end with it.

use std::collections::BTreeMap;

use kube::api::Api;
use s3_operator::api::{Bucket, BucketAccess};
use s3_operator::aws::{naming, tags};
use s3_operator::reconcile::bucket_access::POLICY_NAME;

use crate::support::*;

/// One installation's AWS resources, read with the admin identity.
#[derive(Debug, Default)]
pub struct Inventory {
    /// Bucket name → tags, for buckets tagged with the installation's cluster.
    pub buckets: BTreeMap<String, BTreeMap<String, String>>,
    /// IAM users under the installation's path.
    pub users: BTreeMap<String, Principal>,
    /// IAM roles under the installation's path.
    pub roles: BTreeMap<String, Principal>,
    /// Customer-managed policies under the installation's path other than the permissions
    /// boundary the administrator installs (the operator creates none).
    pub managed_policies: Vec<String>,
    /// The boundary's default version, when it exists: the operator may never change it, so
    /// anything but the administrator's first version is a problem.
    pub boundary_version: Option<String>,
}

#[derive(Debug, Default)]
pub struct Principal {
    pub tags: BTreeMap<String, String>,
    pub keys: Vec<String>,
    pub inline_policies: Vec<String>,
}

impl Inventory {
    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
            && self.users.is_empty()
            && self.roles.is_empty()
            && self.managed_policies.is_empty()
    }
}

async fn user_keys(user: &str) -> Vec<String> {
    admin_iam()
        .list_access_keys()
        .user_name(user)
        .send()
        .await
        .map(|k| {
            k.access_key_metadata()
                .iter()
                .filter_map(|m| m.access_key_id().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

pub async fn inventory(cluster: &str) -> Inventory {
    let (s3, iam) = (admin_s3(), admin_iam());
    let path = naming::iam_path(cluster);
    let mut inv = Inventory::default();

    let listed = s3.list_buckets().send().await.expect("ListBuckets");
    for b in listed.buckets() {
        let Some(name) = b.name() else { continue };
        if !name.starts_with(PREFIX) {
            continue;
        }
        // A bucket deleted between the list and this read is simply gone.
        let tags = bucket_tags(name).await;
        if tags.get(tags::CLUSTER).map(String::as_str) == Some(cluster) {
            inv.buckets.insert(name.to_string(), tags);
        }
    }

    let users: Vec<_> = iam
        .list_users()
        .path_prefix(&path)
        .into_paginator()
        .items()
        .send()
        .collect::<Result<_, _>>()
        .await
        .expect("ListUsers");
    for u in &users {
        let name = u.user_name();
        let tags = iam
            .list_user_tags()
            .user_name(name)
            .send()
            .await
            .map(|t| {
                t.tags()
                    .iter()
                    .map(|t| (t.key().into(), t.value().into()))
                    .collect()
            })
            .unwrap_or_default();
        let keys = user_keys(name).await;
        let inline_policies = iam
            .list_user_policies()
            .user_name(name)
            .send()
            .await
            .map(|p| p.policy_names().to_vec())
            .unwrap_or_default();
        inv.users.insert(
            name.to_string(),
            Principal {
                tags,
                keys,
                inline_policies,
            },
        );
    }

    let roles: Vec<_> = iam
        .list_roles()
        .path_prefix(&path)
        .into_paginator()
        .items()
        .send()
        .collect::<Result<_, _>>()
        .await
        .expect("ListRoles");
    for r in &roles {
        let name = r.role_name();
        let tags = iam
            .list_role_tags()
            .role_name(name)
            .send()
            .await
            .map(|t| {
                t.tags()
                    .iter()
                    .map(|t| (t.key().into(), t.value().into()))
                    .collect()
            })
            .unwrap_or_default();
        let inline_policies = iam
            .list_role_policies()
            .role_name(name)
            .send()
            .await
            .map(|p| p.policy_names().to_vec())
            .unwrap_or_default();
        inv.roles.insert(
            name.to_string(),
            Principal {
                tags,
                keys: vec![],
                inline_policies,
            },
        );
    }

    let policies = iam
        .list_policies()
        .scope(aws_sdk_iam::types::PolicyScopeType::Local)
        .path_prefix(&path)
        .send()
        .await
        .expect("ListPolicies");
    for p in policies.policies() {
        let name = p.policy_name().unwrap_or_default();
        if name == s3_operator::aws::policy::BOUNDARY_NAME {
            inv.boundary_version = p.default_version_id().map(String::from);
        } else {
            inv.managed_policies.push(name.to_string());
        }
    }
    inv
}

/// Everything wrong between the installation `cluster`'s AWS resources and the objects in
/// `namespaces`: leaked resources (their owner is gone), duplicates, users with more than two
/// keys, Ready objects without their resources, Secrets holding keys IAM does not have.
/// Empty means clean.
pub async fn audit(cluster: &str, namespaces: &[String]) -> Vec<String> {
    let inv = inventory(cluster).await;
    let client = admin().await;
    let mut problems = Vec::new();

    // Live objects by UID.
    let mut buckets = BTreeMap::new();
    let mut accesses = BTreeMap::new();
    for ns in namespaces {
        for b in Api::<Bucket>::namespaced(client.clone(), ns)
            .list(&Default::default())
            .await
            .expect("list Buckets")
        {
            buckets.insert(b.metadata.uid.clone().unwrap_or_default(), b);
        }
        for a in Api::<BucketAccess>::namespaced(client.clone(), ns)
            .list(&Default::default())
            .await
            .expect("list BucketAccesses")
        {
            accesses.insert(a.metadata.uid.clone().unwrap_or_default(), a);
        }
    }
    let owner_of = |kind: &str, name: &str, t: &BTreeMap<String, String>| -> Option<String> {
        match t.get(tags::UID) {
            None => Some(format!(
                "{kind} {name} is under the operator's path but untagged"
            )),
            Some(uid) => {
                let live = match kind {
                    "bucket" => buckets.contains_key(uid),
                    _ => accesses.contains_key(uid),
                };
                (!live).then(|| {
                    format!(
                        "leaked {kind} {name}: its owner {}/{} (uid {uid}) is gone",
                        t.get(tags::NAMESPACE).map(String::as_str).unwrap_or("?"),
                        t.get(tags::NAME).map(String::as_str).unwrap_or("?"),
                    )
                })
            }
        }
    };

    let mut per_owner: BTreeMap<(String, &str), Vec<&str>> = BTreeMap::new();
    for (name, t) in &inv.buckets {
        problems.extend(owner_of("bucket", name, t));
        if let Some(uid) = t.get(tags::UID) {
            per_owner
                .entry((uid.clone(), "bucket"))
                .or_default()
                .push(name);
        }
    }
    for (kind, set) in [("IAM user", &inv.users), ("IAM role", &inv.roles)] {
        for (name, p) in set {
            problems.extend(owner_of(kind, name, &p.tags));
            if let Some(uid) = p.tags.get(tags::UID) {
                per_owner.entry((uid.clone(), kind)).or_default().push(name);
            }
            let foreign: Vec<&String> = p
                .inline_policies
                .iter()
                .filter(|n| n.as_str() != POLICY_NAME)
                .collect();
            if !foreign.is_empty() {
                problems.push(format!("{kind} {name} has inline policies {foreign:?}"));
            }
            if p.keys.len() > 2 {
                problems.push(format!("{kind} {name} holds {} access keys", p.keys.len()));
            }
        }
    }
    for ((uid, kind), names) in &per_owner {
        if names.len() > 1 {
            problems.push(format!(
                "owner {uid} has {} of kind {kind}: {names:?}",
                names.len()
            ));
        }
    }
    for p in &inv.managed_policies {
        problems.push(format!("managed policy {p} under the operator's path"));
    }
    if let Some(v) = inv.boundary_version.as_deref().filter(|v| *v != "v1") {
        problems.push(format!(
            "the permissions boundary was changed (default version {v})"
        ));
    }

    // Ready objects hold what their status says.
    for b in buckets.values() {
        let Some(s) = &b.status else { continue };
        if b.metadata.deletion_timestamp.is_some()
            || !s3_operator::api::condition::is_ready(&s.conditions)
        {
            continue;
        }
        let name = s.bucket_name.clone().unwrap_or_default();
        if !inv.buckets.contains_key(&name) {
            problems.push(format!(
                "Bucket {}/{} is Ready but bucket {name} is missing or not ours",
                b.metadata.namespace.as_deref().unwrap_or("?"),
                b.metadata.name.as_deref().unwrap_or("?")
            ));
        }
    }
    let secrets =
        |ns: &str| Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), ns);
    for a in accesses.values() {
        let Some(s) = &a.status else { continue };
        if a.metadata.deletion_timestamp.is_some()
            || !s3_operator::api::condition::is_ready(&s.conditions)
        {
            continue;
        }
        let id = format!(
            "BucketAccess {}/{}",
            a.metadata.namespace.as_deref().unwrap_or("?"),
            a.metadata.name.as_deref().unwrap_or("?")
        );
        let Some(user) = s.user_arn.as_deref().and_then(|arn| arn.rsplit('/').next()) else {
            continue; // a role-based access
        };
        let Some(p) = inv.users.get(user) else {
            problems.push(format!("{id} is Ready but IAM user {user} is missing"));
            continue;
        };
        let ns = a.metadata.namespace.as_deref().unwrap_or_default();
        let secret_name = s.secret_name.clone().unwrap_or_default();
        // Read the Secret and then the user's keys back to back, twice if they disagree: a key
        // rotation between the two reads is not a problem, a lasting mismatch is.
        let mut mismatch = None;
        for attempt in 0..3 {
            if attempt > 0 {
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
            let held = match secrets(ns).get_opt(&secret_name).await.expect("get Secret") {
                Some(secret) => secret_data(&secret)
                    .get("AWS_ACCESS_KEY_ID")
                    .cloned()
                    .unwrap_or_default(),
                None => String::new(),
            };
            let keys = user_keys(user).await;
            if keys.contains(&held) {
                mismatch = None;
                break;
            }
            mismatch = Some(format!(
                "{id} is Ready but its Secret holds key {held:?}, which IAM user {user} does not have ({keys:?})"
            ));
        }
        problems.extend(mismatch);
        if p.keys.is_empty() {
            problems.push(format!("{id} is Ready but IAM user {user} has no key"));
        }
    }
    problems
}
