//! How a pass ends: when it runs again, what it fails with, and the refusals that wait for a
//! person rather than fail.

use std::time::Duration;

use kube::runtime::controller::Action;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use crate::api::PlannedChange;
use crate::api::condition::{self, Reason};
use crate::aws::{self, ErrorKind};

/// When a successful pass wants to run again if nothing changes before (its `Action`, typed so
/// the runtime can tell a periodic resync from an early requeue).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Requeue {
    /// Only on a change (an object whose clean-up is done).
    OnChange,
    /// At the periodic resync, or what is left of it.
    Resync(Duration),
    /// Sooner than the resync: a key rotation, a grace period, the next step of a long job.
    After(Duration),
}

impl Requeue {
    pub fn action(self) -> Action {
        match self {
            Requeue::OnChange => Action::await_change(),
            Requeue::Resync(d) | Requeue::After(d) => Action::requeue(d),
        }
    }
}

/// What can fail in a reconcile. AWS refusals that a person must fix (names taken, access
/// denied, invalid configuration) are not errors: they land in the Ready condition.
#[derive(thiserror::Error, Debug)]
pub enum Error {
    #[error(transparent)]
    Aws(#[from] aws::Error),
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("object has no namespace")]
    NoNamespace,
    /// The namespace's labels choose the class, and the watch has not shown the namespace yet.
    #[error("namespace {0} not seen yet: its labels choose the class")]
    UnknownNamespace(String),
    /// The pass stops until someone acts; the reconciler turns this into the Ready condition, so
    /// it never reaches the controller.
    #[error(transparent)]
    Blocked(#[from] Blocked),
    /// Deletion must wait (bucket not empty, or cleanup refused); the finalizer stays and the
    /// object is retried with backoff. A state reported in status, not a failed reconcile.
    #[error("deletion blocked: {0}")]
    DeletionBlocked(String),
}

impl Error {
    /// A deletion that waits for someone to act: retried with backoff, but not counted or
    /// logged as a failed reconcile.
    pub fn is_deletion_blocked(&self) -> bool {
        matches!(self, Error::DeletionBlocked(_))
    }

    /// A compare-and-swap write (the finalizer patch carries the resourceVersion) that lost to a
    /// newer version of the object: the pass started from a cache that had not seen it yet. The
    /// newer version's watch event runs the reconcile again; nothing failed.
    pub fn is_stale_write(&self) -> bool {
        matches!(self, Error::Kube(kube::Error::Api(e)) if e.code == 409)
    }

    /// The namespace's budget of AWS writes was spent before this pass wrote anything: it runs
    /// again after the returned time. Nothing failed.
    pub fn over_budget(&self) -> Option<Duration> {
        match self {
            Error::Aws(aws::Error {
                kind: ErrorKind::OverBudget(wait),
                ..
            }) => Some(*wait),
            _ => None,
        }
    }
}

/// Why a pass cannot go on until a person (or another object) acts: reported in the Ready
/// condition (and an event), re-checked at the next resync; not a failed reconcile.
#[derive(thiserror::Error, Clone, Debug, PartialEq, Eq)]
#[error("{message}")]
pub struct Blocked {
    pub reason: Reason,
    pub message: String,
    /// What a Manage pass still had to write when AWS refused one of its writes (`None`: the
    /// pass was stopped before it planned).
    pub pending: Option<Box<Pending>>,
}

impl Blocked {
    pub fn new(reason: Reason, message: impl Into<String>) -> Self {
        Blocked {
            reason,
            message: message.into(),
            pending: None,
        }
    }

    /// This refusal, with what the pass had left to write to `subject` (`S3 bucket x`,
    /// `IAM user y`), field by field as `status.plan` lists it.
    pub fn with_pending(mut self, subject: String, changes: Vec<PlannedChange>) -> Self {
        self.pending = Some(Box::new(Pending { subject, changes }));
        self
    }

    /// The `InSync=False` condition a refused pass reports with its pending writes; `None`
    /// when it was stopped before it planned.
    pub fn in_sync(
        &self,
        previous: &[Condition],
        generation: Option<i64>,
        now: jiff::Timestamp,
    ) -> Option<Condition> {
        let p = self.pending.as_ref().filter(|p| !p.changes.is_empty())?;
        let listed = super::bucket::in_sync::message(&p.subject, &p.changes);
        let said = condition::Said {
            status: false,
            reason: "Blocked",
            message: format!("{listed}; AWS refused the pass before it wrote them"),
        };
        Some(condition::of_type(
            previous,
            condition::IN_SYNC,
            said,
            generation,
            now,
        ))
    }

