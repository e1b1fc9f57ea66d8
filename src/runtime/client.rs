//! The operator's Kubernetes client. kube-client sets no read timeout, so a request to an API
//! server that stops answering would hang a reconcile or the lease loop forever; and kube-client
//! knows nothing of fencing. kube's own stack is rebuilt here over fenced connections
//! (`crate::fence::conn`: every write to the socket checks the fence), and one layer in front of
//! it puts a deadline on every request, refuses writes early once fenced, and counts every
//! request as client-go's `rest_client_requests_total` does.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Method, Request, Response};
use http_body::{Body, Frame, SizeHint};
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::client::legacy::connect::{Connection, HttpConnector};
use kube::client::ConfigExt;
use tower::util::BoxService;
use tower::{BoxError, Layer, Service, ServiceBuilder, ServiceExt};

use crate::fence::conn::FenceConnector;
use crate::fence::{self, Fence};
use crate::metrics::Metrics;

/// Deadline of every request but a watch: headers and body, kube's retries of 429/503/504
/// included.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// A request got no complete answer in time.
#[derive(thiserror::Error, Debug)]
#[error("no complete answer from the Kubernetes API within {0:?}")]
pub struct Error(pub Duration);

/// The client every part of the operator uses. `identity` (the Lease identity) goes into the
/// user agent, so API server audit logs tell replicas apart; every request is counted into
/// `metrics`.
pub async fn build(
    identity: Option<&str>,
    fence: Fence,
    metrics: Arc<Metrics>,
) -> Result<kube::Client, super::Error> {
    let mut config = kube::Config::infer().await?;
    config.proxy_url = proxy_url(config.proxy_url.take(), &config.cluster_url);
    let agent = match identity {
        Some(id) => format!("s3-operator/{} ({id})", crate::VERSION),
        None => format!("s3-operator/{}", crate::VERSION),
    };
    if let Ok(v) = http::HeaderValue::from_str(&agent) {
        config.headers.push((http::header::USER_AGENT, v));
    }
    let host = config.cluster_url.authority().map(|a| a.to_string());
    let default_ns = config.default_namespace.clone();
    let stack = kube_stack(&config, fence.clone())?;
    Ok(kube::client::ClientBuilder::new(stack, default_ns)
        .with_layer(&GuardLayer {
            fence,
            timeout: REQUEST_TIMEOUT,
            host: host.unwrap_or_default().into(),
            metrics,
        })
        .build())
}

type Stack = BoxService<Request<kube::client::Body>, Response<hyper::body::Incoming>, BoxError>;

/// kube's own stack (`ClientBuilder::try_from(Config)` in kube-client 4.2: proxy, TLS from the
/// kubeconfig, connect/read/write timeouts, base URI, retries of 429/503/504, credentials, extra
/// headers), from the same public parts, but with every TCP connection made through
/// [`FenceConnector`]: kube takes no connector of ours. Left out: its debug-level tracing layer,
/// and `Client::valid_until` for exec-plugin certificates (kube-private; the operator never
/// reads it).
fn kube_stack(config: &kube::Config, fence: Fence) -> Result<Stack, kube::Error> {
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    let tcp = FenceConnector::new(tcp, fence);
    match config.proxy_url.clone() {
        None => over(tcp, config),
        Some(proxy) if proxy.scheme_str() == Some("http") => over(tunnel(proxy, tcp), config),
        Some(proxy) if proxy.scheme_str() == Some("https") => {
            let to_proxy = config.rustls_https_connector_with_connector(tcp)?;
            over(tunnel(proxy, to_proxy), config)
        }
        Some(proxy_url) => Err(kube::Error::ProxyProtocolUnsupported { proxy_url }),
    }
}

/// CONNECT through `proxy`, with its `user:password` if it has one, as kube does.
fn tunnel<C>(proxy: http::Uri, connector: C) -> Tunnel<C> {
    use base64::Engine;
    let auth = proxy
        .authority()
        .and_then(|a| a.as_str().split_once('@'))
        .map(|(userinfo, _)| base64::engine::general_purpose::STANDARD.encode(userinfo))
        .and_then(|b64| http::HeaderValue::from_str(&format!("Basic {b64}")).ok());
    let tunnel = Tunnel::new(proxy, connector);
    match auth {
        Some(auth) => tunnel.with_auth(auth),
        None => tunnel,
    }
}

