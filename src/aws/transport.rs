//! The HTTP client of the operator's S3 and IAM clients: hyper's pooled client over fenced
//! connections (`crate::fence::conn`: every write to the socket checks the fence). The SDK's own
//! client (aws-smithy-http-client 1.5) takes no connector of ours, so this one does what that
//! one does for the operator: TLS with the system's roots (`SSL_CERT_FILE`/`SSL_CERT_DIR`
//! honoured), HTTP/1.1, `HTTPS_PROXY`/`HTTP_PROXY`/`ALL_PROXY`/`NO_PROXY` with hyper-util's
//! matcher (CONNECT for HTTPS, absolute-form requests for plain HTTP, `user:password` sent as
//! Proxy-Authorization), the SDK's connect and read timeouts, and the SDK's classification of
//! transport errors for its retries. A write refused by the fence is a user error: not retried.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpClient,
    SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse};
use aws_smithy_runtime_api::client::result::ConnectorError;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::body::SdkBody;
use http::Uri;
use http::uri::Scheme;
use hyper_util::client::legacy::connect::HttpConnector as Tcp;
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tower::{BoxError, Service, ServiceExt};

use crate::fence::Fence;
use crate::fence::conn::{FenceConnector, Fenced, caused_by_fence};

/// The client for `fence`; one per process, shared by every S3 and IAM client so they share
/// its connection pool.
pub(crate) fn client(fence: Fence) -> SharedHttpClient {
    SharedHttpClient::new(FencedClient {
        fence,
        proxy: Arc::new(Matcher::from_env()),
        tls: tls_config(),
        made: Mutex::new(None),
    })
}

/// The system's roots, loaded once.
fn tls_config() -> rustls::ClientConfig {
    let native = rustls_native_certs::load_native_certs();
    if !native.errors.is_empty() {
        tracing::warn!(errors = ?native.errors, "could not load some root certificates");
    }
    let mut roots = rustls::RootCertStore::empty();
    let (_, ignored) = roots.add_parsable_certificates(native.certs);
    if ignored > 0 {
        tracing::warn!(ignored, "ignored unparsable root certificates");
    }
    rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("aws-lc-rs supports the default TLS versions")
    .with_root_certificates(roots)
    .with_no_client_auth()
}

/// The SDK asks for a connector per request attempt, with its timeouts: one is kept per
/// (connect, read) timeout pair, and the operator uses one.
type Timeouts = (Option<Duration>, Option<Duration>);

struct FencedClient {
    fence: Fence,
    proxy: Arc<Matcher>,
    tls: rustls::ClientConfig,
    made: Mutex<Option<(Timeouts, SharedHttpConnector)>>,
}

impl fmt::Debug for FencedClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FencedClient")
            .field("fence", &self.fence)
            .finish_non_exhaustive()
    }
}

impl HttpClient for FencedClient {
    fn http_connector(
        &self,
        settings: &HttpConnectorSettings,
        _: &RuntimeComponents,
    ) -> SharedHttpConnector {
        let timeouts = (settings.connect_timeout(), settings.read_timeout());
        let mut made = self.made.lock().expect("connector cache poisoned");
        match &*made {
            Some((t, connector)) if *t == timeouts => connector.clone(),
            _ => {
                let connector = SharedHttpConnector::new(self.connector(timeouts));
                *made = Some((timeouts, connector.clone()));
                connector
            }
        }
    }
}

type Connector = hyper_timeout::TimeoutConnector<hyper_rustls::HttpsConnector<Route>>;

impl FencedClient {
    fn connector(&self, (connect, read): Timeouts) -> Pooled {
        let mut tcp = Tcp::new();
        tcp.enforce_http(false);
        tcp.set_nodelay(true);
        let route = Route {
            tcp: FenceConnector::new(tcp, self.fence.clone()),
            proxy: self.proxy.clone(),
        };
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(self.tls.clone())
            .https_or_http()
            .enable_http1()
            .wrap_connector(route);
        let mut timed = hyper_timeout::TimeoutConnector::new(https);
        timed.set_connect_timeout(connect);
        timed.set_read_timeout(read);
        let client = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .build(timed);
        Pooled {
            client,
            proxy: self.proxy.clone(),
            fence: self.fence.clone(),
        }
    }
}

