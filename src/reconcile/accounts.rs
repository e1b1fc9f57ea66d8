//! The AWS accounts passes act in: the operator's own, and each `AWSAccount` a class names,
//! reached through a role assumed there. An object's account is decided once, at creation, and
//! recorded in its status (`AccountRecord`); every later pass, its deletion included, acts in
//! the recorded account whatever its class says now.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use tokio::sync::Mutex;

use super::{Blocked, Settings};
use crate::api::condition::{self, Reason};
use crate::api::{AWSAccount, AWSAccountStatus, AccountRecord};
use crate::aws::{AssumeRole, Aws, SESSION_TAG};

/// How long an account resolved from its AWSAccount is used before the AWSAccount is read
/// again (one GET per account per period: an edit to it applies within this).
const RECHECK: Duration = Duration::from_secs(60);
/// How long a failure to use an account stands before the next pass tries again (AssumeRole
/// is not retried by every pass of every object in the account).
const RETRY_FAILED: Duration = Duration::from_secs(30);

/// One account passes act in.
pub struct Account {
    /// The AWSAccount; `None`: the operator's own account.
    pub name: Option<String>,
    /// The account's id.
    pub id: String,
    /// Clients with this account's credentials.
    pub aws: Aws,
    /// The operator's settings as they apply in this account: its id, permissions boundary,
    /// bucket-name prefix, IAM path and the operator's principals there.
    pub settings: Arc<Settings>,
    /// The bucket-name prefix and IAM path the AWSAccount sets (`None`: the operator's own),
    /// recorded with every object made here.
    pub naming: Naming,
}

/// What an AWSAccount sets of the names the operator gives in its account.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Naming {
    pub bucket_name_prefix: Option<String>,
    pub iam_path: Option<String>,
}

impl Account {
    /// The operator's own account.
    pub fn home(aws: Aws, settings: Settings) -> Self {
        Account {
            name: None,
            id: settings.account_id.clone(),
            aws,
            settings: Arc::new(settings),
            naming: Naming::default(),
        }
    }

    /// What an object living here records (`None`: the operator's own account, recorded by
    /// nothing, as before accounts existed).
    pub fn record(&self) -> Option<AccountRecord> {
        self.name.as_ref().map(|name| AccountRecord {
            name: name.clone(),
            id: self.id.clone(),
            bucket_name_prefix: self.naming.bucket_name_prefix.clone(),
            iam_path: self.naming.iam_path.clone(),
        })
    }

    /// Is this the account `record` names (`None`: the operator's own), giving the names it
    /// was recorded with?
    pub fn is(&self, record: Option<&AccountRecord>) -> bool {
        match record {
            None => self.name.is_none(),
            Some(r) => self.record().as_ref() == Some(r),
        }
    }
}

/// Why an account cannot be used now (reported as `AccountUnavailable`, nothing written).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unavailable(pub String);

enum Entry {
    Ready {
        account: Arc<Account>,
        version: String,
        checked: Instant,
    },
    Failed {
        why: Unavailable,
        at: Instant,
    },
}

/// The accounts passes act in, each resolved from its AWSAccount once and kept.
pub struct Accounts {
    home: Arc<Account>,
    client: Option<kube::Client>,
    entries: Mutex<HashMap<String, Entry>>,
}

impl Accounts {
    pub fn new(home: Account, client: kube::Client) -> Self {
        Accounts {
            home: Arc::new(home),
            client: Some(client),
            entries: Default::default(),
        }
    }

    /// Only the operator's own account (unit tests: every other account is unavailable).
    #[cfg(test)]
    pub fn home_only(home: Account) -> Self {
        Accounts {
            home: Arc::new(home),
            client: None,
            entries: Default::default(),
        }
    }

    pub fn home(&self) -> &Arc<Account> {
        &self.home
    }