/// kube's layers and hyper's pooled client over `connector`.
fn over<C>(connector: C, config: &kube::Config) -> Result<Stack, kube::Error>
where
    C: Service<http::Uri> + Clone + Send + Sync + 'static,
    C::Response: Connection + hyper::rt::Read + hyper::rt::Write + Send + Unpin + 'static,
    C::Future: Send + 'static,
    C::Error: Into<BoxError>,
{
    let mut timed = hyper_timeout::TimeoutConnector::new(
        config.rustls_https_connector_with_connector(connector)?,
    );
    timed.set_connect_timeout(config.connect_timeout);
    timed.set_read_timeout(config.read_timeout);
    timed.set_write_timeout(config.write_timeout);
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build::<_, kube::client::Body>(timed);
    let retry = config
        .default_retry
        .then(|| tower::retry::RetryLayer::new(kube::client::retry::RetryPolicy::server_retry()));
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(retry)
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(client);
    Ok(service.boxed())
}

/// The proxy to reach the API server at `dst` through. kube-client reads only a kubeconfig's
/// `proxy-url` or, for a kubeconfig, `HTTPS_PROXY` (never `NO_PROXY`, nothing in a Pod). The
/// operator decides from the environment as the AWS SDK's client does (hyper-util's matcher:
/// `HTTPS_PROXY` or `HTTP_PROXY` by the server's scheme, else `ALL_PROXY`; `NO_PROXY` bypasses),
/// as client-go does; a kubeconfig's own `proxy-url` still wins.
fn proxy_url(from_kube: Option<http::Uri>, dst: &http::Uri) -> Option<http::Uri> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let kube_env = var("HTTPS_PROXY")
        .or_else(|| var("https_proxy"))
        .and_then(|v| v.parse::<http::Uri>().ok());
    match from_kube {
        Some(url) if Some(&url) != kube_env.as_ref() => Some(url),
        _ => proxy_for(
            &hyper_util::client::proxy::matcher::Matcher::from_env(),
            dst,
            var,
        ),
    }
}

/// `matcher`'s proxy for `dst`. The matcher keeps a proxy's `user:password` out of its URI (as a
/// header kube cannot take); kube reads them from the URI, so then the variable's own text is
/// used (`var` reads one).
fn proxy_for(
    matcher: &hyper_util::client::proxy::matcher::Matcher,
    dst: &http::Uri,
    var: impl Fn(&str) -> Option<String>,
) -> Option<http::Uri> {
    let intercept = matcher.intercept(dst)?;
    if intercept.basic_auth().is_none() {
        return Some(intercept.uri().clone());
    }
    let names: [&str; 4] = match dst.scheme_str() {
        Some("http") => ["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"],
        _ => ["HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"],
    };
    let raw = names.into_iter().find_map(var)?;
    let raw = if raw.contains("://") {
        raw
    } else {
        format!("http://{raw}")
    };
    raw.parse().ok()
}

/// Refuses writes once the fence closes and puts a deadline on every request but a watch.
// A layer, not kube::Config's read_timeout: that one would also cut quiet watches.
pub struct GuardLayer {
    pub fence: Fence,
    pub timeout: Duration,
    /// The API server's host and port: the `host` label of the request counter.
    pub host: Arc<str>,
    pub metrics: Arc<Metrics>,
}

#[derive(Clone)]
pub struct Guard<S> {
    inner: S,
    fence: Fence,
    timeout: Duration,
    host: Arc<str>,
    metrics: Arc<Metrics>,
}

impl<S> Layer<S> for GuardLayer {
    type Service = Guard<S>;

    fn layer(&self, inner: S) -> Guard<S> {
        Guard {
            inner,
            fence: self.fence.clone(),
            timeout: self.timeout,
            host: self.host.clone(),
            metrics: self.metrics.clone(),
        }
    }
}

fn is_watch<B>(req: &Request<B>) -> bool {
    req.uri()
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"))
}

/// GET covers get, list and watch; everything else may change something.
fn is_write<B>(req: &Request<B>) -> bool {
    !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS)
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for Guard<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Error: Into<BoxError>,
{
    type Response = Response<Deadline<ResBody>>;
    type Error = BoxError;
    type Future = GuardFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let fence = is_write(&req).then(|| self.fence.clone());
        let deadline = (!is_watch(&req)).then(|| Box::pin(tokio::time::sleep(self.timeout)));
        // Refused before the inner service sees it: tower services may start work in `call`.
        if let Some(Err(e)) = fence.as_ref().map(Fence::check) {
            return GuardFuture::Refused(Some(e));
        }
        let sent = Sent {
            method: req.method().clone(),
            host: self.host.clone(),
            metrics: self.metrics.clone(),
        };
        GuardFuture::Running {
            inner: Box::pin(self.inner.call(req)),
            fence,
            deadline,
            timeout: self.timeout,
            sent,
        }
    }
}

type Sleep = Pin<Box<tokio::time::Sleep>>;

/// A request that went out, counted once it has an answer (or none).
pub struct Sent {
    method: Method,
    host: Arc<str>,
    metrics: Arc<Metrics>,
}

