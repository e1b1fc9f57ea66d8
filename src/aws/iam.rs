//! IAM calls for application identities: users with access keys, and roles for IRSA.

use std::collections::BTreeMap;
use std::fmt;

use aws_sdk_iam::types as iam;
use serde_json::Value;

use super::policy::decode_document;
use super::{Aws, Error};

const IAM: &str = "iam";

/// An IAM user or role as the operator sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct Entity {
    pub arn: String,
    pub tags: BTreeMap<String, String>,
    /// The trust policy (roles only).
    pub trust_policy: Option<Value>,
    /// ARN of the permissions boundary, if any.
    pub boundary: Option<String>,
}

/// An access key's public facts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccessKey {
    pub id: String,
    pub created: jiff::Timestamp,
    /// Inactive keys exist but authenticate nothing (a revoked grant).
    pub active: bool,
}

/// A secret value that never prints: `Debug` and `Display` show `<redacted>`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Self {
        Secret(s.into())
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// A freshly created access key: the only moment its secret is known.
#[derive(Clone, Debug)]
pub struct NewAccessKey {
    pub key: AccessKey,
    pub secret: Secret,
}

fn tags_of(tags: Option<Vec<iam::Tag>>) -> BTreeMap<String, String> {
    tags.unwrap_or_default()
        .into_iter()
        .map(|t| (t.key, t.value))
        .collect()
}

fn to_iam_tags(tags: &BTreeMap<String, String>) -> Vec<iam::Tag> {
    // The builder fails only without a key or value, and both are always set here.
    tags.iter()
        .filter_map(|(k, v)| iam::Tag::builder().key(k).value(v).build().ok())
        .collect()
}

fn boundary_of(b: Option<iam::AttachedPermissionsBoundary>) -> Option<String> {
    b.and_then(|b| b.permissions_boundary_arn)
}

fn timestamp(t: &aws_smithy_types::DateTime) -> jiff::Timestamp {
    jiff::Timestamp::from_second(t.secs()).unwrap_or(jiff::Timestamp::UNIX_EPOCH)
}

/// `Ok(None)` for NoSuchEntity.
fn absent_ok<T>(r: Result<T, Error>) -> Result<Option<T>, Error> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// A user or a role by name: the calls that both kinds have take one of these, so callers
/// never branch on the kind. Access keys and trust policies stay with their one kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Identity {
    User(String),
    Role(String),
}

impl Identity {
    pub fn name(&self) -> &str {
        match self {
            Identity::User(name) | Identity::Role(name) => name,
        }
    }
}

/// "IAM user NAME" or "IAM role NAME", as events and conditions name it.
impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Identity::User(name) => write!(f, "IAM user {name}"),
            Identity::Role(name) => write!(f, "IAM role {name}"),
        }
    }
}

impl Aws {
    /// `Ok(None)` only when the identity does not exist; a refusal is an error (the operator's
    /// policy lets it read any user and role, so only "does not exist" can mean gone).
    pub async fn get_identity(&self, id: &Identity) -> Result<Option<Entity>, Error> {
        let iam = self.iam();
        let found = match id {
            Identity::User(name) => {
                let req = iam.get_user().user_name(name).send();
                let user = absent_ok(Aws::call(IAM, "GetUser", req).await)?.and_then(|o| o.user);
                user.map(|u| (u.arn, u.tags, u.permissions_boundary, None))
            }
            Identity::Role(name) => {
                let req = iam.get_role().role_name(name).send();
                let role = absent_ok(Aws::call(IAM, "GetRole", req).await)?.and_then(|o| o.role);
                role.map(|r| {
                    let trust = r.assume_role_policy_document.as_deref();
                    let trust = trust.and_then(decode_document);
                    (r.arn, r.tags, r.permissions_boundary, trust)
                })
            }
        };
        Ok(found.map(|(arn, tags, boundary, trust_policy)| Entity {
            arn,
            tags: tags_of(tags),
            trust_policy,
            boundary: boundary_of(boundary),
        }))
    }

