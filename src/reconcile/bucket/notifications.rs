//! `spec.notifications` of a Bucket: the guarded, normalized desired configuration and how it
//! compares with what S3 holds (pure; the Bucket reconciler reads and writes it).

use crate::api::{NotificationTarget, Notifications};
use crate::aws::naming;
use crate::aws::s3::notifications::ObservedNotifications;

/// The spec's notifications as S3 will hold them (ids defaulted, events sorted), or why they
/// are refused. `allowed`: the operator's `--allowed-notification-targets` (exact ARNs, or an
/// ARN prefix ending in `*`); EventBridge needs none, as it is the bucket account's own bus.
pub fn desired(
    spec: &Notifications,
    region: &str,
    allowed: &[String],
) -> Result<Notifications, String> {
    let partition = naming::partition(region);
    let mut ids: Vec<(String, String)> = Vec::new();
    let mut out = Notifications {
        event_bridge: spec.event_bridge,
        queues: Vec::new(),
        topics: Vec::new(),
    };
    for (kind, list, targets) in [
        ("queue", &spec.queues, &mut out.queues),
        ("topic", &spec.topics, &mut out.topics),
    ] {
        for (i, t) in list.iter().enumerate() {
            let field = format!("spec.notifications.{kind}s[{i}]");
            check_target(&field, &t.arn, partition, region, allowed)?;
            let id = t.id.clone().unwrap_or_else(|| format!("{kind}-{i}"));
            if let Some((other, _)) = ids.iter().find(|(_, seen)| *seen == id) {
                return Err(format!(
                    "{field}.id {id:?} is also the id of {other}: ids must be unique across queues and topics"
                ));
            }
            ids.push((field, id.clone()));
            targets.push(normalize_target(NotificationTarget {
                id: Some(id),
                ..t.clone()
            }));
        }
    }
    Ok(normalize(&out))
}

fn check_target(
    field: &str,
    arn: &str,
    partition: &str,
    region: &str,
    allowed: &[String],
) -> Result<(), String> {
    let parts: Vec<&str> = arn.splitn(6, ':').collect();
    let [_, arn_partition, _, arn_region, _, _] = parts[..] else {
        return Err(format!("{field}.arn {arn:?} is not an ARN"));
    };
    if arn_partition != partition {
        return Err(format!(
            "{field}.arn {arn:?} is in partition {arn_partition}, not the bucket's partition {partition}"
        ));
    }
    if arn_region != region {
        return Err(format!(
            "{field}.arn {arn:?} is in region {arn_region}: S3 notifies only queues and topics in the bucket's region {region}"
        ));
    }
    if !allowed.iter().any(|a| allows(a, arn)) {
        return Err(format!(
            "{field}.arn {arn:?} is not on the operator's --allowed-notification-targets list: only the queues and topics the operator's administrator allows may receive this bucket's events"
        ));
    }
    Ok(())
}

/// One allow-list entry: an exact ARN, or an ARN prefix followed by a single trailing `*`.
pub(crate) fn allows(entry: &str, arn: &str) -> bool {
    match entry.strip_suffix('*') {
        // A bare `*` would allow every queue and topic anywhere: it is not a prefix.
        Some(prefix) => !prefix.is_empty() && !prefix.contains('*') && arn.starts_with(prefix),
        None => entry == arn,
    }
}

fn normalize_target(mut t: NotificationTarget) -> NotificationTarget {
    t.events.sort();
    t.events.dedup();
    if t.filter
        .as_ref()
        .is_some_and(|f| f.prefix.is_none() && f.suffix.is_none())
    {
        t.filter = None;
    }
    t
}

/// The same configuration in one order: targets by id, events sorted.
pub fn normalize(n: &Notifications) -> Notifications {
    let sorted = |list: &[NotificationTarget]| {
        let mut v: Vec<NotificationTarget> = list.iter().cloned().map(normalize_target).collect();
        v.sort_by(|a, b| a.id.cmp(&b.id));
        v
    };
    Notifications {
        event_bridge: n.event_bridge,
        queues: sorted(&n.queues),
        topics: sorted(&n.topics),
    }
}

