//! Least privilege from behaviour: every (API group, resource, verb) the operator asked the API
//! server for in a whole e2e run, read from the run's audit logs (hack/audit-policy.yaml logs
//! ServiceAccounts' reads as well as every write), against what config/rbac grants it. A grant
//! nothing asked for fails, and so does a request config/rbac does not grant.

use std::collections::BTreeSet;

use super::*;

/// (API group, resource or resource/subresource or non-resource URL, verb).
pub type Call = (String, String, String);

/// Granted, but never asked of the API server: where the OwnerReferencesPermissionEnforcement
/// admission plugin is on (OpenShift), it asks whether the writer of a Secret whose owner
/// reference blocks the BucketAccess's deletion may update its finalizers.
const ASKED_BY_ADMISSION: [(&str, &str, &str); 1] =
    [("s3.operator.dev", "bucketaccesses/finalizers", "update")];

/// Non-resource URLs every authenticated client may read (system:public-info-viewer): the
/// operator checks the API server's version when it starts.
const PUBLIC_URLS: [&str; 1] = ["/version"];

/// The operator's calls in audit log text: requests with the operator's user agent
/// (`s3-operator/VERSION`, see src/runtime/client.rs) from a ServiceAccount, allowed or not.
/// Tests acting with the operator's token use their own user agent, and the CLI runs as the
/// administrator: neither is the operator.
pub fn operator_calls(log: &str) -> BTreeSet<Call> {
    log.lines()
        .filter(|l| l.contains("s3-operator/"))
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| {
            let agent = e["userAgent"].as_str().unwrap_or_default();
            let user = e["user"]["username"].as_str().unwrap_or_default();
            agent.starts_with("s3-operator/") && user.starts_with("system:serviceaccount:")
        })
        .flat_map(|e| calls_of(&e))
        .collect()
}

/// What one audit event asked to be authorized. A server-side apply that created its object
/// (201) is logged as a patch but was also authorized as a create.
fn calls_of(e: &serde_json::Value) -> Vec<Call> {
    let verb = e["verb"].as_str().unwrap_or_default().to_string();
    let o = &e["objectRef"];
    let Some(resource) = o["resource"].as_str() else {
        let uri = e["requestURI"].as_str().unwrap_or_default();
        let url = uri.split('?').next().unwrap_or_default().to_string();
        if PUBLIC_URLS.contains(&url.as_str()) {
            return vec![];
        }
        return vec![(String::new(), url, verb)];
    };
    let resource = match o["subresource"].as_str() {
        Some(sub) => format!("{resource}/{sub}"),
        None => resource.to_string(),
    };
    let group = o["apiGroup"].as_str().unwrap_or_default().to_string();
    let created = verb == "patch" && e["responseStatus"]["code"] == 201;
    let mut calls = vec![(group.clone(), resource.clone(), verb)];
    if created {
        calls.push((group, resource, "create".into()));
    }
    calls
}

/// Every (group, resource, verb) the rules grant (each spelled out: xtask's test
/// `rbac_grants_each_verb_by_name` refuses wildcards and name lists in config/rbac).
pub fn granted(rules: &[PolicyRule]) -> BTreeSet<Call> {
    let mut all = BTreeSet::new();
    for rule in rules {
        for g in rule.api_groups.iter().flatten() {
            for r in rule.resources.iter().flatten() {
                for v in &rule.verbs {
                    all.insert((g.clone(), r.clone(), v.clone()));
                }
            }
        }
    }
    all
}

/// `Err` naming every grant no call used (but those only admission asks for) and every call
/// nothing grants.
pub fn compare(granted: &BTreeSet<Call>, used: &BTreeSet<Call>) -> Result<(), String> {
    let admission: BTreeSet<Call> = ASKED_BY_ADMISSION
        .iter()
        .map(|(g, r, v)| (g.to_string(), r.to_string(), v.to_string()))
        .collect();
    let unused: Vec<_> = granted
        .difference(used)
        .filter(|c| !admission.contains(*c))
        .collect();
    let missing: Vec<_> = used.difference(granted).collect();
    if unused.is_empty() && missing.is_empty() {
        return Ok(());
    }
    Err(format!(
        "config/rbac grants what the operator never asked for: {unused:?}; \
         the operator asked for what config/rbac does not grant: {missing:?}"
    ))
}

/// Every rule config/rbac grants the operator: the manager's, leader election's, the
/// authenticated metrics endpoint's and the class reader's.
pub fn config_rbac_rules() -> Vec<PolicyRule> {
    let text = std::fs::read_to_string(repo().join("config/rbac/metrics_auth_role.yaml"))
        .expect("metrics_auth_role.yaml");
    let metrics: ClusterRole = serde_yaml::from_str(&text).expect("ClusterRole");
    [
        manager_rules(),
        leader_rules(),
        metrics.rules.expect("rules"),
        class_reader_rules(),
    ]
    .concat()
}

