//! The drift-event queue: CloudTrail's management events for S3 and IAM, which an EventBridge
//! rule the administrator creates delivers to an SQS queue the operator long-polls. An event
//! costs no S3 or IAM call: it only names a bucket, a user or a role, whose object then runs a
//! full pass. The rule and the queue's policy come from [`rule`].

use std::time::Duration;

use aws_sdk_sqs::types::DeleteMessageBatchRequestEntry;
use serde_json::{Value, json};

use super::{Aws, Error, Recorder, fence};

/// How long one ReceiveMessage waits for a message (SQS's longest long poll).
const WAIT: Duration = Duration::from_secs(20);

/// IAM writes that change what the operator reconciles on a user or role.
pub const IAM_EVENTS: &[&str] = &[
    "PutUserPolicy",
    "DeleteUserPolicy",
    "AttachUserPolicy",
    "DetachUserPolicy",
    "PutUserPermissionsBoundary",
    "DeleteUserPermissionsBoundary",
    "CreateAccessKey",
    "UpdateAccessKey",
    "DeleteAccessKey",
    "DeleteUser",
    "TagUser",
    "UntagUser",
    "PutRolePolicy",
    "DeleteRolePolicy",
    "AttachRolePolicy",
    "DetachRolePolicy",
    "PutRolePermissionsBoundary",
    "DeleteRolePermissionsBoundary",
    "UpdateAssumeRolePolicy",
    "DeleteRole",
    "TagRole",
    "UntagRole",
];

/// What a management event touched, and the account it happened in (the event's `account`,
/// else its record's `recipientAccountId`; `None`: neither, as no AWS event lacks).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Touched {
    Bucket {
        name: String,
        account: Option<String>,
    },
    /// An IAM user or role, by name: a name is unique only within its account.
    Identity {
        name: String,
        account: Option<String>,
    },
}

/// Who the operator is in each account, to tell its own writes from drift: in its own account
/// the `aws:PrincipalArn` patterns of its principal (its role, whatever the session); in an
/// AWSAccount's, only its own session of the role there (`arn:...:sts::<id>:assumed-role/<role
/// name>/s3-operator-<cluster>`): anyone else assuming that role makes drift.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Own {
    pub patterns: Vec<String>,
    pub sessions: Vec<String>,
}

/// One message read: what its event touched, if it is one the operator acts on.
#[derive(Debug, PartialEq, Eq)]
pub enum Event {
    /// Made by someone other than the operator.
    Touched(Touched),
    /// The operator's own write: its pass already knows.
    Own,
    /// Not a CloudTrail event for a bucket, user or role.
    Other,
    /// A call AWS refused (its record carries an `errorCode`): it changed nothing, so it wakes
    /// nothing. The rule already leaves these out; this is for a rule made before it did.
    Refused,
}

/// The queue, read and emptied through the operator's fenced HTTP client.
pub struct DriftQueue {
    client: aws_sdk_sqs::Client,
    url: String,
}

impl Aws {
    pub fn drift_queue(&self, url: &str) -> DriftQueue {
        // A long poll outlasts the other clients' 20 s attempt timeout.
        let timeouts = aws_config::timeout::TimeoutConfig::builder()
            .connect_timeout(Duration::from_secs(5))
            .operation_attempt_timeout(WAIT + Duration::from_secs(10))
            .operation_timeout(WAIT + Duration::from_secs(20))
            .build();
        let mut conf = aws_sdk_sqs::config::Builder::from(&self.base)
            .timeout_config(timeouts)
            .http_client(self.http.clone())
            .interceptor(Recorder(self.metrics.clone()))
            .interceptor(fence::FenceCheck(self.fence.clone()));
        if let Some(region) = queue_region(url) {
            conf = conf.region(aws_config::Region::new(region));
        }
        DriftQueue {
            client: aws_sdk_sqs::Client::from_conf(conf.build()),
            url: url.to_string(),
        }
    }
}

