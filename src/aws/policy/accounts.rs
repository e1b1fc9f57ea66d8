//! What each side of "many AWS accounts" needs: the trust policy of the role the operator
//! assumes in a target account, and the statement letting the operator assume such roles. The
//! role's permission policy and the boundary there are the operator's own (`operator_policy`,
//! `boundary_policy`) with [`Scope::account`](super::Scope) set to the target account.

use serde_json::{Value, json};

use super::VERSION;
use crate::aws::SESSION_TAG;

/// What `s3-operator iam-policy --trust` writes for an ExternalId not given: replace it (for
/// example with `envsubst`) by the value of the AWSAccount's Secret before creating the role.
pub const EXTERNAL_ID_PLACEHOLDER: &str = "${EXTERNAL_ID}";

/// The trust policy of the role the operator assumes in a target account: only `principal`
/// (the operator's own IAM role or user, never its whole account), only with `external_id`,
/// and only as the installation `cluster`: the session must carry the tag
/// [`SESSION_TAG`]` = cluster` and no other tag.
pub fn trust_policy(principal: &str, external_id: &str, cluster: &str) -> Value {
    let tag = format!("aws:RequestTag/{SESSION_TAG}");
    json!({
        "Version": VERSION,
        "Statement": [
            {
                "Sid": "S3OperatorAssumesWithExternalId",
                "Effect": "Allow",
                "Principal": {"AWS": principal},
                "Action": "sts:AssumeRole",
                "Condition": {"StringEquals": {"sts:ExternalId": external_id, &tag: cluster}},
            },
            {
                "Sid": "S3OperatorTagsItsInstallationOnly",
                "Effect": "Allow",
                "Principal": {"AWS": principal},
                "Action": "sts:TagSession",
                "Condition": {
                    "StringEquals": {"sts:ExternalId": external_id, &tag: cluster},
                    "ForAllValues:StringEquals": {"aws:TagKeys": [SESSION_TAG]},
                },
            },
        ],
    })
}

/// `doc` (the operator's own policy) with assuming exactly `roles` (the AWSAccounts'
/// `spec.roleArn`), with the session tag the operator passes; unchanged for no role.
pub fn with_assume_roles(mut doc: Value, roles: &[String]) -> Value {
    if let (false, Some(statements)) = (roles.is_empty(), doc["Statement"].as_array_mut()) {
        statements.push(json!({
            "Sid": "AssumeAccountRoles",
            "Effect": "Allow",
            "Action": ["sts:AssumeRole", "sts:TagSession"],
            "Resource": roles,
        }));
    }
    doc
}

/// An AWS account id: exactly 12 digits.
pub fn check_account_id(id: &str) -> Result<(), String> {
    if id.len() == 12 && id.bytes().all(|b| b.is_ascii_digit()) {
        Ok(())
    } else {
        Err("must be an AWS account id: exactly 12 digits".into())
    }
}

/// What an IAM user or role ARN names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IamArn {
    pub partition: String,
    pub account: String,
    /// `user` or `role`.
    pub kind: String,
    /// Its name, without the path.
    pub name: String,
}

/// The operator's principal as a trust policy names it: the ARN of an IAM role or user
/// (`arn:aws:iam::<account>:role/<path/>name`), not of a role's session, nor an account.
pub fn operator_principal(arn: &str) -> Result<IamArn, String> {
    iam_arn(arn, &["role", "user"])
}

/// A role the operator assumes (an AWSAccount's `spec.roleArn`): an IAM role ARN, no wildcard.
pub fn account_role(arn: &str) -> Result<IamArn, String> {
    iam_arn(arn, &["role"])
}

