//! An application that uses a bucket the way the operator's users do: it takes a BucketAccess's
//! Secret through `envFrom` and knows nothing about the operator. Its credentials and region come
//! from the AWS SDK's default chain (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`),
//! its endpoint from `AWS_ENDPOINT_URL_S3` when the Secret has one, and the bucket from
//! `BUCKET_NAME`. It writes an object, reads it back, and exits 0 only if both worked and the
//! bytes match. Given an ObjectBucketClaim-style ConfigMap instead (`BUCKET_HOST`,
//! `BUCKET_PORT`), it reaches the bucket where that says, as a claim's consumers do.
//!
//!     bucket-app [KEY]     (default key: bucket-app/hello.txt)
//!
//! The end-to-end tests run it as a Pod on the test node (`tests/e2e/cluster.rs`, image built by
//! `hack/images/build.sh app`).

use std::process::ExitCode;

use aws_config::BehaviorVersion;
use aws_sdk_s3::error::DisplayErrorContext;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let key = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "bucket-app/hello.txt".into());
    match run(&key).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bucket-app: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(key: &str) -> Result<(), String> {
    let bucket = std::env::var("BUCKET_NAME").map_err(|_| "BUCKET_NAME is not set".to_string())?;
    // The default chain, untouched: credentials, region and AWS_ENDPOINT_URL_S3 all come from the
    // environment the Secret provides.
    let shared = aws_config::load_defaults(BehaviorVersion::latest()).await;
    // The one setting the Secret cannot carry: S3-compatible endpoints (the test's emulator,
    // MinIO, Ceph) serve buckets under the URL path. The SDK's default, virtual-hosted
    // addressing (`<bucket>.<endpoint host>`) needs wildcard DNS for the endpoint, which such
    // endpoints rarely have. Against AWS itself (no AWS_ENDPOINT_URL_S3) the default stays.
    let claim_endpoint = claim_endpoint();
    let custom_endpoint =
        std::env::var_os("AWS_ENDPOINT_URL_S3").is_some() || claim_endpoint.is_some();
    let mut conf = aws_sdk_s3::config::Builder::from(&shared).force_path_style(custom_endpoint);
    if let Some(url) = claim_endpoint {
        println!("endpoint from BUCKET_HOST and BUCKET_PORT: {url}");
        conf = conf.endpoint_url(url);
    }
    let conf = conf.build();
    let s3 = aws_sdk_s3::Client::from_conf(conf);
    let body = format!("written by bucket-app into {bucket}/{key}\n");

    s3.put_object()
        .bucket(&bucket)
        .key(key)
        .body(body.clone().into_bytes().into())
        .send()
        .await
        .map_err(|e| format!("PutObject {bucket}/{key}: {}", DisplayErrorContext(&e)))?;
    println!("wrote s3://{bucket}/{key} ({} bytes)", body.len());

    let got = s3
        .get_object()
        .bucket(&bucket)
        .key(key)
        .send()
        .await
        .map_err(|e| format!("GetObject {bucket}/{key}: {}", DisplayErrorContext(&e)))?;
    let bytes = got
        .body
        .collect()
        .await
        .map_err(|e| format!("reading {bucket}/{key}: {e}"))?
        .into_bytes();
    if bytes.as_ref() != body.as_bytes() {
        return Err(format!(
            "read back {} bytes that differ from the {} written",
            bytes.len(),
            body.len()
        ));
    }
    println!(
        "read s3://{bucket}/{key} back: the same {} bytes",
        bytes.len()
    );
    Ok(())
}

/// The endpoint an ObjectBucketClaim's ConfigMap names (`BUCKET_HOST`, `BUCKET_PORT`), when no
/// `AWS_ENDPOINT_URL_S3` is set and it is not AWS's own (which the SDK finds by region).
fn claim_endpoint() -> Option<String> {
    if std::env::var_os("AWS_ENDPOINT_URL_S3").is_some() {
        return None;
    }
    let host = std::env::var("BUCKET_HOST")
        .ok()
        .filter(|h| !h.is_empty())?;
    if host.ends_with(".amazonaws.com") || host.ends_with(".amazonaws.com.cn") {
        return None;
    }
    let port = std::env::var("BUCKET_PORT").unwrap_or_else(|_| "443".into());
    let scheme = if port == "443" { "https" } else { "http" };
    Some(format!("{scheme}://{host}:{port}"))
}