    /// What `status.plan` lists for this refusal (at most the first 20).
    pub fn plan(&self) -> Vec<PlannedChange> {
        let all = self.pending.iter().flat_map(|p| &p.changes);
        all.take(super::bucket::in_sync::LISTED).cloned().collect()
    }

    /// A person must fix it (counted as a terminal error); waiting on a Bucket is not that.
    pub(super) fn is_terminal(&self) -> bool {
        !matches!(
            self.reason,
            Reason::BucketNotReady | Reason::BucketNotFound | Reason::BucketNotOwned
        )
    }
}

/// What a refused Manage pass had left to write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pending {
    pub subject: String,
    pub changes: Vec<PlannedChange>,
}

/// The Blocked an AWS refusal that a person must fix amounts to; `None` for transient errors
/// (retried with backoff). `conflict`: the reason a conflict reads as for this kind (else it is
/// an invalid spec); `denied_also`: what else an AccessDenied may mean.
pub fn refusal(e: &aws::Error, conflict: Option<Reason>, denied_also: &str) -> Option<Blocked> {
    let (service, op, code, msg) = (&e.service, &e.operation, &e.code, &e.message);
    if e.is(aws::CREDENTIALS_UNAVAILABLE) {
        // The account's role could not be assumed: nothing was sent.
        return Some(Blocked::new(
            Reason::AccountUnavailable,
            format!("{service} {op} was not sent: {msg}"),
        ));
    }
    match (e.kind, conflict) {
        (ErrorKind::AccessDenied, _) => Some(Blocked::new(
            Reason::AccessDenied,
            format!(
                "AWS denied {service} {op}: {denied_also}the operator's IAM policy does not allow it ({msg})"
            ),
        )),
        (ErrorKind::QuotaExceeded, _) => Some(Blocked::new(
            Reason::QuotaExceeded,
            format!(
                "AWS refused {service} {op}, quota reached: {}; retried on a change or at the periodic resync ({code}: {msg})",
                e.quota()
            ),
        )),
        (ErrorKind::Conflict, Some(reason)) => Some(Blocked::new(
            reason,
            format!("{service} {op}: {code}: {msg}"),
        )),
        (ErrorKind::Invalid | ErrorKind::Conflict, _) => Some(Blocked::new(
            Reason::InvalidSpec,
            format!("AWS rejected {op}: {code}: {msg}"),
        )),
        (ErrorKind::NotFound | ErrorKind::Transient | ErrorKind::OverBudget(_), _) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(service: &'static str, operation: &'static str, code: &str) -> aws::Error {
        aws::Error {
            service,
            operation,
            code: code.into(),
            message: format!("{code} (AWS)"),
            kind: aws::classify(code, Some(409)),
        }
    }

    /// A full quota reads the same for both kinds (whatever a conflict means to the kind),
    /// names the quota and keeps AWS's own words.
    #[test]
    fn a_full_quota_is_reported_naming_it_for_either_kind() {
        let e = refused("iam", "CreateUser", "LimitExceeded");
        for conflict in [None, Some(Reason::NameConflict)] {
            let why = refusal(&e, conflict, "").expect("a refusal, not a retry");
            assert_eq!(why.reason, Reason::QuotaExceeded);
            assert!(why.is_terminal());
            assert_eq!(
                why.message,
                "AWS refused iam CreateUser, quota reached: IAM users per account (5,000, not \
                 adjustable); retried on a change or at the periodic resync (LimitExceeded: \
                 LimitExceeded (AWS))"
            );
        }
        let buckets = refused("s3", "CreateBucket", "TooManyBuckets");
        let why = refusal(&buckets, Some(Reason::NameConflict), "").expect("a refusal");
        assert_eq!(why.reason, Reason::QuotaExceeded);
        assert!(
            why.message
                .contains("quota reached: S3 buckets per account"),
            "{}",
            why.message
        );
    }

    /// Throttling is not a quota a person must raise: it is retried with backoff.
    #[test]
    fn throttling_is_not_a_quota() {
        let e = refused("iam", "CreateUser", "RequestLimitExceeded");
        assert_eq!(refusal(&e, None, ""), None);
    }
}
