//! S3 calls for object lock, intelligent tiering and transfer acceleration, translated to and
//! from the API's own types so the planner compares like with like.

use std::collections::BTreeMap;

use aws_sdk_s3::types as s3;

use super::unset_ok;
use crate::api::{
    AccessTier, DefaultRetention, IntelligentTiering, RetentionMode, Tiering, TieringStatus,
    TransferAcceleration,
};
use crate::aws::{Aws, Error};

const S3: &str = "s3";

/// A bucket's object lock as S3 reports it.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct LockState {
    /// Object lock is on (it can only be chosen when the bucket is created).
    pub enabled: bool,
    pub default_retention: Option<DefaultRetention>,
}

impl Aws {
    /// The bucket's object lock; a bucket created without it reads as not enabled.
    pub async fn object_lock(&self, region: &str, bucket: &str) -> Result<LockState, Error> {
        let req = self
            .s3(region)
            .get_object_lock_configuration()
            .bucket(bucket)
            .send();
        let out = unset_ok(Aws::call(S3, "GetObjectLockConfiguration", req).await)?;
        Ok(out
            .and_then(|o| o.object_lock_configuration)
            .map(lock_from_aws)
            .unwrap_or_default())
    }

    /// Sets the default retention of a bucket that has object lock (`None`: no default).
    pub async fn put_object_lock(
        &self,
        region: &str,
        bucket: &str,
        retention: Option<&DefaultRetention>,
    ) -> Result<(), Error> {
        let req = self
            .s3(region)
            .put_object_lock_configuration()
            .bucket(bucket)
            .object_lock_configuration(lock_to_aws(retention))
            .send();
        Aws::call(S3, "PutObjectLockConfiguration", req)
            .await
            .map(drop)
    }

    /// Every intelligent-tiering configuration of the bucket.
    pub async fn intelligent_tiering(
        &self,
        region: &str,
        bucket: &str,
    ) -> Result<Vec<IntelligentTiering>, Error> {
        let client = self.s3(region);
        let mut all = Vec::new();
        let mut token = None;
        loop {
            let req = client
                .list_bucket_intelligent_tiering_configurations()
                .bucket(bucket)
                .set_continuation_token(token)
                .send();
            let out = Aws::call(S3, "ListBucketIntelligentTieringConfigurations", req).await?;
            all.extend(
                out.intelligent_tiering_configuration_list
                    .unwrap_or_default()
                    .into_iter()
                    .map(tiering_from_aws),
            );
            match out.next_continuation_token {
                Some(t) if out.is_truncated == Some(true) && !t.is_empty() => token = Some(t),
                _ => return Ok(all),
            }
        }
    }

    pub async fn put_intelligent_tiering(
        &self,
        region: &str,
        bucket: &str,
        config: &IntelligentTiering,
    ) -> Result<(), Error> {
        let req = self
            .s3(region)
            .put_bucket_intelligent_tiering_configuration()
            .bucket(bucket)
            .id(&config.id)
            .intelligent_tiering_configuration(tiering_to_aws(config))
            .send();
        Aws::call(S3, "PutBucketIntelligentTieringConfiguration", req)
            .await
            .map(drop)
    }

    pub async fn delete_intelligent_tiering(
        &self,
        region: &str,
        bucket: &str,
        id: &str,
    ) -> Result<(), Error> {
        let req = self
            .s3(region)
            .delete_bucket_intelligent_tiering_configuration()
            .bucket(bucket)
            .id(id)
            .send();
        match Aws::call(S3, "DeleteBucketIntelligentTieringConfiguration", req).await {
            // Already gone is what was asked for.
            Err(e) if e.is("NoSuchConfiguration") => Ok(()),
            other => other.map(drop),
        }
    }

    /// `None` for a bucket whose acceleration was never set.
    pub async fn transfer_acceleration(
        &self,
        region: &str,
        bucket: &str,
    ) -> Result<Option<TransferAcceleration>, Error> {
        let req = self
            .s3(region)
            .get_bucket_accelerate_configuration()
            .bucket(bucket)
            .send();
        let out = Aws::call(S3, "GetBucketAccelerateConfiguration", req).await?;
        Ok(match out.status {
            Some(s3::BucketAccelerateStatus::Enabled) => Some(TransferAcceleration::Enabled),
            Some(s3::BucketAccelerateStatus::Suspended) => Some(TransferAcceleration::Suspended),
            _ => None,
        })
    }