struct Pooled {
    client: hyper_util::client::legacy::Client<Connector, SdkBody>,
    proxy: Arc<Matcher>,
    fence: Fence,
}

impl fmt::Debug for Pooled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pooled").finish_non_exhaustive()
    }
}

impl HttpConnector for Pooled {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        // Refused here before a connection is even taken from the pool; the connection checks
        // again as the request is written.
        if let Err(e) = self.fence.check() {
            return HttpConnectorFuture::ready(Err(ConnectorError::user(e.into())));
        }
        let mut request = match request.try_into_http1x() {
            Ok(r) => r,
            Err(e) => return HttpConnectorFuture::ready(Err(ConnectorError::user(e.into()))),
        };
        // A plain-HTTP request to a forward proxy carries the proxy's credentials itself.
        if request.uri().scheme() == Some(&Scheme::HTTP)
            && let Some(auth) = self
                .proxy
                .intercept(request.uri())
                .and_then(|i| i.basic_auth().cloned())
        {
            request
                .headers_mut()
                .entry(http::header::PROXY_AUTHORIZATION)
                .or_insert(auth);
        }
        let sent = self.client.request(request);
        HttpConnectorFuture::new(async move {
            match sent.await {
                Ok(response) => HttpResponse::try_from(response.map(SdkBody::from_body_1_x))
                    .map_err(|e| ConnectorError::other(e.into(), None)),
                Err(e) => Err(classify(e.into())),
            }
        })
    }
}

/// As the SDK's own client classifies transport errors: timeouts and io errors are retried,
/// anything else is not; a closed fence is the caller's, and final.
fn classify(error: BoxError) -> ConnectorError {
    if caused_by_fence(error.as_ref()) {
        return ConnectorError::user(error);
    }
    let (mut timed_out, mut io) = (false, false);
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(error.as_ref());
    while let Some(e) = next {
        if let Some(h) = e.downcast_ref::<hyper::Error>() {
            timed_out |= h.is_timeout();
            io |= h.is_closed() || h.is_canceled() || h.is_incomplete_message();
        }
        if let Some(legacy) = e.downcast_ref::<hyper_util::client::legacy::Error>() {
            io |= legacy.is_connect();
        }
        if let Some(e) = e.downcast_ref::<std::io::Error>() {
            timed_out |= e.kind() == std::io::ErrorKind::TimedOut;
            io = true;
        }
        next = e.source();
    }
    if timed_out {
        ConnectorError::timeout(error)
    } else if io {
        ConnectorError::io(error)
    } else {
        ConnectorError::other(error, None)
    }
}

/// Connects to `dst` directly, through a CONNECT tunnel (HTTPS through a proxy) or to the proxy
/// itself (plain HTTP through a proxy: requests go in absolute form), as `proxy` says.
#[derive(Clone)]
struct Route {
    tcp: FenceConnector<Tcp>,
    proxy: Arc<Matcher>,
}

type Conn = Fenced<TokioIo<tokio::net::TcpStream>>;

