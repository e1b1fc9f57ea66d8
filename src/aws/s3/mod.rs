//! S3 bucket calls, translated to and from the API's own types so the planner compares like
//! with like.

pub mod logging;
pub mod notifications;
pub mod protection;
pub mod replication;
pub mod tagging;

use std::collections::BTreeMap;

use aws_sdk_s3::types as s3;
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextMut;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;

use super::{Aws, Error};
use crate::api::{
    CorsMethod, CorsRule, Encryption, EncryptionAlgorithm, LifecycleRule, ObjectOwnership,
    PublicAccessBlock, StorageClass, Transition, Versioning,
};

const S3: &str = "s3";

/// Sends `x-amz-expected-bucket-owner` (the operator's own account, from STS at start-up) with
/// every S3 request that names a bucket: S3 refuses it with 403 AccessDenied when another
/// account owns the bucket, so no read or write of the operator ever reaches a bucket of that
/// name in another account, whatever that bucket's tags or policy say. Set here once, on the
/// client, so no call can leave it out.
#[derive(Debug)]
pub(super) struct ExpectedOwner(pub(super) String);

impl Intercept for ExpectedOwner {
    fn name(&self) -> &'static str {
        "ExpectedOwner"
    }

    fn modify_before_signing(
        &self,
        context: &mut BeforeTransmitInterceptorContextMut<'_>,
        _: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if cfg
            .load::<Metadata>()
            .is_some_and(|m| names_a_bucket(m.name()))
        {
            let headers = context.request_mut().headers_mut();
            headers.insert("x-amz-expected-bucket-owner", self.0.clone());
        }
        Ok(())
    }
}

/// Whether S3 takes `ExpectedBucketOwner` on this operation: all the operator calls but
/// CreateBucket (the bucket is the caller's if it succeeds) and ListBuckets (the caller's own).
fn names_a_bucket(operation: &str) -> bool {
    !matches!(operation, "CreateBucket" | "ListBuckets")
}

/// `Ok(None)` when the bucket has no such configuration. A missing bucket stays an error: it
/// is not a bucket without the setting.
fn unset_ok<T>(r: Result<T, Error>) -> Result<Option<T>, Error> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.not_found() && !e.is("NoSuchBucket") => Ok(None),
        Err(e) => Err(e),
    }
}

impl Aws {
    /// The bucket's tags: `Ok(None)` when the bucket does not exist, an empty map when it has none.
    pub async fn bucket_tags(
        &self,
        region: &str,
        bucket: &str,
    ) -> Result<Option<BTreeMap<String, String>>, Error> {
        let req = self.s3(region).get_bucket_tagging().bucket(bucket).send();
        match Aws::call(S3, "GetBucketTagging", req).await {
            Ok(out) => Ok(Some(
                out.tag_set.into_iter().map(|t| (t.key, t.value)).collect(),
            )),
            Err(e) if e.is("NoSuchBucket") => Ok(None),
            Err(e) if e.not_found() => Ok(Some(BTreeMap::new())),
            Err(e) => Err(e),
        }
    }

    pub async fn public_access_block(
        &self,
        region: &str,
        bucket: &str,
    ) -> Result<Option<PublicAccessBlock>, Error> {
        let req = self
            .s3(region)
            .get_public_access_block()
            .bucket(bucket)
            .send();
        let out = unset_ok(Aws::call(S3, "GetPublicAccessBlock", req).await)?;
        Ok(out
            .and_then(|o| o.public_access_block_configuration)
            .map(|c| PublicAccessBlock {
                block_public_acls: c.block_public_acls.unwrap_or(false),
                ignore_public_acls: c.ignore_public_acls.unwrap_or(false),
                block_public_policy: c.block_public_policy.unwrap_or(false),
                restrict_public_buckets: c.restrict_public_buckets.unwrap_or(false),
            }))
    }

