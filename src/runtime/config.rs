//! What `s3-operator run` is configured with: the settings main.rs fills in from flags and env.

use super::leader;
use crate::reconcile;

/// Everything `s3-operator run` is configured with.
#[derive(Clone, Debug)]
pub struct Config {
    pub reconcile: reconcile::Settings,
    pub aws: crate::aws::Settings,
    /// Namespaces to watch; empty means all.
    pub watch_namespaces: Vec<String>,
    pub max_concurrent_reconciles: u16,
    pub metrics_addr: std::net::SocketAddr,
    pub probe_addr: std::net::SocketAddr,
    /// Serve /metrics over HTTPS with token authentication and authorization: `None` serves
    /// plain HTTP; `Some(dir)` the certificate in `dir`, or a self-signed one without it.
    pub metrics_secure: Option<Option<std::path::PathBuf>>,
    /// The SQS queue of CloudTrail events the leader reads to find drift at once; `None`: drift
    /// is found by the periodic resync only.
    pub drift_events_queue_url: Option<String>,
    /// How often the leader sweeps the installation's prefix and IAM path for resources whose
    /// owner is gone (jittered by up to 10%).
    pub orphan_sweep_period: std::time::Duration,
    /// `None` runs without leader election (a single replica, or local development).
    pub leader_election: Option<leader::Settings>,
}
