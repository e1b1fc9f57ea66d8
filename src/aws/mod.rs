//! Every call the operator makes to AWS: S3, IAM and EKS clients, error classification, naming,
//! tags and policy documents. Each call is traced in one place ([`Aws::call`]); the clients' [`Recorder`]
//! times each call and counts each HTTP attempt, SDK retries included, into the [`Metrics`] the
//! clients were made with.

pub mod budget;
pub mod drift_queue;
pub mod eks;
mod fence;
pub mod iam;
pub mod naming;
pub mod policy;
pub mod s3;
pub mod tags;
mod transport;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::http::SharedHttpClient;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::{
    BeforeSerializationInterceptorContextRef, FinalizerInterceptorContextRef,
};
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::{ConfigBag, Storable, StoreReplace};
use tracing::Instrument;

use crate::fence::Fence;
use crate::metrics::Metrics;

/// Where and how to reach AWS.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Region for buckets that name none, and for IAM signing.
    pub region: Option<String>,
    /// A custom S3/IAM-compatible endpoint (for example an emulator); path-style S3 addressing.
    pub endpoint_url: Option<String>,
}

/// How many regions' S3 clients are kept. A region comes from a tenant's `spec.region` (any
/// value shaped like a region), so the clients kept are bounded, the least recently used going
/// first; AWS has fewer regions than this, and the clients share one HTTP client (a client made
/// again costs no connection).
const REGION_CLIENTS: usize = 32;

/// The S3 clients by region, at most [`REGION_CLIENTS`] of them.
#[derive(Default)]
struct RegionClients {
    clients: HashMap<String, (aws_sdk_s3::Client, u64)>,
    uses: u64,
}

impl RegionClients {
    fn get_or_make(
        &mut self,
        region: &str,
        make: impl FnOnce() -> aws_sdk_s3::Client,
    ) -> aws_sdk_s3::Client {
        self.uses += 1;
        let uses = self.uses;
        if let Some((client, used)) = self.clients.get_mut(region) {
            *used = uses;
            return client.clone();
        }
        if self.clients.len() >= REGION_CLIENTS {
            let oldest = self.clients.iter().min_by_key(|(_, (_, used))| *used);
            if let Some(oldest) = oldest.map(|(r, _)| r.clone()) {
                self.clients.remove(&oldest);
            }
        }
        let client = make();
        self.clients
            .insert(region.to_string(), (client.clone(), uses));
        client
    }
}

/// Clients for S3 (one per region, made on first use, a bounded number kept), IAM and EKS.
#[derive(Clone)]
pub struct Aws {
    base: SdkConfig,
    pub region: String,
    pub endpoint_url: Option<String>,
    iam: aws_sdk_iam::Client,
    /// Pod Identity associations, in the operator's region.
    eks: aws_sdk_eks::Client,
    s3: Arc<Mutex<RegionClients>>,
    /// Checked before every request leaves (see `crate::fence`).
    fence: Fence,
    /// The S3 and IAM clients' HTTP client: every write to its connections checks the fence.
    http: SharedHttpClient,
    /// What every client records its calls into.
    metrics: Arc<Metrics>,
    /// The account every bucket the S3 clients name must belong to (see
    /// [`s3::ExpectedOwner`]); `None` until STS has named it.
    bucket_owner: Option<String>,
}

/// The session tag naming the installation (its cluster name) on every AssumeRole into another
/// account: the target role's trust policy checks it (`policy::trust_policy`).
pub const SESSION_TAG: &str = "s3-operator-cluster";

/// What [`Aws::assuming`] assumes.
#[derive(Clone, Debug)]
pub struct AssumeRole {
    /// The AWSAccount's name: the `account` label of `s3_operator_assume_role_total`.
    pub name: String,
    pub role_arn: String,
    /// The account the role's ARN names: the owner every S3 request expects.
    pub account: String,
    pub external_id: String,
    /// Names the installation in the target account's CloudTrail.
    pub session_name: String,
    /// Session tags the role's trust policy may check.
    pub tags: Vec<(String, String)>,
    /// Region of the account's calls; `None`: the operator's.
    pub region: Option<String>,
}

