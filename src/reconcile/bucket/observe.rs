//! What a Bucket pass reads from AWS: whose the bucket is, then each managed aspect, and whether
//! the bucket it logs into is held by the Bucket it names. Judging what was read is left to pure
//! functions ([`plan`](super::plan), [`adoption_refused`], [`logging::target_not_held`]).

use crate::reconcile::InAccount;
use std::collections::BTreeMap;
use std::time::Duration;

use super::desired::adoption_refused;
use super::logging::{self, Links};
use super::{Address, BucketState, Desired, Found, protection, replication};
use crate::aws::ErrorKind;
use crate::aws::tags::{Owner, Ownership};
use crate::reconcile::{Blocked, tag_reads};

/// Reads whether the bucket at `at` is still this Bucket's, and wakes the accesses granted on
/// that name if it is not. A failed read is left to the next pass.
pub(super) async fn confirm_held(ctx: &InAccount<'_>, at: &Address, owner: &Owner) {
    let within = tag_reads::for_bucket(ctx.settings.resync_period);
    match ctx.bucket_tags(&at.region, &at.name, within).await {
        Ok(Some(tags)) if owner.judge(&tags) == Ownership::Ours => {}
        Ok(_) => ctx.grants.wake(&at.name),
        Err(e) => tracing::debug!(error = %e, bucket = %at.name, "ownership not confirmed"),
    }
}

/// Why `d` may not log into the S3 bucket it resolved, read from that bucket's tags (its
/// Bucket's status is no proof). `Ok(None)`: it may, or it logs into none. The read is shared
/// with the target's own passes.
pub(super) async fn log_target(
    ctx: &InAccount<'_>,
    d: &Desired,
    links: &Links,
) -> Result<Option<Blocked>, crate::aws::Error> {
    let Some((to, target)) = logging::target(d, links) else {
        return Ok(None);
    };
    let within = tag_reads::for_bucket(ctx.settings.resync_period);
    let tags = ctx.bucket_tags(&d.region, &to.bucket, within).await?;
    let cluster = &ctx.settings.cluster_name;
    Ok(logging::target_not_held(to, target, tags.as_ref(), cluster))
}

/// Reads what the plan needs: tags first (existence and ownership), then each managed aspect.
pub(super) async fn observe(
    ctx: &InAccount<'_>,
    d: &Desired,
    owner: &Owner,
    adopt: bool,
) -> Result<Found, crate::aws::Error> {
    let read = match tags(ctx, d, owner).await {
        // S3 answers AccessDenied when the bucket is another account's (every request expects
        // ours to own it): a name taken, not a permission to fix. ListBuckets tells the two
        // apart.
        Err(e) if e.kind == ErrorKind::AccessDenied => {
            if ctx.aws.bucket_in_account(&d.region, &d.name).await? {
                return Err(e);
            }
            return Ok(Found::Foreign("held by another AWS account".into()));
        }
        read => read?,
    };
    let Some(tags) = read else {
        return Ok(Found::Absent);
    };
    let ownership = owner.judge(&tags);
    if let Ownership::Foreign(who) = ownership {
        return Ok(Found::Foreign(who));
    }
    let cross = ctx.settings.allow_cross_namespace_adoption;
    if let Some(why) = adoption_refused(&d.name, &ownership, owner, adopt, cross) {
        return Ok(Found::NotAdoptable(why));
    }
    let config = config(ctx, d, owner, tags).await?;
    Ok(Found::Present(Box::new(config)))
}

/// The bucket's tags; `None`: it does not exist.
async fn tags(
    ctx: &InAccount<'_>,
    d: &Desired,
    owner: &Owner,
) -> Result<Option<BTreeMap<String, String>>, crate::aws::Error> {
    let within = tag_reads::for_bucket(ctx.settings.resync_period);
    let read = ctx.bucket_tags(&d.region, &d.name, within).await?;
    // A recent read (perhaps another object's) may find the bucket ours, but never refuse it: a
    // name can change hands within seconds.
    if read
        .as_ref()
        .is_some_and(|t| owner.judge(t) != Ownership::Ours)
    {
        return ctx.bucket_tags(&d.region, &d.name, Duration::ZERO).await;
    }
    Ok(read)
}

/// The configuration of a bucket this object may manage: each managed aspect, the rest unread.
async fn config(
    ctx: &InAccount<'_>,
    d: &Desired,
    owner: &Owner,
    tags: BTreeMap<String, String>,
) -> Result<BucketState, crate::aws::Error> {
    let (aws, r, n) = (&ctx.aws, &d.region, &d.name);
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
    let replication = match d.replication {
        Some(_) => Some(replication::observe(ctx, d, owner).await?),
        None => None,
    };
    Ok(BucketState {
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
        replication,
    })
}

/// Why `d` may not replicate into the destinations it resolved, read from each one's tags
/// (shared with its own passes) and versioning. `Ok(None)`: it may, or it replicates into no
/// Bucket.
pub(super) async fn replica_targets(
    ctx: &InAccount<'_>,
    d: &Desired,
) -> Result<Option<replication::Refusal>, crate::aws::Error> {
    let Some(Some(want)) = &d.replication else {
        return Ok(None);
    };
    let within = tag_reads::for_bucket(ctx.settings.resync_period);
    for h in &want.held_by {
        let at = &h.at;
        let tags = ctx.bucket_tags(&at.region, &at.name, within).await?;
        // A recent read may find it held, never refuse it: read afresh before withdrawing.
        let tags = match replication::not_held(h, tags.as_ref()) {
            None => tags,
            Some(_) => {
                ctx.bucket_tags(&at.region, &at.name, Duration::ZERO)
                    .await?
            }
        };
        if let Some(why) = replication::not_held(h, tags.as_ref()) {
            return Ok(Some(why));
        }
        let versioning = ctx.aws.versioning(&at.region, &at.name).await?;
        if let Some(why) = replication::unversioned(h, versioning) {
            return Ok(Some(why));
        }
    }
    Ok(None)
}
