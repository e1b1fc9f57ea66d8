//! Budgets of AWS calls per namespace: a token bucket of writes and one of reads each, so one
//! namespace's create/delete loops, rotations, annotation floods or forced passes cannot spend
//! the account's S3, IAM and EKS control-plane rate for the others. AWS throttles per account,
//! so the budgets are per account and namespace ([`Key`]): a namespace whose objects live in two
//! accounts has a budget in each, and a flood in one neither delays its objects in the other
//! nor spends the operator's own account's budget.
//!
//! A reconcile pass runs inside [`Budgets::pass`]; [`super::Aws::call`] asks [`spend`] before
//! each write and charges each read with [`spend_read`]. The first write of a pass needs a whole
//! token; once a pass has written, its remaining writes go through and may leave the namespace
//! in debt, so a pass never stops half way through a sequence that belongs together (a key
//! created and not yet stored), and the debt delays the namespace's next passes instead. Reads
//! are never refused inside a pass: a pass starts only with a read token left, which it takes
//! as its first read ([`Budgets::defer`]), and what it reads past that is debt its namespace's
//! next passes wait out. Calls outside a pass (start-up, the drift-event queue) are not counted.

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
/// The default reads per second of a namespace (`--namespace-aws-read-rate`). A pass reads
/// about four times (a Bucket: tags, public access block, encryption, policy; an access: its
/// identity, policy and keys or association), so 20 reads a second serve a namespace of 3,000
/// objects at the 10-minute resync, five passes a second, while a handful of flooding
/// namespaces together stay below the few tens of calls a second at which IAM and S3's bucket
/// configuration calls start throttling an account.
pub const DEFAULT_READ_RATE: f64 = 20.0;
/// The default read burst (`--namespace-aws-read-burst`): a team applying 100 objects at once
/// is never held back.
pub const DEFAULT_READ_BURST: u32 = 400;

/// Whose budget a call spends: a namespace's, in one account.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    /// The AWSAccount (`None`: the operator's own account).
    pub account: Option<String>,
    pub namespace: String,
}

impl Key {
    pub fn new(account: Option<&str>, namespace: &str) -> Key {
        Key {
            account: account.map(str::to_string),
            namespace: namespace.to_string(),
        }
    }

    /// `namespace`'s budget in the operator's own account.
    pub fn home(namespace: &str) -> Key {
        Key::new(None, namespace)
    }

    /// The account's label value: the AWSAccount's name, empty for the operator's own (as
    /// `s3_operator_managed_objects`' `account`).
    pub fn account_label(&self) -> &str {
        self.account.as_deref().unwrap_or_default()
    }
}

impl std::fmt::Display for Key {
    /// "namespace a", or "namespace a in AWSAccount b" outside the operator's own account.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "namespace {}", self.namespace)?;
        match &self.account {
            Some(account) => write!(f, " in AWSAccount {account}"),
            None => Ok(()),
        }
    }
}

/// Which of a namespace's budgets a deferred pass waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Writes,
    Reads,
}

impl Kind {
    /// The event reason that says the budget ran out.
    pub fn reason(self) -> &'static str {
        match self {
            Kind::Writes => "WriteBudgetExhausted",
            Kind::Reads => "ReadBudgetExhausted",
        }
    }

    pub fn calls(self) -> &'static str {
        match self {
            Kind::Writes => "writes",
            Kind::Reads => "reads",
        }
    }
}

/// Each namespace's budgets of AWS writes and reads, in each account.
#[derive(Debug)]
pub struct Budgets {
    writes: Budget,
    reads: Budget,
}

/// Calls per second and burst per namespace and account, of one kind; a rate of 0 means no
/// budget.
#[derive(Debug)]
pub struct Budget {
    rate: f64,
    burst: f64,
    buckets: Mutex<HashMap<Key, Tokens>>,
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
    /// When the next waiting pass of the namespace gets its turn (see [`Budget::defer`]).
    next_turn: Instant,
    /// Refused a call since the last one it allowed, and whether that was reported: once per
    /// episode, not per pass.
    exhausted: Option<Reported>,
}

