//! The reconcilers, one module per kind. Each pass observes AWS and Kubernetes, computes a plan
//! with a pure function, and applies only the difference, so a steady-state pass writes nothing.

pub mod bucket;
pub mod bucket_access;
pub mod events;
pub mod tag_reads;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::NamespaceResourceScope;
use kube::api::{Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use rand::Rng;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::runtime::controller::Action;

use crate::api::condition::{Reason, is_ready};
use crate::api::{DeletionPolicy, FINALIZER};
use crate::aws::tags::Owner;
use crate::aws::{self, Aws, ErrorKind};
use crate::metrics::METRICS;

/// What the reconcilers read and write: a namespaced kind with a typed body.
pub trait Object:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + DeserializeOwned
    + std::fmt::Debug
{
}

impl<K> Object for K where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
{
}

/// Field manager of every write the operator makes.
pub const MANAGER: &str = "s3-operator";

/// Operator settings the reconcilers need.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Name of this cluster, in ownership tags and the IAM path.
    pub cluster_name: String,
    /// Prefix of generated bucket names; the operator's IAM policy is scoped to it.
    pub bucket_name_prefix: String,
    /// Deletion policy of Buckets that name none.
    pub default_deletion_policy: DeletionPolicy,
    /// ARN of the cluster's IAM OIDC provider, for `ServiceAccountRole` credentials.
    pub oidc_provider_arn: Option<String>,
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
    /// AWS writes per second and burst of each namespace (`aws::budget`); a rate of 0: none.
    pub namespace_aws_write_rate: f64,
    pub namespace_aws_write_burst: u32,
    /// Shortest key rotation interval a BucketAccess may ask for.
    pub min_rotation_interval: Duration,
}

#[cfg(test)]
impl Settings {
    /// The settings the planners' unit tests run with: cluster `c`, prefix `s3op-`, account
    /// 123456789012 with an OIDC provider, nothing allow-listed.
    pub fn for_tests() -> Self {
        Settings {
            cluster_name: "c".into(),
            bucket_name_prefix: "s3op-".into(),
            default_deletion_policy: DeletionPolicy::Retain,
            oidc_provider_arn: Some(
                "arn:aws:iam::123456789012:oidc-provider/oidc.example.com".into(),
            ),
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
            namespace_aws_write_rate: 0.0,
            namespace_aws_write_burst: 1,
            min_rotation_interval: Duration::from_secs(10),
        }
    }
}

/// Shared by every reconcile.
pub struct Context {
    pub client: kube::Client,
    pub aws: Aws,
    pub settings: Settings,
    pub events: events::Events,
    pub backoff: Backoff,
    pub settled: Settled,
    /// The warm Bucket caches of every watched scope (BucketAccess looks its Bucket up here).
    pub buckets: Vec<kube::runtime::reflector::Store<crate::api::Bucket>>,
    /// Bucket tags read from AWS, shared by a Bucket's pass and its accesses'.
    pub tag_reads: tag_reads::TagReads,
    pub grants: Grants,
    /// Each namespace's budget of AWS writes.
    pub budgets: Arc<crate::aws::budget::Budgets>,
}

/// Wakes the BucketAccesses granted on an S3 bucket name, in every watched scope: a Bucket that
/// finds its bucket gone or held by another, or that takes a name over, has them confirm their
/// grant at once rather than at their next resync.
#[derive(Clone)]
pub struct Grants(tokio::sync::broadcast::Sender<String>);

impl Default for Grants {
    fn default() -> Self {
        // A receiver that lags loses wake-ups, not safety: every access still confirms
        // ownership on its own resync.
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
    /// A context whose clients point at nothing, for unit tests of the bookkeeping.
    #[cfg(test)]
    pub fn for_tests() -> Context {
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("a URL"));
        let client = kube::Client::try_from(config).expect("a client");
        Context {
            events: events::Events::new(client.clone(), MANAGER, None),
            client,
            aws: Aws::from_config(aws_config::SdkConfig::builder().build(), None),
            settings: Settings::for_tests(),
            backoff: Default::default(),
            settled: Default::default(),
            buckets: vec![],
            tag_reads: Default::default(),
            grants: Default::default(),
            budgets: Arc::new(crate::aws::budget::Budgets::unlimited()),
        }
    }

