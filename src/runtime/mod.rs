//! The process around the reconcilers: configuration, leader election, the web server,
//! telemetry, the watches, the controllers and one shutdown signal shared by all of them.
//!
//! - `config`: what `run` is configured with
//! - `watches`: the shared watches and their caches
//! - `class_watches`: the classes and namespaces, cluster-wide, and what their changes wake
//! - `controllers`: controller wiring, worker slots, spans, metrics and error policy
//! - `wakes`: what wakes an object besides a change of its own
//! - `drift_events`: the leader's reader of the drift-event queue
//! - `backoff`: each object's backoff after a failed reconcile
//! - `lifecycle`: signals, heartbeat and probe state

mod backoff;
mod class_watches;
pub mod client;
mod config;
mod controllers;
mod drift_events;
mod fair;
pub mod leader;
mod lifecycle;
mod sweep;
pub mod telemetry;
mod wakes;
mod watches;
mod web;

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::aws::Aws;
use crate::fence::Fence;
use crate::metrics::Metrics;
use crate::reconcile::events::Events;
use crate::reconcile::{self, Context};
use class_watches::ClassWatches;
pub use config::Config;
pub use controllers::RECONCILE_TIMEOUT;
pub use lifecycle::Health;
use lifecycle::{heartbeat, signal_shutdown, wait_true};
use watches::{CacheSync, Watches, caches_synced};