/// An assumed role's credentials, counted in `s3_operator_assume_role_total`: the SDK's
/// identity cache above asks only when it holds none or they near expiry, so each ask is one
/// STS AssumeRole (which the provider's own STS client makes without the call recorder).
struct Counted {
    inner: aws_config::sts::AssumeRoleProvider,
    account: String,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for Counted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Counted")
            .field("inner", &self.inner)
            .field("account", &self.account)
            .finish_non_exhaustive()
    }
}

impl aws_credential_types::provider::ProvideCredentials for Counted {
    fn provide_credentials<'a>(
        &'a self,
    ) -> aws_credential_types::provider::future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        aws_credential_types::provider::future::ProvideCredentials::new(async move {
            let got = self.inner.provide_credentials().await;
            let outcome = if got.is_ok() { "ok" } else { "error" };
            self.metrics
                .assume_role_total
                .with_label_values(&[self.account.as_str(), outcome])
                .inc();
            got
        })
    }
}

/// The code of a call that could not be signed because its credentials could not be had
/// (for an assumed role: STS refused AssumeRole).
pub const CREDENTIALS_UNAVAILABLE: &str = "CredentialsUnavailable";

/// An AWS call failed.
#[derive(thiserror::Error, Debug)]
#[error("{service} {operation} failed: {code}: {message}")]
pub struct Error {
    pub service: &'static str,
    pub operation: &'static str,
    /// The AWS error code (`NoSuchBucket`, `AccessDenied`, ...) or a transport failure class.
    pub code: String,
    pub message: String,
    pub kind: ErrorKind,
}

/// How the reconcilers should treat an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The resource does not exist.
    NotFound,
    /// The operator's credentials may not do this.
    AccessDenied,
    /// The name is taken (by another account) or the request conflicts with existing state.
    Conflict,
    /// AWS rejected the request as invalid (bad KMS key, malformed configuration).
    Invalid,
    /// A quota of the account or of one identity is full ([`Error::quota`] names it): a person
    /// must free room or raise it, so retrying only adds refused writes.
    QuotaExceeded,
    /// Throttling, 5xx, timeouts, dropped connections: retry with backoff.
    Transient,
    /// The namespace's budget of AWS writes is spent (see [`budget`]); nothing was sent, and the
    /// pass may run again after this long.
    OverBudget(std::time::Duration),
}

impl Error {
    pub fn is(&self, code: &str) -> bool {
        self.code == code
    }
    pub fn not_found(&self) -> bool {
        self.kind == ErrorKind::NotFound
    }

    /// The quota a `QuotaExceeded` refusal of this operation hit, with its default and whether
    /// AWS raises it on request.
    pub fn quota(&self) -> &'static str {
        match (self.service, self.operation) {
            ("iam", "CreateUser") => "IAM users per account (5,000, not adjustable)",
            ("iam", "CreateRole") => "IAM roles per account (1,000 by default, adjustable)",
            ("iam", "CreateAccessKey") => "access keys per user (2)",
            ("iam", "PutUserPolicy" | "PutRolePolicy") => {
                "inline policy size (2,048 characters per user, 10,240 per role)"
            }
            ("s3", "CreateBucket") => "S3 buckets per account (10,000 by default, adjustable)",
            ("eks", "CreatePodIdentityAssociation") => {
                "EKS Pod Identity associations per cluster (5,000)"
            }
            ("iam", _) => "an IAM quota",
            ("s3", _) => "an S3 quota",
            _ => "an AWS quota",
        }
    }
}

