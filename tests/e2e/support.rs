//! The end-to-end harness: the real API server and moto from `hack/env.sh`, clients for them, and
//! the operator binary run as a local process under its own ServiceAccount, RBAC and IAM policy.

#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use s3_operator::api::condition::READY;
use s3_operator::aws::{naming, policy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What every installation's bucket-name prefix starts with (`s3op-<cluster>-`).
pub const PREFIX: &str = "s3op-";
/// moto's account.
pub const ACCOUNT: &str = "123456789012";

/// The bucket-name prefix of the installation for `cluster` (the operator's default).
pub fn prefix(cluster: &str) -> String {
    naming::default_bucket_prefix(cluster)
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
    admin_key: (String, String),
}

static ENV: OnceLock<Env> = OnceLock::new();

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
        }
    })
}

/// Without `S3OP_ENV_FILE` (a bare `cargo test`), start a private environment that tears itself
/// down when this test process exits.
fn start_env() -> PathBuf {
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

fn kubeconfig_yaml(server: &str, token: &str) -> String {
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

static CRDS: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();

/// Applies the committed CRDs (config/crd/bases) once per test binary.
pub async fn install_crds() {
    CRDS.get_or_init(|| async {
        for kind in ["buckets", "bucketaccesses"] {
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

/// The writes (create, update, patch, delete) the API server received at or after `since` from
/// clients whose user agent contains `agent`, from its audit log: `verb resource/name (time)`.
pub fn audited_writes(agent: &str, since: jiff::Timestamp) -> Vec<String> {
    let path = env().audit_log.as_ref().expect(
        "S3OP_KUBE_AUDIT_LOG is missing: restart the environment (hack/env.sh down, then up)",
    );
    let text = std::fs::read_to_string(path).expect("audit log");
    text.lines()
        .filter(|l| l.contains(agent))
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["userAgent"].as_str().is_some_and(|a| a.contains(agent)))
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

// ---------------------------------------------------------------- AWS

pub fn s3_with(key: &str, secret: &str) -> aws_sdk_s3::Client {
    let creds = aws_sdk_s3::config::Credentials::new(key, secret, None, None, "e2e");
    let conf = aws_sdk_s3::config::Builder::new()
        .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
        .region(aws_sdk_s3::config::Region::new(env().region.clone()))
        .endpoint_url(&env().aws_endpoint)
        .credentials_provider(creds)
        .force_path_style(true)
        .build();
    aws_sdk_s3::Client::from_conf(conf)
}

pub fn iam_with(key: &str, secret: &str) -> aws_sdk_iam::Client {
    let creds = aws_sdk_iam::config::Credentials::new(key, secret, None, None, "e2e");
    let conf = aws_sdk_iam::config::Builder::new()
        .behavior_version(aws_sdk_iam::config::BehaviorVersion::latest())
        .region(aws_sdk_iam::config::Region::new(env().region.clone()))
        .endpoint_url(&env().aws_endpoint)
        .credentials_provider(creds)
        .build();
    aws_sdk_iam::Client::from_conf(conf)
}

/// The test's own admin identity (full access), for setting up and auditing.
pub fn admin_s3() -> aws_sdk_s3::Client {
    let (k, s) = &env().admin_key;
    s3_with(k, s)
}

pub fn admin_iam() -> aws_sdk_iam::Client {
    let (k, s) = &env().admin_key;
    iam_with(k, s)
}

pub async fn bucket_tags(bucket: &str) -> BTreeMap<String, String> {
    admin_s3()
        .get_bucket_tagging()
        .bucket(bucket)
        .send()
        .await
        .map(|o| o.tag_set.into_iter().map(|t| (t.key, t.value)).collect())
        .unwrap_or_default()
}

pub async fn bucket_exists(bucket: &str) -> bool {
    admin_s3().head_bucket().bucket(bucket).send().await.is_ok()
}

/// An IAM user with `policy` and one access key, for tests that need a specific identity.
pub async fn iam_user_with_policy(
    name: &str,
    path: &str,
    policy: Option<&serde_json::Value>,
) -> (String, String) {
    let iam = admin_iam();
    iam.create_user()
        .user_name(name)
        .path(path)
        .send()
        .await
        .expect("create user");
    if let Some(p) = policy {
        iam.put_user_policy()
            .user_name(name)
            .policy_name("p")
            .policy_document(p.to_string())
            .send()
            .await
            .expect("put policy");
    }
    let k = iam
        .create_access_key()
        .user_name(name)
        .send()
        .await
        .expect("key")
        .access_key
        .expect("key");
    (k.access_key_id, k.secret_access_key)
}

// ---------------------------------------------------------------- Kubernetes identities

/// The operator's RBAC rules from the single source, config/rbac/role.yaml.
pub fn manager_rules() -> Vec<PolicyRule> {
    let text = std::fs::read_to_string(repo().join("config/rbac/role.yaml")).expect("role.yaml");
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

// ---------------------------------------------------------------- the operator process

pub struct OperatorOpts {
    pub namespaces: Vec<String>,
    pub resync: &'static str,
    pub leader_elect: bool,
    pub cluster: Option<String>,
    pub extra_args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Replaces the shipped operator policy (to test refusals); `None` uses the shipped one.
    pub policy: Option<serde_json::Value>,
    /// Where the operator sends AWS requests (a fault proxy); `None` is moto itself.
    pub aws_endpoint: Option<String>,
}

impl Default for OperatorOpts {
    fn default() -> Self {
        Self {
            namespaces: vec![],
            resync: "3s",
            leader_elect: false,
            cluster: None,
            extra_args: vec![],
            env: vec![],
            policy: None,
            aws_endpoint: None,
        }
    }
}

/// The operator binary running as a local process, as its own ServiceAccount (RBAC from
/// config/rbac only in the watched namespaces) and its own IAM user (exactly the shipped policy).
pub struct Operator {
    child: tokio::process::Child,
    pub cluster: String,
    pub metrics_addr: String,
    pub probe_addr: String,
    pub log: PathBuf,
    pub operator_ns: String,
    _pass: Pass,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// The identity an operator installation runs as; several processes (replicas) may share one.
#[derive(Clone)]
pub struct Identity {
    pub cluster: String,
    pub operator_ns: String,
    kubeconfig: PathBuf,
    token: String,
    pub aws_key: (String, String),
    /// A scoped installation keeps cluster-wide operators out for as long as it exists, not
    /// only while one of its processes runs: between a kill and a restart its objects would
    /// otherwise be reconciled by another test's operator.
    _pass: Option<Arc<Pass>>,
}

impl Identity {
    pub async fn new(namespaces: &[String], cluster: Option<String>) -> Identity {
        Identity::with_policy(namespaces, cluster, None).await
    }

    pub async fn with_policy(
        namespaces: &[String],
        cluster: Option<String>,
        policy: Option<serde_json::Value>,
    ) -> Identity {
        let pass = if namespaces.is_empty() {
            None
        } else {
            Some(Arc::new(Pass::acquire(false).await))
        };
        install_crds().await;
        let client = admin().await;
        let cluster = cluster.unwrap_or_else(|| format!("t{}", random(6)));
        let operator_ns = namespace(&client, "op").await;
        let mut grants: Vec<(&str, Vec<PolicyRule>)> = namespaces
            .iter()
            .map(|n| (n.as_str(), manager_rules()))
            .collect();
        grants.push((operator_ns.as_str(), leader_rules()));
        let token = service_account(&client, &operator_ns, "s3-operator", &grants).await;
        Identity {
            _pass: pass,
            ..Identity::with_token(cluster, operator_ns, &token, policy).await
        }
    }

    /// Writes the kubeconfig for `token` and creates the IAM user: by default with exactly the
    /// policy shipped in config/iam, rendered for this installation's cluster name.
    async fn with_token(
        cluster: String,
        operator_ns: String,
        token: &str,
        policy: Option<serde_json::Value>,
    ) -> Identity {
        let kubeconfig = logs_dir().join(format!("{cluster}.kubeconfig"));
        std::fs::write(&kubeconfig, kubeconfig_yaml(&env().server, token))
            .expect("write kubeconfig");
        let doc = policy.unwrap_or_else(|| operator_policy(&cluster));
        create_boundary(&cluster).await;
        let aws_key =
            iam_user_with_policy(&format!("s3-operator-{cluster}"), "/", Some(&doc)).await;
        Identity {
            cluster,
            operator_ns,
            kubeconfig,
            token: token.to_string(),
            aws_key,
            _pass: None,
        }
    }

    /// A client as this identity, through its kubeconfig.
    pub async fn client(&self) -> kube::Client {
        let kc = Kubeconfig::read_from(&self.kubeconfig).expect("kubeconfig");
        let cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .expect("kube config");
        kube::Client::try_from(cfg).expect("kube client")
    }

    /// The same identity talking to another API server (`server`, an `https://` URL).
    pub fn via(&self, server: &str) -> Identity {
        let kubeconfig = logs_dir().join(format!("{}-{}.kubeconfig", self.cluster, random(4)));
        std::fs::write(&kubeconfig, kubeconfig_yaml(server, &self.token))
            .expect("write kubeconfig");
        Identity {
            kubeconfig,
            ..self.clone()
        }
    }
}

impl Identity {
    /// The identity a package installed: its ServiceAccount (whatever RBAC the package bound to
    /// it) and an IAM user with exactly the shipped policy for `cluster`.
    pub async fn installed(sa_ns: &str, sa: &str, cluster: &str) -> Identity {
        install_crds().await;
        let token = service_account(&admin().await, sa_ns, sa, &[]).await;
        Identity::with_token(cluster.into(), sa_ns.into(), &token, None).await
    }
}

// ---------------------------------------------------------------- one cluster-wide operator at a time

/// An operator watching every namespace would act on the objects of every other test, so it runs
/// alone: scoped operators share the gate, a cluster-wide one holds it exclusively. Readers never
/// queue behind a waiting writer, so a test may start replicas while holding a pass.
#[derive(Default)]
struct GateState {
    shared: usize,
    exclusive: bool,
}

static GATE: std::sync::Mutex<GateState> = std::sync::Mutex::new(GateState {
    shared: 0,
    exclusive: false,
});
static GATE_CHANGED: tokio::sync::Notify = tokio::sync::Notify::const_new();

pub struct Pass {
    exclusive: bool,
}

impl Pass {
    async fn acquire(exclusive: bool) -> Pass {
        loop {
            let changed = GATE_CHANGED.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            {
                let mut g = GATE.lock().expect("gate");
                if exclusive && !g.exclusive && g.shared == 0 {
                    g.exclusive = true;
                    return Pass { exclusive };
                }
                if !exclusive && !g.exclusive {
                    g.shared += 1;
                    return Pass { exclusive };
                }
            }
            changed.await;
        }
    }
}

/// The fixed names the packages ship: the overlays' `s3-operator-system`, `team-a` and `team-b`,
/// and the ClusterRole `s3-operator-metrics-reader` of the overlays and the bundle. A test that
/// installs an overlay (and deletes it afterwards) writes; an OLM test, which only applies the
/// bundle's ClusterRole, reads. Taken before any `Pass`.
pub static PACKAGE_NAMES: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// The exclusive pass of an installation that watches every namespace, or uses fixed names,
/// outside `Operator` (operators installed as Pods): held, no other operator runs.
pub async fn cluster_wide() -> Pass {
    Pass::acquire(true).await
}

impl Drop for Pass {
    fn drop(&mut self) {
        let mut g = GATE.lock().expect("gate");
        if self.exclusive {
            g.exclusive = false;
        } else {
            g.shared -= 1;
        }
        GATE_CHANGED.notify_waiters();
    }
}

impl Operator {
    pub async fn start(opts: OperatorOpts) -> Operator {
        let id = Identity::with_policy(&opts.namespaces, opts.cluster.clone(), opts.policy.clone())
            .await;
        Operator::start_as(&id, &opts, "0").await
    }

    /// Starts one more process of the installation `id` (a replica).
    pub async fn start_as(id: &Identity, opts: &OperatorOpts, replica: &str) -> Operator {
        let mut args: Vec<String> = [
            "run",
            "--cluster-name",
            &id.cluster,
            "--watch-namespaces",
            &opts.namespaces.join(","),
            "--resync-period",
            opts.resync,
            "--leader-election-namespace",
            &id.operator_ns,
            "--pod-name",
            &format!("{}-{replica}", id.cluster),
        ]
        .map(String::from)
        .into();
        args.extend(opts.extra_args.iter().cloned());
        if opts.leader_elect {
            args.push("--leader-elect".into());
        }
        let mut env = vec![("RUST_LOG".to_string(), "info,s3_operator=debug".to_string())];
        env.extend(opts.env.iter().cloned());
        let cluster_wide = opts.namespaces.is_empty();
        Operator::spawn(
            id,
            args,
            env,
            cluster_wide,
            replica,
            opts.aws_endpoint.as_deref(),
        )
        .await
    }

    /// Runs the operator as a package's Deployment would: that container's args and env (field
    /// references resolved as the kubelet would, `olm.targetNamespaces` from `targets`), with
    /// only the addresses and the cluster name changed so it can run beside other tests.
    pub async fn start_packaged(
        id: &Identity,
        container: &serde_json::Value,
        targets: &str,
        replica: &str,
    ) -> Operator {
        let args: Vec<String> = serde_json::from_value(container["args"].clone()).expect("args");
        let mut env = Vec::new();
        for e in container["env"].as_array().expect("env") {
            let name = e["name"].as_str().expect("env name").to_string();
            let value = match (
                &e["value"],
                e["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
            ) {
                (serde_json::Value::String(v), _) => v.clone(),
                (_, Some("metadata.namespace")) => id.operator_ns.clone(),
                (_, Some("metadata.name")) => format!("{}-{replica}", id.cluster),
                (_, Some("metadata.annotations['olm.targetNamespaces']")) => targets.into(),
                _ => panic!("env {name}: unsupported source {e}"),
            };
            env.push((name, value));
        }
        env.retain(|(k, _)| k != "CLUSTER_NAME");
        env.push(("CLUSTER_NAME".into(), id.cluster.clone()));
        let all = env
            .iter()
            .find(|(k, _)| k == "WATCH_NAMESPACE")
            .is_none_or(|(_, v)| v.is_empty());
        Operator::spawn(id, args, env, all, replica, None).await
    }

    async fn spawn(
        id: &Identity,
        args: Vec<String>,
        vars: Vec<(String, String)>,
        cluster_wide: bool,
        replica: &str,
        aws_endpoint: Option<&str>,
    ) -> Operator {
        let pass = Pass::acquire(cluster_wide).await;
        let metrics_addr = format!("127.0.0.1:{}", free_port());
        let probe_addr = format!("127.0.0.1:{}", free_port());
        let log = logs_dir().join(format!("operator-{}-{replica}.log", id.cluster));
        let out = std::fs::File::create(&log).expect("log file");
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_s3-operator"));
        cmd.args(&args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .envs(vars)
            .env("KUBECONFIG", &id.kubeconfig)
            .env("AWS_ACCESS_KEY_ID", &id.aws_key.0)
            .env("AWS_SECRET_ACCESS_KEY", &id.aws_key.1)
            .env("AWS_REGION", &env().region)
            .env(
                "AWS_ENDPOINT_URL",
                aws_endpoint.unwrap_or(&env().aws_endpoint),
            )
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env("METRICS_BIND_ADDRESS", &metrics_addr)
            .env("HEALTH_PROBE_BIND_ADDRESS", &probe_addr)
            .stdout(out.try_clone().expect("log"))
            .stderr(out)
            .kill_on_drop(true);
        let child = cmd.spawn().expect("start operator");
        let op = Operator {
            child,
            cluster: id.cluster.clone(),
            metrics_addr,
            probe_addr,
            log,
            operator_ns: id.operator_ns.clone(),
            _pass: pass,
        };
        let probe = op.probe_addr.clone();
        wait_for("operator /readyz", Duration::from_secs(60), || {
            let probe = probe.clone();
            async move { (http_get(&probe, "/readyz").await?.0 == 200).then_some(()) }
        })
        .await;
        op
    }

    pub async fn metrics(&self) -> String {
        http_get(&self.metrics_addr, "/metrics")
            .await
            .expect("metrics")
            .1
    }

    /// Sum of the samples of `name` whose labels include every `label=value` in `labels`.
    pub async fn metric(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        metric_sum(&self.metrics().await, name, labels)
    }

    /// AWS writes (every operation that is not Get/List/Head) the operator has made so far.
    pub async fn aws_writes(&self) -> f64 {
        let text = self.metrics().await;
        text.lines()
            .filter(|l| l.starts_with("s3_operator_aws_requests_total{"))
            .filter(|l| {
                !["operation=\"Get", "operation=\"List", "operation=\"Head"]
                    .iter()
                    .any(|p| l.contains(p))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    pub async fn kube_writes(&self) -> f64 {
        self.metric("s3_operator_kube_writes_total", &[]).await
    }

    pub fn pid(&self) -> u32 {
        self.child.id().expect("running")
    }

    /// Sends `signal` (a name `kill` knows: STOP, CONT, ...).
    pub fn signal(&self, signal: &str) {
        let sent = std::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status()
            .is_ok_and(|s| s.success());
        assert!(sent, "kill -{signal} {}", self.pid());
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, then wait for exit; returns the exit code.
    pub async fn terminate(mut self) -> Option<i32> {
        let _ = std::process::Command::new("kill")
            .arg("-TERM")
            .arg(self.pid().to_string())
            .status();
        tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .ok()?
            .ok()?
            .code()
    }

    pub async fn kill9(mut self) {
        let _ = self.child.kill().await;
    }

    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        tokio::time::timeout(timeout, self.child.wait())
            .await
            .ok()?
            .ok()?
            .code()
    }
}

pub fn metric_sum(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A minimal HTTP/1.0 GET against a loopback address: (status, body).
pub async fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    http_request(addr, "GET", path, "").await
}

/// A minimal HTTP/1.0 request with a body against a loopback address: (status, body).
pub async fn http_request(
    addr: &str,
    method: &str,
    path: &str,
    body: &str,
) -> Option<(u16, String)> {
    tokio::time::timeout(
        Duration::from_secs(5),
        http_request_inner(addr, method, path, body),
    )
    .await
    .ok()?
}

async fn http_request_inner(
    addr: &str,
    method: &str,
    path: &str,
    body: &str,
) -> Option<(u16, String)> {
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    let len = body.len();
    s.write_all(
        format!("{method} {path} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {len}\r\n\r\n{body}").as_bytes(),
    )
    .await
    .ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.ok()?;
    let status = buf.split_whitespace().nth(1)?.parse().ok()?;
    let body = buf
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((status, body))
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

/// A minimal HTTPS/1.0 GET against a loopback address, with `token` as bearer token:
/// (status, body). The server's certificate is not verified: the operator's is self-signed, as
/// the ServiceMonitor's `insecureSkipVerify` assumes.
pub async fn https_get(addr: &str, path: &str, token: Option<&str>) -> Option<(u16, String)> {
    tokio::time::timeout(Duration::from_secs(5), https_get_inner(addr, path, token))
        .await
        .ok()?
}

async fn https_get_inner(addr: &str, path: &str, token: Option<&str>) -> Option<(u16, String)> {
    use rustls::pki_types::ServerName;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .ok()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyServerCert(provider)))
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await.ok()?;
    let mut s = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").ok()?, tcp)
        .await
        .ok()?;
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    s.write_all(
        format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n")
            .as_bytes(),
    )
    .await
    .ok()?;
    let mut buf = Vec::new();
    // A server may close without TLS close_notify; what arrived before is the answer.
    let _ = s.read_to_end(&mut buf).await;
    let text = String::from_utf8_lossy(&buf);
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((status, body))
}

/// Accepts any server certificate, but still checks the handshake's signatures.
#[derive(Debug)]
struct AnyServerCert(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyServerCert {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
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

/// Runs a tool from the cache (or PATH), feeding `stdin`; panics with its output on failure.
pub fn tool(tool: &str, args: &[&str], stdin: Option<&str>) -> String {
    let (code, out, err) = try_tool(tool, args, stdin);
    assert_eq!(code, 0, "{tool} {args:?} failed:\n{out}\n{err}");
    out
}

/// The same, without the panic: (exit code, stdout, stderr).
pub fn try_tool(tool: &str, args: &[&str], stdin: Option<&str>) -> (i32, String, String) {
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
