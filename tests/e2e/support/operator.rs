//! The operator binary as a local process, under its own ServiceAccount, RBAC and IAM policy,
//! with its metrics, logs and exit.

use super::*;

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
    /// Another build of the operator (an earlier release, which knows only the flags passed
    /// here); `None` is this tree's.
    pub binary: Option<PathBuf>,
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
            binary: None,
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
    /// Its identity's access key id and Kubernetes user name: what the emulator's request log
    /// and the API server's audit log know it by.
    pub aws_key_id: String,
    pub kube_user: String,
    _pass: Pass,
}

/// A loopback port free now and never handed out before by this process. The port is released
/// before its user binds it, and the kernel may offer a just-released port again: two replicas
/// started at once were given the same probe port, and one exited on "address in use".
pub(crate) fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .expect("bind")
            .local_addr()
            .expect("addr")
            .port();
        if GIVEN.lock().expect("ports").insert(port) {
            return port;
        }
    }
}

/// The ServiceAccount of the installations the tests make themselves.
const SA: &str = "s3-operator";

/// The IAM user the installation for `cluster` runs as (path `/`, in moto's account).
pub fn operator_user(cluster: &str) -> String {
    format!("s3-operator-{cluster}")
}

/// The ARN of [`operator_user`]: the operator's principal, as another account's role trusts it.
pub fn operator_user_arn(cluster: &str) -> String {
    format!("arn:aws:iam::{ACCOUNT}:user/{}", operator_user(cluster))
}

/// The identity an operator installation runs as; several processes (replicas) may share one.
#[derive(Clone)]
pub struct Identity {
    pub cluster: String,
    pub operator_ns: String,
    kubeconfig: PathBuf,
    token: String,
    pub aws_key: (String, String),
    /// The ServiceAccount's user name, as the API server's audit log has it.
    pub kube_user: String,
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
        let token = service_account(&client, &operator_ns, SA, &grants).await;
        // Classes and namespaces are read cluster-wide in every scope; every namespace also
        // gets the manager's rules in that ClusterRole, as the cluster-wide packages grant them.
        let mut rules = class_reader_rules();
        if namespaces.is_empty() {
            rules.extend(manager_rules());
        }
        let role = format!("e2e-s3-operator-{}", random(6));
        let cluster_role: k8s_openapi::api::rbac::v1::ClusterRole =
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": role},
                "rules": rules,
            }))
            .expect("a ClusterRole");
        Api::<k8s_openapi::api::rbac::v1::ClusterRole>::all(client.clone())
            .create(&PostParams::default(), &cluster_role)
            .await
            .expect("create ClusterRole");
        bind_cluster_role(&client, None, &role, &operator_ns, "s3-operator").await;
        Identity {
            _pass: pass,
            ..Identity::with_token(cluster, operator_ns, SA, &token, policy).await
        }
    }

    /// Writes the kubeconfig for `token` and creates the IAM user: by default with exactly the
    /// policy shipped in config/iam, rendered for this installation's cluster name.
    async fn with_token(
        cluster: String,
        operator_ns: String,
        sa: &str,
        token: &str,
        policy: Option<serde_json::Value>,
    ) -> Identity {
        let kubeconfig = logs_dir().join(format!("{cluster}.kubeconfig"));
        std::fs::write(&kubeconfig, kubeconfig_yaml(&env().server, token))
            .expect("write kubeconfig");
        let doc = policy.unwrap_or_else(|| operator_policy(&cluster));
        create_boundary(&cluster).await;
        let aws_key = iam_user_with_policy(&operator_user(&cluster), "/", Some(&doc)).await;
        Identity {
            kube_user: format!("system:serviceaccount:{operator_ns}:{sa}"),
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
        Identity::with_token(cluster.into(), sa_ns.into(), sa, &token, None).await
    }
}

impl Operator {
    pub async fn start(opts: OperatorOpts) -> Operator {
        let id = Identity::with_policy(&opts.namespaces, opts.cluster.clone(), opts.policy.clone())
            .await;
        Operator::start_as(&id, &opts, "0").await
    }

    /// An operator watching only a new namespace (named after `tag`) with a 2s resync, and the
    /// Bucket API and name of that namespace.
    pub async fn in_new_namespace(tag: &str) -> (Operator, Api<Bucket>, String) {
        let client = admin().await;
        let ns = namespace(&client, tag).await;
        let op = Operator::start(OperatorOpts {
            namespaces: vec![ns.clone()],
            resync: "2s",
            ..Default::default()
        })
        .await;
        (op, Api::<Bucket>::namespaced(client, &ns), ns)
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
        let mut env = vec![
            ("RUST_LOG".to_string(), "info,s3_operator=debug".to_string()),
            // The tests rotate keys every few seconds; the default floor is an hour.
            ("MIN_ROTATION_INTERVAL".to_string(), "10s".to_string()),
            // The tests resync every few seconds (the default is every 10 minutes): the read
            // budget sized for the default would throttle their resyncs of a few dozen
            // objects. `read_budget::` and the fairness benchmark set it themselves (a flag
            // wins over its variable).
            ("NAMESPACE_AWS_READ_RATE".to_string(), "0".to_string()),
        ];
        env.extend(opts.env.iter().cloned());
        let cluster_wide = opts.namespaces.is_empty();
        Operator::spawn(id, args, env, cluster_wide, replica, opts).await
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
        Operator::spawn(id, args, env, all, replica, &OperatorOpts::default()).await
    }