tokio::task_local! {
    static PASS: Pass;
}

struct Pass {
    budgets: std::sync::Arc<Budgets>,
    key: Key,
    writing: AtomicBool,
    /// Has read: its first read was paid when it started ([`Budgets::defer`]).
    reading: AtomicBool,
}

/// The namespace has no write left: the pass may try again after `wait`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exhausted {
    pub wait: Duration,
}

impl Budgets {
    /// `writes` and `reads`: calls per second and burst of each namespace.
    pub fn new(writes: (f64, u32), reads: (f64, u32)) -> Budgets {
        Budgets {
            writes: Budget::new(writes.0, writes.1),
            reads: Budget::new(reads.0, reads.1),
        }
    }

    /// No budget at all: every call goes through.
    pub fn unlimited() -> Budgets {
        Budgets::new((0.0, 1), (0.0, 1))
    }

    pub fn of(&self, kind: Kind) -> &Budget {
        match kind {
            Kind::Writes => &self.writes,
            Kind::Reads => &self.reads,
        }
    }

    /// Runs `pass` with the calls it makes charged to `key`.
    pub async fn pass<F: Future>(self: &std::sync::Arc<Self>, key: Key, pass: F) -> F::Output {
        let pass_state = Pass {
            budgets: self.clone(),
            key,
            writing: AtomicBool::new(false),
            reading: AtomicBool::new(false),
        };
        PASS.scope(pass_state, pass).await
    }

    /// `None` if a pass charged to `key` may start now (a write and a read left), which then
    /// pays its first read (so passes woken together start only as far as the reads left go);
    /// else which budget it waits for, and how long.
    pub fn defer(&self, key: &Key) -> Option<(Kind, Duration)> {
        // A pass deferred for writes may need none (the echo of a pass that spent the burst):
        // only a write refused inside a pass says the namespace ran out. Reads are never
        // refused inside a pass, so a deferral is how their budget runs out.
        let writes = self.writes.defer(key, false).map(|w| (Kind::Writes, w));
        let reads = self.reads.defer(key, true).map(|w| (Kind::Reads, w));
        match (writes, reads) {
            (Some(w), Some(r)) => Some(if r.1 > w.1 { r } else { w }),
            (None, None) => {
                let _ = self.reads.take(key, false, Instant::now());
                None
            }
            (w, r) => w.or(r),
        }
    }
}

impl Budget {
    pub fn new(rate: f64, burst: u32) -> Budget {
        Budget {
            rate: rate.max(0.0),
            burst: f64::from(burst.max(1)),
            buckets: Mutex::default(),
        }
    }

    pub fn rate(&self) -> f64 {
        self.rate
    }

    pub fn burst(&self) -> u32 {
        self.burst as u32
    }

    /// `None` if `key` has a whole token now; else how long its next pass waits. Waiting
    /// passes line up a call apart, so a namespace in debt wakes its objects one at a time as
    /// its budget refills instead of all at once; the line reaches no further than one burst's
    /// refill, so a flood of wakes cannot push its own objects' turns out without end.
    /// `exhausts`: the deferral itself starts an episode to report.
    fn defer(&self, key: &Key, exhausts: bool) -> Option<Duration> {
        if self.rate == 0.0 {
            return None;
        }
        let now = Instant::now();
        let mut buckets = self.buckets.lock().expect("budget map poisoned");
        let t = self.refilled(&mut buckets, key, now);
        if t.left >= 1.0 {
            return None;
        }
        if exhausts {
            t.exhausted.get_or_insert(Reported::No);
        }
        let first = now + self.until_one(t.left);
        let last = first + Duration::from_secs_f64(self.burst / self.rate);
        let turn = first.max(t.next_turn).min(last);
        t.next_turn = turn + Duration::from_secs_f64(1.0 / self.rate);
        Some(turn - now)
    }

