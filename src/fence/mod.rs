//! Fencing for leader election. A leader frozen (SIGSTOP, a paused VM, a stalled node) or
//! cut off past its lease may wake up after a standby has taken over; from then on, anything it
//! sends races the new leader. The lease loop records until when the lease is surely still ours,
//! on the monotonic clock (which keeps running while the process is stopped), and every byte a
//! client writes to a connection is checked against it at the moment it is written ([`conn`],
//! under both the Kubernetes and the AWS client); earlier checks (`runtime::client`,
//! `aws::fence`) only refuse sooner and more clearly. A closed fence never reopens: the process
//! exits.
//!
//! This module depends on nothing else in the crate; runtime, reconcile and aws depend on it.

pub mod conn;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Shared by the lease loop (which extends it) and every client (which checks it). Cloning
/// shares it.
#[derive(Clone, Debug, Default)]
pub struct Fence(Option<Arc<State>>);

#[derive(Debug)]
struct State {
    base: Instant,
    /// Nanoseconds after `base` at which the fence closes; `CAMPAIGNING` until the first lease.
    until: AtomicU64,
    /// Set by the first check that finds the fence closed: a renewal finishing later (its
    /// thread preempted or the process frozen) must not reopen it.
    closed: AtomicBool,
}

/// Before the first lease, only the lease loop writes, and its claim is a compare-and-swap.
const CAMPAIGNING: u64 = 0;

/// The fence is closed: this replica's lease may belong to another replica now.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
#[error(
    "fenced: the lease may have passed to another replica {closed_for:?} ago; request not sent"
)]
pub struct Error {
    pub closed_for: Duration,
}

impl Fence {
    /// No leader election: never closes.
    pub fn disabled() -> Fence {
        Fence(None)
    }

    /// Leader election: open while campaigning, then until the time the lease loop records.
    pub fn leader_elected() -> Fence {
        Fence(Some(Arc::new(State {
            base: Instant::now(),
            until: AtomicU64::new(CAMPAIGNING),
            closed: AtomicBool::new(false),
        })))
    }

    /// Keeps the fence open until `until` (a renewal's start + what is surely left of the
    /// lease). Never shortens it, and fails if it has already closed.
    pub fn extend(&self, until: Instant) -> Result<(), Error> {
        let Some(s) = &self.0 else { return Ok(()) };
        self.check()?;
        let nanos = nanos(until.saturating_duration_since(s.base)).max(1);
        s.until.fetch_max(nanos, Ordering::SeqCst);
        // Closed by another thread meanwhile: it stays closed.
        self.check()
    }

    /// `Err` once the fence has closed; always `Ok` without leader election or before the
    /// first lease.
    pub fn check(&self) -> Result<(), Error> {
        let Some(s) = &self.0 else { return Ok(()) };
        let until = s.until.load(Ordering::SeqCst);
        let now = nanos(s.base.elapsed());
        if until != CAMPAIGNING && now >= until {
            s.closed.store(true, Ordering::SeqCst);
        }
        if s.closed.load(Ordering::SeqCst) {
            return Err(Error {
                closed_for: Duration::from_nanos(now.saturating_sub(until)),
            });
        }
        Ok(())
    }

    /// Time left before the fence closes; `None` without leader election or before the first
    /// lease.
    pub fn remaining(&self) -> Option<Duration> {
        let s = self.0.as_ref()?;
        let until = s.until.load(Ordering::SeqCst);
        if until == CAMPAIGNING {
            return None;
        }
        if s.closed.load(Ordering::SeqCst) {
            return Some(Duration::ZERO);
        }
        Some(Duration::from_nanos(
            until.saturating_sub(nanos(s.base.elapsed())),
        ))
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_leader_election_the_fence_never_closes() {
        let f = Fence::disabled();
        assert_eq!(f.check(), Ok(()));
        assert_eq!(f.extend(Instant::now()), Ok(()));
        assert_eq!(f.check(), Ok(()));
        assert_eq!(f.remaining(), None);
    }

    #[test]
    fn the_fence_is_open_until_the_recorded_instant_and_then_stays_closed() {
        let f = Fence::leader_elected();
        assert_eq!(f.check(), Ok(()), "campaigning");
        assert_eq!(f.remaining(), None);

        let hour = Duration::from_secs(3600);
        f.extend(Instant::now() + hour).unwrap();
        assert_eq!(f.check(), Ok(()));
        let left = f.remaining().unwrap();
        assert!(
            left > hour - Duration::from_secs(5) && left <= hour,
            "{left:?}"
        );
        // A late renewal never shortens the fence.
        f.extend(Instant::now()).unwrap();
        assert!(f.remaining().unwrap() > hour - Duration::from_secs(5));

        let f = Fence::leader_elected();
        f.extend(Instant::now() + Duration::from_millis(20))
            .unwrap();
        let shared = f.clone();
        std::thread::sleep(Duration::from_millis(30));
        let closed = shared.check().unwrap_err();
        assert!(closed.closed_for >= Duration::from_millis(10), "{closed:?}");
        assert_eq!(f.remaining(), Some(Duration::ZERO));
        // Closed for good: a renewal that completes now does not reopen it.
        assert!(
            f.extend(Instant::now() + Duration::from_secs(3600))
                .is_err()
        );
        assert!(f.check().is_err());
    }
}
