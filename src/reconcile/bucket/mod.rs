//! Bucket: observe the S3 bucket, plan the difference from the spec (pure), apply it.

pub mod logging;
pub mod notifications;
pub mod protection;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;

use super::{
    Blocked, Context, Error, Requeue, deletion_policy, ensure_finalizer, has_finalizer, object_key,
    owner, remove_finalizer, report_blocked, served, tag_reads, update_status,
};
use crate::api::condition::{self, Reason};
use crate::api::{
    Bucket, BucketStatus, CorsRule, DeletionPolicy, Encryption, EncryptionAlgorithm, LifecycleRule,
    ObjectOwnership, PublicAccessBlock, Versioning,
};
use crate::api::{IntelligentTiering, ObjectLock, TransferAcceleration};
use crate::aws::s3::Emptied;
use crate::aws::s3::logging::LogTarget;
use crate::aws::s3::protection::LockState;
use crate::aws::tags::{Owner, Ownership, released, with_ownership};
use crate::aws::{ErrorKind, naming, policy};
use crate::metrics::METRICS;

/// What else an AccessDenied on a bucket may mean.
const DENIED_ALSO: &str = "the bucket may belong to another account, or ";

/// The Blocked an AWS refusal a person must fix amounts to; `None` for transient errors.
fn refusal(e: &crate::aws::Error) -> Option<Blocked> {
    super::refusal(e, Some(Reason::NameConflict), DENIED_ALSO)
}

/// What the spec asks for, resolved against the operator's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct Desired {
    pub name: String,
    pub region: String,
    pub tags: BTreeMap<String, String>,
    pub public_access_block: PublicAccessBlock,
    pub encryption: Encryption,
    /// `None`: not managed (left as it is in S3), and not even read.
    pub versioning: Option<Versioning>,
    pub lifecycle_rules: Option<Vec<LifecycleRule>>,
    pub cors: Option<Vec<CorsRule>>,
    /// `None`: not managed (and not read) once the bucket exists; a new bucket still gets
    /// [`Desired::creation_ownership`].
    pub object_ownership: Option<ObjectOwnership>,
    /// The whole bucket policy: always managed, as it carries the TLS-only statement. `Err`:
    /// why `spec.policy` is refused (the plan blocks on it; deletion does not).
    pub policy: Result<serde_json::Value, String>,
    /// `None`: not managed (and not read); the bucket is created without object lock.
    pub object_lock: Option<ObjectLock>,
    /// `None`: not managed (and not read).
    pub intelligent_tiering: Option<Vec<IntelligentTiering>>,
    /// `None`: not managed (and not read).
    pub transfer_acceleration: Option<TransferAcceleration>,
    /// `None`: not managed (and not read). `Some(Err)`: why `spec.notifications` is refused.
    pub notifications: Option<Result<crate::api::Notifications, String>>,
    /// spec.logging, resolved against the cache (`logging::wanted`). `None`: not managed
    /// and not read; `Some(None)`: kept off.
    pub logging: Option<Option<LogTarget>>,
}

impl Desired {
    pub fn address(&self) -> Address {
        Address {
            name: self.name.clone(),
            region: self.region.clone(),
        }
    }

    /// The ownership a new bucket is created with: the spec's, else `BucketOwnerEnforced` (ACLs
    /// disabled), as AWS creates buckets. It goes in the CreateBucket call itself, so the
    /// default costs no request of its own.
    pub fn creation_ownership(&self) -> ObjectOwnership {
        self.object_ownership.unwrap_or_default()
    }
}

/// What S3 holds for the bucket name, as far as the plan needs to know.
#[derive(Clone, Debug, PartialEq)]
pub enum Observed {
    Absent,
    /// Exists with another owner's tags.
    Foreign(String),
    /// Exists with no owner, and this object may not adopt it (the message says why).
    NotAdoptable(String),
    /// Ours, or unowned and adoptable: its current configuration (boxed: it is large).
    Present(Box<Config>),
}

/// The bucket's current configuration. Unmanaged aspects are `None` (not read).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Config {
    pub tags: BTreeMap<String, String>,
    pub public_access_block: Option<PublicAccessBlock>,
    pub encryption: Option<Encryption>,
    pub versioning: Option<Versioning>,
    pub lifecycle_rules: Option<Vec<LifecycleRule>>,
    pub cors: Option<Vec<CorsRule>>,
    /// `None` when unmanaged (not read) or when the bucket has no ownership controls.
    pub object_ownership: Option<ObjectOwnership>,
    /// `None` when the bucket has no policy.
    pub policy: Option<serde_json::Value>,
    /// `None` when unmanaged (not read).
    pub object_lock: Option<LockState>,
    pub intelligent_tiering: Option<Vec<IntelligentTiering>>,
    /// `None` when unmanaged (not read) or never set.
    pub transfer_acceleration: Option<TransferAcceleration>,
    pub notifications: Option<crate::aws::s3::notifications::ObservedNotifications>,
    /// `None` when unmanaged (not read); `Some(None)` when logging is off.
    pub logging: Option<Option<LogTarget>>,
}

/// One write to S3.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    Create,
    Tags,
    PublicAccessBlock,
    Encryption,
    Versioning(Versioning),
    LifecycleRules,
    Cors,
    ObjectOwnership(ObjectOwnership),
    Policy,
    /// The default retention of a bucket with object lock.
    ObjectLock,
    /// Intelligent-tiering configurations to write and to delete, by id.
    IntelligentTiering {
        put: Vec<String>,
        delete: Vec<String>,
    },
    TransferAcceleration(TransferAcceleration),
    Notifications,
    Logging,
}