fn iam_arn(arn: &str, kinds: &[&str]) -> Result<IamArn, String> {
    let wanted = kinds.join(" or ");
    let example = format!("arn:aws:iam::123456789012:{}/<path/>name", kinds[0]);
    let parts: Vec<&str> = arn.splitn(6, ':').collect();
    let [prefix, partition, service, region, account, resource] = parts[..] else {
        return Err(format!("not an ARN (want an IAM {wanted} ARN: {example})"));
    };
    if prefix != "arn" || partition.is_empty() || account.is_empty() {
        return Err(format!("not an ARN (want an IAM {wanted} ARN: {example})"));
    }
    let segments: Vec<&str> = resource.split('/').collect();
    if service == "sts" && segments.first() == Some(&"assumed-role") {
        let role = segments.get(1).unwrap_or(&"<role>");
        return Err(format!(
            "a session of the role {role} (what `aws sts get-caller-identity` answers), \
             which a trust policy cannot name: pass the role's own ARN, \
             arn:{partition}:iam::{account}:role/<path/>{role} (`aws iam get-role --role-name {role} --query Role.Arn`)"
        ));
    }
    if service == "iam" && resource == "root" {
        return Err(format!(
            "the whole account {account}, which would let every principal there \
             allowed sts:AssumeRole assume the role: pass the IAM {wanted} ARN instead ({example})"
        ));
    }
    if service != "iam" || !region.is_empty() {
        return Err(format!("not an IAM {wanted} ARN ({example})"));
    }
    check_account_id(account).map_err(|e| format!("its account {e}"))?;
    let (kind, name) = match segments[..] {
        [kind, .., name] if kinds.contains(&kind) && !name.is_empty() => (kind, name),
        _ => return Err(format!("not an IAM {wanted} ARN ({example})")),
    };
    if resource.contains(['*', '?']) {
        return Err(format!("a wildcard: name exactly one {wanted}"));
    }
    Ok(IamArn {
        partition: partition.into(),
        account: account.into(),
        kind: kind.into(),
        name: name.into(),
    })
}

