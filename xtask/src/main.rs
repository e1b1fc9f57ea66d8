//! Writes every derived manifest from its single source, so config/, the Helm chart and the OLM
//! bundle cannot disagree:
//!
//! - CRDs come from the Rust types (`s3_operator::api`);
//! - RBAC rules come from `config/rbac/role.yaml`, `config/rbac/leader_election_role.yaml`,
//!   `config/rbac/metrics_auth_role.yaml` and `config/rbac/metrics_reader_role.yaml`;
//! - alerts come from `config/prometheus/rules.yaml`, the dashboard from `grafana/`;
//! - the chart's values schema for its default classes comes from the class CRDs, its admission
//!   policies from `config/admission`;
//! - the CSV is its hand-written base plus the manager Deployment, the samples and the RBAC rules;
//! - the version is Cargo.toml's, written into the chart, config/manager and the Dockerfile;
//! - BENCHMARKS.md is rendered from BENCHMARKS.json.
//!
//! `cargo xtask generate` writes the files; `cargo xtask check` and `cargo test` fail on drift,
//! and on a chart Deployment that differs from config/manager's (which the chart's templates
//! take as values, so it is checked rather than generated).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_yaml::{Mapping, Value};

mod benchmarks;
mod bundle;
mod chart;
mod values_schema;
mod version;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Yaml {
        path: String,
        source: serde_yaml::Error,
    },
    #[error("{path}: {source}")]
    Json {
        path: String,
        source: serde_json::Error,
    },
    #[error("{path}: {what}")]
    Shape { path: String, what: String },
    #[error("stale generated files (run `cargo xtask generate`): {}", .0.join(", "))]
    Drift(Vec<String>),
    #[error(
        "the chart's Deployment with default values differs from config/manager/manager.yaml \
         (change both together):\n{}",
        .0.join("\n")
    )]
    Chart(Vec<String>),
}

pub const MANAGER_ROLE: &str = "config/rbac/role.yaml";
pub const LEADER_ROLE: &str = "config/rbac/leader_election_role.yaml";
pub const LEADER_ROLE_BINDING: &str = "config/rbac/leader_election_role_binding.yaml";
pub const METRICS_AUTH_ROLE: &str = "config/rbac/metrics_auth_role.yaml";
pub const METRICS_READER_ROLE: &str = "config/rbac/metrics_reader_role.yaml";

/// Cluster-scoped resources the manager rules may name (group, resource). Their rules are
/// granted cluster-wide in every scope (a Role cannot grant them): the classes and the
/// namespaces' labels decide what applies in a watched namespace.
const CLUSTER_SCOPED: [(&str, &str); 3] = [
    ("", "namespaces"),
    ("s3.operator.dev", "bucketclasses"),
    ("s3.operator.dev", "bucketaccessclasses"),
];

/// The manager rules split by scope: (rules on namespaced resources, rules on cluster-scoped
/// ones). A rule naming both kinds is refused, as it could be granted in neither place whole.
pub fn manager_rules(root: &Path) -> Result<(Value, Value), Error> {
    let all = rules(root, MANAGER_ROLE)?;
    let (mut namespaced, mut cluster) = (Vec::new(), Vec::new());
    for rule in all.as_sequence().into_iter().flatten() {
        let names = |k: &str| -> Vec<String> {
            rule[k]
                .as_sequence()
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        };
        let (groups, resources) = (names("apiGroups"), names("resources"));
        let scoped = |r: &String| {
            groups
                .iter()
                .any(|g| CLUSTER_SCOPED.contains(&(g.as_str(), r.as_str())))
        };
        match resources.iter().filter(|r| scoped(r)).count() {
            0 => namespaced.push(rule.clone()),
            n if n == resources.len() => cluster.push(rule.clone()),
            _ => {
                return Err(shape(
                    MANAGER_ROLE,
                    format!("a rule names cluster-scoped and namespaced resources: {resources:?}"),
                ));
            }
        }
    }
    Ok((Value::Sequence(namespaced), Value::Sequence(cluster)))
}

/// One generated file: its path relative to the repository root and its full text.
pub struct Generated {
    pub path: String,
    pub text: String,
}

/// The repository being generated into (the xtask's parent directory).
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the repository")
        .to_path_buf()
}

