//! The `s3-operator` binary: CLI parsing and wiring only.

use std::net::SocketAddr;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use s3_operator::api::DeletionPolicy;
use s3_operator::aws::{budget, drift_queue, naming, policy};
use s3_operator::runtime::{self, leader, telemetry};

#[derive(Parser, Debug)]
#[command(
    name = "s3-operator",
    // `s3-operator 0.1.0 (commit abc1234)`: the commit comes from build.rs.
    version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("S3OP_GIT_COMMIT"), ")"),
    about = "Self-service S3 buckets and least-privilege IAM access for Kubernetes"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the operator (the default).
    Run(Box<RunArgs>),
    /// Print the CustomResourceDefinitions as YAML.
    Crd,
    /// Print the minimal IAM policy the operator needs, as JSON; with --target-account, what
    /// the role it assumes in another account needs.
    IamPolicy(Box<PolicyArgs>),
    /// Print Bucket manifests (Observe, adoptExisting) reproducing the existing buckets under a
    /// prefix, with what they cannot say flagged in comments. Reads with the caller's AWS
    /// credentials; writes nothing. IAM users are not imported: a BucketAccess cannot adopt a
    /// hand-made user (grant access with a new BucketAccess).
    Import(ImportArgs),
    /// GET an http:// URL (such as a replica's /readyz) and exit 0 on a 2xx answer, else 1.
    /// The image has no shell or curl: the chart's `helm test` Pod runs this.
    Probe(ProbeArgs),
}

#[derive(Args, Debug, Clone)]
struct ImportArgs {
    /// Buckets whose names start with this (the operator's --bucket-name-prefix, so that it may
    /// read and later manage them).
    #[arg(long)]
    prefix: String,
    /// Only buckets carrying this tag (key=value); repeatable, all must match.
    #[arg(long = "tag", value_parser = tag_filter)]
    tags: Vec<(String, String)>,
    /// The namespace of the manifests (its class maps it to an AWS account).
    #[arg(long)]
    namespace: String,
    /// The AWSAccount the buckets are in (the AWS credentials must be of that account). With
    /// it or `--class`, import reads the cluster (kubeconfig) and refuses unless the class the
    /// Buckets will be under puts them in that account (omitted: the operator's own).
    #[arg(long)]
    account: Option<String>,
    /// The BucketClass the manifests name (`spec.className`); omitted: the namespace's default.
    #[arg(long)]
    class: Option<String>,
    /// The buckets' region.
    #[arg(long, env = "AWS_REGION", default_value = "us-east-1")]
    aws_region: String,
    /// A custom S3-compatible endpoint, for example an emulator.
    #[arg(long, env = "AWS_ENDPOINT_URL")]
    aws_endpoint_url: Option<String>,
}

fn tag_filter(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.into(), v.into())),
        _ => Err(format!("--tag {s:?} must be key=value")),
    }
}