impl Service<Uri> for Route {
    type Response = Conn;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Conn, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let tcp = self.tcp.clone();
        let via = self.proxy.intercept(&dst);
        Box::pin(async move {
            match via {
                None => tcp.oneshot(dst).await,
                Some(proxy) if dst.scheme() == Some(&Scheme::HTTPS) => {
                    let tunnel = Tunnel::new(proxy.uri().clone(), tcp);
                    let tunnel = match proxy.basic_auth() {
                        Some(auth) => tunnel.with_auth(auth.clone()),
                        None => tunnel,
                    };
                    Ok(tunnel.oneshot(dst).await?)
                }
                Some(proxy) => Ok(tcp
                    .oneshot(proxy.uri().clone())
                    .await?
                    .through_forward_proxy()),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Instant;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    /// A server on 127.0.0.1 that answers every request with 200; counts the connections it
    /// accepted and the requests it received.
    async fn server() -> (String, Arc<AtomicUsize>, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (conns, reqs) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (c, r) = (conns.clone(), reqs.clone());
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                c.fetch_add(1, Ordering::SeqCst);
                let r = r.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0; 4096];
                    while let Ok(n) = sock.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        r.fetch_add(1, Ordering::SeqCst);
                        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                        if sock.write_all(ok).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        (url, conns, reqs)
    }

    fn put(url: &str) -> http::Request<SdkBody> {
        http::Request::builder()
            .method("PUT")
            .uri(format!("{url}/bucket"))
            .body(SdkBody::from("x"))
            .unwrap()
    }

    /// Reads a body to its end (which returns its connection to the pool).
    async fn drain<B>(mut body: B) -> Vec<u8>
    where
        B: http_body::Body + Unpin,
        B::Error: fmt::Debug,
    {
        use bytes::Buf;
        let mut all = Vec::new();
        while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await
        {
            if let Ok(mut data) = frame.unwrap().into_data() {
                while data.has_remaining() {
                    let chunk = data.chunk().to_vec();
                    data.advance(chunk.len());
                    all.extend(chunk);
                }
            }
        }
        all
    }

    fn pool(fence: &Fence) -> Pooled {
        FencedClient {
            fence: fence.clone(),
            proxy: Arc::new(Matcher::builder().build()),
            tls: tls_config(),
            made: Mutex::new(None),
        }
        .connector((Some(Duration::from_secs(5)), None))
    }

    /// A request that passed every earlier check (here: sent on hyper's pool directly) and is
    /// written after the fence closed fails on the pooled connection as it is written, and the
    /// server receives nothing more; the SDK sees a user error, which it does not retry.
    #[tokio::test]
    async fn a_request_written_after_the_fence_closes_never_reaches_the_server() {
        let (url, conns, reqs) = server().await;
        let fence = Fence::leader_elected();
        fence
            .extend(Instant::now() + Duration::from_millis(300))
            .unwrap();
        let pooled = pool(&fence);
        let res = pooled.client.request(put(&url)).await.unwrap();
        assert_eq!(res.status(), 200);
        // Read to the end, so the connection goes back to the pool.
        assert_eq!(drain(res.into_body()).await, b"ok");
        assert_eq!(reqs.load(Ordering::SeqCst), 1);

        tokio::time::sleep(Duration::from_millis(350)).await;
        let err = pooled.client.request(put(&url)).await.unwrap_err();
        let err: BoxError = err.into();
        assert!(caused_by_fence(err.as_ref()), "{err:?}");
        assert!(classify(err).is_user());
        // And through the SDK's entry point, refused before a connection is taken.
        let req = HttpRequest::try_from(put(&url)).unwrap();
        let err = pooled.call(req).await.unwrap_err();
        assert!(err.is_user() && caused_by_fence(&err), "{err:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            reqs.load(Ordering::SeqCst),
            1,
            "a request reached the server"
        );
        assert_eq!(
            conns.load(Ordering::SeqCst),
            1,
            "the pooled connection was reused"
        );
    }

    /// Through the SDK's entry point, requests go out on one pooled connection while the fence
    /// is open.
    #[tokio::test]
    async fn requests_share_a_pooled_connection() {
        let (url, conns, reqs) = server().await;
        let pooled = pool(&Fence::disabled());
        for _ in 0..3 {
            let req = HttpRequest::try_from(put(&url)).unwrap();
            let res = pooled.call(req).await.unwrap();
            assert_eq!(res.status().as_u16(), 200);
            assert_eq!(drain(res.into_body()).await, b"ok");
        }
        assert_eq!(reqs.load(Ordering::SeqCst), 3);
        assert_eq!(conns.load(Ordering::SeqCst), 1, "one pool, one connection");
    }
}