    /// A bucket's tags: this process's read of them no older than `within`, else a new read,
    /// recorded for the Bucket's and its accesses' next passes (`tag_reads`).
    pub async fn bucket_tags(
        &self,
        region: &str,
        bucket: &str,
        within: Duration,
    ) -> Result<tag_reads::Tags, aws::Error> {
        let slot = self.tag_reads.slot(region, bucket);
        let mut read = slot.lock().await;
        if let Some(tags) = tag_reads::fresh(&read, within) {
            return Ok(tags);
        }
        let tags = self.aws.bucket_tags(region, bucket).await?;
        *read = Some((tags.clone(), Instant::now()));
        Ok(tags)
    }

    /// The Bucket `name` in `namespace`, from the watch cache.
    pub fn bucket(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<std::sync::Arc<crate::api::Bucket>> {
        let key = kube::runtime::reflector::ObjectRef::new(name).within(namespace);
        self.buckets.iter().find_map(|s| s.get(&key))
    }
}

/// What can fail in a reconcile. AWS refusals that a person must fix (names taken, access
/// denied, invalid configuration) are not errors: they land in the Ready condition.
#[derive(thiserror::Error, Debug)]
pub enum Error {
    #[error(transparent)]
    Aws(#[from] aws::Error),
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("object has no namespace")]
    NoNamespace,
    /// The pass stops until someone acts; the reconciler turns this into the Ready condition, so
    /// it never reaches the controller.
    #[error(transparent)]
    Blocked(#[from] Blocked),
    /// Deletion must wait (bucket not empty, or cleanup refused); the finalizer stays and the
    /// object is retried with backoff. A state reported in status, not a failed reconcile.
    #[error("deletion blocked: {0}")]
    DeletionBlocked(String),
}

impl Error {
    /// A deletion that waits for someone to act: retried with backoff, but not counted or
    /// logged as a failed reconcile.
    pub fn is_deletion_blocked(&self) -> bool {
        matches!(self, Error::DeletionBlocked(_))
    }

    /// A compare-and-swap write (the finalizer patch carries the resourceVersion) that lost to a
    /// newer version of the object: the pass started from a cache that had not seen it yet. The
    /// newer version's watch event runs the reconcile again; nothing failed.
    pub fn is_stale_write(&self) -> bool {
        matches!(self, Error::Kube(kube::Error::Api(e)) if e.code == 409)
    }

    /// The namespace's budget of AWS writes was spent before this pass wrote anything: it runs
    /// again after the returned time. Nothing failed.
    pub fn over_budget(&self) -> Option<Duration> {
        match self {
            Error::Aws(aws::Error {
                kind: ErrorKind::OverBudget(wait),
                ..
            }) => Some(*wait),
            _ => None,
        }
    }
}

/// When a successful pass wants to run again if nothing changes before (its `Action`, typed so
/// the runtime can tell a periodic resync from an early requeue).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Requeue {
    /// Only on a change (an object whose clean-up is done).
    OnChange,
    /// At the periodic resync, or what is left of it.
    Resync(Duration),
    /// Sooner than the resync: a key rotation, a grace period, the next step of a long job.
    After(Duration),
}

impl Requeue {
    pub fn action(self) -> Action {
        match self {
            Requeue::OnChange => Action::await_change(),
            Requeue::Resync(d) | Requeue::After(d) => Action::requeue(d),
        }
    }
}

/// Why a pass cannot go on until a person (or another object) acts: reported in the Ready
/// condition (and an event), re-checked at the next resync; not a failed reconcile.
#[derive(thiserror::Error, Clone, Debug, PartialEq, Eq)]
#[error("{message}")]
pub struct Blocked {
    pub reason: Reason,
    pub message: String,
}

impl Blocked {
    pub fn new(reason: Reason, message: impl Into<String>) -> Self {
        Blocked {
            reason,
            message: message.into(),
        }
    }

