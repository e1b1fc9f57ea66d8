//! What every reconcile shares: the operator's settings, the clients, the bookkeeping of passes
//! and the wake-ups of the accesses granted on a bucket.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::Resource;
use rand::Rng;

use super::accounts::{Account, Accounts};
use super::error::Requeue;
#[cfg(test)]
use super::object::MANAGER;
use super::settled::Settled;
use super::{events, tag_reads};
use crate::api::DeletionPolicy;
use crate::aws::{self, Aws};
use crate::metrics::Metrics;

/// Operator settings the reconcilers need.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Name of this cluster, in ownership tags and the IAM path.
    pub cluster_name: String,
    /// Prefix of generated bucket names; the operator's IAM policy is scoped to it.
    pub bucket_name_prefix: String,
    /// IAM path of the users and roles the operator makes (`/s3-operator/<cluster>/` in its own
    /// account; an AWSAccount may set another); its IAM policy is scoped to it.
    pub iam_path: String,
    /// Deletion policy of Buckets that name none.
    pub default_deletion_policy: DeletionPolicy,
    /// ARN of the cluster's IAM OIDC provider, for `ServiceAccountRole` credentials.
    pub oidc_provider_arn: Option<String>,
    /// Name of the EKS cluster whose Pod Identity associations `PodIdentity` credentials are.
    pub eks_cluster_name: Option<String>,
    /// That cluster's ARN (`arn:<partition>:eks:<region>:<account>:cluster/<name>`, the
    /// operator's region and account, found at start-up): what a Pod Identity role's trust
    /// names, since a name may be reused by a cluster of another account or region.
    pub eks_cluster_arn: Option<String>,
    /// One IAM role every `PodIdentity` association uses, narrowed per association by a session
    /// policy (no IAM write per access); `None`: a role per access.
    pub pod_identity_role_arn: Option<String>,
    /// How often a Ready object is re-read from AWS to find drift (jittered by up to 10%).
    pub resync_period: Duration,
    /// ARN of the permissions boundary every created user and role carries.
    pub boundary_arn: String,
    /// Let a Bucket adopt a bucket retained by another namespace (off: only its own namespace).
    pub allow_cross_namespace_adoption: bool,
    /// The AWS account the operator runs in: a bucket policy may grant its principals.
    pub account_id: String,
    /// Principals outside that account (ARNs, account ids, service names) a bucket policy's
    /// `Allow` may name (`--allowed-policy-principals`); none by default.
    pub allowed_policy_principals: Vec<String>,
    /// `aws:PrincipalArn` patterns of the operator's own AWS principal (from STS at start-up):
    /// exempt from every `Deny` a tenant writes into a bucket policy, so no tenant can lock the
    /// operator out of managing or deleting its bucket.
    pub operator_principals: Vec<String>,
    /// A Bucket may choose a COMPLIANCE object lock retention (`--allow-compliance-retention`).
    pub allow_compliance_retention: bool,
    /// SQS queue and SNS topic ARNs a Bucket's `spec.notifications` may name
    /// (`--allowed-notification-targets`; an entry ending in `*` is an ARN prefix); none by
    /// default.
    pub allowed_notification_targets: Vec<String>,
    /// Accounts whose buckets `spec.replication` may name by ARN
    /// (`--allowed-replication-accounts`); none by default.
    pub allowed_replication_accounts: Vec<String>,
    /// AWS writes per second and burst of each namespace (`aws::budget`); a rate of 0: none.
    pub namespace_aws_write_rate: f64,
    pub namespace_aws_write_burst: u32,
    /// AWS reads per second and burst of each namespace (`aws::budget`); a rate of 0: none.
    pub namespace_aws_read_rate: f64,
    pub namespace_aws_read_burst: u32,
    /// Shortest key rotation interval a BucketAccess may ask for.
    pub min_rotation_interval: Duration,
    /// The operator's own namespace: where an AWSAccount's ExternalId Secret is.
    pub operator_namespace: String,
}

