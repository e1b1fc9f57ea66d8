//! S3 event notification calls (GetBucketNotificationConfiguration and its Put), translated to
//! and from `spec.notifications` so the planner compares like with like.

use aws_sdk_s3::types as s3;

use crate::api::{KeyFilter, NotificationTarget, Notifications};
use crate::aws::{Aws, Error};

const S3: &str = "s3";

/// What S3 holds: the part `spec.notifications` can express, and how many Lambda function
/// configurations (which it cannot, so the operator removes them) there are besides.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct ObservedNotifications {
    pub config: Notifications,
    pub lambda_functions: usize,
}

impl Aws {
    /// The bucket's notification configuration (empty when it has none).
    pub async fn notifications(
        &self,
        region: &str,
        bucket: &str,
    ) -> Result<ObservedNotifications, Error> {
        let req = self
            .s3(region)
            .get_bucket_notification_configuration()
            .bucket(bucket)
            .send();
        let out = Aws::call(S3, "GetBucketNotificationConfiguration", req).await?;
        let queues = out.queue_configurations.unwrap_or_default();
        let topics = out.topic_configurations.unwrap_or_default();
        Ok(ObservedNotifications {
            config: Notifications {
                event_bridge: out.event_bridge_configuration.is_some(),
                queues: queues
                    .into_iter()
                    .map(|q| target_from_aws(q.id, q.queue_arn, &q.events, q.filter))
                    .collect(),
                topics: topics
                    .into_iter()
                    .map(|t| target_from_aws(t.id, t.topic_arn, &t.events, t.filter))
                    .collect(),
            },
            lambda_functions: out.lambda_function_configurations.map_or(0, |l| l.len()),
        })
    }

    /// Replaces the bucket's whole notification configuration with `n` (empty: none). S3 checks
    /// each queue and topic can take its messages before it accepts the configuration.
    pub async fn put_notifications(
        &self,
        region: &str,
        bucket: &str,
        n: &Notifications,
    ) -> Result<(), Error> {
        let queues = n
            .queues
            .iter()
            .map(|t| {
                s3::QueueConfiguration::builder()
                    .set_id(t.id.clone())
                    .queue_arn(&t.arn)
                    .set_events(Some(events_to_aws(&t.events)))
                    .set_filter(filter_to_aws(t.filter.as_ref()))
                    .build()
                    .expect("queue ARN and events are set")
            })
            .collect();
        let topics = n
            .topics
            .iter()
            .map(|t| {
                s3::TopicConfiguration::builder()
                    .set_id(t.id.clone())
                    .topic_arn(&t.arn)
                    .set_events(Some(events_to_aws(&t.events)))
                    .set_filter(filter_to_aws(t.filter.as_ref()))
                    .build()
                    .expect("topic ARN and events are set")
            })
            .collect();
        let config = s3::NotificationConfiguration::builder()
            .set_queue_configurations(Some(queues))
            .set_topic_configurations(Some(topics))
            .set_event_bridge_configuration(
                n.event_bridge
                    .then(|| s3::EventBridgeConfiguration::builder().build()),
            )
            .build();
        let req = self
            .s3(region)
            .put_bucket_notification_configuration()
            .bucket(bucket)
            .notification_configuration(config)
            .send();
        Aws::call(S3, "PutBucketNotificationConfiguration", req)
            .await
            .map(drop)
    }
}

fn target_from_aws(
    id: Option<String>,
    arn: String,
    events: &[s3::Event],
    filter: Option<s3::NotificationConfigurationFilter>,
) -> NotificationTarget {
    let mut key = KeyFilter::default();
    for rule in filter
        .and_then(|f| f.key)
        .and_then(|k| k.filter_rules)
        .unwrap_or_default()
    {
        let value = rule.value;
        // S3 spells the names `Prefix`/`Suffix`, moto `prefix`/`suffix`.
        match rule
            .name
            .map(|n| n.as_str().to_ascii_lowercase())
            .as_deref()
        {
            Some("prefix") => key.prefix = value,
            Some("suffix") => key.suffix = value,
            _ => {}
        }
    }
    NotificationTarget {
        id,
        arn,
        events: events.iter().map(|e| e.as_str().to_string()).collect(),
        filter: (key != KeyFilter::default()).then_some(key),
    }
}

fn events_to_aws(events: &[String]) -> Vec<s3::Event> {
    events.iter().map(|e| s3::Event::from(e.as_str())).collect()
}

fn filter_to_aws(f: Option<&KeyFilter>) -> Option<s3::NotificationConfigurationFilter> {
    let f = f?;
    let rules: Vec<s3::FilterRule> = [
        (s3::FilterRuleName::Prefix, &f.prefix),
        (s3::FilterRuleName::Suffix, &f.suffix),
    ]
    .into_iter()
    .filter_map(|(name, value)| {
        value
            .as_ref()
            .map(|v| s3::FilterRule::builder().name(name).value(v).build())
    })
    .collect();
    if rules.is_empty() {
        return None;
    }
    let key = s3::S3KeyFilter::builder()
        .set_filter_rules(Some(rules))
        .build();
    Some(
        s3::NotificationConfigurationFilter::builder()
            .key(key)
            .build(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_round_trip_through_the_sdk_types() {
        let t = NotificationTarget {
            id: Some("q".into()),
            arn: "arn:aws:sqs:us-east-1:123456789012:q".into(),
            events: vec![
                "s3:ObjectCreated:*".into(),
                "s3:ObjectRemoved:Delete".into(),
            ],
            filter: Some(KeyFilter {
                prefix: Some("in/".into()),
                suffix: Some(".json".into()),
            }),
        };
        let events = events_to_aws(&t.events);
        let back = target_from_aws(
            t.id.clone(),
            t.arn.clone(),
            &events,
            filter_to_aws(t.filter.as_ref()),
        );
        assert_eq!(back, t);
        let unfiltered = NotificationTarget {
            filter: Some(KeyFilter::default()),
            ..t.clone()
        };
        assert_eq!(filter_to_aws(unfiltered.filter.as_ref()), None);
    }
}
