//! Where one installation may act: its own policy, and the permissions boundary of every
//! identity it creates.

use serde_json::{Value, json};

use super::{VERSION, grant::app_actions};

/// Where one operator installation may act: its account, partition, bucket-name prefix and IAM
/// path. Every ARN in the operator's policy and in the permissions boundary comes from here, so
/// two installations in one account (different clusters) cannot reach each other's resources.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scope {
    pub partition: String,
    pub account: String,
    pub bucket_prefix: String,
    pub iam_path: String,
}

/// Name of the managed policy every user and role the operator creates carries as its
/// permissions boundary (under the installation's IAM path).
pub const BOUNDARY_NAME: &str = "s3-operator-boundary";

impl Scope {
    /// The ARN of the permissions boundary policy.
    pub fn boundary_arn(&self) -> String {
        format!(
            "arn:{}:iam::{}:policy{}{BOUNDARY_NAME}",
            self.partition, self.account, self.iam_path
        )
    }

    fn iam_arn(&self, kind: &str) -> String {
        format!(
            "arn:{}:iam::{}:{kind}{}*",
            self.partition, self.account, self.iam_path
        )
    }

    /// The condition that keeps an S3 statement in this account. A bucket ARN names no account,
    /// so `s3op-prod-*` would otherwise also match a bucket of that name in any other account
    /// (whose owner's bucket policy may grant us, or an application, anything). IAM, KMS, EKS
    /// and SQS ARNs name the account already, and `s3:ListAllMyBuckets` lists only the
    /// caller's own buckets: only S3 statements on buckets and objects carry it. `IfExists`:
    /// AWS documents the key for "most" actions without listing the exceptions; a request
    /// without it (CreateBucket acts on no existing resource) is still held by the
    /// `x-amz-expected-bucket-owner` header the operator sends on every other S3 call.
    pub(super) fn in_account(&self) -> Value {
        json!({"StringEqualsIfExists": {"aws:ResourceAccount": self.account}})
    }
}

/// The permissions boundary of every user and role the operator creates: at most the S3 actions
/// an access policy can grant, on the installation's buckets only, plus the KMS use S3 makes on
/// their behalf for SSE-KMS buckets. Whatever inline policy ends up on such an identity (even
/// one written by someone who controls the operator), it can never do more than this.
pub fn boundary_policy(scope: &Scope) -> Value {
    let (objects, buckets) = app_actions();
    let p = &scope.partition;
    let replication = super::replication::boundary_statements(scope);
    json!({
        "Version": VERSION,
        "Statement": [
            {
                "Sid": "OperatorBuckets",
                "Effect": "Allow",
                "Action": buckets,
                "Resource": format!("arn:{p}:s3:::{}*", scope.bucket_prefix),
                "Condition": scope.in_account(),
            },
            {
                "Sid": "OperatorObjects",
                "Effect": "Allow",
                "Action": objects,
                "Resource": format!("arn:{p}:s3:::{}*/*", scope.bucket_prefix),
                "Condition": scope.in_account(),
            },
            {
                "Sid": "KmsThroughS3",
                "Effect": "Allow",
                // Encrypt: S3 re-encrypting replicas with their key (spec.replication).
                "Action": ["kms:Decrypt", "kms:GenerateDataKey", "kms:Encrypt"],
                "Resource": format!("arn:{p}:kms:*:{}:key/*", scope.account),
                "Condition": {"StringLike": {"kms:ViaService": "s3.*.amazonaws.com"}},
            },
            replication[0],
            replication[1],
        ],
    })
}

