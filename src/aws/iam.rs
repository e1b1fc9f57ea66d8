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
}

/// An access key's public facts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccessKey {
    pub id: String,
    pub created: jiff::Timestamp,
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
    tags.iter()
        .map(|(k, v)| {
            iam::Tag::builder()
                .key(k)
                .value(v)
                .build()
                .expect("key and value are set")
        })
        .collect()
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

fn absent_or_denied<T>(r: Result<T, Error>) -> Result<Option<T>, Error> {
    match r {
        Err(e) if e.kind == super::ErrorKind::AccessDenied => Ok(None),
        other => absent_ok(other),
    }
}

impl Aws {
    /// `Ok(None)` when the user does not exist, or when IAM refuses to say: IAM authorizes a read
    /// of a missing user against a path-less ARN that a path-scoped policy does not cover. The
    /// path-scoped CreateUser that follows settles it (EntityAlreadyExists: someone else's).
    pub async fn get_user(&self, name: &str) -> Result<Option<Entity>, Error> {
        let out = absent_or_denied(
            Aws::call(IAM, "GetUser", self.iam().get_user().user_name(name).send()).await,
        )?;
        Ok(out.and_then(|o| o.user).map(|u| Entity {
            arn: u.arn,
            tags: tags_of(u.tags),
            trust_policy: None,
        }))
    }

    pub async fn create_user(
        &self,
        name: &str,
        path: &str,
        tags: &BTreeMap<String, String>,
    ) -> Result<Entity, Error> {
        let req = self
            .iam()
            .create_user()
            .user_name(name)
            .path(path)
            .set_tags(Some(to_iam_tags(tags)))
            .send();
        let user = Aws::call(IAM, "CreateUser", req).await?.user;
        Ok(Entity {
            arn: user.map(|u| u.arn).unwrap_or_default(),
            tags: tags.clone(),
            trust_policy: None,
        })
    }

    pub async fn delete_user(&self, name: &str) -> Result<(), Error> {
        absent_ok(
            Aws::call(
                IAM,
                "DeleteUser",
                self.iam().delete_user().user_name(name).send(),
            )
            .await,
        )
        .map(drop)
    }

    pub async fn user_policy(&self, user: &str, policy: &str) -> Result<Option<Value>, Error> {
        let req = self
            .iam()
            .get_user_policy()
            .user_name(user)
            .policy_name(policy)
            .send();
        Ok(absent_ok(Aws::call(IAM, "GetUserPolicy", req).await)?
            .and_then(|o| decode_document(&o.policy_document)))
    }

    pub async fn put_user_policy(
        &self,
        user: &str,
        policy: &str,
        doc: &Value,
    ) -> Result<(), Error> {
        let req = self
            .iam()
            .put_user_policy()
            .user_name(user)
            .policy_name(policy)
            .policy_document(doc.to_string())
            .send();
        Aws::call(IAM, "PutUserPolicy", req).await.map(drop)
    }

    pub async fn user_policy_names(&self, user: &str) -> Result<Vec<String>, Error> {
        let req = self.iam().list_user_policies().user_name(user).send();
        Ok(absent_ok(Aws::call(IAM, "ListUserPolicies", req).await)?
            .map(|o| o.policy_names)
            .unwrap_or_default())
    }

    pub async fn delete_user_policy(&self, user: &str, policy: &str) -> Result<(), Error> {
        let req = self
            .iam()
            .delete_user_policy()
            .user_name(user)
            .policy_name(policy)
            .send();
        absent_ok(Aws::call(IAM, "DeleteUserPolicy", req).await).map(drop)
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
                    id: k.access_key_id?,
                })
            })
            .collect();
        keys.sort_by(|a, b| a.created.cmp(&b.created).then(a.id.cmp(&b.id)));
        Ok(keys)
    }

    pub async fn create_access_key(&self, user: &str) -> Result<NewAccessKey, Error> {
        let out = Aws::call(
            IAM,
            "CreateAccessKey",
            self.iam().create_access_key().user_name(user).send(),
        )
        .await?;
        let k = out.access_key.expect("CreateAccessKey returns the key");
        Ok(NewAccessKey {
            key: AccessKey {
                created: k
                    .create_date
                    .as_ref()
                    .map(timestamp)
                    .unwrap_or_else(jiff::Timestamp::now),
                id: k.access_key_id,
            },
            secret: Secret::new(k.secret_access_key),
        })
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

    /// Like [`Aws::get_user`]: a refused read of a role is treated as absent.
    pub async fn get_role(&self, name: &str) -> Result<Option<Entity>, Error> {
        let out = absent_or_denied(
            Aws::call(IAM, "GetRole", self.iam().get_role().role_name(name).send()).await,
        )?;
        Ok(out.and_then(|o| o.role).map(|r| Entity {
            arn: r.arn,
            tags: tags_of(r.tags),
            trust_policy: r
                .assume_role_policy_document
                .as_deref()
                .and_then(decode_document),
        }))
    }

    pub async fn create_role(
        &self,
        name: &str,
        path: &str,
        trust: &Value,
        tags: &BTreeMap<String, String>,
    ) -> Result<Entity, Error> {
        let req = self
            .iam()
            .create_role()
            .role_name(name)
            .path(path)
            .assume_role_policy_document(trust.to_string())
            .set_tags(Some(to_iam_tags(tags)))
            .send();
        let role = Aws::call(IAM, "CreateRole", req).await?.role;
        Ok(Entity {
            arn: role.map(|r| r.arn).unwrap_or_default(),
            tags: tags.clone(),
            trust_policy: Some(trust.clone()),
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

    pub async fn role_policy(&self, role: &str, policy: &str) -> Result<Option<Value>, Error> {
        let req = self
            .iam()
            .get_role_policy()
            .role_name(role)
            .policy_name(policy)
            .send();
        Ok(absent_ok(Aws::call(IAM, "GetRolePolicy", req).await)?
            .and_then(|o| decode_document(&o.policy_document)))
    }

    pub async fn put_role_policy(
        &self,
        role: &str,
        policy: &str,
        doc: &Value,
    ) -> Result<(), Error> {
        let req = self
            .iam()
            .put_role_policy()
            .role_name(role)
            .policy_name(policy)
            .policy_document(doc.to_string())
            .send();
        Aws::call(IAM, "PutRolePolicy", req).await.map(drop)
    }

    pub async fn role_policy_names(&self, role: &str) -> Result<Vec<String>, Error> {
        let req = self.iam().list_role_policies().role_name(role).send();
        Ok(absent_ok(Aws::call(IAM, "ListRolePolicies", req).await)?
            .map(|o| o.policy_names)
            .unwrap_or_default())
    }

    pub async fn delete_role_policy(&self, role: &str, policy: &str) -> Result<(), Error> {
        let req = self
            .iam()
            .delete_role_policy()
            .role_name(role)
            .policy_name(policy)
            .send();
        absent_ok(Aws::call(IAM, "DeleteRolePolicy", req).await).map(drop)
    }

    pub async fn delete_role(&self, name: &str) -> Result<(), Error> {
        absent_ok(
            Aws::call(
                IAM,
                "DeleteRole",
                self.iam().delete_role().role_name(name).send(),
            )
            .await,
        )
        .map(drop)
    }
}