    /// Sets the permissions boundary (of one created before boundaries existed, or changed).
    pub async fn put_boundary(&self, id: &Identity, boundary: &str) -> Result<(), Error> {
        let iam = self.iam();
        match id {
            Identity::User(name) => {
                let req = iam.put_user_permissions_boundary().user_name(name);
                let req = req.permissions_boundary(boundary).send();
                Aws::call(IAM, "PutUserPermissionsBoundary", req).await?;
            }
            Identity::Role(name) => {
                let req = iam.put_role_permissions_boundary().role_name(name);
                let req = req.permissions_boundary(boundary).send();
                Aws::call(IAM, "PutRolePermissionsBoundary", req).await?;
            }
        }
        Ok(())
    }

    /// The inline policy `policy`; `None` when it (or the identity) does not exist.
    pub async fn inline_policy(&self, id: &Identity, policy: &str) -> Result<Option<Value>, Error> {
        let iam = self.iam();
        let doc = match id {
            Identity::User(name) => {
                let req = iam.get_user_policy().user_name(name).policy_name(policy);
                absent_ok(Aws::call(IAM, "GetUserPolicy", req.send()).await)?
                    .map(|o| o.policy_document)
            }
            Identity::Role(name) => {
                let req = iam.get_role_policy().role_name(name).policy_name(policy);
                absent_ok(Aws::call(IAM, "GetRolePolicy", req.send()).await)?
                    .map(|o| o.policy_document)
            }
        };
        Ok(doc.and_then(|d| decode_document(&d)))
    }

    pub async fn put_inline_policy(
        &self,
        id: &Identity,
        policy: &str,
        doc: &Value,
    ) -> Result<(), Error> {
        let (iam, doc) = (self.iam(), doc.to_string());
        match id {
            Identity::User(name) => {
                let req = iam.put_user_policy().user_name(name).policy_name(policy);
                let req = req.policy_document(doc).send();
                Aws::call(IAM, "PutUserPolicy", req).await.map(drop)
            }
            Identity::Role(name) => {
                let req = iam.put_role_policy().role_name(name).policy_name(policy);
                let req = req.policy_document(doc).send();
                Aws::call(IAM, "PutRolePolicy", req).await.map(drop)
            }
        }
    }

    /// The names of its inline policies; none when the identity does not exist.
    pub async fn inline_policy_names(&self, id: &Identity) -> Result<Vec<String>, Error> {
        let iam = self.iam();
        let names = match id {
            Identity::User(name) => {
                let req = iam.list_user_policies().user_name(name).send();
                absent_ok(Aws::call(IAM, "ListUserPolicies", req).await)?.map(|o| o.policy_names)
            }
            Identity::Role(name) => {
                let req = iam.list_role_policies().role_name(name).send();
                absent_ok(Aws::call(IAM, "ListRolePolicies", req).await)?.map(|o| o.policy_names)
            }
        };
        Ok(names.unwrap_or_default())
    }

    /// Deletes an inline policy; one already gone is no error.
    pub async fn delete_inline_policy(&self, id: &Identity, policy: &str) -> Result<(), Error> {
        let iam = self.iam();
        let deleted = match id {
            Identity::User(name) => {
                let req = iam.delete_user_policy().user_name(name).policy_name(policy);
                Aws::call(IAM, "DeleteUserPolicy", req.send())
                    .await
                    .map(drop)
            }
            Identity::Role(name) => {
                let req = iam.delete_role_policy().role_name(name).policy_name(policy);
                Aws::call(IAM, "DeleteRolePolicy", req.send())
                    .await
                    .map(drop)
            }
        };
        absent_ok(deleted).map(drop)
    }

    /// Deletes the user or role; one already gone is no error.
    pub async fn delete_identity(&self, id: &Identity) -> Result<(), Error> {
        let iam = self.iam();
        let deleted = match id {
            Identity::User(name) => {
                let req = iam.delete_user().user_name(name).send();
                Aws::call(IAM, "DeleteUser", req).await.map(drop)
            }
            Identity::Role(name) => {
                let req = iam.delete_role().role_name(name).send();
                Aws::call(IAM, "DeleteRole", req).await.map(drop)
            }
        };
        absent_ok(deleted).map(drop)
    }
}

