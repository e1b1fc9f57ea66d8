//! The writes of a Bucket pass: the spec resolved and checked, S3 observed and planned, each
//! planned write made, and the outcome reported (status and one event).

use crate::reconcile::InAccount;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::observe::{self, confirm_held, observe};
use super::{
    Address, Change, Desired, Found, Plan, address, desired, in_sync, logging, plan, protection,
    refusal, replication, security,
};
use crate::api::condition::{self, IN_SYNC, Reason};
use crate::api::{AcceptedDeletion, Bucket, BucketClass, BucketStatus, DeletionPolicy, Management};
use crate::aws::naming;
use crate::aws::tags::{Owner, Ownership};
use crate::reconcile::{
    Blocked, Error, Requeue, accounts, class, ensure_finalizer, object_key, owner, report_blocked,
    served, slot, tag_reads, update_status,
};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

/// One pass over a Bucket that is not being deleted. `start`: the object's resourceVersion the
/// pass began from; `class`: the class in force as the pass resolved it, with its version.
/// A new Bucket's placement (region, account) is recorded first, and the pass goes on from the
/// object that write returned: a second pass would wait out its echo's spacing.
pub(super) async fn apply(
    bucket: &Bucket,
    ctx: &InAccount<'_>,
    start: String,
    links: &logging::Links,
    (class, class_version): (class::bucket::InForce, String),
    placed: accounts::Placement,
) -> Result<Requeue, Error> {
    let owner = owner(bucket, &ctx.settings.cluster_name);
    let under = under_class(bucket, ctx, &owner, class.clone());
    let to_record = match (&under.1, &placed.violation) {
        (Ok(c), None) if c.region.is_some() || placed.to_record => c.region.clone(),
        _ => {
            return pass(
                bucket,
                ctx,
                vec![start],
                links,
                (under, class_version),
                placed,
            )
            .await;
        }
    };
    let account = placed.to_record.then(|| ctx.account.record()).flatten();
    let recorded = record_placement(bucket, ctx, to_record.as_deref(), account).await?;
    let placed = accounts::Placement {
        to_record: false,
        ..placed
    };
    // What the class makes of the Bucket as recorded (its region now in status).
    let under = under_class(&recorded, ctx, &owner, class);
    let started = vec![start, recorded.resource_version().unwrap_or_default()];
    pass(
        &recorded,
        ctx,
        started,
        links,
        (under, class_version),
        placed,
    )
    .await
}

