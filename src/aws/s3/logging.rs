//! S3 server access logging calls (spec.logging).

use aws_sdk_s3::types as s3;

use crate::aws::{Aws, Error};

const S3: &str = "s3";

/// Where a bucket's server access logs go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogTarget {
    pub bucket: String,
    pub prefix: String,
}

impl Aws {
    /// The bucket's server access logging: `None` when it is off.
    pub async fn bucket_logging(
        &self,
        region: &str,
        bucket: &str,
    ) -> Result<Option<LogTarget>, Error> {
        let req = self.s3(region).get_bucket_logging().bucket(bucket).send();
        let out = Aws::call(S3, "GetBucketLogging", req).await?;
        Ok(out.logging_enabled.map(|l| LogTarget {
            bucket: l.target_bucket,
            prefix: l.target_prefix,
        }))
    }

    /// Sends the bucket's server access logs to `target`, or turns logging off (`None`).
    pub async fn put_bucket_logging(
        &self,
        region: &str,
        bucket: &str,
        target: Option<&LogTarget>,
    ) -> Result<(), Error> {
        let enabled = target.map(|t| {
            s3::LoggingEnabled::builder()
                .target_bucket(&t.bucket)
                .target_prefix(&t.prefix)
                .build()
                .expect("target bucket and prefix are set")
        });
        let status = s3::BucketLoggingStatus::builder()
            .set_logging_enabled(enabled)
            .build();
        let req = self
            .s3(region)
            .put_bucket_logging()
            .bucket(bucket)
            .bucket_logging_status(status)
            .send();
        Aws::call(S3, "PutBucketLogging", req).await.map(drop)
    }
}
