//! A TLS relay in front of the API server that hands on the events of one resource's watches
//! late, as a loaded API server may deliver one kind's events after another's: what the operator
//! decides from its caches must not depend on which kind's watch event comes first.

use super::*;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::net::{TcpListener, TcpStream};

/// The relay; `url` goes into a kubeconfig (`Identity::via`). It serves the API server's own
/// certificate, so the operator trusts it as it trusts the API server.
pub struct WatchLag {
    pub url: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for WatchLag {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl WatchLag {
    /// Relays everything; the responses on a connection that carries a watch of `resource` (the
    /// plural, e.g. "buckets") arrive `lag` late, in order.
    pub async fn start(resource: &'static str, lag: Duration) -> WatchLag {
        let pki = env().state_dir.join("pki");
        let read = |f: &str| std::fs::read(pki.join(f)).expect("the API server's certificate");
        let certs = CertificateDer::pem_slice_iter(&read("apiserver.crt"))
            .collect::<Result<Vec<_>, _>>()
            .expect("certificate PEM");
        let key = PrivateKeyDer::from_pem_slice(&read("apiserver.key")).expect("key PEM");
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut server = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .expect("server certificate");
        // One request stream per connection, so a watch is told from its path.
        server.alpn_protocols = vec![b"http/1.1".to_vec()];
        let client = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyServerCert(provider)))
            .with_no_client_auth();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
        let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("https://{}", listener.local_addr().expect("addr"));
        let upstream = env().server.trim_start_matches("https://").to_string();
        let marker = format!("/{resource}?");
        let task = tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                let (acceptor, connector) = (acceptor.clone(), connector.clone());
                let (upstream, marker) = (upstream.clone(), marker.clone());
                tokio::spawn(async move {
                    let _ = relay(conn, acceptor, connector, &upstream, &marker, lag).await;
                });
            }
        });
        WatchLag { url, task }
    }
}

async fn relay(
    conn: TcpStream,
    acceptor: tokio_rustls::TlsAcceptor,
    connector: tokio_rustls::TlsConnector,
    upstream: &str,
    marker: &str,
    lag: Duration,
) -> std::io::Result<()> {
    let client = acceptor.accept(conn).await?;
    let name = ServerName::try_from("localhost").expect("server name");
    let server = connector
        .connect(name, TcpStream::connect(upstream).await?)
        .await?;
    let (mut from_client, mut to_client) = tokio::io::split(client);
    let (mut from_server, mut to_server) = tokio::io::split(server);
    let watch = AtomicBool::new(false);
    let watching = &watch;
    let requests = async {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = from_client.read(&mut buf).await?;
            if n == 0 {
                return to_server.shutdown().await;
            }
            let text = String::from_utf8_lossy(&buf[..n]);
            if text.contains(marker) && text.contains("watch=") {
                watching.store(true, Ordering::SeqCst);
            }
            to_server.write_all(&buf[..n]).await?;
        }
    };
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
    // Ends at the server's end of the stream, and so hands the last bytes on too.
    let responses = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = from_server.read(&mut buf).await?;
            if n == 0 {
                return Ok::<_, std::io::Error>(());
            }
            let late = if watching.load(Ordering::SeqCst) {
                lag
            } else {
                Duration::ZERO
            };
            let _ = tx.send((tokio::time::Instant::now() + late, buf[..n].to_vec()));
        }
    };
    let delivery = async {
        while let Some((due, bytes)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            to_client.write_all(&bytes).await?;
        }
        to_client.shutdown().await
    };
    // The client closing ends the relay; the server closing ends it once everything is handed on.
    tokio::select! {
        r = requests => r,
        (r, d) = async { tokio::join!(responses, delivery) } => r.and(d),
    }
}