/// [`apply`] once the placement is recorded. `started`: the object's versions this invocation
/// began from, the current one last; `under`: the Bucket as its class makes it.
async fn pass(
    bucket: &Bucket,
    ctx: &InAccount<'_>,
    started: Vec<String>,
    links: &logging::Links,
    ((in_force, classed), class_version): (UnderClass, String),
    placed: accounts::Placement,
) -> Result<Requeue, Error> {
    let owner = owner(bucket, &ctx.settings.cluster_name);
    let (settings, region) = (&ctx.settings, ctx.aws.region.as_str());
    // A class violation changes nothing in AWS but the withdrawal of what the flags or the
    // class no longer allow (`refused`).
    let class_name = in_force.as_ref().map(|c| c.name_any());
    let named = class_name.as_deref();
    let refusing = Refusing {
        bucket,
        owner: &owner,
        class: in_force.as_deref(),
    };
    let classed = match (classed, placed.violation) {
        (Ok(c), None) => c,
        (_, Some(why)) => {
            let at = address(bucket, settings, region, &owner).ok();
            return refused(ctx, &refusing, at.as_ref(), &why).await;
        }
        (Err(why), None) => {
            let at = address(bucket, settings, region, &owner).ok();
            return refused(ctx, &refusing, at.as_ref(), &why).await;
        }
    };
    let mut d = match desired(&classed.bucket, settings, region, &owner) {
        Ok(d) => d,
        Err(why) => {
            // An invalid spec still names a bucket that grants may reach: if it is gone or held
            // by another, they are withdrawn now, not once the spec is fixed.
            if let Ok(at) = address(bucket, settings, region, &owner) {
                confirm_held(ctx, &at, &owner).await;
            }
            return refused(ctx, &refusing, None, &why).await;
        }
    };
    let at = d.address();
    if let Some(why) = logging::complete(&mut d, bucket, settings, region, links) {
        return refused(ctx, &refusing, Some(&at), &why).await;
    }
    let class_rules = in_force.as_deref().map(|c| replication::ClassRules {
        name: c.name_any(),
        constraints: &c.spec.constraints,
    });
    let wanted = replication::complete(
        &mut d,
        &classed.bucket,
        settings,
        region,
        &links.destinations,
        class_rules.as_ref(),
    );
    if let Err(r) = wanted {
        return replication_refused(ctx, &refusing, &at, r).await;
    }
    match observe::log_target(ctx, &d, links).await {
        Ok(None) => {}
        Ok(Some(why)) => return refused(ctx, &refusing, Some(&at), &why).await,
        Err(e) => return failed(bucket, ctx, named, &at, e).await,
    }
    match observe::replica_targets(ctx, &d).await {
        Ok(None) => {}
        Ok(Some(r)) => return replication_refused(ctx, &refusing, &at, r).await,
        Err(e) => return failed(bucket, ctx, named, &at, e).await,
    }
    // The finalizer must be in place before anything is created in AWS, not before it is read:
    // both in one round trip. An observed bucket is never created, so needs none.
    let adopt = bucket.spec.adopt_existing;
    let observing = classed.bucket.spec.management == Some(Management::Observe);
    let start = started.last().cloned().unwrap_or_default();
    let (version, observed) = if observing {
        (Ok(start), observe(ctx, &d, &owner, adopt).await)
    } else {
        tokio::join!(
            ensure_finalizer(ctx, bucket),
            observe(ctx, &d, &owner, adopt)
        )
    };
    let mut versions = started;
    versions.push(version?);
    let observed = match observed {
        Ok(o) => o,
        Err(e) => return failed(bucket, ctx, named, &at, e).await,
    };
    let changes = match plan(&d, &observed) {
        // Only a bucket this Bucket holds has anything to withdraw; one that is absent or
        // another's (NameConflict) is not read again.
        Plan::Blocked(why) if matches!(&observed, Found::Present(c) if owner.judge(&c.tags) == Ownership::Ours) =>
        {
            return refused(ctx, &refusing, Some(&at), &why).await;
        }
        Plan::Blocked(why) => return blocked(bucket, ctx, named, Some(&at), &why).await,
        Plan::Apply(changes) => changes,
    };
    if observing {
        let ours =
            matches!(&observed, Found::Present(c) if owner.judge(&c.tags) == Ownership::Ours);
        if ours {
            // Observing never keeps what the flags or the class no longer allow on a bucket
            // the operator holds: switching to Observe is no way around a withdrawal.
            let because = "which its Bucket observes (spec.management Observe)";
            if let Err(e) = security_only(ctx, &refusing, &at, because).await {
                return failed(bucket, ctx, named, &at, e).await;
            }
        }
        let inputs = vec![versions, vec![links.fingerprint()], vec![class_version]];
        let seen = Seen {
            found: &observed,
            changes: &changes,
            class: named,
        };
        return report_observed(bucket, ctx, &d, seen, inputs).await;
    }
    let pass = Pass {
        found: &observed,
        adopting: matches!(&observed, Found::Present(c) if owner.judge(&c.tags) != Ownership::Ours),
        deletion: accepted_deletion(&classed.bucket, settings),
        enforced: classed.enforced,
        // What a class edit brings is an update, not drift (the generation does not move).
        class_changed: ctx.settled.saw(&object_key(bucket), 2, &class_version) == Some(false),
        class: class_name.clone(),
    };
    let inputs = vec![versions, vec![links.fingerprint()], vec![class_version]];
    converge(bucket, ctx, &d, &changes, pass, inputs).await
}