    pub async fn encryption(
        &self,
        region: &str,
        bucket: &str,
    ) -> Result<Option<Encryption>, Error> {
        let req = self
            .s3(region)
            .get_bucket_encryption()
            .bucket(bucket)
            .send();
        let out = unset_ok(Aws::call(S3, "GetBucketEncryption", req).await)?;
        Ok(out
            .and_then(|o| o.server_side_encryption_configuration)
            .and_then(|c| c.rules.into_iter().next())
            .map(|rule| {
                let default = rule.apply_server_side_encryption_by_default;
                let kms = default
                    .as_ref()
                    .is_some_and(|d| d.sse_algorithm == s3::ServerSideEncryption::AwsKms);
                Encryption {
                    algorithm: if kms {
                        EncryptionAlgorithm::AwsKms
                    } else {
                        EncryptionAlgorithm::Aes256
                    },
                    kms_key_id: default.and_then(|d| d.kms_master_key_id),
                    // S3 reports `false` for SSE-S3 buckets; only KMS buckets carry the flag.
                    bucket_key_enabled: if kms { rule.bucket_key_enabled } else { None },
                }
            }))
    }

    /// `None` for a bucket that never had versioning enabled.
    pub async fn versioning(
        &self,
        region: &str,
        bucket: &str,
    ) -> Result<Option<Versioning>, Error> {
        let req = self
            .s3(region)
            .get_bucket_versioning()
            .bucket(bucket)
            .send();
        let out = Aws::call(S3, "GetBucketVersioning", req).await?;
        Ok(match out.status {
            Some(s3::BucketVersioningStatus::Enabled) => Some(Versioning::Enabled),
            Some(s3::BucketVersioningStatus::Suspended) => Some(Versioning::Suspended),
            _ => None,
        })
    }

    pub async fn lifecycle_rules(
        &self,
        region: &str,
        bucket: &str,
    ) -> Result<Vec<LifecycleRule>, Error> {
        let req = self
            .s3(region)
            .get_bucket_lifecycle_configuration()
            .bucket(bucket)
            .send();
        let out = unset_ok(Aws::call(S3, "GetBucketLifecycleConfiguration", req).await)?;
        let rules = out.and_then(|o| o.rules).unwrap_or_default();
        Ok(rules.into_iter().map(lifecycle_from_aws).collect())
    }

    pub async fn cors_rules(&self, region: &str, bucket: &str) -> Result<Vec<CorsRule>, Error> {
        let req = self.s3(region).get_bucket_cors().bucket(bucket).send();
        let out = unset_ok(Aws::call(S3, "GetBucketCors", req).await)?;
        let rules = out.and_then(|o| o.cors_rules).unwrap_or_default();
        Ok(rules.into_iter().map(cors_from_aws).collect())
    }

    /// The bucket's policy document; `None` when it has none. A document that is not JSON
    /// reads as `Value::Null`, which no desired policy equals.
    pub async fn bucket_policy(
        &self,
        region: &str,
        bucket: &str,
    ) -> Result<Option<serde_json::Value>, Error> {
        let req = self.s3(region).get_bucket_policy().bucket(bucket).send();
        let out = unset_ok(Aws::call(S3, "GetBucketPolicy", req).await)?;
        Ok(out.map(|o| {
            o.policy
                .and_then(|p| serde_json::from_str(&p).ok())
                .unwrap_or_default()
        }))
    }

    pub async fn put_bucket_policy(
        &self,
        region: &str,
        bucket: &str,
        policy: &serde_json::Value,
    ) -> Result<(), Error> {
        let req = self
            .s3(region)
            .put_bucket_policy()
            .bucket(bucket)
            .policy(policy.to_string())
            .send();
        Aws::call(S3, "PutBucketPolicy", req).await.map(drop)
    }