#[cfg(test)]
impl Settings {
    /// The settings the planners' unit tests run with: cluster `c`, prefix `s3op-`, account
    /// 123456789012 with an OIDC provider, nothing allow-listed.
    pub fn for_tests() -> Self {
        Settings {
            cluster_name: "c".into(),
            bucket_name_prefix: "s3op-".into(),
            iam_path: "/s3-operator/c/".into(),
            default_deletion_policy: DeletionPolicy::Retain,
            oidc_provider_arn: Some(
                "arn:aws:iam::123456789012:oidc-provider/oidc.example.com".into(),
            ),
            eks_cluster_name: Some("eks".into()),
            eks_cluster_arn: Some("arn:aws:eks:us-east-1:123456789012:cluster/eks".into()),
            pod_identity_role_arn: None,
            resync_period: Duration::from_secs(600),
            boundary_arn: "arn:aws:iam::123456789012:policy/s3-operator/c/s3-operator-boundary"
                .into(),
            allow_cross_namespace_adoption: false,
            account_id: "123456789012".into(),
            allowed_policy_principals: vec![],
            operator_principals: vec![
                "arn:aws:iam::123456789012:role/s3-operator".into(),
                "arn:aws:iam::123456789012:role/*/s3-operator".into(),
            ],
            allow_compliance_retention: false,
            allowed_notification_targets: vec![],
            allowed_replication_accounts: vec![],
            namespace_aws_write_rate: 0.0,
            namespace_aws_write_burst: 1,
            namespace_aws_read_rate: 0.0,
            namespace_aws_read_burst: 1,
            min_rotation_interval: Duration::from_secs(10),
            operator_namespace: "s3-operator-system".into(),
        }
    }
}

/// Shared by every reconcile.
pub struct Context {
    pub client: kube::Client,
    /// The AWS accounts passes act in (a pass acts in one: [`InAccount`]).
    pub accounts: Accounts,
    /// The operator's settings in its own account (a pass reads its account's: [`InAccount`]).
    pub settings: Settings,
    pub events: events::Events,
    pub settled: Settled,
    /// The warm Bucket caches of every watched scope (BucketAccess looks its Bucket up here).
    pub buckets: Vec<super::refs::Buckets>,
    /// Bucket tags read from AWS, shared by a Bucket's pass and its accesses'.
    pub tag_reads: tag_reads::TagReads,
    pub grants: Grants,
    /// Each namespace's budgets of AWS writes and reads.
    pub budgets: Arc<crate::aws::budget::Budgets>,
    /// What every pass records into (the same registry `aws` records into).
    pub metrics: Arc<Metrics>,
    /// The BucketClasses, BucketAccessClasses and namespaces, read live.
    pub classes: crate::reconcile::class::Classes,
    /// The UIDs whose cleanup this process finished (`orphans`).
    pub finalized: crate::reconcile::orphans::Finalized,
}

/// Wakes the BucketAccesses granted on an S3 bucket name, in every watched scope: a Bucket that
/// finds its bucket gone or held by another, or that takes a name over, has them confirm their
/// grant at once rather than at their next resync.
#[derive(Clone)]
pub struct Grants(tokio::sync::broadcast::Sender<String>);

impl Default for Grants {
    fn default() -> Self {
        // A receiver that lags wakes every access for a full pass instead of losing wake-ups
        // (`runtime::wakes`).
        Grants(tokio::sync::broadcast::channel(1024).0)
    }
}

impl Grants {
    pub fn wake(&self, bucket: &str) {
        // No receiver (no access controller yet) is nothing to wake.
        let _ = self.0.send(bucket.to_string());
    }

    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<String> {
        self.0.subscribe()
    }
}

