//! The fence at the last moment: on the connection itself. Both clients (Kubernetes in
//! `runtime::client`, AWS in `aws::http`) make their TCP connections through
//! [`FenceConnector`], and every write to such a connection, the TLS handshake, a proxy's
//! CONNECT and each request on a pooled connection included, first checks the fence. A
//! request that was checked earlier, waited (for a pooled connection, a TLS handshake, a
//! thread) and then found the fence closed fails with an io error instead of leaving.
//! Reads are not checked: what arrives changes nothing, and a fenced process only exits.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::Uri;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::{Connected, Connection};
use tower::{BoxError, Service};

use super::{Error, Fence};

/// Makes connections through `inner` and wraps each in [`Fenced`].
#[derive(Clone, Debug)]
pub struct FenceConnector<C> {
    inner: C,
    fence: Fence,
}

impl<C> FenceConnector<C> {
    pub fn new(inner: C, fence: Fence) -> Self {
        FenceConnector { inner, fence }
    }
}

impl<C> Service<Uri> for FenceConnector<C>
where
    C: Service<Uri>,
    C::Response: Send + 'static,
    C::Future: Send + 'static,
    C::Error: Into<BoxError>,
{
    type Response = Fenced<C::Response>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Fenced<C::Response>, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let fence = self.fence.clone();
        let connecting = self.inner.call(dst);
        Box::pin(async move {
            let io = connecting.await.map_err(Into::into)?;
            Ok(Fenced {
                inner: io,
                fence,
                forward_proxy: false,
            })
        })
    }
}

/// A connection whose every write checks the fence first.
#[derive(Debug)]
pub struct Fenced<T> {
    inner: T,
    fence: Fence,
    forward_proxy: bool,
}

impl<T> Fenced<T> {
    pub fn new(inner: T, fence: Fence) -> Self {
        Fenced {
            inner,
            fence,
            forward_proxy: false,
        }
    }

    /// Marks a connection to a forward proxy, which takes requests in absolute form (the AWS
    /// client's plain-HTTP requests through `HTTP_PROXY`).
    pub fn through_forward_proxy(mut self) -> Self {
        self.forward_proxy = true;
        self
    }

    fn check(&self) -> io::Result<()> {
        self.fence.check().map_err(io::Error::other)
    }
}

impl<T: Read + Unpin> Read for Fenced<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<T: Write + Unpin> Write for Fenced<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.check()?;
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.check()?;
        Pin::new(&mut this.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl<T: Connection> Connection for Fenced<T> {
    fn connected(&self) -> Connected {
        let connected = self.inner.connected();
        if self.forward_proxy {
            connected.proxy(true)
        } else {
            connected
        }
    }
}

/// Whether `error` (a client's, an SDK's) comes from a closed fence, however deeply wrapped:
/// io errors carry it as their payload, which `source()` skips.
pub fn caused_by_fence(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(e) = next {
        if e.is::<Error>() {
            return true;
        }
        next = match e.downcast_ref::<io::Error>() {
            Some(io) => io
                .get_ref()
                .map(|p| p as &(dyn std::error::Error + 'static)),
            None => e.source(),
        };
    }
    false
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use hyper_util::rt::TokioIo;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// Writes through `Fenced` reach the peer while the fence is open; once it closes, a write
    /// on the same connection fails with an io error carrying the fence's error, and nothing
    /// more reaches the peer.
    #[tokio::test]
    async fn a_write_after_the_fence_closes_fails_and_sends_nothing() {
        let (ours, theirs) = tokio::io::duplex(1024);
        let fence = Fence::leader_elected();
        fence
            .extend(Instant::now() + Duration::from_millis(50))
            .unwrap();
        // hyper's IO traits, as the clients' connection pools drive them.
        let mut io = TokioIo::new(Fenced::new(TokioIo::new(ours), fence.clone()));
        let mut theirs = theirs;

        io.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        io.flush().await.unwrap();
        let mut got = vec![0; 18];
        theirs.read_exact(&mut got).await.unwrap();
        assert_eq!(got, b"GET / HTTP/1.1\r\n\r\n");

        tokio::time::sleep(Duration::from_millis(60)).await;
        let err = io
            .write_all(b"DELETE /x HTTP/1.1\r\n\r\n")
            .await
            .unwrap_err();
        assert!(caused_by_fence(&err), "{err}");
        let vectored = [io::IoSlice::new(b"PUT")];
        let err = io.write_vectored(&vectored).await.unwrap_err();
        assert!(caused_by_fence(&err), "{err}");
        // Reads still work (and find nothing sent), then EOF once our side is dropped.
        drop(io);
        let mut rest = Vec::new();
        theirs.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty(), "sent after the fence closed: {rest:?}");
    }

    #[tokio::test]
    async fn without_leader_election_writes_always_go_through() {
        let (ours, mut theirs) = tokio::io::duplex(64);
        let mut io = TokioIo::new(Fenced::new(TokioIo::new(ours), Fence::disabled()));
        io.write_all(b"ok").await.unwrap();
        let mut got = [0; 2];
        theirs.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"ok");
    }

    #[test]
    fn a_fence_error_is_found_however_it_is_wrapped() {
        let fenced = Error {
            closed_for: Duration::ZERO,
        };
        let io = io::Error::other(fenced.clone());
        assert!(caused_by_fence(&io));
        let boxed: BoxError = Box::new(io::Error::other(io));
        assert!(caused_by_fence(boxed.as_ref()));
        assert!(!caused_by_fence(&io::Error::other("connection reset")));
    }
}