    /// A person must fix it (counted as a terminal error); waiting on a Bucket is not that.
    fn is_terminal(&self) -> bool {
        !matches!(
            self.reason,
            Reason::BucketNotReady | Reason::BucketNotFound | Reason::BucketNotOwned
        )
    }
}

/// The Blocked an AWS refusal that a person must fix amounts to; `None` for transient errors
/// (retried with backoff). `conflict`: the reason a conflict reads as for this kind (else it is
/// an invalid spec); `denied_also`: what else an AccessDenied may mean.
pub fn refusal(e: &aws::Error, conflict: Option<Reason>, denied_also: &str) -> Option<Blocked> {
    let (service, op, code, msg) = (&e.service, &e.operation, &e.code, &e.message);
    match (e.kind, conflict) {
        (ErrorKind::AccessDenied, _) => Some(Blocked::new(
            Reason::AccessDenied,
            format!(
                "AWS denied {service} {op}: {denied_also}the operator's IAM policy does not allow it ({msg})"
            ),
        )),
        (ErrorKind::Conflict, Some(reason)) => Some(Blocked::new(
            reason,
            format!("{service} {op}: {code}: {msg}"),
        )),
        (ErrorKind::Invalid | ErrorKind::Conflict, _) => Some(Blocked::new(
            Reason::InvalidSpec,
            format!("AWS rejected {op}: {code}: {msg}"),
        )),
        (ErrorKind::NotFound | ErrorKind::Transient | ErrorKind::OverBudget(_), _) => None,
    }
}

/// The Kubernetes object that owns what the operator creates in AWS for `obj`.
pub fn owner<K: Resource>(obj: &K, cluster: &str) -> Owner {
    Owner {
        cluster: cluster.to_string(),
        namespace: obj.namespace().unwrap_or_default(),
        name: obj.name_any(),
        uid: obj.uid().unwrap_or_default(),
    }
}

/// Does `obj` carry the operator's finalizer (so its clean-up has yet to run)?
pub fn has_finalizer<K: Resource>(obj: &K) -> bool {
    obj.finalizers().iter().any(|f| f == FINALIZER)
}

/// Was the current spec (`generation`) already served, Ready? Then a change found in AWS or in
/// the Secret was made outside the operator: drift.
pub fn served(generation: Option<i64>, observed: Option<i64>, conditions: &[Condition]) -> bool {
    observed == generation && is_ready(conditions)
}

/// Reports `why` as the Ready condition, `status` (status and event, each only when the status
/// changes; a Bucket not yet Ready is no news) and waits for a change or the periodic resync,
/// in case the cause goes away outside Kubernetes.
pub async fn report_blocked<K, S>(
    ctx: &Context,
    obj: &K,
    current: Option<&S>,
    status: &S,
    why: &Blocked,
) -> Result<Requeue, Error>
where
    K: Object,
    S: Serialize + PartialEq,
{
    if current != Some(status) {
        if why.reason != Reason::BucketNotReady {
            ctx.event(obj, true, why.reason.as_str(), why.message.clone())
                .await;
        }
        update_status(&ctx.client, obj, current, status).await?;
    }
    if why.is_terminal() {
        let controller = K::kind(&()).to_lowercase();
        METRICS
            .terminal_reconcile_errors_total
            .with_label_values(&[controller.as_str()])
            .inc();
    }
    Ok(ctx.resync())
}

/// The resourceVersions a successful pass started from and left behind (its own writes), per
/// input object, and when the next full pass is due. The watch echo of the operator's own writes
/// (even from a cache that has not caught up with them) then costs no second round of AWS reads;
/// a change by anyone else comes with a version the pass never saw and runs the full pass, and
/// so does the periodic resync that looks for drift in AWS.
#[derive(Default)]
pub struct Settled {
    passes: Mutex<HashMap<String, Pass>>,
}

/// Per input object, the versions a pass saw or wrote; and when the next full pass is due.
struct Pass {
    seen: Vec<Vec<String>>,
    due: Instant,
}

impl Settled {
    /// How long until the next full pass, if every input of `key` is at a version its last
    /// pass saw or wrote.
    pub fn remaining(&self, key: &str, current: &[String]) -> Option<Duration> {
        let passes = self.passes.lock().expect("settled map poisoned");
        let Pass { seen, due } = passes.get(key)?;
        let now = Instant::now();
        let same =
            seen.len() == current.len() && seen.iter().zip(current).all(|(ok, v)| ok.contains(v));
        (same && now < *due).then(|| *due - now)
    }