    /// The account `name` names (`None`: the operator's own), resolved and its role assumed on
    /// first use, then kept until its AWSAccount changes or the credentials fail.
    pub async fn get(&self, name: Option<&str>) -> Result<Arc<Account>, Unavailable> {
        let Some(name) = name else {
            return Ok(self.home.clone());
        };
        let Some(client) = &self.client else {
            return Err(Unavailable(format!(
                "AWSAccount {name} cannot be used here"
            )));
        };
        let mut entries = self.entries.lock().await;
        match entries.get(name) {
            Some(Entry::Ready {
                account, checked, ..
            }) if checked.elapsed() < RECHECK => return Ok(account.clone()),
            Some(Entry::Failed { why, at, .. }) if at.elapsed() < RETRY_FAILED => {
                return Err(why.clone());
            }
            _ => {}
        }
        let found = Api::<AWSAccount>::all(client.clone())
            .get_opt(name)
            .await
            .map_err(|e| Unavailable(format!("AWSAccount {name} could not be read: {e}")));
        let resolved = match found {
            Ok(Some(object)) => {
                // The spec's generation, not the resource version: a status write is no reason
                // to assume the role again. With the UID: an AWSAccount deleted and made again
                // starts again at generation 1, and is another spec.
                let version = format!(
                    "{}/{}",
                    object.metadata.uid.as_deref().unwrap_or_default(),
                    object.metadata.generation.unwrap_or_default()
                );
                match entries.get_mut(name) {
                    // Unchanged: the kept clients stay (their credentials renew themselves).
                    Some(Entry::Ready {
                        account,
                        version: v,
                        checked,
                    }) if *v == version => {
                        *checked = Instant::now();
                        return Ok(account.clone());
                    }
                    _ => {
                        let resolved = self.resolve(client, &object).await;
                        self.report(client, &object, &resolved).await;
                        resolved.map(|a| (a, version))
                    }
                }
            }
            Ok(None) => Err(Unavailable(format!("AWSAccount {name} does not exist"))),
            Err(e) => Err(e),
        };
        let entry = match &resolved {
            Ok((account, version)) => Entry::Ready {
                account: account.clone(),
                version: version.clone(),
                checked: Instant::now(),
            },
            Err(why) => {
                tracing::warn!(account = name, error = %why, "AWS account unavailable");
                Entry::Failed {
                    why: why.clone(),
                    at: Instant::now(),
                }
            }
        };
        entries.insert(name.to_string(), entry);
        resolved.map(|(a, _)| a)
    }

    /// The account `recorded` names (`None`: the operator's own), if it is still the account
    /// recorded: an AWSAccount re-pointed at another account is not where the object lives.
    pub async fn recorded(
        &self,
        recorded: Option<&AccountRecord>,
    ) -> Result<Arc<Account>, Unavailable> {
        let account = self.get(recorded.map(|r| r.name.as_str())).await?;
        match recorded {
            Some(r) if account.id != r.id => Err(Unavailable(format!(
                "AWSAccount {} now names account {}, but this object lives in account {}",
                r.name, account.id, r.id
            ))),
            Some(r) if !account.is(Some(r)) => Err(Unavailable(format!(
                "AWSAccount {} now gives {}, but this object was made under {}: re-create the AWSAccount as it was",
                r.name,
                shown(&account.naming),
                shown(&naming_of(r))
            ))),
            _ => Ok(account),
        }
    }

    /// The account a [`Placement`] names: the recorded one, or the class's for a new object.
    pub async fn placed(
        &self,
        placed: &Placement,
        recorded: Option<&AccountRecord>,
    ) -> Result<Arc<Account>, Unavailable> {
        if placed.to_record {
            self.get(placed.account.as_deref()).await
        } else {
            self.recorded(recorded).await
        }
    }

    /// Writes what resolving `object` found to its status, when that changed (an account
    /// resolved again after an edit or retried after a failure writes nothing new). A failed
    /// write is logged and made again with the next resolve.
    async fn report(
        &self,
        client: &kube::Client,
        object: &AWSAccount,
        resolved: &Result<Arc<Account>, Unavailable>,
    ) {
        let status = status_of(object, resolved, jiff::Timestamp::now());
        if object.status.as_ref() == Some(&status) {
            return;
        }
        let name = object.name_any();
        // Only over the version resolved: an edit made meanwhile is resolved on the next check.
        let patch = Patch::Merge(serde_json::json!({
            "metadata": {"resourceVersion": object.resource_version()},
            "status": status,
        }));
        let api = Api::<AWSAccount>::all(client.clone());
        let params = PatchParams::default();
        let write = api.patch_status(&name, &params, &patch);
        let metrics = self.home.aws.metrics();
        if let Err(e) = metrics
            .kube_write("AWSAccount", "patch_status", write)
            .await
        {
            tracing::warn!(account = %name, error = %e, "AWSAccount status not written");
        }
    }