fn import(a: ImportArgs) -> ExitCode {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let done = rt.block_on(async {
        let settings = s3_operator::aws::Settings {
            region: Some(a.aws_region.clone()),
            endpoint_url: a.aws_endpoint_url,
        };
        let metrics = std::sync::Arc::new(s3_operator::metrics::Metrics::new());
        let aws = s3_operator::aws::Aws::new(&settings, metrics).await;
        let mut header = vec![];
        if a.account.is_some() || a.class.is_some() {
            use s3_operator::import::{Error, check, check_prefix, destination};
            let client = kube::Client::try_default().await.map_err(Error::Cluster)?;
            let (ns, class) = (&a.namespace, a.class.as_deref());
            let dest = destination(&client, ns, class, a.account.as_deref()).await?;
            let (caller, _) = aws.caller().await.map_err(Error::Caller)?;
            header.push(check(ns, a.account.as_deref(), &dest, &caller)?);
            check_prefix(&a.prefix, &dest)?;
        }
        let r = &a.aws_region;
        let (mut found, skipped) =
            s3_operator::import::import(&aws, r, &a.prefix, &a.tags, &a.namespace).await?;
        for i in &mut found {
            i.bucket.spec.class_name = a.class.clone();
        }
        s3_operator::import::yaml(&found, &skipped, &header)
    });
    match done {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[derive(Args, Debug, Clone)]
struct ProbeArgs {
    /// The URL, e.g. http://s3-operator-health:8081/readyz.
    url: String,
    /// Deadline of each attempt.
    #[arg(long, default_value = "5s", value_parser = duration)]
    timeout: std::time::Duration,
    /// Keep trying (every second) until a 2xx answer or this long has passed: a Service just
    /// created may not route yet.
    #[arg(long, default_value = "0s", value_parser = duration)]
    wait: std::time::Duration,
}

#[derive(Args, Debug, Clone)]
struct PolicyArgs {
    /// The AWS account the operator runs in: every IAM ARN in the policies names it. Not
    /// needed with --target-account.
    #[arg(long, env = "AWS_ACCOUNT_ID", value_parser = account_id,
          required_unless_present = "target_account")]
    account_id: Option<String>,
    /// Must match the operator's --cluster-name (it scopes the IAM path and default prefix).
    #[arg(long, env = "CLUSTER_NAME", default_value = "default", value_parser = cluster_name)]
    cluster_name: String,
    /// Must match the operator's --bucket-name-prefix (default: s3op-<cluster>-); with
    /// --target-account, the AWSAccount's spec.bucketNamePrefix if it sets one.
    #[arg(long, env = "BUCKET_NAME_PREFIX")]
    bucket_name_prefix: Option<String>,
    /// With --target-account: the AWSAccount's spec.iamPath, if it sets one (default:
    /// /s3-operator/<cluster>/).
    #[arg(long, requires = "target_account", value_parser = iam_path)]
    iam_path: Option<String>,
    /// AWS partition: aws, aws-cn or aws-us-gov.
    #[arg(long, default_value = "aws")]
    partition: String,
    /// The operator's --eks-cluster-name: adds the EKS Pod Identity association calls on that
    /// cluster and iam:PassRole on the roles the operator creates (PodIdentity credentials).
    /// Without it the policy allows no EKS call.
    #[arg(long, env = "EKS_CLUSTER_NAME")]
    eks_cluster_name: Option<String>,
    /// The operator's --pod-identity-role-arn: the shared role it may pass too.
    #[arg(long, env = "POD_IDENTITY_ROLE_ARN", requires = "eks_cluster_name")]
    pod_identity_role_arn: Option<String>,
    /// Print the permissions boundary instead: create it as the managed policy
    /// `<iam path>s3-operator-boundary` before the operator starts.
    #[arg(long, conflicts_with = "drift_events_rule")]
    boundary: bool,
    /// With --boundary: the operator's --allowed-replication-accounts, whose buckets the
    /// replication roles it makes may then write replicas to.
    #[arg(long, requires = "boundary", value_delimiter = ',', value_parser = account_id)]
    allowed_replication_accounts: Vec<String>,
    /// ARN of the drift-event queue (`--drift-events-queue-url`): the operator's policy may
    /// then read and delete its messages.
    #[arg(long)]
    drift_events_queue_arn: Option<String>,
    /// Print the EventBridge rule (name, event pattern) and the queue policy for the
    /// drift-event queue instead; needs --drift-events-queue-arn. With --target-account, what
    /// that account needs to forward its events to the queue's account's default bus (the rule,
    /// its target, the role EventBridge uses for it) and the statement that bus's policy needs.
    #[arg(long, requires = "drift_events_queue_arn", conflicts_with = "trust")]
    drift_events_rule: bool,
    /// Role ARNs the operator may assume (the AWSAccounts' spec.roleArn), repeatable or
    /// comma-separated: adds sts:AssumeRole and sts:TagSession on exactly these roles.
    #[arg(long, value_delimiter = ',', value_parser = account_role)]
    assume_role_arn: Vec<String>,
    /// Render for another AWS account (its 12-digit id) that an AWSAccount reaches: the
    /// permission policy of the role the operator assumes there (its own policy, scoped to that
    /// account); with --boundary that account's permissions boundary (create it there under the
    /// same name and path); with --trust the role's trust policy.
    #[arg(long, value_parser = account_id, conflicts_with_all = [
        "eks_cluster_name", "pod_identity_role_arn", "assume_role_arn",
    ])]
    target_account: Option<String>,
    /// With --target-account: ARN of the operator's own IAM role or user (with its path), the
    /// only principal the target role trusts. Not an assumed-role session ARN (what
    /// `aws sts get-caller-identity` shows for a role): pass the role's ARN.
    #[arg(long, requires = "target_account", value_parser = operator_principal)]
    operator_principal: Option<String>,
    /// With --trust: the ExternalId in the AWSAccount's Secret. Omitted: the placeholder
    /// ${EXTERNAL_ID}, to replace (for example with envsubst) before creating the role.
    #[arg(long, requires = "target_account", value_parser = external_id)]
    external_id: Option<String>,
    /// Print the trust policy of the role in --target-account instead: sts:AssumeRole and
    /// sts:TagSession for --operator-principal only, with the ExternalId and the installation's
    /// session tag (s3-operator-cluster = --cluster-name) and no other tag.
    #[arg(long, requires_all = ["target_account", "operator_principal"], conflicts_with = "boundary")]
    trust: bool,
}