    /// Records a successful pass: for each input, the versions it saw or wrote.
    pub fn record(&self, key: String, versions: Vec<Vec<String>>, next_pass: Duration) {
        self.passes.lock().expect("settled map poisoned").insert(
            key,
            Pass {
                seen: versions,
                due: Instant::now() + next_pass,
            },
        );
    }

    /// Has a pass of `key` written over `version` of the object itself (its first input)? A
    /// cache still at `version` is then behind this operator's own write, whose watch event
    /// runs the pass again.
    pub fn wrote_over(&self, key: &str, version: &str) -> bool {
        let passes = self.passes.lock().expect("settled map poisoned");
        let Some(own) = passes.get(key).and_then(|p| p.seen.first()) else {
            return false;
        };
        own.iter()
            .position(|v| v == version)
            .is_some_and(|i| own[i + 1..].iter().any(|v| v != version))
    }

    /// Makes the next pass of `key` a full one, keeping what its last pass wrote: a pass from a
    /// cache still behind those writes is skipped (`wrote_over`) rather than run on stale input,
    /// where it would write its status again or have its finalizer patch refused.
    pub fn expire(&self, key: &str) {
        if let Some(p) = self
            .passes
            .lock()
            .expect("settled map poisoned")
            .get_mut(key)
        {
            p.due = Instant::now();
        }
    }

    pub fn forget(&self, key: &str) {
        self.passes
            .lock()
            .expect("settled map poisoned")
            .remove(key);
    }
}

/// The key of an object in `Settled` and in the backoff map.
pub fn object_key<K: Resource<DynamicType = ()>>(obj: &K) -> String {
    let meta = obj.meta();
    let (ns, name) = (
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default(),
    );
    format!("{}/{ns}/{name}", K::kind(&()))
}

/// Per-object exponential backoff for failed reconciles (kube-runtime has none built in):
/// 1s, 2s, 4s, ... capped at 5 minutes, with jitter, reset by the next success.
#[derive(Default)]
pub struct Backoff {
    failures: Mutex<HashMap<String, u32>>,
}

impl Backoff {
    pub const BASE: Duration = Duration::from_secs(1);
    pub const MAX: Duration = Duration::from_secs(300);

    pub fn next(&self, key: &str) -> Duration {
        let mut failures = self.failures.lock().expect("backoff map poisoned");
        let n = failures.entry(key.to_string()).or_insert(0);
        let delay = Self::BASE
            .saturating_mul(2u32.saturating_pow(*n))
            .min(Self::MAX);
        *n = n.saturating_add(1);
        jitter(delay, 0.2)
    }

    pub fn reset(&self, key: &str) {
        self.failures
            .lock()
            .expect("backoff map poisoned")
            .remove(key);
    }
}

/// `d` lengthened by up to `fraction` at random, so objects do not resync in lockstep.
pub fn jitter(d: Duration, fraction: f64) -> Duration {
    d.mul_f64(1.0 + rand::rng().random_range(0.0..fraction))
}

impl Context {
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
        METRICS
            .kube_writes_total
            .with_label_values(&["Event", "publish"])
            .inc();
        if let Err(e) = self.events.publish(obj, warning, reason, &note).await {
            tracing::warn!(error = %e, "could not publish event");
        }
    }
}

/// What one pass changed, published as a single event when the pass ends, so a new pair or a
/// rotation costs one event write and reads as one line in `kubectl describe`.
#[derive(Debug, Default)]
pub struct PassEvents {
    items: Vec<Note>,
}

/// One change of a pass, or the event that sums a pass up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    pub warning: bool,
    pub reason: &'static str,
    pub note: String,
}

impl PassEvents {
    pub fn add(&mut self, warning: bool, reason: &'static str, note: String) {
        self.items.push(Note {
            warning,
            reason,
            note,
        });
    }

