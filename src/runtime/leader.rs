//! Leader election on a Lease with kube-leader-election, guarded against its known weaknesses:
//! the crate acquires and renews with merge patches that carry no resourceVersion, so two
//! replicas racing for an expired lease could both believe they lead; and it judges a lease
//! expired by comparing the holder's `renewTime` with the local wall clock, so two nodes whose
//! clocks differ by more than the lease could both lead. Here a candidate claims the lease itself
//! with a compare-and-swap replace (409 on a lost race), judging expiry as client-go does, on its
//! own monotonic clock from when it last saw the lease's leader election record change ([`Seen`]);
//! metadata changes (labels, annotations) do not count. The crate only renews
//! a lease this replica has just claimed or holds, and every renewal's result must still name us
//! as holder.
//!
//! Each successful claim or renewal extends the fence (`crate::fence`) to the request's start
//! plus what is surely left of the lease; a renewal that cannot finish before then is abandoned,
//! and the process exits without sending another request.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Api;
use kube::api::PostParams;
use kube_leader_election::{LeaseLock, LeaseLockParams, LeaseLockResult};
use prometheus::IntGauge;
use tokio::sync::watch;

use crate::fence::{self, Fence};
use crate::metrics::Metrics;

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

/// The leader election record of a Lease, as client-go's leaderelection compares it between
/// reads: a change restarts a standby's wait. Metadata is not part of it: anyone allowed to
/// label or annotate the Lease changes its resourceVersion, and that must not keep a dead
/// leader's lease alive.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Record {
    holder: Option<String>,
    duration: Option<i32>,
    acquired: Option<jiff::Timestamp>,
    renewed: Option<jiff::Timestamp>,
    transitions: Option<i32>,
}

impl Record {
    fn of(lease: &Lease) -> Record {
        let spec = lease.spec.as_ref();
        Record {
            holder: holder(lease).map(str::to_string),
            duration: spec.and_then(|s| s.lease_duration_seconds),
            acquired: spec.and_then(|s| s.acquire_time.as_ref()).map(|t| t.0),
            renewed: spec.and_then(|s| s.renew_time.as_ref()).map(|t| t.0),
            transitions: spec.and_then(|s| s.lease_transitions),
        }
    }
}

/// What this replica last saw of the lease, and since when, on its own monotonic clock. The
/// lease's timestamps are never compared with the local wall clock: nodes' clocks may differ by
/// any amount, their rates barely (that is what the fence's margin is for).
#[derive(Clone, Debug)]
struct Seen {
    record: Record,
    since: Instant,
    /// The lease's own duration (its holder's setting).
    duration: Duration,
}

impl Seen {
    /// Folds in a read that returned `record` at `now`: an unchanged record keeps the instant it
    /// was first seen, a changed one (renewed, taken, released) starts the wait again.
    fn update(last: Option<Seen>, record: Record, duration: Duration, now: Instant) -> Seen {
        match last {
            Some(seen) if seen.record == record => seen,
            _ => Seen {
                record,
                since: now,
                duration,
            },
        }
    }

    /// Whether the lease may be taken at `now`: it names no holder (released), or it has not
    /// changed for its whole duration. Its holder renews long before then (and stops writing
    /// before then, see the fence), so an unchanged lease means the holder is gone.
    fn expired(&self, now: Instant) -> bool {
        self.record.holder.is_none() || now.saturating_duration_since(self.since) >= self.duration
    }
}

/// Runs for the life of the process: campaigns until leading, sends `true` on `leading`, then
/// renews. Returns `Err(Lost)` the moment leadership is lost and `Err(Fenced)` once the fence
/// has closed (the caller exits non-zero), and `Ok` after releasing the lease when `shutdown`
/// fires. `leader_election_master_status` in `metrics` says whether this replica leads.
pub async fn run(
    client: kube::Client,
    s: Settings,
    fence: Fence,
    metrics: &Metrics,
    leading: watch::Sender<bool>,
    shutdown: watch::Receiver<bool>,
) -> Result<(), Error> {
    let gauge = metrics
        .leader_election_master_status
        .with_label_values(&[&s.name]);
    gauge.set(0);
    let campaign = Campaign::new(client, &s, fence, gauge.clone(), leading);
    let result = match campaign {
        Ok(c) => lead(c, shutdown).await,
        Err(e) => Err(e),
    };
    // Whether it released the lease or lost it, this replica leads no more.
    gauge.set(0);
    result
}

