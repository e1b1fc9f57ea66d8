//! Leader election on a Lease with kube-leader-election, guarded against its known weakness:
//! the crate acquires and renews with merge patches that carry no resourceVersion, so two
//! replicas racing for an expired lease could both believe they lead. Here a candidate claims an
//! expired lease itself with a compare-and-swap replace (409 on a lost race), the crate only
//! renews, and every renewal's result must still name us as holder.
//!
//! Each successful renewal extends the fence (`crate::fence`) to the renewal's start plus what
//! is surely left of the lease; a renewal that cannot finish before then is abandoned, and the
//! process exits without sending another write.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Api;
use kube::api::PostParams;
use kube_leader_election::{LeaseLock, LeaseLockParams, LeaseLockResult};
use tokio::sync::watch;

use crate::fence::{self, Fence};
use crate::metrics::METRICS;

#[derive(Clone, Debug)]
pub struct Settings {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_period: Duration,
}

#[derive(thiserror::Error, Debug)]
pub enum Error {
    #[error("lost leadership of lease {0}: {1}")]
    Lost(String, String),
    #[error("lease API: {0}")]
    Kube(#[from] kube::Error),
    #[error("lease {0} not renewed in time: {1}")]
    Fenced(String, fence::Error),
    #[error("--lease-duration {0:?} leaves no time to renew every {1:?}")]
    Settings(Duration, Duration),
}

/// The part of a lease that is a safety margin: clock-rate differences between nodes, and the
/// time a request checked against the fence takes to reach the API server or AWS.
const MARGIN_DIVISOR: u32 = 4;

/// Runs for the life of the process: campaigns until leading, sends `true` on `leading`, then
/// renews. Returns `Err(Lost)` the moment leadership is lost and `Err(Fenced)` once the fence
/// has closed (the caller exits non-zero), and `Ok` after releasing the lease when `shutdown`
/// fires.
pub async fn run(
    client: kube::Client,
    s: Settings,
    fence: Fence,
    leading: watch::Sender<bool>,
    shutdown: watch::Receiver<bool>,
) -> Result<(), Error> {
    let gauge = METRICS
        .leader_election_master_status
        .with_label_values(&[&s.name]);
    gauge.set(0);
    let result = lead(client, &s, fence, leading, shutdown).await;
    // Whether it released the lease or lost it, this replica leads no more.
    gauge.set(0);
    result
}

/// The campaign and renewal loop of [`run`].
async fn lead(
    client: kube::Client,
    s: &Settings,
    fence: Fence,
    leading: watch::Sender<bool>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), Error> {
    // The Lease holds whole seconds: that is what other replicas wait out.
    let lease = Duration::from_secs(s.lease_duration.as_secs());
    let valid_for = lease - lease / MARGIN_DIVISOR;
    if valid_for <= s.renew_period {
        return Err(Error::Settings(s.lease_duration, s.renew_period));
    }
    let leases: Api<Lease> = Api::namespaced(client.clone(), &s.namespace);
    let lock = LeaseLock::new(
        client,
        &s.namespace,
        LeaseLockParams {
            lease_name: s.name.clone(),
            holder_id: s.identity.clone(),
            lease_ttl: s.lease_duration,
        },
    );
    let fenced = |e| Error::Fenced(s.name.clone(), e);
    let mut led = false;
    loop {
        if *shutdown.borrow() {
            break;
        }
        if led {
            fence.check().map_err(fenced)?;
        }
        if !led && !claimed(&leases, s).await {
            tokio::select! {
                _ = tokio::time::sleep(s.renew_period) => continue,
                _ = shutdown.changed() => break,
            }
        }
        let start = Instant::now();
        match renew(&lock, &fence, led).await.map_err(fenced)? {
            Ok(LeaseLockResult::Acquired(lease)) if holder(&lease) == Some(s.identity.as_str()) => {
                fence.extend(start + valid_for).map_err(fenced)?;
                if !led {
                    tracing::info!(lease = %s.name, identity = %s.identity, "became leader");
                    METRICS
                        .leader_election_master_status
                        .with_label_values(&[&s.name])
                        .set(1);
                    led = true;
                    let _ = leading.send(true);
                }
            }
            Ok(result) if led => {
                let who = result.lease().and_then(holder).unwrap_or("nobody");
                let why = format!("lease now held by {who}");
                return Err(Error::Lost(s.name.clone(), why));
            }
            Ok(_) => {}
            // The next pass retries; the fence closes if none succeeds in time.
            Err(e) => tracing::warn!(error = %e, "leader election: renewal failed"),
        }
        // Wake when the fence closes, to exit at once.
        let pause = match fence.remaining() {
            Some(left) if led => s.renew_period.min(left),
            _ => s.renew_period,
        };
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = shutdown.changed() => break,
        }
    }
    if led {
        match lock.step_down().await {
            Err(e) => tracing::warn!(error = %e, "could not release the lease"),
            Ok(_) => tracing::info!(lease = %s.name, "released the lease"),
        }
    }
    Ok(())
}

/// Whether this replica holds the lease now (claimed, or already its own); a failure to read or
/// claim it is logged and counts as no.
async fn claimed(leases: &Api<Lease>, s: &Settings) -> bool {
    claim(leases, s).await.unwrap_or_else(|e| {
        tracing::warn!(error = %e, "leader election: could not read or claim the lease");
        false
    })
}

/// One renewal through the crate. While leading it may not run past the fence: past it, the
/// crate's merge patch could overwrite a new holder's lease (`Err`: give up leading).
async fn renew(
    lock: &LeaseLock,
    fence: &Fence,
    led: bool,
) -> Result<Result<LeaseLockResult, kube_leader_election::Error>, fence::Error> {
    let renewal = lock.try_acquire_or_renew();
    match fence.remaining() {
        Some(left) if led => tokio::time::timeout(left, renewal).await.map_err(|_| {
            fence.check().err().unwrap_or(fence::Error {
                closed_for: Duration::ZERO,
            })
        }),
        _ => Ok(renewal.await),
    }
}

fn holder(lease: &Lease) -> Option<&str> {
    lease
        .spec
        .as_ref()?
        .holder_identity
        .as_deref()
        .filter(|h| !h.is_empty())
}

/// Claims the lease if it is free, expired or already ours, by a replace that fails with 409
/// if anyone changed it since we read it. `Ok(false)`: another replica holds it.
async fn claim(leases: &Api<Lease>, s: &Settings) -> Result<bool, kube::Error> {
    let now = jiff::Timestamp::now();
    let Some(mut lease) = leases.get_opt(&s.name).await? else {
        // Absent: the crate creates it, and creation is atomic.
        return Ok(true);
    };
    let spec = lease.spec.get_or_insert_with(Default::default);
    let current = spec.holder_identity.clone().filter(|h| !h.is_empty());
    if current.as_deref() == Some(s.identity.as_str()) {
        return Ok(true);
    }
    let expired = match (&spec.renew_time, spec.lease_duration_seconds) {
        (Some(MicroTime(renewed)), Some(secs)) => renewed
            .checked_add(jiff::SignedDuration::from_secs(secs.into()))
            .map(|t| t < now)
            .unwrap_or(true),
        _ => true,
    };
    if current.is_some() && !expired {
        return Ok(false);
    }
    spec.holder_identity = Some(s.identity.clone());
    spec.acquire_time = Some(MicroTime(now));
    spec.renew_time = Some(MicroTime(now));
    spec.lease_duration_seconds = Some(s.lease_duration.as_secs().try_into().unwrap_or(i32::MAX));
    spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
    match leases
        .replace(&s.name, &PostParams::default(), &lease)
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}
