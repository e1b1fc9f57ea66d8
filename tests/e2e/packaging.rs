//! The three ways users install the operator (Helm chart, kustomize overlays, OLM bundle):
//! each is linted, rendered, applied to the real API server (server-side dry run, then for
//! real), and then the operator runs as that package's Deployment would, under exactly the
//! ServiceAccount and RBAC the package created. It must pass the core flow on the package's own
//! samples and be refused what it should not have.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use s3_operator::api::{Bucket, BucketAccess};
use serde_json::{Value, json};

use crate::support::*;

const T: Duration = Duration::from_secs(90);
const KUBE_VERSION: &str = "1.34.4";

// ---------------------------------------------------------------- tools and manifests

/// Runs a tool from the cache (or PATH), feeding `stdin`; panics with its output on failure.
fn run(tool: &str, args: &[&str], stdin: Option<&str>) -> String {
    let (code, out, err) = try_run(tool, args, stdin);
    assert_eq!(code, 0, "{tool} {args:?} failed:\n{out}\n{err}");
    out
}

fn try_run(tool: &str, args: &[&str], stdin: Option<&str>) -> (i32, String, String) {
    use std::io::Write;
    let cached = Path::new(&tools_bin()).join(tool);
    let program = if cached.exists() {
        cached.display().to_string()
    } else {
        tool.to_string()
    };
    let mut child = std::process::Command::new(&program)
        .args(args)
        .current_dir(repo())
        .env("KUBECONFIG", &env().kubeconfig)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{program}: {e} (hack/tools.sh builds it)"));
    let input = stdin.unwrap_or_default().to_string();
    let mut pipe = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || pipe.write_all(input.as_bytes()));
    let out = child.wait_with_output().expect("wait");
    writer.join().unwrap().expect("stdin");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

fn docs(yaml: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(yaml)
        .filter_map(|d| {
            let v: Value = serde::Deserialize::deserialize(d).expect("YAML document");
            (!v.is_null()).then_some(v)
        })
        .collect()
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

fn yaml(docs: &[&Value]) -> String {
    docs.iter()
        .map(|d| format!("---\n{}", serde_yaml::to_string(d).unwrap()))
        .collect()
}

/// Server-side dry run, then the real server-side apply.
fn apply(manifests: &str) {
    let base = [
        "apply",
        "--server-side",
        "--force-conflicts",
        "--field-manager=e2e-package",
        "-f",
        "-",
    ];
    let mut dry = base.to_vec();
    dry.push("--dry-run=server");
    run("kubectl", &dry, Some(manifests));
    run("kubectl", &base, Some(manifests));
}

/// The monitoring CRDs the packages' ServiceMonitor and PrometheusRule need, from the
/// prometheus-operator Go module (`hack/tools.sh crds`).
async fn install_monitoring_crds() {
    for kind in ["servicemonitors", "prometheusrules"] {
        apply_crds(
            &Path::new(&tools_bin()).join(format!("../crds/monitoring.coreos.com_{kind}.yaml")),
        )
        .await;
    }
}

// ---------------------------------------------------------------- what every package must do

/// The package's own samples converge, the credentials work, and deleting them cleans up AWS.
async fn core_flow(ns: &str) {
    let client = admin().await;
    let buckets = Api::<Bucket>::namespaced(client.clone(), ns);
    let accesses = Api::<BucketAccess>::namespaced(client.clone(), ns);
    let bucket: Bucket = serde_yaml::from_str(
        &std::fs::read_to_string(repo().join("config/samples/s3_v1alpha1_bucket.yaml")).unwrap(),
    )
    .unwrap();
    let access: BucketAccess = serde_yaml::from_str(
        &std::fs::read_to_string(repo().join("config/samples/s3_v1alpha1_bucketaccess.yaml"))
            .unwrap(),
    )
    .unwrap();
    buckets
        .create(&PostParams::default(), &bucket)
        .await
        .unwrap();
    accesses
        .create(&PostParams::default(), &access)
        .await
        .unwrap();
    let name = bucket.metadata.name.clone().unwrap();
    let access_name = access.metadata.name.clone().unwrap();
    wait_reason(&buckets, &name, "Available", T).await;
    wait_reason(&accesses, &access_name, "Available", T).await;
    let s3_name = buckets
        .get(&name)
        .await
        .unwrap()
        .status
        .unwrap()
        .bucket_name
        .unwrap();
    let user = accesses
        .get(&access_name)
        .await
        .unwrap()
        .status
        .unwrap()
        .user_arn
        .unwrap();

    let secret_name = access.spec.credentials.secret_name.clone().unwrap();
    let secret = Api::<Secret>::namespaced(client.clone(), ns)
        .get(&secret_name)
        .await
        .unwrap();
    let d = secret_data(&secret);
    let s3 = s3_with(&d["AWS_ACCESS_KEY_ID"], &d["AWS_SECRET_ACCESS_KEY"]);
    // moto applies IAM changes at once; the retry only covers the first request racing the policy.
    wait_for("the sample's key pair writes to its bucket", T, || async {
        s3.put_object()
            .bucket(&s3_name)
            .key("hello")
            .body(b"hi".to_vec().into())
            .send()
            .await
            .ok()
    })
    .await;
    // The sample keeps object versions, so its bucket is only deleted with forceDelete.
    buckets
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"forceDelete": true}})),
        )
        .await
        .unwrap();

    accesses
        .delete(&access_name, &DeleteParams::default())
        .await
        .unwrap();
    buckets
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the samples are gone", T, || async {
        let left = buckets.list(&ListParams::default()).await.ok()?.items.len()
            + accesses
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .len();
        (left == 0).then_some(())
    })
    .await;
    assert!(
        !bucket_exists(&s3_name).await,
        "the sample bucket (deletionPolicy Delete) is gone"
    );
    let user = user.rsplit('/').next().unwrap().to_string();
    assert!(
        admin_iam()
            .get_user()
            .user_name(&user)
            .send()
            .await
            .is_err(),
        "IAM user {user} is deleted with its BucketAccess"
    );
}

