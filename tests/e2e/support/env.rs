//! The environment `hack/env.sh` started (its env file), admin clients, namespaces, CRDs and
//! waiting for a condition.

use super::*;

/// What every installation's bucket-name prefix starts with (`s3op-<cluster>-`).
pub const PREFIX: &str = "s3op-";
/// moto's account.
pub const ACCOUNT: &str = "123456789012";

/// The bucket-name prefix of the installation for `cluster` (the operator's default).
pub fn prefix(cluster: &str) -> String {
    naming::bucket_prefix(cluster, None).expect("test cluster names have no '-'")
}

/// Where the installation for `cluster` may act.
pub fn scope(cluster: &str) -> policy::Scope {
    policy::Scope {
        partition: "aws".into(),
        account: ACCOUNT.into(),
        bucket_prefix: prefix(cluster),
        iam_path: naming::iam_path(cluster),
    }
}

/// The operator policy shipped for `cluster`, as `s3-operator iam-policy` renders it.
pub fn operator_policy(cluster: &str) -> serde_json::Value {
    policy::operator_policy(&scope(cluster))
}

/// Creates the permissions boundary of the installation for `cluster`, as an administrator
/// does before installing (`s3-operator iam-policy --boundary`); returns its ARN.
pub async fn create_boundary(cluster: &str) -> String {
    let scope = scope(cluster);
    let created = admin_iam()
        .create_policy()
        .policy_name(policy::BOUNDARY_NAME)
        .path(&scope.iam_path)
        .policy_document(policy::boundary_policy(&scope).to_string())
        .send()
        .await;
    if let Err(e) = created {
        let exists = e
            .as_service_error()
            .is_some_and(|e| e.is_entity_already_exists_exception());
        assert!(exists, "create the permissions boundary: {e:?}");
    }
    scope.boundary_arn()
}

/// Where `hack/tools.sh` puts the tools it builds ($S3OP_CACHE/bin).
pub fn tools_bin() -> String {
    std::env::var("S3OP_CACHE")
        .map(|c| format!("{c}/bin"))
        .unwrap_or_else(|_| {
            format!(
                "{}/.cache/s3-operator/bin",
                std::env::var("HOME").unwrap_or_default()
            )
        })
}

/// The running environment, read from the env file `hack/env.sh up` writes.
pub struct Env {
    pub kubeconfig: PathBuf,
    pub server: String,
    pub ca: PathBuf,
    pub aws_endpoint: String,
    pub region: String,
    /// The state directory of `hack/env.sh` (for `hack/env.sh apiserver`).
    pub state_dir: PathBuf,
    /// The API server's audit log of writes (absent from environments started before it was).
    pub audit_log: Option<PathBuf>,
    pub(crate) admin_key: (String, String),
    /// An admin of a second account (a stranger to the operator).
    pub(crate) other_admin_key: Option<(String, String)>,
    /// The account's IAM OIDC provider for this cluster's ServiceAccount issuer.
    pub oidc_provider_arn: String,
    /// The emulator's EKS cluster standing for this one, and the Pod Identity agent stand-in's
    /// loopback URL (absent from environments started before they were).
    pub eks_cluster_name: Option<String>,
    pub pod_identity_agent_url: Option<String>,
}

pub(crate) static ENV: OnceLock<Env> = OnceLock::new();

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn env() -> &'static Env {
    ENV.get_or_init(|| {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let file = std::env::var("S3OP_ENV_FILE")
            .map(PathBuf::from)
            .unwrap_or_else(|_| start_env());
        let text = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
        let vars: HashMap<String, String> = text
            .lines()
            .filter_map(|l| l.strip_prefix("export "))
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let get = |k: &str| {
            vars.get(k)
                .cloned()
                .unwrap_or_else(|| panic!("{k} missing from {}", file.display()))
        };
        Env {
            kubeconfig: get("KUBECONFIG").into(),
            server: get("S3OP_KUBE_SERVER"),
            ca: get("S3OP_KUBE_CA").into(),
            aws_endpoint: get("S3OP_AWS_ENDPOINT"),
            region: get("S3OP_AWS_REGION"),
            state_dir: get("S3OP_ENV_DIR").into(),
            audit_log: vars.get("S3OP_KUBE_AUDIT_LOG").map(PathBuf::from),
            admin_key: (
                get("S3OP_AWS_ADMIN_ACCESS_KEY_ID"),
                get("S3OP_AWS_ADMIN_SECRET_ACCESS_KEY"),
            ),
            other_admin_key: vars
                .get("S3OP_AWS_OTHER_ADMIN_ACCESS_KEY_ID")
                .zip(vars.get("S3OP_AWS_OTHER_ADMIN_SECRET_ACCESS_KEY"))
                .map(|(k, s)| (k.clone(), s.clone())),
            oidc_provider_arn: get("S3OP_OIDC_PROVIDER_ARN"),
            eks_cluster_name: vars.get("S3OP_EKS_CLUSTER_NAME").cloned(),
            pod_identity_agent_url: vars.get("S3OP_POD_IDENTITY_AGENT_URL").cloned(),
        }
    })
}