impl Aws {
    /// The names of the users (`role` false) or roles under `path`: pages of up to 1,000 (the
    /// orphan sweep's list; IAM's lists carry no tags).
    pub async fn identities_under(&self, path: &str, role: bool) -> Result<Vec<Identity>, Error> {
        let (iam, mut found, mut marker) = (self.iam(), vec![], None);
        loop {
            let (names, next) = if role {
                let req = iam.list_roles().path_prefix(path).max_items(1000);
                let out = Aws::call(IAM, "ListRoles", req.set_marker(marker).send()).await?;
                let names = out.roles.into_iter().filter(|r| r.path.starts_with(path));
                let names: Vec<_> = names.map(|r| Identity::Role(r.role_name)).collect();
                (names, out.is_truncated.then_some(out.marker).flatten())
            } else {
                let req = iam.list_users().path_prefix(path).max_items(1000);
                let out = Aws::call(IAM, "ListUsers", req.set_marker(marker).send()).await?;
                let names = out.users.into_iter().filter(|u| u.path.starts_with(path));
                let names: Vec<_> = names.map(|u| Identity::User(u.user_name)).collect();
                (names, out.is_truncated.then_some(out.marker).flatten())
            };
            found.extend(names);
            match next {
                Some(m) => marker = Some(m),
                None => return Ok(found),
            }
        }
    }

    /// The identity's tags (one page: the operator's four ownership tags come with at most the
    /// 50 IAM allows); `None` when it does not exist.
    pub async fn identity_tags(
        &self,
        id: &Identity,
    ) -> Result<Option<BTreeMap<String, String>>, Error> {
        let iam = self.iam();
        let tags = match id {
            Identity::User(name) => {
                let req = iam.list_user_tags().user_name(name).max_items(100).send();
                absent_ok(Aws::call(IAM, "ListUserTags", req).await)?.map(|o| o.tags)
            }
            Identity::Role(name) => {
                let req = iam.list_role_tags().role_name(name).max_items(100).send();
                absent_ok(Aws::call(IAM, "ListRoleTags", req).await)?.map(|o| o.tags)
            }
        };
        Ok(tags.map(|t| tags_of(Some(t))))
    }
}

impl Aws {
    /// Creates a user under `path` with `boundary` as its permissions boundary.
    pub async fn create_user(
        &self,
        name: &str,
        path: &str,
        boundary: &str,
        tags: &BTreeMap<String, String>,
    ) -> Result<Entity, Error> {
        let req = self
            .iam()
            .create_user()
            .user_name(name)
            .path(path)
            .permissions_boundary(boundary)
            .set_tags(Some(to_iam_tags(tags)))
            .send();
        let user = Aws::call(IAM, "CreateUser", req).await?.user;
        Ok(Entity {
            arn: user.map(|u| u.arn).unwrap_or_default(),
            tags: tags.clone(),
            trust_policy: None,
            boundary: Some(boundary.to_string()),
        })
    }

    /// The permissions boundary every created user and role carries: `configured`, else the
    /// installation's policy `<iam_path>s3-operator-boundary` in the caller's own account. A
    /// boundary that does not exist stops start-up with one clear error instead of failing
    /// every user creation; one the operator may not read is left for IAM to judge.
    pub async fn boundary(
        &self,
        configured: &str,
        iam_path: &str,
        account: &str,
    ) -> Result<String, Error> {
        let arn = if configured.is_empty() {
            let scope = super::policy::Scope {
                partition: super::naming::partition(&self.region).to_string(),
                account: account.to_string(),
                bucket_prefix: String::new(),
                iam_path: iam_path.to_string(),
            };
            scope.boundary_arn()
        } else {
            configured.to_string()
        };
        let req = self.iam().get_policy().policy_arn(&arn).send();
        match Aws::call(IAM, "GetPolicy", req).await {
            Err(e) if e.not_found() => Err(Error {
                message: format!(
                    "the permissions boundary {arn} does not exist: create it from `s3-operator iam-policy --boundary`"
                ),
                ..e
            }),
            Err(e) if e.kind == super::ErrorKind::AccessDenied => {
                tracing::warn!(boundary = %arn, error = %e, "cannot check the permissions boundary");
                Ok(arn)
            }
            Err(e) => Err(e),
            Ok(_) => Ok(arn),
        }
    }

