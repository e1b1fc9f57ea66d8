//! Minimal HTTP and HTTPS requests to loopback and Pod addresses (metrics, probes), and reading
//! Prometheus text.

use super::*;

pub fn metric_sum(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A minimal HTTP/1.0 GET against a loopback address: (status, body).
pub async fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    http_request(addr, "GET", path, "").await
}

/// A minimal HTTP/1.0 request with a body against a loopback address: (status, body).
pub async fn http_request(
    addr: &str,
    method: &str,
    path: &str,
    body: &str,
) -> Option<(u16, String)> {
    tokio::time::timeout(
        Duration::from_secs(5),
        http_request_inner(addr, method, path, body),
    )
    .await
    .ok()?
}

pub(crate) async fn http_request_inner(
    addr: &str,
    method: &str,
    path: &str,
    body: &str,
) -> Option<(u16, String)> {
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    let len = body.len();
    s.write_all(
        format!("{method} {path} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {len}\r\n\r\n{body}").as_bytes(),
    )
    .await
    .ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.ok()?;
    let status = buf.split_whitespace().nth(1)?.parse().ok()?;
    let body = buf
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((status, body))
}
/// A minimal HTTPS/1.0 GET against a loopback address, with `token` as bearer token:
/// (status, body). The server's certificate is not verified: the operator's is self-signed, as
/// the ServiceMonitor's `insecureSkipVerify` assumes.
pub async fn https_get(addr: &str, path: &str, token: Option<&str>) -> Option<(u16, String)> {
    tokio::time::timeout(Duration::from_secs(5), https_get_inner(addr, path, token))
        .await
        .ok()?
}

pub(crate) async fn https_get_inner(
    addr: &str,
    path: &str,
    token: Option<&str>,
) -> Option<(u16, String)> {
    use rustls::pki_types::ServerName;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .ok()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyServerCert(provider)))
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await.ok()?;
    let mut s = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").ok()?, tcp)
        .await
        .ok()?;
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    s.write_all(
        format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n")
            .as_bytes(),
    )
    .await
    .ok()?;
    let mut buf = Vec::new();
    // A server may close without TLS close_notify; what arrived before is the answer.
    let _ = s.read_to_end(&mut buf).await;
    let text = String::from_utf8_lossy(&buf);
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((status, body))
}

/// Accepts any server certificate, but still checks the handshake's signatures.
#[derive(Debug)]
pub(crate) struct AnyServerCert(pub(crate) Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyServerCert {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
