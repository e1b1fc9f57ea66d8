//! The reconcilers, one module per kind. Each pass observes AWS and Kubernetes, computes a plan
//! with a pure function, and applies only the difference, so a steady-state pass writes nothing.

pub mod accounts;
pub mod bucket;
pub mod bucket_access;
pub mod class;
pub mod events;
pub mod tag_reads;

mod context;
mod error;
mod object;
pub mod orphans;
mod pass_events;
pub mod paused;
pub mod refs;
mod settled;
pub mod slot;
#[cfg(test)]
pub(crate) mod testing;
mod writes;

pub use context::{Context, Grants, InAccount, Settings, deletion_policy, jitter};
pub use error::{Blocked, Error, Requeue, refusal};
pub use object::{MANAGER, Object, object_key, owner, served};
pub use pass_events::{PassEvents, serve_request};
pub use settled::{Settled, requested_at};
pub use writes::{
    ensure_finalizer, has_finalizer, remove_finalizer, report_blocked, update_status,
};