    pub async fn put_transfer_acceleration(
        &self,
        region: &str,
        bucket: &str,
        v: TransferAcceleration,
    ) -> Result<(), Error> {
        let status = match v {
            TransferAcceleration::Enabled => s3::BucketAccelerateStatus::Enabled,
            TransferAcceleration::Suspended => s3::BucketAccelerateStatus::Suspended,
        };
        let conf = s3::AccelerateConfiguration::builder()
            .status(status)
            .build();
        let req = self
            .s3(region)
            .put_bucket_accelerate_configuration()
            .bucket(bucket)
            .accelerate_configuration(conf)
            .send();
        Aws::call(S3, "PutBucketAccelerateConfiguration", req)
            .await
            .map(drop)
    }
}

fn lock_from_aws(c: s3::ObjectLockConfiguration) -> LockState {
    let retention = c.rule.and_then(|r| r.default_retention).and_then(|d| {
        let mode = match d.mode? {
            s3::ObjectLockRetentionMode::Governance => RetentionMode::GOVERNANCE,
            s3::ObjectLockRetentionMode::Compliance => RetentionMode::COMPLIANCE,
            _ => return None,
        };
        // A zero period is the absence of one (some implementations send both fields).
        Some(DefaultRetention {
            mode,
            days: d.days.filter(|d| *d > 0),
            years: d.years.filter(|y| *y > 0),
        })
    });
    LockState {
        enabled: c.object_lock_enabled == Some(s3::ObjectLockEnabled::Enabled),
        default_retention: retention,
    }
}

fn lock_to_aws(retention: Option<&DefaultRetention>) -> s3::ObjectLockConfiguration {
    let rule = retention.map(|r| {
        let mode = match r.mode {
            RetentionMode::GOVERNANCE => s3::ObjectLockRetentionMode::Governance,
            RetentionMode::COMPLIANCE => s3::ObjectLockRetentionMode::Compliance,
        };
        let default = s3::DefaultRetention::builder()
            .mode(mode)
            .set_days(r.days)
            .set_years(r.years)
            .build();
        s3::ObjectLockRule::builder()
            .default_retention(default)
            .build()
    });
    s3::ObjectLockConfiguration::builder()
        .object_lock_enabled(s3::ObjectLockEnabled::Enabled)
        .set_rule(rule)
        .build()
}

/// The form the planner compares: tierings in tier order, no empty prefix.
pub fn normalize_tiering(c: &IntelligentTiering) -> IntelligentTiering {
    let mut c = c.clone();
    c.tierings.sort_by_key(|t| t.access_tier);
    c.prefix = c.prefix.filter(|p| !p.is_empty());
    c
}

fn tiering_from_aws(c: s3::IntelligentTieringConfiguration) -> IntelligentTiering {
    let (mut prefix, mut tags) = (None, BTreeMap::new());
    if let Some(f) = c.filter {
        let and = f
            .and
            .unwrap_or_else(|| s3::IntelligentTieringAndOperator::builder().build());
        prefix = f.prefix.or(and.prefix);
        for t in f.tag.into_iter().chain(and.tags.unwrap_or_default()) {
            tags.insert(t.key, t.value);
        }
    }
    normalize_tiering(&IntelligentTiering {
        id: c.id,
        status: match c.status {
            s3::IntelligentTieringStatus::Disabled => TieringStatus::Disabled,
            _ => TieringStatus::Enabled,
        },
        prefix,
        tags,
        tierings: c
            .tierings
            .into_iter()
            .filter_map(|t| {
                let tier = match t.access_tier {
                    s3::IntelligentTieringAccessTier::ArchiveAccess => AccessTier::ARCHIVE_ACCESS,
                    s3::IntelligentTieringAccessTier::DeepArchiveAccess => {
                        AccessTier::DEEP_ARCHIVE_ACCESS
                    }
                    _ => return None,
                };
                Some(Tiering {
                    access_tier: tier,
                    days: t.days,
                })
            })
            .collect(),
    })
}

