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

/// What a management event touched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Touched {
    Bucket(String),
    /// An IAM user or role, by name.
    Identity(String),
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

/// What an EventBridge message (a CloudTrail "AWS API Call" event) touched, and whether the
/// operator made it (`own`: the `aws:PrincipalArn` patterns of its principal).
pub fn parse(body: &str, own: &[String]) -> Event {
    let Ok(event) = serde_json::from_str::<Value>(body) else {
        return Event::Other;
    };
    let detail = &event["detail"];
    if !detail["errorCode"].is_null() {
        return Event::Refused;
    }
    let params = &detail["requestParameters"];
    let touched = match detail["eventSource"].as_str() {
        Some("s3.amazonaws.com") => params["bucketName"]
            .as_str()
            .map(|b| Touched::Bucket(b.into())),
        Some("iam.amazonaws.com") => params["userName"]
            .as_str()
            .or(params["roleName"].as_str())
            .map(|n| Touched::Identity(n.into())),
        _ => None,
    };
    let Some(touched) = touched else {
        return Event::Other;
    };
    let who = &detail["userIdentity"];
    let principal = match who["type"].as_str() {
        Some("AssumedRole") => who["sessionContext"]["sessionIssuer"]["arn"].as_str(),
        _ => who["arn"].as_str(),
    };
    if principal.is_some_and(|p| own.iter().any(|pattern| arn_like(pattern, p))) {
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
    let rule_arn = format!("arn:{partition}:events:{region}:{account}:rule/{name}");
    json!({
        "ruleName": name,
        "eventPattern": {
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
        },
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

#[cfg(test)]
mod tests {
    use super::*;

    fn event(source: &str, params: Value, who: Value) -> String {
        json!({"detail-type": "AWS API Call via CloudTrail",
            "detail": {"eventSource": source, "eventName": "X", "requestParameters": params,
                "userIdentity": who}})
        .to_string()
    }

    #[test]
    fn events_name_the_bucket_user_or_role_they_touched_unless_the_operator_made_them() {
        let own = vec![
            "arn:aws:iam::1:role/s3-operator".to_string(),
            "arn:aws:iam::1:role/*/s3-operator".to_string(),
        ];
        let admin = json!({"type": "IAMUser", "arn": "arn:aws:iam::1:user/admin"});
        let s3 = event(
            "s3.amazonaws.com",
            json!({"bucketName": "b"}),
            admin.clone(),
        );
        assert_eq!(
            parse(&s3, &own),
            Event::Touched(Touched::Bucket("b".into()))
        );
        let user = event("iam.amazonaws.com", json!({"userName": "u"}), admin.clone());
        assert_eq!(
            parse(&user, &own),
            Event::Touched(Touched::Identity("u".into()))
        );
        let role = event("iam.amazonaws.com", json!({"roleName": "r"}), admin);
        assert_eq!(
            parse(&role, &own),
            Event::Touched(Touched::Identity("r".into()))
        );

        let session = json!({"type": "AssumedRole",
            "arn": "arn:aws:sts::1:assumed-role/s3-operator/pod",
            "sessionContext": {"sessionIssuer": {"arn": "arn:aws:iam::1:role/ops/s3-operator"}}});
        let mine = event("s3.amazonaws.com", json!({"bucketName": "b"}), session);
        assert_eq!(parse(&mine, &own), Event::Own);
        let other = json!({"type": "AssumedRole", "arn": "x",
            "sessionContext": {"sessionIssuer": {"arn": "arn:aws:iam::1:role/s3-operator-2"}}});
        let theirs = event("s3.amazonaws.com", json!({"bucketName": "b"}), other);
        assert_eq!(
            parse(&theirs, &own),
            Event::Touched(Touched::Bucket("b".into()))
        );

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
}