const NOT_FOUND: &[&str] = &[
    "NoSuchBucket",
    "NoSuchEntity",
    "NoSuchTagSet",
    "NoSuchTagSetError",
    "NoSuchPublicAccessBlockConfiguration",
    "ServerSideEncryptionConfigurationNotFoundError",
    "NoSuchLifecycleConfiguration",
    "NoSuchCORSConfiguration",
    "OwnershipControlsNotFoundError",
    "NoSuchBucketPolicy",
    "NotFound",
    "ObjectLockConfigurationNotFoundError",
    // An intelligent-tiering configuration id the bucket does not have.
    "NoSuchConfiguration",
    // EKS: an unknown cluster or association.
    "ResourceNotFoundException",
];
const ACCESS_DENIED: &[&str] = &[
    "AccessDenied",
    "InvalidAccessKeyId",
    "AccessDeniedException",
    "InvalidClientTokenId",
    "SignatureDoesNotMatch",
    "Forbidden",
];
const CONFLICT: &[&str] = &[
    "BucketAlreadyExists",
    "BucketAlreadyOwnedByYou",
    "EntityAlreadyExists",
    "DeleteConflict",
    "BucketNotEmpty",
    "PermanentRedirect",
    "IllegalLocationConstraintException",
    // EKS: the ServiceAccount already has an association.
    "ResourceInUseException",
];
/// IAM's `LimitExceeded` (users, roles, keys per user, policy size), S3's bucket quota and EKS's
/// (associations per cluster); not
/// `RequestLimitExceeded`, which is throttling.
const QUOTA: &[&str] = &[
    "LimitExceeded",
    "TooManyBuckets",
    "ResourceLimitExceededException",
];
const THROTTLED: &[&str] = &[
    "Throttling",
    "ThrottlingException",
    "SlowDown",
    "RequestLimitExceeded",
    "TooManyRequestsException",
];
/// Errors that pass by themselves (credentials being refreshed, a clock being corrected, a
/// concurrent change finishing): retried with backoff, never reported as something to fix.
const TRANSIENT: &[&str] = &[
    "ExpiredToken",
    "ExpiredTokenException",
    "TokenRefreshRequired",
    "RequestTimeTooSkewed",
    "RequestExpired",
    "RequestTimeout",
    "OperationAborted",
    "ConcurrentModification",
    "ConcurrentModificationException",
    "ServiceUnavailable",
    "InternalError",
    "IDPCommunicationError",
    "PriorRequestNotComplete",
];

pub(crate) fn classify(code: &str, status: Option<u16>) -> ErrorKind {
    if TRANSIENT.contains(&code) {
        ErrorKind::Transient
    } else if NOT_FOUND.contains(&code) || (code.is_empty() && status == Some(404)) {
        ErrorKind::NotFound
    } else if ACCESS_DENIED.contains(&code) || (code.is_empty() && status == Some(403)) {
        ErrorKind::AccessDenied
    } else if QUOTA.contains(&code) {
        ErrorKind::QuotaExceeded
    } else if CONFLICT.contains(&code) {
        ErrorKind::Conflict
    } else if THROTTLED.contains(&code)
        || status.is_none_or(|s| s >= 500 || s == 429)
        || code.is_empty()
    {
        ErrorKind::Transient
    } else {
        ErrorKind::Invalid
    }
}

impl Aws {
    /// What the clients record their calls into (and the operator's other writes).
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    pub async fn new(settings: &Settings, metrics: Arc<Metrics>) -> Self {
        // Bounded calls: a hung connection must fail (and be retried with backoff), never stall
        // a reconcile worker forever.
        let timeouts = aws_config::timeout::TimeoutConfig::builder()
            .connect_timeout(std::time::Duration::from_secs(5))
            .operation_attempt_timeout(std::time::Duration::from_secs(20))
            .operation_timeout(std::time::Duration::from_secs(60))
            .build();
        let mut loader = aws_config::defaults(BehaviorVersion::latest()).timeout_config(timeouts);
        if let Some(region) = &settings.region {
            loader = loader.region(Region::new(region.clone()));
        }
        if let Some(endpoint) = &settings.endpoint_url {
            loader = loader.endpoint_url(endpoint);
        }
        Self::from_config(loader.load().await, settings.endpoint_url.clone(), metrics)
    }

    /// Clients from an already loaded SDK configuration (the benchmark's direct client uses it
    /// with its own credentials).
    pub fn from_config(
        base: SdkConfig,
        endpoint_url: Option<String>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self::fenced(base, endpoint_url, Fence::disabled(), metrics)
    }

    /// The same clients, sending nothing once `fence` closes.
    pub fn with_fence(self, fence: Fence) -> Self {
        let owner = self.bucket_owner.clone();
        let aws = Self::fenced(self.base, self.endpoint_url, fence, self.metrics);
        Self {
            bucket_owner: owner,
            ..aws
        }
    }