    pub async fn access_keys(&self, user: &str) -> Result<Vec<AccessKey>, Error> {
        let req = self.iam().list_access_keys().user_name(user).send();
        let out = absent_ok(Aws::call(IAM, "ListAccessKeys", req).await)?;
        let mut keys: Vec<AccessKey> = out
            .map(|o| o.access_key_metadata)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|k| {
                Some(AccessKey {
                    created: k.create_date.as_ref().map(timestamp)?,
                    active: k.status != Some(iam::StatusType::Inactive),
                    id: k.access_key_id?,
                })
            })
            .collect();
        keys.sort_by(|a, b| a.created.cmp(&b.created).then(a.id.cmp(&b.id)));
        Ok(keys)
    }

    /// Never retried by the SDK: an attempt whose answer was lost may have made a key, and a
    /// retry would make a second one while the pass keeps only the last (the first lived on
    /// until a full pass found it). The pass fails instead, and its retry plans from every key
    /// the user has (`keys::plan_keys`), so one no Secret holds goes before another is made.
    pub async fn create_access_key(&self, user: &str) -> Result<NewAccessKey, Error> {
        let once = aws_sdk_iam::config::Builder::default()
            .retry_config(aws_config::retry::RetryConfig::disabled());
        let request = self.iam().create_access_key().user_name(user);
        let out = Aws::call(
            IAM,
            "CreateAccessKey",
            request.customize().config_override(once).send(),
        )
        .await?;
        let k = out.access_key.ok_or_else(|| Error {
            service: IAM,
            operation: "CreateAccessKey",
            code: "NoAccessKey".into(),
            message: "the answer carried no key".into(),
            kind: super::ErrorKind::Transient,
        })?;
        Ok(NewAccessKey {
            key: AccessKey {
                created: k
                    .create_date
                    .as_ref()
                    .map(timestamp)
                    .unwrap_or_else(jiff::Timestamp::now),
                id: k.access_key_id,
                active: true,
            },
            secret: Secret::new(k.secret_access_key),
        })
    }

    /// Activates or deactivates a key: a revoked grant keeps its keys, inactive, so the same
    /// Secret works again if the grant comes back.
    pub async fn set_access_key_active(
        &self,
        user: &str,
        id: &str,
        active: bool,
    ) -> Result<(), Error> {
        let status = if active {
            iam::StatusType::Active
        } else {
            iam::StatusType::Inactive
        };
        let req = self
            .iam()
            .update_access_key()
            .user_name(user)
            .access_key_id(id)
            .status(status)
            .send();
        Aws::call(IAM, "UpdateAccessKey", req).await.map(drop)
    }

    pub async fn delete_access_key(&self, user: &str, id: &str) -> Result<(), Error> {
        let req = self
            .iam()
            .delete_access_key()
            .user_name(user)
            .access_key_id(id)
            .send();
        absent_ok(Aws::call(IAM, "DeleteAccessKey", req).await).map(drop)
    }

    pub async fn create_role(
        &self,
        name: &str,
        path: &str,
        boundary: &str,
        trust: &Value,
        tags: &BTreeMap<String, String>,
    ) -> Result<Entity, Error> {
        let req = self
            .iam()
            .create_role()
            .role_name(name)
            .path(path)
            .permissions_boundary(boundary)
            .assume_role_policy_document(trust.to_string())
            .set_tags(Some(to_iam_tags(tags)))
            .send();
        let role = Aws::call(IAM, "CreateRole", req).await?.role;
        Ok(Entity {
            arn: role.map(|r| r.arn).unwrap_or_default(),
            tags: tags.clone(),
            trust_policy: Some(trust.clone()),
            boundary: Some(boundary.to_string()),
        })
    }

    pub async fn update_trust_policy(&self, role: &str, trust: &Value) -> Result<(), Error> {
        let req = self
            .iam()
            .update_assume_role_policy()
            .role_name(role)
            .policy_document(trust.to_string())
            .send();
        Aws::call(IAM, "UpdateAssumeRolePolicy", req)
            .await
            .map(drop)
    }
}