impl DriftQueue {
    /// Up to 10 messages, waiting up to 20 s for the first: (body, receipt handle) pairs.
    pub async fn receive(&self) -> Result<Vec<(String, String)>, Error> {
        let req = self
            .client
            .receive_message()
            .queue_url(&self.url)
            .max_number_of_messages(10)
            .wait_time_seconds(WAIT.as_secs() as i32)
            .send();
        let out = Aws::call("sqs", "ReceiveMessage", req).await?;
        Ok(out
            .messages
            .unwrap_or_default()
            .into_iter()
            .filter_map(|m| Some((m.body?, m.receipt_handle?)))
            .collect())
    }

    /// Deletes handled messages (a message left behind comes back once: harmless).
    pub async fn delete(&self, receipts: Vec<String>) -> Result<(), Error> {
        if receipts.is_empty() {
            return Ok(());
        }
        let entries = receipts.into_iter().enumerate().map(|(i, r)| {
            DeleteMessageBatchRequestEntry::builder()
                .id(i.to_string())
                .receipt_handle(r)
                .build()
                .expect("id and receipt handle are set")
        });
        let req = self
            .client
            .delete_message_batch()
            .queue_url(&self.url)
            .set_entries(Some(entries.collect()))
            .send();
        Aws::call("sqs", "DeleteMessageBatch", req).await.map(drop)
    }
}

/// The region in an AWS queue URL (`https://sqs.<region>.amazonaws.com/...`); none for a
/// custom endpoint's, which the operator's region then signs.
fn queue_region(url: &str) -> Option<String> {
    let host = url.split("://").nth(1)?.split('/').next()?;
    let region = host.strip_prefix("sqs.")?.split('.').next()?;
    host.contains(".amazonaws.com").then(|| region.to_string())
}

/// The account an EventBridge message's event happened in: its `account`, kept when a rule
/// forwards it to another account's bus, else its CloudTrail record's `recipientAccountId`.
pub fn account_of(body: &str) -> Option<String> {
    let event = serde_json::from_str::<Value>(body).ok()?;
    account_in(&event)
}

fn account_in(event: &Value) -> Option<String> {
    event["account"]
        .as_str()
        .or(event["detail"]["recipientAccountId"].as_str())
        .map(str::to_string)
}

/// What an EventBridge message (a CloudTrail "AWS API Call" event) touched, and whether the
/// operator made it ([`Own`]).
pub fn parse(body: &str, own: &Own) -> Event {
    let Ok(event) = serde_json::from_str::<Value>(body) else {
        return Event::Other;
    };
    let detail = &event["detail"];
    if !detail["errorCode"].is_null() {
        return Event::Refused;
    }
    let params = &detail["requestParameters"];
    let account = account_in(&event);
    let touched = match detail["eventSource"].as_str() {
        Some("s3.amazonaws.com") => params["bucketName"].as_str().map(|b| Touched::Bucket {
            name: b.into(),
            account,
        }),
        Some("iam.amazonaws.com") => params["userName"]
            .as_str()
            .or(params["roleName"].as_str())
            .map(|n| Touched::Identity {
                name: n.into(),
                account,
            }),
        _ => None,
    };
    let Some(touched) = touched else {
        return Event::Other;
    };
    let who = &detail["userIdentity"];
    let (principal, session) = match who["type"].as_str() {
        Some("AssumedRole") => (
            who["sessionContext"]["sessionIssuer"]["arn"].as_str(),
            who["arn"].as_str(),
        ),
        _ => (who["arn"].as_str(), None),
    };
    let by_pattern = principal.is_some_and(|p| own.patterns.iter().any(|pat| arn_like(pat, p)));
    let by_session = session.is_some_and(|s| own.sessions.iter().any(|o| o == s));
    if by_pattern || by_session {
        Event::Own
    } else {
        Event::Touched(touched)
    }
}