fn forbidden<T: std::fmt::Debug>(what: &str, r: Result<T, kube::Error>) {
    match r {
        Err(kube::Error::Api(e)) if e.code == 403 => {}
        other => panic!("{what}: expected 403 Forbidden, got {other:?}"),
    }
}

/// What no package may grant: CRDs, webhooks and RBAC writes; and, when `unwatched` is given,
/// Secrets in a namespace the operator does not watch.
async fn refused(client: &kube::Client, watched: &str, unwatched: Option<&str>) {
    let meta = || ObjectMeta {
        name: Some(format!("e2e-{}", random(5))),
        ..Default::default()
    };
    forbidden(
        "create a CRD",
        Api::<CustomResourceDefinition>::all(client.clone())
            .create(
                &PostParams::default(),
                &CustomResourceDefinition {
                    metadata: meta(),
                    ..Default::default()
                },
            )
            .await,
    );
    forbidden(
        "create a webhook",
        Api::<ValidatingWebhookConfiguration>::all(client.clone())
            .create(
                &PostParams::default(),
                &ValidatingWebhookConfiguration {
                    metadata: meta(),
                    ..Default::default()
                },
            )
            .await,
    );
    forbidden(
        "create a ClusterRole",
        Api::<ClusterRole>::all(client.clone())
            .create(
                &PostParams::default(),
                &ClusterRole {
                    metadata: meta(),
                    ..Default::default()
                },
            )
            .await,
    );
    forbidden(
        "create a Role in a watched namespace",
        Api::<Role>::namespaced(client.clone(), watched)
            .create(
                &PostParams::default(),
                &Role {
                    metadata: meta(),
                    ..Default::default()
                },
            )
            .await,
    );
    forbidden(
        "delete a Secret in a watched namespace",
        Api::<Secret>::namespaced(client.clone(), watched)
            .delete("anything", &DeleteParams::default())
            .await,
    );
    if let Some(ns) = unwatched {
        forbidden(
            "read Secrets in an unwatched namespace",
            Api::<Secret>::namespaced(client.clone(), ns)
                .list(&ListParams::default())
                .await,
        );
    }
}

/// A client with the token of the package's ServiceAccount.
async fn as_operator(sa_ns: &str, sa: &str) -> kube::Client {
    let token = service_account(&admin().await, sa_ns, sa, &[]).await;
    client_with_token(&token).await
}

/// Runs the packaged operator (its Deployment's container) and checks flow and refusals.
async fn run_package(docs: &[Value], targets: &str, flow_ns: &str, unwatched: Option<&str>) {
    let deployment = of_kind(docs, "Deployment")[0];
    let sa_ns = deployment["metadata"]["namespace"]
        .as_str()
        .expect("Deployment namespace");
    run_container(
        deployment["spec"]["template"]["spec"].clone(),
        sa_ns,
        targets,
        flow_ns,
        unwatched,
    )
    .await;
}