/// `bucket` as its class makes it, and what else the class asks of this pass.
struct Classed {
    bucket: Bucket,
    /// The region the class gives this new Bucket, still to be recorded.
    region: Option<String>,
    /// What the class's security constraints removed from the spec, said for an event.
    enforced: Option<String>,
}

/// What a pass's report needs to know besides its writes.
struct Pass<'a> {
    /// The bucket as the pass found it.
    found: &'a Found,
    /// The bucket is being taken over.
    adopting: bool,
    /// What the class removed (said in an event once that reaches AWS).
    enforced: Option<String>,
    /// The class in force changed since this process's last pass of the Bucket.
    class_changed: bool,
    /// The deletion rules this pass accepts, recorded with its Ready status.
    deletion: AcceptedDeletion,
    /// The name of the class the pass applied, reported in status.
    class: Option<String>,
}

/// The deletion rules of `classed` (the spec under its class, which accepted it), as cleanup
/// will follow them.
fn accepted_deletion(classed: &Bucket, settings: &crate::reconcile::Settings) -> AcceptedDeletion {
    AcceptedDeletion {
        policy: crate::reconcile::deletion_policy(classed.spec.deletion_policy, settings),
        force_delete: classed.spec.force_delete,
    }
}

/// What a refused pass needs to withdraw what is no longer allowed.
struct Refusing<'a> {
    bucket: &'a Bucket,
    owner: &'a Owner,
    /// The class in force, if it could be resolved (else the flags alone decide).
    class: Option<&'a BucketClass>,
}

/// Reports `why` (a violation or an invalid spec: nothing else changes in AWS), after
/// withdrawing from the bucket what its Bucket may no longer grant (see `security`). `at`:
/// the bucket the status reports, if any (the withdrawal finds it from the spec and UID alone
/// otherwise).
async fn refused(
    ctx: &InAccount<'_>,
    r: &Refusing<'_>,
    at: Option<&Address>,
    why: &Blocked,
) -> Result<Requeue, Error> {
    let (settings, region) = (&ctx.settings, ctx.aws.region.as_str());
    let found = at
        .cloned()
        .or_else(|| address(r.bucket, settings, region, r.owner).ok());
    let because = format!("whose Bucket is not Ready ({})", why.reason.as_str());
    let withdrawn = match &found {
        Some(a) => security_only(ctx, r, a, &because).await,
        None => Ok(()),
    };
    let name = r.class.map(ResourceExt::name_any);
    let reported = blocked(r.bucket, ctx, name.as_deref(), at, why).await;
    match withdrawn {
        // Retried with backoff: what is no longer allowed must not wait for the resync.
        Err(e) if refusal(&e).is_none() => Err(e.into()),
        Err(e) => {
            tracing::warn!(error = %e, "could not withdraw what the Bucket may no longer grant");
            reported
        }
        Ok(()) => reported,
    }
}

/// Reports why replication cannot be served, after withdrawing the replication role's grant
/// when it may not stand (see [`replication::Refusal`]).
async fn replication_refused(
    ctx: &InAccount<'_>,
    r: &Refusing<'_>,
    at: &Address,
    refusal_: replication::Refusal,
) -> Result<Requeue, Error> {
    if refusal_.withdraw {
        match replication::withdraw(ctx, r.owner).await {
            Ok(true) => {
                let role = replication::role_name(r.owner);
                let note = format!(
                    "Removed the replication grant of IAM role {role}: {}",
                    refusal_.why.message
                );
                ctx.event(r.bucket, true, "ReplicationWithdrawn", note)
                    .await;
            }
            Ok(false) => {}
            // Retried with backoff: a grant that may not stand must not wait for the resync.
            Err(e) if refusal(&e).is_none() => return Err(e.into()),
            Err(e) => tracing::warn!(error = %e, "could not withdraw the replication grant"),
        }
    }
    refused(ctx, r, Some(at), &refusal_.why).await
}