/// Does S3's configuration differ from `want` (a [`desired`] result)? Anything the spec cannot
/// express (a Lambda function) is drift too: the operator owns the whole configuration.
pub fn drifted(want: &Notifications, have: Option<&ObservedNotifications>) -> bool {
    match have {
        None => !want.is_empty(),
        Some(h) => h.lambda_functions > 0 || normalize(&h.config) != *want,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::KeyFilter;

    const QUEUE: &str = "arn:aws:sqs:us-east-1:123456789012:events";

    fn target(id: Option<&str>, arn: &str, events: &[&str]) -> NotificationTarget {
        NotificationTarget {
            id: id.map(str::to_string),
            arn: arn.into(),
            events: events.iter().map(|e| e.to_string()).collect(),
            filter: None,
        }
    }

    fn spec(queues: Vec<NotificationTarget>, topics: Vec<NotificationTarget>) -> Notifications {
        Notifications {
            event_bridge: false,
            queues,
            topics,
        }
    }

    fn allowed(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn allow_listed_targets_get_default_ids_and_sorted_events() {
        let s = spec(
            vec![target(
                None,
                QUEUE,
                &["s3:ObjectRemoved:*", "s3:ObjectCreated:*"],
            )],
            vec![target(
                Some("mine"),
                "arn:aws:sns:us-east-1:123456789012:t",
                &["s3:ObjectCreated:Put"],
            )],
        );
        let list = allowed(&[QUEUE, "arn:aws:sns:us-east-1:123456789012:*"]);
        let d = desired(&s, "us-east-1", &list).unwrap();
        assert_eq!(d.queues[0].id.as_deref(), Some("queue-0"));
        assert_eq!(
            d.queues[0].events,
            ["s3:ObjectCreated:*", "s3:ObjectRemoved:*"]
        );
        assert_eq!(d.topics[0].id.as_deref(), Some("mine"));
    }

    #[test]
    fn targets_off_the_allow_list_are_refused_naming_the_field_and_rule() {
        let s = spec(vec![target(None, QUEUE, &["s3:ObjectCreated:*"])], vec![]);
        for list in [
            allowed(&[]),
            allowed(&["arn:aws:sqs:us-east-1:123456789012:event"]),
            allowed(&["arn:aws:sqs:us-east-1:123456789012:other*"]),
            // A bare `*` is no prefix: it allows nothing.
            allowed(&["*"]),
        ] {
            let msg = desired(&s, "us-east-1", &list).unwrap_err();
            assert!(
                msg.contains("spec.notifications.queues[0].arn")
                    && msg.contains("--allowed-notification-targets"),
                "{msg}"
            );
        }
        let ok = allowed(&["arn:aws:sqs:us-east-1:123456789012:ev*"]);
        assert!(
            desired(&s, "us-east-1", &ok).is_ok(),
            "a trailing * is a prefix"
        );
    }

    #[test]
    fn another_partition_or_region_is_refused_even_if_allow_listed() {
        let gov = "arn:aws-us-gov:sqs:us-east-1:123456789012:q";
        let west = "arn:aws:sqs:us-west-2:123456789012:q";
        let list = allowed(&[gov, west]);
        for (i, (arn, rule)) in [(gov, "partition"), (west, "region")]
            .into_iter()
            .enumerate()
        {
            let s = spec(vec![], vec![target(None, arn, &["s3:ObjectCreated:*"])]);
            let msg = desired(&s, "us-east-1", &list).unwrap_err();
            assert!(
                msg.contains("spec.notifications.topics[0].arn") && msg.contains(rule),
                "{i}: {msg}"
            );
        }
    }

    #[test]
    fn ids_must_be_unique_across_queues_and_topics() {
        let topic = "arn:aws:sns:us-east-1:123456789012:t";
        let s = spec(
            vec![target(None, QUEUE, &["s3:ObjectCreated:*"])],
            vec![target(Some("queue-0"), topic, &["s3:ObjectCreated:*"])],
        );
        let msg = desired(&s, "us-east-1", &allowed(&[QUEUE, topic])).unwrap_err();
        assert!(
            msg.contains("spec.notifications.topics[0].id") && msg.contains("unique"),
            "{msg}"
        );
    }

    #[test]
    fn eventbridge_alone_needs_no_allow_list() {
        let s = Notifications {
            event_bridge: true,
            ..Default::default()
        };
        let d = desired(&s, "us-east-1", &[]).unwrap();
        assert!(d.event_bridge && !d.is_empty());
        assert!(drifted(&d, None));
        assert!(
            !drifted(&Notifications::default(), None),
            "{{}} on an empty bucket"
        );
    }

    #[test]
    fn drift_is_judged_on_the_whole_configuration() {
        let mut t = target(None, QUEUE, &["s3:ObjectCreated:*", "s3:ObjectRemoved:*"]);
        t.filter = Some(KeyFilter {
            prefix: Some("in/".into()),
            suffix: None,
        });
        let s = spec(vec![t], vec![]);
        let want = desired(&s, "us-east-1", &allowed(&[QUEUE])).unwrap();
        let same = |config: Notifications| ObservedNotifications {
            config,
            lambda_functions: 0,
        };
        // S3's own order of events is no drift.
        let mut have = want.clone();
        have.queues[0].events.reverse();
        assert!(!drifted(&want, Some(&same(have))));
        let mut eb = want.clone();
        eb.event_bridge = true;
        let mut filter = want.clone();
        filter.queues[0].filter = None;
        let mut events = want.clone();
        events.queues[0].events.pop();
        for changed in [eb, filter, events, Notifications::default()] {
            assert!(drifted(&want, Some(&same(changed.clone()))), "{changed:?}");
        }
        let lambda = ObservedNotifications {
            config: want.clone(),
            lambda_functions: 1,
        };
        assert!(
            drifted(&want, Some(&lambda)),
            "a Lambda added outside the spec"
        );
    }
}
