//! `s3-operator import`: Bucket manifests that reproduce what existing buckets hold today, in
//! `Observe` with `adoptExisting`, so applying them writes nothing to AWS and each Bucket's
//! `InSync` says how far the bucket is from what the operator would make of it.
//!
//! An operator-side command: it runs with the caller's AWS credentials and writes nothing
//! anywhere but stdout. What a Bucket cannot say is flagged in a comment above its manifest.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use kube::{Api, ResourceExt};
use serde_json::Value;

use crate::api::{
    AWSAccount, Bucket, BucketClass, BucketSpec, Management, PolicyEffect, PolicyPrincipal,
    PolicyStatement, PublicAccessBlock,
};
use crate::aws::{Aws, Error as AwsError};

/// The settings import reads from one bucket.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Held {
    pub tags: BTreeMap<String, String>,
    pub public_access_block: Option<PublicAccessBlock>,
    pub encryption: Option<crate::api::Encryption>,
    pub versioning: Option<crate::api::Versioning>,
    pub lifecycle_rules: Vec<crate::api::LifecycleRule>,
    pub cors: Vec<crate::api::CorsRule>,
    pub object_ownership: Option<crate::api::ObjectOwnership>,
    pub policy: Option<Value>,
    /// The default retention, when object lock is enabled (`None`: not enabled).
    pub object_lock: Option<crate::api::ObjectLock>,
    pub intelligent_tiering: Vec<crate::api::IntelligentTiering>,
    pub transfer_acceleration: Option<crate::api::TransferAcceleration>,
    pub notifications: Option<crate::aws::s3::notifications::ObservedNotifications>,
    /// Where it delivers its server access logs (`None`: off).
    pub logging: Option<crate::aws::s3::logging::LogTarget>,
}