/// The security-only pass of a refused Bucket: reads its bucket's policy (and notifications,
/// when the spec manages them), and writes them back without what the flags or the class no
/// longer allow, on a bucket this Bucket holds (confirmed afresh before writing). Steady
/// state: the shared tag read and one policy read, no write.
async fn security_only(
    ctx: &InAccount<'_>,
    r: &Refusing<'_>,
    at: &Address,
    because: &str,
) -> Result<(), crate::aws::Error> {
    let (aws, region, name) = (&ctx.aws, at.region.as_str(), at.name.as_str());
    let within = tag_reads::for_bucket(ctx.settings.resync_period);
    let ours = |tags: Option<BTreeMap<String, String>>| {
        tags.is_some_and(|t| r.owner.judge(&t) == Ownership::Ours)
    };
    if !ours(ctx.bucket_tags(region, name, within).await?) {
        return Ok(());
    }
    let policy = aws.bucket_policy(region, name).await?;
    let notifications = match r.bucket.spec.notifications {
        Some(_) => Some(aws.notifications(region, name).await?.config),
        None => None,
    };
    let s = &ctx.settings;
    let constraints = r.class.map(|c| (c.name_any(), &c.spec.constraints));
    let allowed = security::Allowed {
        account: &s.account_id,
        principals: &s.allowed_policy_principals,
        targets: &s.allowed_notification_targets,
        class: constraints.as_ref().map(|(name, c)| security::ClassLists {
            name: name.clone(),
            principals: c.allowed_policy_principals.as_deref(),
            targets: c.allowed_notification_targets.as_deref(),
        }),
    };
    let w = security::withdrawal(policy.as_ref(), notifications.as_ref(), &allowed);
    if w.removed.is_empty() || !ours(ctx.bucket_tags(region, name, Duration::ZERO).await?) {
        return Ok(());
    }
    if let Some(p) = &w.policy {
        aws.put_bucket_policy(region, name, p).await?;
    }
    if let Some(n) = &w.notifications {
        aws.put_notifications(region, name, n).await?;
    }
    let note = format!(
        "Removed from S3 bucket {name}, {because}: {}",
        w.removed.join("; ")
    );
    ctx.event(r.bucket, true, "SecurityEnforced", note).await;
    Ok(())
}

/// The class in force, if one could be resolved, and the Bucket under it or its violation.
type UnderClass = (Option<Arc<BucketClass>>, Result<Classed, Blocked>);

/// `bucket` as its class makes it: the class's defaults, then the operator's, filled in and
/// the constraints checked (what the security constraints remove is gone from the result).
/// Returned with the class in force, if one could be resolved; `Err`: the violation to report.
fn under_class(
    bucket: &Bucket,
    ctx: &InAccount<'_>,
    owner: &Owner,
    class: class::bucket::InForce,
) -> UnderClass {
    let class = match class {
        Ok(c) => c,
        Err(why) => return (None, Err(why)),
    };
    let mut classed = bucket.clone();
    let defaults = class.as_ref().map(|c| &c.spec.defaults);
    classed.spec = class::bucket::with_defaults(&bucket.spec, defaults);
    let done = |class, bucket, region, enforced| {
        (
            class,
            Ok(Classed {
                bucket,
                region,
                enforced,
            }),
        )
    };
    let Some(class) = class else {
        return done(None, classed, None, None);
    };
    let (settings, region) = (&ctx.settings, ctx.aws.region.as_str());
    let class_region = class::bucket::creation_region(bucket, &class, region);
    if let Some(r) = &class_region {
        classed.status.get_or_insert_default().region = Some(r.clone());
    }
    let Ok(at) = address(&classed, settings, region, owner) else {
        // Refused on its own by `desired`, with its own message.
        return done(Some(class), classed, None, None);
    };
    match class::bucket::enforce(&mut classed.spec, &class, &at.region, settings) {
        Err(why) => (Some(class), Err(why)),
        Ok(removed) => {
            let note = (!removed.is_empty()).then(|| {
                let name = class.name_any();
                let what = removed.join("; ");
                format!("BucketClass {name} does not allow {what}: removed from the bucket")
            });
            done(Some(class), classed, class_region, note)
        }
    }
}