#[derive(Args, Debug, Clone)]
struct RunArgs {
    /// Name of this cluster: written into ownership tags and the IAM path /s3-operator/<cluster>/.
    #[arg(long, env = "CLUSTER_NAME", default_value = "default", value_parser = cluster_name)]
    cluster_name: String,
    /// Prefix of generated bucket names (default: s3op-<cluster>-). Bucket names in specs must
    /// start with it too, because the operator's IAM policy covers only such buckets.
    #[arg(long, env = "BUCKET_NAME_PREFIX")]
    bucket_name_prefix: Option<String>,
    /// Deletion policy of Buckets whose spec names none: Retain or Delete.
    #[arg(long, env = "DEFAULT_DELETION_POLICY", default_value = "Retain", value_parser = deletion_policy)]
    default_deletion_policy: DeletionPolicy,
    /// Region of Buckets that name none (else the AWS default chain's region, else us-east-1).
    #[arg(long, env = "AWS_REGION")]
    aws_region: Option<String>,
    /// A custom S3/IAM-compatible endpoint, for example an emulator.
    #[arg(long, env = "AWS_ENDPOINT_URL")]
    aws_endpoint_url: Option<String>,
    /// ARN of the cluster's IAM OIDC provider, needed for ServiceAccountRole credentials.
    #[arg(long, env = "OIDC_PROVIDER_ARN")]
    oidc_provider_arn: Option<String>,
    /// Name of the EKS cluster this operator runs for, needed for PodIdentity credentials (its
    /// Pod Identity associations are made there).
    #[arg(long, env = "EKS_CLUSTER_NAME")]
    eks_cluster_name: Option<String>,
    /// One IAM role for every PodIdentity access, narrowed per association by a session policy
    /// (the access's grant), so no IAM write happens per access. Its trust policy admits
    /// pods.eks.amazonaws.com; its policy covers the operator's buckets. Unset: a role per access.
    #[arg(long, env = "POD_IDENTITY_ROLE_ARN")]
    pod_identity_role_arn: Option<String>,
    /// Permissions boundary of every user and role the operator creates (default: the policy
    /// <iam path>s3-operator-boundary in the operator's own account, found through STS).
    #[arg(long, env = "PERMISSIONS_BOUNDARY_ARN")]
    permissions_boundary_arn: Option<String>,
    /// Let a Bucket adopt a bucket retained by another namespace. Off: a retained bucket goes
    /// back only to the namespace it came from.
    #[arg(long, env = "ALLOW_CROSS_NAMESPACE_ADOPTION", default_value_t = false)]
    allow_cross_namespace_adoption: bool,
    /// Principals outside the operator's AWS account that a Bucket's `spec.policy` may grant
    /// (`Allow`), comma-separated: IAM ARNs, account ids or AWS service names. Empty (the
    /// default): only principals of the operator's own account.
    #[arg(
        long,
        env = "ALLOWED_POLICY_PRINCIPALS",
        value_delimiter = ',',
        default_value = ""
    )]
    allowed_policy_principals: Vec<String>,
    /// Let a Bucket's `spec.objectLock` choose a COMPLIANCE default retention, which no one in
    /// the account (root included) can shorten or bypass: whoever can create a Bucket could
    /// then store data the account can never delete before it ends. Off: only GOVERNANCE.
    #[arg(long, env = "ALLOW_COMPLIANCE_RETENTION", default_value_t = false)]
    allow_compliance_retention: bool,
    /// SQS queue and SNS topic ARNs a Bucket's `spec.notifications` may send events to,
    /// comma-separated; an entry ending in `*` allows every ARN that starts with the rest
    /// (`arn:aws:sqs:eu-west-1:123456789012:team-*`). Empty (the default): none, only
    /// EventBridge.
    #[arg(
        long,
        env = "ALLOWED_NOTIFICATION_TARGETS",
        value_delimiter = ',',
        default_value = ""
    )]
    allowed_notification_targets: Vec<String>,
    /// AWS account ids (12 digits), comma-separated, whose buckets a Bucket's
    /// `spec.replication` may name by `bucketArn`: data then leaves the accounts the operator
    /// manages. Empty (the default): none, only Buckets of the same namespace. The permissions
    /// boundary must allow them too (`s3-operator iam-policy --boundary
    /// --allowed-replication-accounts ...`).
    #[arg(
        long,
        env = "ALLOWED_REPLICATION_ACCOUNTS",
        value_delimiter = ',',
        default_value = ""
    )]
    allowed_replication_accounts: Vec<String>,
    /// Namespaces to watch, comma-separated; empty watches all (OLM's olm.targetNamespaces format).
    #[arg(
        long,
        env = "WATCH_NAMESPACE",
        default_value = "",
        value_delimiter = ','
    )]
    watch_namespaces: Vec<String>,
    /// How often a Ready object is re-read from AWS to correct drift (jittered by up to 10%).
    /// Default 10m, or 6h with --drift-events-queue-url (events find drift; the resync only
    /// catches what an event missed).
    #[arg(long, env = "RESYNC_PERIOD", value_parser = duration)]
    resync_period: Option<std::time::Duration>,
    /// How often the leader sweeps the bucket prefix and the IAM path (and the EKS cluster's
    /// Pod Identity associations) for what this installation tagged for an object that no longer
    /// exists (jittered by up to 10%; the first sweep one period after start-up).
    #[arg(long, env = "ORPHAN_SWEEP_PERIOD", default_value = "10m", value_parser = duration)]
    orphan_sweep_period: std::time::Duration,
    /// URL of the SQS queue an EventBridge rule fills with the account's CloudTrail events for
    /// this installation's buckets and IAM identities (`iam-policy --drift-events-rule` renders
    /// it): drift is then corrected within seconds of the change.
    #[arg(long, env = "DRIFT_EVENTS_QUEUE_URL")]
    drift_events_queue_url: Option<String>,
    /// AWS writes per second each namespace may make (a token bucket per namespace, so one
    /// namespace cannot spend the account's S3 and IAM rate for the others); 0: no budget.
    #[arg(long, env = "NAMESPACE_AWS_WRITE_RATE", default_value_t = budget::DEFAULT_RATE, value_parser = write_rate)]
    namespace_aws_write_rate: f64,
    /// AWS writes a namespace may make at once before its rate applies.
    #[arg(long, env = "NAMESPACE_AWS_WRITE_BURST", default_value_t = budget::DEFAULT_BURST, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    namespace_aws_write_burst: u32,
    /// AWS reads per second each namespace may make (a token bucket per namespace: a pass
    /// starts only with a read left, and what it reads past that its namespace's next passes
    /// wait out); 0: no budget.
    #[arg(long, env = "NAMESPACE_AWS_READ_RATE", default_value_t = budget::DEFAULT_READ_RATE, value_parser = read_rate)]
    namespace_aws_read_rate: f64,
    /// AWS reads a namespace may make at once before its rate applies.
    #[arg(long, env = "NAMESPACE_AWS_READ_BURST", default_value_t = budget::DEFAULT_READ_BURST, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    namespace_aws_read_burst: u32,
    /// Shortest `spec.credentials.rotation.interval` a BucketAccess may ask for; a shorter one is
    /// refused (InvalidSpec), as each rotation costs IAM writes.
    #[arg(long, env = "MIN_ROTATION_INTERVAL", default_value = "1h", value_parser = duration)]
    min_rotation_interval: std::time::Duration,
    /// Reconciles running at once, per kind and namespace.
    #[arg(long, env = "MAX_CONCURRENT_RECONCILES", default_value_t = 10, value_parser = clap::value_parser!(u16).range(1..=1000))]
    max_concurrent_reconciles: u16,
    /// Address of the /metrics endpoint.
    #[arg(long, env = "METRICS_BIND_ADDRESS", default_value = "0.0.0.0:8080")]
    metrics_bind_address: SocketAddr,
    /// Address of the /healthz and /readyz endpoints.
    #[arg(
        long,
        env = "HEALTH_PROBE_BIND_ADDRESS",
        default_value = "0.0.0.0:8081"
    )]
    health_probe_bind_address: SocketAddr,
    /// Serve /metrics over HTTPS, only to callers whose bearer token a TokenReview authenticates
    /// and a SubjectAccessReview allows `get` on /metrics (RBAC: config/rbac/metrics_auth_role.yaml;
    /// scrapers need config/rbac/metrics_reader_role.yaml).
    #[arg(long, env = "METRICS_SECURE", default_value_t = false)]
    metrics_secure: bool,
    /// Directory holding tls.crt and tls.key for --metrics-secure (reloaded when they change);
    /// without it a self-signed certificate is made at start-up.
    #[arg(long, env = "METRICS_CERT_DIR", requires = "metrics_secure")]
    metrics_cert_dir: Option<std::path::PathBuf>,
    /// Elect a leader through a Lease so only one replica reconciles.
    #[arg(long, env = "LEADER_ELECT", default_value_t = false)]
    leader_elect: bool,
    /// Name of the leader-election Lease.
    #[arg(long, env = "LEADER_ELECTION_ID", default_value = "s3-operator-leader")]
    leader_election_id: String,
    /// Namespace of the leader-election Lease (in a pod: its own namespace).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    leader_election_namespace: String,
    /// How long a lease is valid without renewal.
    #[arg(long, env = "LEASE_DURATION", default_value = "15s", value_parser = duration)]
    lease_duration: std::time::Duration,
    /// How often the leader renews the lease (and standbys retry).
    #[arg(long, env = "LEASE_RENEW_PERIOD", default_value = "2s", value_parser = duration)]
    lease_renew_period: std::time::Duration,
    /// Identity in the Lease (in a pod: its name). Defaults to hostname and process id.
    #[arg(long, env = "POD_NAME")]
    pod_name: Option<String>,
    /// Log format: text (local) or json (clusters). Level from RUST_LOG.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value = "text")]
    log_format: telemetry::LogFormat,
}