#[derive(thiserror::Error, Debug)]
pub enum Error {
    #[error("cannot reach the Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("Kubernetes client configuration: {0}")]
    KubeConfig(#[from] kube::config::InferConfigError),
    #[error("cannot serve on {0}: {1}")]
    Bind(std::net::SocketAddr, std::io::Error),
    #[error(transparent)]
    Leader(#[from] leader::Error),
    #[error("AWS: {0}")]
    Aws(#[from] crate::aws::Error),
    #[error(transparent)]
    Reconcile(#[from] reconcile::Error),
    #[error("reconcile did not finish within {0:?}")]
    ReconcileTimeout(Duration),
    #[error("reconcile panicked: {0}")]
    ReconcilePanic(String),
}

pub async fn run(config: Config) -> Result<(), Error> {
    let (shutdown_tx, shutdown) = watch::channel(false);
    tokio::spawn(signal_shutdown(shutdown_tx));
    // Once it closes, nothing that could change Kubernetes or AWS leaves this process.
    let fence = match &config.leader_election {
        Some(_) => Fence::leader_elected(),
        None => Fence::disabled(),
    };
    // One registry for the life of the process: everything records into it, /metrics renders it.
    let metrics = Arc::new(Metrics::new());
    let Some(client) = connect(&config, &fence, &metrics, &shutdown).await? else {
        return Ok(());
    };
    let mut config = config;
    let aws = Aws::new(&config.aws, metrics.clone())
        .await
        .with_fence(fence.clone());
    discover(&aws, &mut config.reconcile).await?;
    let aws = aws.with_bucket_owner(&config.reconcile.account_id);

    let health = Arc::new(Health::default());
    tokio::spawn(heartbeat(health.clone()));
    let web = web::serve(&config, health.clone(), metrics.clone(), shutdown.clone());
    let servers = tokio::spawn(web.await?);

    // Watches start now, on leader and standby alike: a new leader starts with warm caches, and
    // /readyz turns ready on every replica once they have listed.
    let (leading_tx, leading) = watch::channel(config.leader_election.is_none());
    let (watches, classes) = start_watches(&config, &client, health, &leading, &metrics);

    // Leader election: standbys wait here; the leader goes on to reconcile.
    let (release_tx, release) = watch::channel(false);
    let lease_task = campaign(&config, &client, fence, &metrics, leading_tx, release);
    until_shutdown(&shutdown, wait_true(leading.clone())).await;
    // A BucketAccess reconciled before the Bucket cache is full would find no Bucket and flip
    // to BucketNotFound for a moment: a needless status write and event on every restart.
    // A pass before the classes have listed would apply no class, or the wrong default one.
    until_shutdown(&shutdown, caches_synced(&watches)).await;
    until_shutdown(&shutdown, classes.synced()).await;

    if !*shutdown.borrow() {
        let ctx = Arc::new(context(&config, &client, aws, &watches, &classes, metrics));
        controllers::run(&config, ctx, watches, &classes.wakes, shutdown.clone()).await;
    }
    // Controllers have drained; now hand the lease over so a standby takes over at once.
    let _ = release_tx.send(true);
    if let Some(t) = lease_task {
        let _ = t.await;
    }
    let _ = servers.await;
    tracing::info!("shut down cleanly");
    Ok(())
}

/// The Kubernetes client, once the API server has answered it; `None` when a signal came
/// first. An unreachable API server, or one that refuses us, fails start-up with one clear line.
async fn connect(
    config: &Config,
    fence: &Fence,
    metrics: &Arc<Metrics>,
    shutdown: &watch::Receiver<bool>,
) -> Result<Option<kube::Client>, Error> {
    let identity = config.leader_election.as_ref().map(|l| l.identity.as_str());
    let client = client::build(identity, fence.clone(), metrics.clone()).await?;
    tokio::select! {
        v = client.apiserver_version() => { v?; }
        _ = wait_true(shutdown.clone()) => return Ok(None),
    }
    Ok(Some(client))
}

/// What the reconcilers need to know of the operator's own AWS identity (STS): its account,
/// the permissions boundary there, and its principals, exempt from tenants' Deny statements.
async fn discover(aws: &Aws, settings: &mut reconcile::Settings) -> Result<(), Error> {
    let (account, caller) = aws.caller().await?;
    settings.boundary_arn = aws
        .boundary(&settings.boundary_arn, &settings.iam_path, &account)
        .await?;
    tracing::info!(boundary = %settings.boundary_arn, "permissions boundary");
    settings.eks_cluster_arn = settings
        .eks_cluster_name
        .as_deref()
        .map(|name| crate::aws::naming::eks_cluster_arn(&aws.region, &account, name));
    settings.account_id = account;
    settings.operator_principals = crate::aws::policy::operator_principals(&caller);
    tracing::info!(principals = ?settings.operator_principals, "exempt from tenant Deny statements");
    Ok(())
}

/// Leader election, when configured, in a task of its own that sends `true` on `leading` once
/// this replica leads, releases the lease once `release` fires, and exits the process the
/// moment leadership is lost.
fn campaign(
    config: &Config,
    client: &kube::Client,
    fence: Fence,
    metrics: &Arc<Metrics>,
    leading: watch::Sender<bool>,
    release: watch::Receiver<bool>,
) -> Option<JoinHandle<()>> {
    let settings = config.leader_election.clone()?;
    let (client, metrics) = (client.clone(), metrics.clone());
    Some(tokio::spawn(async move {
        if let Err(e) = leader::run(client, settings, fence, &metrics, leading, release).await {
            // Another replica may already act: stop at once, without draining.
            tracing::error!(error = %e, "leadership lost; exiting");
            std::process::exit(1);
        }
    }))
}

/// Waits for `f`, or for the shutdown signal, whichever comes first.
async fn until_shutdown(shutdown: &watch::Receiver<bool>, f: impl Future<Output = ()>) {
    tokio::select! {
        _ = f => {}
        _ = wait_true(shutdown.clone()) => {}
    }
}

/// The watches of every scope (one namespace each, or the whole cluster), and the class
/// watches, cluster-wide in every mode.
fn start_watches(
    config: &Config,
    client: &kube::Client,
    health: Arc<Health>,
    leading: &watch::Receiver<bool>,
    metrics: &Arc<Metrics>,
) -> (Vec<Watches>, ClassWatches) {
    let scopes: Vec<Option<String>> = if config.watch_namespaces.is_empty() {
        vec![None]
    } else {
        config.watch_namespaces.iter().cloned().map(Some).collect()
    };
    let sync = Arc::new(CacheSync {
        pending: AtomicUsize::new(4 * scopes.len() + 3),
        health,
    });
    let watches = scopes
        .iter()
        .map(|ns| Watches::start(client, ns.as_deref(), &sync, leading))
        .collect();
    (watches, ClassWatches::start(client, &sync, metrics))
}

/// What every reconcile shares: clients, settings, the event publisher, the warm Bucket caches
/// and the metrics.
fn context(
    config: &Config,
    client: &kube::Client,
    aws: Aws,
    watches: &[Watches],
    classes: &ClassWatches,
    metrics: Arc<Metrics>,
) -> Context {
    let instance = config.leader_election.as_ref().map(|l| l.identity.clone());
    let home = reconcile::accounts::Account::home(aws, config.reconcile.clone());
    Context {
        client: client.clone(),
        accounts: reconcile::accounts::Accounts::new(home, client.clone()),
        settings: config.reconcile.clone(),
        events: Events::new(client.clone(), "s3-operator", instance),
        settled: Default::default(),
        buckets: (watches.iter())
            .map(|w| reconcile::refs::Buckets {
                store: w.buckets.clone(),
                refs: w.bucket_refs.clone(),
            })
            .collect(),
        tag_reads: Default::default(),
        grants: Default::default(),
        budgets: Arc::new(crate::aws::budget::Budgets::new(
            (
                config.reconcile.namespace_aws_write_rate,
                config.reconcile.namespace_aws_write_burst,
            ),
            (
                config.reconcile.namespace_aws_read_rate,
                config.reconcile.namespace_aws_read_burst,
            ),
        )),
        metrics,
        classes: classes.classes(),
        finalized: Default::default(),
    }
}