    /// The bucket's object ownership; `None` when it has no ownership controls.
    pub async fn object_ownership(
        &self,
        region: &str,
        bucket: &str,
    ) -> Result<Option<ObjectOwnership>, Error> {
        let req = self
            .s3(region)
            .get_bucket_ownership_controls()
            .bucket(bucket)
            .send();
        let out = unset_ok(Aws::call(S3, "GetBucketOwnershipControls", req).await)?;
        Ok(out
            .and_then(|o| o.ownership_controls)
            .and_then(|c| c.rules.into_iter().next())
            .and_then(|r| ownership_from_aws(&r.object_ownership)))
    }

    pub async fn put_object_ownership(
        &self,
        region: &str,
        bucket: &str,
        ownership: ObjectOwnership,
    ) -> Result<(), Error> {
        let rule = s3::OwnershipControlsRule::builder()
            .object_ownership(ownership_to_aws(ownership))
            .build()
            .expect("object ownership is set");
        let controls = s3::OwnershipControls::builder()
            .rules(rule)
            .build()
            .expect("rules are set");
        let req = self
            .s3(region)
            .put_bucket_ownership_controls()
            .bucket(bucket)
            .ownership_controls(controls)
            .send();
        Aws::call(S3, "PutBucketOwnershipControls", req)
            .await
            .map(drop)
    }

    /// Creates the bucket with its tags, object ownership and object lock in the same call, so
    /// no bucket of the operator ever exists without its ownership tags (a crash between two
    /// calls cannot strand one), and the ownership default costs no request of its own.
    pub async fn create_bucket(
        &self,
        region: &str,
        bucket: &str,
        tags: &BTreeMap<String, String>,
        ownership: ObjectOwnership,
        object_lock: bool,
    ) -> Result<(), Error> {
        let mut conf = s3::CreateBucketConfiguration::builder().set_tags(Some(to_s3_tags(tags)));
        // us-east-1 is the default location and must not be named.
        if region != "us-east-1" {
            conf = conf.location_constraint(s3::BucketLocationConstraint::from(region));
        }
        let req = self
            .s3(region)
            .create_bucket()
            .bucket(bucket)
            .object_ownership(ownership_to_aws(ownership))
            .create_bucket_configuration(conf.build());
        // Object lock can only be chosen here (it turns versioning on as well); omitted when
        // off, so a plain create stays the request it was.
        let req = if object_lock {
            req.object_lock_enabled_for_bucket(true)
        } else {
            req
        };
        Aws::call(S3, "CreateBucket", req.send()).await.map(drop)
    }

    /// This account's buckets whose names start with `prefix`, with their region where S3 says
    /// it: pages of up to 1,000 (the orphan sweep's list).
    pub async fn buckets_with_prefix(
        &self,
        prefix: &str,
    ) -> Result<Vec<(String, Option<String>)>, Error> {
        let client = self.s3(&self.region);
        let (mut found, mut token) = (vec![], None);
        loop {
            let req = client
                .list_buckets()
                .prefix(prefix)
                .max_buckets(1000)
                .set_continuation_token(token)
                .send();
            let out = Aws::call(S3, "ListBuckets", req).await?;
            let page = out.buckets.unwrap_or_default().into_iter();
            // Filtered here too: an S3-compatible store may ignore the prefix.
            found.extend(page.filter_map(|b| {
                let region = b.bucket_region.filter(|r| !r.is_empty());
                b.name
                    .filter(|n| n.starts_with(prefix))
                    .map(|n| (n, region))
            }));
            match out.continuation_token {
                Some(t) if !t.is_empty() => token = Some(t),
                _ => return Ok(found),
            }
        }
    }

    /// Whether this account has a bucket named `bucket` (ListBuckets lists only the caller's
    /// own): tells a bucket that is gone or another account's from one we may not read.
    pub async fn bucket_in_account(&self, region: &str, bucket: &str) -> Result<bool, Error> {
        Ok(self
            .list_buckets(region, bucket)
            .await?
            .iter()
            .any(|b| b == bucket))
    }