fn duration(s: &str) -> Result<std::time::Duration, String> {
    let d: kube::core::Duration = s
        .parse()
        .map_err(|e| format!("{e} (use a duration such as 30s, 10m or 1h)"))?;
    // The conversion keeps only the magnitude, so refuse negative values first.
    if d.is_negative() {
        return Err("must not be negative".into());
    }
    Ok(d.into())
}

fn deletion_policy(s: &str) -> Result<DeletionPolicy, String> {
    match s {
        "Retain" => Ok(DeletionPolicy::Retain),
        "Delete" => Ok(DeletionPolicy::Delete),
        _ => Err("must be Retain or Delete".into()),
    }
}

fn write_rate(s: &str) -> Result<f64, String> {
    calls_per_second(s, "writes")
}

fn read_rate(s: &str) -> Result<f64, String> {
    calls_per_second(s, "reads")
}

fn calls_per_second(s: &str, calls: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r.is_finite() && (0.0..=10_000.0).contains(&r) => Ok(r),
        _ => Err(format!(
            "must be a number of {calls} per second from 0 (no budget) to 10000"
        )),
    }
}

fn cluster_name(s: &str) -> Result<String, String> {
    naming::check_cluster_name(s).map(|()| s.to_string())
}

fn iam_path(s: &str) -> Result<String, String> {
    naming::check_iam_path(s).map(|()| s.to_string())
}