    /// The event for this pass: a warning if any change was one (its reason leads), else the
    /// first change's reason; the notes in the order they happened.
    fn summary(&self) -> Option<Note> {
        let warning = self.items.iter().any(|i| i.warning);
        let lead = self.items.iter().find(|i| i.warning == warning)?;
        let notes: Vec<&str> = self.items.iter().map(|i| i.note.as_str()).collect();
        Some(Note {
            warning,
            reason: lead.reason,
            note: notes.join("; "),
        })
    }

    pub async fn publish<K: Resource<DynamicType = ()>>(self, ctx: &Context, obj: &K) {
        if let Some(Note {
            warning,
            reason,
            note,
        }) = self.summary()
        {
            ctx.event(obj, warning, reason, note).await;
        }
    }
}

fn namespaced_api<K>(client: &kube::Client, obj: &K) -> Result<Api<K>, Error>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>,
{
    Ok(Api::namespaced(
        client.clone(),
        obj.meta().namespace.as_deref().ok_or(Error::NoNamespace)?,
    ))
}

/// Adds the finalizer if missing; the resourceVersion in the patch makes it a compare-and-swap.
/// Returns the object's resourceVersion afterwards.
pub async fn ensure_finalizer<K: Object>(client: &kube::Client, obj: &K) -> Result<String, Error> {
    if has_finalizer(obj) {
        return Ok(obj.resource_version().unwrap_or_default());
    }
    let mut finalizers = obj.finalizers().to_vec();
    finalizers.push(FINALIZER.to_string());
    patch_finalizers(client, obj, finalizers).await
}

/// Removes the finalizer so Kubernetes can delete the object.
pub async fn remove_finalizer<K: Object>(client: &kube::Client, obj: &K) -> Result<(), Error> {
    let finalizers: Vec<String> = obj
        .finalizers()
        .iter()
        .filter(|f| *f != FINALIZER)
        .cloned()
        .collect();
    match patch_finalizers(client, obj, finalizers).await {
        // A reconcile from a cache that has not yet seen the object go: the work is done.
        Err(Error::Kube(kube::Error::Api(e))) if e.code == 404 => Ok(()),
        other => other.map(|_| ()),
    }
}