    /// The names of this account's buckets starting with `prefix`, every page.
    pub async fn list_buckets(&self, region: &str, prefix: &str) -> Result<Vec<String>, Error> {
        let client = self.s3(region);
        let (mut token, mut names) = (None, Vec::new());
        loop {
            let req = client
                .list_buckets()
                .prefix(prefix)
                .set_continuation_token(token)
                .send();
            let out = Aws::call(S3, "ListBuckets", req).await?;
            names.extend(
                out.buckets
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(|b| b.name),
            );
            match out.continuation_token {
                Some(t) if !t.is_empty() => token = Some(t),
                _ => return Ok(names),
            }
        }
    }

    pub async fn put_public_access_block(
        &self,
        region: &str,
        bucket: &str,
        pab: &PublicAccessBlock,
    ) -> Result<(), Error> {
        let conf = s3::PublicAccessBlockConfiguration::builder()
            .block_public_acls(pab.block_public_acls)
            .ignore_public_acls(pab.ignore_public_acls)
            .block_public_policy(pab.block_public_policy)
            .restrict_public_buckets(pab.restrict_public_buckets)
            .build();
        let req = self
            .s3(region)
            .put_public_access_block()
            .bucket(bucket)
            .public_access_block_configuration(conf)
            .send();
        Aws::call(S3, "PutPublicAccessBlock", req).await.map(drop)
    }

    pub async fn put_encryption(
        &self,
        region: &str,
        bucket: &str,
        enc: &Encryption,
    ) -> Result<(), Error> {
        let algorithm = match enc.algorithm {
            EncryptionAlgorithm::Aes256 => s3::ServerSideEncryption::Aes256,
            EncryptionAlgorithm::AwsKms => s3::ServerSideEncryption::AwsKms,
        };
        let default = s3::ServerSideEncryptionByDefault::builder()
            .sse_algorithm(algorithm)
            .set_kms_master_key_id(enc.kms_key_id.clone())
            .build()
            .expect("algorithm is set");
        let rule = s3::ServerSideEncryptionRule::builder()
            .apply_server_side_encryption_by_default(default)
            .set_bucket_key_enabled(enc.bucket_key_enabled)
            .build();
        let conf = s3::ServerSideEncryptionConfiguration::builder()
            .rules(rule)
            .build()
            .expect("rules are set");
        let req = self
            .s3(region)
            .put_bucket_encryption()
            .bucket(bucket)
            .server_side_encryption_configuration(conf)
            .send();
        Aws::call(S3, "PutBucketEncryption", req).await.map(drop)
    }

    pub async fn put_versioning(
        &self,
        region: &str,
        bucket: &str,
        v: Versioning,
    ) -> Result<(), Error> {
        let status = match v {
            Versioning::Enabled => s3::BucketVersioningStatus::Enabled,
            Versioning::Suspended => s3::BucketVersioningStatus::Suspended,
        };
        let conf = s3::VersioningConfiguration::builder()
            .status(status)
            .build();
        let req = self
            .s3(region)
            .put_bucket_versioning()
            .bucket(bucket)
            .versioning_configuration(conf)
            .send();
        Aws::call(S3, "PutBucketVersioning", req).await.map(drop)
    }

    /// Replaces the lifecycle configuration; an empty list deletes it.
    pub async fn put_lifecycle_rules(
        &self,
        region: &str,
        bucket: &str,
        rules: &[LifecycleRule],
    ) -> Result<(), Error> {
        let client = self.s3(region);
        if rules.is_empty() {
            let req = client.delete_bucket_lifecycle().bucket(bucket).send();
            return Aws::call(S3, "DeleteBucketLifecycle", req).await.map(drop);
        }
        let conf = s3::BucketLifecycleConfiguration::builder()
            .set_rules(Some(rules.iter().map(lifecycle_to_aws).collect()))
            .build()
            .expect("rules are set");
        let req = client
            .put_bucket_lifecycle_configuration()
            .bucket(bucket)
            .lifecycle_configuration(conf)
            .send();
        Aws::call(S3, "PutBucketLifecycleConfiguration", req)
            .await
            .map(drop)
    }