fn account_id(s: &str) -> Result<String, String> {
    policy::check_account_id(s).map(|()| s.to_string())
}

fn operator_principal(s: &str) -> Result<String, String> {
    policy::operator_principal(s).map(|_| s.to_string())
}

fn account_role(s: &str) -> Result<String, String> {
    policy::account_role(s.trim()).map(|_| s.trim().to_string())
}

fn external_id(s: &str) -> Result<String, String> {
    policy::check_external_id(s).map(|()| s.to_string())
}

/// The ARNs `iam-policy` was given are of `--partition`, and the operator's principal of
/// `--account-id` when both are given.
fn check_arns(p: &PolicyArgs) -> Result<(), String> {
    let partition = &p.partition;
    if let Some(principal) = &p.operator_principal {
        let arn = policy::operator_principal(principal)
            .map_err(|e| format!("--operator-principal: {e}"))?;
        if arn.partition != *partition {
            return Err(format!(
                "--operator-principal is in partition {}, but --partition is {partition}",
                arn.partition
            ));
        }
        if let Some(own) = p.account_id.as_ref().filter(|own| **own != arn.account) {
            return Err(format!(
                "--operator-principal is in account {}, but --account-id (or AWS_ACCOUNT_ID) is {own}: the principal is the operator's own role or user",
                arn.account
            ));
        }
    }
    if let (Some(target), Some(queue)) = (&p.target_account, &p.drift_events_queue_arn) {
        if !p.drift_events_rule {
            return Err("--drift-events-queue-arn with --target-account needs --drift-events-rule (the role there reads no queue)".into());
        }
        let home = queue.split(':').nth(4).unwrap_or_default();
        if policy::check_account_id(home).is_err() || home == target {
            return Err(format!(
                "--drift-events-queue-arn must name the queue in the operator's own account, not --target-account {target}"
            ));
        }
    }
    for role in &p.assume_role_arn {
        let arn = policy::account_role(role).map_err(|e| format!("--assume-role-arn: {e}"))?;
        if arn.partition != *partition {
            return Err(format!(
                "--assume-role-arn {role} is in partition {}, but --partition is {partition}",
                arn.partition
            ));
        }
    }
    Ok(())
}