pub fn read(root: &Path, rel: &str) -> Result<String, Error> {
    std::fs::read_to_string(root.join(rel)).map_err(|source| Error::Io {
        path: rel.into(),
        source,
    })
}

pub fn read_yaml(root: &Path, rel: &str) -> Result<Value, Error> {
    serde_yaml::from_str(&read(root, rel)?).map_err(|source| Error::Yaml {
        path: rel.into(),
        source,
    })
}

pub fn shape(path: &str, what: impl Into<String>) -> Error {
    Error::Shape {
        path: path.into(),
        what: what.into(),
    }
}

pub fn to_yaml(path: &str, value: &Value, source: &str) -> Result<Generated, Error> {
    let body = serde_yaml::to_string(value).map_err(|source| Error::Yaml {
        path: path.into(),
        source,
    })?;
    Ok(Generated {
        path: path.into(),
        text: format!("{}{body}", header(source)),
    })
}

fn header(source: &str) -> String {
    format!("# Generated by `cargo xtask generate` from {source}. Do not edit.\n")
}

/// `rules` of an RBAC Role or ClusterRole file.
pub fn rules(root: &Path, rel: &str) -> Result<Value, Error> {
    let role = read_yaml(root, rel)?;
    match role.get("rules") {
        Some(Value::Sequence(r)) if !r.is_empty() => Ok(Value::Sequence(r.clone())),
        _ => Err(shape(rel, "has no rules")),
    }
}

pub fn map(pairs: impl IntoIterator<Item = (&'static str, Value)>) -> Value {
    Value::Mapping(
        pairs
            .into_iter()
            .map(|(k, v)| (Value::from(k), v))
            .collect::<Mapping>(),
    )
}

/// Every generated file, in a stable order.
pub fn generate(root: &Path) -> Result<Vec<Generated>, Error> {
    let mut out = crd_files()?;
    out.extend(rbac_files(root)?);
    let (alerts, prometheus_rule) = alert_files(root)?;
    out.extend(alerts);
    out.push(dashboard_file(root)?);
    out.push(values_schema::file(root)?);
    out.push(admission_file(root)?);
    out.extend(bundle::generate(root, &prometheus_rule)?);
    out.extend(version::files(root)?);
    out.push(benchmarks::file(root)?);
    Ok(out)
}

/// CRDs, one file per kind, identical in config/, the chart and the bundle.
fn crd_files() -> Result<Vec<Generated>, Error> {
    let mut out = Vec::new();
    for crd in s3_operator::api::crds() {
        let doc = serde_yaml::to_value(&crd).map_err(|source| Error::Yaml {
            path: "crd".into(),
            source,
        })?;
        let file = format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural);
        for dir in [
            "config/crd/bases",
            "charts/s3-operator/crds",
            "bundle/manifests",
        ] {
            out.push(to_yaml(
                &format!("{dir}/{file}"),
                &doc,
                "the Rust types in src/api",
            )?);
        }
    }
    Ok(out)
}

/// RBAC: the namespaced overlays bind a Role with exactly the ClusterRole's rules on namespaced
/// resources; the chart reads every role's rules from one file, the manager's cluster-scoped
/// reads apart (`clusterReads`: granted cluster-wide in every scope).
fn rbac_files(root: &Path) -> Result<Vec<Generated>, Error> {
    let (manager, cluster_reads) = manager_rules(root)?;
    let leader = rules(root, LEADER_ROLE)?;
    let role = map([
        ("apiVersion", "rbac.authorization.k8s.io/v1".into()),
        ("kind", "Role".into()),
        ("metadata", map([("name", "s3-operator-manager".into())])),
        ("rules", manager.clone()),
    ]);
    let chart_rbac = map([
        ("manager", manager),
        ("clusterReads", cluster_reads),
        ("leaderElection", leader),
        ("metricsAuth", rules(root, METRICS_AUTH_ROLE)?),
        ("metricsReader", rules(root, METRICS_READER_ROLE)?),
    ]);
    Ok(vec![
        to_yaml(
            "config/rbac/namespaced/role.yaml",
            &role,
            "config/rbac/role.yaml",
        )?,
        to_yaml(
            "charts/s3-operator/files/rbac.yaml",
            &chart_rbac,
            "config/rbac",
        )?,
    ])
}