    /// Replaces the CORS configuration; an empty list deletes it.
    pub async fn put_cors_rules(
        &self,
        region: &str,
        bucket: &str,
        rules: &[CorsRule],
    ) -> Result<(), Error> {
        let client = self.s3(region);
        if rules.is_empty() {
            let req = client.delete_bucket_cors().bucket(bucket).send();
            return Aws::call(S3, "DeleteBucketCors", req).await.map(drop);
        }
        let conf = s3::CorsConfiguration::builder()
            .set_cors_rules(Some(rules.iter().map(cors_to_aws).collect()))
            .build()
            .expect("rules are set");
        let req = client
            .put_bucket_cors()
            .bucket(bucket)
            .cors_configuration(conf)
            .send();
        Aws::call(S3, "PutBucketCors", req).await.map(drop)
    }

    /// Whether the bucket holds no object, object version or delete marker.
    pub async fn bucket_is_empty(&self, region: &str, bucket: &str) -> Result<bool, Error> {
        let req = self
            .s3(region)
            .list_object_versions()
            .bucket(bucket)
            .max_keys(1)
            .send();
        let out = Aws::call(S3, "ListObjectVersions", req).await?;
        Ok(out.versions.unwrap_or_default().is_empty()
            && out.delete_markers.unwrap_or_default().is_empty())
    }

    /// Deletes object versions and delete markers (for `forceDelete`), a page of up to 1,000 at
    /// a time and at most `pages` pages: a huge bucket is emptied over several passes, each of
    /// bounded length.
    pub async fn empty_bucket(
        &self,
        region: &str,
        bucket: &str,
        pages: usize,
    ) -> Result<Emptied, Error> {
        let client = self.s3(region);
        let mut deleted = 0;
        for _ in 0..pages {
            let ids = version_page(&client, bucket).await?;
            if ids.is_empty() {
                return Ok(Emptied {
                    deleted,
                    empty: true,
                });
            }
            tracing::debug!(
                bucket,
                objects = ids.len(),
                "deleting a page of object versions"
            );
            deleted += ids.len();
            delete_page(&client, bucket, ids).await?;
        }
        Ok(Emptied {
            deleted,
            empty: false,
        })
    }

    pub async fn delete_bucket(&self, region: &str, bucket: &str) -> Result<(), Error> {
        let req = self.s3(region).delete_bucket().bucket(bucket).send();
        match Aws::call(S3, "DeleteBucket", req).await {
            Err(e) if e.is("NoSuchBucket") => Ok(()),
            other => other.map(drop),
        }
    }
}

fn ownership_to_aws(o: ObjectOwnership) -> s3::ObjectOwnership {
    match o {
        ObjectOwnership::BucketOwnerEnforced => s3::ObjectOwnership::BucketOwnerEnforced,
        ObjectOwnership::BucketOwnerPreferred => s3::ObjectOwnership::BucketOwnerPreferred,
        ObjectOwnership::ObjectWriter => s3::ObjectOwnership::ObjectWriter,
    }
}

/// `None` for a value this operator does not know: the plan then writes the desired one.
fn ownership_from_aws(o: &s3::ObjectOwnership) -> Option<ObjectOwnership> {
    match o {
        s3::ObjectOwnership::BucketOwnerEnforced => Some(ObjectOwnership::BucketOwnerEnforced),
        s3::ObjectOwnership::BucketOwnerPreferred => Some(ObjectOwnership::BucketOwnerPreferred),
        s3::ObjectOwnership::ObjectWriter => Some(ObjectOwnership::ObjectWriter),
        _ => None,
    }
}

fn to_s3_tags(tags: &BTreeMap<String, String>) -> Vec<s3::Tag> {
    // The builder fails only without a key or value, and both are always set here.
    tags.iter()
        .filter_map(|(k, v)| s3::Tag::builder().key(k).value(v).build().ok())
        .collect()
}