    /// The same clients, whose S3 requests on a bucket all expect `account` to own it.
    pub fn with_bucket_owner(self, account: &str) -> Self {
        Self {
            bucket_owner: Some(account.to_string()),
            s3: Default::default(),
            ..self
        }
    }

    fn fenced(
        base: SdkConfig,
        endpoint_url: Option<String>,
        fence: Fence,
        metrics: Arc<Metrics>,
    ) -> Self {
        let region = base
            .region()
            .map(|r| r.to_string())
            .unwrap_or_else(|| "us-east-1".to_string());
        let http = transport::client(fence.clone());
        let iam = aws_sdk_iam::Client::from_conf(
            aws_sdk_iam::config::Builder::from(&base)
                .http_client(http.clone())
                .interceptor(Recorder(metrics.clone()))
                .interceptor(fence::FenceCheck(fence.clone()))
                .build(),
        );
        let eks = aws_sdk_eks::Client::from_conf(
            aws_sdk_eks::config::Builder::from(&base)
                .http_client(http.clone())
                .interceptor(Recorder(metrics.clone()))
                .interceptor(fence::FenceCheck(fence.clone()))
                .build(),
        );
        Self {
            base,
            region,
            endpoint_url,
            iam,
            eks,
            s3: Default::default(),
            fence,
            http,
            metrics,
            bucket_owner: None,
        }
    }

    /// Clients acting in another account through `role`: credentials from STS AssumeRole
    /// (made with this client's own, over the fenced HTTP client), cached by the SDK's identity
    /// cache and renewed before they expire, so no pass assumes the role; every S3 request
    /// expects that account to own its bucket.
    pub async fn assuming(&self, role: AssumeRole) -> Self {
        let region = Region::new(role.region.unwrap_or_else(|| self.region.clone()));
        let source = self
            .base
            .to_builder()
            .http_client(self.http.clone())
            .region(region.clone())
            .build();
        let provider = aws_config::sts::AssumeRoleProvider::builder(role.role_arn)
            .external_id(role.external_id)
            .session_name(role.session_name)
            .tags(role.tags)
            .configure(&source)
            .build()
            .await;
        let counted = Counted {
            inner: provider,
            account: role.name,
            metrics: self.metrics.clone(),
        };
        let base = source
            .to_builder()
            .credentials_provider(
                aws_credential_types::provider::SharedCredentialsProvider::new(counted),
            )
            .build();
        let aws = Self::fenced(
            base,
            self.endpoint_url.clone(),
            self.fence.clone(),
            self.metrics.clone(),
        );
        aws.with_bucket_owner(&role.account)
    }

    /// The S3 client for `region`; custom endpoints use path-style addressing.
    pub fn s3(&self, region: &str) -> aws_sdk_s3::Client {
        let mut clients = self.s3.lock().expect("s3 client map poisoned");
        clients.get_or_make(region, || {
            let mut conf = aws_sdk_s3::config::Builder::from(&self.base)
                .region(Region::new(region.to_string()))
                .force_path_style(self.endpoint_url.is_some())
                .http_client(self.http.clone())
                .interceptor(Recorder(self.metrics.clone()))
                .interceptor(fence::FenceCheck(self.fence.clone()));
            if let Some(owner) = &self.bucket_owner {
                conf = conf.interceptor(s3::ExpectedOwner(owner.clone()));
            }
            aws_sdk_s3::Client::from_conf(conf.build())
        })
    }

    pub fn iam(&self) -> &aws_sdk_iam::Client {
        &self.iam
    }

    /// The account and ARN of the operator's credentials (STS GetCallerIdentity, which AWS
    /// allows to every identity): the account scopes the permissions boundary's ARN, the ARN is
    /// what tenant bucket-policy Deny statements exempt.
    pub async fn caller(&self) -> Result<(String, String), Error> {
        let sts = aws_sdk_sts::Client::from_conf(
            aws_sdk_sts::config::Builder::from(&self.base)
                .interceptor(Recorder(self.metrics.clone()))
                .build(),
        );
        let out = Aws::call("sts", "GetCallerIdentity", sts.get_caller_identity().send()).await?;
        match (out.account, out.arn) {
            (Some(account), Some(arn)) => Ok((account, arn)),
            _ => Err(Error {
                service: "sts",
                operation: "GetCallerIdentity",
                code: "NoAccount".into(),
                message: "the answer named no account or ARN".into(),
                kind: ErrorKind::Transient,
            }),
        }
    }

