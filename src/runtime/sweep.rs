//! Cleanup a stripped finalizer cannot skip. The leader cleans up after every deleted object whose
//! cleanup it did not finish itself, from the last state the watch saw ([`vanished_bucket`],
//! [`vanished_access`]), and once per sweep period it sweeps the installation's bucket prefix,
//! IAM path and (with an EKS cluster) Pod Identity associations for what this installation tagged
//! for a UID no object has any more ([`run`]): what was stripped while no operator ran, or what a
//! cleanup from the last state could not finish.
//!
//! What the sweep may touch is decided by `reconcile::orphans::judge` (pure); it reads a
//! resource's tags only when no live object names it, confirms with the API server that the owner
//! is gone before it acts, and charges each orphan's writes to its namespace's budget.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use kube::runtime::reflector::Store;
use kube::{Resource, ResourceExt};
use tokio::sync::{Semaphore, watch};
use tracing::Instrument;

use crate::api::condition::is_ready;
use crate::api::{Bucket, BucketAccess, CredentialsType};
use crate::aws::budget::Key;
use crate::aws::tags::Owner;
use crate::reconcile::bucket::Ended;
use crate::reconcile::orphans::{Verdict, count, judge, still_exists};
use crate::reconcile::{Context, InAccount, bucket, bucket_access, jitter, owner};

/// Cleanups from a last state running at once (each a handful of AWS calls).
pub(super) const VANISHED_AT_ONCE: usize = 4;

/// The deleted Bucket's AWS resources, cleaned up from its last state by the rules a pass last
/// accepted. A failure is left to the sweep.
pub(super) async fn vanished_bucket(b: Arc<Bucket>, ctx: Arc<Context>, slots: Arc<Semaphore>) {
    let Ok(_slot) = slots.acquire().await else {
        return;
    };
    let span = orphan_span(b.as_ref());
    let recorded = b.status.as_ref().and_then(|s| s.account.as_ref());
    let Some(cx) = in_account(&ctx, recorded, &span).await else {
        count(&ctx.metrics, "bucket", "failed");
        return;
    };
    let key = Key::new(
        cx.account.name.as_deref(),
        &b.namespace().unwrap_or_default(),
    );
    let run = ctx.budgets.pass(key, bucket::vanished(&b, &cx));
    match run.instrument(span.clone()).await {
        Ok(Ended::Deleted) => count(&ctx.metrics, "bucket", "deleted"),
        Ok(Ended::Released) => count(&ctx.metrics, "bucket", "released"),
        Ok(_) => {}
        Err(e) => {
            count(&ctx.metrics, "bucket", "failed");
            span.in_scope(
                || tracing::warn!(error = %e, "orphan cleanup failed; the sweep retries it"),
            );
        }
    }
}

/// The deleted BucketAccess's association, user or role, cleaned up from its last state.
pub(super) async fn vanished_access(
    a: Arc<BucketAccess>,
    ctx: Arc<Context>,
    slots: Arc<Semaphore>,
) {
    let Ok(_slot) = slots.acquire().await else {
        return;
    };
    let span = orphan_span(a.as_ref());
    let recorded = a.status.as_ref().and_then(|s| s.account.as_ref());
    let Some(cx) = in_account(&ctx, recorded, &span).await else {
        count(&ctx.metrics, "user", "failed");
        return;
    };
    let key = Key::new(
        cx.account.name.as_deref(),
        &a.namespace().unwrap_or_default(),
    );
    let run = ctx.budgets.pass(key, bucket_access::vanished(&a, &cx));
    match run.instrument(span.clone()).await {
        Ok(deleted) => deleted
            .into_iter()
            .for_each(|kind| count(&ctx.metrics, kind, "deleted")),
        Err(e) => {
            let kind = match a.spec.credentials.type_ {
                CredentialsType::AccessKey => "user",
                _ => "role",
            };
            count(&ctx.metrics, kind, "failed");
            span.in_scope(
                || tracing::warn!(error = %e, "orphan cleanup failed; the sweep retries it"),
            );
        }
    }
}

/// The span of a cleanup after `obj`, gone without its finalizer: its log lines name it.
fn orphan_span<K: Resource<DynamicType = ()>>(obj: &K) -> tracing::Span {
    let m = obj.meta();
    let span = tracing::info_span!(
        "orphan cleanup",
        kind = K::kind(&()).as_ref(),
        k8s.namespace = m.namespace.as_deref().unwrap_or_default(),
        k8s.name = m.name.as_deref().unwrap_or_default(),
        uid = m.uid.as_deref().unwrap_or_default(),
    );
    span.in_scope(|| tracing::warn!("deleted without the operator's cleanup (finalizer removed): cleaning up from its last state"));
    span
}