    async fn spawn(
        id: &Identity,
        args: Vec<String>,
        vars: Vec<(String, String)>,
        cluster_wide: bool,
        replica: &str,
        opts: &OperatorOpts,
    ) -> Operator {
        let pass = Pass::acquire(cluster_wide).await;
        let metrics_addr = format!("127.0.0.1:{}", free_port());
        let probe_addr = format!("127.0.0.1:{}", free_port());
        let log = logs_dir().join(format!("operator-{}-{replica}.log", id.cluster));
        let out = std::fs::File::create(&log).expect("log file");
        let binary = opts.binary.as_deref();
        let mut cmd = tokio::process::Command::new(
            binary.unwrap_or(Path::new(env!("CARGO_BIN_EXE_s3-operator"))),
        );
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
                opts.aws_endpoint.as_deref().unwrap_or(&env().aws_endpoint),
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
            aws_key_id: id.aws_key.0.clone(),
            kube_user: id.kube_user.clone(),
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

    /// Calls the operator has made to the AWS `operation`, whatever their outcome.
    pub async fn aws_calls(&self, operation: &str) -> f64 {
        self.metric(
            "s3_operator_aws_requests_total",
            &[("operation", operation)],
        )
        .await
    }

    /// Calls the operator has made to S3 and IAM, whatever their outcome: what a pass of a
    /// Bucket or an access would show.
    pub async fn s3_and_iam_calls(&self) -> f64 {
        let metric = "s3_operator_aws_requests_total";
        self.metric(metric, &[("service", "s3")]).await
            + self.metric(metric, &[("service", "iam")]).await
    }

    /// Waits until the operator has made two more `operation` calls than now: two resync
    /// passes of a Bucket that reads it, however loaded the machine is.
    pub async fn two_more_calls(&self, operation: &str) {
        let from = self.aws_calls(operation).await;
        let what = format!("two more {operation} calls (resync passes)");
        wait_for(&what, Duration::from_secs(60), || async {
            (self.aws_calls(operation).await >= from + 2.0).then_some(())
        })
        .await;
    }

    /// Waits until the operator is idle (nothing queued, no reconcile running) and none of its
    /// work counters (reconciles, queue adds, AWS requests, Kubernetes writes) has moved for
    /// `quiet`: a status write echoes back as a reconcile a moment later, hence the window. Only
    /// for operators without a periodic resync inside the window.
    pub async fn wait_settled(&self, quiet: Duration) {
        const WORK: [&str; 4] = [
            "controller_runtime_reconcile_total",
            "workqueue_adds_total",
            "s3_operator_aws_requests_total",
            "s3_operator_kube_writes_total",
        ];
        let deadline = Instant::now() + Duration::from_secs(300);
        let mut last: Option<(Vec<f64>, Instant)> = None;
        loop {
            let text = self.metrics().await;
            let busy = metric_sum(&text, "workqueue_depth", &[])
                + metric_sum(&text, "controller_runtime_active_workers", &[]);
            let work: Vec<f64> = WORK.iter().map(|m| metric_sum(&text, m, &[])).collect();
            match &last {
                Some((w, since)) if *w == work && busy == 0.0 => {
                    if since.elapsed() >= quiet {
                        return;
                    }
                }
                _ => last = Some((work, Instant::now())),
            }
            assert!(
                Instant::now() < deadline,
                "operator {} did not settle (quiet for {quiet:?}) within 300s",
                self.cluster
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Drift the operator has corrected in `aspect`.
    pub async fn drift_corrections(&self, aspect: &str) -> f64 {
        self.metric("s3_operator_drift_corrections_total", &[("aspect", aspect)])
            .await
    }

    /// Where to count this operator's writes from, outside its process (see `Sent::writes`).
    pub async fn sent(&self) -> Sent {
        Sent::now(&self.aws_key_id, &self.kube_user).await
    }

    /// AWS writes (every operation that is not Get/List/Head) the operator counted itself so far:
    /// only an extra check beside `Sent::writes`.
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

    /// Fails if a reconcile of this operator has panicked so far, by its panic counter; a
    /// process that has already exited (or no longer answers) is left to the log check of `Drop`.
    pub async fn assert_no_reconcile_panic(&mut self) {
        if !matches!(self.child.try_wait(), Ok(None)) {
            return;
        }
        if let Some((200, text)) = http_get(&self.metrics_addr, "/metrics").await
            && let Err(e) = check_no_panic_metric(&text)
        {
            panic!("operator {}: {e}", self.cluster);
        }
    }

    /// SIGTERM, then wait for exit; returns the exit code.
    pub async fn terminate(mut self) -> Option<i32> {
        self.assert_no_reconcile_panic().await;
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
        self.assert_no_reconcile_panic().await;
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

/// What Rust's panic hook prints ("thread '...' panicked at src/...") and what the operator
/// logs when it turns a caught reconcile panic into an error.
const PANIC_MARKS: [&str; 2] = ["panicked at", "reconcile panicked"];

/// `Err` naming every line of an operator log that shows a panic. A reconcile panic is caught
/// and retried, so the operator runs on and only its log (and its counter) tell.
pub fn check_no_panic_in_log(log: &str) -> Result<(), String> {
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| PANIC_MARKS.iter().any(|m| l.contains(m)))
        .collect();
    if lines.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the operator log shows a panic:\n{}",
            lines.join("\n")
        ))
    }
}

/// `Err` if `controller_runtime_reconcile_panics_total` (summed over its labels) is not 0, or
/// if the metrics do not have it at all (a renamed counter must not make the check vacuous).
pub fn check_no_panic_metric(metrics: &str) -> Result<(), String> {
    const NAME: &str = "controller_runtime_reconcile_panics_total";
    if !metrics.lines().any(|l| l.starts_with(NAME)) {
        return Err(format!("the metrics have no {NAME}"));
    }
    match metric_sum(metrics, NAME, &[]) {
        0.0 => Ok(()),
        n => Err(format!("{NAME} is {n}: a reconcile panicked")),
    }
}

/// A point in the requests of one identity (every replica of an installation): what the
/// emulator had received from its access key, and when.
pub struct Sent {
    key: String,
    user: String,
    aws: BTreeMap<String, u64>,
    since: jiff::Timestamp,
}

impl Sent {
    pub async fn now(aws_key_id: &str, kube_user: &str) -> Sent {
        Sent {
            key: aws_key_id.into(),
            user: kube_user.into(),
            aws: emulator_requests(aws_key_id).await,
            since: jiff::Timestamp::now(),
        }
    }

    /// The writes sent since, counted where the operator cannot leave one out: AWS writes in
    /// the emulator's request log, Kubernetes writes in the API server's audit log. Empty when
    /// it wrote nothing.
    pub async fn writes(&self) -> Vec<String> {
        let aws = aws_writes_between(&self.aws, &emulator_requests(&self.key).await);
        let mut writes: Vec<String> = aws.iter().map(|(op, n)| format!("AWS {op} x{n}")).collect();
        writes.extend(audited_writes(By::User(&self.user), self.since));
        writes
    }

    /// The AWS writes alone (`AWS <operation> x<n>`), sorted.
    pub async fn aws_writes(&self) -> Vec<String> {
        let aws = aws_writes_between(&self.aws, &emulator_requests(&self.key).await);
        aws.iter().map(|(op, n)| format!("AWS {op} x{n}")).collect()
    }
}

impl Drop for Operator {
    /// Every operator a test ran, however it ended, must not have panicked. Not while the test is
    /// already failing: a second panic during unwinding would abort the whole test binary.
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        if let Err(e) = check_no_panic_in_log(&self.log_text()) {
            panic!(
                "operator {} (log {}): {e}",
                self.cluster,
                self.log.display()
            );
        }
    }
}

#[cfg(test)]
mod panic_checks {
    use super::*;