fn lifecycle_from_aws(r: s3::LifecycleRule) -> LifecycleRule {
    #[allow(deprecated)] // rules written by other tools may use the legacy top-level prefix
    let prefix = r
        .filter
        .and_then(|f| f.prefix)
        .or(r.prefix)
        .filter(|p| !p.is_empty());
    LifecycleRule {
        id: r.id.unwrap_or_default(),
        prefix,
        enabled: r.status == s3::ExpirationStatus::Enabled,
        expiration_days: r.expiration.and_then(|e| e.days),
        noncurrent_version_expiration_days: r
            .noncurrent_version_expiration
            .and_then(|e| e.noncurrent_days),
        abort_incomplete_multipart_upload_days: r
            .abort_incomplete_multipart_upload
            .and_then(|a| a.days_after_initiation),
        transitions: r
            .transitions
            .unwrap_or_default()
            .into_iter()
            .filter_map(|t| {
                let class = match t.storage_class? {
                    s3::TransitionStorageClass::StandardIa => StorageClass::STANDARD_IA,
                    s3::TransitionStorageClass::OnezoneIa => StorageClass::ONEZONE_IA,
                    s3::TransitionStorageClass::IntelligentTiering => {
                        StorageClass::INTELLIGENT_TIERING
                    }
                    s3::TransitionStorageClass::Glacier => StorageClass::GLACIER,
                    s3::TransitionStorageClass::GlacierIr => StorageClass::GLACIER_IR,
                    s3::TransitionStorageClass::DeepArchive => StorageClass::DEEP_ARCHIVE,
                    _ => return None,
                };
                Some(Transition {
                    days: t.days?,
                    storage_class: class,
                })
            })
            .collect(),
    }
}

fn lifecycle_to_aws(r: &LifecycleRule) -> s3::LifecycleRule {
    let status = if r.enabled {
        s3::ExpirationStatus::Enabled
    } else {
        s3::ExpirationStatus::Disabled
    };
    s3::LifecycleRule::builder()
        .id(&r.id)
        .status(status)
        .filter(
            s3::LifecycleRuleFilter::builder()
                .prefix(r.prefix.clone().unwrap_or_default())
                .build(),
        )
        .set_expiration(
            r.expiration_days
                .map(|d| s3::LifecycleExpiration::builder().days(d).build()),
        )
        .set_noncurrent_version_expiration(r.noncurrent_version_expiration_days.map(|d| {
            s3::NoncurrentVersionExpiration::builder()
                .noncurrent_days(d)
                .build()
        }))
        .set_abort_incomplete_multipart_upload(r.abort_incomplete_multipart_upload_days.map(|d| {
            s3::AbortIncompleteMultipartUpload::builder()
                .days_after_initiation(d)
                .build()
        }))
        .set_transitions(if r.transitions.is_empty() {
            None
        } else {
            Some(
                r.transitions
                    .iter()
                    .map(|t| {
                        let class = match t.storage_class {
                            StorageClass::STANDARD_IA => s3::TransitionStorageClass::StandardIa,
                            StorageClass::ONEZONE_IA => s3::TransitionStorageClass::OnezoneIa,
                            StorageClass::INTELLIGENT_TIERING => {
                                s3::TransitionStorageClass::IntelligentTiering
                            }
                            StorageClass::GLACIER => s3::TransitionStorageClass::Glacier,
                            StorageClass::GLACIER_IR => s3::TransitionStorageClass::GlacierIr,
                            StorageClass::DEEP_ARCHIVE => s3::TransitionStorageClass::DeepArchive,
                        };
                        s3::Transition::builder()
                            .days(t.days)
                            .storage_class(class)
                            .build()
                    })
                    .collect(),
            )
        })
        .build()
        .expect("status is set")
}