impl Change {
    /// The aspect name used in events and the drift metric.
    pub fn aspect(&self) -> &'static str {
        match self {
            Change::Create => "bucket",
            Change::Tags => "tags",
            Change::PublicAccessBlock => "publicAccessBlock",
            Change::Encryption => "encryption",
            Change::Versioning(_) => "versioning",
            Change::LifecycleRules => "lifecycleRules",
            Change::Cors => "cors",
            Change::ObjectOwnership(_) => "objectOwnership",
            Change::Policy => "policy",
            Change::ObjectLock => "objectLock",
            Change::IntelligentTiering { .. } => "intelligentTiering",
            Change::TransferAcceleration(_) => "transferAcceleration",
            Change::Notifications => "notifications",
            Change::Logging => "logging",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Plan {
    /// Nothing may be done until a person acts.
    Blocked(Blocked),
    /// These writes bring S3 in line with the spec (none in steady state).
    Apply(Vec<Change>),
}

/// The pure heart of the Bucket reconciler: which writes turn `observed` into `desired`.
pub fn plan(desired: &Desired, observed: &Observed) -> Plan {
    match observed {
        Observed::Foreign(owner) => Plan::Blocked(Blocked::new(
            Reason::NameConflict,
            format!(
                "bucket {} already exists and is {owner}; it will not be modified",
                desired.name
            ),
        )),
        Observed::NotAdoptable(why) => {
            Plan::Blocked(Blocked::new(Reason::NameConflict, why.clone()))
        }
        Observed::Absent | Observed::Present(_) if desired.policy.is_err() => {
            let why = desired.policy.clone().err().unwrap_or_default();
            Plan::Blocked(Blocked::new(Reason::InvalidSpec, why))
        }
        Observed::Absent | Observed::Present(_)
            if matches!(desired.notifications, Some(Err(_))) =>
        {
            let why = notifications_refusal(desired);
            Plan::Blocked(Blocked::new(Reason::InvalidSpec, why))
        }
        Observed::Absent => Plan::Apply(creation(desired)),
        Observed::Present(config) => match protection::refused(desired, config) {
            Some(why) => Plan::Blocked(why),
            None => Plan::Apply(drift(desired, config)),
        },
    }
}

/// The writes that make a new bucket: created with its tags, object ownership and object lock
/// in one call, then each managed aspect that differs from what S3 gives a new bucket.
fn creation(desired: &Desired) -> Vec<Change> {
    let mut all = vec![
        Change::Create,
        Change::PublicAccessBlock,
        Change::Encryption,
        Change::Policy,
    ];
    // A new bucket is unversioned, which is what Suspended means for it; object lock turns
    // versioning on in the CreateBucket call.
    if desired.versioning == Some(Versioning::Enabled) && desired.object_lock.is_none() {
        all.push(Change::Versioning(Versioning::Enabled));
    }
    if desired
        .lifecycle_rules
        .as_ref()
        .is_some_and(|r| !r.is_empty())
    {
        all.push(Change::LifecycleRules);
    }
    if desired.cors.as_ref().is_some_and(|r| !r.is_empty()) {
        all.push(Change::Cors);
    }
    all.extend(protection::on_create(desired));
    if let Some(Ok(n)) = &desired.notifications
        && !n.is_empty()
    {
        all.push(Change::Notifications);
    }
    // A new bucket logs nothing: only logging somewhere is a write.
    if matches!(desired.logging, Some(Some(_))) {
        all.push(Change::Logging);
    }
    all
}

/// The writes that bring an existing bucket back to the spec: one per managed aspect that
/// differs (none in steady state).
fn drift(desired: &Desired, config: &Config) -> Vec<Change> {
    let mut changes = Vec::new();
    if config.tags != desired.tags {
        changes.push(Change::Tags);
    }
    if config.public_access_block != Some(desired.public_access_block) {
        changes.push(Change::PublicAccessBlock);
    }
    if config.encryption.as_ref().map(normalize_encryption)
        != Some(normalize_encryption(&desired.encryption))
    {
        changes.push(Change::Encryption);
    }
    if let Some(want) = desired.versioning
        && config.versioning.unwrap_or(Versioning::Suspended) != want
    {
        changes.push(Change::Versioning(want));
    }
    if let Some(want) = &desired.lifecycle_rules
        && config.lifecycle_rules.as_ref().map(|r| sorted_rules(r)) != Some(sorted_rules(want))
    {
        changes.push(Change::LifecycleRules);
    }
    if let Some(want) = &desired.cors
        && config.cors.as_ref().map(|r| normalize_cors(r)) != Some(normalize_cors(want))
    {
        changes.push(Change::Cors);
    }
    if let Some(want) = desired.object_ownership
        && config.object_ownership != Some(want)
    {
        changes.push(Change::ObjectOwnership(want));
    }
    let partition = naming::partition(&desired.region);
    if let Ok(want) = &desired.policy
        && config
            .policy
            .as_ref()
            .map(|p| policy::normalize_policy(p, partition))
            != Some(policy::normalize_policy(want, partition))
    {
        changes.push(Change::Policy);
    }
    changes.extend(protection::changes(desired, config));
    if let Some(Ok(want)) = &desired.notifications
        && notifications::drifted(want, config.notifications.as_ref())
    {
        changes.push(Change::Notifications);
    }
    if let Some(want) = &desired.logging
        && config.logging.as_ref() != Some(want)
    {
        changes.push(Change::Logging);
    }
    changes
}

fn notifications_refusal(desired: &Desired) -> String {
    match &desired.notifications {
        Some(Err(why)) => why.clone(),
        _ => String::new(),
    }
}

fn normalize_encryption(e: &Encryption) -> Encryption {
    let mut e = e.clone();
    if e.algorithm == EncryptionAlgorithm::AwsKms {
        e.bucket_key_enabled = Some(e.bucket_key_enabled.unwrap_or(false));
    }
    e
}

fn sorted_rules(rules: &[LifecycleRule]) -> Vec<LifecycleRule> {
    let mut r = rules.to_vec();
    r.sort_by(|a, b| a.id.cmp(&b.id));
    r
}

fn normalize_cors(rules: &[CorsRule]) -> Vec<CorsRule> {
    rules
        .iter()
        .map(|r| {
            let mut r = r.clone();
            r.allowed_methods.sort();
            r.allowed_methods.dedup();
            r
        })
        .collect()
}

/// Which S3 bucket a Bucket names: its name and region.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Address {
    pub name: String,
    pub region: String,
}

/// The S3 bucket a Bucket names, from its spec's name and region (immutable) and its UID only:
/// never from status (whoever can write status must not point a grant or a deletion at another
/// bucket), and whatever else the spec says, so deletion and the grants' ownership checks work
/// for a spec that an edit has made invalid. `Err`: a name outside the operator's bucket-name
/// prefix, which it can neither have created nor adopted.
pub fn address(
    bucket: &Bucket,
    settings: &super::Settings,
    default_region: &str,
    owner: &Owner,
) -> Result<Address, Blocked> {
    let spec = &bucket.spec;
    let prefix = &settings.bucket_name_prefix;
    let name = match &spec.bucket_name {
        Some(n) => n.clone(),
        None => naming::bucket_name(prefix, &owner.namespace, &owner.name, &owner.uid),
    };
    if !name.starts_with(prefix.as_str()) {
        let msg = format!(
            "spec.bucketName {name:?} must start with the operator's bucket-name prefix {prefix:?}: its IAM policy only covers such buckets"
        );
        return Err(Blocked::new(Reason::InvalidSpec, msg));
    }
    let region = spec
        .region
        .clone()
        .unwrap_or_else(|| default_region.to_string());
    Ok(Address { name, region })
}

/// The spec resolved into a [`Desired`], or why it cannot be served.
pub fn desired(
    bucket: &Bucket,
    ctx_settings: &super::Settings,
    default_region: &str,
    owner: &Owner,
) -> Result<Desired, Blocked> {
    let spec = &bucket.spec;
    let Address { name, region } = address(bucket, ctx_settings, default_region, owner)?;
    let compliance = ctx_settings.allow_compliance_retention;
    if let Some(why) = protection::spec_refused(spec, &name, compliance) {
        return Err(why);
    }
    let arn = naming::bucket_arn(naming::partition(&region), &name);
    let rules = policy::StatementRules {
        account: &ctx_settings.account_id,
        allowed: &ctx_settings.allowed_policy_principals,
        operator: &ctx_settings.operator_principals,
    };
    let statements = policy::bucket_statements(&spec.policy, &arn, &rules);
    let allowed_targets = &ctx_settings.allowed_notification_targets;
    let notifications = spec
        .notifications
        .as_ref()
        .map(|n| notifications::desired(n, &region, allowed_targets));
    Ok(Desired {
        policy: statements.map(|s| policy::bucket_policy(&arn, &s)),
        name,
        region,
        tags: with_ownership(&spec.tags, owner),
        public_access_block: spec.public_access_block,
        encryption: spec.encryption.clone(),
        versioning: spec.versioning,
        lifecycle_rules: spec.lifecycle_rules.clone(),
        cors: spec.cors.clone(),
        object_ownership: spec.object_ownership,
        object_lock: spec.object_lock.clone(),
        intelligent_tiering: spec.intelligent_tiering.clone(),
        transfer_acceleration: spec.transfer_acceleration,
        notifications,
        // Needs the cache: resolved by `logging::complete`.
        logging: None,
    })
}

/// Why this object may not take over a bucket that has no owner, if it may not (pure). It
/// must ask (`spec.adoptExisting`), and a retained bucket goes back only to the namespace and
/// cluster it came from, unless the operator allows adoption across namespaces.
pub fn adoption_refused(
    bucket: &str,
    ownership: &Ownership,
    owner: &Owner,
    adopt_existing: bool,
    cross_namespace: bool,
) -> Option<String> {
    let from = match ownership {
        Ownership::Ours | Ownership::Foreign(_) => return None,
        Ownership::Unowned => None,
        Ownership::Released { cluster, namespace } => Some((cluster, namespace)),
    };
    if let Some((cluster, namespace)) = from
        && (cluster != &owner.cluster || namespace != &owner.namespace)
        && !cross_namespace
    {
        // Which namespace is not said: a tenant learns nothing about another's buckets.
        let whom = if cluster == &owner.cluster {
            "another namespace"
        } else {
            "another installation"
        };
        return Some(format!(
            "bucket {bucket} was retained by {whom}; only it may adopt the bucket"
        ));
    }
    (!adopt_existing).then(|| {
        format!(
            "bucket {bucket} already exists in this account without an owner; set spec.adoptExisting: true to manage it"
        )
    })
}

pub async fn reconcile(bucket: Arc<Bucket>, ctx: Arc<Context>) -> Result<Requeue, Error> {
    if bucket.metadata.deletion_timestamp.is_some() {
        return cleanup(&bucket, &ctx).await;
    }
    let key = object_key(bucket.as_ref());
    let start = bucket.resource_version().unwrap_or_default();
    // The Buckets it logs into or that log into it are inputs too.
    let links = logging::links_in(&bucket, &ctx);
    let linked = links.fingerprint();
    if let Some(wait) = ctx
        .settled
        .remaining(&key, &[start.clone(), linked.clone()])
    {
        return Ok(Requeue::Resync(wait));
    }
    apply(&bucket, &ctx, start, &links).await
}

/// Reads whether the bucket at `at` is still this Bucket's, and wakes the accesses granted on
/// that name if it is not. A failed read is left to the next pass.
async fn confirm_held(ctx: &Context, at: &Address, owner: &Owner) {
    let within = tag_reads::for_bucket(ctx.settings.resync_period);
    match ctx.bucket_tags(&at.region, &at.name, within).await {
        Ok(Some(tags)) if owner.judge(&tags) == Ownership::Ours => {}
        Ok(_) => ctx.grants.wake(&at.name),
        Err(e) => tracing::debug!(error = %e, bucket = %at.name, "ownership not confirmed"),
    }
}

/// Reads what the plan needs: tags first (existence and ownership), then each managed aspect.
async fn observe(
    ctx: &Context,
    d: &Desired,
    owner: &Owner,
    adopt: bool,
) -> Result<Observed, crate::aws::Error> {
    let aws = &ctx.aws;
    let within = tag_reads::for_bucket(ctx.settings.resync_period);
    let mut read = ctx.bucket_tags(&d.region, &d.name, within).await?;
    // A recent read (perhaps another object's) may find the bucket ours, but never refuse it: a
    // name can change hands within seconds.
    if read
        .as_ref()
        .is_some_and(|t| owner.judge(t) != Ownership::Ours)
    {
        read = ctx.bucket_tags(&d.region, &d.name, Duration::ZERO).await?;
    }
    let Some(tags) = read else {
        return Ok(Observed::Absent);
    };
    let ownership = owner.judge(&tags);
    if let Ownership::Foreign(who) = ownership {
        return Ok(Observed::Foreign(who));
    }
    let cross = ctx.settings.allow_cross_namespace_adoption;
    if let Some(why) = adoption_refused(&d.name, &ownership, owner, adopt, cross) {
        return Ok(Observed::NotAdoptable(why));
    }
    let (r, n) = (&d.region, &d.name);
    // The policy is always read: its TLS-only statement is a security property worth a request.
    let (public_access_block, encryption, policy) = tokio::try_join!(
        aws.public_access_block(r, n),
        aws.encryption(r, n),
        aws.bucket_policy(r, n)
    )?;
    let versioning = match d.versioning {
        Some(_) => aws.versioning(r, n).await?,
        None => None,
    };
    let lifecycle_rules = match d.lifecycle_rules {
        Some(_) => Some(aws.lifecycle_rules(r, n).await?),
        None => None,
    };
    let cors = match d.cors {
        Some(_) => Some(aws.cors_rules(r, n).await?),
        None => None,
    };
    let object_ownership = match d.object_ownership {
        Some(_) => aws.object_ownership(r, n).await?,
        None => None,
    };
    let protection = protection::observe(aws, d).await?;
    let notifications = match d.notifications {
        Some(Ok(_)) => Some(aws.notifications(r, n).await?),
        _ => None,
    };
    let logging = match d.logging {
        Some(_) => Some(aws.bucket_logging(r, n).await?),
        None => None,
    };
    Ok(Observed::Present(Box::new(Config {
        tags,
        public_access_block,
        encryption,
        versioning,
        lifecycle_rules,
        cors,
        object_ownership,
        policy,
        object_lock: protection.object_lock,
        intelligent_tiering: protection.intelligent_tiering,
        transfer_acceleration: protection.transfer_acceleration,
        notifications,
        logging,
    })))
}

/// `versions`: the object's resourceVersions this pass has seen or written so far.
async fn apply(
    bucket: &Bucket,
    ctx: &Context,
    start: String,
    links: &logging::Links,
) -> Result<Requeue, Error> {
    let owner = owner(bucket, &ctx.settings.cluster_name);
    let mut d = match desired(bucket, &ctx.settings, &ctx.aws.region, &owner) {
        Ok(d) => d,
        Err(why) => {
            // An invalid spec still names a bucket that grants may reach: if it is gone or held
            // by another, they are withdrawn now, not once the spec is fixed.
            if let Ok(at) = address(bucket, &ctx.settings, &ctx.aws.region, &owner) {
                confirm_held(ctx, &at, &owner).await;
            }
            return blocked(bucket, ctx, None, &why).await;
        }
    };
    match logging::complete(&mut d, bucket, ctx, links).await {
        Ok(None) => {}
        Ok(Some(why)) => return blocked(bucket, ctx, Some(&d.address()), &why).await,
        Err(e) => match refusal(&e) {
            Some(why) => return blocked(bucket, ctx, Some(&d.address()), &why).await,
            None => return Err(e.into()),
        },
    }
    let adopt = bucket.spec.adopt_existing;
    // The finalizer must be in place before anything is created in AWS, not before it is read:
    // both in one round trip.
    let (version, observed) = tokio::join!(
        ensure_finalizer(&ctx.client, bucket),
        observe(ctx, &d, &owner, adopt)
    );
    let mut versions = vec![start, version?];
    let observed = match observed {
        Ok(o) => o,
        Err(e) => match refusal(&e) {
            Some(why) => return blocked(bucket, ctx, Some(&d.address()), &why).await,
            None => return Err(e.into()),
        },
    };
    let changes = match plan(&d, &observed) {
        Plan::Blocked(why) => return blocked(bucket, ctx, Some(&d.address()), &why).await,
        Plan::Apply(changes) => changes,
    };
    // Changes to an object whose spec we already served are drift: someone changed AWS.
    let served = bucket.status.as_ref().is_some_and(|s| {
        served(
            bucket.metadata.generation,
            s.observed_generation,
            &s.conditions,
        )
    });
    let adopting =
        matches!(&observed, Observed::Present(c) if owner.judge(&c.tags) != Ownership::Ours);
    let mut applied = Vec::new();
    for change in &changes {
        if let Err(e) = write(ctx, &d, change).await {
            report(bucket, ctx, &d, &applied, served, adopting).await;
            if e.is("BucketAlreadyOwnedByYou") {
                // Created meanwhile by someone in this account: the next pass judges its tags.
                return Ok(Requeue::After(std::time::Duration::from_secs(1)));
            }
            return match refusal(&e) {
                Some(why) => blocked(bucket, ctx, Some(&d.address()), &why).await,
                None => Err(e.into()),
            };
        }
        applied.push(change.clone());
    }
    if applied.contains(&Change::Create) || adopting {
        // The name may have been another Bucket's, whose grants must not follow it here.
        ctx.grants.wake(&d.name);
    }
    let status = status_for(
        bucket,
        ctx,
        Some(&d.address()),
        true,
        Reason::Available,
        format!("S3 bucket {} is ready", d.name),
    );
    // The event and the status go out together: a new bucket's pass waits for one round trip
    // to the API server, not two.
    let (_, written) = tokio::join!(
        report(bucket, ctx, &d, &applied, served, adopting),
        update_status(&ctx.client, bucket, bucket.status.as_ref(), &status),
    );
    versions.extend(written?);
    let next = ctx.resync_after();
    ctx.settled.record(
        object_key(bucket),
        vec![versions, vec![links.fingerprint()]],
        next,
    );
    Ok(Requeue::Resync(next))
}

/// One event for what a pass changed: created, adopted, updated, or drift corrected (changes
/// to a spec already served were made outside the operator).
async fn report(
    bucket: &Bucket,
    ctx: &Context,
    d: &Desired,
    applied: &[Change],
    served: bool,
    adopting: bool,
) {
    let aspects: Vec<&str> = applied
        .iter()
        .filter(|c| **c != Change::Create)
        .map(Change::aspect)
        .collect();
    let list = aspects.join(", ");
    let (warning, reason, note) = if applied.contains(&Change::Create) {
        let note = format!("Created S3 bucket {} in {} ({list})", d.name, d.region);
        (false, "Created", note)
    } else if aspects.is_empty() {
        return;
    } else if adopting {
        let note = format!("Adopted existing S3 bucket {} ({list})", d.name);
        (false, "Updated", note)
    } else if served {
        for aspect in &aspects {
            METRICS
                .drift_corrections_total
                .with_label_values(&["Bucket", aspect])
                .inc();
        }
        let note = format!(
            "Corrected {list} of S3 bucket {} (changed outside the operator)",
            d.name
        );
        (true, "DriftCorrected", note)
    } else {
        (
            false,
            "Updated",
            format!("Updated {list} of S3 bucket {}", d.name),
        )
    };
    ctx.event(bucket, warning, reason, note).await;
}

async fn write(ctx: &Context, d: &Desired, change: &Change) -> Result<(), crate::aws::Error> {
    let (aws, r, n) = (&ctx.aws, d.region.as_str(), d.name.as_str());
    if matches!(change, Change::Create | Change::Tags) {
        // The shared read no longer says what the bucket carries.
        ctx.tag_reads.forget(r, n);
    }
    match change {
        Change::Create => {
            let lock = d.object_lock.is_some();
            aws.create_bucket(r, n, &d.tags, d.creation_ownership(), lock)
                .await
        }
        Change::Tags => aws.put_tags(r, n, &d.tags).await,
        Change::PublicAccessBlock => {
            aws.put_public_access_block(r, n, &d.public_access_block)
                .await
        }
        Change::Encryption => aws.put_encryption(r, n, &d.encryption).await,
        Change::Versioning(v) => aws.put_versioning(r, n, *v).await,
        Change::LifecycleRules => {
            aws.put_lifecycle_rules(r, n, d.lifecycle_rules.as_deref().unwrap_or_default())
                .await
        }
        Change::Cors => {
            aws.put_cors_rules(r, n, d.cors.as_deref().unwrap_or_default())
                .await
        }
        Change::ObjectOwnership(o) => aws.put_object_ownership(r, n, *o).await,
        Change::Policy => match &d.policy {
            Ok(p) => aws.put_bucket_policy(r, n, p).await,
            // The plan blocks on a refused policy before any write.
            Err(_) => Ok(()),
        },
        Change::ObjectLock => {
            let retention = d.object_lock.as_ref().and_then(|l| l.default_retention);
            aws.put_object_lock(r, n, retention.as_ref()).await
        }
        Change::IntelligentTiering { put, delete } => {
            protection::write_tiering(aws, d, put, delete).await
        }
        Change::TransferAcceleration(v) => aws.put_transfer_acceleration(r, n, *v).await,
        Change::Notifications => match &d.notifications {
            Some(Ok(want)) => aws.put_notifications(r, n, want).await,
            // Unmanaged is never planned; the plan blocks on a refusal before any write.
            _ => Ok(()),
        },
        Change::Logging => {
            let target = d.logging.as_ref().and_then(Option::as_ref);
            aws.put_bucket_logging(r, n, target)
                .await
                .map_err(logging::target_not_granted_yet)
        }
    }
}

fn status_for(
    bucket: &Bucket,
    ctx: &Context,
    d: Option<&Address>,
    ready: bool,
    reason: Reason,
    msg: String,
) -> BucketStatus {
    let previous = bucket.status.clone().unwrap_or_default();
    let generation = bucket.metadata.generation;
    let cond = condition::ready(
        &previous.conditions,
        ready,
        reason,
        msg,
        generation,
        jiff::Timestamp::now(),
    );
    let d_region = d.map(|d| d.region.clone());
    BucketStatus {
        conditions: vec![cond],
        observed_generation: generation,
        // Only a bucket we hold is reported as ours.
        bucket_name: if ready {
            d.map(|d| d.name.clone())
        } else {
            previous.bucket_name.filter(|_| d.is_some())
        },
        arn: d
            .filter(|_| ready)
            .map(|d| naming::bucket_arn(naming::partition(&d.region), &d.name)),
        region: d_region.clone(),
        endpoint: d_region.map(|r| ctx.aws.s3_endpoint(&r)),
    }
}

/// Reports a condition a person must fix and waits: no hot loop, but a periodic re-check in case
/// the cause went away outside Kubernetes (an IAM policy fixed, a conflicting bucket deleted).
async fn blocked(
    bucket: &Bucket,
    ctx: &Context,
    d: Option<&Address>,
    why: &Blocked,
) -> Result<Requeue, Error> {
    let status = status_for(bucket, ctx, d, false, why.reason, why.message.clone());
    report_blocked(ctx, bucket, bucket.status.as_ref(), &status, why).await
}

async fn cleanup(bucket: &Bucket, ctx: &Context) -> Result<Requeue, Error> {
    if !has_finalizer(bucket) {
        return Ok(Requeue::OnChange);
    }
    let owner = owner(bucket, &ctx.settings.cluster_name);
    let policy = deletion_policy(bucket.spec.deletion_policy, &ctx.settings);
    // From spec, UID and the tags in AWS, never from a spec check an edit can make fail. A name
    // outside the prefix was never the operator's to create or adopt.
    if let Ok(at) = address(bucket, &ctx.settings, &ctx.aws.region, &owner) {
        match release_or_delete(bucket, ctx, &at, &owner, policy).await {
            Ok(true) => {}
            // Emptying goes on in the next pass: each pass stays short.
            Ok(false) => return Ok(Requeue::After(std::time::Duration::from_secs(1))),
            // Cleanup fails closed: a refusal keeps the finalizer and says what was refused.
            Err(Error::Aws(e)) if refusal(&e).is_some() => {
                let why = refusal(&e).map(|r| r.message).unwrap_or_default();
                let msg = format!("deleting the Bucket is waiting: {why}");
                return Err(hold(bucket, ctx, &at, msg).await);
            }
            Err(e) => return Err(e),
        }
    }
    remove_finalizer(&ctx.client, bucket).await?;
    Ok(Requeue::OnChange)
}

/// Object versions deleted per pass at most when emptying a bucket (`forceDelete`).
const EMPTY_PAGES_PER_PASS: usize = 10;

/// Releases (Retain) or deletes (Delete) the bucket if this object owns it. `Ok(false)`: a
/// bucket being emptied has more objects left for the next pass.
async fn release_or_delete(
    bucket: &Bucket,
    ctx: &Context,
    at: &Address,
    owner: &Owner,
    policy: DeletionPolicy,
) -> Result<bool, Error> {
    let (aws, r, n) = (&ctx.aws, at.region.as_str(), at.name.as_str());
    // The bucket is released or deleted below: no access may go on from an earlier read, and
    // its entry goes with the Bucket.
    ctx.tag_reads.forget(r, n);
    let tags = match aws.bucket_tags(r, n).await {
        Ok(Some(tags)) => tags,
        Ok(None) => return Ok(true),
        // Only a bucket this account does not have may be taken as gone (another account's
        // answers AccessDenied too); one of ours we may not read keeps the finalizer.
        Err(e) if e.kind == ErrorKind::AccessDenied => {
            return match aws.bucket_in_account(r, n).await? {
                false => Ok(true),
                true => Err(e.into()),
            };
        }
        Err(e) => return Err(e.into()),
    };
    if owner.judge(&tags) != Ownership::Ours {
        ctx.event(
            bucket,
            false,
            "Released",
            format!("S3 bucket {n} is not owned by this object; left untouched"),
        )
        .await;
        return Ok(true);
    }
    match policy {
        DeletionPolicy::Retain => retain(bucket, ctx, owner, &tags, r, n).await,
        DeletionPolicy::Delete => delete(bucket, ctx, at).await,
    }
}

/// Leaves the bucket in S3 without this object's grants and ownership.
async fn retain(
    bucket: &Bucket,
    ctx: &Context,
    owner: &Owner,
    tags: &BTreeMap<String, String>,
    r: &str,
    n: &str,
) -> Result<bool, Error> {
    let aws = &ctx.aws;
    // Grants never outlive ownership: the spec's statements go, the TLS-only one stays.
    // Before the tags, so a failure here still finds the bucket ours on the next pass.
    let arn = naming::bucket_arn(naming::partition(r), n);
    aws.put_bucket_policy(r, n, &policy::bucket_policy(&arn, &[]))
        .await?;
    aws.put_tags(r, n, &released(tags, owner)).await?;
    ctx.event(
        bucket,
        false,
        "Retained",
        format!(
            "S3 bucket {n} retained; ownership tags and bucket policy grants removed (only namespace {} may adopt it again)",
            owner.namespace
        ),
    )
    .await;
    Ok(true)
}

/// Deletes the bucket if it is empty, or empties it first with `forceDelete` (a page at a
/// time: `Ok(false)` until it is empty). Never bypasses object lock retention.
async fn delete(bucket: &Bucket, ctx: &Context, at: &Address) -> Result<bool, Error> {
    let (aws, r, n) = (&ctx.aws, at.region.as_str(), at.name.as_str());
    if bucket.spec.force_delete {
        let emptied = aws.empty_bucket(r, n, EMPTY_PAGES_PER_PASS).await;
        let Emptied { deleted, empty } = match emptied {
            // Retention refused the deletes: report it, keep the bucket and its objects.
            Err(e) if bucket.spec.object_lock.is_some() && e.kind == ErrorKind::AccessDenied => {
                let msg = protection::retention_holds(n, &e);
                return Err(hold(bucket, ctx, at, msg).await);
            }
            other => other?,
        };
        if deleted > 0 {
            ctx.event(
                bucket,
                false,
                "Emptied",
                format!("Deleted {deleted} object versions from {n} (forceDelete)"),
            )
            .await;
        }
        if !empty {
            return Ok(false);
        }
    } else if !aws.bucket_is_empty(r, n).await? {
        let msg = format!(
            "S3 bucket {n} is not empty; empty it or set spec.forceDelete: true to delete it with its objects"
        );
        return Err(hold(bucket, ctx, at, msg).await);
    }
    aws.delete_bucket(r, n).await?;
    ctx.event(bucket, false, "Deleted", format!("Deleted S3 bucket {n}"))
        .await;
    Ok(true)
}

/// Reports why deletion waits (status and event, once) and returns the error that keeps the
/// finalizer and retries with backoff.
async fn hold(bucket: &Bucket, ctx: &Context, at: &Address, msg: String) -> Error {
    let why = Blocked::new(Reason::DeletionBlocked, msg);
    if let Err(e) = blocked(bucket, ctx, Some(at), &why).await {
        return e;
    }
    Error::DeletionBlocked(why.message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{BucketSpec, CorsMethod, PolicyEffect, PolicyPrincipal, PolicyStatement};

    fn settings() -> super::super::Settings {
        super::super::Settings::for_tests()
    }

    fn owner() -> Owner {
        Owner {
            cluster: "c".into(),
            namespace: "ns".into(),
            name: "b".into(),
            uid: "uid-1".into(),
        }
    }

    fn desired_for(spec: BucketSpec) -> Desired {
        let mut b = Bucket::new("b", spec);
        b.metadata.namespace = Some("ns".into());
        b.metadata.uid = Some("uid-1".into());
        let settings = settings();
        desired(&b, &settings, "us-east-1", &owner()).unwrap()
    }

    /// The configuration S3 holds after the plan for `d` was applied.
    fn converged(d: &Desired) -> Config {
        Config {
            tags: d.tags.clone(),
            public_access_block: Some(d.public_access_block),
            encryption: Some(d.encryption.clone()),
            versioning: d.versioning,
            lifecycle_rules: d.lifecycle_rules.clone(),
            cors: d.cors.clone(),
            object_ownership: d.object_ownership,
            policy: d.policy.clone().ok(),
            object_lock: d.object_lock.as_ref().map(|l| LockState {
                enabled: true,
                default_retention: l.default_retention,
            }),
            intelligent_tiering: d.intelligent_tiering.clone(),
            transfer_acceleration: d.transfer_acceleration,
            notifications: match &d.notifications {
                Some(Ok(n)) => Some(crate::aws::s3::notifications::ObservedNotifications {
                    config: n.clone(),
                    lambda_functions: 0,
                }),
                _ => None,
            },
            logging: d.logging.clone(),
        }
    }

    fn rule(id: &str) -> LifecycleRule {
        LifecycleRule {
            id: id.into(),
            prefix: None,
            enabled: true,
            expiration_days: Some(30),
            noncurrent_version_expiration_days: None,
            abort_incomplete_multipart_upload_days: None,
            transitions: vec![],
        }
    }

    #[test]
    fn retained_buckets_go_back_only_to_their_namespace() {
        let o = owner();
        let released_here = Ownership::Released {
            cluster: "c".into(),
            namespace: "ns".into(),
        };
        let released_elsewhere = Ownership::Released {
            cluster: "c".into(),
            namespace: "other".into(),
        };
        let other_cluster = Ownership::Released {
            cluster: "c2".into(),
            namespace: "ns".into(),
        };
        assert_eq!(adoption_refused("b", &released_here, &o, true, false), None);
        let msg = adoption_refused("b", &released_here, &o, false, false).unwrap();
        assert!(msg.contains("adoptExisting"), "{msg}");
        let msg = adoption_refused("b", &released_elsewhere, &o, true, false).unwrap();
        assert!(
            msg.contains("another namespace") && !msg.contains("other;"),
            "{msg}"
        );
        assert!(adoption_refused("b", &other_cluster, &o, true, false).is_some());
        // Only the operator's explicit flag lets another namespace take it.
        assert_eq!(
            adoption_refused("b", &released_elsewhere, &o, true, true),
            None
        );
        assert_eq!(
            adoption_refused("b", &Ownership::Unowned, &o, true, false),
            None
        );
        assert!(adoption_refused("b", &Ownership::Unowned, &o, false, true).is_some());
    }

    #[test]
    fn absent_bucket_is_created_with_defaults() {
        let d = desired_for(BucketSpec::default());
        assert!(d.name.starts_with("s3op-ns-b-"));
        assert_eq!(
            plan(&d, &Observed::Absent),
            Plan::Apply(vec![
                Change::Create,
                Change::PublicAccessBlock,
                Change::Encryption,
                Change::Policy
            ])
        );
    }

    #[test]
    fn absent_bucket_gets_every_managed_aspect() {
        let d = desired_for(BucketSpec {
            versioning: Some(Versioning::Enabled),
            lifecycle_rules: Some(vec![rule("a")]),
            cors: Some(vec![]),
            ..Default::default()
        });
        let Plan::Apply(changes) = plan(&d, &Observed::Absent) else {
            panic!()
        };
        assert!(changes.contains(&Change::Versioning(Versioning::Enabled)));
        assert!(changes.contains(&Change::LifecycleRules));
        assert!(
            !changes.contains(&Change::Cors),
            "an empty CORS list needs no write on a new bucket"
        );
    }

    #[test]
    fn steady_state_plans_nothing() {
        let d = desired_for(BucketSpec {
            versioning: Some(Versioning::Enabled),
            lifecycle_rules: Some(vec![rule("b"), rule("a")]),
            cors: Some(vec![CorsRule {
                allowed_methods: vec![CorsMethod::PUT, CorsMethod::GET],
                allowed_origins: vec!["*".into()],
                allowed_headers: vec![],
                expose_headers: vec![],
                max_age_seconds: None,
            }]),
            tags: BTreeMap::from([("team".into(), "x".into())]),
            ..Default::default()
        });
        let mut c = converged(&d);
        // S3 returns rules in its own order and methods sorted.
        c.lifecycle_rules.as_mut().unwrap().reverse();
        c.cors.as_mut().unwrap()[0].allowed_methods.sort();
        assert_eq!(plan(&d, &Observed::Present(c.into())), Plan::Apply(vec![]));
    }

    #[test]
    fn each_drift_is_planned_alone() {
        let d = desired_for(BucketSpec {
            versioning: Some(Versioning::Enabled),
            lifecycle_rules: Some(vec![rule("a")]),
            cors: Some(vec![]),
            ..Default::default()
        });
        type Mutation = Box<dyn Fn(&mut Config)>;
        let cases: Vec<(Mutation, Change)> = vec![
            (
                Box::new(|c| c.public_access_block.as_mut().unwrap().block_public_policy = false),
                Change::PublicAccessBlock,
            ),
            (
                Box::new(|c| c.public_access_block = None),
                Change::PublicAccessBlock,
            ),
            (Box::new(|c| c.encryption = None), Change::Encryption),
            (
                Box::new(|c| {
                    c.encryption.as_mut().unwrap().algorithm = EncryptionAlgorithm::AwsKms
                }),
                Change::Encryption,
            ),
            (
                Box::new(|c| c.versioning = Some(Versioning::Suspended)),
                Change::Versioning(Versioning::Enabled),
            ),
            (
                Box::new(|c| c.lifecycle_rules = Some(vec![])),
                Change::LifecycleRules,
            ),
            (
                Box::new(|c| c.lifecycle_rules.as_mut().unwrap()[0].expiration_days = Some(1)),
                Change::LifecycleRules,
            ),
            (
                Box::new(|c| {
                    c.cors = Some(vec![CorsRule {
                        allowed_methods: vec![CorsMethod::GET],
                        allowed_origins: vec!["*".into()],
                        allowed_headers: vec![],
                        expose_headers: vec![],
                        max_age_seconds: None,
                    }])
                }),
                Change::Cors,
            ),
            (
                Box::new(|c| {
                    c.tags.insert("extra".into(), "1".into());
                }),
                Change::Tags,
            ),
            (
                Box::new(|c| {
                    c.tags.remove(crate::aws::tags::NAME);
                }),
                Change::Tags,
            ),
        ];
        for (mutate, want) in cases {
            let mut c = converged(&d);
            mutate(&mut c);
            assert_eq!(
                plan(&d, &Observed::Present(c.into())),
                Plan::Apply(vec![want])
            );
        }
    }

    #[test]
    fn new_buckets_disable_acls_by_default_in_the_create_call() {
        let d = desired_for(BucketSpec::default());
        assert_eq!(d.object_ownership, None, "omitted: unmanaged once created");
        assert_eq!(d.creation_ownership(), ObjectOwnership::BucketOwnerEnforced);
        // No write of its own: CreateBucket carries it.
        let Plan::Apply(changes) = plan(&d, &Observed::Absent) else {
            panic!()
        };
        assert!(
            !changes
                .iter()
                .any(|c| matches!(c, Change::ObjectOwnership(_)))
        );
    }

    #[test]
    fn explicit_object_ownership_is_created_kept_and_corrected() {
        let d = desired_for(BucketSpec {
            object_ownership: Some(ObjectOwnership::ObjectWriter),
            ..Default::default()
        });
        assert_eq!(d.creation_ownership(), ObjectOwnership::ObjectWriter);
        let c = converged(&d);
        assert_eq!(plan(&d, &Observed::Present(c.into())), Plan::Apply(vec![]));
        for drifted in [None, Some(ObjectOwnership::BucketOwnerEnforced)] {
            let mut c = converged(&d);
            c.object_ownership = drifted;
            assert_eq!(
                plan(&d, &Observed::Present(c.into())),
                Plan::Apply(vec![Change::ObjectOwnership(ObjectOwnership::ObjectWriter)]),
                "{drifted:?}"
            );
        }
        assert_eq!(
            Change::ObjectOwnership(ObjectOwnership::ObjectWriter).aspect(),
            "objectOwnership"
        );
    }

    #[test]
    fn unmanaged_object_ownership_of_an_existing_bucket_is_left_alone() {
        let d = desired_for(BucketSpec::default());
        let mut c = converged(&d);
        c.object_ownership = Some(ObjectOwnership::ObjectWriter);
        assert_eq!(plan(&d, &Observed::Present(c.into())), Plan::Apply(vec![]));
    }

    #[test]
    fn the_tls_only_policy_is_kept_and_compared_semantically() {
        let d = desired_for(BucketSpec::default());
        let want = d.policy.clone().unwrap();
        let tls = &want["Statement"][0];
        assert_eq!(tls["Sid"], policy::TLS_ONLY_SID);
        assert_eq!(
            tls["Resource"][0],
            format!("arn:aws:s3:::{}", d.name),
            "this bucket only"
        );
        // S3's own formatting of the same document is no drift.
        let mut reformatted = want.clone();
        reformatted["Statement"][0]["Principal"] = serde_json::json!({"AWS": "*"});
        reformatted["Statement"][0]["Action"] = serde_json::json!(["s3:*"]);
        let mut c = converged(&d);
        c.policy = Some(reformatted);
        assert_eq!(plan(&d, &Observed::Present(c.into())), Plan::Apply(vec![]));
        // A policy deleted, the TLS statement dropped or weakened, or a statement added: rewritten.
        let mut weakened = want.clone();
        weakened["Statement"][0]["Condition"]["Bool"]["aws:SecureTransport"] =
            serde_json::json!("true");
        let mut added = want.clone();
        added["Statement"].as_array_mut().unwrap().push(
            serde_json::json!({"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject"}),
        );
        for drifted in [
            None,
            Some(serde_json::json!({"Version": "2012-10-17", "Statement": []})),
            Some(weakened),
            Some(added),
            Some(serde_json::Value::Null),
        ] {
            let mut c = converged(&d);
            c.policy = drifted.clone();
            assert_eq!(
                plan(&d, &Observed::Present(c.into())),
                Plan::Apply(vec![Change::Policy]),
                "{drifted:?}"
            );
        }
    }

    fn statement(effect: PolicyEffect, aws: &[&str], resource: &str) -> PolicyStatement {
        PolicyStatement {
            sid: Some("Team".into()),
            effect,
            principal: PolicyPrincipal {
                aws: aws.iter().map(|p| p.to_string()).collect(),
                service: vec![],
            },
            action: vec!["s3:GetObject".into()],
            resource: vec![resource.into()],
            condition: BTreeMap::new(),
        }
    }

    fn desired_with(statements: Vec<PolicyStatement>, allowed: &[&str], bucket: &str) -> Desired {
        let mut b = Bucket::new(
            "b",
            BucketSpec {
                bucket_name: Some(bucket.into()),
                policy: statements,
                ..Default::default()
            },
        );
        b.metadata.namespace = Some("ns".into());
        b.metadata.uid = Some("uid-1".into());
        let mut settings = settings();
        settings.allowed_policy_principals = allowed.iter().map(|p| p.to_string()).collect();
        desired(&b, &settings, "us-east-1", &owner()).unwrap()
    }

    #[test]
    fn policy_statements_follow_the_tls_statement_which_is_always_kept() {
        let objects = "arn:aws:s3:::s3op-b/*";
        let own = statement(
            PolicyEffect::Allow,
            &["arn:aws:iam::123456789012:role/app"],
            objects,
        );
        let d = desired_with(vec![own], &[], "s3op-b");
        let doc = d.policy.clone().unwrap();
        let all = doc["Statement"].as_array().unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all[0]["Sid"], policy::TLS_ONLY_SID);
        assert_eq!(
            all[1]["Principal"]["AWS"][0],
            "arn:aws:iam::123456789012:role/app"
        );
        assert_eq!(all[1]["Resource"][0], objects);
        let c = converged(&d);
        assert_eq!(plan(&d, &Observed::Present(c.into())), Plan::Apply(vec![]));
        // A policy holding only the user's statement (the TLS one removed) is rewritten.
        let mut c = converged(&d);
        c.policy.as_mut().unwrap()["Statement"]
            .as_array_mut()
            .unwrap()
            .remove(0);
        assert_eq!(
            plan(&d, &Observed::Present(c.into())),
            Plan::Apply(vec![Change::Policy])
        );
        // And a new bucket gets it in its first pass.
        let Plan::Apply(changes) = plan(&d, &Observed::Absent) else {
            panic!()
        };
        assert!(changes.contains(&Change::Policy));
    }

    #[test]
    fn a_refused_policy_blocks_a_new_or_an_existing_bucket() {
        let public = statement(PolicyEffect::Allow, &["*"], "arn:aws:s3:::s3op-b");
        let d = desired_with(vec![public], &[], "s3op-b");
        for observed in [
            Observed::Absent,
            Observed::Present(Config::default().into()),
        ] {
            match plan(&d, &observed) {
                Plan::Blocked(Blocked {
                    reason: Reason::InvalidSpec,
                    message,
                }) => assert!(message.contains("spec.policy[0].principal"), "{message}"),
                other => panic!("not refused: {other:?}"),
            }
        }
    }

    #[test]
    fn unmanaged_aspects_are_never_planned() {
        let d = desired_for(BucketSpec::default());
        let mut c = converged(&d);
        c.versioning = Some(Versioning::Enabled);
        assert_eq!(plan(&d, &Observed::Present(c.into())), Plan::Apply(vec![]));
    }

    #[test]
    fn suspended_is_satisfied_by_a_never_versioned_bucket() {
        let d = desired_for(BucketSpec {
            versioning: Some(Versioning::Suspended),
            ..Default::default()
        });
        let mut c = converged(&d);
        c.versioning = None;
        assert_eq!(plan(&d, &Observed::Present(c.into())), Plan::Apply(vec![]));
    }

    #[test]
    fn kms_bucket_key_defaults_to_false() {
        let enc = Encryption {
            algorithm: EncryptionAlgorithm::AwsKms,
            kms_key_id: Some("k".into()),
            bucket_key_enabled: None,
        };
        let d = desired_for(BucketSpec {
            encryption: enc.clone(),
            ..Default::default()
        });
        let mut c = converged(&d);
        c.encryption = Some(Encryption {
            bucket_key_enabled: Some(false),
            ..enc
        });
        assert_eq!(plan(&d, &Observed::Present(c.into())), Plan::Apply(vec![]));
    }

    #[test]
    fn foreign_and_unowned_buckets_are_never_touched() {
        let d = desired_for(BucketSpec::default());
        assert!(
            matches!(plan(&d, &Observed::Foreign("held by another installation".into())), Plan::Blocked(Blocked { reason: Reason::NameConflict, message: m }) if m.contains("held by another installation"))
        );
        assert!(
            matches!(plan(&d, &Observed::NotAdoptable("set spec.adoptExisting".into())), Plan::Blocked(Blocked { reason: Reason::NameConflict, message: m }) if m.contains("adoptExisting"))
        );
    }

    #[test]
    fn adoption_writes_ownership_tags_and_keeps_user_tags_desired() {
        let d = desired_for(BucketSpec {
            tags: BTreeMap::from([("team".into(), "x".into())]),
            ..Default::default()
        });
        let mut c = converged(&d);
        c.tags = BTreeMap::from([("team".into(), "x".into())]);
        assert_eq!(
            plan(&d, &Observed::Present(c.into())),
            Plan::Apply(vec![Change::Tags])
        );
        assert_eq!(
            d.tags.get(crate::aws::tags::UID).map(String::as_str),
            Some("uid-1")
        );
    }

    #[test]
    fn names_outside_the_prefix_are_refused_with_the_rule() {
        let mut b = Bucket::new(
            "b",
            BucketSpec {
                bucket_name: Some("other-bucket".into()),
                ..Default::default()
            },
        );
        b.metadata.namespace = Some("ns".into());
        let settings = settings();
        let err = desired(&b, &settings, "us-east-1", &owner()).unwrap_err();
        assert!(
            err.message.contains("spec.bucketName") && err.message.contains("s3op-"),
            "{err}"
        );
    }

    #[test]
    fn status_never_redirects_the_bucket() {
        let mut b = Bucket::new("b", BucketSpec::default());
        b.metadata.namespace = Some("ns".into());
        b.metadata.uid = Some("uid-1".into());
        let settings = settings();
        let generated = desired(&b, &settings, "us-east-1", &owner()).unwrap().name;
        b.status = Some(BucketStatus {
            bucket_name: Some("s3op-someone-elses-bucket".into()),
            ..Default::default()
        });
        assert_eq!(
            desired(&b, &settings, "us-east-1", &owner()).unwrap().name,
            generated
        );
    }

    fn with_notifications(n: crate::api::Notifications, allowed: &[&str]) -> Desired {
        let mut b = Bucket::new(
            "b",
            BucketSpec {
                notifications: Some(n),
                ..Default::default()
            },
        );
        b.metadata.namespace = Some("ns".into());
        b.metadata.uid = Some("uid-1".into());
        let mut settings = settings();
        settings.allowed_notification_targets = allowed.iter().map(|p| p.to_string()).collect();
        desired(&b, &settings, "us-east-1", &owner()).unwrap()
    }

    #[test]
    fn notifications_are_written_kept_and_unmanaged_when_omitted() {
        let queue = "arn:aws:sqs:us-east-1:123456789012:q";
        let n = crate::api::Notifications {
            event_bridge: true,
            queues: vec![crate::api::NotificationTarget {
                id: None,
                arn: queue.into(),
                events: vec!["s3:ObjectCreated:*".into()],
                filter: None,
            }],
            topics: vec![],
        };
        let d = with_notifications(n.clone(), &[queue]);
        let Plan::Apply(changes) = plan(&d, &Observed::Absent) else {
            panic!()
        };
        assert_eq!(changes.last(), Some(&Change::Notifications));
        assert_eq!(
            plan(&d, &Observed::Present(converged(&d).into())),
            Plan::Apply(vec![])
        );
        let mut c = converged(&d);
        c.notifications.as_mut().unwrap().config.event_bridge = false;
        assert_eq!(
            plan(&d, &Observed::Present(c.into())),
            Plan::Apply(vec![Change::Notifications])
        );
        assert_eq!(Change::Notifications.aspect(), "notifications");
        // `{}` on a new bucket needs no write; on one with notifications it removes them.
        let none = with_notifications(Default::default(), &[]);
        let Plan::Apply(changes) = plan(&none, &Observed::Absent) else {
            panic!()
        };
        assert!(!changes.contains(&Change::Notifications));
        let mut c = converged(&none);
        c.notifications = converged(&d).notifications;
        assert_eq!(
            plan(&none, &Observed::Present(c.into())),
            Plan::Apply(vec![Change::Notifications])
        );
        // Omitted: whatever S3 holds is left alone.
        let omitted = desired_for(BucketSpec::default());
        assert_eq!(omitted.notifications, None);
        let mut c = converged(&omitted);
        c.notifications = converged(&d).notifications;
        assert_eq!(
            plan(&omitted, &Observed::Present(c.into())),
            Plan::Apply(vec![])
        );
        // Not allow-listed: refused before anything is created or changed.
        let refused = with_notifications(n, &[]);
        for observed in [Observed::Absent, Observed::Present(converged(&d).into())] {
            match plan(&refused, &observed) {
                Plan::Blocked(Blocked {
                    reason: Reason::InvalidSpec,
                    message,
                }) => assert!(
                    message.contains("spec.notifications.queues[0].arn"),
                    "{message}"
                ),
                other => panic!("not refused: {other:?}"),
            }
        }
    }
}
