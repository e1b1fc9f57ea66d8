//! The `Ready` condition both kinds report, with machine-readable reasons.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

pub const READY: &str = "Ready";
/// Whether S3 holds what the spec says (see `status.plan`).
pub const IN_SYNC: &str = "InSync";

/// Why an object is or is not Ready. The string forms are part of the API: alerts and scripts
/// match on them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// Everything the spec asks for exists in AWS.
    Available,
    /// AWS resources are being created or brought in line with the spec.
    Provisioning,
    /// The bucket name is taken by another account, by another owner, or by an unowned bucket
    /// that `adoptExisting` does not allow us to take.
    NameConflict,
    /// AWS refused the operator: its own IAM policy does not allow the call.
    AccessDenied,
    /// The spec is valid for the API server but AWS or the operator's settings reject it.
    InvalidSpec,
    /// Deletion is waiting: the bucket is not empty and `forceDelete` is false.
    DeletionBlocked,
    /// A BucketAccess (or a Bucket's spec.logging) names a Bucket that does not exist.
    BucketNotFound,
    /// A BucketAccess (or a Bucket's spec.logging) waits for its Bucket to become Ready.
    BucketNotReady,
    /// The S3 bucket a BucketAccess's Bucket names is no longer owned by that Bucket (deleted,
    /// released, or adopted elsewhere): the access's credentials are revoked.
    BucketNotOwned,
    /// An IAM user or role with our name exists but belongs to someone else.
    OwnershipConflict,
    /// The object breaks a rule of its class (or names a class its namespace may not use):
    /// nothing changes in AWS until it is fixed.
    ClassViolation,
    /// An AWS quota is full (IAM users, roles, keys per user, policy size, buckets): nothing
    /// is retried until the object changes or the periodic resync, so a person frees room or
    /// raises the quota.
    QuotaExceeded,
    /// The AWSAccount the object lives in cannot be used (it does not exist, its ExternalId
    /// Secret cannot be read, or STS refuses the role): nothing is written anywhere.
    AccountUnavailable,
    /// A transient error; the operator retries with backoff.
    Retrying,
    /// `spec.management` is `Observe`: the operator reads the bucket and reports how it
    /// differs from the spec (`InSync`, `status.plan`), and writes nothing.
    Observed,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Available => "Available",
            Reason::Provisioning => "Provisioning",
            Reason::NameConflict => "NameConflict",
            Reason::AccessDenied => "AccessDenied",
            Reason::InvalidSpec => "InvalidSpec",
            Reason::DeletionBlocked => "DeletionBlocked",
            Reason::BucketNotFound => "BucketNotFound",
            Reason::BucketNotReady => "BucketNotReady",
            Reason::BucketNotOwned => "BucketNotOwned",
            Reason::OwnershipConflict => "OwnershipConflict",
            Reason::ClassViolation => "ClassViolation",
            Reason::QuotaExceeded => "QuotaExceeded",
            Reason::AccountUnavailable => "AccountUnavailable",
            Reason::Retrying => "Retrying",
            Reason::Observed => "Observed",
        }
    }
}

/// Builds the Ready condition, keeping `lastTransitionTime` from `previous` when the status did
/// not flip, so a steady-state pass computes a status identical to the stored one (no write).
pub fn ready(
    previous: &[Condition],
    ready: bool,
    reason: Reason,
    message: impl Into<String>,
    generation: Option<i64>,
    now: jiff::Timestamp,
) -> Condition {
    let said = Said {
        status: ready,
        reason: reason.as_str(),
        message: message.into(),
    };
    of_type(previous, READY, said, generation, now)
}

/// What a condition says: its status, reason and message.
pub struct Said<'a> {
    pub status: bool,
    pub reason: &'a str,
    pub message: String,
}

/// Builds the condition `type_`, keeping `lastTransitionTime` from `previous` while its status
/// holds (see [`ready`]).
pub fn of_type(
    previous: &[Condition],
    type_: &str,
    said: Said,
    generation: Option<i64>,
    now: jiff::Timestamp,
) -> Condition {
    let status = if said.status { "True" } else { "False" };
    let last_transition_time = previous
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or(Time(now));
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: said.reason.into(),
        message: said.message,
        observed_generation: generation,
        last_transition_time,
    }
}

/// Is the Ready condition in `conditions` True?
pub fn is_ready(conditions: &[Condition]) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == READY && c.status == "True")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_is_kept_while_status_holds() {
        let t0: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let t1: jiff::Timestamp = "2026-01-01T01:00:00Z".parse().unwrap();
        let first = ready(&[], false, Reason::Provisioning, "creating", Some(1), t0);
        let same = ready(
            std::slice::from_ref(&first),
            false,
            Reason::Retrying,
            "again",
            Some(1),
            t1,
        );
        assert_eq!(same.last_transition_time, Time(t0));
        let flipped = ready(&[same], true, Reason::Available, "ok", Some(1), t1);
        assert_eq!(flipped.last_transition_time, Time(t1));
        assert!(is_ready(&[flipped]));
    }
}