    /// The endpoint applications should use for S3 in `region`.
    pub fn s3_endpoint(&self, region: &str) -> String {
        match &self.endpoint_url {
            Some(e) => e.clone(),
            None if region.starts_with("cn-") => format!("https://s3.{region}.amazonaws.com.cn"),
            None => format!("https://s3.{region}.amazonaws.com"),
        }
    }

    /// Runs one AWS call (the SDK's attempts and retries) inside a span, charged to the pass's
    /// namespace, unless it is a write the namespace has no budget left for.
    pub async fn call<T, E, F>(
        service: &'static str,
        operation: &'static str,
        request: F,
    ) -> Result<T, Error>
    where
        F: Future<Output = Result<T, SdkError<E, aws_smithy_runtime_api::http::Response>>>,
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        let span = tracing::info_span!(
            "aws",
            otel.name = format!("{service}.{operation}"),
            otel.kind = "client",
            rpc.system = "aws-api",
            rpc.service = service,
            rpc.method = operation,
            aws.error_code = tracing::field::Empty,
        );
        let result = match Error::refused_by_budget(service, operation) {
            Some(refused) => Err(refused),
            None => request
                .instrument(span.clone())
                .await
                .map_err(|err| Error::from_sdk(service, operation, err)),
        };
        if let Err(e) = &result {
            span.record("aws.error_code", e.code.as_str());
        }
        result
    }
}

impl Error {
    /// The refusal of a write the pass's namespace has no budget left for (see [`budget`]).
    /// A read is charged and never refused.
    fn refused_by_budget(service: &'static str, operation: &'static str) -> Option<Error> {
        if !budget::is_write(operation) {
            budget::spend_read();
            return None;
        }
        let spent = budget::spend().err()?;
        Some(Error {
            service,
            operation,
            code: "WriteBudgetExhausted".into(),
            message: format!(
                "this namespace's budget of AWS writes is spent; it may write again in {:.1}s",
                spent.wait.as_secs_f64()
            ),
            kind: ErrorKind::OverBudget(spent.wait),
        })
    }

    /// A failed call, classified; a transport failure without an AWS code is named by its HTTP
    /// status, or `Transport` when there was none.
    fn from_sdk<E>(
        service: &'static str,
        operation: &'static str,
        err: SdkError<E, aws_smithy_runtime_api::http::Response>,
    ) -> Error
    where
        E: ProvideErrorMetadata,
    {
        if let Some(why) = credentials_failure(&err) {
            return Error {
                service,
                operation,
                code: CREDENTIALS_UNAVAILABLE.into(),
                message: why,
                kind: ErrorKind::AccessDenied,
            };
        }
        let status = err.raw_response().map(|r| r.status().as_u16());
        let code = err.code().unwrap_or_default().to_string();
        let message = match &err {
            SdkError::DispatchFailure(_) => "connection failed".to_string(),
            SdkError::TimeoutError(_) => "timed out".to_string(),
            _ => err.message().unwrap_or("no message").to_string(),
        };
        let kind = classify(&code, status);
        let code = if code.is_empty() {
            status.map_or("Transport".into(), |s| format!("HTTP{s}"))
        } else {
            code
        };
        Error {
            service,
            operation,
            code,
            message,
            kind,
        }
    }
}

/// What went wrong when a call's credentials could not be loaded (the SDK reports it as a
/// dispatch failure, before anything was sent): the whole chain, STS's refusal included.
fn credentials_failure<E, R>(err: &SdkError<E, R>) -> Option<String> {
    let SdkError::DispatchFailure(failure) = err else {
        return None;
    };
    let connector = failure.as_connector_error()?;
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(connector);
    while let Some(e) = source {
        if e.is::<aws_credential_types::provider::error::CredentialsError>() {
            let chain = aws_smithy_types::error::display::DisplayErrorContext(e).to_string();
            return Some(format!("no credentials: {chain}"));
        }
        source = e.source();
    }
    None
}