/// Alerts: promtool reads the plain rule file; the Prometheus Operator wants a PrometheusRule
/// (returned too: the bundle ships it).
fn alert_files(root: &Path) -> Result<(Vec<Generated>, Value), Error> {
    let rules_src = "config/prometheus/rules.yaml";
    let rule_file = read_yaml(root, rules_src)?;
    let groups = rule_file
        .get("groups")
        .cloned()
        .ok_or_else(|| shape(rules_src, "has no groups"))?;
    let prometheus_rule = map([
        ("apiVersion", "monitoring.coreos.com/v1".into()),
        ("kind", "PrometheusRule".into()),
        (
            "metadata",
            map([
                ("name", "s3-operator-alerts".into()),
                (
                    "labels",
                    map([("app.kubernetes.io/name", "s3-operator".into())]),
                ),
            ]),
        ),
        ("spec", map([("groups", groups)])),
    ]);
    let files = vec![
        to_yaml(
            "config/prometheus/prometheusrule.yaml",
            &prometheus_rule,
            rules_src,
        )?,
        to_yaml("charts/s3-operator/files/rules.yaml", &rule_file, rules_src)?,
    ];
    Ok((files, prometheus_rule))
}

/// JSON has no comments, so the dashboard copy carries no header; the drift test guards it.
fn dashboard_file(root: &Path) -> Result<Generated, Error> {
    let dashboard_src = "grafana/s3-operator.json";
    let dashboard: serde_json::Value =
        serde_json::from_str(&read(root, dashboard_src)?).map_err(|source| Error::Json {
            path: dashboard_src.into(),
            source,
        })?;
    Ok(Generated {
        path: "charts/s3-operator/files/dashboard.json".into(),
        text: serde_json::to_string_pretty(&dashboard).expect("JSON value serializes") + "\n",
    })
}

/// The ValidatingAdmissionPolicies and their bindings of config/admission, in the order of its
/// kustomization, for the chart (which names them after the release).
fn admission_file(root: &Path) -> Result<Generated, Error> {
    let kustomization = "config/admission/kustomization.yaml";
    let mut documents = Vec::new();
    for file in read_yaml(root, kustomization)?["resources"]
        .as_sequence()
        .ok_or_else(|| shape(kustomization, "has no resources"))?
    {
        let rel = format!("config/admission/{}", file.as_str().unwrap_or_default());
        for doc in serde_yaml::Deserializer::from_str(&read(root, &rel)?) {
            let doc =
                <Value as serde::Deserialize>::deserialize(doc).map_err(|source| Error::Yaml {
                    path: rel.clone(),
                    source,
                })?;
            documents.push(doc);
        }
    }
    to_yaml(
        "charts/s3-operator/files/admission.yaml",
        &map([("documents", Value::Sequence(documents))]),
        "config/admission",
    )
}

/// Paths whose committed text differs from what `generate` produces.
pub fn drift(root: &Path) -> Result<Vec<String>, Error> {
    Ok(generate(root)?
        .into_iter()
        .filter(|g| std::fs::read_to_string(root.join(&g.path)).ok().as_deref() != Some(&g.text))
        .map(|g| g.path)
        .collect())
}

fn write(root: &Path) -> Result<(), Error> {
    for g in generate(root)? {
        let path = root.join(&g.path);
        if std::fs::read_to_string(&path).ok().as_deref() == Some(&g.text) {
            continue;
        }
        let io = |source| Error::Io {
            path: g.path.clone(),
            source,
        };
        std::fs::create_dir_all(path.parent().expect("file has a parent")).map_err(io)?;
        std::fs::write(&path, &g.text).map_err(io)?;
        println!("wrote {}", g.path);
    }
    Ok(())
}

fn check(root: &Path) -> Result<(), Error> {
    let stale = drift(root)?;
    if !stale.is_empty() {
        return Err(Error::Drift(stale));
    }
    let chart = chart::differences(root)?;
    if !chart.is_empty() {
        return Err(Error::Chart(chart));
    }
    Ok(())
}