    /// What the operator writes when a reconcile panics: the hook's line, then the caught
    /// panic retried as an error.
    const PANICKED: &str = "\
2026-11-26T05:00:00Z  INFO s3_operator: reconciling bucket team-a/photos
thread 'tokio-runtime-worker' panicked at src/reconcile/bucket.rs:120:9:
called `Option::unwrap()` on a `None` value
2026-11-26T05:00:00Z ERROR s3_operator::runtime: reconcile failed error=reconcile panicked: called `Option::unwrap()` on a `None` value
";

    #[test]
    fn the_log_check_catches_a_reconcile_panic() {
        let e = check_no_panic_in_log(PANICKED).expect_err("a panic in the log");
        assert!(e.contains("src/reconcile/bucket.rs:120:9"), "{e}");
        assert!(e.contains("reconcile failed"), "{e}");
        check_no_panic_in_log("INFO s3_operator: reconciled team-a/photos\n").expect("clean log");
    }

    #[test]
    fn the_metric_check_catches_a_reconcile_panic() {
        let metrics = "\
# TYPE controller_runtime_reconcile_panics_total counter
controller_runtime_reconcile_panics_total{controller=\"bucket\"} 0
controller_runtime_reconcile_panics_total{controller=\"bucketaccess\"} 1
";
        let e = check_no_panic_metric(metrics).expect_err("one panic");
        assert!(e.contains("is 1"), "{e}");
        check_no_panic_metric(&metrics.replace("} 1", "} 0")).expect("no panic");
        check_no_panic_metric("s3_operator_kube_writes_total 3\n").expect_err("counter missing");
    }
}