    /// Assumes the AWSAccount's role and checks, through STS, that it acts in the account its
    /// ARN names; then finds the permissions boundary there.
    async fn resolve(
        &self,
        client: &kube::Client,
        object: &AWSAccount,
    ) -> Result<Arc<Account>, Unavailable> {
        let name = object.name_any();
        let spec = &object.spec;
        let home = &self.home.settings;
        let account = account_of(&spec.role_arn).ok_or_else(|| {
            Unavailable(format!("AWSAccount {name}: spec.roleArn names no account"))
        })?;
        let external_id = external_id(client, &home.operator_namespace, object).await?;
        let role = AssumeRole {
            name: name.clone(),
            role_arn: spec.role_arn.clone(),
            account: account.to_string(),
            external_id: external_id.clone(),
            session_name: session_name(&home.cluster_name),
            tags: vec![(SESSION_TAG.to_string(), home.cluster_name.clone())],
            region: spec.region.clone(),
        };
        let aws = self.home.aws.assuming(role).await;
        // AWS's words go to status, events and logs: never with the ExternalId in them, should
        // a service (or an emulator) echo the request back.
        let unavailable = |e: crate::aws::Error| {
            let message = redacted(&e.message, &external_id);
            Unavailable(format!("AWSAccount {name} ({account}): {message}"))
        };
        let (id, caller) = aws.caller().await.map_err(unavailable)?;
        if id != account {
            return Err(Unavailable(format!(
                "AWSAccount {name}: STS answered for account {id}, not {account} that spec.roleArn names"
            )));
        }
        let naming = Naming {
            bucket_name_prefix: spec.bucket_name_prefix.clone(),
            iam_path: spec.iam_path.clone(),
        };
        let iam_path = naming.iam_path.clone().unwrap_or(home.iam_path.clone());
        // Under the account's own IAM path, the boundary is the one made there; else the
        // operator's boundary's name, in that account.
        let boundary = match naming.iam_path {
            Some(_) => String::new(),
            None => boundary_in(&home.boundary_arn, &id),
        };
        let boundary = aws
            .boundary(&boundary, &iam_path, &id)
            .await
            .map_err(unavailable)?;
        let settings = Settings {
            account_id: id.clone(),
            boundary_arn: boundary,
            bucket_name_prefix: (naming.bucket_name_prefix.clone())
                .unwrap_or(home.bucket_name_prefix.clone()),
            iam_path,
            operator_principals: crate::aws::policy::operator_principals(&caller),
            // Workload identity is the operator's own cluster's, in its own account.
            oidc_provider_arn: None,
            eks_cluster_name: None,
            eks_cluster_arn: None,
            pod_identity_role_arn: None,
            ..(**home).clone()
        };
        tracing::info!(account = %name, id = %id, principal = %caller, "AWS account in use");
        Ok(Arc::new(Account {
            name: Some(name),
            id,
            aws,
            settings: Arc::new(settings),
            naming,
        }))
    }
}

/// The names `r` was recorded with.
fn naming_of(r: &AccountRecord) -> Naming {
    Naming {
        bucket_name_prefix: r.bucket_name_prefix.clone(),
        iam_path: r.iam_path.clone(),
    }
}

/// "bucket-name prefix p and IAM path /x/", the operator's own where unset.
fn shown(n: &Naming) -> String {
    let or_own = |v: &Option<String>| {
        v.as_deref()
            .map_or("the operator's own".into(), |v| format!("{v:?}"))
    };
    format!(
        "bucket-name prefix {} and IAM path {}",
        or_own(&n.bucket_name_prefix),
        or_own(&n.iam_path)
    )
}

/// The status of `object` after resolving it: its account id (the ARN's, or STS's once
/// confirmed) and `Ready`, whose `lastTransitionTime` holds while it does not flip.
fn status_of(
    object: &AWSAccount,
    resolved: &Result<Arc<Account>, Unavailable>,
    now: jiff::Timestamp,
) -> AWSAccountStatus {
    let previous = object.status.as_ref().map(|s| s.conditions.as_slice());
    let generation = object.metadata.generation;
    let (ready, reason, message, id) = match resolved {
        Ok(account) => (
            true,
            Reason::Available,
            format!(
                "the role is assumed and STS answers for account {}",
                account.id
            ),
            Some(account.id.clone()),
        ),
        Err(why) => (
            false,
            Reason::AccountUnavailable,
            why.0.clone(),
            account_of(&object.spec.role_arn).map(str::to_string),
        ),
    };
    let ready = condition::ready(
        previous.unwrap_or_default(),
        ready,
        reason,
        message,
        generation,
        now,
    );
    AWSAccountStatus {
        account_id: id,
        conditions: vec![ready],
        observed_generation: generation,
    }
}

