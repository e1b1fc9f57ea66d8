//! The HTTP endpoints: `/metrics` on the metrics address, `/healthz` and `/readyz` on the probe
//! address. Both stop on the shared shutdown signal.
//!
//! With `--metrics-secure`, /metrics is served over HTTPS and only to callers whose bearer token
//! a TokenReview authenticates and a SubjectAccessReview allows `get` on the non-resource URL
//! /metrics, as controller-runtime's `WithAuthenticationAndAuthorization` filter does: 401
//! without a valid token, 403 without the grant (config/rbac/metrics_reader_role.yaml). The
//! probes stay plain HTTP: the kubelet calls them without credentials.

use std::collections::HashMap;
use std::future::IntoFuture;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use axum::Router;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::future::{BoxFuture, FutureExt, join};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use sha2::{Digest, Sha256};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use super::{Config, Error, Health};
use crate::fence::Fence;
use crate::metrics::Metrics;

/// Binds both listeners (so a busy port fails start-up) and returns a future that serves until
/// shutdown. With `config.metrics_secure` `None`, /metrics is served over plain HTTP; with
/// `Some(dir)` over HTTPS with authorization, with the certificate in `dir` or, without one, a
/// self-signed one.
pub async fn serve(
    config: &Config,
    health: Arc<Health>,
    metrics: Arc<Metrics>,
    shutdown: watch::Receiver<bool>,
) -> Result<BoxFuture<'static, ()>, Error> {
    let (metrics_addr, probe_addr) = (config.metrics_addr, config.probe_addr);
    let auth = match &config.metrics_secure {
        // Its own client: the operator's refuses writes once fenced, and a TokenReview or
        // SubjectAccessReview changes nothing, so a standby must be able to send them too.
        Some(_) => {
            let client = super::client::build(None, Fence::disabled(), metrics.clone()).await?;
            Some(Arc::new(Authorizer::new(client)))
        }
        None => None,
    };
    let scrapes = scrapes(auth, metrics);
    let (m, p) = (bind(metrics_addr).await?, bind(probe_addr).await?);
    let a = match config.metrics_secure.clone() {
        Some(dir) => serve_tls(m, metrics_addr, scrapes, dir, shutdown.clone())?,
        None => axum::serve(m, scrapes)
            .with_graceful_shutdown(stopped(shutdown.clone()))
            .into_future()
            .boxed(),
    };
    tracing::info!(%metrics_addr, %probe_addr, "serving metrics and probes");
    let b = axum::serve(p, probes(health)).with_graceful_shutdown(stopped(shutdown));
    Ok(join(a, b.into_future()).map(|_| ()).boxed())
}

/// `/metrics`: `metrics` rendered, to callers `auth` (if any) lets in.
fn scrapes(auth: Option<Arc<Authorizer>>, metrics: Arc<Metrics>) -> Router {
    Router::new().route(
        "/metrics",
        get(move |headers: HeaderMap| async move {
            if let Some(auth) = &auth
                && let Err(refused) = auth.check(&headers).await
            {
                return refused;
            }
            (
                [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                metrics.render(),
            )
                .into_response()
        }),
    )
}

fn probes(health: Arc<Health>) -> Router {
    let h = health.clone();
    Router::new()
        .route("/healthz", get(move || healthz(h.clone())))
        .route("/readyz", get(move || readyz(health.clone())))
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, Error> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| Error::Bind(addr, e))
}

async fn stopped(mut shutdown: watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|s| *s).await;
}

/// Serves `router` over HTTPS on `tcp` (bound to `addr`) with the certificate in `dir`
/// (reloaded as it changes) or a self-signed one.
fn serve_tls(
    tcp: TcpListener,
    addr: SocketAddr,
    router: Router,
    dir: Option<PathBuf>,
    shutdown: watch::Receiver<bool>,
) -> Result<BoxFuture<'static, std::io::Result<()>>, Error> {
    let unusable = |e: TlsError| Error::Bind(addr, std::io::Error::other(e));
    let certs = Certs::load(dir).map_err(unusable)?;
    let tls = certs.server_config().map_err(unusable)?;
    tokio::spawn(certs.clone().reload_every(CERT_RELOAD, shutdown.clone()));
    tracing::info!(metrics_addr = %addr, cert_dir = ?certs.dir, "serving metrics over HTTPS");
    let listener = TlsListener::start(tcp, TlsAcceptor::from(tls));
    Ok(axum::serve(listener, router)
        .with_graceful_shutdown(stopped(shutdown))
        .into_future()
        .boxed())
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

