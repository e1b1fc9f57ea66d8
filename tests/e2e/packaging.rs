//! The three ways users install the operator (Helm chart, kustomize overlays, OLM bundle):
//! each is linted, rendered, applied to the real API server (server-side dry run, then for
//! real), and then the operator runs as that package's Deployment would, under exactly the
//! ServiceAccount and RBAC the package created. It must pass the core flow on the package's own
//! samples and be refused what it should not have.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::{ClusterRole, Role};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use s3_operator::api::{Bucket, BucketAccess};
use serde_json::{Value, json};

use crate::support::*;

const T: Duration = Duration::from_secs(90);
pub(crate) const KUBE_VERSION: &str = "1.34.4";

// ---------------------------------------------------------------- tools and manifests

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

/// Server-side dry run, then the real server-side apply, with every Deployment at 0 replicas:
/// these tests run the package's container as a host process (cluster.rs runs Pods), and the
/// node would otherwise start Pods of an image that is not there.
fn apply(manifests: &str) {
    let mut scaled = docs(manifests);
    for d in scaled.iter_mut().filter(|d| d["kind"] == "Deployment") {
        d["spec"]["replicas"] = json!(0);
    }
    let scaled = yaml(&scaled.iter().collect::<Vec<_>>());
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
    tool("kubectl", &dry, Some(manifests));
    tool("kubectl", &base, Some(&scaled));
}

/// The monitoring CRDs the packages' ServiceMonitor and PrometheusRule need, from the
/// prometheus-operator Go module (`hack/tools.sh crds`).
pub(crate) async fn install_monitoring_crds() {
    for kind in ["servicemonitors", "prometheusrules"] {
        apply_crds(
            &Path::new(&tools_bin()).join(format!("../crds/monitoring.coreos.com_{kind}.yaml")),
        )
        .await;
    }
}

// ---------------------------------------------------------------- what every package must do

/// The package's own samples converge, the credentials work, and deleting them cleans up AWS.
pub(crate) async fn core_flow(ns: &str) {
    let samples = the_samples_become_available(ns).await;
    the_samples_key_pair_writes_to_its_bucket(&samples).await;
    deleting_the_samples_cleans_up_aws(&samples).await;
}

/// The samples (a Bucket and a BucketAccess to it) served in one namespace.
struct Samples {
    buckets: Api<Bucket>,
    accesses: Api<BucketAccess>,
    secrets: Api<Secret>,
    name: String,
    access_name: String,
    secret_name: String,
    s3_name: String,
    user_arn: String,
}

/// The sample Bucket and BucketAccess created in `ns` together, both then Available.
async fn the_samples_become_available(ns: &str) -> Samples {
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
    let user_arn = accesses
        .get(&access_name)
        .await
        .unwrap()
        .status
        .unwrap()
        .user_arn
        .unwrap();
    Samples {
        buckets,
        accesses,
        secrets: Api::namespaced(client, ns),
        name,
        access_name,
        secret_name: access.spec.credentials.secret_name.clone().unwrap(),
        s3_name,
        user_arn,
    }
}

async fn the_samples_key_pair_writes_to_its_bucket(samples: &Samples) {
    let secret = samples.secrets.get(&samples.secret_name).await.unwrap();
    let d = secret_data(&secret);
    let s3 = s3_with(&d["AWS_ACCESS_KEY_ID"], &d["AWS_SECRET_ACCESS_KEY"]);
    // moto applies IAM changes at once; the retry only covers the first request racing the policy.
    wait_for("the sample's key pair writes to its bucket", T, || async {
        s3.put_object()
            .bucket(&samples.s3_name)
            .key("hello")
            .body(b"hi".to_vec().into())
            .send()
            .await
            .ok()
    })
    .await;
}

/// Deleting the samples deletes their bucket (deletionPolicy Delete) and the access's IAM user.
async fn deleting_the_samples_cleans_up_aws(samples: &Samples) {
    let Samples {
        buckets,
        accesses,
        name,
        access_name,
        s3_name,
        ..
    } = samples;
    // The sample keeps object versions, so its bucket is only deleted with forceDelete.
    buckets
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"forceDelete": true}})),
        )
        .await
        .unwrap();

    accesses
        .delete(access_name, &DeleteParams::default())
        .await
        .unwrap();
    buckets
        .delete(name, &DeleteParams::default())
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
        !bucket_exists(s3_name).await,
        "the sample bucket (deletionPolicy Delete) is gone"
    );
    let user = samples.user_arn.rsplit('/').next().unwrap().to_string();
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
pub(crate) async fn refused(client: &kube::Client, watched: &str, unwatched: Option<&str>) {
    no_crd_webhook_or_cluster_role_is_created(client).await;
    no_role_is_created_nor_secret_deleted_where_it_watches(client, watched).await;
    if let Some(ns) = unwatched {
        forbidden(
            "read Secrets in an unwatched namespace",
            Api::<Secret>::namespaced(client.clone(), ns)
                .list(&ListParams::default())
                .await,
        );
    }
}