/// The campaign and renewal loop of [`run`]: a round, then a pause, until shutdown.
async fn lead(mut c: Campaign<'_>, mut shutdown: watch::Receiver<bool>) -> Result<(), Error> {
    loop {
        if *shutdown.borrow() {
            break;
        }
        let pause = c.round().await?;
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = shutdown.changed() => break,
        }
    }
    c.step_down().await;
    Ok(())
}

/// One replica's campaign for the lease, from round to round.
struct Campaign<'a> {
    s: &'a Settings,
    fence: Fence,
    leases: Api<Lease>,
    lock: LeaseLock,
    /// How long after the start of a claim or renewal this replica surely still holds the
    /// lease: the lease less its margin.
    valid_for: Duration,
    led: bool,
    /// What this replica last saw of another's lease: the campaign's only clock.
    seen: Option<Seen>,
    gauge: IntGauge,
    leading: watch::Sender<bool>,
}

impl<'a> Campaign<'a> {
    fn new(
        client: kube::Client,
        s: &'a Settings,
        fence: Fence,
        gauge: IntGauge,
        leading: watch::Sender<bool>,
    ) -> Result<Campaign<'a>, Error> {
        // The Lease holds whole seconds: that is what other replicas wait out.
        let lease = Duration::from_secs(s.lease_duration.as_secs());
        let valid_for = lease - lease / MARGIN_DIVISOR;
        if valid_for <= s.renew_period {
            return Err(Error::Settings(s.lease_duration, s.renew_period));
        }
        let lock = LeaseLock::new(
            client.clone(),
            &s.namespace,
            LeaseLockParams {
                lease_name: s.name.clone(),
                holder_id: s.identity.clone(),
                lease_ttl: s.lease_duration,
            },
        );
        Ok(Campaign {
            s,
            fence,
            leases: Api::namespaced(client, &s.namespace),
            lock,
            valid_for,
            led: false,
            seen: None,
            gauge,
            leading,
        })
    }

    /// Claims the lease unless this replica leads, then renews it; returns how long to wait
    /// before the next round.
    async fn round(&mut self) -> Result<Duration, Error> {
        // Open until the first claim; from then on, closed means exit.
        self.fence.check().map_err(|e| self.fenced(e))?;
        if !self.led {
            let start = Instant::now();
            if !claimed(&self.leases, self.s, &mut self.seen).await {
                return Ok(self.s.renew_period);
            }
            // Our claim (or create) changes the lease after `start`: every other replica waits a
            // whole lease from when it sees that change.
            self.extend_from(start)?;
        }
        self.renew().await?;
        // Wake when the fence closes, to exit at once.
        Ok(match self.fence.remaining() {
            Some(left) => self.s.renew_period.min(left),
            None => self.s.renew_period,
        })
    }

    /// One renewal through the crate; the first that names us makes this replica the leader.
    async fn renew(&mut self) -> Result<(), Error> {
        // The crate runs only now, on a lease this replica has just claimed or holds, and only
        // while the fence is open: no other replica can have taken the lease by then (each
        // waits a whole lease after our claim or renewal, the fence closes after three
        // quarters), so the crate finds us holder and renews. Its own expiry judgement, which
        // compares `renewTime` with the wall clock and could overwrite another holder with a
        // merge patch, is never reached; past the fence its requests are refused.
        let start = Instant::now();
        let s = self.s;
        match renew(&self.lock, &self.fence)
            .await
            .map_err(|e| self.fenced(e))?
        {
            Ok(LeaseLockResult::Acquired(lease)) if holder(&lease) == Some(s.identity.as_str()) => {
                self.extend_from(start)?;
                if !self.led {
                    tracing::info!(lease = %s.name, identity = %s.identity, "became leader");
                    self.gauge.set(1);
                    self.led = true;
                    let _ = self.leading.send(true);
                }
            }
            Ok(result) if self.led => {
                let who = result.lease().and_then(holder).unwrap_or("nobody");
                let why = format!("lease now held by {who}");
                return Err(Error::Lost(s.name.clone(), why));
            }
            Ok(_) => {}
            // The next round retries; the fence closes if none succeeds in time.
            Err(e) => tracing::warn!(error = %e, "leader election: renewal failed"),
        }
        Ok(())
    }

    /// A claim or renewal that started at `start` succeeded: the fence stays open until the
    /// lease, less its margin, has passed from then.
    fn extend_from(&self, start: Instant) -> Result<(), Error> {
        self.fence
            .extend(start + self.valid_for)
            .map_err(|e| self.fenced(e))
    }

    fn fenced(&self, e: fence::Error) -> Error {
        Error::Fenced(self.s.name.clone(), e)
    }

    /// Releases the lease, if this replica holds it, so a standby takes over at once.
    async fn step_down(&self) {
        if self.led {
            match self.lock.step_down().await {
                Err(e) => tracing::warn!(error = %e, "could not release the lease"),
                Ok(_) => tracing::info!(lease = %self.s.name, "released the lease"),
            }
        }
    }
}