// ---------------------------------------------------------------- authorization

/// How long a decision is reused for the same token: a scraper calls every few seconds, and
/// each miss costs two API requests. Refusals expire sooner, so a new grant works quickly.
const ALLOWED_TTL: Duration = Duration::from_secs(60);
const REFUSED_TTL: Duration = Duration::from_secs(10);
/// Bounds the cache against callers that send a new token each time.
const CACHE_MAX: usize = 256;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Decision {
    Allowed,
    /// No token, or one the API server does not accept.
    Unauthenticated,
    /// Authenticated as this user, who may not get /metrics.
    Forbidden(String),
}

impl Decision {
    fn ttl(&self) -> Duration {
        match self {
            Decision::Allowed => ALLOWED_TTL,
            _ => REFUSED_TTL,
        }
    }
}

/// Authenticates and authorizes scrapes against the API server.
struct Authorizer {
    client: kube::Client,
    /// SHA-256 of the token -> decision and when it expires; the token itself is not kept.
    cache: Mutex<HashMap<[u8; 32], (Decision, Instant)>>,
}

impl Authorizer {
    fn new(client: kube::Client) -> Self {
        Authorizer {
            client,
            cache: Mutex::default(),
        }
    }

    /// `Ok` when the request may read the metrics; otherwise the response to send.
    async fn check(&self, headers: &HeaderMap) -> Result<(), Response> {
        let Some(token) = bearer_token(headers) else {
            return Err(refusal(&Decision::Unauthenticated));
        };
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let now = Instant::now();
        let cached = self
            .cache
            .lock()
            .expect("auth cache lock")
            .get(&key)
            .filter(|(_, until)| *until > now)
            .map(|(d, _)| d.clone());
        let decision = match cached {
            Some(d) => d,
            None => {
                let d = self.review(token).await.map_err(|e| {
                    tracing::warn!(error = %e, "metrics authorization failed");
                    (
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "authorization failed: the API server could not review the token",
                    )
                        .into_response()
                })?;
                let mut cache = self.cache.lock().expect("auth cache lock");
                if cache.len() >= CACHE_MAX {
                    cache.retain(|_, (_, until)| *until > now);
                    if cache.len() >= CACHE_MAX {
                        cache.clear();
                    }
                }
                cache.insert(key, (d.clone(), now + d.ttl()));
                d
            }
        };
        match decision {
            Decision::Allowed => Ok(()),
            refused => Err(refusal(&refused)),
        }
    }

    /// A TokenReview of the token, then a SubjectAccessReview of `get /metrics` for its user.
    async fn review(&self, token: &str) -> Result<Decision, kube::Error> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                audiences: None,
            },
            ..Default::default()
        };
        let reviewed = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await?;
        let status = reviewed.status.unwrap_or_default();
        let Some(user) = status.user.filter(|_| status.authenticated == Some(true)) else {
            return Ok(Decision::Unauthenticated);
        };
        let name = user.username.clone().unwrap_or_default();
        let access = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username,
                groups: user.groups,
                uid: user.uid,
                extra: user.extra,
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some("/metrics".into()),
                    verb: Some("get".into()),
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let decided = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &access)
            .await?;
        Ok(match decided.status {
            Some(s) if s.allowed => Decision::Allowed,
            _ => Decision::Forbidden(name),
        })
    }
}

fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

fn refusal(decision: &Decision) -> Response {
    match decision {
        Decision::Allowed => StatusCode::OK.into_response(),
        Decision::Unauthenticated => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "Unauthorized",
        )
            .into_response(),
        Decision::Forbidden(user) => (
            StatusCode::FORBIDDEN,
            format!("Authorization denied for user {user}"),
        )
            .into_response(),
    }
}

// ---------------------------------------------------------------- TLS