/// Metadata with a new random name.
fn fresh_meta() -> ObjectMeta {
    ObjectMeta {
        name: Some(format!("e2e-{}", random(5))),
        ..Default::default()
    }
}

async fn no_crd_webhook_or_cluster_role_is_created(client: &kube::Client) {
    forbidden(
        "create a CRD",
        Api::<CustomResourceDefinition>::all(client.clone())
            .create(
                &PostParams::default(),
                &CustomResourceDefinition {
                    metadata: fresh_meta(),
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
                    metadata: fresh_meta(),
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
                    metadata: fresh_meta(),
                    ..Default::default()
                },
            )
            .await,
    );
}

async fn no_role_is_created_nor_secret_deleted_where_it_watches(
    client: &kube::Client,
    watched: &str,
) {
    forbidden(
        "create a Role in a watched namespace",
        Api::<Role>::namespaced(client.clone(), watched)
            .create(
                &PostParams::default(),
                &Role {
                    metadata: fresh_meta(),
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
}

/// A client with the token of the package's ServiceAccount.
pub(crate) async fn as_operator(sa_ns: &str, sa: &str) -> kube::Client {
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
        metrics_reader(docs),
    )
    .await;
}

/// The package's ClusterRole for scrapers: the one allowing get on /metrics.
fn metrics_reader(docs: &[Value]) -> Option<&str> {
    of_kind(docs, "ClusterRole")
        .into_iter()
        .find(|r| r["rules"][0]["nonResourceURLs"] == json!(["/metrics"]))
        .and_then(|r| r["metadata"]["name"].as_str())
}

async fn run_container(
    pod: Value,
    sa_ns: &str,
    targets: &str,
    flow_ns: &str,
    unwatched: Option<&str>,
    reader_role: Option<&str>,
) {
    let sa = pod["serviceAccountName"]
        .as_str()
        .expect("serviceAccountName");
    let container = &pod["containers"][0];
    let cluster = format!("p{}", random(6));
    let id = Identity::installed(sa_ns, sa, &cluster).await;
    let op = Operator::start_packaged(&id, container, targets, "0").await;
    core_flow(flow_ns).await;
    let client = as_operator(sa_ns, sa).await;
    refused(&client, flow_ns, unwatched).await;
    let mut elsewhere = vec![flow_ns, "default"];
    elsewhere.extend(unwatched);
    leases_only_in(&client, sa_ns, &elsewhere).await;
    let secure = container["env"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|e| e["name"] == "METRICS_SECURE" && e["value"] == "true");
    if secure {
        let role = reader_role.expect("a secure package ships a metrics-reader ClusterRole");
        scrapes_need_a_reader_token(&op, role).await;
    }
    assert_eq!(
        op.terminate().await,
        Some(0),
        "the packaged operator stops cleanly"
    );
}

/// The operator may write Leases in its own namespace (leader election) and nowhere else.
pub(crate) async fn leases_only_in(client: &kube::Client, own: &str, elsewhere: &[&str]) {
    let lease = || Lease {
        metadata: ObjectMeta {
            name: Some(format!("e2e-{}", random(5))),
            ..Default::default()
        },
        ..Default::default()
    };
    for ns in elsewhere.iter().filter(|n| **n != own) {
        forbidden(
            &format!("create a Lease in {ns}"),
            Api::<Lease>::namespaced(client.clone(), ns)
                .create(&PostParams::default(), &lease())
                .await,
        );
    }
    Api::<Lease>::namespaced(client.clone(), own)
        .create(&PostParams::default(), &lease())
        .await
        .expect("the operator may create Leases in its own namespace");
}

/// Creates a uniquely named copy of the ClusterRole in `path` (an RBAC source); returns its name.
async fn cluster_role_from(client: &kube::Client, path: &str) -> String {
    let text = std::fs::read_to_string(repo().join(path)).unwrap();
    let mut role: ClusterRole = serde_yaml::from_str(&text).unwrap();
    let name = format!("e2e-{}-{}", role.metadata.name.clone().unwrap(), random(5));
    role.metadata.name = Some(name.clone());
    Api::<ClusterRole>::all(client.clone())
        .create(&PostParams::default(), &role)
        .await
        .expect("create ClusterRole");
    name
}

/// A scraper bound to `reader_role` gets the metrics over HTTPS; without a token, 401.
async fn scrapes_need_a_reader_token(op: &Operator, reader_role: &str) {
    let client = admin().await;
    let ns = namespace(&client, "scraper").await;
    let token = service_account(&client, &ns, "prometheus", &[]).await;
    bind_cluster_role(&client, None, reader_role, &ns, "prometheus").await;
    // A refusal seen before the binding reached the authorizer is reused for a few seconds.
    let body = wait_for("the scraper's token to be allowed", T, || async {
        let (status, body) = https_get(&op.metrics_addr, "/metrics", Some(&token)).await?;
        (status == 200).then_some(body)
    })
    .await;
    assert!(body.contains("controller_runtime_"), "{body}");
    let anonymous = https_get(&op.metrics_addr, "/metrics", None).await;
    assert_eq!(anonymous.map(|r| r.0), Some(401));
}

// ---------------------------------------------------------------- Helm

/// `helm template` arguments for the chart as release `release` in `ns` with `sets`.
fn template_args<'a>(release: &'a str, ns: &'a str, sets: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "template",
        release,
        "charts/s3-operator",
        "--namespace",
        ns,
        "--kube-version",
        KUBE_VERSION,
    ];
    for s in sets {
        args.extend(["--set", s]);
    }
    args
}

