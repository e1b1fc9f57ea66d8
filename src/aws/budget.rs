//! A budget of AWS writes per namespace: a token bucket each, so one namespace's create/delete
//! loops, rotations or floods cannot spend the account's S3 and IAM control-plane rate for the
//! others.
//!
//! A reconcile pass runs inside [`Budgets::pass`]; [`super::Aws::call`] asks [`spend`] before
//! each write. The first write of a pass needs a whole token; once a pass has written, its
//! remaining writes go through and may leave the namespace in debt, so a pass never stops half
//! way through a sequence that belongs together (a key created and not yet stored), and the debt
//! delays the namespace's next passes instead. Calls outside a pass (start-up) are not counted.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The default writes per second of a namespace (`--namespace-aws-write-rate`): IAM's and S3's
/// control planes take a few tens of writes a second per account, so a handful of busy
/// namespaces together stay within them.
pub const DEFAULT_RATE: f64 = 10.0;
/// The default burst (`--namespace-aws-write-burst`): a team applying a few dozen objects at
/// once is never held back.
pub const DEFAULT_BURST: u32 = 200;

/// Writes per second and burst per namespace; a rate of 0 means no budget.
#[derive(Debug)]
pub struct Budgets {
    rate: f64,
    burst: f64,
    buckets: Mutex<HashMap<String, Tokens>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reported {
    No,
    Yes,
}

#[derive(Debug)]
struct Tokens {
    left: f64,
    at: Instant,
    /// When the next waiting pass of the namespace gets its turn (see [`Budgets::defer`]).
    next_turn: Instant,
    /// Refused a write since the last one it allowed, and whether that was reported: once per
    /// episode, not per pass.
    exhausted: Option<Reported>,
}

tokio::task_local! {
    static PASS: Pass;
}

struct Pass {
    budgets: std::sync::Arc<Budgets>,
    namespace: String,
    writing: AtomicBool,
}

/// The namespace has no write left: the pass may try again after `wait`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exhausted {
    pub wait: Duration,
}

impl Budgets {
    pub fn new(rate: f64, burst: u32) -> Budgets {
        Budgets {
            rate: rate.max(0.0),
            burst: f64::from(burst.max(1)),
            buckets: Mutex::default(),
        }
    }

    /// No budget at all: every write goes through.
    pub fn unlimited() -> Budgets {
        Budgets::new(0.0, 1)
    }

    pub fn rate(&self) -> f64 {
        self.rate
    }

    pub fn burst(&self) -> u32 {
        self.burst as u32
    }

    /// Runs `pass` with the writes it makes charged to `namespace`.
    pub async fn pass<F: Future>(
        self: &std::sync::Arc<Self>,
        namespace: String,
        pass: F,
    ) -> F::Output {
        let pass_state = Pass {
            budgets: self.clone(),
            namespace,
            writing: AtomicBool::new(false),
        };
        PASS.scope(pass_state, pass).await
    }

    /// `None` if `namespace` may write now; else how long its next pass waits. Waiting passes
    /// line up a write apart, so a namespace in debt wakes its objects one at a time as its
    /// budget refills instead of all at once.
    pub fn defer(&self, namespace: &str) -> Option<Duration> {
        if self.rate == 0.0 {
            return None;
        }
        let now = Instant::now();
        let mut buckets = self.buckets.lock().expect("budget map poisoned");
        let t = self.refilled(&mut buckets, namespace, now);
        if t.left >= 1.0 {
            return None;
        }
        let turn = (now + self.until_one(t.left)).max(t.next_turn);
        t.next_turn = turn + Duration::from_secs_f64(1.0 / self.rate);
        Some(turn - now)
    }

    /// Whether `namespace`'s budget ran out and no report said so yet (one per episode).
    pub fn report(&self, namespace: &str) -> bool {
        let mut buckets = self.buckets.lock().expect("budget map poisoned");
        match buckets.get_mut(namespace) {
            Some(t) if t.exhausted == Some(Reported::No) => {
                t.exhausted = Some(Reported::Yes);
                true
            }
            _ => false,
        }
    }

    fn until_one(&self, left: f64) -> Duration {
        Duration::from_secs_f64((1.0 - left) / self.rate)
    }

    fn refilled<'a>(
        &self,
        buckets: &'a mut HashMap<String, Tokens>,
        namespace: &str,
        now: Instant,
    ) -> &'a mut Tokens {
        let t = buckets.entry(namespace.to_string()).or_insert(Tokens {
            left: self.burst,
            at: now,
            next_turn: now,
            exhausted: None,
        });
        let elapsed = now.saturating_duration_since(t.at).as_secs_f64();
        t.left = (t.left + elapsed * self.rate).min(self.burst);
        t.at = now;
        t
    }

    /// Takes one write from `namespace`. `first`: the pass has not written yet, so it needs a
    /// whole token; later writes of a pass always go through.
    fn take(&self, namespace: &str, first: bool, now: Instant) -> Result<(), Exhausted> {
        if self.rate == 0.0 {
            return Ok(());
        }
        let mut buckets = self.buckets.lock().expect("budget map poisoned");
        let t = self.refilled(&mut buckets, namespace, now);
        if first && t.left < 1.0 {
            t.exhausted.get_or_insert(Reported::No);
            let wait = self.until_one(t.left);
            return Err(Exhausted { wait });
        }
        t.left -= 1.0;
        t.exhausted = None;
        Ok(())
    }
}

