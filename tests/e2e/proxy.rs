//! Behind a proxy: with HTTPS_PROXY/HTTP_PROXY set, the operator reaches the API server (HTTPS,
//! through CONNECT) and AWS (here moto over plain HTTP, in absolute form) through the proxy;
//! with NO_PROXY naming their address it goes direct.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::api::{Api, DeleteParams, PostParams};
use s3_operator::api::Bucket;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::support::*;

/// A forward proxy on 127.0.0.1: CONNECT tunnels and absolute-form HTTP requests, each
/// connection recorded as "CONNECT host:port" or "<METHOD> host:port".
struct Proxy {
    url: String,
    seen: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    async fn start() -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let task = tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                let log = log.clone();
                tokio::spawn(async move {
                    let _ = relay(conn, log).await;
                });
            }
        });
        Proxy { url, seen, task }
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn relay(mut client: TcpStream, log: Arc<Mutex<Vec<String>>>) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    let end = loop {
        let n = client.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
        if let Some(i) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let line = String::from_utf8_lossy(&head[..head.iter().position(|&b| b == b'\r').unwrap()])
        .into_owned();
    let mut parts = line.split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (authority, leftover) = if method == "CONNECT" {
        (target.to_string(), &head[end..])
    } else {
        // Absolute form: http://host:port/path. The origin (moto) takes absolute form as well,
        // so the request is passed on as it came.
        let rest = target.strip_prefix("http://").unwrap_or(target);
        (rest.split('/').next().unwrap_or("").to_string(), &head[..])
    };
    log.lock().unwrap().push(format!("{method} {authority}"));
    let mut upstream = TcpStream::connect(&authority).await?;
    if method == "CONNECT" {
        client
            .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            .await?;
    }
    upstream.write_all(leftover).await?;
    tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
    Ok(())
}

fn authority(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.split('/').next().unwrap().to_string()
}

/// Runs an operator with `env`, has it create and delete a bucket, and stops it.
async fn bucket_round_trip(ns: &str, name: &str, env: Vec<(String, String)>) {
    let op = Operator::start(OperatorOpts {
        namespaces: vec![ns.to_string()],
        env,
        ..Default::default()
    })
    .await;
    let api = Api::<Bucket>::namespaced(admin().await, ns);
    api.create(
        &PostParams::default(),
        &bucket(name, json!({"deletionPolicy": "Delete"})),
    )
    .await
    .unwrap();
    let s3_name = wait_ready(&api, name).await;
    assert!(bucket_exists(&s3_name).await);
    api.delete(name, &DeleteParams::default()).await.unwrap();
    wait_for("the Bucket to go", Duration::from_secs(60), || {
        let api = api.clone();
        async move { api.get_opt(name).await.unwrap().is_none().then_some(()) }
    })
    .await;
    assert!(!bucket_exists(&s3_name).await);
    assert_eq!(op.terminate().await, Some(0), "the operator stops cleanly");
}

#[tokio::test]
async fn kubernetes_and_aws_requests_go_through_the_proxy_unless_no_proxy_names_them() {
    let client = admin().await;
    let ns = namespace(&client, "proxy").await;
    let (api_server, aws) = (authority(&env().server), authority(&env().aws_endpoint));

    let proxy = Proxy::start().await;
    let vars = |no_proxy: &str| {
        vec![
            ("HTTPS_PROXY".to_string(), proxy.url.clone()),
            ("HTTP_PROXY".to_string(), proxy.url.clone()),
            ("NO_PROXY".to_string(), no_proxy.to_string()),
        ]
    };
    bucket_round_trip(&ns, "via-proxy", vars("")).await;
    let seen = proxy.seen();
    assert!(
        seen.contains(&format!("CONNECT {api_server}")),
        "no CONNECT to the API server {api_server}: {seen:?}"
    );
    assert!(
        seen.iter()
            .any(|s| s.ends_with(&format!(" {aws}")) && !s.starts_with("CONNECT")),
        "no AWS request to {aws} through the proxy: {seen:?}"
    );

    proxy.seen.lock().unwrap().clear();
    bucket_round_trip(&ns, "direct", vars("127.0.0.1")).await;
    assert_eq!(
        proxy.seen(),
        Vec::<String>::new(),
        "NO_PROXY was not honoured"
    );
}