/// The operator's own policy: everything it calls, scoped to its account, bucket-name prefix
/// and IAM path. It may create and change users and roles only with the installation's
/// permissions boundary, and never remove or replace that boundary, so whoever controls the
/// operator's credentials cannot mint an identity that does more than the boundary allows.
pub fn operator_policy(scope: &Scope) -> Value {
    let p = &scope.partition;
    let buckets = format!("arn:{p}:s3:::{}*", scope.bucket_prefix);
    let objects = format!("arn:{p}:s3:::{}*/*", scope.bucket_prefix);
    let (users, roles) = (scope.iam_arn("user"), scope.iam_arn("role"));
    let boundary = scope.boundary_arn();
    json!({
        "Version": VERSION,
        "Statement": [
            {
                "Sid": "ManageBuckets",
                "Effect": "Allow",
                "Action": [
                    "s3:CreateBucket", "s3:DeleteBucket", "s3:ListBucket", "s3:ListBucketVersions",
                    "s3:GetBucketLocation", "s3:GetBucketTagging", "s3:PutBucketTagging",
                    "s3:TagResource",
                    // Read only when a tag write is refused: whether the bucket's ABAC is why.
                    "s3:GetBucketABAC",
                    "s3:GetBucketVersioning", "s3:PutBucketVersioning",
                    "s3:GetEncryptionConfiguration", "s3:PutEncryptionConfiguration",
                    "s3:GetBucketPublicAccessBlock", "s3:PutBucketPublicAccessBlock",
                    "s3:GetLifecycleConfiguration", "s3:PutLifecycleConfiguration",
                    "s3:GetBucketCORS", "s3:PutBucketCORS",
                    // CreateBucket with an ObjectOwnership needs the Put as well.
                    "s3:GetBucketOwnershipControls", "s3:PutBucketOwnershipControls",
                    "s3:GetBucketPolicy", "s3:PutBucketPolicy",
                    // CreateBucket with ObjectLockEnabledForBucket needs the Put (and
                    // s3:PutBucketVersioning) as well.
                    "s3:GetBucketObjectLockConfiguration", "s3:PutBucketObjectLockConfiguration",
                    "s3:GetIntelligentTieringConfiguration", "s3:PutIntelligentTieringConfiguration",
                    "s3:GetAccelerateConfiguration", "s3:PutAccelerateConfiguration",
                    // Get/PutBucketNotificationConfiguration (spec.notifications).
                    "s3:GetBucketNotification", "s3:PutBucketNotification",
                    // spec.logging: read only when set.
                    "s3:GetBucketLogging", "s3:PutBucketLogging",
                    // spec.replication: read only when set (DeleteBucketReplication is the Put).
                    "s3:GetReplicationConfiguration", "s3:PutReplicationConfiguration",
                ],
                "Resource": buckets,
                "Condition": scope.in_account(),
            },
            {
                "Sid": "EmptyBucketsOnForceDelete",
                "Effect": "Allow",
                "Action": ["s3:DeleteObject", "s3:DeleteObjectVersion"],
                "Resource": objects,
                "Condition": scope.in_account(),
            },
            {
                // A denied read of a bucket during deletion is checked against the account's
                // bucket list: only a bucket that is not there may be treated as gone.
                "Sid": "ConfirmBucketsGone",
                "Effect": "Allow",
                "Action": ["s3:ListAllMyBuckets"],
                "Resource": "*",
            },
            {
                // IAM authorizes a read of a missing user or role against an ARN without its
                // path; reading any name makes "does not exist" an answer, never a denial, so a
                // denial can fail closed.
                "Sid": "ReadIdentities",
                "Effect": "Allow",
                "Action": ["iam:GetUser", "iam:GetRole"],
                "Resource": [
                    format!("arn:{p}:iam::{}:user/*", scope.account),
                    format!("arn:{p}:iam::{}:role/*", scope.account),
                ],
            },
            {
                // The orphan sweep lists the installation's IAM path (PathPrefix; IAM's list
                // actions take no resource) and reads the tags of names no live object resolves to.
                "Sid": "ListIdentitiesForOrphanSweep",
                "Effect": "Allow",
                "Action": ["iam:ListUsers", "iam:ListRoles"],
                "Resource": "*",
            },
            {
                "Sid": "ReadBoundary",
                "Effect": "Allow",
                "Action": ["iam:GetPolicy"],
                "Resource": boundary,
            },
            {
                "Sid": "CreateAndChangeOnlyWithBoundary",
                "Effect": "Allow",
                "Action": [
                    "iam:CreateUser", "iam:PutUserPolicy", "iam:DeleteUserPolicy",
                    "iam:PutUserPermissionsBoundary",
                    "iam:CreateRole", "iam:PutRolePolicy", "iam:DeleteRolePolicy",
                    "iam:PutRolePermissionsBoundary",
                ],
                "Resource": [users, roles],
                "Condition": {"StringEquals": {"iam:PermissionsBoundary": boundary}},
            },
            {
                "Sid": "ManageAppUsers",
                "Effect": "Allow",
                "Action": [
                    "iam:DeleteUser", "iam:TagUser",
                    "iam:GetUserPolicy", "iam:ListUserPolicies",
                    "iam:CreateAccessKey", "iam:UpdateAccessKey", "iam:DeleteAccessKey",
                    "iam:ListAccessKeys", "iam:ListUserTags",
                ],
                "Resource": users,
            },
            {
                "Sid": "ManageAppRoles",
                "Effect": "Allow",
                "Action": [
                    "iam:DeleteRole", "iam:TagRole", "iam:UpdateAssumeRolePolicy",
                    "iam:GetRolePolicy", "iam:ListRolePolicies", "iam:ListRoleTags",
                ],
                "Resource": roles,
            },
            {
                // PutBucketReplication passes the Bucket's replication role to S3, and only to S3.
                "Sid": "PassReplicationRoles",
                "Effect": "Allow",
                "Action": ["iam:PassRole"],
                "Resource": roles,
                "Condition": {"StringEquals": {"iam:PassedToService": super::S3_SERVICE}},
            },
            {
                "Sid": "KeepTheBoundary",
                "Effect": "Deny",
                "Action": [
                    "iam:DeleteUserPermissionsBoundary", "iam:DeleteRolePermissionsBoundary",
                    "iam:AttachUserPolicy", "iam:AttachRolePolicy",
                    "iam:CreatePolicyVersion", "iam:DeletePolicy", "iam:DeletePolicyVersion",
                    "iam:SetDefaultPolicyVersion",
                ],
                "Resource": "*",
            },
        ],
    })
}