async fn patch_finalizers<K: Object>(
    client: &kube::Client,
    obj: &K,
    finalizers: Vec<String>,
) -> Result<String, Error> {
    let api = namespaced_api(client, obj)?;
    let patch =
        json!({"metadata": {"finalizers": finalizers, "resourceVersion": obj.resource_version()}});
    METRICS
        .kube_writes_total
        .with_label_values(&[K::kind(&()).as_ref(), "patch"])
        .inc();
    let patched = api
        .patch(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .instrument_kube("patch finalizers")
        .await?;
    Ok(patched.resource_version().unwrap_or_default())
}

/// Writes `status` if it differs from what the object carries (a steady-state pass writes
/// nothing). Returns the resourceVersion of the write, if there was one.
pub async fn update_status<K, S>(
    client: &kube::Client,
    obj: &K,
    current: Option<&S>,
    status: &S,
) -> Result<Option<String>, Error>
where
    K: Object,
    S: Serialize + PartialEq,
{
    if current == Some(status) {
        return Ok(None);
    }
    let api = namespaced_api(client, obj)?;
    METRICS
        .kube_writes_total
        .with_label_values(&[K::kind(&()).as_ref(), "patch_status"])
        .inc();
    let patched = api
        .patch_status(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .instrument_kube("patch status")
        .await?;
    Ok(patched.resource_version())
}

/// The deletion policy in force for a Bucket.
pub fn deletion_policy(spec: Option<DeletionPolicy>, settings: &Settings) -> DeletionPolicy {
    spec.unwrap_or(settings.default_deletion_policy)
}

/// Wraps a Kubernetes write in a child span of the reconcile.
trait InstrumentKube: Future + Sized {
    fn instrument_kube(self, what: &'static str) -> tracing::instrument::Instrumented<Self> {
        tracing::Instrument::instrument(
            self,
            tracing::info_span!("kube", otel.name = what, otel.kind = "client"),
        )
    }
}
impl<F: Future> InstrumentKube for F {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_is_one_event_led_by_its_warning() {
        assert_eq!(PassEvents::default().summary(), None, "no change, no event");
        let mut e = PassEvents::default();
        e.add(false, "Created", "Created IAM user u".into());
        e.add(false, "KeyCreated", "Created access key K".into());
        assert_eq!(
            e.summary(),
            Some(Note {
                warning: false,
                reason: "Created",
                note: "Created IAM user u; Created access key K".into()
            })
        );
        e.add(true, "DriftCorrected", "Recreated Secret s".into());
        let Note {
            warning,
            reason,
            note,
        } = e.summary().unwrap();
        assert!(warning);
        assert_eq!(reason, "DriftCorrected");
        assert!(note.ends_with("; Recreated Secret s"), "{note}");
    }

    #[test]
    fn settled_passes_skip_only_versions_they_saw_and_only_until_due() {
        let s = Settled::default();
        let v = |x: &str| x.to_string();
        assert_eq!(s.remaining("k", &[v("1")]), None, "never recorded");
        s.record(
            "k".into(),
            vec![vec![v("1"), v("2")], vec![v("7")]],
            Duration::from_secs(60),
        );
        let left = s.remaining("k", &[v("2"), v("7")]).expect("its own write");
        assert!(left <= Duration::from_secs(60) && left > Duration::from_secs(59));
        assert!(
            s.remaining("k", &[v("1"), v("7")]).is_some(),
            "a cache behind its write"
        );
        assert_eq!(
            s.remaining("k", &[v("3"), v("7")]),
            None,
            "someone else's change"
        );
        assert_eq!(
            s.remaining("k", &[v("2"), v("8")]),
            None,
            "an input changed"
        );
        assert_eq!(s.remaining("k", &[v("2")]), None, "different inputs");
        s.record("k".into(), vec![vec![v("2")]], Duration::ZERO);
        assert_eq!(s.remaining("k", &[v("2")]), None, "due: the full pass runs");
        s.forget("k");
        assert_eq!(s.remaining("k", &[v("2")]), None);
    }

    #[test]
    fn a_cache_behind_the_operators_own_write_is_known() {
        let s = Settled::default();
        let v = |x: &str| x.to_string();
        assert!(!s.wrote_over("k", "1"), "never recorded");
        s.record("k".into(), vec![vec![v("1"), v("1")]], Duration::ZERO);
        assert!(!s.wrote_over("k", "1"), "a pass that wrote nothing");
        s.record(
            "k".into(),
            vec![vec![v("1"), v("2"), v("3")]],
            Duration::ZERO,
        );
        assert!(s.wrote_over("k", "1") && s.wrote_over("k", "2"));
        assert!(!s.wrote_over("k", "3"), "the newest version");
        assert!(!s.wrote_over("k", "4"), "someone else's change");
        s.forget("k");
        assert!(!s.wrote_over("k", "1"));
    }

    #[test]
    fn an_expired_pass_runs_in_full_but_still_knows_its_own_writes() {
        let s = Settled::default();
        let v = |x: &str| x.to_string();
        s.record(
            "k".into(),
            vec![vec![v("1"), v("2"), v("3")]],
            Duration::from_secs(600),
        );
        assert!(s.remaining("k", &[v("3")]).is_some());
        s.expire("k");
        assert_eq!(s.remaining("k", &[v("3")]), None, "the full pass runs");
        assert!(
            s.wrote_over("k", "2"),
            "a cache behind its writes is still known"
        );
        s.expire("never-recorded");
        assert!(!s.wrote_over("never-recorded", "1"));
    }

    #[test]
    fn backoff_grows_exponentially_caps_and_resets() {
        let b = Backoff::default();
        let first = b.next("a");
        assert!(first >= Duration::from_secs(1) && first < Duration::from_millis(1200));
        let second = b.next("a");
        assert!(second >= Duration::from_secs(2) && second < Duration::from_millis(2400));
        for _ in 0..20 {
            b.next("a");
        }
        assert!(b.next("a") <= Backoff::MAX.mul_f64(1.2));
        assert!(b.next("other") < Duration::from_millis(1200), "per object");
        b.reset("a");
        assert!(b.next("a") < Duration::from_millis(1200));
    }
}