fn helm_template(release: &str, ns: &str, sets: &[&str]) -> Vec<Value> {
    let mut args = template_args(release, ns, sets);
    // What `helm install` creates: the `helm test` hooks only run on `helm test`.
    args.extend(["--include-crds", "--skip-tests"]);
    docs(&tool("helm", &args, None))
}

#[tokio::test]
async fn helm_chart_lints_and_rejects_bad_values() {
    every_values_combination_lints_strictly();
    bad_values_are_refused_naming_the_value();
}

/// `helm lint --strict` passes with the defaults and each combination of features.
fn every_values_combination_lints_strictly() {
    for sets in [
        vec![],
        vec!["watchNamespaces={a,b}"],
        vec![
            "serviceMonitor.enabled=true",
            "prometheusRule.enabled=true",
            "grafanaDashboard.enabled=true",
            "podDisruptionBudget.enabled=true",
        ],
        vec![
            "metrics.secure=false",
            "serviceMonitor.enabled=true",
            "networkPolicy.enabled=true",
        ],
        vec![
            "metrics.certSecret=metrics-tls",
            "serviceMonitor.enabled=true",
            "serviceMonitor.tlsConfig.serverName=s3-operator-metrics",
            "serviceMonitor.tlsConfig.ca.secret.name=metrics-tls",
            "serviceMonitor.tlsConfig.ca.secret.key=ca.crt",
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
        tool("helm", &args, None);
    }
}

/// The schema refuses a bad value and names it.
fn bad_values_are_refused_naming_the_value() {
    for (set, needle) in [
        ("replicaCount=lots", "replicaCount"),
        ("noSuchValue=1", "noSuchValue"),
        ("logFormat=xml", "logFormat"),
        ("networkPolicy.egress.aws.cidrs={10.0.0.0}", "networkPolicy"),
        ("networkPolicy.ingress.noSuch=1", "noSuch"),
        ("serviceMonitor.tlsConfig.noSuch=1", "noSuch"),
        ("podDisruptionBudget.enabled=maybe", "podDisruptionBudget"),
        (
            "metrics.secure=false,metrics.certSecret=tls",
            "metrics.certSecret",
        ),
    ] {
        let (code, out, err) = try_tool(
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

/// The `helm test` hook: a Service onto the operator's probe port and a Pod of the operator's
/// image running `s3-operator probe` on its /readyz. The Pod is outside the operator's selector
/// (its NetworkPolicy and PDB), and its args work with the binary: run here against a stand-in
/// server, they exit 0 on a 200 and fail on a 503.
#[tokio::test]
async fn helm_chart_test_hook_probes_readyz() {
    let (release, ns) = ("s3op", "s3op-system");
    for sets in [
        vec![],
        vec![
            "networkPolicy.enabled=true",
            "podDisruptionBudget.enabled=true",
        ],
    ] {
        let (all, hooks) = rendered_with_two_test_hooks(release, ns, &sets);
        let authority = the_hook_service_routes_to_the_operator_alone(&all, &hooks, ns);
        let args = the_hook_pod_probes_readyz_with_the_operators_image(&all, &hooks, &authority);
        the_probe_args_pass_on_200_and_fail_on_503(&args, &authority);
    }
}

/// `helm template` of the chart with `sets`: every document, and the two test hooks.
fn rendered_with_two_test_hooks(
    release: &str,
    ns: &str,
    sets: &[&str],
) -> (Vec<Value>, Vec<Value>) {
    let mut args = template_args(release, ns, sets);
    let all = docs(&tool("helm", &args, None));
    args.extend(["--show-only", "templates/tests/readyz.yaml"]);
    let hooks = docs(&tool("helm", &args, None));
    assert_eq!(hooks.len(), 2, "{hooks:?}");
    for h in &hooks {
        assert_eq!(h["metadata"]["annotations"]["helm.sh/hook"], "test", "{h}");
    }
    (all, hooks)
}

/// Whether a label selector (a map) selects these labels.
fn selects(selector: &Value, labels: &Value) -> bool {
    selector
        .as_object()
        .unwrap()
        .iter()
        .all(|(k, v)| &labels[k] == v)
}

/// The hook's Service selects the operator's Pods on the health port, and nothing of the
/// operator's (Deployment, NetworkPolicy, PDB) selects the test Pod. Returns the Service's
/// in-cluster authority.
fn the_hook_service_routes_to_the_operator_alone(
    all: &[Value],
    hooks: &[Value],
    ns: &str,
) -> String {
    let deployment = of_kind(all, "Deployment")[0];
    let pod_labels = &deployment["spec"]["template"]["metadata"]["labels"];
    let service = of_kind(hooks, "Service")[0];
    assert!(
        selects(&service["spec"]["selector"], pod_labels),
        "{service}"
    );
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "health");
    let test_labels = &of_kind(hooks, "Pod")[0]["metadata"]["labels"];
    for (kind, path) in [
        ("Deployment", "/spec/selector/matchLabels"),
        ("NetworkPolicy", "/spec/podSelector/matchLabels"),
        ("PodDisruptionBudget", "/spec/selector/matchLabels"),
    ] {
        for obj in of_kind(all, kind) {
            let selector = obj.pointer(path).expect(path);
            assert!(
                !selects(selector, test_labels),
                "{kind} selects the test Pod"
            );
        }
    }
    format!(
        "{}.{ns}.svc:{}",
        service["metadata"]["name"].as_str().unwrap(),
        service["spec"]["ports"][0]["port"]
    )
}

/// The hook's Pod runs the operator's image once, probing the Service's /readyz with retries.
/// Returns its args.
fn the_hook_pod_probes_readyz_with_the_operators_image(
    all: &[Value],
    hooks: &[Value],
    authority: &str,
) -> Vec<String> {
    let deployment = of_kind(all, "Deployment")[0];
    let pod = of_kind(hooks, "Pod")[0];
    let container = &pod["spec"]["containers"][0];
    assert_eq!(
        container["image"],
        deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    );
    assert_eq!(pod["spec"]["restartPolicy"], "Never");
    let args: Vec<String> = serde_json::from_value(container["args"].clone()).unwrap();
    // A Service just created may not route yet: the probe retries (probe.rs tests that).
    assert_eq!(args.len(), 3, "{args:?}");
    assert_eq!(args[1], "--wait=60s");
    let path = args[2]
        .strip_prefix(&format!("http://{authority}"))
        .unwrap_or_else(|| panic!("{args:?} does not probe {authority}"));
    assert_eq!(path, "/readyz");
    args
}

/// The hook's args, pointed at a stand-in server, make the binary exit 0 on a 200 and fail on a
/// 503, after a GET of /readyz.
fn the_probe_args_pass_on_200_and_fail_on_503(args: &[String], authority: &str) {
    for (status, ok) in [("200 OK", true), ("503 Service Unavailable", false)] {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let local = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            use std::io::{Read, Write};
            let (mut conn, _) = listener.accept().unwrap();
            let mut request = Vec::new();
            let mut buf = [0u8; 1024];
            while !request.ends_with(b"\r\n\r\n") {
                let n = conn.read(&mut buf).unwrap();
                assert!(n > 0, "the request ended early");
                request.extend_from_slice(&buf[..n]);
            }
            let answer = format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n");
            conn.write_all(answer.as_bytes()).unwrap();
            String::from_utf8_lossy(&request).into_owned()
        });
        let local_args: Vec<String> = args
            .iter()
            .map(|a| a.replace(authority, &local.to_string()))
            // One attempt: this server answers once.
            .map(|a| a.replace("--wait=60s", "--wait=0s"))
            .collect();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_s3-operator"))
            .args(&local_args)
            .output()
            .unwrap();
        assert_eq!(out.status.success(), ok, "{status}: {out:?}");
        let request = server.join().unwrap();
        assert!(request.starts_with("GET /readyz HTTP/1.1\r\n"), "{request}");
    }
}

/// Chart.yaml carries the metadata Artifact Hub shows, taken from the other packages' sources:
/// the CSV's icon, capabilities and owned CRDs, the samples, the crate's license and the
/// chart's default image.
#[test]
fn helm_chart_metadata_follows_the_sources() {
    let chart = repo_yaml("charts/s3-operator/Chart.yaml");
    let csv = repo_yaml("config/manifests/bases/s3-operator.clusterserviceversion.yaml");
    the_chart_has_its_home_icon_sources_and_maintainers(&chart);
    icon_license_and_capabilities_follow_the_csv_and_the_crate(&chart, &csv);
    crds_and_their_examples_follow_the_csv_and_the_samples(&chart, &csv);
    images_and_links_follow_the_chart(&chart);
}

/// A YAML file of the repository.
fn repo_yaml(path: &str) -> Value {
    let text = std::fs::read_to_string(repo().join(path)).unwrap();
    serde_yaml::from_str(&text).unwrap()
}

/// The chart annotation `key`, itself YAML.
fn chart_annotation(chart: &Value, key: &str) -> Value {
    let text = chart["annotations"][key]
        .as_str()
        .unwrap_or_else(|| panic!("Chart.yaml has no annotation {key}"));
    serde_yaml::from_str(text).unwrap()
}

fn the_chart_has_its_home_icon_sources_and_maintainers(chart: &Value) {
    for key in ["home", "kubeVersion", "icon"] {
        assert!(chart[key].as_str().is_some_and(|v| !v.is_empty()), "{key}");
    }
    for key in ["sources", "maintainers"] {
        assert!(
            chart[key].as_array().is_some_and(|v| !v.is_empty()),
            "{key}"
        );
    }
}

fn icon_license_and_capabilities_follow_the_csv_and_the_crate(chart: &Value, csv: &Value) {
    let icon = &csv["spec"]["icon"][0];
    assert_eq!(
        chart["icon"].as_str().unwrap(),
        format!(
            "data:{};base64,{}",
            icon["mediatype"].as_str().unwrap(),
            icon["base64data"].as_str().unwrap()
        )
    );
    let cargo = std::fs::read_to_string(repo().join("Cargo.toml")).unwrap();
    let license = chart["annotations"]["artifacthub.io/license"]
        .as_str()
        .unwrap();
    assert!(
        cargo.contains(&format!("license = \"{license}\"")),
        "{license}"
    );
    assert_eq!(chart["annotations"]["artifacthub.io/operator"], "true");
    assert_eq!(
        chart["annotations"]["artifacthub.io/operatorCapabilities"],
        csv["metadata"]["annotations"]["capabilities"]
    );
}

fn crds_and_their_examples_follow_the_csv_and_the_samples(chart: &Value, csv: &Value) {
    let owned: Vec<Value> = csv["spec"]["customresourcedefinitions"]["owned"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            json!({"kind": o["kind"], "version": o["version"], "name": o["name"],
                   "displayName": o["displayName"], "description": o["description"]})
        })
        .collect();
    assert_eq!(chart_annotation(chart, "artifacthub.io/crds"), json!(owned));
    let samples: Vec<Value> = ["s3_v1alpha1_bucket.yaml", "s3_v1alpha1_bucketaccess.yaml"]
        .iter()
        .map(|f| repo_yaml(&format!("config/samples/{f}")))
        .collect();
    assert_eq!(
        chart_annotation(chart, "artifacthub.io/crdsExamples"),
        json!(samples)
    );
}