/// Records the region and the account the class gives a new Bucket before anything is created
/// for it, in status (which tenants cannot write); returns the Bucket as written.
async fn record_placement(
    bucket: &Bucket,
    ctx: &InAccount<'_>,
    region: Option<&str>,
    account: Option<crate::api::AccountRecord>,
) -> Result<Bucket, Error> {
    let ns = bucket.namespace().ok_or(Error::NoNamespace)?;
    let api = Api::<Bucket>::namespaced(ctx.client.clone(), &ns);
    let mut status = json!({});
    if let Some(region) = region {
        status["region"] = json!(region);
    }
    if let Some(account) = account {
        status["account"] = json!(account);
    }
    let patch = json!({
        "metadata": {"resourceVersion": bucket.resource_version()},
        "status": status,
    });
    let (name, params, patch) = (
        bucket.name_any(),
        PatchParams::default(),
        Patch::Merge(patch),
    );
    let write = api.patch_status(&name, &params, &patch);
    Ok(ctx
        .metrics
        .kube_write("Bucket", "patch_status", write)
        .await?)
}

/// Makes the planned writes, then reports the bucket Ready and settles the pass until its
/// inputs change. `inputs`: the versions of each input this pass has seen or written so far,
/// the object's resourceVersions first.
async fn converge(
    bucket: &Bucket,
    ctx: &InAccount<'_>,
    d: &Desired,
    changes: &[Change],
    pass: Pass<'_>,
    mut inputs: Vec<Vec<String>>,
) -> Result<Requeue, Error> {
    let adopting = pass.adopting;
    // Changes to an object whose spec we already served are drift: someone changed AWS.
    let served = !pass.class_changed
        && bucket.status.as_ref().is_some_and(|s| {
            served(
                bucket.metadata.generation,
                s.observed_generation,
                &s.conditions,
            )
        });
    let mut applied = Vec::new();
    let o = owner(bucket, &ctx.settings.cluster_name);
    for change in changes {
        if let Err(e) = write(ctx, d, &o, change).await {
            report(bucket, ctx, d, &applied, served, adopting).await;
            if e.is("BucketAlreadyOwnedByYou") {
                // Created meanwhile by someone in this account: the next pass judges its tags.
                return Ok(Requeue::After(Duration::from_secs(1)));
            }
            let Some(why) = refusal(&e) else {
                return Err(e.into());
            };
            // What is left, against the bucket as found (or as just created, bare).
            let created = Found::Present(Box::default());
            let from = if applied.contains(&Change::Create) {
                &created
            } else {
                pass.found
            };
            let left = in_sync::differences(d, from, &changes[applied.len()..]);
            let why = why.with_pending(format!("S3 bucket {}", d.name), left);
            return blocked(bucket, ctx, pass.class.as_deref(), Some(&d.address()), &why).await;
        }
        applied.push(change.clone());
    }
    if applied.contains(&Change::Create) || adopting {
        // The name may have been another Bucket's, whose grants must not follow it here.
        ctx.grants.wake(&d.name);
    }
    // AWS is done: what is left reports it.
    slot::release();
    let msg = format!("S3 bucket {} is ready", d.name);
    let mut status = status_for(
        bucket,
        ctx,
        pass.class.as_deref(),
        Some(&d.address()),
        true,
        Reason::Available,
        msg,
    );
    // Written with the status the pass writes anyway, so it costs no write once recorded.
    status.deletion = Some(pass.deletion);
    status.replication_role = match &d.replication {
        Some(Some(w)) => Some(w.role_arn.clone()),
        Some(None) => None,
        None => status.replication_role,
    };
    status.conditions.push(in_sync_now(bucket, &d.name));
    // The event and the status go out together: a new bucket's pass waits for one round trip
    // to the API server, not two.
    let (_, _, written) = tokio::join!(
        report(bucket, ctx, d, &applied, served, adopting),
        report_enforced(bucket, ctx, pass.enforced, &applied),
        update_status(ctx, bucket, bucket.status.as_ref(), &status),
    );
    inputs[0].extend(written?);
    let next = ctx.resync_after();
    ctx.settled.record(object_key(bucket), inputs, next);
    Ok(Requeue::Resync(next))
}

