//! `s3-operator probe <url>`: one plain-HTTP GET that succeeds on a 2xx answer. The image is
//! distroless (no shell, no curl), so the chart's `helm test` Pod runs the operator's own binary
//! to check `/readyz`, with hyper's client (which the Kubernetes client already links).

use std::time::Duration;

use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

#[derive(thiserror::Error, Debug)]
pub enum Error {
    #[error("{url}: only http:// URLs with a host are supported")]
    Unsupported { url: String },
    #[error("{url}: {source}")]
    Url {
        url: String,
        source: http::uri::InvalidUri,
    },
    #[error("{url}: {source:?}")]
    Request {
        url: String,
        source: hyper_util::client::legacy::Error,
    },
    #[error("{url}: no answer within {timeout:?}")]
    Timeout { url: String, timeout: Duration },
    #[error("cannot start an I/O runtime: {0}")]
    Runtime(std::io::Error),
}

/// GETs `url` (`http://host[:port][/path]`) and returns the response's status code, or fails
/// when there is none within `timeout`.
pub fn get(url: &str, timeout: Duration) -> Result<u16, Error> {
    let uri: http::Uri = url.parse().map_err(|source| Error::Url {
        url: url.into(),
        source,
    })?;
    if uri.scheme_str() != Some("http") || uri.host().is_none_or(str::is_empty) {
        return Err(Error::Unsupported { url: url.into() });
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(Error::Runtime)?;
    runtime.block_on(async {
        let client = Client::builder(TokioExecutor::new()).build_http::<String>();
        match tokio::time::timeout(timeout, client.get(uri)).await {
            Ok(Ok(response)) => Ok(response.status().as_u16()),
            Ok(Err(source)) => Err(Error::Request {
                url: url.into(),
                source,
            }),
            Err(_) => Err(Error::Timeout {
                url: url.into(),
                timeout,
            }),
        }
    })
}

/// `get` until it answers 2xx or `wait` has passed (at least one attempt); the last outcome.
pub fn get_within(url: &str, timeout: Duration, wait: Duration) -> Result<u16, Error> {
    let start = std::time::Instant::now();
    loop {
        let outcome = get(url, timeout);
        let done = matches!(outcome, Ok(code) if (200..300).contains(&code));
        if done || start.elapsed() + Duration::from_secs(1) > wait {
            return outcome;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;

    /// A server that answers one request with `status` and hands back what it was sent.
    fn serve_once(status: &'static str) -> (String, std::thread::JoinHandle<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let handle = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut request = Vec::new();
            let mut buf = [0u8; 1024];
            while !request.ends_with(b"\r\n\r\n") {
                let n = conn.read(&mut buf).unwrap();
                assert!(n > 0, "the request ended early");
                request.extend_from_slice(&buf[..n]);
            }
            let answer = format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n");
            conn.write_all(answer.as_bytes()).unwrap();
            String::from_utf8_lossy(&request).into_owned()
        });
        (addr, handle)
    }

    #[test]
    fn returns_the_status_of_a_get_for_the_path() {
        let t = Duration::from_secs(5);
        let (addr, server) = serve_once("200 OK");
        assert_eq!(get(&format!("http://{addr}/readyz"), t).unwrap(), 200);
        let sent = server.join().unwrap();
        assert!(sent.starts_with("GET /readyz HTTP/1.1\r\n"), "{sent}");
        assert!(
            sent.to_lowercase().contains(&format!("host: {addr}\r\n")),
            "{sent}"
        );

        let (addr, server) = serve_once("503 Service Unavailable");
        assert_eq!(get(&format!("http://{addr}"), t).unwrap(), 503);
        assert!(server.join().unwrap().starts_with("GET / HTTP/1.1"));
    }

    #[test]
    fn waits_for_a_server_that_comes_up_late() {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let late = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(1500));
            let listener = TcpListener::bind(("127.0.0.1", port)).unwrap();
            let (mut conn, _) = listener.accept().unwrap();
            let mut buf = [0u8; 1024];
            let _ = conn.read(&mut buf).unwrap();
            conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                .unwrap();
        });
        let url = format!("http://127.0.0.1:{port}/readyz");
        let t = Duration::from_secs(1);
        assert!(
            get_within(&url, t, Duration::ZERO).is_err(),
            "one attempt, refused"
        );
        assert_eq!(get_within(&url, t, Duration::from_secs(10)).unwrap(), 200);
        late.join().unwrap();
    }

    #[test]
    fn refuses_what_it_cannot_probe() {
        let t = Duration::from_secs(1);
        assert!(matches!(
            get("https://127.0.0.1:1/readyz", t),
            Err(Error::Unsupported { .. })
        ));
        assert!(get("http:///readyz", t).is_err());
        // Nothing listens there (a port just freed).
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let err = get(&format!("http://127.0.0.1:{port}/readyz"), t).unwrap_err();
        assert!(matches!(err, Error::Request { .. }), "{err}");
    }
}
