//! The HTTP endpoints: `/metrics` on the metrics address, `/healthz` and `/readyz` on the probe
//! address. Both stop on the shared shutdown signal.

use std::future::IntoFuture;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use futures::future::{BoxFuture, FutureExt, join};
use tokio::sync::watch;

use super::metrics::METRICS;
use super::{Error, Health};

/// Binds both listeners (so a busy port fails start-up) and returns a future that serves until
/// shutdown.
pub async fn serve(
    metrics_addr: SocketAddr,
    probe_addr: SocketAddr,
    health: Arc<Health>,
    shutdown: watch::Receiver<bool>,
) -> Result<BoxFuture<'static, ()>, Error> {
    let metrics = Router::new().route(
        "/metrics",
        get(|| async {
            (
                [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                METRICS.render(),
            )
        }),
    );
    let h = health.clone();
    let probes = Router::new()
        .route("/healthz", get(move || healthz(h.clone())))
        .route("/readyz", get(move || readyz(health.clone())));
    let bind = |addr| async move {
        tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| Error::Bind(addr, e))
    };
    let (m, p) = (bind(metrics_addr).await?, bind(probe_addr).await?);
    tracing::info!(%metrics_addr, %probe_addr, "serving metrics and probes");
    let stop = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let a = axum::serve(m, metrics).with_graceful_shutdown(stop(shutdown.clone()));
    let b = axum::serve(p, probes).with_graceful_shutdown(stop(shutdown));
    Ok(join(a.into_future(), b.into_future()).map(|_| ()).boxed())
}

/// Fails when the runtime stopped making progress (the heartbeat task is starved or dead).
async fn healthz(health: Arc<Health>) -> impl IntoResponse {
    let beat = *health.heartbeat.lock().expect("heartbeat lock");
    match beat {
        Some(t) if t.elapsed() < Duration::from_secs(10) => (StatusCode::OK, "ok"),
        _ => (StatusCode::SERVICE_UNAVAILABLE, "runtime heartbeat stalled"),
    }
}

async fn readyz(health: Arc<Health>) -> impl IntoResponse {
    if health.ready.load(Ordering::SeqCst) {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "caches not synced")
    }
}