/// An ExternalId as STS takes it: 2 to 1224 characters of letters, digits and `+=,.@:/-_`.
pub fn check_external_id(id: &str) -> Result<(), String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || "+=,.@:/-_".contains(c);
    if (2..=1224).contains(&id.len()) && id.chars().all(allowed) {
        Ok(())
    } else {
        Err(
            "must be 2 to 1224 characters of letters, digits and +=,.@:/-_ (as STS takes it)"
                .into(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aws::policy::testing::*;
    use crate::aws::policy::*;

    const OPERATOR: &str = "arn:aws:iam::111111111111:role/platform/s3-operator";
    const TARGET: &str = "222222222222";

    fn target_scope() -> Scope {
        Scope {
            partition: "aws".into(),
            account: TARGET.into(),
            bucket_prefix: "s3op-prod-".into(),
            iam_path: "/s3-operator/prod/".into(),
        }
    }

    /// Every statement names the operator's principal and nothing else (no account root, no
    /// `*`), allows only AssumeRole and TagSession, and holds only with the ExternalId and the
    /// installation's session tag.
    #[test]
    fn trust_names_only_the_principal_with_the_external_id() {
        let doc = trust_policy(OPERATOR, "ext-1", "prod");
        let statements = doc["Statement"].as_array().unwrap();
        assert_eq!(statements.len(), 2);
        for s in statements {
            assert_eq!(s["Effect"], "Allow");
            assert_eq!(s["Principal"], json!({"AWS": OPERATOR}), "{}", s["Sid"]);
            let condition = &s["Condition"]["StringEquals"];
            assert_eq!(condition["sts:ExternalId"], "ext-1", "{}", s["Sid"]);
            assert_eq!(condition["aws:RequestTag/s3-operator-cluster"], "prod");
        }
        let actions: Vec<&str> = statements
            .iter()
            .map(|s| s["Action"].as_str().unwrap())
            .collect();
        assert_eq!(actions, ["sts:AssumeRole", "sts:TagSession"]);
        // The session may carry the installation's tag and no other.
        assert_eq!(
            statements[1]["Condition"]["ForAllValues:StringEquals"]["aws:TagKeys"],
            json!([SESSION_TAG])
        );
        assert!(!doc.to_string().contains(":root"));
        // Without a value: the placeholder, kept verbatim.
        let placeholder = trust_policy(OPERATOR, EXTERNAL_ID_PLACEHOLDER, "prod");
        assert_eq!(
            placeholder["Statement"][0]["Condition"]["StringEquals"]["sts:ExternalId"],
            "${EXTERNAL_ID}"
        );
    }

    /// The target role's policy and boundary name the target account in every IAM and KMS ARN,
    /// and hold S3 statements to it: nothing of the operator's own account.
    #[test]
    fn the_target_policy_names_only_the_target_account() {
        for doc in [
            operator_policy(&target_scope()),
            boundary_policy(&target_scope()),
        ] {
            for s in doc["Statement"].as_array().unwrap() {
                let resources: Vec<&str> = match &s["Resource"] {
                    Value::String(r) => vec![r.as_str()],
                    Value::Array(a) => a.iter().map(|r| r.as_str().unwrap()).collect(),
                    other => panic!("{other}"),
                };
                for r in resources {
                    let fields: Vec<&str> = r.split(':').collect();
                    match fields.get(2) {
                        Some(&"s3") => assert_eq!(
                            s["Condition"]["StringEqualsIfExists"]["aws:ResourceAccount"], TARGET,
                            "{} {r}",
                            s["Sid"]
                        ),
                        Some(_) => assert_eq!(fields[4], TARGET, "{} {r}", s["Sid"]),
                        None => assert_eq!(r, "*", "{}", s["Sid"]),
                    }
                }
            }
            assert!(!doc.to_string().contains("111111111111"));
        }
        let create = operator_policy(&target_scope())["Statement"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["Sid"] == "CreateAndChangeOnlyWithBoundary")
            .unwrap()
            .clone();
        assert_eq!(
            create["Condition"]["StringEquals"]["iam:PermissionsBoundary"],
            "arn:aws:iam::222222222222:policy/s3-operator/prod/s3-operator-boundary"
        );
    }

    /// One statement, AssumeRole and TagSession on exactly the roles given; none for none.
    #[test]
    fn the_assume_statement_lists_exactly_the_roles() {
        let base = operator_policy(&target_scope());
        assert_eq!(with_assume_roles(base.clone(), &[]), base);
        let roles = vec![
            "arn:aws:iam::222222222222:role/s3-operator".to_string(),
            "arn:aws:iam::333333333333:role/team/s3-operator".to_string(),
        ];
        let doc = with_assume_roles(base.clone(), &roles);
        let statements = doc["Statement"].as_array().unwrap();
        let n = base["Statement"].as_array().unwrap().len();
        assert_eq!(statements.len(), n + 1);
        assert_eq!(statements[..n], base["Statement"].as_array().unwrap()[..]);
        let added = &statements[n];
        assert_eq!(added["Effect"], "Allow");
        assert_eq!(actions_of(added), ["sts:AssumeRole", "sts:TagSession"]);
        assert_eq!(added["Resource"], json!(roles));
        // Nothing else in the policy reaches STS.
        let sts: Vec<String> = doc_actions(&doc)
            .into_iter()
            .filter(|a| a.starts_with("sts:"))
            .collect();
        assert_eq!(sts, ["sts:AssumeRole", "sts:TagSession"]);
    }

    #[test]
    fn account_ids_are_twelve_digits() {
        assert!(check_account_id("123456789012").is_ok());
        for bad in [
            "12345678901",
            "1234567890123",
            "12345678901a",
            "",
            "-23456789012",
        ] {
            assert!(check_account_id(bad).is_err(), "{bad}");
        }
    }

    /// A role or user by ARN is a principal; a session, the account root, another service or
    /// a wildcard is refused with what to pass instead.
    #[test]
    fn the_principal_is_a_role_or_user_arn() {
        assert_eq!(
            operator_principal(OPERATOR).unwrap(),
            IamArn {
                partition: "aws".into(),
                account: "111111111111".into(),
                kind: "role".into(),
                name: "s3-operator".into(),
            }
        );
        let user = operator_principal("arn:aws-cn:iam::111111111111:user/op").unwrap();
        assert_eq!(
            (user.partition.as_str(), user.kind.as_str()),
            ("aws-cn", "user")
        );
        let session =
            operator_principal("arn:aws:sts::111111111111:assumed-role/op/i-0abc").unwrap_err();
        assert!(
            session.contains("session of the role op")
                && session.contains("arn:aws:iam::111111111111:role/<path/>op"),
            "{session}"
        );
        let root = operator_principal("arn:aws:iam::111111111111:root").unwrap_err();
        assert!(root.contains("whole account"), "{root}");
        for bad in [
            "s3-operator",
            "arn:aws:iam::111111111111:group/ops",
            "arn:aws:iam::1111:role/op",
            "arn:aws:iam:eu-west-1:111111111111:role/op",
            "arn:aws:iam::111111111111:role/",
            "arn:aws:iam::111111111111:role/s3-*",
            "arn:aws:s3:::bucket",
        ] {
            assert!(operator_principal(bad).is_err(), "{bad}");
        }
        assert!(account_role("arn:aws:iam::111111111111:user/op").is_err());
        assert!(account_role("arn:aws:iam::222222222222:role/x/s3-operator").is_ok());
    }

    #[test]
    fn external_ids_are_what_sts_takes() {
        assert!(check_external_id("e2e-external-id-7f3a").is_ok());
        assert!(check_external_id("a+b=c,d.e@f:g/h_i").is_ok());
        for bad in ["x", "with space", "${EXTERNAL_ID}", &"x".repeat(1225)] {
            assert!(check_external_id(bad).is_err(), "{bad}");
        }
    }
}