async fn run_container(
    pod: Value,
    sa_ns: &str,
    targets: &str,
    flow_ns: &str,
    unwatched: Option<&str>,
) {
    let sa = pod["serviceAccountName"]
        .as_str()
        .expect("serviceAccountName");
    let container = &pod["containers"][0];
    let cluster = format!("p{}", random(6));
    let id = Identity::installed(sa_ns, sa, &cluster).await;
    let op = Operator::start_packaged(&id, container, targets, "0").await;
    core_flow(flow_ns).await;
    refused(&as_operator(sa_ns, sa).await, flow_ns, unwatched).await;
    assert_eq!(
        op.terminate().await,
        Some(0),
        "the packaged operator stops cleanly"
    );
}

// ---------------------------------------------------------------- Helm

fn helm_template(release: &str, ns: &str, sets: &[&str]) -> Vec<Value> {
    let mut args = vec![
        "template",
        release,
        "charts/s3-operator",
        "--namespace",
        ns,
        "--kube-version",
        KUBE_VERSION,
        "--include-crds",
    ];
    for s in sets {
        args.extend(["--set", s]);
    }
    docs(&run("helm", &args, None))
}

#[tokio::test]
async fn helm_chart_lints_and_rejects_bad_values() {
    for sets in [
        vec![],
        vec!["watchNamespaces={a,b}"],
        vec![
            "serviceMonitor.enabled=true",
            "prometheusRule.enabled=true",
            "grafanaDashboard.enabled=true",
            "podDisruptionBudget.enabled=true",
        ],
    ] {
        let mut args = vec![
            "lint",
            "--strict",
            "--kube-version",
            KUBE_VERSION,
            "charts/s3-operator",
        ];
        for s in &sets {
            args.extend(["--set", s]);
        }
        run("helm", &args, None);
    }
    // The schema names the bad value.
    for (set, needle) in [
        ("replicaCount=lots", "replicaCount"),
        ("noSuchValue=1", "noSuchValue"),
        ("logFormat=xml", "logFormat"),
    ] {
        let (code, out, err) = try_run(
            "helm",
            &["template", "x", "charts/s3-operator", "--set", set],
            None,
        );
        assert_ne!(code, 0, "{set} was accepted:\n{out}");
        assert!(
            err.contains(needle),
            "{set}: the error does not name it:\n{err}"
        );
    }
}

#[tokio::test]
async fn helm_chart_installs_cluster_wide_and_runs() {
    install_crds().await;
    install_monitoring_crds().await;
    let client = admin().await;
    let ns = namespace(&client, "helm").await;
    let release = format!("h{}", random(5));
    let rendered = helm_template(
        &release,
        &ns,
        &[
            "serviceMonitor.enabled=true",
            "prometheusRule.enabled=true",
            "grafanaDashboard.enabled=true",
            "podDisruptionBudget.enabled=true",
        ],
    );
    for kind in [
        "ClusterRole",
        "ClusterRoleBinding",
        "ServiceMonitor",
        "PrometheusRule",
        "PodDisruptionBudget",
        "ConfigMap",
        "Service",
        "ServiceAccount",
    ] {
        assert!(
            !of_kind(&rendered, kind).is_empty(),
            "the chart renders no {kind}"
        );
    }
    let dashboards = of_kind(&rendered, "ConfigMap");
    assert_eq!(
        dashboards[0]["metadata"]["labels"]["grafana_dashboard"],
        "1"
    );
    apply(&yaml(&rendered.iter().collect::<Vec<_>>()));
    let flow_ns = namespace(&client, "helm-app").await;
    run_package(&rendered, "", &flow_ns, None).await;
}

#[tokio::test]
async fn helm_chart_installs_namespaced_and_runs() {
    install_crds().await;
    let client = admin().await;
    let ns = namespace(&client, "helmns").await;
    let a = namespace(&client, "helmns-a").await;
    let b = namespace(&client, "helmns-b").await;
    let other = namespace(&client, "helmns-other").await;
    let release = format!("h{}", random(5));
    let rendered = helm_template(&release, &ns, &[&format!("watchNamespaces={{{a},{b}}}")]);
    assert!(
        of_kind(&rendered, "ClusterRole").is_empty()
            && of_kind(&rendered, "ClusterRoleBinding").is_empty(),
        "namespaced mode grants nothing cluster-wide"
    );
    let role_namespaces: Vec<&str> = of_kind(&rendered, "Role")
        .iter()
        .filter_map(|r| r["metadata"]["namespace"].as_str())
        .collect();
    for n in [&a, &b, &ns] {
        assert!(
            role_namespaces.contains(&n.as_str()),
            "no Role in {n}: {role_namespaces:?}"
        );
    }
    apply(&yaml(&rendered.iter().collect::<Vec<_>>()));
    run_package(&rendered, "", &b, Some(&other)).await;
}

// ---------------------------------------------------------------- kustomize