impl Sent {
    /// `code`: the status code, or `<error>` when there was no response (client-go's words).
    fn count(&self, code: &str) {
        self.metrics
            .rest_client_requests_total
            .with_label_values(&[code, self.method.as_str(), &self.host])
            .inc();
    }
}

pub enum GuardFuture<F> {
    Refused(Option<fence::Error>),
    Running {
        inner: Pin<Box<F>>,
        /// Writes only: checked on every poll, so neither a request still connecting nor
        /// kube's retry of a 429/503 goes out once the fence has closed.
        fence: Option<Fence>,
        deadline: Option<Sleep>,
        timeout: Duration,
        sent: Sent,
    },
}

impl<F, B, E> Future for GuardFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
    E: Into<BoxError>,
{
    type Output = Result<Response<Deadline<B>>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            GuardFuture::Refused(e) => Poll::Ready(Err(match e.take() {
                Some(e) => e.into(),
                None => "polled after completion".into(),
            })),
            GuardFuture::Running {
                inner,
                fence,
                deadline,
                timeout,
                sent,
            } => {
                if let Some(Err(e)) = fence.as_ref().map(Fence::check) {
                    sent.count("<error>");
                    return Poll::Ready(Err(e.into()));
                }
                if let Some(d) = deadline
                    && d.as_mut().poll(cx).is_ready()
                {
                    sent.count("<error>");
                    return Poll::Ready(Err(Error(*timeout).into()));
                }
                match inner.as_mut().poll(cx) {
                    // The body has what is left of the deadline.
                    Poll::Ready(Ok(res)) => {
                        sent.count(res.status().as_str());
                        Poll::Ready(Ok(res.map(|inner| Deadline {
                            inner,
                            deadline: deadline.take(),
                            timeout: *timeout,
                        })))
                    }
                    Poll::Ready(Err(e)) => {
                        sent.count("<error>");
                        Poll::Ready(Err(e.into()))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

/// A response body that fails once the request's deadline has passed.
#[derive(Debug)]
pub struct Deadline<B> {
    inner: B,
    deadline: Option<Sleep>,
    timeout: Duration,
}

impl<B> Body for Deadline<B>
where
    B: Body + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, BoxError>>> {
        let this = self.get_mut();
        if let Some(d) = &mut this.deadline
            && d.as_mut().poll(cx).is_ready()
        {
            return Poll::Ready(Some(Err(Error(this.timeout).into())));
        }
        Pin::new(&mut this.inner)
            .poll_frame(cx)
            .map(|f| f.map(|r| r.map_err(Into::into)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Instant;

    use super::*;

    /// Answers "ok" after `delay`; counts the requests it was given.
    #[derive(Clone)]
    struct Slow {
        delay: Duration,
        calls: Arc<AtomicUsize>,
    }

    impl Service<Request<()>> for Slow {
        type Response = Response<String>;
        type Error = BoxError;
        type Future = Pin<Box<dyn Future<Output = Result<Response<String>, BoxError>> + Send>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: Request<()>) -> Self::Future {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let delay = self.delay;
            Box::pin(async move {
                tokio::time::sleep(delay).await;
                Ok(Response::new("ok".to_string()))
            })
        }
    }

    fn guard(delay: Duration, fence: Fence) -> (Guard<Slow>, Arc<AtomicUsize>) {
        counted_guard(delay, fence, &Arc::default())
    }

    fn counted_guard(
        delay: Duration,
        fence: Fence,
        metrics: &Arc<Metrics>,
    ) -> (Guard<Slow>, Arc<AtomicUsize>) {
        let calls = Arc::new(AtomicUsize::new(0));
        let layer = GuardLayer {
            fence,
            timeout: Duration::from_millis(100),
            host: "10.0.0.1:6443".into(),
            metrics: metrics.clone(),
        };
        let slow = Slow {
            delay,
            calls: calls.clone(),
        };
        (layer.layer(slow), calls)
    }

    fn req(method: Method, uri: &str) -> Request<()> {
        Request::builder().method(method).uri(uri).body(()).unwrap()
    }

    #[tokio::test]
    async fn a_closed_fence_stops_writes_before_they_reach_the_client_but_not_reads() {
        let fence = Fence::leader_elected();
        fence.extend(Instant::now()).unwrap_err();
        let (mut g, calls) = guard(Duration::ZERO, fence);
        for m in [Method::PATCH, Method::PUT, Method::POST, Method::DELETE] {
            let err = g.call(req(m, "/apis/x")).await.unwrap_err();
            assert!(err.downcast_ref::<fence::Error>().is_some(), "{err}");
        }
        assert_eq!(
            calls.load(Ordering::SeqCst),
            0,
            "a refused write reached kube's stack"
        );
        let res = g.call(req(Method::GET, "/apis/x")).await.unwrap();
        assert_eq!(res.status(), 200);
        assert_eq!(calls.load(Ordering::SeqCst), 1);

        // Open fence, or no leader election: writes go through.
        for fence in [Fence::disabled(), Fence::leader_elected()] {
            let (mut g, _) = guard(Duration::ZERO, fence);
            g.call(req(Method::PATCH, "/apis/x")).await.unwrap();
        }
    }

    #[tokio::test]
    async fn a_write_in_flight_when_the_fence_closes_is_abandoned() {
        let fence = Fence::leader_elected();
        fence
            .extend(Instant::now() + Duration::from_millis(20))
            .unwrap();
        let (mut g, _) = guard(Duration::from_millis(60), fence);
        let err = g.call(req(Method::PATCH, "/apis/x")).await.unwrap_err();
        assert!(err.downcast_ref::<fence::Error>().is_some(), "{err}");
    }

    #[test]
    fn the_api_server_proxy_follows_the_proxy_variables() {
        use hyper_util::client::proxy::matcher::Matcher;
        let api: http::Uri = "https://10.96.0.1:443".parse().unwrap();
        let plain: http::Uri = "http://127.0.0.1:8001".parse().unwrap();
        let none = |_: &str| None;
        let matcher = Matcher::builder()
            .https("http://proxy.corp:3128")
            .http("http://plain.corp:3128")
            .build();
        let chosen = proxy_for(&matcher, &api, none).unwrap();
        assert_eq!(chosen.to_string(), "http://proxy.corp:3128/");
        let chosen = proxy_for(&matcher, &plain, none).unwrap();
        assert_eq!(chosen.to_string(), "http://plain.corp:3128/");
        // NO_PROXY: by address, by CIDR, by domain suffix.
        for no in ["10.96.0.1", "10.96.0.0/12", "localhost,10.0.0.0/8"] {
            let m = Matcher::builder()
                .https("http://proxy.corp:3128")
                .no(no)
                .build();
            assert_eq!(proxy_for(&m, &api, none), None, "{no}");
        }
        let m = Matcher::builder()
            .https("http://proxy.corp:3128")
            .no(".svc")
            .build();
        let svc: http::Uri = "https://kubernetes.default.svc".parse().unwrap();
        assert_eq!(proxy_for(&m, &svc, none), None);
        assert!(proxy_for(&m, &api, none).is_some());
        // Credentials stay in the URI, where kube reads them.
        let m = Matcher::builder()
            .https("http://u:p@proxy.corp:3128")
            .build();
        let var = |n: &str| (n == "HTTPS_PROXY").then(|| "u:p@proxy.corp:3128".to_string());
        let chosen = proxy_for(&m, &api, var).unwrap();
        assert_eq!(chosen.authority().unwrap().as_str(), "u:p@proxy.corp:3128");
        // No proxy variable: direct.
        assert_eq!(proxy_for(&Matcher::builder().build(), &api, none), None);
    }

    #[tokio::test]
    async fn requests_are_counted_by_code_method_and_host() {
        let metrics = Arc::new(Metrics::new());
        let count = |code: &str, method: &str| {
            let labels = [code, method, "10.0.0.1:6443"];
            metrics
                .rest_client_requests_total
                .with_label_values(&labels)
                .get()
        };
        let (mut g, _) = counted_guard(Duration::ZERO, Fence::disabled(), &metrics);
        g.call(req(Method::DELETE, "/apis/x")).await.unwrap();
        let slow = Duration::from_millis(300);
        let (mut slow, _) = counted_guard(slow, Fence::disabled(), &metrics);
        slow.call(req(Method::PUT, "/apis/x")).await.unwrap_err();
        assert_eq!(count("200", "DELETE"), 1);
        assert_eq!(count("<error>", "PUT"), 1, "no answer in time");
        assert_eq!(count("200", "PUT"), 0);
    }

    #[tokio::test]
    async fn every_request_but_a_watch_has_a_deadline() {
        let (mut g, _) = guard(Duration::from_millis(300), Fence::disabled());
        for (m, uri) in [
            (Method::GET, "/api/v1/namespaces/a/secrets/s"),
            (Method::GET, "/apis/g/v1/buckets?labelSelector=a&limit=500"),
            (Method::PATCH, "/apis/g/v1/namespaces/a/buckets/b/status"),
        ] {
            let start = Instant::now();
            let err = g.call(req(m, uri)).await.unwrap_err();
            assert!(err.downcast_ref::<Error>().is_some(), "{err}");
            assert!(start.elapsed() < Duration::from_millis(250));
        }
        let watch = "/apis/g/v1/buckets?resourceVersion=5&timeoutSeconds=290&watch=true";
        let res = g.call(req(Method::GET, watch)).await.unwrap();
        assert_eq!(res.status(), 200);
    }
}