/// Records every call into the clients' metrics: its latency, SDK retries included, and each
/// HTTP attempt by outcome. The SDK retries throttling and 5xx on its own; counting only each
/// call's final result would hide exactly the throttling and flakiness an operator of this
/// operator needs to see.
struct Recorder(Arc<Metrics>);

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Recorder")
    }
}

/// When the call a [`Recorder`] times started.
#[derive(Clone, Debug)]
struct CallStart(Instant);

impl Storable for CallStart {
    type Storer = StoreReplace<Self>;
}

impl Intercept for Recorder {
    fn name(&self) -> &'static str {
        "Recorder"
    }

    fn read_before_execution(
        &self,
        _: &BeforeSerializationInterceptorContextRef<'_>,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        cfg.interceptor_state().store_put(CallStart(Instant::now()));
        Ok(())
    }

    fn read_after_attempt(
        &self,
        context: &FinalizerInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let Some(meta) = cfg.load::<Metadata>() else {
            return Ok(());
        };
        let response = context.response();
        let status = response.map(|r| r.status().as_u16());
        let code = response
            .and_then(|r| r.body().bytes())
            .map(error_code)
            .unwrap_or_default();
        let service = meta.service().to_ascii_lowercase();
        self.0
            .aws_request(&service, meta.name(), attempt_outcome(status, code));
        Ok(())
    }

    // Runs after an operation timeout too.
    fn read_after_execution(
        &self,
        _: &FinalizerInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let (Some(meta), Some(start)) = (cfg.load::<Metadata>(), cfg.load::<CallStart>()) {
            let service = meta.service().to_ascii_lowercase();
            let seconds = start.0.elapsed().as_secs_f64();
            self.0.aws_call_duration(&service, meta.name(), seconds);
        }
        Ok(())
    }
}

/// The outcome label of one attempt from its HTTP status and error code. An attempt with no
/// answer (a dropped connection, a timeout) is `no_response`: the SDK resends it, and what the
/// resend meets (a create answered "already exists") is that attempt's doing, not AWS's refusal.
fn attempt_outcome(status: Option<u16>, code: &str) -> &'static str {
    match status {
        None => "no_response",
        Some(s) if (200..300).contains(&s) => "success",
        _ if THROTTLED.contains(&code) || status == Some(429) => "throttled",
        _ if classify(code, status) == ErrorKind::NotFound => "not_found",
        _ => "error",
    }
}

