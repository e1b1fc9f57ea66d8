//! What a pass hands out once its plan is applied: the Secret's data and annotations, and the
//! status (pure).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::keys::{ANN_KEY_HASH, ANN_KEY_ID, ANN_PREVIOUS, ANN_ROTATED_AT, add};
use super::outputs;
use super::plan::{ActiveKey, Kind, Learned, Plan};
use crate::api::condition::{self, Reason};
use crate::api::{BucketAccess, BucketAccessStatus};

/// The Secret's data and annotations and the status, once the plan is applied.
#[derive(Clone, PartialEq)]
pub struct Outcome {
    pub data: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub status: BucketAccessStatus,
}

/// The data holds a secret key: only its keys print.
impl std::fmt::Debug for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outcome")
            .field("data", &self.data.keys().collect::<Vec<_>>())
            .field("annotations", &self.annotations)
            .field("status", &self.status)
            .finish()
    }
}

impl Plan {
    /// The Secret's contents and the status once the plan is applied (pure). `endpoint`: the
    /// custom S3 endpoint, handed on to the application.
    pub fn outcome(
        &self,
        access: &BucketAccess,
        learned: &Learned,
        endpoint: Option<&str>,
        now: jiff::Timestamp,
    ) -> Outcome {
        let facts = &self.bucket;
        let mut data = BTreeMap::from([
            ("AWS_REGION".to_string(), facts.region.clone()),
            ("BUCKET_NAME".to_string(), facts.name.clone()),
            ("BUCKET_ARN".to_string(), facts.arn.clone()),
        ]);
        if let Some(endpoint) = endpoint {
            data.insert("AWS_ENDPOINT_URL_S3".into(), endpoint.to_string());
        }
        // Several Buckets: each granted one's keys say which bucket is which.
        if !access.spec.additional_buckets.is_empty() {
            let first = (access.spec.bucket_ref.name.as_str(), facts);
            let others = self.also.iter().map(|(name, f)| (name.as_str(), f));
            outputs::add_bucket_keys(&mut data, std::iter::once(first).chain(others));
        }
        let mut status = BucketAccessStatus {
            observed_generation: access.metadata.generation,
            secret_name: Some(self.secret_name.clone()),
            ..Default::default()
        };
        let (annotations, message) = match (&self.kind, &learned.key) {
            // The Pod Identity agent hands out the credentials: nothing of them in the Secret.
            (_, _) if self.association.is_some() => {
                (BTreeMap::new(), self.associated(learned, &mut status))
            }
            (Kind::Role { service_account }, _) => {
                data.insert("AWS_ROLE_ARN".into(), learned.arn.clone());
                // The SDK assumes the role through STS, which a custom endpoint serves too. Only
                // here: the other kinds' Secrets stay as they were before this key existed.
                if let Some(endpoint) = endpoint {
                    data.insert("AWS_ENDPOINT_URL_STS".into(), endpoint.to_string());
                }
                status.role_arn = Some(learned.arn.clone());
                let message = format!(
                    "IAM role {} is ready for ServiceAccount {service_account}",
                    self.name
                );
                (BTreeMap::new(), message)
            }
            (Kind::User, Some(key)) => self.hand_out(key, &learned.arn, &mut data, &mut status),
            (Kind::User, None) => unreachable!("plan_keys either keeps a key or creates one"),
            (Kind::Shared { .. }, _) => unreachable!("a shared role comes with an association"),
        };
        let previous = access.status.clone().unwrap_or_default().conditions;
        let generation = access.metadata.generation;
        // Once applied, IAM and the Secret hold what the spec says.
        let in_sync = condition::Said {
            status: true,
            reason: "InSync",
            message: crate::reconcile::bucket::in_sync::message(&self.identity().to_string(), &[]),
        };
        // A Bucket left out of the grant keeps the access from Ready, naming why; the grant on
        // the others stands.
        let (ready, reason, message) = match self.left_out.first() {
            None => (true, Reason::Available, message),
            Some(first) => {
                let why: Vec<&str> = self.left_out.iter().map(|b| b.message.as_str()).collect();
                let message = format!("{message}; not granted: {}", why.join("; "));
                (false, first.reason, message)
            }
        };
        status.conditions = vec![
            condition::ready(&previous, ready, reason, message, generation, now),
            condition::of_type(&previous, condition::IN_SYNC, in_sync, generation, now),
        ];
        status.config_map_name = self.config_map.clone();
        Outcome {
            data: outputs::renamed(data, &access.spec.credentials.secret_keys),
            annotations,
            status,
        }
    }

    /// Puts the association's facts in `status`; returns the Ready message.
    fn associated(&self, learned: &Learned, status: &mut BucketAccessStatus) -> String {
        let target = self.association.as_ref().expect("a PodIdentity plan");
        let role = self
            .association_role(Some(&learned.arn))
            .unwrap_or_default();
        let id = learned.association.clone().unwrap_or_default();
        status.role_arn = Some(role.clone());
        status.pod_identity_association_id = Some(id.clone());
        let sa = &target.service_account;
        match target.shared_role {
            Some(_) => format!(
                "EKS Pod Identity association {id} gives ServiceAccount {sa} the shared role {role}, narrowed to this grant"
            ),
            None => format!(
                "EKS Pod Identity association {id} gives ServiceAccount {sa} IAM role {}",
                self.name
            ),
        }
    }

    /// Puts the user's key pair in the Secret's `data` and its facts in `status`; returns the
    /// Secret's annotations and the Ready message.
    fn hand_out(
        &self,
        key: &ActiveKey,
        arn: &str,
        data: &mut BTreeMap<String, String>,
        status: &mut BucketAccessStatus,
    ) -> (BTreeMap<String, String>, String) {
        data.insert("AWS_ACCESS_KEY_ID".into(), key.id.clone());
        data.insert(
            "AWS_SECRET_ACCESS_KEY".into(),
            key.secret.expose().to_string(),
        );
        status.user_arn = Some(arn.to_string());
        status.access_key_id = Some(key.id.clone());
        status.last_rotation_time = Some(Time(key.created));
        status.next_rotation_time = self.rotation.interval.map(|i| Time(add(key.created, i)));
        let others = self.also.iter().map(|(_, f)| f.name.as_str());
        let buckets: Vec<&str> = std::iter::once(self.bucket.name.as_str())
            .chain(others)
            .collect();
        let message = match buckets.as_slice() {
            [one] => format!(
                "credentials for bucket {one} are in Secret {}",
                self.secret_name
            ),
            all => format!(
                "credentials for buckets {} are in Secret {}",
                all.join(", "),
                self.secret_name
            ),
        };
        (self.key_annotations(key), message)
    }

    /// What the Secret vouches for: the key and a hash of its secret; and, for the reader only,
    /// the key kept through its grace period and when the current key was issued (its
    /// CreateDate, so the value is the same at every pass). Nothing reads the last two back: an
    /// edit of them is written over.
    fn key_annotations(&self, key: &ActiveKey) -> BTreeMap<String, String> {
        let previous = self.previous.as_ref();
        BTreeMap::from([
            (ANN_KEY_HASH.to_string(), key.secret_sha256.clone()),
            (ANN_KEY_ID.to_string(), key.id.clone()),
            (
                ANN_PREVIOUS.to_string(),
                previous.map(|p| p.id.clone()).unwrap_or_default(),
            ),
            (ANN_ROTATED_AT.to_string(), key.created.to_string()),
        ])
    }
}