/// One bucket's manifest, and what it could not carry over.
#[derive(Debug)]
pub struct Imported {
    pub bucket: Bucket,
    pub flagged: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading S3 bucket {bucket}: {source}")]
    Aws {
        bucket: String,
        #[source]
        source: AwsError,
    },
    #[error("listing buckets: {0}")]
    List(#[source] AwsError),
    #[error("writing the manifest of {0}: {1}")]
    Manifest(String, String),
    #[error("reading the cluster (--account and --class need it): {0}")]
    Cluster(#[source] kube::Error),
    #[error("asking STS which account the AWS credentials act in: {0}")]
    Caller(#[source] AwsError),
    /// The buckets read would not be where the manifests' Buckets will live.
    #[error("{0}")]
    Destination(String),
}

/// Where the manifests' Buckets will live, as the cluster has it: the BucketClass they will be
/// under in their namespace, and the AWSAccount `--account` names (`None`: none by that name).
pub struct Destination {
    pub class: Option<Arc<BucketClass>>,
    pub account: Option<AWSAccount>,
}

/// Reads the [`Destination`] of Buckets in `namespace` naming `class` (else its default class),
/// and the AWSAccount `account`.
pub async fn destination(
    client: &kube::Client,
    namespace: &str,
    class: Option<&str>,
    account: Option<&str>,
) -> Result<Destination, Error> {
    let ns = Api::<Namespace>::all(client.clone())
        .get(namespace)
        .await
        .map_err(Error::Cluster)?;
    let classes = Api::<BucketClass>::all(client.clone())
        .list(&Default::default())
        .await
        .map_err(Error::Cluster)?;
    let classes: Vec<Arc<BucketClass>> = classes.items.into_iter().map(Arc::new).collect();
    let class = crate::reconcile::class::resolve(class, namespace, ns.labels(), &classes, &[])
        .map_err(|why| Error::Destination(format!("namespace {namespace}: {}", why.message)))?;
    let account = match account {
        Some(name) => Api::<AWSAccount>::all(client.clone())
            .get_opt(name)
            .await
            .map_err(Error::Cluster)?,
        None => None,
    };
    Ok(Destination { class, account })
}

/// Checks (pure) that buckets read with credentials of AWS account `caller` are where Buckets
/// of `namespace` will live: the account its class puts them in is `wanted` (`--account`;
/// `None`: the operator's own), and that AWSAccount is the credentials' account. Manifests for
/// the wrong account would observe buckets the operator cannot find there. Returns the comment
/// that heads the manifests.
pub fn check(
    namespace: &str,
    wanted: Option<&str>,
    d: &Destination,
    caller: &str,
) -> Result<String, Error> {
    let class = d.class.as_ref().map(|c| c.name_any());
    let class_account = d.class.as_ref().and_then(|c| c.spec.account.as_deref());
    let says = match (&class, class_account) {
        (Some(c), Some(a)) => format!("BucketClass {c} puts its Buckets in AWSAccount {a}"),
        (Some(c), None) => {
            format!("BucketClass {c} puts its Buckets in the operator's own account")
        }
        (None, _) => {
            "no BucketClass applies, so its Buckets live in the operator's own account".into()
        }
    };
    if class_account != wanted {
        let asked = wanted.map_or("the operator's own account".into(), |w| {
            format!("AWSAccount {w} (--account)")
        });
        let fix = match class_account {
            Some(a) => format!("import with --account {a} and credentials of that account"),
            None => {
                "import without --account, with credentials of the operator's own account".into()
            }
        };
        return Err(Error::Destination(format!(
            "namespace {namespace}: {says}, not {asked}: {fix}"
        )));
    }
    let Some(name) = wanted else {
        return Ok(format!("namespace {namespace}: {says}"));
    };
    let Some(account) = &d.account else {
        return Err(Error::Destination(format!(
            "AWSAccount {name} does not exist"
        )));
    };
    let id = crate::reconcile::accounts::account_of(&account.spec.role_arn).unwrap_or_default();
    if id != caller {
        return Err(Error::Destination(format!(
            "AWSAccount {name} is AWS account {id}, but the AWS credentials act in account {caller}: import with credentials of account {id}"
        )));
    }
    Ok(format!(
        "namespace {namespace}: {says} (AWS account {id}, read with its credentials)"
    ))
}

/// Checks (pure) that `--prefix` lies within the bucket-name prefix the AWSAccount sets, if it
/// sets one: the operator's role there reaches no other bucket, and a Bucket naming one is
/// refused (InvalidSpec).
pub fn check_prefix(prefix: &str, d: &Destination) -> Result<(), Error> {
    let Some(account) = &d.account else {
        return Ok(());
    };
    match &account.spec.bucket_name_prefix {
        Some(own) if !prefix.starts_with(own.as_str()) => Err(Error::Destination(format!(
            "--prefix {prefix:?} is outside AWSAccount {}'s spec.bucketNamePrefix {own:?}: the operator manages only buckets named under it there",
            account.name_any()
        ))),
        _ => Ok(()),
    }
}

/// Prefix of the operator's own tags: a bucket carrying one is held by an installation.
const OWN_TAGS: &str = "s3.operator.dev/";
/// The operator's own statements, which every Bucket gets without asking.
const OWN_SIDS: [&str; 2] = ["DenyInsecureTransport", "S3ServerAccessLogs"];

const NO_TLS: &str = "no TLS-only statement: Manage would add DenyInsecureTransport";

/// The Bucket that reproduces `held` (pure). `name` is the object's name, `bucket` the S3 name;
/// `objects`: the object name of each bucket imported with it (a log target must be one).
pub fn manifest(
    name: &str,
    namespace: &str,
    bucket: &str,
    held: &Held,
    objects: &BTreeMap<String, String>,
) -> Imported {
    let mut flagged = Vec::new();
    let mut tags = BTreeMap::new();
    for (k, v) in &held.tags {
        if k.starts_with(OWN_TAGS) {
            flagged.push(format!("tag {k} is the operator's own: left out"));
        } else {
            tags.insert(k.clone(), v.clone());
        }
    }
    let public_access_block = held.public_access_block.or_else(|| {
        flagged.push(
            "no public access block: the spec says all four flags off (Manage would write that)"
                .into(),
        );
        Some(PublicAccessBlock {
            block_public_acls: false,
            ignore_public_acls: false,
            block_public_policy: false,
            restrict_public_buckets: false,
        })
    });
    if held.encryption.is_none() {
        flagged.push("no default encryption: Manage would turn on SSE-S3".into());
    }
    if held.object_ownership.is_none() {
        flagged.push("no object ownership controls: Manage would set BucketOwnerEnforced".into());
    }
    let policy = statements(held.policy.as_ref(), &mut flagged);
    let notifications = notifications(held.notifications.as_ref(), &mut flagged);
    let logging = held.logging.as_ref().and_then(|t| match objects.get(&t.bucket) {
        Some(object) => Some(crate::api::Logging {
            target_bucket_ref: Some(crate::api::LoggingTargetRef {
                name: object.clone(),
            }),
            target_prefix: (!t.prefix.is_empty()).then(|| t.prefix.clone()),
        }),
        None => {
            flagged.push(format!(
                "logs to bucket {}, which is not imported with it (a Bucket logs only into a Bucket of its namespace): logging left unset, so the operator leaves it alone",
                t.bucket
            ));
            None
        }
    });
    let tiering = &held.intelligent_tiering;
    let spec = BucketSpec {
        bucket_name: Some(bucket.into()),
        adopt_existing: true,
        management: Some(Management::Observe),
        tags,
        public_access_block,
        encryption: held.encryption.clone(),
        versioning: held.versioning,
        lifecycle_rules: (!held.lifecycle_rules.is_empty()).then(|| held.lifecycle_rules.clone()),
        cors: (!held.cors.is_empty()).then(|| held.cors.clone()),
        object_ownership: held.object_ownership,
        policy,
        object_lock: held.object_lock.clone(),
        intelligent_tiering: (!tiering.is_empty()).then(|| tiering.clone()),
        transfer_acceleration: held.transfer_acceleration,
        notifications,
        logging,
        ..Default::default()
    };
    let mut b = Bucket::new(name, spec);
    b.metadata.namespace = Some(namespace.into());
    Imported { bucket: b, flagged }
}

/// The notifications a Bucket can say: none for a bucket with Lambda targets, which a Bucket
/// cannot name and would remove (flagged, so the operator leaves them alone).
fn notifications(
    held: Option<&crate::aws::s3::notifications::ObservedNotifications>,
    flagged: &mut Vec<String>,
) -> Option<crate::api::Notifications> {
    let held = held.filter(|n| n.lambda_functions > 0 || n.config != Default::default())?;
    if held.lambda_functions > 0 {
        flagged.push(format!(
            "{} Lambda notification(s): a Bucket cannot say them and would remove them, so notifications are left unset",
            held.lambda_functions
        ));
        return None;
    }
    flagged.push("notifications: each queue and topic must be on the operator's --allowed-notification-targets (and the class's list), else the Bucket is InvalidSpec".into());
    Some(held.config.clone())
}

/// The bucket policy's statements a Bucket can say; the rest flagged. The operator's own
/// statements are left out: every Bucket gets them.
fn statements(policy: Option<&Value>, flagged: &mut Vec<String>) -> Vec<PolicyStatement> {
    let Some(all) = policy.and_then(|p| p.get("Statement")) else {
        flagged.push(NO_TLS.into());
        return vec![];
    };
    let all = match all {
        Value::Array(a) => a.clone(),
        one => vec![one.clone()],
    };
    let mut out = Vec::new();
    for (i, s) in all.iter().enumerate() {
        let sid = s.get("Sid").and_then(Value::as_str);
        if sid.is_some_and(|sid| OWN_SIDS.contains(&sid)) {
            continue;
        }
        let said = sid.map_or_else(|| format!("#{i}"), str::to_string);
        match statement(s) {
            Ok(st) => out.push(st),
            Err(why) => flagged.push(format!("policy statement {said} left out: {why}")),
        }
    }
    if !all
        .iter()
        .any(|s| s.get("Sid") == Some(&Value::from(OWN_SIDS[0])))
    {
        flagged.push(NO_TLS.into());
    }
    out
}

fn strings(v: Option<&Value>) -> Option<Vec<String>> {
    match v? {
        Value::String(s) => Some(vec![s.clone()]),
        Value::Array(a) => a.iter().map(|x| x.as_str().map(String::from)).collect(),
        _ => None,
    }
}

fn statement(s: &Value) -> Result<PolicyStatement, String> {
    let obj = s.as_object().ok_or("not an object")?;
    for k in obj.keys() {
        if ![
            "Sid",
            "Effect",
            "Principal",
            "Action",
            "Resource",
            "Condition",
        ]
        .contains(&k.as_str())
        {
            return Err(format!("{k} cannot be said in spec.policy"));
        }
    }
    let effect = match obj.get("Effect").and_then(Value::as_str) {
        Some("Allow") => PolicyEffect::Allow,
        Some("Deny") => PolicyEffect::Deny,
        other => return Err(format!("Effect {other:?}")),
    };
    let principal = match obj.get("Principal") {
        Some(Value::String(s)) if s == "*" => PolicyPrincipal {
            aws: vec!["*".into()],
            service: vec![],
        },
        Some(Value::Object(p)) => {
            if let Some(k) = p.keys().find(|k| !["AWS", "Service"].contains(&k.as_str())) {
                return Err(format!("a {k} principal cannot be said in spec.policy"));
            }
            PolicyPrincipal {
                aws: strings(p.get("AWS")).unwrap_or_default(),
                service: strings(p.get("Service")).unwrap_or_default(),
            }
        }
        _ => return Err("no Principal".into()),
    };
    let action = strings(obj.get("Action")).ok_or("Action is not a list of strings")?;
    let resource = strings(obj.get("Resource")).ok_or("Resource is not a list of strings")?;
    let mut condition = BTreeMap::new();
    if let Some(c) = obj.get("Condition") {
        let ops = c.as_object().ok_or("Condition is not an object")?;
        for (op, keys) in ops {
            let keys = keys
                .as_object()
                .ok_or("a Condition operator is not an object")?;
            let mut m = BTreeMap::new();
            for (k, v) in keys {
                let vals = match v {
                    Value::Bool(b) => vec![b.to_string()],
                    v => strings(Some(v)).ok_or("a Condition value is not a string")?,
                };
                m.insert(k.clone(), vals);
            }
            condition.insert(op.clone(), m);
        }
    }
    Ok(PolicyStatement {
        sid: obj.get("Sid").and_then(Value::as_str).map(String::from),
        effect,
        principal,
        action,
        resource,
        condition,
    })
}

/// What `aws` holds under `prefix`, filtered by `tags` (every one must match), as manifests in
/// `namespace`. Buckets an installation holds (the operator's tags) are skipped and named in
/// `skipped`.
pub async fn import(
    aws: &Aws,
    region: &str,
    prefix: &str,
    tags: &[(String, String)],
    namespace: &str,
) -> Result<(Vec<Imported>, Vec<String>), Error> {
    let names = aws
        .list_buckets(region, prefix)
        .await
        .map_err(Error::List)?;
    let (mut chosen, mut skipped) = (Vec::new(), Vec::new());
    for name in names {
        let held = held(aws, region, &name)
            .await
            .map_err(|source| Error::Aws {
                bucket: name.clone(),
                source,
            })?;
        if held.tags.keys().any(|k| k.starts_with(OWN_TAGS)) {
            skipped.push(format!(
                "{name}: held by an installation (it carries the operator's tags)"
            ));
            continue;
        }
        if tags.iter().all(|(k, v)| held.tags.get(k) == Some(v)) {
            chosen.push((name, held));
        }
    }
    let objects: BTreeMap<String, String> = (chosen.iter())
        .map(|(name, _)| (name.clone(), object_name(name, prefix)))
        .collect();
    let out = (chosen.iter())
        .map(|(name, held)| manifest(&objects[name], namespace, name, held, &objects))
        .collect();
    Ok((out, skipped))
}

/// A Kubernetes name for the bucket: its name without the prefix (both are DNS labels).
fn object_name(bucket: &str, prefix: &str) -> String {
    let rest = bucket.strip_prefix(prefix).unwrap_or(bucket);
    let rest = rest.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    let name: String = rest.replace('.', "-").chars().take(63).collect();
    if name.is_empty() {
        bucket.replace('.', "-")
    } else {
        name
    }
}

async fn held(aws: &Aws, region: &str, name: &str) -> Result<Held, AwsError> {
    let (tags, public_access_block, encryption, versioning, lifecycle_rules, cors) = tokio::try_join!(
        aws.bucket_tags(region, name),
        aws.public_access_block(region, name),
        aws.encryption(region, name),
        aws.versioning(region, name),
        aws.lifecycle_rules(region, name),
        aws.cors_rules(region, name),
    )?;
    let (object_ownership, policy, lock, intelligent_tiering, transfer_acceleration) = tokio::try_join!(
        aws.object_ownership(region, name),
        aws.bucket_policy(region, name),
        aws.object_lock(region, name),
        aws.intelligent_tiering(region, name),
        aws.transfer_acceleration(region, name),
    )?;
    let (notifications, logging) = tokio::try_join!(
        aws.notifications(region, name),
        aws.bucket_logging(region, name),
    )?;
    Ok(Held {
        tags: tags.unwrap_or_default(),
        public_access_block,
        encryption,
        versioning,
        lifecycle_rules,
        cors,
        object_ownership,
        policy,
        object_lock: lock.enabled.then_some(crate::api::ObjectLock {
            default_retention: lock.default_retention,
        }),
        intelligent_tiering,
        transfer_acceleration,
        notifications: Some(notifications),
        logging,
    })
}

/// The manifests as one YAML stream, each after the comments flagging what it left out;
/// `header`: comment lines first.
pub fn yaml(imported: &[Imported], skipped: &[String], header: &[String]) -> Result<String, Error> {
    let mut out = String::new();
    for h in header {
        out.push_str(&format!("# {h}\n"));
    }
    for s in skipped {
        out.push_str(&format!("# skipped {s}\n"));
    }
    for i in imported {
        let name = i.bucket.metadata.name.clone().unwrap_or_default();
        let failed = |e: &dyn std::fmt::Display| Error::Manifest(name.clone(), e.to_string());
        // A manifest carries no status (the derive writes `status: null`).
        let mut v = serde_json::to_value(&i.bucket).map_err(|e| failed(&e))?;
        if let Some(o) = v.as_object_mut() {
            o.remove("status");
        }
        out.push_str("---\n");
        for f in &i.flagged {
            out.push_str(&format!("# {name}: {f}\n"));
        }
        out.push_str(&serde_yaml::to_string(&v).map_err(|e| failed(&e))?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Encryption, EncryptionAlgorithm, ObjectOwnership, Versioning};
    use serde_json::json;

    fn held() -> Held {
        Held {
            tags: [("team".into(), "a".into())].into(),
            public_access_block: Some(PublicAccessBlock {
                block_public_acls: true,
                ignore_public_acls: true,
                block_public_policy: false,
                restrict_public_buckets: true,
            }),
            encryption: Some(Encryption {
                algorithm: EncryptionAlgorithm::Aes256,
                kms_key_id: None,
                bucket_key_enabled: None,
            }),
            versioning: Some(Versioning::Suspended),
            object_ownership: Some(ObjectOwnership::BucketOwnerEnforced),
            ..Default::default()
        }
    }

    #[test]
    fn what_a_bucket_holds_becomes_an_observed_adopting_spec() {
        let i = manifest("photos", "team-a", "s3op-photos", &held(), &BTreeMap::new());
        let s = &i.bucket.spec;
        assert_eq!(s.bucket_name.as_deref(), Some("s3op-photos"));
        assert!(s.adopt_existing);
        assert_eq!(s.management, Some(Management::Observe));
        assert_eq!(s.versioning, Some(Versioning::Suspended));
        assert_eq!(s.public_access_block, held().public_access_block);
        assert_eq!(s.tags.get("team").map(String::as_str), Some("a"));
        assert_eq!(i.bucket.metadata.namespace.as_deref(), Some("team-a"));
        // No policy at all: only the missing TLS statement is said.
        assert!(s.policy.is_empty());
        assert_eq!(i.flagged, vec![NO_TLS.to_string()]);
    }

    #[test]
    fn what_a_bucket_cannot_say_is_flagged_not_dropped_silently() {
        let mut h = held();
        h.public_access_block = None;
        h.encryption = None;
        h.tags.insert("s3.operator.dev/uid".into(), "x".into());
        h.policy = Some(json!({"Version": "2012-10-17", "Statement": [
            {"Sid": "Readers", "Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::123456789012:root"},
             "Action": "s3:GetObject", "Resource": "arn:aws:s3:::s3op-photos/*",
             "Condition": {"Bool": {"aws:SecureTransport": true}}},
            {"Sid": "Odd", "Effect": "Deny", "NotPrincipal": {"AWS": "x"}, "Action": "s3:*",
             "Resource": "*"},
            {"Effect": "Allow", "Principal": {"Federated": "cognito"}, "Action": "s3:GetObject",
             "Resource": "arn:aws:s3:::s3op-photos/*"}
        ]}));
        let i = manifest("photos", "team-a", "s3op-photos", &h, &BTreeMap::new());
        let s = &i.bucket.spec;
        assert_eq!(s.policy.len(), 1);
        assert_eq!(s.policy[0].sid.as_deref(), Some("Readers"));
        assert_eq!(
            s.policy[0].principal.aws,
            ["arn:aws:iam::123456789012:root"]
        );
        assert_eq!(
            s.policy[0].condition["Bool"]["aws:SecureTransport"],
            ["true"]
        );
        assert!(!s.tags.contains_key("s3.operator.dev/uid"));
        let f = i.flagged.join("\n");
        for said in [
            "tag s3.operator.dev/uid",
            "no public access block",
            "no default encryption",
            "policy statement Odd left out: NotPrincipal",
            "policy statement #2 left out: a Federated principal",
            "no TLS-only statement",
        ] {
            assert!(f.contains(said), "{said} not in:\n{f}");
        }
    }

    #[test]
    fn object_names_drop_the_prefix_and_stay_dns_labels() {
        assert_eq!(object_name("s3op-c-photos", "s3op-c-"), "photos");
        assert_eq!(object_name("s3op-c-a.b", "s3op-c-"), "a-b");
        assert_eq!(object_name("s3op-c-", "s3op-c-"), "s3op-c-");
    }

    #[test]
    fn the_yaml_stream_carries_the_flags_and_no_server_fields() {
        let mut h = held();
        h.encryption = None;
        let i = manifest("photos", "team-a", "s3op-photos", &h, &BTreeMap::new());
        let text = yaml(&[i], &["s3op-x: held".into()], &[]).unwrap();
        assert!(text.starts_with("# skipped s3op-x: held\n---\n# photos: no default encryption"));
        assert!(text.contains("management: Observe"), "{text}");
        assert!(!text.contains("status"), "{text}");
        let doc = text.split("---\n").nth(1).unwrap();
        let back: Bucket = serde_yaml::from_str(doc).unwrap();
        assert_eq!(back.spec.bucket_name.as_deref(), Some("s3op-photos"));
    }
    /// Manifests go where their namespace's class puts them: the credentials' account must be
    /// the AWSAccount `--account` names, and that must be the class's account.
    #[test]
    fn import_refuses_buckets_of_another_account_than_the_class_gives() {
        let class = |account: Option<&str>| -> Arc<BucketClass> {
            let spec = json!({"account": account});
            Arc::new(BucketClass::new(
                "team",
                serde_json::from_value(spec).unwrap(),
            ))
        };
        let account: AWSAccount = serde_json::from_value(json!({
            "apiVersion": "s3.operator.dev/v1alpha1", "kind": "AWSAccount",
            "metadata": {"name": "b"},
            "spec": {"roleArn": "arn:aws:iam::111111111111:role/r",
                     "externalIdSecretRef": {"name": "x", "key": "k"}}}))
        .unwrap();
        let dest = |c: Option<&str>, a: bool| Destination {
            class: Some(class(c)),
            account: a.then(|| account.clone()),
        };
        let refused = |r: Result<String, Error>| r.unwrap_err().to_string();
        // The right account, with its credentials.
        let ok = check("ns", Some("b"), &dest(Some("b"), true), "111111111111").unwrap();
        assert!(
            ok.contains("AWSAccount b (AWS account 111111111111"),
            "{ok}"
        );
        // Credentials of another account.
        let e = refused(check(
            "ns",
            Some("b"),
            &dest(Some("b"), true),
            "123456789012",
        ));
        assert_eq!(
            e,
            "AWSAccount b is AWS account 111111111111, but the AWS credentials act in account 123456789012: import with credentials of account 111111111111"
        );
        // The class puts the namespace's Buckets elsewhere, either way round.
        let e = refused(check("ns", None, &dest(Some("b"), false), "111111111111"));
        assert_eq!(
            e,
            "namespace ns: BucketClass team puts its Buckets in AWSAccount b, not the operator's own account: import with --account b and credentials of that account"
        );
        let e = refused(check("ns", Some("b"), &dest(None, true), "111111111111"));
        assert!(
            e.contains("in the operator's own account, not AWSAccount b (--account)"),
            "{e}"
        );
        let e = refused(check(
            "ns",
            Some("c"),
            &dest(Some("c"), false),
            "111111111111",
        ));
        assert_eq!(e, "AWSAccount c does not exist");
        // No class and no --account: the operator's own account.
        let none = Destination {
            class: None,
            account: None,
        };
        assert!(check("ns", None, &none, "123456789012").is_ok());
        // An AWSAccount with a prefix of its own takes only buckets under it.
        assert!(check_prefix("anything-", &none).is_ok());
        assert!(check_prefix("s3op-", &dest(Some("b"), true)).is_ok());
        let mut own = dest(Some("b"), true);
        own.account.as_mut().unwrap().spec.bucket_name_prefix = Some("team-b-".into());
        assert!(check_prefix("team-b-photos", &own).is_ok());
        assert_eq!(
            refused(check_prefix("s3op-", &own).map(|()| String::new())),
            "--prefix \"s3op-\" is outside AWSAccount b's spec.bucketNamePrefix \"team-b-\": the operator manages only buckets named under it there"
        );
    }
    /// Object lock, tiering, acceleration, notifications and logging come over as they are;
    /// Lambda targets and a log target outside the import are flagged and left unset, so the
    /// operator leaves them alone rather than removing them.
    #[test]
    fn the_other_aspects_come_over_or_are_flagged() {
        use crate::api::{
            DefaultRetention, IntelligentTiering, Notifications, TransferAcceleration,
        };
        use crate::aws::s3::logging::LogTarget;
        use crate::aws::s3::notifications::ObservedNotifications;
        let mut h = held();
        let retention: DefaultRetention =
            serde_json::from_value(json!({"mode": "GOVERNANCE", "days": 1})).unwrap();
        h.object_lock = Some(crate::api::ObjectLock {
            default_retention: Some(retention),
        });
        let tiering: IntelligentTiering = serde_json::from_value(
            json!({"id": "archive", "tierings": [{"days": 90, "accessTier": "ARCHIVE_ACCESS"}]}),
        )
        .unwrap();
        h.intelligent_tiering = vec![tiering.clone()];
        h.transfer_acceleration = Some(TransferAcceleration::Enabled);
        let bridge = Notifications {
            event_bridge: true,
            ..Default::default()
        };
        h.notifications = Some(ObservedNotifications {
            config: bridge.clone(),
            lambda_functions: 0,
        });
        h.logging = Some(LogTarget {
            bucket: "s3op-logs".into(),
            prefix: "photos/".into(),
        });
        let objects = BTreeMap::from([("s3op-logs".to_string(), "logs".to_string())]);
        let i = manifest("photos", "team-a", "s3op-photos", &h, &objects);
        let s = &i.bucket.spec;
        assert_eq!(s.object_lock, h.object_lock);
        assert_eq!(s.intelligent_tiering, Some(vec![tiering]));
        assert_eq!(s.transfer_acceleration, Some(TransferAcceleration::Enabled));
        assert_eq!(s.notifications, Some(bridge));
        let logging = s.logging.as_ref().unwrap();
        assert_eq!(logging.target_bucket_ref.as_ref().unwrap().name, "logs");
        assert_eq!(logging.target_prefix.as_deref(), Some("photos/"));

        // A Lambda target, and a log target not imported here: flagged, left unset.
        h.notifications = Some(ObservedNotifications {
            config: Notifications::default(),
            lambda_functions: 2,
        });
        let i = manifest("photos", "team-a", "s3op-photos", &h, &BTreeMap::new());
        assert_eq!(
            (&i.bucket.spec.notifications, &i.bucket.spec.logging),
            (&None, &None)
        );
        let f = i.flagged.join("\n");
        assert!(f.contains("2 Lambda notification(s)"), "{f}");
        assert!(
            f.contains("logs to bucket s3op-logs, which is not imported with it"),
            "{f}"
        );
        // Nothing set: nothing said.
        h.notifications = Some(ObservedNotifications {
            config: Notifications::default(),
            lambda_functions: 0,
        });
        h.logging = None;
        let i = manifest("photos", "team-a", "s3op-photos", &h, &BTreeMap::new());
        assert_eq!(i.bucket.spec.notifications, None);
        assert!(
            !i.flagged.join(" ").contains("notification"),
            "{:?}",
            i.flagged
        );
    }
}
