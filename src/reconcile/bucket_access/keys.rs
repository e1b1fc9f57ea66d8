//! The pure key planner: which access keys to delete, reactivate or create, from the keys AWS
//! has (each one's CreateDate and status), the key status last reported, and whether the Secret
//! still holds the pair the operator wrote.
//!
//! Rotation is decided from what AWS holds and from status, which tenants cannot write: the
//! current key rotates once its CreateDate is `interval` old, and a key older than the current
//! one is its predecessor, kept until the current key is `grace` old (its CreateDate is when
//! the grace period began). The Secret's annotations are outputs only: what they say about a
//! previous key or a rotation time steers nothing, and an edit of them is written back.
//!
//! Crash-safe because every decision is recomputed from AWS: keys that are neither the current
//! key nor its predecessor are deleted before any key is created, so a user never holds more
//! than two keys.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;

use crate::api::BucketAccess;
use crate::aws::iam::AccessKey;
use crate::aws::naming::sha256_hex;

pub const ANN_KEY_ID: &str = crate::domain_key!("access-key-id");
pub const ANN_KEY_HASH: &str = crate::domain_key!("secret-access-key-sha256");
/// Output only: the key kept through its grace period ("" when none).
pub const ANN_PREVIOUS: &str = crate::domain_key!("previous-access-key-id");
/// Output only: when the current key was issued (its CreateDate).
pub const ANN_ROTATED_AT: &str = crate::domain_key!("rotated-at");

/// What the Secret holds: the key id in its data, and whether the pair is the one the operator
/// wrote. (A Secret from before the annotations became outputs may carry more; it is ignored.)
#[derive(Clone, Debug, PartialEq)]
pub struct SecretCreds {
    pub key_id: String,
    /// The key pair in `data` is the one the operator wrote (id and secret hash match).
    pub intact: bool,
    /// The data key the secret is under (the key map names it, and may have renamed it since).
    pub secret_key: Option<String>,
}

/// Rotation settings in force.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RotationPolicy {
    pub interval: Option<Duration>,
    pub grace: Duration,
}

impl RotationPolicy {
    /// The rotation `access` asks for (its class's default already filled in); none when
    /// omitted.
    pub fn of(access: &BucketAccess) -> RotationPolicy {
        match &access.spec.credentials.rotation {
            Some(r) => RotationPolicy {
                interval: Some(r.interval.into()),
                grace: r.grace_period.into(),
            },
            None => RotationPolicy {
                interval: None,
                grace: Duration::ZERO,
            },
        }
    }
}

/// Which keys to delete and whether to create one; computed purely from observed state.
#[derive(Clone, Debug, PartialEq)]
pub struct KeyPlan {
    pub delete: Vec<String>,
    pub create: bool,
    /// The key the Secret keeps (when no key is created).
    pub active: Option<AccessKey>,
    /// The key that stays valid through its grace period.
    pub previous: Option<PreviousKey>,
    /// When the plan changes next by itself (a rotation or a grace period ending).
    pub wake_at: Option<jiff::Timestamp>,
    /// Kept keys that a revoked grant deactivated.
    pub reactivate: Vec<String>,
}

/// The key that stays valid through its grace period after a successor was issued.
#[derive(Clone, Debug, PartialEq)]
pub struct PreviousKey {
    pub id: String,
    /// When its grace period started.
    pub since: jiff::Timestamp,
}

pub fn add(t: jiff::Timestamp, d: Duration) -> jiff::Timestamp {
    t.checked_add(jiff::SignedDuration::try_from(d).unwrap_or(jiff::SignedDuration::MAX))
        .unwrap_or(jiff::Timestamp::MAX)
}