/// Without `S3OP_ENV_FILE` (a bare `cargo test`), start a private environment that tears itself
/// down when this test process exits.
pub(crate) fn start_env() -> PathBuf {
    let state = std::env::temp_dir().join(format!("s3op-e2e-{}", std::process::id()));
    let out = std::process::Command::new(repo().join("hack/env.sh"))
        .args(["up", "--state"])
        .arg(&state)
        .args(["--owner-pid", &std::process::id().to_string()])
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("running hack/env.sh up");
    assert!(out.status.success(), "hack/env.sh up failed");
    PathBuf::from(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .expect("env file path")
            .trim(),
    )
}

pub fn logs_dir() -> PathBuf {
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repo().join("target"));
    let dir = target.join("e2e-logs");
    std::fs::create_dir_all(&dir).expect("logs dir");
    dir
}

pub async fn admin() -> kube::Client {
    let kc = Kubeconfig::read_from(&env().kubeconfig).expect("admin kubeconfig");
    let cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("kube config");
    kube::Client::try_from(cfg).expect("kube client")
}

/// A kube client authenticated with `token` (a ServiceAccount token).
pub async fn client_with_token(token: &str) -> kube::Client {
    let kc: Kubeconfig =
        serde_yaml::from_str(&kubeconfig_yaml(&env().server, token)).expect("kubeconfig");
    let cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("config");
    kube::Client::try_from(cfg).expect("client")
}

pub(crate) fn kubeconfig_yaml(server: &str, token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n    server: {}\n    certificate-authority: {}\nusers:\n- name: sa\n  user:\n    token: {token}\ncontexts:\n- name: local\n  context:\n    cluster: local\n    user: sa\ncurrent-context: local\n",
        server,
        env().ca.display()
    )
}

pub fn random(n: usize) -> String {
    use rand::Rng;
    let mut r = rand::rng();
    (0..n)
        .map(|_| char::from(b"abcdefghijklmnopqrstuvwxyz0123456789"[r.random_range(0..36)]))
        .collect()
}

pub async fn namespace(client: &kube::Client, tag: &str) -> String {
    let name = format!("e2e-{tag}-{}", random(5));
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("create namespace");
    name
}

pub(crate) static CRDS: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();

/// Applies the committed CRDs (config/crd/bases) once per test binary.
pub async fn install_crds() {
    CRDS.get_or_init(|| async {
        for kind in [
            "buckets",
            "bucketaccesses",
            "bucketclasses",
            "bucketaccessclasses",
            "awsaccounts",
        ] {
            apply_crds(&repo().join(format!("config/crd/bases/s3.operator.dev_{kind}.yaml"))).await;
        }
    })
    .await;
}

/// Server-side applies every CRD in a YAML file and waits until each is served.
pub async fn apply_crds(path: &std::path::Path) {
    let api = Api::<CustomResourceDefinition>::all(admin().await);
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let crd: CustomResourceDefinition = serde::Deserialize::deserialize(doc).expect("CRD yaml");
        let name = crd.metadata.name.clone().expect("name");
        api.patch(
            &name,
            &PatchParams::apply("e2e").force(),
            &Patch::Apply(&crd),
        )
        .await
        .expect("apply CRD");
        wait_for(
            &format!("CRD {name} established"),
            Duration::from_secs(30),
            || async {
                let c = api.get(&name).await.ok()?;
                c.status?
                    .conditions?
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
                    .then_some(())
            },
        )
        .await;
    }
}

/// Who sent a request, as the API server's audit log names it.
pub enum By<'a> {
    /// A substring of the user agent (the operator puts its Lease identity there).
    Agent(&'a str),
    /// The user name, e.g. `system:serviceaccount:NS:NAME`.
    User(&'a str),
}

/// The verbs of a request that may change something.
const WRITES: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];

/// The writes (create, update, patch, delete) the API server received at or after `since` from
/// `by`, from its audit log (which also holds ServiceAccounts' reads): `verb resource/name
/// (time)`.
pub fn audited_writes(by: By, since: jiff::Timestamp) -> Vec<String> {
    let path = env().audit_log.as_ref().expect(
        "S3OP_KUBE_AUDIT_LOG is missing: restart the environment (hack/env.sh down, then up)",
    );
    let text = std::fs::read_to_string(path).expect("audit log");
    let needle = match by {
        By::Agent(s) | By::User(s) => s,
    };
    text.lines()
        .filter(|l| l.contains(needle))
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| match by {
            By::Agent(a) => e["userAgent"].as_str().is_some_and(|u| u.contains(a)),
            By::User(u) => e["user"]["username"] == u,
        })
        .filter(|e| WRITES.contains(&e["verb"].as_str().unwrap_or_default()))
        .filter(|e| {
            let at = e["requestReceivedTimestamp"].as_str().unwrap_or_default();
            at.parse::<jiff::Timestamp>().is_ok_and(|t| t >= since)
        })
        .map(|e| {
            let o = &e["objectRef"];
            let sub = o["subresource"].as_str().map(|s| format!("/{s}"));
            format!(
                "{} {}{}/{} ({})",
                e["verb"].as_str().unwrap_or_default(),
                o["resource"].as_str().unwrap_or_default(),
                sub.unwrap_or_default(),
                o["name"].as_str().unwrap_or_default(),
                e["requestReceivedTimestamp"].as_str().unwrap_or_default(),
            )
        })
        .collect()
}