fn tiering_to_aws(c: &IntelligentTiering) -> s3::IntelligentTieringConfiguration {
    let tags: Vec<s3::Tag> = c
        .tags
        .iter()
        .filter_map(|(k, v)| s3::Tag::builder().key(k).value(v).build().ok())
        .collect();
    // S3's grammar: a prefix or one tag alone, or both under And.
    let filter = match (&c.prefix, tags.len()) {
        (None, 0) => None,
        (Some(p), 0) => Some(s3::IntelligentTieringFilter::builder().prefix(p).build()),
        (None, 1) => Some(
            s3::IntelligentTieringFilter::builder()
                .set_tag(tags.into_iter().next())
                .build(),
        ),
        (p, _) => Some(
            s3::IntelligentTieringFilter::builder()
                .and(
                    s3::IntelligentTieringAndOperator::builder()
                        .set_prefix(p.clone())
                        .set_tags(Some(tags))
                        .build(),
                )
                .build(),
        ),
    };
    let status = match c.status {
        TieringStatus::Enabled => s3::IntelligentTieringStatus::Enabled,
        TieringStatus::Disabled => s3::IntelligentTieringStatus::Disabled,
    };
    let tierings = c
        .tierings
        .iter()
        .filter_map(|t| {
            let tier = match t.access_tier {
                AccessTier::ARCHIVE_ACCESS => s3::IntelligentTieringAccessTier::ArchiveAccess,
                AccessTier::DEEP_ARCHIVE_ACCESS => {
                    s3::IntelligentTieringAccessTier::DeepArchiveAccess
                }
            };
            s3::Tiering::builder()
                .days(t.days)
                .access_tier(tier)
                .build()
                .ok()
        })
        .collect();
    s3::IntelligentTieringConfiguration::builder()
        .id(&c.id)
        .set_filter(filter)
        .status(status)
        .set_tierings(Some(tierings))
        .build()
        .expect("id, status and tierings are set")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(prefix: Option<&str>, tags: &[(&str, &str)]) -> IntelligentTiering {
        IntelligentTiering {
            id: "archive".into(),
            status: TieringStatus::Disabled,
            prefix: prefix.map(String::from),
            tags: tags
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            tierings: vec![
                Tiering {
                    access_tier: AccessTier::ARCHIVE_ACCESS,
                    days: 90,
                },
                Tiering {
                    access_tier: AccessTier::DEEP_ARCHIVE_ACCESS,
                    days: 180,
                },
            ],
        }
    }

    #[test]
    fn intelligent_tiering_round_trips_through_every_filter_shape() {
        for c in [
            config(None, &[]),
            config(Some("logs/"), &[]),
            config(None, &[("team", "a")]),
            config(Some("logs/"), &[("team", "a")]),
            config(None, &[("team", "a"), ("env", "prod")]),
        ] {
            let aws = tiering_to_aws(&c);
            let one_shape = aws.filter.as_ref().map(|f| {
                [f.prefix.is_some(), f.tag.is_some(), f.and.is_some()]
                    .iter()
                    .filter(|x| **x)
                    .count()
            });
            assert!(matches!(one_shape, None | Some(1)), "{aws:?}");
            assert_eq!(tiering_from_aws(aws), normalize_tiering(&c));
        }
    }

    #[test]
    fn object_lock_round_trips_and_a_zero_period_is_none() {
        for r in [
            None,
            Some(DefaultRetention {
                mode: RetentionMode::COMPLIANCE,
                days: Some(3),
                years: None,
            }),
            Some(DefaultRetention {
                mode: RetentionMode::GOVERNANCE,
                days: None,
                years: Some(2),
            }),
        ] {
            let state = lock_from_aws(lock_to_aws(r.as_ref()));
            assert!(state.enabled);
            assert_eq!(state.default_retention, r);
        }
        let zero = s3::ObjectLockConfiguration::builder()
            .object_lock_enabled(s3::ObjectLockEnabled::Enabled)
            .rule(
                s3::ObjectLockRule::builder()
                    .default_retention(
                        s3::DefaultRetention::builder()
                            .mode(s3::ObjectLockRetentionMode::Governance)
                            .days(5)
                            .years(0)
                            .build(),
                    )
                    .build(),
            )
            .build();
        assert_eq!(
            lock_from_aws(zero).default_retention.and_then(|r| r.years),
            None
        );
    }
}