/// The pure key planner. `keys` are the user's keys in AWS (oldest first), `secret` what the
/// Secret holds, `last_active` the key id status last reported.
pub fn plan_keys(
    keys: &[AccessKey],
    secret: Option<&SecretCreds>,
    last_active: Option<&str>,
    rotation: RotationPolicy,
    now: jiff::Timestamp,
) -> KeyPlan {
    let find = |id: &str| keys.iter().find(|k| k.id == id).cloned();
    let reported = last_active.and_then(find);
    // The Secret's key serves unless it is older than the one status reports: a Secret put back
    // to an earlier key (whose pair the tenant kept) must not bring that key back. A newer one
    // is a pass that wrote the Secret and died before its status write.
    let active = secret
        .filter(|s| s.intact)
        .and_then(|s| find(&s.key_id))
        .filter(|k| reported.as_ref().is_none_or(|r| r.created <= k.created));
    let mut plan = match active {
        Some(active) => keep_or_rotate(keys, active, rotation, now),
        None => reissue(keys, reported, rotation, now),
    };
    let kept = [
        plan.active.as_ref().map(|k| k.id.as_str()),
        plan.previous.as_ref().map(|p| p.id.as_str()),
    ];
    plan.reactivate = keys
        .iter()
        .filter(|k| !k.active && kept.contains(&Some(k.id.as_str())))
        .map(|k| k.id.clone())
        .collect();
    plan
}

/// The Secret is missing, edited, or names a key AWS no longer has: issue a new key. The key
/// running pods most likely still use (`last_active`, the one status last reported, else the
/// newest) keeps working through the grace period; any other key goes first, so at most two
/// exist.
fn reissue(
    keys: &[AccessKey],
    last_active: Option<AccessKey>,
    rotation: RotationPolicy,
    now: jiff::Timestamp,
) -> KeyPlan {
    let keep = (rotation.grace > Duration::ZERO)
        .then(|| last_active.or_else(|| keys.last().cloned()))
        .flatten();
    KeyPlan {
        delete: keys
            .iter()
            .filter(|k| Some(&k.id) != keep.as_ref().map(|k| &k.id))
            .map(|k| k.id.clone())
            .collect(),
        create: true,
        active: None,
        previous: keep.map(|k| PreviousKey {
            id: k.id,
            since: now,
        }),
        wake_at: (rotation.grace > Duration::ZERO).then(|| add(now, rotation.grace)),
        reactivate: Vec::new(),
    }
}

/// The Secret's key is in AWS: keep it (and its predecessor through the grace period), or
/// rotate it once its interval has passed. Its predecessor is the newest key older than it, kept
/// until it is `grace` old: both from AWS's CreateDates, nothing from the Secret. A key newer
/// than it was created by a pass that died before writing the Secret, and goes.
fn keep_or_rotate(
    keys: &[AccessKey],
    active: AccessKey,
    rotation: RotationPolicy,
    now: jiff::Timestamp,
) -> KeyPlan {
    let since = active.created;
    let previous = keys
        .iter()
        .filter(|k| k.id != active.id && k.created <= since)
        .max_by_key(|k| k.created)
        .filter(|_| add(since, rotation.grace) > now)
        .map(|k| PreviousKey {
            id: k.id.clone(),
            since,
        });
    let delete = keys
        .iter()
        .filter(|k| k.id != active.id && Some(&k.id) != previous.as_ref().map(|p| &p.id))
        .map(|k| k.id.clone())
        .collect();
    let rotate_at = rotation.interval.map(|i| add(active.created, i));
    let grace_ends = previous.as_ref().map(|p| add(p.since, rotation.grace));
    // Never rotate while the previous key is still in its grace period: that would need a third key.
    if rotate_at.is_some_and(|t| t <= now) && previous.is_none() {
        return KeyPlan {
            delete,
            create: true,
            active: None,
            previous: (rotation.grace > Duration::ZERO).then(|| PreviousKey {
                id: active.id.clone(),
                since: now,
            }),
            wake_at: Some(add(
                now,
                rotation
                    .grace
                    .min(rotation.interval.unwrap_or(Duration::MAX)),
            )),
            reactivate: Vec::new(),
        };
    }
    // While a predecessor is kept nothing rotates, so the next change is its grace ending (a
    // rotation already due waits for it rather than wake the pass again and again).
    let wake_at = grace_ends.or(rotate_at);
    KeyPlan {
        delete,
        create: false,
        active: Some(active),
        previous,
        wake_at,
        reactivate: Vec::new(),
    }
}