/// Polls `f` every 200ms until it returns `Some`, or panics after `timeout` naming `what`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// (status, reason, message) of the Ready condition in a status value.
pub fn ready_of(status: Option<serde_json::Value>) -> Option<(String, String, String)> {
    let conds = status?.get("conditions")?.as_array()?.clone();
    let c = conds.iter().find(|c| c["type"] == READY)?;
    Some((
        c["status"].as_str()?.into(),
        c["reason"].as_str()?.into(),
        c["message"].as_str()?.into(),
    ))
}

/// Waits until the object's Ready condition has `reason`; returns its message.
pub async fn wait_reason<K>(api: &Api<K>, name: &str, reason: &str, timeout: Duration) -> String
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    wait_for(&format!("{name} to report {reason}"), timeout, || async {
        let obj = api.get(name).await.ok()?;
        let v = serde_json::to_value(&obj).ok()?;
        let (_, r, m) = ready_of(v.get("status").cloned())?;
        (r == reason).then_some(m)
    })
    .await
}

/// Waits (up to a minute) until, for each of `words`, an event with `reason` in namespace `ns`
/// has a note containing it (`""`: any such event); returns the notes of those events. Events
/// are best effort and need not be written before the status or the AWS change they report.
pub async fn wait_event(ns: &str, reason: &str, words: &[&str]) -> Vec<String> {
    let what = format!("an event {reason} in {ns} naming {words:?}");
    wait_for(&what, Duration::from_secs(60), || async {
        let notes: Vec<String> = events_with(ns, reason)
            .await
            .into_iter()
            .filter_map(|e| e.note)
            .collect();
        let all = words.iter().all(|w| notes.iter().any(|n| n.contains(w)));
        (all && !notes.is_empty()).then_some(notes)
    })
    .await
}

/// The events with `reason` in namespace `ns`.
pub async fn events_with(ns: &str, reason: &str) -> Vec<Event> {
    let api = Api::<Event>::namespaced(admin().await, ns);
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .collect()
}

/// Posts raw JSON (typed objects cannot even hold some invalid values) into `api`'s namespace
/// and expects a 422; returns the API server's message.
pub async fn refused<K>(api: &Api<K>, obj: serde_json::Value) -> String
where
    K: kube::Resource<DynamicType = ()>,
{
    let client = admin().await;
    let resource = ApiResource::erase::<K>(&());
    // An `Api::all` is a cluster-scoped kind here (the classes): no namespace in its path.
    let raw: Api<DynamicObject> = match api.namespace() {
        Some(ns) => Api::namespaced_with(client, ns, &resource),
        None => Api::all_with(client, &resource),
    };
    let obj: DynamicObject = serde_json::from_value(obj).expect("a Kubernetes object");
    match raw.create(&PostParams::default(), &obj).await {
        Err(kube::Error::Api(e)) => {
            assert_eq!(e.code, 422, "{e:?}");
            e.message
        }
        other => panic!("expected a 422, got {other:?}"),
    }
}

/// A Bucket as raw JSON, for what its typed form cannot hold.
pub fn raw_bucket(name: &str, spec: serde_json::Value) -> serde_json::Value {
    serde_json::json!({"apiVersion": "s3.operator.dev/v1alpha1", "kind": "Bucket", "metadata": {"name": name}, "spec": spec})
}

pub fn bucket(name: &str, spec: serde_json::Value) -> Bucket {
    serde_json::from_value(raw_bucket(name, spec)).expect("valid Bucket")
}

/// Waits for Ready=True and returns the S3 bucket name from status.
pub async fn wait_ready(api: &Api<Bucket>, name: &str) -> String {
    wait_reason(api, name, "Available", Duration::from_secs(60)).await;
    api.get(name)
        .await
        .unwrap()
        .status
        .unwrap()
        .bucket_name
        .unwrap()
}

/// Creates namespace `name` unless it exists (the fixed names packages install into).
pub(crate) async fn ensure_namespace(name: &str) {
    let api = Api::<Namespace>::all(admin().await);
    if api.get_opt(name).await.expect("get namespace").is_none() {
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let _ = api.create(&PostParams::default(), &ns).await;
    }
}

/// The holder the Lease `lease` in `ns` names, if any.
pub(crate) async fn lease_holder(ns: &str, lease: &str) -> Option<String> {
    Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(admin().await, ns)
        .get_opt(lease)
        .await
        .ok()??
        .spec?
        .holder_identity
        .filter(|h| !h.is_empty())
}