/// Whether this replica holds the lease now (claimed or created); a failure to read or claim
/// it is logged and counts as no.
async fn claimed(leases: &Api<Lease>, s: &Settings, seen: &mut Option<Seen>) -> bool {
    claim(leases, s, seen).await.unwrap_or_else(|e| {
        tracing::warn!(error = %e, "leader election: could not read or claim the lease");
        false
    })
}

/// One renewal through the crate. It may not run past the fence: past it, the crate's merge
/// patch could overwrite a new holder's lease (`Err`: give up leading).
async fn renew(
    lock: &LeaseLock,
    fence: &Fence,
) -> Result<Result<LeaseLockResult, kube_leader_election::Error>, fence::Error> {
    let renewal = lock.try_acquire_or_renew();
    match fence.remaining() {
        Some(left) => tokio::time::timeout(left, renewal).await.map_err(|_| {
            fence.check().err().unwrap_or(fence::Error {
                closed_for: Duration::ZERO,
            })
        }),
        None => Ok(renewal.await),
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

/// Claims the lease if it is free, expired (see [`Seen`]) or already ours, by a replace that
/// fails with 409 if anyone changed it since we read it. Ours too is claimed anew: that write
/// is what the fence is measured from. `Ok(false)`: another replica holds it.
async fn claim(
    leases: &Api<Lease>,
    s: &Settings,
    seen: &mut Option<Seen>,
) -> Result<bool, kube::Error> {
    let Some(mut lease) = leases.get_opt(&s.name).await? else {
        // Absent: created here, naming us, so a replica that loses the race (409) never opens
        // its fence; left to the crate, every replica starting together believed it had
        // claimed the lease, and each loser's fence then closed a lease later and it exited.
        return won(leases.create(&PostParams::default(), &fresh(s)).await);
    };
    // Taken after the answer: the holder's last renewal happened before it.
    let now = Instant::now();
    let record = Record::of(&lease);
    let ours = record.holder.as_deref() == Some(s.identity.as_str());
    let spec = lease.spec.get_or_insert_with(Default::default);
    let duration = spec
        .lease_duration_seconds
        .and_then(|secs| u64::try_from(secs).ok())
        .map_or(s.lease_duration, Duration::from_secs);
    let next = Seen::update(seen.take(), record, duration, now);
    let last = seen.insert(next);
    if !ours && !last.expired(now) {
        return Ok(false);
    }
    // For people and other tools only: no replica of this operator reads these timestamps.
    let stamp = MicroTime(jiff::Timestamp::now());
    if !ours {
        spec.holder_identity = Some(s.identity.clone());
        spec.acquire_time = Some(stamp.clone());
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
    }
    spec.renew_time = Some(stamp);
    spec.lease_duration_seconds = Some(lease_seconds(s));
    won(leases
        .replace(&s.name, &PostParams::default(), &lease)
        .await)
}

/// A new Lease naming this replica as holder.
fn fresh(s: &Settings) -> Lease {
    let stamp = MicroTime(jiff::Timestamp::now());
    Lease {
        metadata: kube::api::ObjectMeta {
            name: Some(s.name.clone()),
            namespace: Some(s.namespace.clone()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(s.identity.clone()),
            acquire_time: Some(stamp.clone()),
            renew_time: Some(stamp),
            lease_duration_seconds: Some(lease_seconds(s)),
            lease_transitions: Some(0),
            ..Default::default()
        }),
    }
}

fn lease_seconds(s: &Settings) -> i32 {
    s.lease_duration.as_secs().try_into().unwrap_or(i32::MAX)
}

/// Whether a claim's compare-and-swap write won: a 409 means another replica wrote first.
fn won(written: Result<Lease, kube::Error>) -> Result<bool, kube::Error> {
    match written {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record held by `holder`, renewed `renewal` seconds after the epoch.
    fn record(holder: Option<&str>, renewal: i64) -> Record {
        let at = |secs| jiff::Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_secs(secs);
        Record {
            holder: holder.map(str::to_string),
            duration: Some(4),
            acquired: Some(at(0)),
            renewed: Some(at(renewal)),
            transitions: Some(1),
        }
    }

    const LEASE: Duration = Duration::from_secs(4);

    #[test]
    fn a_held_lease_expires_a_whole_lease_after_it_was_last_seen_to_change() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        // The first read starts the clock, however old the lease's renewTime looks.
        let seen = Seen::update(None, record(Some("a"), 1), LEASE, at(0));
        assert!(!seen.expired(at(0)));
        assert!(!seen.expired(at(3_999)));
        // Unchanged reads keep the instant it was first seen.
        let seen = Seen::update(Some(seen), record(Some("a"), 1), LEASE, at(3_000));
        assert!(!seen.expired(at(3_999)));
        assert!(seen.expired(at(4_000)));
        // A renewal (a new renewTime) starts the wait again.
        let renewed = Seen::update(Some(seen.clone()), record(Some("a"), 2), LEASE, at(3_500));
        assert!(!renewed.expired(at(4_000)));
        assert!(!renewed.expired(at(7_499)));
        assert!(renewed.expired(at(7_500)));
        // So does every other field of the record alone.
        let changes: [fn(&mut Record); 4] = [
            |r| r.holder = Some("b".into()),
            |r| r.duration = Some(15),
            |r| r.acquired = None,
            |r| r.transitions = Some(2),
        ];
        for change in changes {
            let mut changed = record(Some("a"), 1);
            change(&mut changed);
            let changed = Seen::update(Some(seen.clone()), changed, LEASE, at(3_500));
            assert!(!changed.expired(at(4_000)), "{:?}", changed.record);
        }
        // The lease's own duration counts, not ours.
        let long = Seen::update(None, record(Some("a"), 1), Duration::from_secs(15), at(0));
        assert!(!long.expired(at(14_999)));
        assert!(long.expired(at(15_000)));
        // A clock that reads earlier than the observation (never, for Instant) is no expiry.
        assert!(!long.expired(t0));
    }

    /// client-go's rule: only the leader election record counts. Someone who may label or
    /// annotate the Lease (a new resourceVersion on every write) must not keep a dead leader's
    /// lease alive by doing so in a loop.
    #[test]
    fn a_relabelled_lease_does_not_postpone_the_takeover() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut lease = Lease::default();
        lease.metadata.resource_version = Some("1".into());
        lease.spec = Some(LeaseSpec {
            holder_identity: Some("a".into()),
            lease_duration_seconds: Some(4),
            renew_time: Some(MicroTime(jiff::Timestamp::UNIX_EPOCH)),
            ..Default::default()
        });
        let mut seen = Seen::update(None, Record::of(&lease), LEASE, at(0));
        for (n, ms) in [1_000, 2_000, 3_000, 3_900].into_iter().enumerate() {
            lease.metadata.resource_version = Some((n + 2).to_string());
            lease
                .metadata
                .labels
                .get_or_insert_with(Default::default)
                .insert("touched".into(), n.to_string());
            seen = Seen::update(Some(seen), Record::of(&lease), LEASE, at(ms));
        }
        assert!(
            seen.expired(at(4_000)),
            "taken a lease after the last renewal"
        );
    }

    #[test]
    fn a_released_lease_may_be_taken_at_once() {
        let t0 = Instant::now();
        let free = Seen::update(None, record(None, 1), LEASE, t0);
        assert!(free.expired(t0));
        let lease = Lease {
            spec: Some(LeaseSpec {
                holder_identity: Some(String::new()),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(Record::of(&lease).holder, None);
    }
}