/// The image annotation is the one the chart renders by default; every link is under its home.
fn images_and_links_follow_the_chart(chart: &Value) {
    let rendered = helm_template("s3-operator", "s3-operator-system", &[]);
    let image =
        &of_kind(&rendered, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]["image"];
    assert_eq!(
        chart_annotation(chart, "artifacthub.io/images")[0]["image"],
        *image
    );
    let home = chart["home"].as_str().unwrap();
    for link in chart_annotation(chart, "artifacthub.io/links")
        .as_array()
        .unwrap()
    {
        assert!(link["url"].as_str().unwrap().starts_with(home), "{link}");
    }
}

/// One Deployment in every package: the chart with its default values runs the container
/// config/manager (kustomize, and the OLM CSV through the xtask) describes, with the same pod
/// security, probes, ports, security context, resources, args and environment. The release is
/// named s3-operator so the chart's names (the Lease: <fullname>-leader) are the base's.
#[tokio::test]
async fn helm_chart_deployment_matches_config_manager() {
    let chart = helm_template("s3-operator", "s3-operator-system", &[]);
    let chart = of_kind(&chart, "Deployment")[0]["spec"]["template"].clone();
    let text = std::fs::read_to_string(repo().join("config/manager/manager.yaml")).unwrap();
    let base = docs(&text);
    let base = of_kind(&base, "Deployment")[0]["spec"]["template"].clone();
    the_pod_labels_and_settings_match(&chart, &base);
    let (chart, base) = the_one_container_matches(&chart, &base);
    the_env_matches_but_for_the_region(chart, base);
}