/// `policy` with the drift-event queue's read and delete, when there is one: nothing else of
/// SQS, and only on that queue.
pub fn with_drift_queue(mut policy: Value, queue_arn: Option<&str>) -> Value {
    if let (Some(arn), Some(statements)) = (queue_arn, policy["Statement"].as_array_mut()) {
        statements.push(json!({
            "Sid": "ReadDriftEvents",
            "Effect": "Allow",
            "Action": ["sqs:ReceiveMessage", "sqs:DeleteMessage"],
            "Resource": arn,
        }));
    }
    policy
}

/// Where an installation that serves `PodIdentity` credentials acts in EKS: one cluster, and
/// the shared role when it uses one (`--pod-identity-role-arn`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodIdentityScope {
    pub cluster: String,
    pub shared_role: Option<String>,
}

/// `doc` (the operator's policy) with what `PodIdentity` credentials need: the association
/// calls on this cluster and its associations only, and passing to EKS only the roles the
/// operator creates (boundary-capped) and the shared role. `iam:PassRole` carries no
/// `iam:PassedToService` condition: the only other service the operator passes roles to is S3
/// (replication), and no role it makes for an access trusts S3.
pub fn with_pod_identity(mut doc: Value, scope: &Scope, eks: &PodIdentityScope) -> Value {
    let (p, account, cluster) = (&scope.partition, &scope.account, &eks.cluster);
    let mut roles = vec![scope.iam_arn("role")];
    roles.extend(eks.shared_role.clone());
    let statements = [
        json!({
            "Sid": "PodIdentityAssociations",
            "Effect": "Allow",
            "Action": [
                "eks:CreatePodIdentityAssociation", "eks:ListPodIdentityAssociations",
                "eks:DescribePodIdentityAssociation", "eks:UpdatePodIdentityAssociation",
                "eks:DeletePodIdentityAssociation",
                // Creating with the ownership tags needs it too.
                "eks:TagResource",
            ],
            "Resource": [
                format!("arn:{p}:eks:*:{account}:cluster/{cluster}"),
                format!("arn:{p}:eks:*:{account}:podidentityassociation/{cluster}/*"),
            ],
        }),
        json!({
            "Sid": "PassRolesToPodIdentity",
            "Effect": "Allow",
            "Action": ["iam:PassRole"],
            "Resource": roles,
        }),
    ];
    if let Some(list) = doc["Statement"].as_array_mut() {
        list.extend(statements);
    }
    doc
}