    /// Whether `key`'s budget ran out and no report said so yet (one per episode).
    pub fn report(&self, key: &Key) -> bool {
        let mut buckets = self.buckets.lock().expect("budget map poisoned");
        match buckets.get_mut(key) {
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
        buckets: &'a mut HashMap<Key, Tokens>,
        key: &Key,
        now: Instant,
    ) -> &'a mut Tokens {
        let t = buckets.entry(key.clone()).or_insert(Tokens {
            left: self.burst,
            at: now,
            next_turn: now,
            exhausted: None,
        });
        let elapsed = now.saturating_duration_since(t.at).as_secs_f64();
        t.left = (t.left + elapsed * self.rate).min(self.burst);
        t.at = now;
        if t.left >= self.burst {
            // Refilled whole: the episode is over.
            t.exhausted = None;
        }
        t
    }

    /// Takes one call from `key`. `first`: the pass has not made such a call yet, so it
    /// needs a whole token; later calls of a pass always go through.
    fn take(&self, key: &Key, first: bool, now: Instant) -> Result<(), Exhausted> {
        if self.rate == 0.0 {
            return Ok(());
        }
        let mut buckets = self.buckets.lock().expect("budget map poisoned");
        let t = self.refilled(&mut buckets, key, now);
        if first && t.left < 1.0 {
            t.exhausted.get_or_insert(Reported::No);
            let wait = self.until_one(t.left);
            return Err(Exhausted { wait });
        }
        t.left -= 1.0;
        if first {
            t.exhausted = None;
        }
        Ok(())
    }
}

/// Charges one write to the current pass's namespace and account (see the module comment).
pub(super) fn spend() -> Result<(), Exhausted> {
    PASS.try_with(|p| {
        let first = !p.writing.load(Ordering::SeqCst);
        p.budgets.writes.take(&p.key, first, Instant::now())?;
        p.writing.store(true, Ordering::SeqCst);
        Ok(())
    })
    .unwrap_or(Ok(()))
}

