//! `s3-operator probe <url>`: one plain-HTTP GET that succeeds on a 2xx answer. The image is
//! distroless (no shell, no curl), so the chart's `helm test` Pod runs the operator's own binary
//! to check `/readyz`. Blocking std I/O: it runs once, before any runtime exists.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// GETs `url` (`http://host[:port][/path]`) and returns the response's status code. `timeout`
/// bounds the connection and each read and write.
pub fn get(url: &str, timeout: Duration) -> Result<u16, String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("{url}: only http:// URLs are supported"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if authority.is_empty() {
        return Err(format!("{url}: no host"));
    }
    // A port is present when the text after the last ':' is outside an IPv6 literal's brackets.
    let has_port = authority
        .rfind(':')
        .is_some_and(|i| !authority[i..].contains(']'));
    let target = if has_port {
        authority.to_string()
    } else {
        format!("{authority}:80")
    };
    let addrs = target
        .to_socket_addrs()
        .map_err(|e| format!("{url}: cannot resolve {target}: {e}"))?;
    let mut last = format!("{url}: {target} has no address");
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(stream) => return request(stream, authority, path, timeout, url),
            Err(e) => last = format!("{url}: connect to {addr}: {e}"),
        }
    }
    Err(last)
}

fn request(
    mut stream: TcpStream,
    authority: &str,
    path: &str,
    timeout: Duration,
    url: &str,
) -> Result<u16, String> {
    let io = |e: std::io::Error| format!("{url}: {e}");
    stream.set_read_timeout(Some(timeout)).map_err(io)?;
    stream.set_write_timeout(Some(timeout)).map_err(io)?;
    // One write: `write!` on a bare stream would send each formatted piece as its own segment.
    let head = format!(
        "GET {path} HTTP/1.1\r\nHost: {authority}\r\nUser-Agent: s3-operator-probe\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).map_err(io)?;
    let mut status_line = String::new();
    BufReader::new(stream)
        .read_line(&mut status_line)
        .map_err(io)?;
    // "HTTP/1.1 200 OK"
    let mut parts = status_line.split_whitespace();
    match (parts.next(), parts.next().map(str::parse::<u16>)) {
        (Some(v), Some(Ok(code))) if v.starts_with("HTTP/") => Ok(code),
        _ => Err(format!("{url}: not an HTTP response: {status_line:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
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
        assert_eq!(get(&format!("http://{addr}/readyz"), t), Ok(200));
        let sent = server.join().unwrap();
        assert!(sent.starts_with("GET /readyz HTTP/1.1\r\n"), "{sent}");
        assert!(sent.contains(&format!("Host: {addr}\r\n")), "{sent}");

        let (addr, server) = serve_once("503 Service Unavailable");
        assert_eq!(get(&format!("http://{addr}"), t), Ok(503));
        assert!(server.join().unwrap().starts_with("GET / HTTP/1.1"));
    }

    #[test]
    fn refuses_what_it_cannot_probe() {
        let t = Duration::from_secs(1);
        assert!(
            get("https://127.0.0.1:1/readyz", t)
                .unwrap_err()
                .contains("http://")
        );
        assert!(get("http:///readyz", t).unwrap_err().contains("no host"));
        // Nothing listens there (a port just freed).
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let err = get(&format!("http://127.0.0.1:{port}/readyz"), t).unwrap_err();
        assert!(err.contains("connect"), "{err}");
    }
}