fn main() -> ExitCode {
    let root = repo();
    let result = match std::env::args().nth(1).as_deref() {
        Some("generate") => write(&root),
        Some("check") => check(&root),
        _ => {
            eprintln!("usage: cargo xtask generate|check");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every committed copy equals what its source generates.
    #[test]
    fn generated_files_are_up_to_date() {
        let stale = drift(&repo()).expect("sources are readable");
        assert!(
            stale.is_empty(),
            "stale generated files (run `cargo xtask generate`): {stale:?}"
        );
    }

    /// Paths of the properties under `schema` that have no description.
    fn undescribed(schema: &Value, path: &str, out: &mut Vec<String>) {
        if let Some(Value::Mapping(props)) = schema.get("properties") {
            for (name, prop) in props {
                let path = format!("{path}.{}", name.as_str().unwrap_or("?"));
                let described = prop
                    .get("description")
                    .and_then(Value::as_str)
                    .is_some_and(|d| !d.trim().is_empty());
                if !described {
                    out.push(path.clone());
                }
                undescribed(prop, &path, out);
            }
        }
        if let Some(items) = schema.get("items") {
            undescribed(items, &format!("{path}[]"), out);
        }
        if let Some(values) = schema.get("additionalProperties") {
            undescribed(values, &format!("{path}{{}}"), out);
        }
        for key in ["anyOf", "oneOf", "allOf"] {
            if let Some(Value::Sequence(alternatives)) = schema.get(key) {
                for alternative in alternatives {
                    undescribed(alternative, path, out);
                }
            }
        }
    }

    /// `kubectl explain` has text for every field of every CRD: a property without a
    /// description is named here (give its Rust field in src/api a doc comment).
    #[test]
    fn every_crd_field_has_a_description() {
        let root = repo();
        let dir = root.join("config/crd/bases");
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .expect("config/crd/bases")
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
            .collect();
        files.sort();
        assert_eq!(files.len(), s3_operator::api::crds().len(), "{files:?}");
        let mut missing = Vec::new();
        for file in files {
            let rel = file.strip_prefix(&root).unwrap().display().to_string();
            let crd = read_yaml(&root, &rel).unwrap();
            let kind = crd["spec"]["names"]["kind"].as_str().unwrap().to_string();
            for version in crd["spec"]["versions"].as_sequence().unwrap() {
                let name = version["name"].as_str().unwrap();
                let schema = &version["schema"]["openAPIV3Schema"];
                undescribed(schema, &format!("{kind} {name}: "), &mut missing);
            }
        }
        assert!(
            missing.is_empty(),
            "CRD properties without a description:\n{}",
            missing.join("\n")
        );
    }

    /// The CSV grants exactly the rules of the RBAC sources, and OLM's target namespaces reach
    /// the operator as WATCH_NAMESPACE.
    #[test]
    fn csv_permissions_and_watch_namespace_come_from_the_sources() {
        let root = repo();
        let spec = &csv(&generate(&root).unwrap())["spec"]["install"]["spec"];
        let (manager, cluster_reads) = manager_rules(&root).unwrap();
        assert_eq!(spec["permissions"][0]["rules"], manager);
        assert_eq!(spec["permissions"][0]["serviceAccountName"], "s3-operator");
        let mut cluster = rules(&root, METRICS_AUTH_ROLE).unwrap();
        cluster
            .as_sequence_mut()
            .unwrap()
            .extend(cluster_reads.as_sequence().unwrap().iter().cloned());
        assert_eq!(spec["clusterPermissions"][0]["rules"], cluster);
        assert_eq!(
            spec["clusterPermissions"][0]["serviceAccountName"],
            "s3-operator"
        );
        let env = &spec["deployments"][0]["spec"]["template"]["spec"]["containers"][0]["env"];
        let watch = env
            .as_sequence()
            .unwrap()
            .iter()
            .find(|e| e["name"] == "WATCH_NAMESPACE")
            .unwrap();
        assert_eq!(
            watch["valueFrom"]["fieldRef"]["fieldPath"],
            "metadata.annotations['olm.targetNamespaces']"
        );
    }

    /// Reads of classes and namespaces in the manager rules are cluster-scoped: OLM must grant
    /// them cluster-wide (`clusterPermissions`) even for OwnNamespace, SingleNamespace and
    /// MultiNamespace, where `permissions` become Roles; the namespaced Role and the chart's
    /// manager rules leave them out, the chart's `clusterReads` has them.
    #[test]
    fn class_and_namespace_reads_are_cluster_permissions() {
        let tmp = std::env::temp_dir().join(format!("xtask-scope-{}", std::process::id()));
        let root = repo();
        for src in [MANAGER_ROLE, METRICS_AUTH_ROLE] {
            std::fs::create_dir_all(tmp.join(src).parent().unwrap()).unwrap();
            std::fs::copy(root.join(src), tmp.join(src)).unwrap();
        }
        let reads = "  - apiGroups: [\"s3.operator.dev\"]\n    resources: [\"bucketclasses\", \"bucketaccessclasses\"]\n    verbs: [\"list\", \"watch\"]\n  - apiGroups: [\"\"]\n    resources: [\"namespaces\"]\n    verbs: [\"list\", \"watch\"]\n";
        let role = tmp.join(MANAGER_ROLE);
        let text = std::fs::read_to_string(&role).unwrap();
        let text = text.replace("rules:\n", &format!("rules:\n{reads}"));
        std::fs::write(&role, &text).unwrap();
        let (namespaced, cluster) = manager_rules(&tmp).unwrap();
        let resources = |rules: &Value| -> Vec<String> {
            let mut out: Vec<String> = rules
                .as_sequence()
                .unwrap()
                .iter()
                .flat_map(|r| r["resources"].as_sequence().unwrap().clone())
                .map(|r| r.as_str().unwrap().to_string())
                .collect();
            out.sort();
            out
        };
        assert_eq!(
            resources(&cluster),
            ["bucketaccessclasses", "bucketclasses", "namespaces"]
        );
        assert!(resources(&namespaced).contains(&"buckets".to_string()));
        assert!(!resources(&namespaced).contains(&"namespaces".to_string()));
        // A rule mixing both scopes can be granted whole in neither place.
        std::fs::write(
            &role,
            text.replace(
                "[\"buckets\", \"bucketaccesses\"]",
                "[\"buckets\", \"bucketclasses\"]",
            ),
        )
        .unwrap();
        let mixed = manager_rules(&tmp).map(|_| ()).unwrap_err().to_string();
        std::fs::remove_dir_all(&tmp).unwrap();
        assert!(mixed.contains("cluster-scoped and namespaced"), "{mixed}");
    }

    fn csv(files: &[Generated]) -> Value {
        let csv = files
            .iter()
            .find(|g| g.path.ends_with(".clusterserviceversion.yaml"))
            .unwrap();
        serde_yaml::from_str(&csv.text).unwrap()
    }

    fn grants_leases(rules: &Value) -> bool {
        rules.as_sequence().into_iter().flatten().any(|r| {
            r["apiGroups"]
                .as_sequence()
                .into_iter()
                .flatten()
                .any(|g| g == "coordination.k8s.io" || g == "*")
        })
    }

    /// OLM copies the CSV's `permissions` into every target namespace and lifts them into a
    /// ClusterRole for AllNamespaces, so no Lease rule may be there (nor in
    /// `clusterPermissions`): the bundle carries them as a Role and RoleBinding that OLM creates
    /// in the operator's namespace alone, bound to the ServiceAccount of that namespace.
    #[test]
    fn leases_are_granted_only_in_the_operators_namespace() {
        let root = repo();
        let files = generate(&root).unwrap();
        let spec = &csv(&files)["spec"]["install"]["spec"];
        for key in ["permissions", "clusterPermissions"] {
            for p in spec[key].as_sequence().unwrap() {
                assert!(!grants_leases(&p["rules"]), "{key} grants Leases: {p:?}");
            }
        }
        let bundle: Vec<Value> = files
            .iter()
            .filter(|g| g.path.starts_with("bundle/manifests/"))
            .map(|g| serde_yaml::from_str(&g.text).unwrap())
            .collect();
        let of_kind =
            |kind: &str| -> Vec<&Value> { bundle.iter().filter(|d| d["kind"] == kind).collect() };
        assert!(
            of_kind("ClusterRole")
                .iter()
                .all(|r| !grants_leases(&r["rules"])),
            "a bundle ClusterRole grants Leases"
        );
        let roles = of_kind("Role");
        assert_eq!(roles.len(), 1, "one Role: leader election");
        assert_eq!(roles[0]["rules"], rules(&root, LEADER_ROLE).unwrap());
        let bindings = of_kind("RoleBinding");
        assert_eq!(bindings.len(), 1);
        assert_eq!(bindings[0]["roleRef"]["name"], roles[0]["metadata"]["name"]);
        let subject = &bindings[0]["subjects"][0];
        assert_eq!(subject["name"], "s3-operator");
        assert!(
            subject.get("namespace").is_none(),
            "the subject must default to the install namespace: {subject:?}"
        );
        assert!(of_kind("ClusterRoleBinding").is_empty());
    }

    /// Every grant is spelled out (no wildcard, no name list), so the e2e run can compare it
    /// with what the operator asks for: tests/e2e/support/rbac_audit.rs, run by hack/test.sh
    /// on the audit logs of the whole run, fails on a grant never used or a request not granted.
    #[test]
    fn rbac_grants_each_verb_by_name() {
        let root = repo();
        for src in [MANAGER_ROLE, LEADER_ROLE, METRICS_AUTH_ROLE] {
            for rule in rules(&root, src).unwrap().as_sequence().unwrap() {
                assert!(rule.get("resourceNames").is_none(), "{src}: {rule:?}");
                for k in ["apiGroups", "resources", "verbs"] {
                    let list = rule[k]
                        .as_sequence()
                        .unwrap_or_else(|| panic!("{src}: a rule without {k}: {rule:?}"));
                    assert!(
                        list.iter().all(|v| !v.as_str().unwrap().contains('*')),
                        "{src}: wildcard in {rule:?}"
                    );
                }
            }
        }
        // The scrapers' role grants reading /metrics and nothing else.
        assert_eq!(
            rules(&root, METRICS_READER_ROLE).unwrap(),
            serde_yaml::from_str::<Value>("[{nonResourceURLs: [/metrics], verbs: [get]}]").unwrap()
        );
    }

    /// A change to a source shows up as drift in every copy made from it.
    #[test]
    fn drift_is_detected() {
        let tmp = std::env::temp_dir().join(format!("xtask-drift-{}", std::process::id()));
        let root = repo();
        let files = generate(&root).unwrap();
        for g in &files {
            let p = tmp.join(&g.path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, &g.text).unwrap();
        }
        // Copy the sources, then change one RBAC rule.
        for src in [
            "config/rbac/role.yaml",
            "config/rbac/leader_election_role.yaml",
            "config/rbac/leader_election_role_binding.yaml",
            "config/rbac/metrics_auth_role.yaml",
            "config/rbac/metrics_reader_role.yaml",
            "config/prometheus/rules.yaml",
            "grafana/s3-operator.json",
            "config/manager/manager.yaml",
            "config/manifests/bases/s3-operator.clusterserviceversion.yaml",
            "config/scorecard/config.yaml",
            "config/prometheus/monitor.yaml",
            "config/manager/metrics_service.yaml",
            "BENCHMARKS.json",
            values_schema::SCHEMA,
            "config/admission/kustomization.yaml",
            "config/admission/bucket_class_policy.yaml",
            "config/admission/bucket_access_class_policy.yaml",
        ] {
            let p = tmp.join(src);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::copy(root.join(src), &p).unwrap();
        }
        std::fs::create_dir_all(tmp.join("config/samples")).unwrap();
        for e in std::fs::read_dir(root.join("config/samples")).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), tmp.join("config/samples").join(e.file_name())).unwrap();
        }
        assert!(drift(&tmp).unwrap().is_empty());
        let role = tmp.join("config/rbac/role.yaml");
        let text = std::fs::read_to_string(&role)
            .unwrap()
            .replace("\"watch\", ", "");
        std::fs::write(&role, text).unwrap();
        let stale = drift(&tmp).unwrap();
        std::fs::remove_dir_all(&tmp).unwrap();
        for copy in [
            "config/rbac/namespaced/role.yaml",
            "charts/s3-operator/files/rbac.yaml",
            "bundle/manifests/s3-operator.clusterserviceversion.yaml",
        ] {
            assert!(stale.contains(&copy.to_string()), "{copy} not in {stale:?}");
        }
    }
}