const OVERLAY_NS: &str = "s3-operator-system";

#[tokio::test]
async fn kustomize_bases_and_overlays_install_and_run() {
    install_crds().await;
    install_monitoring_crds().await;
    for base in [
        "crd",
        "rbac",
        "manager",
        "prometheus",
        "samples",
        "scorecard",
    ] {
        run("kustomize", &["build", &format!("config/{base}")], None);
    }
    let client = admin().await;
    // The overlays name fixed namespaces, so they are installed one after the other; each
    // removes its RBAC afterwards so the next one runs with only its own grants.
    for overlay in ["own-namespace", "namespaces", "cluster"] {
        let rendered = docs(&run(
            "kustomize",
            &["build", &format!("config/overlays/{overlay}")],
            None,
        ));
        for n in of_kind(&rendered, "Role")
            .iter()
            .chain(of_kind(&rendered, "RoleBinding").iter())
            .filter_map(|r| r["metadata"]["namespace"].as_str())
        {
            ensure_namespace(&client, n).await;
        }
        ensure_namespace(&client, OVERLAY_NS).await;
        apply(&yaml(&rendered.iter().collect::<Vec<_>>()));
        let other = namespace(&client, "kz-other").await;
        match overlay {
            "own-namespace" => run_package(&rendered, "", OVERLAY_NS, Some(&other)).await,
            "namespaces" => {
                assert!(
                    of_kind(&rendered, "ClusterRoleBinding").is_empty(),
                    "the namespaces overlay grants nothing cluster-wide"
                );
                run_package(&rendered, "", "team-b", Some(&other)).await
            }
            _ => {
                let flow = namespace(&client, "kz-app").await;
                run_package(&rendered, "", &flow, None).await
            }
        }
        let rbac: Vec<&Value> = rendered
            .iter()
            .filter(|d| {
                ["Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"]
                    .contains(&d["kind"].as_str().unwrap_or_default())
            })
            .collect();
        run(
            "kubectl",
            &["delete", "--wait=false", "-f", "-"],
            Some(&yaml(&rbac)),
        );
    }
}

async fn ensure_namespace(client: &kube::Client, name: &str) {
    let api = Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone());
    if api.get_opt(name).await.unwrap().is_none() {
        let ns = k8s_openapi::api::core::v1::Namespace {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let _ = api.create(&PostParams::default(), &ns).await;
    }
}

// ---------------------------------------------------------------- OLM

fn csv() -> Value {
    let text = std::fs::read_to_string(
        repo().join("bundle/manifests/s3-operator.clusterserviceversion.yaml"),
    )
    .unwrap();
    serde_yaml::from_str(&text).unwrap()
}

#[tokio::test]
async fn olm_bundle_validates_with_no_warnings() {
    let out = run(
        "bundle-validate",
        &[
            "./bundle",
            "--optional-values",
            &format!("k8s-version={}", &KUBE_VERSION[..4]),
        ],
        None,
    );
    assert!(!out.contains("WARN") && !out.contains("ERROR"), "{out}");
    // A broken copy is refused, so the validator really looks.
    let dir = logs_dir().join(format!("bundle-{}", random(5)));
    run("cp", &["-r", "bundle", dir.to_str().unwrap()], None);
    let path = dir.join("manifests/s3-operator.clusterserviceversion.yaml");
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("installModes:", "installModez:");
    std::fs::write(&path, text).unwrap();
    let (code, out, err) = try_run("bundle-validate", &[dir.to_str().unwrap()], None);
    assert_ne!(code, 0, "a CSV without install modes passed:\n{out}{err}");
}