fn the_pod_labels_and_settings_match(chart: &Value, base: &Value) {
    for label in ["app.kubernetes.io/name", "app.kubernetes.io/component"] {
        assert_eq!(
            chart["metadata"]["labels"][label], base["metadata"]["labels"][label],
            "pod label {label}"
        );
    }
    for key in [
        "securityContext",
        "terminationGracePeriodSeconds",
        "automountServiceAccountToken",
        "enableServiceLinks",
    ] {
        assert_eq!(chart["spec"][key], base["spec"][key], "pod {key}");
    }
}

/// Each pod template has one container, the same in both; returns the two containers.
fn the_one_container_matches<'a>(chart: &'a Value, base: &'a Value) -> (&'a Value, &'a Value) {
    let (chart, base) = (&chart["spec"]["containers"], &base["spec"]["containers"]);
    assert_eq!(chart.as_array().map(Vec::len), Some(1), "{chart}");
    assert_eq!(base.as_array().map(Vec::len), Some(1), "{base}");
    let (chart, base) = (&chart[0], &base[0]);
    for key in [
        "name",
        "imagePullPolicy",
        "args",
        "ports",
        "livenessProbe",
        "readinessProbe",
        "securityContext",
        "resources",
    ] {
        assert_eq!(chart[key], base[key], "container {key}");
    }
    (chart, base)
}

