//! Bucket tag writes, and the bucket setting that refuses them. With attribute-based access
//! control (ABAC) on, S3 refuses PutBucketTagging and DeleteBucketTagging: a bucket's tags then
//! change only through S3 Control TagResource/UntagResource, which this operator does not call
//! (with a custom endpoint the S3 Control SDK puts the account id in front of the endpoint's
//! host, so it cannot be pointed at an emulator or an S3-compatible store without replacing the
//! SDK's endpoint rules). GetBucketTagging keeps working under ABAC, so ownership reads do not
//! change; only a tag write is refused, and it is reported as such.

use std::collections::BTreeMap;

use aws_sdk_s3::types as s3;

use super::{S3, to_s3_tags};
use crate::aws::{Aws, Error, ErrorKind};

/// The code of a tag write refused because the bucket has ABAC on. S3 documents no code of its
/// own for this refusal, so the operator names it once the bucket's ABAC status explains it.
pub const ABAC_ENABLED: &str = "BucketAbacEnabled";

impl Aws {
    /// Replaces the bucket's tags. A refusal is explained by the bucket's ABAC status, read only
    /// then: no pass pays a request for a setting that matters only when a tag write fails.
    pub async fn put_tags(
        &self,
        region: &str,
        bucket: &str,
        tags: &BTreeMap<String, String>,
    ) -> Result<(), Error> {
        let tagging = s3::Tagging::builder()
            .set_tag_set(Some(to_s3_tags(tags)))
            .build()
            .expect("tag set is set");
        let req = self
            .s3(region)
            .put_bucket_tagging()
            .bucket(bucket)
            .tagging(tagging)
            .send();
        let refused = match Aws::call(S3, "PutBucketTagging", req).await {
            Ok(_) => return Ok(()),
            Err(e) if !may_be_abac(&e) => return Err(e),
            Err(e) => e,
        };
        match self.abac_enabled(region, bucket).await {
            Ok(true) => Err(abac_refusal(bucket, &refused)),
            // Off, or not readable (a store without ABAC, a policy without s3:GetBucketABAC):
            // S3's own refusal is the one to report.
            Ok(false) | Err(_) => Err(refused),
        }
    }

    /// Whether the bucket has attribute-based access control on.
    pub async fn abac_enabled(&self, region: &str, bucket: &str) -> Result<bool, Error> {
        let req = self.s3(region).get_bucket_abac().bucket(bucket).send();
        let out = Aws::call(S3, "GetBucketAbac", req).await?;
        let status = out.abac_status.and_then(|s| s.status);
        Ok(status == Some(s3::BucketAbacStatus::Enabled))
    }
}

/// Whether ABAC may be why S3 refused a tag write: a refusal a person must act on (S3 does not
/// document which code it answers with), not a missing bucket or a transient failure.
fn may_be_abac(e: &Error) -> bool {
    matches!(
        e.kind,
        ErrorKind::Invalid | ErrorKind::AccessDenied | ErrorKind::Conflict
    )
}

/// The refused tag write, said as what it is and what a person can do about it.
fn abac_refusal(bucket: &str, refused: &Error) -> Error {
    Error {
        service: S3,
        operation: "PutBucketTagging",
        code: ABAC_ENABLED.into(),
        message: format!(
            "S3 bucket {bucket} has attribute-based access control (ABAC) enabled, under which S3 \
             refuses PutBucketTagging ({}: {}) and this operator cannot change its tags; turn \
             ABAC off on the bucket (PutBucketAbac with Status Disabled), or give it the tags the \
             Bucket asks for with S3 Control TagResource/UntagResource",
            refused.code, refused.message
        ),
        kind: ErrorKind::Invalid,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aws::classify;

    fn refused(code: &str, status: u16) -> Error {
        Error {
            service: S3,
            operation: "PutBucketTagging",
            code: code.into(),
            message: "refused".into(),
            kind: classify(code, Some(status)),
        }
    }

    #[test]
    fn only_a_refusal_a_person_must_act_on_is_checked_against_abac() {
        for (code, status) in [
            ("InvalidRequest", 400),
            ("AccessDenied", 403),
            ("MethodNotAllowed", 405),
        ] {
            assert!(may_be_abac(&refused(code, status)), "{code}");
        }
        for (code, status) in [
            ("NoSuchBucket", 404),
            ("SlowDown", 503),
            ("InternalError", 500),
        ] {
            assert!(!may_be_abac(&refused(code, status)), "{code}");
        }
    }

    #[test]
    fn an_abac_refusal_names_the_setting_and_what_to_do_and_keeps_s3s_words() {
        let e = abac_refusal("s3op-b", &refused("InvalidRequest", 400));
        assert_eq!(e.code, ABAC_ENABLED);
        // Reported to a person (Ready=False), never retried with backoff.
        assert_eq!(e.kind, ErrorKind::Invalid);
        for words in [
            "s3op-b",
            "attribute-based access control (ABAC) enabled",
            "InvalidRequest: refused",
            "PutBucketAbac with Status Disabled",
            "TagResource/UntagResource",
        ] {
            assert!(e.message.contains(words), "{words}: {}", e.message);
        }
    }
}