/// How often a certificate directory is checked for a renewed certificate (cert-manager
/// rewrites the mounted Secret in place).
const CERT_RELOAD: Duration = Duration::from_secs(30);
/// A client that never finishes its handshake must not hold a connection open for ever.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(thiserror::Error, Debug)]
pub enum TlsError {
    #[error("metrics certificate {0}: {1}")]
    Pem(PathBuf, rustls::pki_types::pem::Error),
    #[error("metrics certificate {0}: holds no certificate")]
    Empty(PathBuf),
    #[error("metrics certificate in {0}: {1}")]
    Key(PathBuf, rustls::Error),
    #[error("self-signed metrics certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("metrics TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// The serving certificate: from a directory holding tls.crt and tls.key (reloaded when they
/// change), or self-signed for `localhost` when there is none.
#[derive(Clone, Debug)]
pub struct Certs {
    dir: Option<PathBuf>,
    current: Arc<RwLock<Arc<CertifiedKey>>>,
    /// Modification times of tls.crt and tls.key when last loaded.
    stamp: Arc<Mutex<Option<(SystemTime, SystemTime)>>>,
}

impl Certs {
    pub fn load(dir: Option<PathBuf>) -> Result<Certs, TlsError> {
        let (key, stamp) = match &dir {
            Some(d) => (load_dir(d)?, stamps(d)),
            None => (self_signed()?, None),
        };
        Ok(Certs {
            dir,
            current: Arc::new(RwLock::new(Arc::new(key))),
            stamp: Arc::new(Mutex::new(stamp)),
        })
    }

    fn server_config(&self) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(self.clone()));
        // The server speaks HTTP/1.1 only.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }

    /// Loads the directory's files again if they changed since the last load; a broken pair
    /// (cert-manager writes the two files one after the other) keeps the previous one.
    pub fn reload(&self) -> Result<bool, TlsError> {
        let Some(dir) = &self.dir else {
            return Ok(false);
        };
        let now = stamps(dir);
        if now == *self.stamp.lock().expect("cert stamp lock") {
            return Ok(false);
        }
        let key = load_dir(dir)?;
        *self.current.write().expect("cert lock") = Arc::new(key);
        *self.stamp.lock().expect("cert stamp lock") = now;
        Ok(true)
    }

    async fn reload_every(self, period: Duration, mut shutdown: watch::Receiver<bool>) {
        if self.dir.is_none() {
            return;
        }
        loop {
            tokio::select! {
                _ = tokio::time::sleep(period) => {}
                _ = shutdown.wait_for(|s| *s) => return,
            }
            match self.reload() {
                Ok(true) => tracing::info!(dir = ?self.dir, "reloaded the metrics certificate"),
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %e, "keeping the previous metrics certificate"),
            }
        }
    }

    /// The certificate chain served now.
    #[cfg(test)]
    fn chain(&self) -> Vec<CertificateDer<'static>> {
        self.current.read().expect("cert lock").cert.clone()
    }
}

impl ResolvesServerCert for Certs {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.read().ok()?.clone())
    }
}

fn stamps(dir: &Path) -> Option<(SystemTime, SystemTime)> {
    let modified = |f: &str| {
        std::fs::metadata(dir.join(f))
            .and_then(|m| m.modified())
            .ok()
    };
    Some((modified("tls.crt")?, modified("tls.key")?))
}

fn load_dir(dir: &Path) -> Result<CertifiedKey, TlsError> {
    let (crt, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    let chain = CertificateDer::pem_file_iter(&crt)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| TlsError::Pem(crt.clone(), e))?;
    if chain.is_empty() {
        return Err(TlsError::Empty(crt));
    }
    let private = PrivateKeyDer::from_pem_file(&key).map_err(|e| TlsError::Pem(key, e))?;
    CertifiedKey::from_der(chain, private, &provider()).map_err(|e| TlsError::Key(dir.into(), e))
}

fn self_signed() -> Result<CertifiedKey, TlsError> {
    let generated = rcgen::generate_simple_self_signed(vec!["localhost".to_string()])?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
        generated.signing_key.serialize_der(),
    ));
    Ok(CertifiedKey::from_der(
        vec![generated.cert.der().clone()],
        key,
        &provider(),
    )?)
}