/// Where a pass acts, as [`placement`] decides it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// The AWSAccount (`None`: the operator's own account).
    pub account: Option<String>,
    /// The account is the class's choice for a new object: recorded before anything is made.
    pub to_record: bool,
    /// The class now names another account than the one the object lives in: nothing moves.
    pub violation: Option<Blocked>,
}

/// Where an object acts: the account `recorded` in its status; an object already `begun`
/// (finalizer in place) without a record lives in the operator's own account (as every object
/// made before accounts existed); a new one in the account its class names, to be recorded.
/// A class that names another account than the one an object lives in moves nothing: it is a
/// ClassViolation, and the object keeps acting (its deletion included) where it lives.
pub fn placement(
    recorded: Option<&AccountRecord>,
    begun: bool,
    class_account: Option<&str>,
    what: &str,
) -> Placement {
    let lives = match (recorded, begun) {
        (Some(r), _) => Some(r.name.clone()),
        (None, true) => None,
        (None, false) => {
            return Placement {
                account: class_account.map(str::to_string),
                to_record: class_account.is_some(),
                violation: None,
            };
        }
    };
    let violation = (lives.as_deref() != class_account).then(|| {
        let said = |a: Option<&str>| match a {
            Some(a) => format!("AWSAccount {a}"),
            None => "the operator's own account".to_string(),
        };
        Blocked::new(
            Reason::ClassViolation,
            format!(
                "the class now gives {}, but the {what} lives in {} and is never moved: delete and re-create it to move it",
                said(class_account),
                said(lives.as_deref()),
            ),
        )
    });
    Placement {
        account: lives,
        to_record: false,
        violation,
    }
}

/// Where an access acts (see [`placement`]): recorded; begun without a record, the
/// operator's own account; new, its Bucket's (`bucket`: `None` when the Bucket is not there,
/// `Some(None)` when it lives in the operator's own account). An identity never moves: a Bucket
/// that now lives in another account (deleted and made again elsewhere) no longer holds the
/// bucket its grant names, and a class naming another account is a violation.
pub fn access_placement(
    recorded: Option<&AccountRecord>,
    begun: bool,
    bucket: Option<Option<&AccountRecord>>,
    class_account: Option<&str>,
) -> Placement {
    let new = recorded.is_none() && !begun;
    let lives = match (recorded, new) {
        (Some(r), _) => Some(r.clone()),
        (None, false) => None,
        (None, true) => bucket.flatten().cloned(),
    };
    let name = lives.as_ref().map(|r| r.name.clone());
    let said = |a: Option<&str>| match a {
        Some(a) => format!("AWSAccount {a}"),
        None => "the operator's own account".to_string(),
    };
    let violation = if class_account.is_some() && name.as_deref() != class_account {
        Some(Blocked::new(
            Reason::ClassViolation,
            format!(
                "the class allows only {}, but the access's Bucket lives in {}",
                said(class_account),
                said(name.as_deref())
            ),
        ))
    } else {
        match bucket {
            Some(b)
                if !new
                    && b.map(|b| (&b.name, &b.id)) != lives.as_ref().map(|l| (&l.name, &l.id)) =>
            {
                Some(Blocked::new(
                    Reason::BucketNotOwned,
                    format!(
                        "the Bucket now lives in {}, but this access's identity lives in {} and is never moved: delete and re-create the access",
                        said(b.map(|b| b.name.as_str())),
                        said(name.as_deref())
                    ),
                ))
            }
            _ => None,
        }
    };
    Placement {
        account: name,
        to_record: new && lives.is_some(),
        violation,
    }
}

/// `message` without `secret` in it.
fn redacted(message: &str, secret: &str) -> String {
    if secret.is_empty() {
        return message.to_string();
    }
    message.replace(secret, "<redacted>")
}

/// The account id an IAM ARN names.
pub fn account_of(arn: &str) -> Option<&str> {
    let id = arn.split(':').nth(4)?;
    (id.len() == 12 && id.bytes().all(|b| b.is_ascii_digit())).then_some(id)
}

/// The session name in the target account's CloudTrail: the installation's (at most 64
/// characters, as STS allows).
fn session_name(cluster: &str) -> String {
    let mut name = format!("s3-operator-{cluster}");
    name.truncate(64);
    name
}