fn cors_from_aws(r: s3::CorsRule) -> CorsRule {
    let mut methods: Vec<CorsMethod> = r
        .allowed_methods
        .iter()
        .filter_map(|m| serde_json::from_value(serde_json::Value::String(m.clone())).ok())
        .collect();
    methods.sort();
    CorsRule {
        allowed_methods: methods,
        allowed_origins: r.allowed_origins,
        allowed_headers: r.allowed_headers.unwrap_or_default(),
        expose_headers: r.expose_headers.unwrap_or_default(),
        max_age_seconds: r.max_age_seconds,
    }
}

fn cors_to_aws(r: &CorsRule) -> s3::CorsRule {
    s3::CorsRule::builder()
        .set_allowed_methods(Some(
            r.allowed_methods.iter().map(|m| format!("{m:?}")).collect(),
        ))
        .set_allowed_origins(Some(r.allowed_origins.clone()))
        .set_allowed_headers((!r.allowed_headers.is_empty()).then(|| r.allowed_headers.clone()))
        .set_expose_headers((!r.expose_headers.is_empty()).then(|| r.expose_headers.clone()))
        .set_max_age_seconds(r.max_age_seconds)
        .build()
        .expect("methods and origins are set")
}

/// What one `empty_bucket` pass did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Emptied {
    /// Object versions and delete markers deleted.
    pub deleted: usize,
    /// Nothing is left in the bucket.
    pub empty: bool,
}

/// Up to 1,000 object versions and delete markers of `bucket`.
async fn version_page(
    client: &aws_sdk_s3::Client,
    bucket: &str,
) -> Result<Vec<s3::ObjectIdentifier>, Error> {
    let req = client
        .list_object_versions()
        .bucket(bucket)
        .max_keys(1000)
        .send();
    let out = Aws::call(S3, "ListObjectVersions", req).await?;
    let versions = out.versions.unwrap_or_default().into_iter();
    let markers = out.delete_markers.unwrap_or_default().into_iter();
    Ok(versions
        .map(|v| (v.key, v.version_id))
        .chain(markers.map(|m| (m.key, m.version_id)))
        .filter_map(|(key, version)| {
            s3::ObjectIdentifier::builder()
                .set_key(key)
                .set_version_id(version)
                .build()
                .ok()
        })
        .collect())
}