/// The caches the sweep judges liveness from, and which namespaces it may touch.
pub(super) struct Live {
    pub buckets: Vec<Store<Bucket>>,
    pub accesses: Vec<Store<BucketAccess>>,
    /// Watched namespaces; empty: all.
    pub namespaces: Vec<String>,
}

impl Live {
    fn uids(&self) -> HashSet<String> {
        let b = self.buckets.iter().flat_map(|s| s.state());
        let b = b.filter_map(|b| b.meta().uid.clone());
        let a = self.accesses.iter().flat_map(|s| s.state());
        b.chain(a.filter_map(|a| a.meta().uid.clone())).collect()
    }

    fn watched(&self, ns: &str) -> bool {
        self.namespaces.is_empty() || self.namespaces.iter().any(|n| n == ns)
    }
}

/// Sweeps once per `period` (jittered, the first a period after start-up) until shutdown.
/// The account a vanished object lived in; `None` (logged) when it cannot be used now.
async fn in_account<'a>(
    ctx: &'a Context,
    recorded: Option<&crate::api::AccountRecord>,
    span: &tracing::Span,
) -> Option<InAccount<'a>> {
    match ctx.accounts.recorded(recorded).await {
        Ok(account) => Some(InAccount::new(ctx, account)),
        Err(why) => {
            // The sweep finds it once the account can be used again.
            span.in_scope(|| tracing::error!(error = %why, "orphan cleanup waits: its AWS account cannot be used; the sweep cleans up once it can"));
            None
        }
    }
}

pub(super) async fn run(
    ctx: Arc<Context>,
    live: Live,
    period: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(jitter(period.max(Duration::from_secs(1)), 0.1)) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
        // The installation's prefix and IAM path in the operator's own account, then in each
        // AWSAccount: one that cannot be used is skipped (logged), the others are swept.
        for account in swept_accounts(&ctx).await {
            let name = account.name.clone().unwrap_or_default();
            let span = tracing::info_span!("orphan sweep", account = %name);
            let cx = InAccount::new(&ctx, account);
            if let Err(e) = sweep(&cx, &live).instrument(span.clone()).await {
                span.in_scope(|| tracing::warn!(error = %e, "orphan sweep stopped early; it runs again next period"));
            }
        }
    }
}

/// The operator's own account and every AWSAccount it can use now.
async fn swept_accounts(ctx: &Context) -> Vec<Arc<crate::reconcile::accounts::Account>> {
    let mut accounts = vec![ctx.accounts.home().clone()];
    let listed = kube::Api::<crate::api::AWSAccount>::all(ctx.client.clone())
        .list_metadata(&Default::default())
        .await;
    let names = match listed {
        Ok(list) => list.items.into_iter().filter_map(|a| a.metadata.name),
        Err(e) => {
            tracing::warn!(error = %e, "cannot list the AWSAccounts: sweeping the operator's own account only");
            return accounts;
        }
    };
    for name in names {
        match ctx.accounts.get(Some(&name)).await {
            Ok(account) => accounts.push(account),
            Err(why) => {
                tracing::warn!(account = %name, error = %why, "not swept: the account cannot be used")
            }
        }
    }
    accounts
}

/// One sweep: buckets, users, roles, then associations.
async fn sweep(ctx: &InAccount<'_>, live: &Live) -> Result<(), crate::aws::Error> {
    sweep_buckets(ctx, live).await?;
    let known = identity_names(ctx, live);
    for role in [false, true] {
        for id in ctx
            .aws
            .identities_under(&ctx.settings.iam_path, role)
            .await?
        {
            if known.contains(id.name()) {
                continue;
            }
            let Some(tags) = ctx.aws.identity_tags(&id).await? else {
                continue;
            };
            if let Some(owner) = orphan(ctx, live, &tags).await {
                let kind = if role { "role" } else { "user" };
                let gone = bucket_access::delete_owned_identity(ctx, &id);
                let done = ctx.budgets.pass(budget_key(ctx, &owner), gone).await;
                report(ctx, kind, &id.to_string(), &owner, done.map(|_| "deleted"));
            }
        }
    }
    sweep_associations(ctx, live).await
}

/// The budget an orphan's cleanup spends: its owner's namespace's, in the account swept.
fn budget_key(ctx: &InAccount<'_>, owner: &Owner) -> Key {
    Key::new(ctx.account.name.as_deref(), &owner.namespace)
}