/// The RBAC OLM creates from the CSV's `permissions` for an OperatorGroup with `targets`
/// (empty: AllNamespaces, where OLM widens them to a ClusterRole and ClusterRoleBinding).
async fn olm_rbac(client: &kube::Client, op_ns: &str, targets: &[String]) {
    let csv = csv();
    for p in csv["spec"]["install"]["spec"]["permissions"]
        .as_array()
        .unwrap()
    {
        let sa = p["serviceAccountName"].as_str().unwrap();
        let rules: Vec<k8s_openapi::api::rbac::v1::PolicyRule> =
            serde_json::from_value(p["rules"].clone()).unwrap();
        let subject = Subject {
            kind: "ServiceAccount".into(),
            name: sa.into(),
            namespace: Some(op_ns.into()),
            api_group: None,
        };
        let name = format!("{op_ns}-{sa}");
        if targets.is_empty() {
            let role = ClusterRole {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    ..Default::default()
                },
                rules: Some(rules.clone()),
                ..Default::default()
            };
            Api::<ClusterRole>::all(client.clone())
                .create(&PostParams::default(), &role)
                .await
                .unwrap();
            let binding = ClusterRoleBinding {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    ..Default::default()
                },
                role_ref: RoleRef {
                    api_group: "rbac.authorization.k8s.io".into(),
                    kind: "ClusterRole".into(),
                    name: name.clone(),
                },
                subjects: Some(vec![subject.clone()]),
            };
            Api::<ClusterRoleBinding>::all(client.clone())
                .create(&PostParams::default(), &binding)
                .await
                .unwrap();
        }
        // OLM always grants the permissions in the operator's namespace, and copies them into
        // every target namespace.
        let mut namespaces = vec![op_ns.to_string()];
        namespaces.extend(targets.iter().cloned());
        for ns in namespaces {
            let role = Role {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    ..Default::default()
                },
                rules: Some(rules.clone()),
            };
            Api::<Role>::namespaced(client.clone(), &ns)
                .create(&PostParams::default(), &role)
                .await
                .unwrap();
            let binding = RoleBinding {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    ..Default::default()
                },
                role_ref: RoleRef {
                    api_group: "rbac.authorization.k8s.io".into(),
                    kind: "Role".into(),
                    name: name.clone(),
                },
                subjects: Some(vec![subject.clone()]),
            };
            Api::<RoleBinding>::namespaced(client.clone(), &ns)
                .create(&PostParams::default(), &binding)
                .await
                .unwrap();
        }
    }
}

async fn olm_install(targets_of: impl Fn(&str) -> Vec<String>, unwatched: bool) {
    install_crds().await;
    let olm_crd =
        Path::new(&tools_bin()).join("../crds/operators.coreos.com_clusterserviceversions.yaml");
    apply_crds(&olm_crd).await;
    let client = admin().await;
    let op_ns = namespace(&client, "olm").await;
    let targets = targets_of(&op_ns);
    for t in &targets {
        ensure_namespace(&client, t).await;
    }
    // The CSV itself is accepted by the API server's schema for it.
    let mut csv = csv();
    csv["metadata"]["namespace"] = json!(op_ns);
    let csv_yaml = serde_yaml::to_string(&csv).unwrap();
    apply(&csv_yaml);
    // What OLM does on install: the ServiceAccount, then RBAC from the CSV.
    let pod = csv["spec"]["install"]["spec"]["deployments"][0]["spec"]["template"]["spec"].clone();
    let sa = pod["serviceAccountName"].as_str().unwrap();
    service_account(&client, &op_ns, sa, &[]).await;
    olm_rbac(&client, &op_ns, &targets).await;
    let other = namespace(&client, "olm-other").await;
    let flow = match targets.last() {
        Some(t) => t.clone(),
        None => namespace(&client, "olm-app").await,
    };
    run_container(
        pod,
        &op_ns,
        &targets.join(","),
        &flow,
        unwatched.then_some(other.as_str()),
    )
    .await;
}

#[tokio::test]
async fn olm_csv_installs_multi_namespace_and_runs() {
    olm_install(|op| vec![format!("{op}-a"), format!("{op}-b")], true).await;
}

#[tokio::test]
async fn olm_csv_installs_all_namespaces_and_runs() {
    olm_install(|_| vec![], false).await;
}

// ---------------------------------------------------------------- alerts and images

#[test]
fn alert_rules_pass_promtool() {
    run(
        "promtool",
        &["check", "rules", "config/prometheus/rules.yaml"],
        None,
    );
    let out = run(
        "promtool",
        &["test", "rules", "config/prometheus/rules_test.yaml"],
        None,
    );
    assert!(out.contains("SUCCESS"), "{out}");
}

#[test]
fn dockerfiles_pass_hadolint_and_build_as_ci_does() {
    for file in ["Dockerfile", "bundle.Dockerfile"] {
        let out = run("hadolint", &[file], None);
        assert!(out.trim().is_empty(), "{file}: {out}");
    }
    // The image's build stage runs the release build CI runs (hack/lib.sh RELEASE_BUILD).
    let lib = std::fs::read_to_string(repo().join("hack/lib.sh")).unwrap();
    let ci = lib
        .lines()
        .find_map(|l| l.strip_prefix("RELEASE_BUILD=\""))
        .and_then(|l| l.split('"').next())
        .expect("RELEASE_BUILD in hack/lib.sh");
    let dockerfile = std::fs::read_to_string(repo().join("Dockerfile")).unwrap();
    assert!(
        dockerfile
            .lines()
            .any(|l| l.trim_start().starts_with("RUN") && l.trim_end().ends_with(ci)),
        "the Dockerfile's build stage does not run `{ci}`"
    );
}