/// Deletes one page of object versions; fails unless at least one went.
async fn delete_page(
    client: &aws_sdk_s3::Client,
    bucket: &str,
    ids: Vec<s3::ObjectIdentifier>,
) -> Result<(), Error> {
    let error = |kind, code: String, message: String| Error {
        service: S3,
        operation: "DeleteObjects",
        code,
        message,
        kind,
    };
    let delete = s3::Delete::builder()
        .set_objects(Some(ids))
        .build()
        .map_err(|e| {
            error(
                super::ErrorKind::Invalid,
                "InvalidRequest".into(),
                e.to_string(),
            )
        })?;
    let req = client.delete_objects().bucket(bucket).delete(delete).send();
    let out = Aws::call(S3, "DeleteObjects", req).await?;
    // DeleteObjects answers 200 even when every key failed: surface the first failure instead
    // of listing the same page again forever.
    if let Some(e) = out.errors.unwrap_or_default().into_iter().next() {
        let code = e.code.unwrap_or_default();
        let message = format!(
            "{}: {}",
            e.key.unwrap_or_default(),
            e.message.unwrap_or_default()
        );
        return Err(error(super::classify(&code, None), code, message));
    }
    if out.deleted.unwrap_or_default().is_empty() {
        let message = "no object version was deleted".to_string();
        return Err(error(
            super::ErrorKind::Transient,
            "NoProgress".into(),
            message,
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A server on 127.0.0.1 that answers every request 404 NoSuchBucket and keeps each
    /// request's head, lowercased.
    async fn recording() -> (String, Arc<Mutex<Vec<String>>>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let heads = Arc::new(Mutex::new(Vec::new()));
        let kept = heads.clone();
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                let kept = kept.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0; 16384];
                    while let Ok(n) = sock.read(&mut buf).await
                        && n > 0
                    {
                        let head = String::from_utf8_lossy(&buf[..n]).to_lowercase();
                        // A body sent apart from its head is no request of its own.
                        if !head
                            .lines()
                            .next()
                            .is_some_and(|l| l.ends_with(" http/1.1"))
                        {
                            continue;
                        }
                        kept.lock().unwrap().push(head);
                        let body = "<Error><Code>NoSuchBucket</Code><Message>m</Message></Error>";
                        let reply = format!(
                            "HTTP/1.1 404 Not Found\r\ncontent-length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if sock.write_all(reply.as_bytes()).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        (url, heads)
    }

    /// Every request naming a bucket expects the operator's account to own it; CreateBucket
    /// and ListBuckets, which take no such header, go without.
    #[tokio::test]
    async fn bucket_requests_expect_the_operators_account_to_own_the_bucket() {
        let (url, heads) = recording().await;
        let creds = aws_sdk_s3::config::Credentials::new("AKID", "secret", None, None, "test");
        let base = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new("us-east-1"))
            .endpoint_url(&url)
            .credentials_provider(creds)
            .retry_config(aws_config::retry::RetryConfig::disabled())
            .load()
            .await;
        let metrics = Arc::new(crate::metrics::Metrics::new());
        let aws = Aws::from_config(base, Some(url), metrics).with_bucket_owner("123456789012");
        let (r, b) = ("us-east-1", "s3op-b");
        assert_eq!(aws.bucket_tags(r, b).await.unwrap(), None);
        let _ = aws.bucket_policy(r, b).await;
        let _ = aws.bucket_is_empty(r, b).await;
        let _ = aws.delete_bucket(r, b).await;
        let _ = aws
            .create_bucket(
                r,
                b,
                &BTreeMap::new(),
                ObjectOwnership::BucketOwnerEnforced,
                false,
            )
            .await;
        let _ = aws.bucket_in_account(r, b).await;
        let heads = heads.lock().unwrap().clone();
        assert_eq!(heads.len(), 6, "{heads:?}");
        let expects = |h: &String| h.contains("x-amz-expected-bucket-owner: 123456789012\r\n");
        for head in &heads[..4] {
            assert!(expects(head), "{head}");
            let auth = head
                .lines()
                .find(|l| l.starts_with("authorization:"))
                .unwrap();
            assert!(
                auth.contains("x-amz-expected-bucket-owner"),
                "signed: {auth}"
            );
        }
        for head in &heads[4..] {
            assert!(!head.contains("x-amz-expected-bucket-owner"), "{head}");
        }
    }

    #[test]
    fn lifecycle_rules_round_trip_through_the_sdk_types() {
        let rule = LifecycleRule {
            id: "logs".into(),
            prefix: Some("logs/".into()),
            enabled: true,
            expiration_days: Some(30),
            noncurrent_version_expiration_days: Some(7),
            abort_incomplete_multipart_upload_days: Some(2),
            transitions: vec![Transition {
                days: 10,
                storage_class: StorageClass::GLACIER,
            }],
        };
        assert_eq!(lifecycle_from_aws(lifecycle_to_aws(&rule)), rule);
    }

    #[test]
    fn object_ownership_round_trips_through_the_sdk_types() {
        for o in [
            ObjectOwnership::BucketOwnerEnforced,
            ObjectOwnership::BucketOwnerPreferred,
            ObjectOwnership::ObjectWriter,
        ] {
            assert_eq!(ownership_from_aws(&ownership_to_aws(o)), Some(o));
        }
    }

    #[test]
    fn cors_rules_round_trip_through_the_sdk_types() {
        let rule = CorsRule {
            allowed_methods: vec![CorsMethod::GET, CorsMethod::PUT],
            allowed_origins: vec!["https://example.com".into()],
            allowed_headers: vec!["*".into()],
            expose_headers: vec![],
            max_age_seconds: Some(300),
        };
        assert_eq!(cors_from_aws(cors_to_aws(&rule)), rule);
    }
}