/// Accepts TCP connections and hands on those whose TLS handshake completed. Handshakes run
/// in tasks of their own, so a slow or silent client never holds up the next one.
struct TlsListener {
    accepted: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    addr: std::io::Result<SocketAddr>,
}

impl TlsListener {
    fn start(tcp: TcpListener, acceptor: TlsAcceptor) -> TlsListener {
        let addr = tcp.local_addr();
        let (tx, accepted) = mpsc::channel(32);
        tokio::spawn(async move {
            loop {
                let (stream, peer) = tokio::select! {
                    r = tcp.accept() => match r {
                        Ok(c) => c,
                        Err(e) => {
                            // Out of file descriptors, usually: wait instead of spinning.
                            tracing::debug!(error = %e, "metrics: accept failed");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                    },
                    // The server stopped.
                    _ = tx.closed() => return,
                };
                let (tx, acceptor) = (tx.clone(), acceptor.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let _ = tx.send((tls, peer)).await;
                        }
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "metrics: TLS handshake failed")
                        }
                        Err(_) => tracing::debug!(%peer, "metrics: TLS handshake timed out"),
                    }
                });
            }
        });
        TlsListener { accepted, addr }
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.accepted.recv().await {
            Some(c) => c,
            // The accept task only ends once this receiver is gone.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        match &self.addr {
            Ok(a) => Ok(*a),
            Err(e) => Err(std::io::Error::new(e.kind(), e.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(auth: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, auth.parse().unwrap());
        h
    }

    #[test]
    fn only_a_non_empty_bearer_token_is_taken() {
        assert_eq!(bearer_token(&headers("Bearer abc")), Some("abc"));
        assert_eq!(bearer_token(&headers("bearer  abc ")), Some("abc"));
        assert_eq!(bearer_token(&headers("Basic dXNlcjpwdw==")), None);
        assert_eq!(bearer_token(&headers("Bearer ")), None);
        assert_eq!(bearer_token(&HeaderMap::new()), None);
    }

    #[test]
    fn refusals_are_401_without_identity_and_403_without_access() {
        let r = refusal(&Decision::Unauthenticated);
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(r.headers()[header::WWW_AUTHENTICATE], "Bearer");
        assert_eq!(
            refusal(&Decision::Forbidden("system:serviceaccount:a:b".into())).status(),
            StatusCode::FORBIDDEN
        );
        assert!(Decision::Allowed.ttl() > Decision::Unauthenticated.ttl());
    }

    fn write_pair(dir: &Path, names: &[&str]) -> Vec<u8> {
        let made = rcgen::generate_simple_self_signed(
            names.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
        )
        .unwrap();
        std::fs::write(dir.join("tls.crt"), made.cert.pem()).unwrap();
        std::fs::write(dir.join("tls.key"), made.signing_key.serialize_pem()).unwrap();
        made.cert.der().to_vec()
    }

    #[test]
    fn a_certificate_directory_is_served_and_reloaded_when_it_changes() {
        let dir = std::env::temp_dir().join(format!("s3op-certs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let first = write_pair(&dir, &["first.example"]);
        let certs = Certs::load(Some(dir.clone())).unwrap();
        assert_eq!(certs.chain()[0].as_ref(), first.as_slice());
        assert!(!certs.reload().unwrap(), "unchanged files are not reloaded");

        // A broken pair (new certificate, old key) keeps the previous certificate.
        let made = rcgen::generate_simple_self_signed(vec!["second.example".into()]).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        std::fs::write(dir.join("tls.crt"), made.cert.pem()).unwrap();
        assert!(matches!(certs.reload(), Err(TlsError::Key(..))));
        assert_eq!(certs.chain()[0].as_ref(), first.as_slice());

        std::fs::write(dir.join("tls.key"), made.signing_key.serialize_pem()).unwrap();
        assert!(certs.reload().unwrap());
        assert_eq!(certs.chain()[0].as_ref(), made.cert.der().as_ref());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_directory_fails_start_up_and_none_means_self_signed() {
        let err = Certs::load(Some("/nonexistent/certs".into())).unwrap_err();
        assert!(err.to_string().contains("tls.crt"), "{err}");
        let certs = Certs::load(None).unwrap();
        assert_eq!(certs.chain().len(), 1);
        assert!(certs.server_config().is_ok());
    }
}