/// Charges one write to the current pass's namespace (see the module comment).
pub(super) fn spend() -> Result<(), Exhausted> {
    PASS.try_with(|p| {
        let first = !p.writing.load(Ordering::SeqCst);
        p.budgets.take(&p.namespace, first, Instant::now())?;
        p.writing.store(true, Ordering::SeqCst);
        Ok(())
    })
    .unwrap_or(Ok(()))
}

/// Whether an AWS operation changes something: everything but reads (EKS's are `Describe`).
pub(super) fn is_write(operation: &str) -> bool {
    !["Get", "List", "Head", "Describe"]
        .iter()
        .any(|read| operation.starts_with(read))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_namespace_spends_its_burst_then_its_rate_and_others_keep_theirs() {
        let b = Budgets::new(2.0, 3);
        let t0 = Instant::now();
        for _ in 0..3 {
            assert_eq!(b.take("flood", true, t0), Ok(()));
        }
        let refused = b.take("flood", true, t0).unwrap_err();
        assert_eq!(refused.wait, Duration::from_millis(500), "one token at 2/s");
        // Another namespace is untouched by the flood.
        assert_eq!(b.take("quiet", true, t0), Ok(()));
        // Half a second later one token is back.
        let later = t0 + Duration::from_millis(500);
        assert_eq!(b.take("flood", true, later), Ok(()));
        assert!(b.take("flood", true, later).is_err());
        // A pass that has written finishes, leaving debt that its next pass waits out.
        assert_eq!(b.take("flood", false, later), Ok(()));
        assert_eq!(
            b.take("flood", true, later).unwrap_err().wait,
            Duration::from_secs(1)
        );
        // The refill never goes past the burst.
        let much_later = later + Duration::from_secs(3600);
        for _ in 0..3 {
            assert_eq!(b.take("flood", true, much_later), Ok(()));
        }
        assert!(b.take("flood", true, much_later).is_err());
    }

    #[test]
    fn exhaustion_is_reported_once_per_episode() {
        let b = Budgets::new(1.0, 1);
        let t0 = Instant::now();
        assert!(!b.report("ns"), "nothing spent, nothing to report");
        b.take("ns", true, t0).unwrap();
        assert!(!b.report("ns"), "spent, not refused");
        assert!(b.take("ns", true, t0).is_err());
        assert!(b.report("ns"));
        assert!(!b.report("ns"), "said once");
        b.take("ns", true, t0 + Duration::from_secs(1)).unwrap();
        assert!(b.take("ns", true, t0 + Duration::from_secs(1)).is_err());
        assert!(b.report("ns"), "a new episode after a write went through");
    }

    #[tokio::test]
    async fn a_pass_is_charged_to_its_namespace_and_stops_only_before_its_first_write() {
        let b = Arc::new(Budgets::new(0.001, 2));
        let spent = b
            .pass("a".into(), async {
                // A pass that has started writing finishes: three writes on a burst of two.
                (spend(), spend(), spend())
            })
            .await;
        assert_eq!(spent, (Ok(()), Ok(()), Ok(())));
        let next = b.pass("a".into(), async { spend() }).await;
        assert!(
            next.is_err(),
            "in debt: the next pass may not start writing"
        );
        assert_eq!(b.defer("b"), None);
        // Passes waiting in debt line up a write apart (1,000 s at 0.001/s).
        let (first, second) = (b.defer("a").unwrap(), b.defer("a").unwrap());
        let apart = second - first;
        assert!(
            apart > Duration::from_secs(999) && apart <= Duration::from_secs(1000),
            "{apart:?}"
        );
        assert_eq!(b.pass("b".into(), async { spend() }).await, Ok(()));
        // Outside a pass nothing is charged.
        assert_eq!(spend(), Ok(()));
        assert!(Budgets::unlimited().defer("a").is_none());
    }

    #[test]
    fn reads_are_not_writes() {
        for read in [
            "GetBucketPolicy",
            "ListAccessKeys",
            "HeadBucket",
            "GetUser",
            "DescribePodIdentityAssociation",
        ] {
            assert!(!is_write(read), "{read}");
        }
        for write in [
            "CreateBucket",
            "PutBucketPolicy",
            "DeleteObjects",
            "TagUser",
            "UpdatePodIdentityAssociation",
        ] {
            assert!(is_write(write), "{write}");
        }
    }
}