impl Context {
    /// A context whose clients point at nothing, for unit tests of the bookkeeping; its
    /// metrics are its own.
    #[cfg(test)]
    pub fn for_tests() -> Context {
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("a URL"));
        let client = kube::Client::try_from(config).expect("a client");
        let metrics = Arc::new(Metrics::new());
        let sdk = aws_config::SdkConfig::builder().build();
        let home = Account::home(
            Aws::from_config(sdk, None, metrics.clone()),
            Settings::for_tests(),
        );
        Context {
            events: events::Events::new(client.clone(), MANAGER, None),
            client,
            accounts: Accounts::home_only(home),
            settings: Settings::for_tests(),
            settled: Default::default(),
            buckets: vec![],
            tag_reads: Default::default(),
            grants: Default::default(),
            budgets: Arc::new(crate::aws::budget::Budgets::unlimited()),
            metrics,
            classes: Default::default(),
            finalized: Default::default(),
        }
    }

    /// The Bucket `name` in `namespace`, from the watch cache.
    pub fn bucket(&self, namespace: &str, name: &str) -> Option<Arc<crate::api::Bucket>> {
        let key = kube::runtime::reflector::ObjectRef::new(name).within(namespace);
        self.buckets.iter().find_map(|c| c.store.get(&key))
    }

    pub fn resync(&self) -> Requeue {
        Requeue::Resync(self.resync_after())
    }

    /// The (jittered) time until the next periodic pass.
    pub fn resync_after(&self) -> Duration {
        jitter(self.settings.resync_period, 0.1)
    }

    /// Publishes an event about `obj`; failures are logged, never fatal.
    pub async fn event<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        warning: bool,
        reason: &str,
        note: String,
    ) {
        // Every event is a log line too, inside the reconcile span (so it carries the trace id).
        if warning {
            tracing::warn!(reason, note = %note, "event");
        } else {
            tracing::info!(reason, note = %note, "event");
        }
        let publish = self.events.publish(obj, warning, reason, &note);
        if let Err(e) = self.metrics.kube_write("Event", "publish", publish).await {
            tracing::warn!(error = %e, "could not publish event");
        }
    }
}

/// A pass's view of the [`Context`] in the account its object lives in: `aws` and `settings`
/// are that account's; everything else is the context's.
pub struct InAccount<'a> {
    ctx: &'a Context,
    pub account: Arc<Account>,
    pub aws: Aws,
    pub settings: Arc<Settings>,
}

impl<'a> InAccount<'a> {
    pub fn new(ctx: &'a Context, account: Arc<Account>) -> Self {
        InAccount {
            ctx,
            aws: account.aws.clone(),
            settings: account.settings.clone(),
            account,
        }
    }

    /// The operator's own account.
    pub fn home(ctx: &'a Context) -> Self {
        Self::new(ctx, ctx.accounts.home().clone())
    }

    /// `why`, naming the account when AWS refused in an AWSAccount (a quota or a policy is that
    /// account's, and its admin must act there).
    pub fn said(&self, why: &super::Blocked) -> super::Blocked {
        use crate::api::condition::Reason;
        let mut why = why.clone();
        if let (Some(name), Reason::QuotaExceeded | Reason::AccessDenied) =
            (&self.account.name, why.reason)
        {
            let id = &self.account.id;
            why.message = format!("{} (in AWSAccount {name}, account {id})", why.message);
        }
        why
    }

    /// A bucket's tags: this process's read of them no older than `within`, else a new read
    /// (in this account), recorded for the Bucket's and its accesses' next passes.
    pub async fn bucket_tags(
        &self,
        region: &str,
        bucket: &str,
        within: Duration,
    ) -> Result<tag_reads::Tags, aws::Error> {
        let slot = self.ctx.tag_reads.slot(region, bucket);
        let mut read = slot.lock().await;
        if let Some(tags) = tag_reads::fresh(&read, within) {
            return Ok(tags);
        }
        let tags = self.aws.bucket_tags(region, bucket).await?;
        *read = Some((tags.clone(), Instant::now()));
        Ok(tags)
    }
}

impl std::ops::Deref for InAccount<'_> {
    type Target = Context;
    fn deref(&self) -> &Context {
        self.ctx
    }
}

/// `d` lengthened by up to `fraction` at random, so objects do not resync in lockstep.
pub fn jitter(d: Duration, fraction: f64) -> Duration {
    d.mul_f64(1.0 + rand::rng().random_range(0.0..fraction))
}

/// The deletion policy in force for a Bucket.
pub fn deletion_policy(spec: Option<DeletionPolicy>, settings: &Settings) -> DeletionPolicy {
    spec.unwrap_or(settings.default_deletion_policy)
}
