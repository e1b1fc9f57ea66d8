//! Kubernetes identities: the operator's RBAC from its single source, ServiceAccounts and
//! their tokens, bindings, and Secrets' data.

use super::*;

/// The operator's RBAC rules from the single source, config/rbac/role.yaml.
pub fn manager_rules() -> Vec<PolicyRule> {
    let text = std::fs::read_to_string(repo().join("config/rbac/role.yaml")).expect("role.yaml");
    let role: ClusterRole = serde_yaml::from_str(&text).expect("ClusterRole");
    role.rules.expect("rules")
}

/// Listing and watching classes and namespaces, granted cluster-wide in every scope.
pub fn class_reader_rules() -> Vec<PolicyRule> {
    let text = std::fs::read_to_string(repo().join("config/rbac/class_reader_role.yaml"))
        .expect("class_reader_role.yaml");
    let role: ClusterRole = serde_yaml::from_str(&text).expect("ClusterRole");
    role.rules.expect("rules")
}

pub fn leader_rules() -> Vec<PolicyRule> {
    let text = std::fs::read_to_string(repo().join("config/rbac/leader_election_role.yaml"))
        .expect("leader role");
    let role: Role = serde_yaml::from_str(&text).expect("Role");
    role.rules.expect("rules")
}

/// Creates ServiceAccount `sa` in `sa_ns`, grants it `rules` through a Role in each of
/// `role_namespaces`, and returns a token for it from the TokenRequest API.
pub async fn service_account(
    client: &kube::Client,
    sa_ns: &str,
    sa: &str,
    grants: &[(&str, Vec<PolicyRule>)],
) -> String {
    let sas = Api::<ServiceAccount>::namespaced(client.clone(), sa_ns);
    let account = ServiceAccount {
        metadata: ObjectMeta {
            name: Some(sa.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let _ = sas.create(&PostParams::default(), &account).await;
    for (ns, rules) in grants {
        let name = format!("{sa}-{}", random(4));
        let role = Role {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..Default::default()
            },
            rules: Some(rules.clone()),
        };
        Api::<Role>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &role)
            .await
            .expect("create role");
        let binding = RoleBinding {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..Default::default()
            },
            role_ref: RoleRef {
                api_group: "rbac.authorization.k8s.io".into(),
                kind: "Role".into(),
                name,
            },
            subjects: Some(vec![Subject {
                kind: "ServiceAccount".into(),
                name: sa.into(),
                namespace: Some(sa_ns.into()),
                api_group: None,
            }]),
        };
        Api::<RoleBinding>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &binding)
            .await
            .expect("create binding");
    }
    let req = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![],
            expiration_seconds: Some(3600),
            bound_object_ref: None,
        },
        ..Default::default()
    };
    let tr = sas
        .create_token_request(sa, &PostParams::default(), &req)
        .await
        .expect("token request");
    tr.status.expect("token status").token
}

/// The Secret's data as strings.
pub fn secret_data(s: &Secret) -> BTreeMap<String, String> {
    s.data
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
        .collect()
}

/// Binds ClusterRole `role` to ServiceAccount `sa` of `sa_ns`, as `name` (default: a unique
/// one).
pub async fn bind_cluster_role(
    client: &kube::Client,
    name: Option<&str>,
    role: &str,
    sa_ns: &str,
    sa: &str,
) {
    let binding = ClusterRoleBinding {
        metadata: ObjectMeta {
            name: Some(name.map_or_else(|| format!("e2e-{sa}-{}", random(5)), String::from)),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: role.into(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: sa.into(),
            namespace: Some(sa_ns.into()),
            api_group: None,
        }]),
    };
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .expect("create ClusterRoleBinding");
}