/// The ARN of the operator's session of `role_arn` (an AWSAccount's), as that account's
/// CloudTrail names the caller: `arn:<partition>:sts::<id>:assumed-role/<role name>/<session>`
/// (the role's path left out, as STS leaves it out).
pub fn session_arn(role_arn: &str, cluster: &str) -> Option<String> {
    let partition = role_arn.split(':').nth(1)?;
    let id = account_of(role_arn)?;
    let name = role_arn.rsplit('/').next().filter(|n| !n.is_empty())?;
    role_arn.contains(":role/").then(|| {
        format!(
            "arn:{partition}:sts::{id}:assumed-role/{name}/{}",
            session_name(cluster)
        )
    })
}

/// The permissions boundary in `account`: the configured one's name and path there (the same
/// policy is made in every account), or none configured, the default one (`Aws::boundary`).
fn boundary_in(configured: &str, account: &str) -> String {
    let mut parts: Vec<&str> = configured.splitn(6, ':').collect();
    if parts.len() != 6 {
        return String::new();
    }
    parts[4] = account;
    parts.join(":")
}

/// The ExternalId the AWSAccount's Secret holds, in the operator's own namespace.
async fn external_id(
    client: &kube::Client,
    namespace: &str,
    object: &AWSAccount,
) -> Result<String, Unavailable> {
    let (name, r) = (object.name_any(), &object.spec.external_id_secret_ref);
    let secret = Api::<Secret>::namespaced(client.clone(), namespace)
        .get_opt(&r.name)
        .await
        .map_err(|e| {
            Unavailable(format!(
                "AWSAccount {name}: Secret {namespace}/{} could not be read: {e}",
                r.name
            ))
        })?;
    let value = secret
        .and_then(|s| s.data)
        .and_then(|mut d| d.remove(&r.key))
        .map(|v| String::from_utf8_lossy(&v.0).trim().to_string())
        .filter(|v| !v.is_empty());
    value.ok_or_else(|| {
        Unavailable(format!(
            "AWSAccount {name}: Secret {namespace}/{} has no key {} (spec.externalIdSecretRef)",
            r.name, r.key
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_account_is_the_one_the_role_arn_names() {
        let arn = "arn:aws:iam::111111111111:role/s3-operator";
        assert_eq!(account_of(arn), Some("111111111111"));
        assert_eq!(account_of("arn:aws:iam::1111:role/x"), None);
        assert_eq!(account_of("arn:aws:iam::11111111111x:role/x"), None);
        assert_eq!(account_of("role/x"), None);
    }

    #[test]
    fn an_external_id_echoed_by_aws_is_never_repeated() {
        let said = "not authorized: sts:AssumeRole with ExternalId s3cr3t-x on role r";
        let kept = redacted(said, "s3cr3t-x");
        assert!(!kept.contains("s3cr3t-x"), "{kept}");
        assert!(kept.contains("sts:AssumeRole") && kept.contains("<redacted>"));
        assert_eq!(redacted("nothing to hide", ""), "nothing to hide");
    }

    fn aws_account(status: Option<AWSAccountStatus>) -> AWSAccount {
        let mut a = AWSAccount::new(
            "payments",
            crate::api::AWSAccountSpec {
                role_arn: "arn:aws:iam::210987654321:role/s3-operator".into(),
                ..Default::default()
            },
        );
        a.metadata.generation = Some(3);
        a.status = status;
        a
    }

    /// The status is a function of what resolving found: the same outcome again (a retry, a
    /// recheck after an edit) gives the same status, so nothing is written.
    #[test]
    fn the_status_says_why_and_holds_still_while_nothing_changes() {
        let (t0, t1): (jiff::Timestamp, jiff::Timestamp) = (
            "2026-01-01T00:00:00Z".parse().unwrap(),
            "2026-01-01T00:01:00Z".parse().unwrap(),
        );
        let refused: Result<Arc<Account>, _> = Err(Unavailable(
            "AWSAccount payments (210987654321): not authorized to perform sts:AssumeRole".into(),
        ));
        let failed = status_of(&aws_account(None), &refused, t0);
        assert_eq!(failed.account_id.as_deref(), Some("210987654321"));
        assert_eq!(failed.observed_generation, Some(3));
        let c = &failed.conditions[0];
        assert_eq!((c.type_.as_str(), c.status.as_str()), ("Ready", "False"));
        assert_eq!(c.reason, "AccountUnavailable");
        assert!(c.message.contains("sts:AssumeRole"));
        let again = status_of(&aws_account(Some(failed.clone())), &refused, t1);
        assert_eq!(
            again, failed,
            "a retry that fails the same way writes nothing"
        );

        let sdk = aws_config::SdkConfig::builder().build();
        let metrics = Arc::new(crate::metrics::Metrics::new());
        let home = Account::home(Aws::from_config(sdk, None, metrics), Settings::for_tests());
        let resolved = Ok(Arc::new(Account {
            name: Some("payments".into()),
            id: "210987654321".into(),
            ..home
        }));
        let ready = status_of(&aws_account(Some(failed)), &resolved, t1);
        let c = &ready.conditions[0];
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("True", "Available")
        );
        assert_eq!(c.last_transition_time.0, t1, "it flipped");
        assert_eq!(ready.account_id.as_deref(), Some("210987654321"));
    }

    #[test]
    fn a_configured_boundary_is_looked_for_under_its_name_in_each_account() {
        let home = "arn:aws:iam::123456789012:policy/s3-operator/c/boundary";
        assert_eq!(
            boundary_in(home, "111111111111"),
            "arn:aws:iam::111111111111:policy/s3-operator/c/boundary"
        );
        // None configured: the default one in that account.
        assert_eq!(boundary_in("", "111111111111"), "");
    }

    #[test]
    fn the_session_name_names_the_installation_within_sts_limits() {
        assert_eq!(session_name("prod"), "s3-operator-prod");
        assert_eq!(session_name(&"c".repeat(100)).len(), 64);
    }

    /// What the target account's CloudTrail names the operator's session: the role's name
    /// without its path, and the installation's session name.
    #[test]
    fn the_session_arn_is_the_role_name_and_the_session_name() {
        assert_eq!(
            session_arn("arn:aws:iam::222222222222:role/team/s3op-target", "prod").as_deref(),
            Some("arn:aws:sts::222222222222:assumed-role/s3op-target/s3-operator-prod")
        );
        assert_eq!(
            session_arn("arn:aws-cn:iam::222222222222:role/r", "p").as_deref(),
            Some("arn:aws-cn:sts::222222222222:assumed-role/r/s3-operator-p")
        );
        for bad in [
            "arn:aws:iam::2222:role/r",
            "arn:aws:iam::222222222222:user/r",
            "arn:aws:iam::222222222222:role/",
        ] {
            assert_eq!(session_arn(bad, "p"), None, "{bad}");
        }
    }

    #[test]
    fn only_the_recorded_account_is_the_objects() {
        let settings = Settings::for_tests();
        let sdk = aws_config::SdkConfig::builder().build();
        let metrics = Arc::new(crate::metrics::Metrics::new());
        let home = Account::home(Aws::from_config(sdk, None, metrics), settings);
        assert!(home.is(None));
        assert_eq!(home.record(), None);
        let other = AccountRecord {
            name: "a".into(),
            id: "111111111111".into(),
            ..Default::default()
        };
        assert!(!home.is(Some(&other)));
        let a = Account {
            name: Some("a".into()),
            id: "111111111111".into(),
            ..home
        };
        assert!(a.is(Some(&other)));
        assert_eq!(a.record(), Some(other.clone()));
        let moved = AccountRecord {
            id: "222222222222".into(),
            ..other.clone()
        };
        assert!(
            !a.is(Some(&moved)),
            "an AWSAccount re-pointed at another account"
        );
        assert!(!a.is(None));
        // Made again with names of its own: not where objects recorded without them live,
        // and what it records now carries them.
        let named = Account {
            naming: Naming {
                bucket_name_prefix: Some("team-b-".into()),
                iam_path: Some("/platform/".into()),
            },
            ..a
        };
        assert!(!named.is(Some(&other)));
        let record = named.record().unwrap();
        assert_eq!(record.bucket_name_prefix.as_deref(), Some("team-b-"));
        assert_eq!(record.iam_path.as_deref(), Some("/platform/"));
        assert!(named.is(Some(&record)));
        let renamed = AccountRecord {
            iam_path: Some("/other/".into()),
            ..record
        };
        assert!(!named.is(Some(&renamed)));
        assert_eq!(
            shown(&naming_of(&renamed)),
            r#"bucket-name prefix "team-b-" and IAM path "/other/""#
        );
        assert_eq!(
            shown(&Naming::default()),
            "bucket-name prefix the operator's own and IAM path the operator's own"
        );
    }

    fn record(name: &str) -> AccountRecord {
        AccountRecord {
            name: name.into(),
            id: "111111111111".into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_new_object_goes_where_its_class_says_and_is_recorded_first() {
        let p = placement(None, false, Some("a"), "bucket");
        assert_eq!(p.account.as_deref(), Some("a"));
        assert!(p.to_record && p.violation.is_none());
        let p = placement(None, false, None, "bucket");
        assert_eq!(p.account, None);
        assert!(!p.to_record && p.violation.is_none());
    }

    #[test]
    fn a_class_edit_never_moves_an_object() {
        // Recorded in a, the class now says b: still a, and a violation.
        let p = placement(Some(&record("a")), true, Some("b"), "bucket");
        assert_eq!(p.account.as_deref(), Some("a"));
        assert!(!p.to_record);
        let why = p.violation.expect("a violation");
        assert_eq!(why.reason, Reason::ClassViolation);
        assert!(why.message.contains("AWSAccount b") && why.message.contains("AWSAccount a"));
        // The class dropped its account: the object stays where it is.
        let p = placement(Some(&record("a")), true, None, "bucket");
        assert_eq!(p.account.as_deref(), Some("a"));
        assert!(
            p.violation
                .unwrap()
                .message
                .contains("operator's own account")
        );
        // Made before accounts existed (no record, begun): the operator's own, whatever the class.
        let p = placement(None, true, Some("a"), "bucket");
        assert_eq!(p.account, None);
        assert!(p.violation.is_some());
        // A record is kept even before the finalizer (recorded, then the pass requeued).
        let p = placement(Some(&record("a")), false, Some("a"), "bucket");
        assert_eq!(p.account.as_deref(), Some("a"));
        assert!(!p.to_record && p.violation.is_none());
    }

    #[test]
    fn an_access_lives_where_its_bucket_did_when_it_was_made() {
        let a = record("a");
        // New: its Bucket's account, recorded first; the operator's own needs no record.
        let p = access_placement(None, false, Some(Some(&a)), None);
        assert_eq!(p.account.as_deref(), Some("a"));
        assert!(p.to_record && p.violation.is_none());
        let p = access_placement(None, false, Some(None), None);
        assert!(p.account.is_none() && !p.to_record && p.violation.is_none());
        // Recorded in a, its Bucket re-created in b: the grant does not follow the name.
        let b = AccountRecord {
            name: "b".into(),
            id: "222222222222".into(),
            ..Default::default()
        };
        let p = access_placement(Some(&a), true, Some(Some(&b)), None);
        assert_eq!(p.account.as_deref(), Some("a"));
        assert_eq!(p.violation.unwrap().reason, Reason::BucketNotOwned);
        // Made before accounts existed, its Bucket now in a: the same.
        let p = access_placement(None, true, Some(Some(&a)), None);
        assert_eq!(p.account, None);
        assert_eq!(p.violation.unwrap().reason, Reason::BucketNotOwned);
        // The Bucket gone: nothing to compare, where it lives stands (the pass withdraws).
        let p = access_placement(Some(&a), true, None, None);
        assert_eq!(p.account.as_deref(), Some("a"));
        assert!(p.violation.is_none());
    }

    #[test]
    fn an_access_class_bounds_the_account_of_its_accesses() {
        let a = record("a");
        let p = access_placement(None, false, Some(Some(&a)), Some("b"));
        assert_eq!(p.violation.unwrap().reason, Reason::ClassViolation);
        let p = access_placement(None, false, Some(None), Some("a"));
        assert_eq!(p.violation.unwrap().reason, Reason::ClassViolation);
        let p = access_placement(None, false, Some(Some(&a)), Some("a"));
        assert!(p.violation.is_none() && p.to_record);
    }

    #[tokio::test]
    async fn without_a_cluster_only_the_home_account_resolves() {
        let sdk = aws_config::SdkConfig::builder().build();
        let metrics = Arc::new(crate::metrics::Metrics::new());
        let home = Account::home(Aws::from_config(sdk, None, metrics), Settings::for_tests());
        let accounts = Accounts::home_only(home);
        assert!(accounts.get(None).await.is_ok());
        assert!(accounts.get(Some("a")).await.is_err());
    }
}