/// Run by hack/test.sh once the whole suite has run (a partial run leaves grants unused): the
/// operator asked the API servers of the run (the environment's and any a test started) for
/// exactly what config/rbac grants.
#[test]
#[ignore = "reads the audit logs of a whole e2e run: hack/test.sh runs it after the suite"]
fn the_whole_run_used_exactly_what_config_rbac_grants() {
    let dir = &env().state_dir;
    let mut used = BTreeSet::new();
    let mut logs = Vec::new();
    for entry in std::fs::read_dir(dir).expect("the environment's state dir") {
        let path = entry.expect("a state dir entry").path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if name.starts_with("audit") && name.ends_with(".jsonl") {
            used.extend(operator_calls(
                &std::fs::read_to_string(&path).expect("audit log"),
            ));
            logs.push(name.into_owned());
        }
    }
    assert!(!logs.is_empty(), "no audit log in {}", dir.display());
    eprintln!("the operator's calls in {logs:?}:");
    for (g, r, v) in &used {
        eprintln!("  {g:>22} {r:<28} {v}");
    }
    if let Err(e) = compare(&granted(&config_rbac_rules()), &used) {
        panic!("{e}");
    }
}

#[cfg(test)]
mod checks {
    use super::*;

    fn event(agent: &str, user: &str, verb: &str, object: serde_json::Value) -> String {
        serde_json::json!({"kind": "Event", "verb": verb, "userAgent": agent,
            "user": {"username": user}, "objectRef": object,
            "requestURI": "/version", "annotations": {"authorization.k8s.io/decision": "allow"}})
        .to_string()
    }

    const OP: &str = "s3-operator/0.1.0 (t1-a)";
    const SA: &str = "system:serviceaccount:e2e-op-x:s3-operator";

    fn call(g: &str, r: &str, v: &str) -> Call {
        (g.into(), r.into(), v.into())
    }

    /// Only the operator's own requests count, subresources and non-resource URLs included; an
    /// apply that created its object counts as a create too.
    #[test]
    fn the_operator_is_known_by_its_user_agent_and_service_account() {
        let status = serde_json::json!({"apiGroup": "s3.operator.dev", "resource": "buckets",
            "subresource": "status", "namespace": "a", "name": "b"});
        let secrets = serde_json::json!({"resource": "secrets", "namespace": "a"});
        let mut applied: serde_json::Value =
            serde_json::from_str(&event(OP, SA, "patch", secrets.clone())).unwrap();
        applied["responseStatus"] = serde_json::json!({"code": 201});
        let applied_secret = applied.to_string();
        let log = [
            event(OP, SA, "patch", status.clone()),
            event(OP, SA, "watch", secrets.clone()),
            applied_secret,
            event(OP, SA, "get", serde_json::Value::Null),
            // A test with the operator's token, and the CLI as the administrator.
            event("kube-rs/1.0", SA, "delete", secrets.clone()),
            event(OP, "s3op-admin", "create", status),
            "not json".into(),
        ]
        .join("\n");
        let used = operator_calls(&log);
        assert_eq!(
            used,
            BTreeSet::from([
                call("s3.operator.dev", "buckets/status", "patch"),
                call("", "secrets", "watch"),
                call("", "secrets", "patch"),
                call("", "secrets", "create"),
            ])
        );
        let odd = log.replace("/version", "/apis");
        assert!(operator_calls(&odd).contains(&call("", "/apis", "get")));
    }

    /// A verb granted but never used fails, and so does one used but not granted: removing a
    /// verb from config/rbac that the operator uses, or adding one it does not, is caught.
    #[test]
    fn unused_and_missing_grants_both_fail() {
        let all = granted(&config_rbac_rules());
        let admission = call("s3.operator.dev", "bucketaccesses/finalizers", "update");
        let used: BTreeSet<Call> = all.iter().filter(|c| **c != admission).cloned().collect();
        compare(&all, &used).expect("exactly the grants");
        let secrets_get = call("", "secrets", "get");
        let mut fewer = used.clone();
        fewer.remove(&secrets_get);
        let e = compare(&all, &fewer).expect_err("a grant nothing used");
        assert!(
            e.contains("never asked for: [(\"\", \"secrets\", \"get\")]"),
            "{e}"
        );
        let mut less_granted = all.clone();
        less_granted.remove(&secrets_get);
        let e = compare(&less_granted, &used).expect_err("a call nothing grants");
        assert!(
            e.contains("does not grant: [(\"\", \"secrets\", \"get\")]"),
            "{e}"
        );
    }
}