/// The `<Code>` of an S3 (REST-XML) or IAM (query) error body; empty when there is none.
fn error_code(body: &[u8]) -> &str {
    let body = std::str::from_utf8(body).unwrap_or_default();
    body.split_once("<Code>")
        .and_then(|(_, rest)| rest.split_once("</Code>"))
        .map_or("", |(code, _)| code.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server on 127.0.0.1 that answers its nth request with the nth (status, error code) of
    /// `replies`, and every later one with the last.
    async fn answering(replies: &'static [(&'static str, &'static str)]) -> String {
        answering_counted(replies).await.0
    }

    /// The same, with the number of requests it has answered.
    async fn answering_counted(
        replies: &'static [(&'static str, &'static str)],
    ) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let served = Arc::new(AtomicUsize::new(0));
        let count = served.clone();
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                let served = served.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0; 8192];
                    while let Ok(n) = sock.read(&mut buf).await
                        && n > 0
                    {
                        let n = served.fetch_add(1, Ordering::SeqCst).min(replies.len() - 1);
                        let (status, code) = replies[n];
                        let body =
                            format!("<Error><Code>{code}</Code><Message>m</Message></Error>");
                        let head = format!(
                            "HTTP/1.1 {status}\r\ncontent-length: {}\r\n\r\n",
                            body.len()
                        );
                        if sock.write_all((head + &body).as_bytes()).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        (url, count)
    }

    /// Clients at `url` whose SDK makes up to `attempts` attempts of a call that meets a
    /// transient error, as the operator's own do, recording into `metrics`.
    async fn retrying(url: &str, attempts: u32, metrics: Arc<Metrics>) -> Aws {
        let creds = aws_sdk_s3::config::Credentials::new("AKID", "secret", None, None, "test");
        let retries = aws_config::retry::RetryConfig::standard()
            .with_max_attempts(attempts)
            .with_initial_backoff(std::time::Duration::from_millis(1));
        let base = aws_config::defaults(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .endpoint_url(url)
            .credentials_provider(creds)
            .retry_config(retries)
            .load()
            .await;
        Aws::from_config(base, Some(url.to_string()), metrics)
    }

    /// An IAM failure may come after the key was made (or the answer be lost on the way): a
    /// retry would make a second key nobody holds. Every other call keeps the SDK's retries.
    #[tokio::test]
    async fn a_failed_create_access_key_is_not_retried() {
        use std::sync::atomic::Ordering;
        let failing = &[("500 Internal Server Error", "ServiceFailure")];
        let (url, served) = answering_counted(failing).await;
        let aws = retrying(&url, 3, Arc::new(Metrics::new())).await;
        let err = aws.create_access_key("u").await.unwrap_err();
        assert_eq!(err.kind, ErrorKind::Transient, "{err}");
        assert_eq!(served.load(Ordering::SeqCst), 1, "one attempt, no retry");

        let (url, served) = answering_counted(failing).await;
        let aws = retrying(&url, 3, Arc::new(Metrics::new())).await;
        aws.access_keys("u").await.unwrap_err();
        assert_eq!(served.load(Ordering::SeqCst), 3, "a read is retried");
    }

    #[tokio::test]
    async fn each_call_and_each_attempt_are_recorded_into_the_clients_metrics() {
        let url = answering(&[
            ("503 Service Unavailable", "SlowDown"),
            ("404 Not Found", "NoSuchBucket"),
        ])
        .await;
        let metrics = Arc::new(Metrics::new());
        let aws = retrying(&url, 2, metrics.clone()).await;
        assert_eq!(aws.bucket_tags("us-east-1", "b").await.unwrap(), None);

        let attempts = |outcome: &str| {
            let labels = ["s3", "GetBucketTagging", outcome];
            metrics.aws_requests_total.with_label_values(&labels).get()
        };
        assert_eq!(attempts("throttled"), 1, "the SDK's retry counts");
        assert_eq!(attempts("not_found"), 1);
        let calls = metrics
            .aws_request_duration_seconds
            .with_label_values(&["s3", "GetBucketTagging"])
            .get_sample_count();
        assert_eq!(calls, 1, "one call, its retry included");
    }

    /// Issue 34, item 2: every distinct region a tenant names made a client that was never
    /// freed. At most `REGION_CLIENTS` stay, the ones in use.
    #[tokio::test]
    async fn region_clients_are_bounded() {
        let base = aws_config::defaults(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .credentials_provider(aws_sdk_s3::config::Credentials::new(
                "AKID", "secret", None, None, "test",
            ))
            .load()
            .await;
        let aws = Aws::from_config(base, None, Arc::new(Metrics::new()));
        let count = || aws.s3.lock().unwrap().clients.len();
        for i in 0..1000 {
            aws.s3(&format!("xx-tenant-{i}"));
            aws.s3("us-east-1");
        }
        assert_eq!(count(), REGION_CLIENTS);
        let kept = aws.s3.lock().unwrap().clients.contains_key("us-east-1");
        assert!(kept, "the region in use stays");
        assert_eq!(
            aws.s3("us-east-1").config().region().unwrap().as_ref(),
            "us-east-1"
        );
    }

    #[test]
    fn attempts_are_counted_by_outcome() {
        let iam_throttled = br#"<ErrorResponse><Error><Type>Sender</Type>
            <Code>Throttling</Code><Message>Rate exceeded</Message></Error></ErrorResponse>"#;
        assert_eq!(error_code(iam_throttled), "Throttling");
        assert_eq!(
            error_code(b"<Error><Code>SlowDown</Code></Error>"),
            "SlowDown"
        );
        assert_eq!(error_code(b""), "");
        assert_eq!(attempt_outcome(Some(200), ""), "success");
        assert_eq!(attempt_outcome(Some(204), ""), "success");
        assert_eq!(attempt_outcome(Some(400), "Throttling"), "throttled");
        assert_eq!(attempt_outcome(Some(503), "SlowDown"), "throttled");
        assert_eq!(attempt_outcome(Some(429), ""), "throttled");
        assert_eq!(attempt_outcome(Some(404), ""), "not_found");
        assert_eq!(attempt_outcome(Some(404), "NoSuchEntity"), "not_found");
        assert_eq!(attempt_outcome(Some(500), "InternalError"), "error");
        assert_eq!(attempt_outcome(None, ""), "no_response");
    }

    #[test]
    fn errors_are_classified() {
        assert_eq!(classify("NoSuchBucket", Some(404)), ErrorKind::NotFound);
        assert_eq!(classify("", Some(404)), ErrorKind::NotFound);
        assert_eq!(classify("AccessDenied", Some(403)), ErrorKind::AccessDenied);
        assert_eq!(
            classify("BucketAlreadyExists", Some(409)),
            ErrorKind::Conflict
        );
        assert_eq!(classify("SlowDown", Some(503)), ErrorKind::Transient);
        assert_eq!(classify("InternalError", Some(500)), ErrorKind::Transient);
        assert_eq!(classify("", None), ErrorKind::Transient);
        assert_eq!(
            classify("KMS.NotFoundException", Some(400)),
            ErrorKind::Invalid
        );
        assert_eq!(classify("MalformedXML", Some(400)), ErrorKind::Invalid);
        // A full quota is neither a conflict nor throttling (IAM's LimitExceeded comes as 409).
        assert_eq!(
            classify("LimitExceeded", Some(409)),
            ErrorKind::QuotaExceeded
        );
        assert_eq!(
            classify("TooManyBuckets", Some(400)),
            ErrorKind::QuotaExceeded
        );
        assert_eq!(
            classify("RequestLimitExceeded", Some(400)),
            ErrorKind::Transient
        );
        // EKS's codes.
        let eks = [
            ("ResourceLimitExceededException", ErrorKind::QuotaExceeded),
            ("ResourceNotFoundException", ErrorKind::NotFound),
            ("ResourceInUseException", ErrorKind::Conflict),
            ("InvalidParameterException", ErrorKind::Invalid),
        ];
        for (code, kind) in eks {
            assert_eq!(classify(code, Some(400)), kind, "{code}");
        }
        // What passes by itself is retried, never reported as a spec or policy problem.
        for code in [
            "ExpiredToken",
            "RequestTimeTooSkewed",
            "OperationAborted",
            "ConcurrentModification",
        ] {
            assert_eq!(classify(code, Some(400)), ErrorKind::Transient, "{code}");
            assert_eq!(classify(code, Some(409)), ErrorKind::Transient, "{code}");
        }
    }

    #[test]
    fn a_quota_refusal_names_the_quota_of_its_operation() {
        let named = |service, operation| {
            Error {
                service,
                operation,
                code: "LimitExceeded".into(),
                message: String::new(),
                kind: ErrorKind::QuotaExceeded,
            }
            .quota()
        };
        assert_eq!(
            named("iam", "CreateUser"),
            "IAM users per account (5,000, not adjustable)"
        );
        assert_eq!(
            named("iam", "CreateRole"),
            "IAM roles per account (1,000 by default, adjustable)"
        );
        assert_eq!(named("iam", "CreateAccessKey"), "access keys per user (2)");
        for op in ["PutUserPolicy", "PutRolePolicy"] {
            assert_eq!(
                named("iam", op),
                "inline policy size (2,048 characters per user, 10,240 per role)"
            );
        }
        assert_eq!(
            named("s3", "CreateBucket"),
            "S3 buckets per account (10,000 by default, adjustable)"
        );
        assert_eq!(named("iam", "AttachRolePolicy"), "an IAM quota");
        assert_eq!(
            named("eks", "CreatePodIdentityAssociation"),
            "EKS Pod Identity associations per cluster (5,000)"
        );
    }
}