/// What an Observe pass saw.
struct Seen<'a> {
    found: &'a Found,
    /// The writes a Manage pass would make.
    changes: &'a [Change],
    /// The name of the class the pass applied.
    class: Option<&'a str>,
}

/// Reports an observed bucket (nothing written to AWS): Ready while it exists, `InSync` and
/// `status.plan` saying what a Manage pass would change, and an event when that list changes.
/// Deletion then releases the bucket, as `Retain` does, whatever the spec's policy.
async fn report_observed(
    bucket: &Bucket,
    ctx: &InAccount<'_>,
    d: &Desired,
    seen: Seen<'_>,
    mut inputs: Vec<Vec<String>>,
) -> Result<Requeue, Error> {
    slot::release();
    let all = in_sync::differences(d, seen.found, seen.changes);
    let exists = matches!(seen.found, Found::Present(_));
    let msg = if exists {
        format!(
            "S3 bucket {} is observed: the operator reads it and writes nothing (spec.management Observe)",
            d.name
        )
    } else {
        format!(
            "S3 bucket {} does not exist: in Observe the operator does not create it",
            d.name
        )
    };
    let at = d.address();
    let mut status = status_for(
        bucket,
        ctx,
        seen.class,
        Some(&at),
        exists,
        Reason::Observed,
        msg,
    );
    let previous = bucket.status.clone().unwrap_or_default();
    let said = condition::Said {
        status: all.is_empty(),
        reason: if all.is_empty() { "InSync" } else { "Differs" },
        message: in_sync::message(&format!("S3 bucket {}", d.name), &all),
    };
    let now = jiff::Timestamp::now();
    let generation = bucket.metadata.generation;
    let in_sync = condition::of_type(&previous.conditions, IN_SYNC, said, generation, now);
    let note = in_sync.message.clone();
    status.conditions.push(in_sync);
    status.plan = all.iter().take(in_sync::LISTED).cloned().collect();
    status.deletion = Some(AcceptedDeletion {
        policy: DeletionPolicy::Retain,
        force_delete: false,
    });
    if status.plan != previous.plan && !all.is_empty() {
        ctx.event(bucket, true, "OutOfSync", note).await;
    }
    let written = update_status(ctx, bucket, bucket.status.as_ref(), &status).await?;
    inputs[0].extend(written);
    let next = ctx.resync_after();
    ctx.settled.record(object_key(bucket), inputs, next);
    Ok(Requeue::Resync(next))
}

/// `InSync=True`: what a Manage pass reports once S3 holds what the spec says.
fn in_sync_now(
    bucket: &Bucket,
    name: &str,
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
    let previous = bucket.status.as_ref().map(|s| s.conditions.as_slice());
    let said = condition::Said {
        status: true,
        reason: "InSync",
        message: in_sync::message(&format!("S3 bucket {name}"), &[]),
    };
    let (generation, now) = (bucket.metadata.generation, jiff::Timestamp::now());
    condition::of_type(previous.unwrap_or_default(), IN_SYNC, said, generation, now)
}

/// What the class's security constraints removed, said in an event when it reaches AWS (the
/// bucket created without it, or its policy or notifications rewritten), not on every pass.
async fn report_enforced(
    bucket: &Bucket,
    ctx: &InAccount<'_>,
    note: Option<String>,
    applied: &[Change],
) {
    let reached = applied
        .iter()
        .any(|c| matches!(c, Change::Create | Change::Policy | Change::Notifications));
    if let Some(note) = note.filter(|_| reached) {
        ctx.event(bucket, true, "ClassEnforced", note).await;
    }
}