/// The same variables in the same order (POD_* first: later values may refer to them), with
/// the same values; YAML may quote a value in one file and not the other. Only AWS_REGION
/// differs: the chart leaves the region to the AWS default chain unless aws.region is set,
/// while the kustomize base names it for the user to edit.
fn the_env_matches_but_for_the_region(chart: &Value, base: &Value) {
    let env = |c: &Value| -> Vec<(String, Value)> {
        c["env"]
            .as_array()
            .expect("env")
            .iter()
            .filter(|e| e["name"] != "AWS_REGION")
            .map(|e| {
                let value = match &e["value"] {
                    Value::Null => e["valueFrom"].clone(),
                    v => json!(v.to_string().trim_matches('"')),
                };
                (e["name"].as_str().unwrap().to_string(), value)
            })
            .collect()
    };
    assert_eq!(env(chart), env(base), "container env");
    assert!(
        base["env"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "AWS_REGION"),
        "config/manager names AWS_REGION"
    );
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
    assert_only_metrics_roles_cluster_wide(&rendered);
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

/// Namespace-scoped packages grant nothing cluster-wide but the secure metrics' roles (create
/// TokenReviews and SubjectAccessReviews, bound; get /metrics, for scrapers, unbound) and the
/// class reader's (list and watch classes and namespaces; get and list AWSAccounts, patch their
/// status).
fn assert_only_metrics_roles_cluster_wide(rendered: &[Value]) {
    let allowed = [
        json!({"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]}),
        json!({"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]}),
        json!({"nonResourceURLs": ["/metrics"], "verbs": ["get"]}),
        json!({"apiGroups": ["s3.operator.dev"], "resources": ["bucketclasses", "bucketaccessclasses"], "verbs": ["list", "watch"]}),
        json!({"apiGroups": ["s3.operator.dev"], "resources": ["awsaccounts"], "verbs": ["get", "list"]}),
        json!({"apiGroups": ["s3.operator.dev"], "resources": ["awsaccounts/status"], "verbs": ["patch"]}),
        json!({"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]}),
    ];
    for role in of_kind(rendered, "ClusterRole") {
        for rule in role["rules"].as_array().unwrap() {
            assert!(
                allowed.contains(rule),
                "{} grants {rule} cluster-wide",
                role["metadata"]["name"]
            );
        }
    }
    let reader = metrics_reader(rendered);
    for binding in of_kind(rendered, "ClusterRoleBinding") {
        assert_ne!(
            binding["roleRef"]["name"].as_str(),
            reader,
            "the scrapers' role is not bound to the operator"
        );
    }
}

#[tokio::test]
async fn helm_chart_renders_a_pdb_exactly_for_several_replicas() {
    let pdbs =
        |sets: &[&str]| of_kind(&helm_template("p", "pdb", sets), "PodDisruptionBudget").len();
    assert_eq!(
        pdbs(&[]),
        1,
        "the default (2 replicas) has a PodDisruptionBudget"
    );
    assert_eq!(pdbs(&["replicaCount=3"]), 1);
    assert_eq!(
        pdbs(&["replicaCount=1"]),
        0,
        "one replica: a PDB would block drains"
    );
    assert_eq!(
        pdbs(&["replicaCount=1", "podDisruptionBudget.enabled=true"]),
        1,
        "explicitly on"
    );
    assert_eq!(
        pdbs(&["replicaCount=2", "podDisruptionBudget.enabled=false"]),
        0,
        "explicitly off"
    );
    let rendered = helm_template("p", "pdb", &["replicaCount=2"]);
    let pdb = of_kind(&rendered, "PodDisruptionBudget")[0];
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    assert_eq!(
        pdb["spec"]["selector"]["matchLabels"],
        of_kind(&rendered, "Deployment")[0]["spec"]["selector"]["matchLabels"]
    );
}

#[tokio::test]
async fn helm_chart_network_policy_renders_and_applies() {
    let client = admin().await;
    let ns = namespace(&client, "netpol").await;
    let release = format!("n{}", random(5));
    assert!(
        of_kind(&helm_template(&release, &ns, &[]), "NetworkPolicy").is_empty(),
        "off by default"
    );
    let rendered = helm_template(
        &release,
        &ns,
        &[
            "networkPolicy.enabled=true",
            "networkPolicy.ingress.metricsFrom[0].namespaceSelector.matchLabels.name=monitoring",
            "networkPolicy.egress.apiServer.cidrs={10.0.0.1/32}",
            "networkPolicy.egress.aws.cidrs={10.20.0.0/16}",
            "aws.endpointUrl=http://moto.aws-emulator:5000",
            "networkPolicy.egress.extra[0].to[0].ipBlock.cidr=169.254.169.254/32",
            "networkPolicy.egress.extra[0].ports[0].port=80",
        ],
    );
    let policies = of_kind(&rendered, "NetworkPolicy");
    assert_eq!(policies.len(), 1);
    let spec = &policies[0]["spec"];
    the_policy_covers_the_operators_pods_both_ways(spec, &rendered);
    ingress_is_the_metrics_port_from_monitoring_and_the_probe_port(spec);
    egress_is_dns_the_api_server_aws_and_the_extra_rule(spec);
    the_api_server_stores_it_as_rendered(client, &ns, &policies).await;
}

fn the_policy_covers_the_operators_pods_both_ways(spec: &Value, rendered: &[Value]) {
    assert_eq!(spec["policyTypes"], json!(["Ingress", "Egress"]));
    let deployment = of_kind(rendered, "Deployment")[0];
    assert_eq!(
        spec["podSelector"]["matchLabels"],
        deployment["spec"]["selector"]["matchLabels"]
    );
}

/// In: the metrics port (from the monitoring namespace only) and the probe port, nothing else.
fn ingress_is_the_metrics_port_from_monitoring_and_the_probe_port(spec: &Value) {
    let ingress = spec["ingress"].as_array().unwrap();
    let ports: Vec<&Value> = ingress.iter().map(|r| &r["ports"][0]["port"]).collect();
    assert_eq!(ports, [&json!(8080), &json!(8081)]);
    assert!(
        ingress
            .iter()
            .all(|r| r["ports"].as_array().unwrap().len() == 1)
    );
    assert_eq!(
        ingress[0]["from"][0]["namespaceSelector"]["matchLabels"]["name"],
        "monitoring"
    );
}

/// Out: DNS, the API server, AWS (with the emulator's port) and the extra rule.
fn egress_is_dns_the_api_server_aws_and_the_extra_rule(spec: &Value) {
    let egress = spec["egress"].as_array().unwrap();
    let ports_of = |r: &Value| -> Vec<(i64, String)> {
        r["ports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["port"].as_i64().unwrap(),
                    p["protocol"].as_str().unwrap_or("TCP").into(),
                )
            })
            .collect()
    };
    assert_eq!(
        ports_of(&egress[0]),
        [(53, "UDP".into()), (53, "TCP".into())]
    );
    assert_eq!(
        ports_of(&egress[1]),
        [(443, "TCP".into()), (6443, "TCP".into())]
    );
    assert_eq!(egress[1]["to"][0]["ipBlock"]["cidr"], "10.0.0.1/32");
    assert_eq!(
        ports_of(&egress[2]),
        [(443, "TCP".into()), (5000, "TCP".into())]
    );
    assert_eq!(egress[2]["to"][0]["ipBlock"]["cidr"], "10.20.0.0/16");
    assert_eq!(egress[3]["to"][0]["ipBlock"]["cidr"], "169.254.169.254/32");
    assert_eq!(egress.len(), 4);
}

/// The API server accepts it as rendered (server-side dry run, then for real).
async fn the_api_server_stores_it_as_rendered(client: kube::Client, ns: &str, policies: &[&Value]) {
    apply(&yaml(policies));
    let name = policies[0]["metadata"]["name"].as_str().unwrap();
    let stored = Api::<NetworkPolicy>::namespaced(client, ns)
        .get(name)
        .await
        .unwrap();
    assert_eq!(stored.spec.unwrap().egress.unwrap().len(), 4);
}

// ---------------------------------------------------------------- kustomize

const OVERLAY_NS: &str = "s3-operator-system";

#[tokio::test]
async fn kustomize_bases_and_overlays_install_and_run() {
    let _names = PACKAGE_NAMES.write().await;
    install_crds().await;
    install_monitoring_crds().await;
    every_base_builds();
    let client = admin().await;
    // The overlays name fixed namespaces, so they are installed one after the other; each
    // removes its RBAC afterwards so the next one runs with only its own grants.
    for overlay in ["own-namespace", "namespaces", "cluster"] {
        let rendered = overlay_applied(overlay).await;
        overlay_runs_its_package(&client, overlay, &rendered).await;
        overlay_rbac_removed(&rendered);
    }
}

fn every_base_builds() {
    for base in [
        "crd",
        "rbac",
        "manager",
        "prometheus",
        "samples",
        "scorecard",
    ] {
        tool("kustomize", &["build", &format!("config/{base}")], None);
    }
}

/// The overlay built and applied, with the namespaces it names; returns what it rendered.
async fn overlay_applied(overlay: &str) -> Vec<Value> {
    let rendered = docs(&tool(
        "kustomize",
        &["build", &format!("config/overlays/{overlay}")],
        None,
    ));
    for n in of_kind(&rendered, "Role")
        .iter()
        .chain(of_kind(&rendered, "RoleBinding").iter())
        .filter_map(|r| r["metadata"]["namespace"].as_str())
    {
        ensure_namespace(n).await;
    }
    ensure_namespace(OVERLAY_NS).await;
    apply(&yaml(&rendered.iter().collect::<Vec<_>>()));
    rendered
}

/// The overlay's Deployment runs the core flow where it watches, and is refused elsewhere.
async fn overlay_runs_its_package(client: &kube::Client, overlay: &str, rendered: &[Value]) {
    let other = namespace(client, "kz-other").await;
    match overlay {
        "own-namespace" => {
            assert_only_metrics_roles_cluster_wide(rendered);
            run_package(rendered, "", OVERLAY_NS, Some(&other)).await
        }
        "namespaces" => {
            assert_only_metrics_roles_cluster_wide(rendered);
            run_package(rendered, "", "team-b", Some(&other)).await
        }
        _ => {
            let flow = namespace(client, "kz-app").await;
            run_package(rendered, "", &flow, None).await
        }
    }
}

fn overlay_rbac_removed(rendered: &[Value]) {
    let rbac: Vec<&Value> = rendered
        .iter()
        .filter(|d| {
            ["Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"]
                .contains(&d["kind"].as_str().unwrap_or_default())
        })
        .collect();
    tool(
        "kubectl",
        &["delete", "--wait=false", "-f", "-"],
        Some(&yaml(&rbac)),
    );
}

// ---------------------------------------------------------------- OLM

#[tokio::test]
async fn olm_bundle_validates_with_no_warnings() {
    let out = tool(
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
    tool("cp", &["-r", "bundle", dir.to_str().unwrap()], None);
    let path = dir.join("manifests/s3-operator.clusterserviceversion.yaml");
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("installModes:", "installModez:");
    std::fs::write(&path, text).unwrap();
    let (code, out, err) = try_tool("bundle-validate", &[dir.to_str().unwrap()], None);
    assert_ne!(code, 0, "a CSV without install modes passed:\n{out}{err}");
}

// ---------------------------------------------------------------- authenticated metrics

/// `--metrics-secure` against the real API server: HTTPS, and each scrape authenticated with a
/// TokenReview and authorized with a SubjectAccessReview for get on /metrics.
#[tokio::test]
async fn metrics_secure_answers_only_tokens_allowed_to_get_metrics() {
    let client = admin().await;
    let ns = namespace(&client, "msec").await;
    let op = Operator::start(OperatorOpts {
        namespaces: vec![ns.clone()],
        extra_args: vec!["--metrics-secure".into()],
        ..Default::default()
    })
    .await;
    let reader = service_account(&client, &ns, "scraper", &[]).await;
    let reader_role = cluster_role_from(&client, "config/rbac/metrics_reader_role.yaml").await;
    bind_cluster_role(&client, None, &reader_role, &ns, "scraper").await;
    let stranger = service_account(&client, &ns, "stranger", &[]).await;
    let scrape = |token: Option<String>| {
        let addr = op.metrics_addr.clone();
        async move { https_get(&addr, "/metrics", token.as_deref()).await }
    };

    // Without the RBAC packages grant it, the operator cannot review tokens: it says so (500)
    // rather than guess.
    assert_eq!(scrape(Some(reader.clone())).await.map(|r| r.0), Some(500));
    // Granted as every package does: config/rbac/metrics_auth_role.yaml, cluster-wide.
    let auth_role = cluster_role_from(&client, "config/rbac/metrics_auth_role.yaml").await;
    bind_cluster_role(&client, None, &auth_role, &op.operator_ns, "s3-operator").await;
    let body = wait_for("the reader's scrape", T, || async {
        let (status, body) = scrape(Some(reader.clone())).await?;
        (status == 200).then_some(body)
    })
    .await;
    assert!(
        body.contains("controller_runtime_max_concurrent_reconciles"),
        "{body}"
    );
    let (status, body) = scrape(Some(stranger)).await.expect("an answer");
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains(&format!("system:serviceaccount:{ns}:stranger")),
        "{body}"
    );
    assert_eq!(scrape(None).await.map(|r| r.0), Some(401), "no token");
    assert_eq!(
        scrape(Some("not-a-token".into())).await.map(|r| r.0),
        Some(401),
        "a token the API server rejects"
    );
    assert_ne!(
        http_get(&op.metrics_addr, "/metrics").await.map(|r| r.0),
        Some(200),
        "no plain HTTP on the metrics port"
    );
    assert_eq!(
        http_get(&op.probe_addr, "/readyz").await.map(|r| r.0),
        Some(200),
        "the probes stay plain HTTP for the kubelet"
    );
    assert_eq!(op.terminate().await, Some(0));
}

// ---------------------------------------------------------------- alerts and images

#[test]
fn alert_rules_pass_promtool() {
    tool(
        "promtool",
        &["check", "rules", "config/prometheus/rules.yaml"],
        None,
    );
    let out = tool(
        "promtool",
        &["test", "rules", "config/prometheus/rules_test.yaml"],
        None,
    );
    assert!(out.contains("SUCCESS"), "{out}");
}

#[test]
fn dockerfiles_pass_hadolint_and_build_as_ci_does() {
    for file in ["Dockerfile", "bundle.Dockerfile"] {
        let out = tool("hadolint", &[file], None);
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
