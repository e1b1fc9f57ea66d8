//! Leader election on a Lease with kube-leader-election, guarded against its known weakness:
//! the crate acquires and renews with merge patches that carry no resourceVersion, so two
//! replicas racing for an expired lease could both believe they lead. Here a candidate claims an
//! expired lease itself with a compare-and-swap replace (409 on a lost race), the crate only
//! renews, and every renewal's result must still name us as holder.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Api;
use kube::api::PostParams;
use kube_leader_election::{LeaseLock, LeaseLockParams, LeaseLockResult};
use tokio::sync::watch;

use super::metrics::METRICS;

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
}

/// Runs for the life of the process: campaigns until leading, sends `true` on `leading`, then
/// renews. Returns `Err(Lost)` the moment leadership is lost (the caller exits non-zero), and
/// `Ok` after releasing the lease when `shutdown` fires.
pub async fn run(
    client: kube::Client,
    s: Settings,
    leading: watch::Sender<bool>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), Error> {
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
    let gauge = METRICS
        .leader_election_master_status
        .with_label_values(&[&s.name]);
    gauge.set(0);
    let mut last_renewed: Option<tokio::time::Instant> = None;
    loop {
        if *shutdown.borrow() {
            break;
        }
        if last_renewed.is_none() {
            match claim(&leases, &s).await {
                Ok(true) => {}
                Ok(false) => {
                    tokio::select! {
                        _ = tokio::time::sleep(s.renew_period) => continue,
                        _ = shutdown.changed() => break,
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "leader election: could not read or claim the lease");
                    tokio::select! {
                        _ = tokio::time::sleep(s.renew_period) => continue,
                        _ = shutdown.changed() => break,
                    }
                }
            }
        }
        match lock.try_acquire_or_renew().await {
            Ok(LeaseLockResult::Acquired(lease)) if holder(&lease) == Some(s.identity.as_str()) => {
                if last_renewed.is_none() {
                    tracing::info!(lease = %s.name, identity = %s.identity, "became leader");
                    gauge.set(1);
                    let _ = leading.send(true);
                }
                last_renewed = Some(tokio::time::Instant::now());
            }
            Ok(result) if last_renewed.is_some() => {
                let who = result
                    .lease()
                    .and_then(holder)
                    .unwrap_or("nobody")
                    .to_string();
                gauge.set(0);
                return Err(Error::Lost(s.name, format!("lease now held by {who}")));
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "leader election: renewal failed");
                if let Some(t) = last_renewed {
                    // Stop before the lease can expire and another replica take over.
                    if t.elapsed() + s.renew_period >= s.lease_duration {
                        gauge.set(0);
                        return Err(Error::Lost(
                            s.name,
                            format!("could not renew for {:?}: {e}", t.elapsed()),
                        ));
                    }
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(s.renew_period) => {}
            _ = shutdown.changed() => break,
        }
    }
    if last_renewed.is_some() {
        gauge.set(0);
        if let Err(e) = lock.step_down().await {
            tracing::warn!(error = %e, "could not release the lease");
        } else {
            tracing::info!(lease = %s.name, "released the lease");
        }
    }
    Ok(())
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