/// Buckets under the prefix that no Ready Bucket holds, read for their tags; an orphan is
/// released (see `reconcile::bucket::release_orphan`).
async fn sweep_buckets(ctx: &InAccount<'_>, live: &Live) -> Result<(), crate::aws::Error> {
    let held: HashSet<String> = live
        .buckets
        .iter()
        .flat_map(|s| s.state())
        .filter_map(|b| {
            let s = b.status.as_ref()?;
            is_ready(&s.conditions).then(|| s.bucket_name.clone())?
        })
        .collect();
    let prefix = &ctx.settings.bucket_name_prefix;
    for (name, region) in ctx.aws.buckets_with_prefix(prefix).await? {
        if held.contains(&name) {
            continue;
        }
        let region = region.unwrap_or_else(|| ctx.aws.region.clone());
        let Some(tags) = ctx.aws.bucket_tags(&region, &name).await? else {
            continue;
        };
        if let Some(owner) = orphan(ctx, live, &tags).await {
            let release = bucket::release_orphan(ctx, &region, &name, &owner);
            let action = match ctx.budgets.pass(budget_key(ctx, &owner), release).await {
                // Gone or released meanwhile.
                Ok(Ended::Nothing) => continue,
                Ok(Ended::Deleted) => Ok("deleted"),
                Ok(_) => Ok("released"),
                Err(e) => Err(e),
            };
            report(ctx, "bucket", &format!("S3 bucket {name}"), &owner, action);
        }
    }
    Ok(())
}

/// Associations of the EKS cluster that no live PodIdentity access names, read for their tags.
async fn sweep_associations(ctx: &InAccount<'_>, live: &Live) -> Result<(), crate::aws::Error> {
    let Some(cluster) = ctx.settings.eks_cluster_name.as_deref() else {
        return Ok(());
    };
    let named: HashSet<(String, String)> = live
        .accesses
        .iter()
        .flat_map(|s| s.state())
        .filter_map(|a| {
            let c = &a.spec.credentials;
            let ns = a.meta().namespace.clone()?;
            Some((ns, c.service_account_name.clone()?))
        })
        .collect();
    for (id, ns, sa) in ctx.aws.associations(cluster).await? {
        if named.contains(&(ns, sa)) {
            continue;
        }
        let Some(tags) = ctx.aws.association_tags(cluster, &id).await? else {
            continue;
        };
        if let Some(owner) = orphan(ctx, live, &tags).await {
            let gone = ctx.aws.delete_association(cluster, &id);
            let done = ctx.budgets.pass(budget_key(ctx, &owner), gone).await;
            let what = format!("EKS Pod Identity association {id}");
            report(ctx, "association", &what, &owner, done.map(|_| "deleted"));
        }
    }
    Ok(())
}

/// The user and role names live BucketAccesses resolve to, and the replication roles of live
/// Buckets that replicate: these need no tag read.
fn identity_names(ctx: &InAccount<'_>, live: &Live) -> HashSet<String> {
    let cluster = &ctx.settings.cluster_name;
    let accesses = live.accesses.iter().flat_map(|s| s.state());
    let mut names: HashSet<String> = accesses
        .map(|a| {
            let owner = owner(a.as_ref(), cluster);
            bucket_access::iam_identity(&a, &owner).name().to_string()
        })
        .collect();
    let buckets = live.buckets.iter().flat_map(|s| s.state());
    let replicating = buckets.filter(|b| b.spec.replication.is_some());
    names.extend(replicating.map(|b| bucket::replication::role_name(&owner(b.as_ref(), cluster))));
    names
}

/// The owner a resource with `tags` is an orphan of, once the API server confirms it is gone.
async fn orphan(
    ctx: &InAccount<'_>,
    live: &Live,
    tags: &std::collections::BTreeMap<String, String>,
) -> Option<Owner> {
    // Taken after the resource was listed: an object that made it was in the cache by then.
    let uids = live.uids();
    let verdict = judge(
        tags,
        &ctx.settings.cluster_name,
        |u| uids.contains(u),
        |ns| live.watched(ns),
    );
    let Verdict::Orphan(owner) = verdict else {
        return None;
    };
    match still_exists(&ctx.client, &owner).await {
        Ok(false) => Some(owner),
        Ok(true) => None,
        Err(e) => {
            tracing::warn!(error = %e, "cannot confirm an owner is gone; left for the next sweep");
            None
        }
    }
}

/// Counts and logs what the sweep did to `what`, once owned by `owner`.
fn report<E: std::fmt::Display>(
    ctx: &InAccount<'_>,
    kind: &str,
    what: &str,
    owner: &Owner,
    done: Result<&str, E>,
) {
    let (ns, name, uid) = (&owner.namespace, &owner.name, &owner.uid);
    match done {
        Ok(action) => {
            count(&ctx.metrics, kind, action);
            tracing::warn!(
                kind,
                action,
                "orphan sweep: {action} {what}, owned by {ns}/{name} (uid {uid}) which no longer exists"
            );
        }
        Err(e) => {
            count(&ctx.metrics, kind, "failed");
            tracing::warn!(kind, error = %e, "orphan sweep: could not clean up {what} of {ns}/{name} (uid {uid})");
        }
    }
}