/// One event for what a pass changed: created, adopted, updated, or drift corrected (changes
/// to a spec already served were made outside the operator).
async fn report(
    bucket: &Bucket,
    ctx: &InAccount<'_>,
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
            ctx.metrics
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

async fn write(
    ctx: &InAccount<'_>,
    d: &Desired,
    o: &Owner,
    change: &Change,
) -> Result<(), crate::aws::Error> {
    let retags = matches!(change, Change::Create | Change::Tags);
    let written = write_one(ctx, d, o, change).await;
    if retags {
        // The shared read no longer says what the bucket carries, and a read an access made
        // while the write was under way (a bucket not yet there) must not outlive it.
        ctx.tag_reads.forget(&d.region, &d.name);
    }
    written
}

async fn write_one(
    ctx: &InAccount<'_>,
    d: &Desired,
    o: &Owner,
    change: &Change,
) -> Result<(), crate::aws::Error> {
    let (aws, r, n) = (&ctx.aws, d.region.as_str(), d.name.as_str());
    if matches!(change, Change::Create | Change::Tags) {
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
        Change::ReplicationRole(write) => match &d.replication {
            Some(Some(w)) => replication::write_role(ctx, w, *write).await,
            _ => Ok(()),
        },
        Change::Replication => match &d.replication {
            Some(Some(w)) => aws.put_bucket_replication(r, n, &w.config).await,
            _ => Ok(()),
        },
        Change::ReplicationOff => aws.delete_bucket_replication(r, n).await,
        Change::ReplicationRoleOff => replication::delete_role(ctx, o).await.map(drop),
    }
}

/// The status a pass reports. `class`: the name of the class the pass applied (none while the
/// one named cannot be used).
pub(super) fn status_for(
    bucket: &Bucket,
    ctx: &InAccount<'_>,
    class: Option<&str>,
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
    // The region is the record of where the bucket is (see `address`): kept when this pass
    // could not resolve the address.
    let d_region = d.map(|d| d.region.clone()).or(previous.region.clone());
    BucketStatus {
        class_name: class.map(str::to_string),
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
        // Only a pass that accepts the spec changes it (see `converge`).
        deletion: previous.deletion,
        // Recorded once, before the bucket was created (`record_placement`).
        account: previous.account,
        // Only an Observe pass lists what Manage would change (`report_observed`).
        plan: vec![],
        // Only a Ready pass changes it (see `converge`).
        replication_role: previous.replication_role,
    }
}

/// Reports a condition a person must fix and waits: no hot loop, but a periodic re-check in case
/// the cause went away outside Kubernetes (an IAM policy fixed, a conflicting bucket deleted).
pub(super) async fn blocked(
    bucket: &Bucket,
    ctx: &InAccount<'_>,
    class: Option<&str>,
    d: Option<&Address>,
    why: &Blocked,
) -> Result<Requeue, Error> {
    let why = &ctx.said(why);
    let msg = why.message.clone();
    let mut status = status_for(bucket, ctx, class, d, false, why.reason, msg);
    // A refused Manage pass says what it had left to write.
    let previous = bucket.status.as_ref().map(|s| s.conditions.as_slice());
    let (generation, now) = (bucket.metadata.generation, jiff::Timestamp::now());
    let in_sync = why.in_sync(previous.unwrap_or_default(), generation, now);
    status.conditions.extend(in_sync);
    status.plan = why.plan();
    report_blocked(ctx, bucket, bucket.status.as_ref(), &status, why).await
}

/// An AWS call that failed: a refusal a person must fix blocks the pass, any other error is
/// retried with backoff.
async fn failed(
    bucket: &Bucket,
    ctx: &InAccount<'_>,
    class: Option<&str>,
    at: &Address,
    e: crate::aws::Error,
) -> Result<Requeue, Error> {
    match refusal(&e) {
        Some(why) => blocked(bucket, ctx, class, Some(at), &why).await,
        None => Err(e.into()),
    }
}
