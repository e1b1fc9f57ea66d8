//! S3 replication calls (spec.replication): the configuration in the one shape the planner
//! compares, read and written in S3's V2 schema (a `Filter` on every rule).

use std::collections::BTreeMap;

use aws_sdk_s3::types as s3;

use crate::aws::{Aws, Error};

const S3: &str = "s3";

/// A bucket's replication configuration as the operator writes it.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ReplicationConfig {
    /// ARN of the role S3 replicates with.
    pub role: String,
    /// Sorted by id, so two configurations compare equal whatever order S3 returns.
    pub rules: Vec<ReplicaRule>,
}

/// One rule, enabled.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ReplicaRule {
    pub id: String,
    pub priority: i32,
    /// Empty: every key.
    pub prefix: String,
    pub tags: BTreeMap<String, String>,
    pub delete_markers: bool,
    pub destination: String,
    /// The destination's account, for a bucket of another account (replicas then owned by it).
    pub account: Option<String>,
    pub storage_class: Option<String>,
    /// With it, SSE-KMS objects are replicated, encrypted with this key.
    pub replica_kms_key: Option<String>,
}

impl ReplicationConfig {
    pub fn sorted(mut self) -> Self {
        self.rules.sort_by(|a, b| a.id.cmp(&b.id));
        self
    }
}

fn tag(k: &str, v: &str) -> s3::Tag {
    s3::Tag::builder()
        .key(k)
        .value(v)
        .build()
        .expect("key and value are set")
}

fn filter_of(r: &ReplicaRule) -> s3::ReplicationRuleFilter {
    let prefix = (!r.prefix.is_empty()).then(|| r.prefix.clone());
    match (prefix, r.tags.len()) {
        (None, 0) => s3::ReplicationRuleFilter::builder().prefix("").build(),
        (Some(p), 0) => s3::ReplicationRuleFilter::builder().prefix(p).build(),
        (None, 1) => {
            let (k, v) = r.tags.iter().next().expect("one tag");
            s3::ReplicationRuleFilter::builder().tag(tag(k, v)).build()
        }
        (prefix, _) => {
            let tags = r.tags.iter().map(|(k, v)| tag(k, v)).collect();
            let and = s3::ReplicationRuleAndOperator::builder()
                .set_prefix(prefix)
                .set_tags(Some(tags))
                .build();
            s3::ReplicationRuleFilter::builder().and(and).build()
        }
    }
}

fn rule_to_aws(r: &ReplicaRule) -> s3::ReplicationRule {
    let status = |on: bool| {
        if on {
            s3::DeleteMarkerReplicationStatus::Enabled
        } else {
            s3::DeleteMarkerReplicationStatus::Disabled
        }
    };
    let mut destination = s3::Destination::builder()
        .bucket(&r.destination)
        .set_account(r.account.clone())
        .set_storage_class(r.storage_class.as_deref().map(s3::StorageClass::from));
    if r.account.is_some() {
        let owner = s3::AccessControlTranslation::builder()
            .owner(s3::OwnerOverride::Destination)
            .build()
            .expect("owner is set");
        destination = destination.access_control_translation(owner);
    }
    let mut rule = s3::ReplicationRule::builder()
        .id(&r.id)
        .priority(r.priority)
        .status(s3::ReplicationRuleStatus::Enabled)
        .filter(filter_of(r))
        .delete_marker_replication(
            s3::DeleteMarkerReplication::builder()
                .status(status(r.delete_markers))
                .build(),
        );
    if let Some(key) = &r.replica_kms_key {
        let encryption = s3::EncryptionConfiguration::builder()
            .replica_kms_key_id(key)
            .build();
        destination = destination.encryption_configuration(encryption);
        let sse = s3::SseKmsEncryptedObjects::builder()
            .status(s3::SseKmsEncryptedObjectsStatus::Enabled)
            .build()
            .expect("status is set");
        let criteria = s3::SourceSelectionCriteria::builder()
            .sse_kms_encrypted_objects(sse)
            .build();
        rule = rule.source_selection_criteria(criteria);
    }
    rule.destination(destination.build().expect("bucket is set"))
        .build()
        .expect("status and destination are set")
}