/// Charges one read to the current pass's namespace and account, but the first (paid when the pass
/// started): never refused, it may leave the namespace in debt.
pub(super) fn spend_read() {
    let _ = PASS.try_with(|p| {
        if p.reading.swap(true, Ordering::SeqCst) {
            let _ = p.budgets.reads.take(&p.key, false, Instant::now());
        }
    });
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

    /// `namespace`'s budget in the operator's own account.
    fn k(namespace: &str) -> Key {
        Key::home(namespace)
    }

    #[test]
    fn a_namespace_spends_its_burst_then_its_rate_and_others_keep_theirs() {
        let b = Budget::new(2.0, 3);
        let t0 = Instant::now();
        for _ in 0..3 {
            assert_eq!(b.take(&k("flood"), true, t0), Ok(()));
        }
        let refused = b.take(&k("flood"), true, t0).unwrap_err();
        assert_eq!(refused.wait, Duration::from_millis(500), "one token at 2/s");
        // Another namespace is untouched by the flood.
        assert_eq!(b.take(&k("quiet"), true, t0), Ok(()));
        // Half a second later one token is back.
        let later = t0 + Duration::from_millis(500);
        assert_eq!(b.take(&k("flood"), true, later), Ok(()));
        assert!(b.take(&k("flood"), true, later).is_err());
        // A pass that has written finishes, leaving debt that its next pass waits out.
        assert_eq!(b.take(&k("flood"), false, later), Ok(()));
        assert_eq!(
            b.take(&k("flood"), true, later).unwrap_err().wait,
            Duration::from_secs(1)
        );
        // The refill never goes past the burst.
        let much_later = later + Duration::from_secs(3600);
        for _ in 0..3 {
            assert_eq!(b.take(&k("flood"), true, much_later), Ok(()));
        }
        assert!(b.take(&k("flood"), true, much_later).is_err());
    }

    #[test]
    fn exhaustion_is_reported_once_per_episode() {
        let b = Budget::new(1.0, 1);
        let t0 = Instant::now();
        assert!(!b.report(&k("ns")), "nothing spent, nothing to report");
        b.take(&k("ns"), true, t0).unwrap();
        assert!(!b.report(&k("ns")), "spent, not refused");
        assert!(b.take(&k("ns"), true, t0).is_err());
        assert!(b.report(&k("ns")));
        assert!(!b.report(&k("ns")), "said once");
        b.take(&k("ns"), true, t0 + Duration::from_secs(1)).unwrap();
        assert!(b.take(&k("ns"), true, t0 + Duration::from_secs(1)).is_err());
        assert!(
            b.report(&k("ns")),
            "a new episode after a write went through"
        );
    }

    #[tokio::test]
    async fn a_pass_is_charged_to_its_namespace_and_stops_only_before_its_first_write() {
        let b = Arc::new(Budgets::new((0.001, 2), (0.0, 1)));
        let spent = b
            .pass(k("a"), async {
                // A pass that has started writing finishes: three writes on a burst of two.
                (spend(), spend(), spend())
            })
            .await;
        assert_eq!(spent, (Ok(()), Ok(()), Ok(())));
        let next = b.pass(k("a"), async { spend() }).await;
        assert!(
            next.is_err(),
            "in debt: the next pass may not start writing"
        );
        assert_eq!(b.defer(&k("b")), None);
        // "c" spends its whole burst: its next pass waits, but no write was refused, so it
        // did not run out (nothing to report).
        let both = b.pass(k("c"), async { (spend(), spend()) }).await;
        assert_eq!(both, (Ok(()), Ok(())));
        assert!(b.defer(&k("c")).is_some());
        assert!(
            !b.of(Kind::Writes).report(&k("c")),
            "a deferral alone is no refusal"
        );
        // Passes waiting in debt line up a write apart (1,000 s at 0.001/s).
        let (first, second) = (b.defer(&k("a")).unwrap(), b.defer(&k("a")).unwrap());
        assert_eq!((first.0, second.0), (Kind::Writes, Kind::Writes));
        let (first, second) = (first.1, second.1);
        let apart = second - first;
        assert!(
            apart > Duration::from_secs(999) && apart <= Duration::from_secs(1000),
            "{apart:?}"
        );
        assert_eq!(b.pass(k("b"), async { spend() }).await, Ok(()));
        // Outside a pass nothing is charged.
        assert_eq!(spend(), Ok(()));
        assert!(Budgets::unlimited().defer(&k("a")).is_none());
    }

    /// Reads are charged per call and never refused inside a pass; a namespace whose reads
    /// ran out starts no pass (it waits, the other namespaces do not), and the wait is the
    /// read budget's, said once per episode.
    #[tokio::test]
    async fn reads_are_charged_per_call_and_defer_the_next_pass_only() {
        let b = Arc::new(Budgets::new((0.0, 1), (1.0, 3)));
        assert_eq!(
            b.defer(&k("a")),
            None,
            "a full burst; the pass pays its first read"
        );
        b.pass(k("a"), async {
            for _ in 0..5 {
                spend_read();
            }
        })
        .await;
        // Five reads on a burst of three: two in debt, three seconds to one whole read.
        let (kind, wait) = b.defer(&k("a")).expect("the next pass waits");
        assert_eq!(kind, Kind::Reads);
        assert!(
            wait > Duration::from_millis(2900) && wait <= Duration::from_secs(3),
            "{wait:?}"
        );
        assert_eq!(b.defer(&k("b")), None, "another namespace keeps its reads");
        let reads = b.of(Kind::Reads);
        assert!(reads.report(&k("a")), "the first deferral is reported");
        assert!(!reads.report(&k("a")), "once per episode");
        assert!(
            !b.of(Kind::Writes).report(&k("a")),
            "the write budget is not spent"
        );
        // However many wakes ask, the line reaches no further than one burst's refill.
        let waits: Vec<_> = (0..100).map(|_| b.defer(&k("a")).unwrap().1).collect();
        assert!(
            waits.iter().all(|w| *w <= Duration::from_secs(6)),
            "{waits:?}"
        );
        // Outside a pass nothing is charged.
        spend_read();
        assert_eq!(b.defer(&k("c")), None);
    }

    #[test]
    fn passes_woken_together_start_only_as_far_as_the_reads_left_go() {
        let b = Budgets::new((0.0, 1), (0.001, 3));
        for _ in 0..3 {
            assert_eq!(b.defer(&k("a")), None);
        }
        assert_eq!(b.defer(&k("a")).map(|(kind, _)| kind), Some(Kind::Reads));
    }

    #[test]
    fn a_namespace_short_of_both_waits_for_the_longer() {
        let b = Budgets::new((1.0, 1), (0.5, 1));
        let t0 = Instant::now();
        b.writes.take(&k("a"), true, t0).unwrap();
        b.reads.take(&k("a"), false, t0).unwrap();
        let (kind, wait) = b.defer(&k("a")).unwrap();
        assert_eq!(kind, Kind::Reads);
        assert!(wait > Duration::from_millis(1900), "{wait:?}");
        assert_eq!(Kind::Reads.reason(), "ReadBudgetExhausted");
        assert_eq!(Kind::Writes.reason(), "WriteBudgetExhausted");
    }

    /// A namespace has a budget in each account its objects live in: a flood of its passes in
    /// one account neither delays its passes in another nor spends the operator's own
    /// account's budget, and an exhausted budget is reported for that account only.
    #[tokio::test]
    async fn a_namespace_spends_each_accounts_budget_separately() {
        let b = Arc::new(Budgets::new((0.001, 2), (0.001, 4)));
        let (in_a, in_b, home) = (
            Key::new(Some("a"), "team"),
            Key::new(Some("b"), "team"),
            k("team"),
        );
        assert_eq!(b.defer(&in_a), None);
        let spent = b
            .pass(in_a.clone(), async {
                for _ in 0..4 {
                    spend_read();
                }
                (spend(), spend(), spend())
            })
            .await;
        assert_eq!(spent, (Ok(()), Ok(()), Ok(())));
        // In debt in a, for writes and reads: a refused write there reports a, not the rest.
        assert!(b.pass(in_a.clone(), async { spend() }).await.is_err());
        assert!(b.defer(&in_a).is_some());
        assert!(b.of(Kind::Writes).report(&in_a));
        // The same namespace's objects in b and in the operator's own account go on.
        assert_eq!(b.defer(&in_b), None);
        assert_eq!(b.defer(&home), None);
        assert_eq!(b.pass(in_b.clone(), async { spend() }).await, Ok(()));
        assert_eq!(b.pass(home.clone(), async { spend() }).await, Ok(()));
        assert!(!b.of(Kind::Writes).report(&in_b));
        assert!(!b.of(Kind::Writes).report(&home));
        // Another namespace in a keeps its own budget there.
        assert_eq!(b.defer(&Key::new(Some("a"), "other")), None);
        // No name can stand for another's key: the account is no part of the namespace.
        assert_ne!(Key::new(Some("a"), "team"), Key::home("a/team"));
        assert_ne!(Key::new(Some("team"), "a"), Key::new(Some("a"), "team"));
    }

    #[test]
    fn a_key_names_its_account_only_outside_the_operators_own() {
        assert_eq!(k("team").to_string(), "namespace team");
        assert_eq!(k("team").account_label(), "");
        let in_a = Key::new(Some("payments"), "team");
        assert_eq!(in_a.to_string(), "namespace team in AWSAccount payments");
        assert_eq!(in_a.account_label(), "payments");
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
