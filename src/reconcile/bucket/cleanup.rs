//! Deletion of a Bucket: the bucket released (Retain) or deleted (Delete) if this object owns it.

use std::collections::BTreeMap;

use super::apply::blocked;
use super::{Address, address, protection, refusal};
use crate::api::condition::Reason;
use crate::api::{Bucket, DeletionPolicy};
use crate::aws::s3::Emptied;
use crate::aws::tags::{Owner, Ownership, released};
use crate::aws::{ErrorKind, naming, policy};
use crate::reconcile::{
    Blocked, Context, Error, Requeue, deletion_policy, has_finalizer, owner, remove_finalizer,
};

pub(super) async fn cleanup(bucket: &Bucket, ctx: &Context) -> Result<Requeue, Error> {
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