/// What the Secret holding `data` vouches for: only its key pair (see [`SecretCreds`]), under
/// whatever names it holds them: a changed key map renames the keys of a Secret that still
/// hands out the same pair, which needs no new key.
pub fn secret_creds(secret: &Secret) -> Option<SecretCreds> {
    let ann = secret.metadata.annotations.as_ref()?;
    let data = secret.data.as_ref()?;
    let key_id = ann.get(ANN_KEY_ID)?.clone();
    let id_in_data = data.values().any(|v| v.0 == key_id.as_bytes());
    let hash = ann.get(ANN_KEY_HASH);
    let secret_key = (data.iter())
        .find(|(_, v)| Some(&sha256_hex(&v.0)) == hash)
        .map(|(k, _)| k.clone());
    Some(SecretCreds {
        key_id,
        intact: id_in_data && secret_key.is_some(),
        secret_key,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use k8s_openapi::ByteString;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn t(s: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_800_000_000 + s).unwrap()
    }
    fn key(id: &str, created: i64) -> AccessKey {
        AccessKey {
            id: id.into(),
            created: t(created),
            active: true,
        }
    }
    fn creds(id: &str) -> SecretCreds {
        SecretCreds {
            key_id: id.into(),
            intact: true,
            secret_key: Some("AWS_SECRET_ACCESS_KEY".into()),
        }
    }
    const NO_ROTATION: RotationPolicy = RotationPolicy {
        interval: None,
        grace: Duration::ZERO,
    };
    const ROTATION: RotationPolicy = RotationPolicy {
        interval: Some(Duration::from_secs(100)),
        grace: Duration::from_secs(10),
    };

    /// The plan for a user with key A, which the Secret vouches for.
    fn one_key_in_steady_state(policy: RotationPolicy, now: jiff::Timestamp) -> KeyPlan {
        plan_keys(&[key("A", 0)], Some(&creds("A")), Some("A"), policy, now)
    }

    #[test]
    fn first_pass_creates_one_key() {
        let p = plan_keys(&[], None, None, NO_ROTATION, t(0));
        assert!(p.create && p.delete.is_empty() && p.previous.is_none());
    }

    #[test]
    fn steady_state_keeps_the_key() {
        let p = one_key_in_steady_state(ROTATION, t(50));
        assert_eq!(
            p,
            KeyPlan {
                delete: vec![],
                create: false,
                active: Some(key("A", 0)),
                previous: None,
                wake_at: Some(t(100)),
                reactivate: vec![],
            }
        );
    }

    #[test]
    fn rotation_creates_a_key_and_keeps_the_old_one_for_the_grace_period() {
        let p = one_key_in_steady_state(ROTATION, t(100));
        assert!(p.create && p.delete.is_empty());
        assert_eq!(
            p.previous,
            Some(PreviousKey {
                id: "A".into(),
                since: t(100)
            })
        );
    }

    #[test]
    fn previous_key_survives_the_grace_period_then_goes() {
        let keys = [key("A", 0), key("B", 100)];
        let s = creds("B");
        let during = plan_keys(&keys, Some(&s), Some("B"), ROTATION, t(105));
        assert!(during.delete.is_empty() && !during.create);
        assert_eq!(during.wake_at, Some(t(110)));
        let after = plan_keys(&keys, Some(&s), Some("B"), ROTATION, t(111));
        assert_eq!(after.delete, vec!["A".to_string()]);
        assert!(!after.create);
    }

    #[test]
    fn crash_after_creating_a_key_deletes_the_orphan_before_creating_again() {
        // Rotation created C but died before writing the Secret, which still vouches for A.
        let keys = [key("A", 0), key("C", 100)];
        let p = plan_keys(&keys, Some(&creds("A")), Some("A"), ROTATION, t(101));
        assert_eq!(p.delete, vec!["C".to_string()]);
        assert!(p.create);
        assert!(keys.len() - p.delete.len() + usize::from(p.create) <= 2);
    }

    #[test]
    fn no_rotation_while_a_previous_key_is_in_grace() {
        let keys = [key("A", 0), key("B", 5)];
        // B is already past its interval, but A is still in its grace period.
        let policy = RotationPolicy {
            interval: Some(Duration::from_secs(1)),
            grace: Duration::from_secs(10),
        };
        let p = plan_keys(&keys, Some(&creds("B")), Some("B"), policy, t(8));
        assert!(!p.create && p.delete.is_empty());
    }

    #[test]
    fn deleted_or_edited_secret_issues_a_new_key_keeping_the_last_active_through_grace() {
        let keys = [key("A", 0), key("B", 50)];
        for s in [
            None,
            Some(SecretCreds {
                intact: false,
                ..creds("B")
            }),
        ] {
            let p = plan_keys(&keys, s.as_ref(), Some("B"), ROTATION, t(60));
            assert!(p.create);
            assert_eq!(p.delete, vec!["A".to_string()]);
            assert_eq!(
                p.previous,
                Some(PreviousKey {
                    id: "B".into(),
                    since: t(60)
                })
            );
        }
        // Without a grace period every old key goes at once.
        let p = plan_keys(&keys, None, Some("B"), NO_ROTATION, t(60));
        assert_eq!(p.delete, vec!["A".to_string(), "B".to_string()]);
    }

    #[test]
    fn never_more_than_two_keys_in_any_state() {
        let all = [key("A", 0), key("B", 10)];
        for n in 0..=2 {
            let keys = &all[..n];
            for secret in [None, Some(creds("A")), Some(creds("B")), Some(creds("X"))] {
                for now in [5, 50, 105, 200] {
                    for policy in [NO_ROTATION, ROTATION] {
                        let p = plan_keys(keys, secret.as_ref(), Some("A"), policy, t(now));
                        let after = keys.len() - p.delete.len() + usize::from(p.create);
                        assert!(after <= 2, "{keys:?} {secret:?} {now}: {p:?}");
                        assert!(p.create || p.active.is_some());
                    }
                }
            }
        }
    }

    #[test]
    fn a_restored_grant_reactivates_only_the_keys_it_keeps() {
        let inactive = |id, c| AccessKey {
            active: false,
            ..key(id, c)
        };
        // The Secret's key was deactivated when the grant was revoked: it comes back.
        let p = plan_keys(
            &[inactive("A", 0)],
            Some(&creds("A")),
            Some("A"),
            NO_ROTATION,
            t(5),
        );
        assert_eq!(p.reactivate, vec!["A".to_string()]);
        assert!(!p.create && p.delete.is_empty());
        // A key the Secret does not vouch for is deleted, never reactivated.
        let p = plan_keys(
            &[inactive("A", 0), inactive("B", 1)],
            Some(&creds("B")),
            Some("B"),
            NO_ROTATION,
            t(5),
        );
        assert_eq!(p.reactivate, vec!["B".to_string()]);
        assert_eq!(p.delete, vec!["A".to_string()]);
    }

    #[test]
    fn secret_creds_detect_edits() {
        let mut s = Secret {
            metadata: ObjectMeta {
                annotations: Some(BTreeMap::from([
                    (ANN_KEY_ID.to_string(), "A".to_string()),
                    (ANN_KEY_HASH.to_string(), sha256_hex(b"secret")),
                ])),
                ..Default::default()
            },
            data: Some(BTreeMap::from([
                ("AWS_ACCESS_KEY_ID".to_string(), ByteString(b"A".to_vec())),
                (
                    "AWS_SECRET_ACCESS_KEY".to_string(),
                    ByteString(b"secret".to_vec()),
                ),
            ])),
            ..Default::default()
        };
        assert!(secret_creds(&s).unwrap().intact);
        // Renamed by a key map, the pair is still the one written.
        let data = s.data.as_mut().unwrap();
        let secret = data.remove("AWS_SECRET_ACCESS_KEY").unwrap();
        data.insert("COSI_S3_ACCESS_SECRET_KEY".into(), secret);
        let renamed = secret_creds(&s).unwrap();
        assert!(renamed.intact);
        assert_eq!(
            renamed.secret_key.as_deref(),
            Some("COSI_S3_ACCESS_SECRET_KEY")
        );
        s.data.as_mut().unwrap().insert(
            "COSI_S3_ACCESS_SECRET_KEY".into(),
            ByteString(b"edited".to_vec()),
        );
        assert!(!secret_creds(&s).unwrap().intact);
        // The id alone, under any name, vouches for nothing.
        let data = s.data.as_mut().unwrap();
        data.insert(
            "AWS_SECRET_ACCESS_KEY".into(),
            ByteString(b"secret".to_vec()),
        );
        data.remove("AWS_ACCESS_KEY_ID");
        assert!(!secret_creds(&s).unwrap().intact);
    }
}