/// IAM's `ArnLike`: `*` matches any run of characters (here, within one ARN).
fn arn_like(pattern: &str, arn: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = arn.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    for (i, part) in parts.iter().enumerate() {
        if i == parts.len() - 1 {
            return rest.ends_with(part);
        }
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.is_empty()
}

/// Name of the EventBridge rule an installation's drift events come through.
pub fn rule_name(cluster: &str) -> String {
    format!("s3-operator-{cluster}-drift")
}

/// The events of this installation's buckets and of IAM writes to users and roles, on a
/// default bus.
fn event_pattern(bucket_prefix: &str) -> Value {
    json!({
        "source": ["aws.s3", "aws.iam"],
        "detail-type": ["AWS API Call via CloudTrail"],
        // Calls AWS refused changed nothing: without this, anyone (a tenant's own
        // credentials included) could fill the queue with refused calls naming the
        // operator's buckets and users, each waking a full pass.
        "detail": {"$or": [
            {"eventSource": ["s3.amazonaws.com"],
             "requestParameters": {"bucketName": [{"prefix": bucket_prefix}]},
             "errorCode": [{"exists": false}]},
            {"eventSource": ["iam.amazonaws.com"], "eventName": IAM_EVENTS,
             "errorCode": [{"exists": false}]},
        ]},
    })
}

/// The ARN of the rule `name` on the default bus of `region` in `account`.
fn rule_arn(partition: &str, account: &str, region: &str, name: &str) -> String {
    format!("arn:{partition}:events:{region}:{account}:rule/{name}")
}

/// The EventBridge rule (name and event pattern, on the default bus: IAM's events arrive in
/// us-east-1 only, so the rule and queue live there or the rule forwards them) and the queue
/// policy that lets only that rule send to the queue.
pub fn rule(
    partition: &str,
    account: &str,
    region: &str,
    cluster: &str,
    bucket_prefix: &str,
    queue_arn: &str,
) -> Value {
    let name = rule_name(cluster);
    let rule_arn = rule_arn(partition, account, region, &name);
    json!({
        "ruleName": name,
        "eventPattern": event_pattern(bucket_prefix),
        "queuePolicy": {
            "Version": super::policy::VERSION,
            "Statement": [{
                "Sid": "DriftEventsFromTheRule",
                "Effect": "Allow",
                "Principal": {"Service": "events.amazonaws.com"},
                "Action": "sqs:SendMessage",
                "Resource": queue_arn,
                "Condition": {"ArnEquals": {"aws:SourceArn": rule_arn}},
            }],
        },
    })
}

/// Name of the role EventBridge assumes in a member account to put its drift events on the
/// operator's account's bus: outside the operator's IAM path, so the operator can neither
/// change it nor sweep it.
pub fn forwarding_role_name(cluster: &str) -> String {
    format!("s3-operator-{cluster}-drift-events")
}

/// What a member account (an AWSAccount's) needs for its drift events to reach the operator's
/// queue: the same rule on its default bus of `region`, whose target is the default bus of the
/// operator's account `home` (whose own rule, [`rule`], delivers to the queue); the role
/// EventBridge assumes for that target (trusting only EventBridge acting for that rule, allowed
/// only `events:PutEvents` on that bus); and, for the operator's account, the bus policy
/// statement letting exactly that rule of that account put events there.
pub fn member_rule(
    partition: &str,
    member: &str,
    home: &str,
    region: &str,
    cluster: &str,
    bucket_prefix: &str,
) -> Value {
    let name = rule_name(cluster);
    let member_rule = rule_arn(partition, member, region, &name);
    let bus = format!("arn:{partition}:events:{region}:{home}:event-bus/default");
    let role = forwarding_role_name(cluster);
    let role_arn = format!("arn:{partition}:iam::{member}:role/{role}");
    json!({
        "ruleName": name,
        "eventPattern": event_pattern(bucket_prefix),
        "target": {"Id": "operator-event-bus", "Arn": bus, "RoleArn": role_arn},
        "roleName": role,
        "trustPolicy": {
            "Version": super::policy::VERSION,
            "Statement": [{
                "Sid": "EventBridgeForTheDriftRule",
                "Effect": "Allow",
                "Principal": {"Service": "events.amazonaws.com"},
                "Action": "sts:AssumeRole",
                "Condition": {
                    "StringEquals": {"aws:SourceAccount": member},
                    "ArnEquals": {"aws:SourceArn": member_rule},
                },
            }],
        },
        "rolePolicy": {
            "Version": super::policy::VERSION,
            "Statement": [{
                "Sid": "PutDriftEventsOnTheOperatorsBus",
                "Effect": "Allow",
                "Action": "events:PutEvents",
                "Resource": bus,
            }],
        },
        "busPolicyStatement": {
            "Sid": format!("DriftEventsFrom{member}"),
            "Effect": "Allow",
            "Principal": {"AWS": format!("arn:{partition}:iam::{member}:root")},
            "Action": "events:PutEvents",
            "Resource": bus,
            "Condition": {
                "ArnEquals": {"aws:SourceArn": member_rule},
                "ForAllValues:StringEquals": {"events:source": ["aws.s3", "aws.iam"]},
            },
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(source: &str, params: Value, who: Value) -> String {
        json!({"detail-type": "AWS API Call via CloudTrail",
            "detail": {"eventSource": source, "eventName": "X", "requestParameters": params,
                "userIdentity": who}})
        .to_string()
    }

    fn bucket(name: &str, account: Option<&str>) -> Event {
        Event::Touched(Touched::Bucket {
            name: name.into(),
            account: account.map(str::to_string),
        })
    }

    fn identity(name: &str, account: Option<&str>) -> Event {
        Event::Touched(Touched::Identity {
            name: name.into(),
            account: account.map(str::to_string),
        })
    }

    fn own() -> Own {
        Own {
            patterns: vec![
                "arn:aws:iam::1:role/s3-operator".to_string(),
                "arn:aws:iam::1:role/*/s3-operator".to_string(),
            ],
            sessions: vec![
                "arn:aws:sts::222222222222:assumed-role/s3op-target/s3-operator-c".to_string(),
            ],
        }
    }

    #[test]
    fn events_name_the_bucket_user_or_role_they_touched_unless_the_operator_made_them() {
        let own = own();
        let admin = json!({"type": "IAMUser", "arn": "arn:aws:iam::1:user/admin"});
        let s3 = event(
            "s3.amazonaws.com",
            json!({"bucketName": "b"}),
            admin.clone(),
        );
        assert_eq!(parse(&s3, &own), bucket("b", None));
        let user = event("iam.amazonaws.com", json!({"userName": "u"}), admin.clone());
        assert_eq!(parse(&user, &own), identity("u", None));
        let role = event("iam.amazonaws.com", json!({"roleName": "r"}), admin);
        assert_eq!(parse(&role, &own), identity("r", None));

        let session = json!({"type": "AssumedRole",
            "arn": "arn:aws:sts::1:assumed-role/s3-operator/pod",
            "sessionContext": {"sessionIssuer": {"arn": "arn:aws:iam::1:role/ops/s3-operator"}}});
        let mine = event("s3.amazonaws.com", json!({"bucketName": "b"}), session);
        assert_eq!(parse(&mine, &own), Event::Own);
        let other = json!({"type": "AssumedRole", "arn": "x",
            "sessionContext": {"sessionIssuer": {"arn": "arn:aws:iam::1:role/s3-operator-2"}}});
        let theirs = event("s3.amazonaws.com", json!({"bucketName": "b"}), other);
        assert_eq!(parse(&theirs, &own), bucket("b", None));

        let mut refused: Value = serde_json::from_str(&event(
            "s3.amazonaws.com",
            json!({"bucketName": "b"}),
            json!({"type": "IAMUser", "arn": "arn:aws:iam::1:user/tenant"}),
        ))
        .unwrap();
        refused["detail"]["errorCode"] = json!("AccessDenied");
        assert_eq!(parse(&refused.to_string(), &own), Event::Refused);

        let sqs = event("sqs.amazonaws.com", json!({"queueUrl": "q"}), json!({}));
        assert_eq!(parse(&sqs, &own), Event::Other);
        assert_eq!(parse("not json", &own), Event::Other);
        assert_eq!(parse("{}", &own), Event::Other);
    }

    /// An event carries the account it happened in: its `account` (kept when forwarded to
    /// the operator's bus), else its record's `recipientAccountId`.
    #[test]
    fn events_carry_their_account() {
        let own = own();
        let admin = json!({"type": "IAMUser", "arn": "arn:aws:iam::3:user/admin"});
        let mut e: Value =
            serde_json::from_str(&event("iam.amazonaws.com", json!({"userName": "u"}), admin))
                .unwrap();
        e["detail"]["recipientAccountId"] = json!("333333333333");
        assert_eq!(
            parse(&e.to_string(), &own),
            identity("u", Some("333333333333"))
        );
        assert_eq!(account_of(&e.to_string()).as_deref(), Some("333333333333"));
        e["account"] = json!("444444444444");
        assert_eq!(
            parse(&e.to_string(), &own),
            identity("u", Some("444444444444"))
        );
        assert_eq!(account_of("not json"), None);
    }

    /// In a member account only the operator's own session of its role there is the
    /// operator: another session of the same role (a human who may assume it) is drift, and
    /// so is the same session name of another role.
    #[test]
    fn in_a_member_account_only_the_operators_session_is_its_own() {
        let own = own();
        let issuer = json!({"arn": "arn:aws:iam::222222222222:role/s3op-target"});
        let session = |arn: &str| {
            json!({"type": "AssumedRole", "arn": arn,
                "sessionContext": {"sessionIssuer": issuer.clone()}})
        };
        let by = |who: Value| {
            let mut e: Value =
                serde_json::from_str(&event("s3.amazonaws.com", json!({"bucketName": "b"}), who))
                    .unwrap();
            e["account"] = json!("222222222222");
            parse(&e.to_string(), &own)
        };
        let mine = "arn:aws:sts::222222222222:assumed-role/s3op-target/s3-operator-c";
        assert_eq!(by(session(mine)), Event::Own);
        for theirs in [
            "arn:aws:sts::222222222222:assumed-role/s3op-target/alice",
            "arn:aws:sts::222222222222:assumed-role/s3op-target/s3-operator-c2",
            "arn:aws:sts::222222222222:assumed-role/other/s3-operator-c",
            "arn:aws:sts::333333333333:assumed-role/s3op-target/s3-operator-c",
        ] {
            assert_eq!(
                by(session(theirs)),
                bucket("b", Some("222222222222")),
                "{theirs}"
            );
        }
        // The session's ARN as a user's would not be a session.
        let user = json!({"type": "IAMUser", "arn": mine});
        assert_eq!(by(user), bucket("b", Some("222222222222")));
    }

    #[test]
    fn arn_like_matches_stars_anywhere_and_nothing_else() {
        assert!(arn_like("arn:a:role/*/op", "arn:a:role/x/y/op"));
        assert!(arn_like("arn:a:role/op", "arn:a:role/op"));
        assert!(!arn_like("arn:a:role/op", "arn:a:role/op2"));
        assert!(!arn_like("arn:a:role/*/op", "arn:a:role/x/op2"));
        assert!(arn_like("*", "anything"));
    }

    #[test]
    fn the_queue_region_comes_from_an_aws_queue_url_only() {
        let aws = "https://sqs.eu-west-1.amazonaws.com/123456789012/drift";
        assert_eq!(queue_region(aws).as_deref(), Some("eu-west-1"));
        assert_eq!(
            queue_region("http://127.0.0.1:5000/123456789012/drift"),
            None
        );
    }

    #[test]
    fn the_rule_matches_only_this_installations_buckets_and_lets_only_itself_send() {
        let r = rule(
            "aws",
            "1",
            "us-east-1",
            "c",
            "s3op-c-",
            "arn:aws:sqs:us-east-1:1:q",
        );
        assert_eq!(r["ruleName"], "s3-operator-c-drift");
        let s3 = &r["eventPattern"]["detail"]["$or"][0];
        assert_eq!(
            s3["requestParameters"]["bucketName"][0]["prefix"],
            "s3op-c-"
        );
        // Refused calls match neither branch.
        for branch in r["eventPattern"]["detail"]["$or"].as_array().unwrap() {
            assert_eq!(branch["errorCode"], json!([{"exists": false}]), "{branch}");
        }
        let st = &r["queuePolicy"]["Statement"][0];
        assert_eq!(st["Resource"], "arn:aws:sqs:us-east-1:1:q");
        assert_eq!(
            st["Condition"]["ArnEquals"]["aws:SourceArn"],
            "arn:aws:events:us-east-1:1:rule/s3-operator-c-drift"
        );
    }

    /// The member account's rule matches what the home rule does and targets exactly the
    /// operator's account's default bus through a role only EventBridge, for that rule, may
    /// assume, allowed PutEvents on that bus only; the bus lets exactly that rule of that
    /// account put events, and only S3's and IAM's.
    #[test]
    fn the_member_rule_forwards_to_the_home_bus_and_nothing_else() {
        let (member, home) = ("222222222222", "111111111111");
        let r = member_rule("aws", member, home, "us-east-1", "c", "s3op-c-");
        let at_home = rule(
            "aws",
            home,
            "us-east-1",
            "c",
            "s3op-c-",
            "arn:aws:sqs:us-east-1:1:q",
        );
        assert_eq!(r["ruleName"], at_home["ruleName"]);
        assert_eq!(r["eventPattern"], at_home["eventPattern"]);
        let bus = "arn:aws:events:us-east-1:111111111111:event-bus/default";
        let role = "arn:aws:iam::222222222222:role/s3-operator-c-drift-events";
        assert_eq!(
            r["target"],
            json!({"Id": "operator-event-bus", "Arn": bus, "RoleArn": role})
        );
        assert_eq!(r["roleName"], "s3-operator-c-drift-events");
        let rule_arn = "arn:aws:events:us-east-1:222222222222:rule/s3-operator-c-drift";
        let trust = &r["trustPolicy"]["Statement"];
        assert_eq!(trust.as_array().unwrap().len(), 1);
        assert_eq!(
            trust[0]["Principal"],
            json!({"Service": "events.amazonaws.com"})
        );
        assert_eq!(trust[0]["Action"], "sts:AssumeRole");
        assert_eq!(
            trust[0]["Condition"],
            json!({"StringEquals": {"aws:SourceAccount": member},
                "ArnEquals": {"aws:SourceArn": rule_arn}})
        );
        let allowed = &r["rolePolicy"]["Statement"];
        assert_eq!(allowed.as_array().unwrap().len(), 1);
        assert_eq!(
            (&allowed[0]["Action"], &allowed[0]["Resource"]),
            (&json!("events:PutEvents"), &json!(bus))
        );
        let st = &r["busPolicyStatement"];
        assert_eq!(st["Effect"], "Allow");
        assert_eq!(
            st["Principal"],
            json!({"AWS": "arn:aws:iam::222222222222:root"})
        );
        assert_eq!(
            (&st["Action"], &st["Resource"]),
            (&json!("events:PutEvents"), &json!(bus))
        );
        assert_eq!(st["Condition"]["ArnEquals"]["aws:SourceArn"], rule_arn);
        assert_eq!(
            st["Condition"]["ForAllValues:StringEquals"]["events:source"],
            json!(["aws.s3", "aws.iam"])
        );
        // A statement id per member account: one bus policy holds them all.
        assert_eq!(st["Sid"], "DriftEventsFrom222222222222");
        // The role is outside the operator's IAM path (/s3-operator/<cluster>/).
        assert!(!r.to_string().contains("/s3-operator/c/"));
    }
}