fn rule_from_aws(r: s3::ReplicationRule) -> ReplicaRule {
    // The legacy rule-level prefix (deprecated) is never written: a rule carrying one reads as
    // no prefix, and is rewritten.
    let (mut prefix, mut tags) = (String::new(), BTreeMap::new());
    if let Some(f) = r.filter {
        if let Some(p) = f.prefix {
            prefix = p;
        }
        if let Some(t) = f.tag {
            tags.insert(t.key, t.value);
        }
        if let Some(and) = f.and {
            prefix = and.prefix.unwrap_or(prefix);
            for t in and.tags.unwrap_or_default() {
                tags.insert(t.key, t.value);
            }
        }
    }
    let delete_markers = r
        .delete_marker_replication
        .and_then(|d| d.status)
        .is_some_and(|s| s == s3::DeleteMarkerReplicationStatus::Enabled);
    let d = r.destination;
    ReplicaRule {
        id: r.id.unwrap_or_default(),
        priority: r.priority.unwrap_or_default(),
        prefix,
        tags,
        delete_markers,
        destination: d.as_ref().map(|d| d.bucket.clone()).unwrap_or_default(),
        account: d.as_ref().and_then(|d| d.account.clone()),
        storage_class: d
            .as_ref()
            .and_then(|d| d.storage_class.as_ref())
            .map(|c| c.as_str().to_string()),
        replica_kms_key: d
            .and_then(|d| d.encryption_configuration)
            .and_then(|e| e.replica_kms_key_id),
    }
}

impl Aws {
    /// The bucket's replication configuration: `None` when it has none.
    pub async fn bucket_replication(
        &self,
        region: &str,
        bucket: &str,
    ) -> Result<Option<ReplicationConfig>, Error> {
        let req = self
            .s3(region)
            .get_bucket_replication()
            .bucket(bucket)
            .send();
        let out = match Aws::call(S3, "GetBucketReplication", req).await {
            Ok(out) => out,
            Err(e) if e.is("ReplicationConfigurationNotFoundError") => return Ok(None),
            Err(e) => return Err(e),
        };
        Ok(out.replication_configuration.map(|c| {
            // A disabled rule replicates nothing: as if absent, so the plan writes it back.
            let rules = c
                .rules
                .into_iter()
                .filter(|r| r.status == s3::ReplicationRuleStatus::Enabled);
            ReplicationConfig {
                role: c.role,
                rules: rules.map(rule_from_aws).collect(),
            }
            .sorted()
        }))
    }

    /// Replaces the bucket's replication configuration with `config` (which has rules).
    pub async fn put_bucket_replication(
        &self,
        region: &str,
        bucket: &str,
        config: &ReplicationConfig,
    ) -> Result<(), Error> {
        let conf = s3::ReplicationConfiguration::builder()
            .role(&config.role)
            .set_rules(Some(config.rules.iter().map(rule_to_aws).collect()))
            .build()
            .expect("role and rules are set");
        let req = self
            .s3(region)
            .put_bucket_replication()
            .bucket(bucket)
            .replication_configuration(conf)
            .send();
        Aws::call(S3, "PutBucketReplication", req).await.map(drop)
    }

    /// Removes the bucket's replication configuration (none: nothing to do).
    pub async fn delete_bucket_replication(&self, region: &str, bucket: &str) -> Result<(), Error> {
        let req = self
            .s3(region)
            .delete_bucket_replication()
            .bucket(bucket)
            .send();
        match Aws::call(S3, "DeleteBucketReplication", req).await {
            Err(e) if e.is("ReplicationConfigurationNotFoundError") => Ok(()),
            r => r.map(drop),
        }
    }
}