/// The condition operator and key that exempt the operator from a tenant's `Deny`.
pub const OPERATOR_EXEMPTION: (&str, &str) = ("ArnNotLike", "aws:PrincipalArn");

/// The `aws:PrincipalArn` patterns of the operator's own principal, from its STS caller ARN: a
/// user or role by name under any path (IAM names are unique in an account, and the session ARN
/// of a role names neither its path nor how `aws:PrincipalArn` will spell it). Empty for a caller
/// ARN of another shape, which no tenant Deny is then exempted for.
pub fn operator_principals(caller_arn: &str) -> Vec<String> {
    let parts: Vec<&str> = caller_arn.splitn(6, ':').collect();
    let [_, partition, service, _, account, resource] = parts[..] else {
        return vec![];
    };
    let (kind, name) = match (service, resource.split('/').collect::<Vec<_>>().as_slice()) {
        ("iam", ["user", .., name]) => ("user", *name),
        ("sts", ["assumed-role", role, _session]) => ("role", *role),
        ("iam", ["root"]) => return vec![format!("arn:{partition}:iam::{account}:root")],
        _ => return vec![],
    };
    vec![
        format!("arn:{partition}:iam::{account}:{kind}/{name}"),
        format!("arn:{partition}:iam::{account}:{kind}/*/{name}"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Permission;
    use crate::aws::policy::testing::*;
    use crate::aws::policy::*;
    fn scope() -> Scope {
        Scope {
            partition: "aws".into(),
            account: "123456789012".into(),
            bucket_prefix: "s3op-prod-".into(),
            iam_path: "/s3-operator/prod/".into(),
        }
    }

    /// The shipped policies are exactly what `s3-operator iam-policy` prints for the example.
    #[test]
    fn shipped_policies_match_the_source() {
        let example = Scope {
            bucket_prefix: "s3op-default-".into(),
            iam_path: "/s3-operator/default/".into(),
            ..scope()
        };
        for (file, doc) in [
            ("operator-policy.json", operator_policy(&example)),
            ("boundary-policy.json", boundary_policy(&example)),
        ] {
            let path = format!("{}/config/iam/{file}", env!("CARGO_MANIFEST_DIR"));
            let shipped: Value =
                serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            assert!(
                shipped == doc,
                "config/iam/{file} is stale: regenerate it with `s3-operator iam-policy --account-id 123456789012` (add `--boundary` for the boundary)"
            );
        }
    }

    /// Every resource names this installation's account, prefix or path; the only wildcards
    /// are the bucket list and the reads that make a missing identity answer NoSuchEntity.
    #[test]
    fn operator_policy_is_scoped_to_the_installation() {
        let doc = operator_policy(&scope());
        for s in doc["Statement"].as_array().unwrap() {
            let resources: Vec<&str> = match &s["Resource"] {
                Value::String(r) => vec![r.as_str()],
                Value::Array(a) => a.iter().map(|r| r.as_str().unwrap()).collect(),
                other => panic!("{other}"),
            };
            for r in resources {
                let scoped = r.starts_with("arn:aws:s3:::s3op-prod-")
                    || r.starts_with("arn:aws:iam::123456789012:user/s3-operator/prod/")
                    || r.starts_with("arn:aws:iam::123456789012:role/s3-operator/prod/")
                    || r == "arn:aws:iam::123456789012:policy/s3-operator/prod/s3-operator-boundary";
                let allowed_wildcard = match s["Sid"].as_str().unwrap() {
                    "ConfirmBucketsGone" | "KeepTheBoundary" | "ListIdentitiesForOrphanSweep" => {
                        r == "*"
                    }
                    "ReadIdentities" => r.starts_with("arn:aws:iam::123456789012:"),
                    _ => false,
                };
                assert!(scoped || allowed_wildcard, "{} {r}", s["Sid"]);
            }
        }
    }

    /// Every statement on buckets or objects (a bucket ARN names no account) holds only in the
    /// installation's account, in the operator's policy and in the boundary alike.
    #[test]
    fn bucket_statements_hold_only_in_the_installations_account() {
        for doc in [operator_policy(&scope()), boundary_policy(&scope())] {
            for s in doc["Statement"].as_array().unwrap() {
                let on_buckets = match &s["Resource"] {
                    Value::String(r) => r.starts_with("arn:aws:s3:::"),
                    _ => false,
                };
                let condition = &s["Condition"]["StringEqualsIfExists"]["aws:ResourceAccount"];
                if on_buckets {
                    assert_eq!(condition, "123456789012", "{}", s["Sid"]);
                } else {
                    assert!(condition.is_null(), "{}", s["Sid"]);
                }
            }
        }
    }

    /// Creating or changing an identity needs the boundary, and removing it is denied.
    #[test]
    fn identities_are_created_and_changed_only_with_the_boundary() {
        let doc = operator_policy(&scope());
        let statements = doc["Statement"].as_array().unwrap();
        let conditioned = statements
            .iter()
            .find(|s| s["Sid"] == "CreateAndChangeOnlyWithBoundary")
            .unwrap();
        assert_eq!(
            conditioned["Condition"]["StringEquals"]["iam:PermissionsBoundary"],
            "arn:aws:iam::123456789012:policy/s3-operator/prod/s3-operator-boundary"
        );
        for action in [
            "iam:CreateUser",
            "iam:CreateRole",
            "iam:PutUserPolicy",
            "iam:PutRolePolicy",
        ] {
            let holders: Vec<&str> = statements
                .iter()
                .filter(|s| s["Effect"] == "Allow" && actions_of(s).contains(&action.to_string()))
                .map(|s| s["Sid"].as_str().unwrap())
                .collect();
            assert_eq!(holders, ["CreateAndChangeOnlyWithBoundary"], "{action}");
        }
        let denied = statements.iter().find(|s| s["Effect"] == "Deny").unwrap();
        for action in [
            "iam:DeleteUserPermissionsBoundary",
            "iam:DeleteRolePermissionsBoundary",
            "iam:AttachUserPolicy",
            "iam:CreatePolicyVersion",
        ] {
            assert!(actions_of(denied).contains(&action.to_string()), "{action}");
        }
    }

    /// The boundary covers every action an access policy grants, on the prefix only.
    #[test]
    fn boundary_caps_identities_to_the_installations_buckets() {
        let doc = boundary_policy(&scope());
        let allowed = doc_actions(&doc);
        for p in [
            Permission::ReadOnly,
            Permission::ReadWrite,
            Permission::WriteOnly,
        ] {
            for a in doc_actions(&access_policy("aws", "s3op-prod-b", p, Some("x/"))) {
                assert!(allowed.contains(&a), "{a}");
            }
        }
        assert!(!allowed.iter().any(|a| a.starts_with("iam:") || a == "s3:*"));
        // Applications never reconfigure their bucket: what the operator manages stays its own.
        for a in [
            "s3:PutBucketOwnershipControls",
            "s3:PutBucketNotification",
            "s3:PutBucketAcl",
            "s3:PutObjectAcl",
            "s3:PutBucketPolicy",
            "s3:DeleteBucketPolicy",
            "s3:PutBucketPublicAccessBlock",
            "s3:PutReplicationConfiguration",
        ] {
            assert!(!allowed.contains(&a.to_string()), "{a}");
        }
        // A replication role's policy fits under it, KMS through S3 included.
        let targets = [ReplicaTarget {
            bucket_arn: "arn:aws:s3:::s3op-prod-dr".into(),
            kms_key: Some("arn:aws:kms:us-east-1:123456789012:key/k".into()),
        }];
        let role = replication_policy("arn:aws:s3:::s3op-prod-b", "us-east-1", &targets);
        for a in doc_actions(&role) {
            assert!(allowed.contains(&a), "{a}");
        }
        assert_eq!(doc["Statement"][0]["Resource"], "arn:aws:s3:::s3op-prod-*");
        assert_eq!(
            doc["Statement"][1]["Resource"],
            "arn:aws:s3:::s3op-prod-*/*"
        );
    }

    /// Object lock, intelligent tiering and acceleration: the operator gains exactly their
    /// Get/Put actions, on its prefix only, and never the right to bypass retention; the
    /// identities it creates gain none of them.
    #[test]
    fn protection_actions_are_the_operators_alone() {
        let new = [
            "s3:GetBucketObjectLockConfiguration",
            "s3:PutBucketObjectLockConfiguration",
            "s3:GetIntelligentTieringConfiguration",
            "s3:PutIntelligentTieringConfiguration",
            "s3:GetAccelerateConfiguration",
            "s3:PutAccelerateConfiguration",
        ];
        let doc = operator_policy(&scope());
        let manage = doc["Statement"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["Sid"] == "ManageBuckets")
            .unwrap();
        assert_eq!(manage["Resource"], "arn:aws:s3:::s3op-prod-*");
        let granted = actions_of(manage);
        for a in new {
            assert!(granted.contains(&a.to_string()), "{a}");
        }
        let all = doc_actions(&doc);
        assert!(!all.iter().any(|a| a.contains("Bypass")), "{all:?}");
        let boundary = doc_actions(&boundary_policy(&scope()));
        for a in new.iter().chain(&["s3:BypassGovernanceRetention"]) {
            assert!(!boundary.contains(&a.to_string()), "{a}");
        }
    }

    /// The operator is named by user or role under any path; other caller shapes name nothing.
    #[test]
    fn the_operators_principal_patterns_follow_its_caller_arn() {
        assert_eq!(
            operator_principals("arn:aws:sts::123456789012:assumed-role/op/i-1"),
            [
                "arn:aws:iam::123456789012:role/op",
                "arn:aws:iam::123456789012:role/*/op"
            ]
        );
        for (caller, want) in [
            (
                "arn:aws:iam::123456789012:user/s3-operator/op",
                vec![
                    "arn:aws:iam::123456789012:user/op",
                    "arn:aws:iam::123456789012:user/*/op",
                ],
            ),
            (
                "arn:aws:iam::123456789012:root",
                vec!["arn:aws:iam::123456789012:root"],
            ),
            ("arn:aws:sts::123456789012:federated-user/x", vec![]),
            ("nonsense", vec![]),
        ] {
            assert_eq!(operator_principals(caller), want, "{caller}");
        }
    }

    /// PodIdentity adds only the association calls on one cluster and passing the operator's own
    /// roles (and the shared one); nothing else changes.
    #[test]
    fn pod_identity_adds_only_its_cluster_and_its_roles() {
        let eks = PodIdentityScope {
            cluster: "prod-eks".into(),
            shared_role: Some("arn:aws:iam::123456789012:role/platform/s3-shared".into()),
        };
        let base = operator_policy(&scope());
        let doc = with_pod_identity(base.clone(), &scope(), &eks);
        let statements = doc["Statement"].as_array().unwrap();
        let n = base["Statement"].as_array().unwrap().len();
        assert_eq!(statements[..n], base["Statement"].as_array().unwrap()[..]);
        assert_eq!(
            statements[n]["Resource"],
            json!([
                "arn:aws:eks:*:123456789012:cluster/prod-eks",
                "arn:aws:eks:*:123456789012:podidentityassociation/prod-eks/*"
            ])
        );
        assert!(
            actions_of(&statements[n])
                .iter()
                .all(|a| a.starts_with("eks:"))
        );
        assert_eq!(actions_of(&statements[n + 1]), ["iam:PassRole"]);
        assert_eq!(
            statements[n + 1]["Resource"],
            json!([
                "arn:aws:iam::123456789012:role/s3-operator/prod/*",
                "arn:aws:iam::123456789012:role/platform/s3-shared"
            ])
        );
        let alone = with_pod_identity(
            base,
            &scope(),
            &PodIdentityScope {
                shared_role: None,
                ..eks
            },
        );
        let passed = &alone["Statement"].as_array().unwrap()[n + 1]["Resource"];
        assert_eq!(
            passed,
            &json!(["arn:aws:iam::123456789012:role/s3-operator/prod/*"])
        );
    }
}