/// `s3-operator iam-policy`: the operator's policy (with what the flags add), the boundary, or
/// the drift-event rule and queue policy; with --target-account, what that account needs: the
/// role's permission policy, the boundary there, or the role's trust policy.
fn iam_policy(p: PolicyArgs) -> ExitCode {
    let prefix = naming::bucket_prefix(&p.cluster_name, p.bucket_name_prefix.as_deref());
    let bucket_prefix = match prefix.and_then(|prefix| check_arns(&p).map(|()| prefix)) {
        Ok(prefix) => prefix,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    // clap requires one of the two.
    let account = p.target_account.clone().or(p.account_id.clone());
    let scope = policy::Scope {
        partition: p.partition,
        bucket_prefix,
        iam_path: (p.iam_path.clone()).unwrap_or_else(|| naming::iam_path(&p.cluster_name)),
        account: account.unwrap_or_default(),
    };
    let queue = p.drift_events_queue_arn.as_deref();
    let doc = match (queue, &p.operator_principal) {
        (_, Some(principal)) if p.trust => {
            let external_id = p
                .external_id
                .as_deref()
                .unwrap_or(policy::EXTERNAL_ID_PLACEHOLDER);
            policy::trust_policy(principal, external_id, &p.cluster_name)
        }
        _ if p.boundary => {
            let doc = policy::boundary_policy(&scope);
            policy::with_replication_accounts(doc, &scope, &p.allowed_replication_accounts)
        }
        (Some(queue), _) if p.drift_events_rule => {
            let region = queue.split(':').nth(3).unwrap_or("us-east-1");
            let (partition, account) = (&scope.partition, &scope.account);
            let (cluster, prefix) = (&p.cluster_name, &scope.bucket_prefix);
            match &p.target_account {
                // The queue's account is the operator's, whose bus the member forwards to.
                Some(member) => {
                    let home = queue.split(':').nth(4).unwrap_or_default();
                    drift_queue::member_rule(partition, member, home, region, cluster, prefix)
                }
                None => drift_queue::rule(partition, account, region, cluster, prefix, queue),
            }
        }
        _ => {
            let mut doc = policy::operator_policy(&scope);
            if let Some(cluster) = p.eks_cluster_name {
                let eks = policy::PodIdentityScope {
                    cluster,
                    shared_role: p.pod_identity_role_arn,
                };
                doc = policy::with_pod_identity(doc, &scope, &eks);
            }
            let doc = policy::with_drift_queue(doc, queue);
            policy::with_assume_roles(doc, &p.assume_role_arn)
        }
    };
    println!("{doc:#}");
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Crd) => {
            print!("{}", s3_operator::api::crds_yaml());
            ExitCode::SUCCESS
        }
        Some(Command::IamPolicy(p)) => iam_policy(*p),
        Some(Command::Import(a)) => import(a),
        Some(Command::Probe(p)) => {
            match s3_operator::probe::get_within(&p.url, p.timeout, p.wait) {
                Ok(code) if (200..300).contains(&code) => {
                    println!("{} answered {code}", p.url);
                    ExitCode::SUCCESS
                }
                Ok(code) => {
                    eprintln!("error: {} answered {code}", p.url);
                    ExitCode::FAILURE
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Some(Command::Run(args)) => run(*args),
        None => run(cli.run),
    }
}

fn run(args: RunArgs) -> ExitCode {
    let _guard = match telemetry::init(args.log_format) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let config = match config(args) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match rt.block_on(runtime::run(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "s3-operator stopped");
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The resync period: the one given, else 10 minutes, or 6 hours when drift events find drift.
fn resync_period(given: Option<std::time::Duration>, events: bool) -> std::time::Duration {
    let default = if events { 6 * 3600 } else { 600 };
    given.unwrap_or(std::time::Duration::from_secs(default))
}

/// What `run` is configured with, from its flags; `Err` says which value cannot work.
fn config(args: RunArgs) -> Result<runtime::Config, String> {
    let identity = args.pod_name.clone().unwrap_or_else(|| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        format!("{}-{}", host.trim(), std::process::id())
    });
    Ok(runtime::Config {
        reconcile: reconcile_settings(&args)?,
        aws: s3_operator::aws::Settings {
            region: args.aws_region,
            endpoint_url: args.aws_endpoint_url,
        },
        watch_namespaces: listed(args.watch_namespaces),
        max_concurrent_reconciles: args.max_concurrent_reconciles,
        metrics_addr: args.metrics_bind_address,
        probe_addr: args.health_probe_bind_address,
        metrics_secure: args.metrics_secure.then_some(args.metrics_cert_dir),
        drift_events_queue_url: args.drift_events_queue_url,
        orphan_sweep_period: args.orphan_sweep_period,
        leader_election: args.leader_elect.then_some(leader::Settings {
            namespace: args.leader_election_namespace,
            name: args.leader_election_id,
            identity,
            lease_duration: args.lease_duration,
            renew_period: args.lease_renew_period,
        }),
    })
}

fn reconcile_settings(args: &RunArgs) -> Result<s3_operator::reconcile::Settings, String> {
    let bucket_name_prefix =
        naming::bucket_prefix(&args.cluster_name, args.bucket_name_prefix.as_deref())?;
    Ok(s3_operator::reconcile::Settings {
        bucket_name_prefix,
        iam_path: naming::iam_path(&args.cluster_name),
        cluster_name: args.cluster_name.clone(),
        boundary_arn: args.permissions_boundary_arn.clone().unwrap_or_default(),
        allow_cross_namespace_adoption: args.allow_cross_namespace_adoption,
        // Found through STS at start-up, with the permissions boundary.
        account_id: String::new(),
        allowed_policy_principals: listed(args.allowed_policy_principals.clone()),
        // Found through STS at start-up.
        operator_principals: vec![],
        allow_compliance_retention: args.allow_compliance_retention,
        allowed_notification_targets: listed(args.allowed_notification_targets.clone()),
        allowed_replication_accounts: listed(args.allowed_replication_accounts.clone()),
        default_deletion_policy: args.default_deletion_policy,
        oidc_provider_arn: args.oidc_provider_arn.clone(),
        eks_cluster_name: args.eks_cluster_name.clone(),
        // Found through STS at start-up.
        eks_cluster_arn: None,
        pod_identity_role_arn: args.pod_identity_role_arn.clone(),
        resync_period: resync_period(args.resync_period, args.drift_events_queue_url.is_some()),
        namespace_aws_write_rate: args.namespace_aws_write_rate,
        namespace_aws_write_burst: args.namespace_aws_write_burst,
        namespace_aws_read_rate: args.namespace_aws_read_rate,
        namespace_aws_read_burst: args.namespace_aws_read_burst,
        min_rotation_interval: args.min_rotation_interval,
        operator_namespace: args.leader_election_namespace.clone(),
    })
}

/// A comma-separated flag's entries, trimmed, without empty ones.
fn listed(entries: Vec<String>) -> Vec<String> {
    entries
        .into_iter()
        .map(|e| e.trim().to_string())
        .filter(|e| !e.is_empty())
        .collect()
}
