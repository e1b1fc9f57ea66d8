//! The process's lifecycle: the shutdown signal, the heartbeat and the probe state they feed.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use tokio::sync::watch;

/// Probe state shared with the web server.
#[derive(Default)]
pub struct Health {
    pub ready: AtomicBool,
    pub heartbeat: std::sync::Mutex<Option<Instant>>,
}

pub(super) async fn heartbeat(health: Arc<Health>) {
    loop {
        *health.heartbeat.lock().expect("heartbeat lock") = Some(Instant::now());
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

pub(super) async fn signal_shutdown(tx: watch::Sender<bool>) {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("shutdown signal received; draining in-flight reconciles");
    let _ = tx.send(true);
}

pub(super) async fn wait_true(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|v| *v).await;
}
