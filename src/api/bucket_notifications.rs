//! `spec.notifications` of a Bucket: S3 event notifications to EventBridge, SQS and SNS.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// The event types S3 can notify (the `Event` values of PutBucketNotificationConfiguration).
pub const NOTIFICATION_EVENTS: &[&str] = &[
    "s3:ObjectCreated:*",
    "s3:ObjectCreated:Put",
    "s3:ObjectCreated:Post",
    "s3:ObjectCreated:Copy",
    "s3:ObjectCreated:CompleteMultipartUpload",
    "s3:ObjectRemoved:*",
    "s3:ObjectRemoved:Delete",
    "s3:ObjectRemoved:DeleteMarkerCreated",
    "s3:ObjectRestore:*",
    "s3:ObjectRestore:Post",
    "s3:ObjectRestore:Completed",
    "s3:ObjectRestore:Delete",
    "s3:ReducedRedundancyLostObject",
    "s3:Replication:*",
    "s3:Replication:OperationFailedReplication",
    "s3:Replication:OperationNotTracked",
    "s3:Replication:OperationMissedThreshold",
    "s3:Replication:OperationReplicatedAfterThreshold",
    "s3:LifecycleExpiration:*",
    "s3:LifecycleExpiration:Delete",
    "s3:LifecycleExpiration:DeleteMarkerCreated",
    "s3:LifecycleTransition",
    "s3:IntelligentTiering",
    "s3:ObjectTagging:*",
    "s3:ObjectTagging:Put",
    "s3:ObjectTagging:Delete",
    "s3:ObjectAcl:Put",
];

// The bucket's whole notification configuration (no doc comment: on an `Option` field it would
// replace the field's own `kubectl explain` text).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Notifications {
    /// Send every event of the bucket to Amazon EventBridge (the default event bus of the
    /// bucket's account and region), where rules route them. Needs no allow-listing. Default
    /// false.
    #[serde(default)]
    pub event_bridge: bool,
    /// Amazon SQS standard queues to notify (S3 cannot notify FIFO queues). Each ARN must be on
    /// the operator's `--allowed-notification-targets` and in the bucket's region, and its
    /// queue policy must let `s3.amazonaws.com` send messages (S3 checks when the configuration
    /// is written).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 50))]
    #[x_kube(validation = Rule::new("self.all(q, q.arn.matches('^arn:aws[a-z-]*:sqs:[a-z0-9-]+:[0-9]{12}:[A-Za-z0-9_-]{1,80}$'))").message("spec.notifications.queues[].arn must be a standard SQS queue ARN, arn:aws:sqs:<region>:<account>:<queue> (S3 cannot notify FIFO queues)"))]
    pub queues: Vec<NotificationTarget>,
    /// Amazon SNS standard topics to notify (S3 cannot notify FIFO topics). Each ARN must be on
    /// the operator's `--allowed-notification-targets` and in the bucket's region, and its
    /// topic policy must let `s3.amazonaws.com` publish.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 50))]
    #[x_kube(validation = Rule::new("self.all(t, t.arn.matches('^arn:aws[a-z-]*:sns:[a-z0-9-]+:[0-9]{12}:[A-Za-z0-9_-]{1,256}$'))").message("spec.notifications.topics[].arn must be a standard SNS topic ARN, arn:aws:sns:<region>:<account>:<topic> (S3 cannot notify FIFO topics)"))]
    pub topics: Vec<NotificationTarget>,
}

impl Notifications {
    /// No notification at all (what `notifications: {}` asks for).
    pub fn is_empty(&self) -> bool {
        !self.event_bridge && self.queues.is_empty() && self.topics.is_empty()
    }
}

/// One SQS queue or SNS topic S3 notifies, with the events and keys it is told about.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct NotificationTarget {
    /// Identifier of this configuration, unique across queues and topics (S3 puts it in each
    /// message as `configurationId`). Defaults to `queue-<index>` or `topic-<index>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub id: Option<String>,
    /// ARN of the SQS queue or SNS topic.
    #[schemars(length(min = 1, max = 512))]
    pub arn: String,
    /// S3 event types to send, such as `s3:ObjectCreated:*` or `s3:ObjectRemoved:Delete`.
    #[schemars(length(min = 1, max = 27), extend("x-kubernetes-list-type" = "set", "items" = {"type": "string", "enum": NOTIFICATION_EVENTS}))]
    pub events: Vec<String>,
    /// Only objects whose keys start with `prefix` and/or end with `suffix` (all objects when
    /// omitted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<KeyFilter>,
}

// The key filter of a notification (no doc comment: on an `Option` field it would replace the
// field's own `kubectl explain` text).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeyFilter {
    /// Object keys must start with this (a literal prefix, such as `images/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub prefix: Option<String>,
    /// Object keys must end with this (a literal suffix, such as `.jpg`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub suffix: Option<String>,
}
