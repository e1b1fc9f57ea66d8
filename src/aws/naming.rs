//! Names the operator derives for AWS resources: stable for an object's life, valid under every
//! AWS rule, and unlikely to collide across clusters and accounts.

use sha2::{Digest, Sha256};

/// SHA-256 of `bytes`, as lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// First `n` hex digits of SHA-256 of `input`.
pub fn short_hash(input: &str, n: usize) -> String {
    sha256_hex(input.as_bytes())[..n].to_string()
}

/// Lowercase letters, digits and single hyphens only.
fn sanitize(input: &str) -> String {
    let mut out = String::with_capacity(input.len());
    for c in input.chars() {
        let c = c.to_ascii_lowercase();
        let c = if c.is_ascii_lowercase() || c.is_ascii_digit() {
            c
        } else {
            '-'
        };
        if !(c == '-' && out.ends_with('-')) {
            out.push(c);
        }
    }
    out
}

/// A generated S3 bucket name: `<prefix><namespace>-<name>-<hash of uid>`, at most 63
/// characters, lowercase letters, digits and hyphens, starting and ending with a letter or digit.
pub fn bucket_name(prefix: &str, namespace: &str, name: &str, uid: &str) -> String {
    let hash = short_hash(uid, 8);
    let mut stem = sanitize(&format!("{prefix}{namespace}-{name}"));
    stem.truncate(63 - hash.len() - 1);
    let stem = stem.trim_matches('-');
    let stem = if stem.is_empty() { "s3op" } else { stem };
    format!("{stem}-{hash}")
}

/// Hex digits of the UID hash in IAM names: 64 bits. The stem (namespace and name, truncated to
/// fit IAM's 64 characters) is shared by every object of that name over time, and by long names
/// that differ only past the cut, so the hash alone tells their identities apart.
const IAM_HASH: usize = 16;
/// The hash length of names made before: an identity created then keeps its name.
const LEGACY_IAM_HASH: usize = 8;

/// An IAM user or role name: `<namespace>-<name>-<hash of uid>`, at most 64 characters (IAM's
/// limit for user and role names alike).
pub fn iam_name(namespace: &str, name: &str, uid: &str) -> String {
    iam_name_hashed(namespace, name, uid, IAM_HASH)
}

/// The name an identity of this object was given before names carried [`IAM_HASH`] digits.
pub fn legacy_iam_name(namespace: &str, name: &str, uid: &str) -> String {
    iam_name_hashed(namespace, name, uid, LEGACY_IAM_HASH)
}

fn iam_name_hashed(namespace: &str, name: &str, uid: &str, digits: usize) -> String {
    let hash = short_hash(uid, digits);
    let mut stem = format!("{namespace}-{name}");
    stem.truncate(64 - hash.len() - 1);
    format!("{stem}-{hash}")
}

/// The IAM path every entity of one operator installation lives under.
pub fn iam_path(cluster: &str) -> String {
    format!("/s3-operator/{cluster}/")
}

/// Why `path` cannot be an AWSAccount's IAM path (`spec.iamPath`'s schema says the same): IAM's
/// path characters between slashes, at most 512, and not the root `/`, which would scope the
/// operator's policy to every identity of the account.
pub fn check_iam_path(path: &str) -> Result<(), String> {
    let segment_ok = |seg: &str| {
        !seg.is_empty()
            && seg
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_+=,.@-".contains(&b))
    };
    let inner = path.strip_prefix('/').and_then(|p| p.strip_suffix('/'));
    let ok = path.len() <= 512 && inner.is_some_and(|i| i.split('/').all(segment_ok));
    ok.then_some(()).ok_or_else(|| {
        format!(
            "IAM path {path:?} must be /segment/.../ (letters, digits and _+=,.@- between slashes, at most 512 characters), not the root /: the operator's policy is scoped to it"
        )
    })
}

/// Why `cluster` cannot name an installation, if it cannot. It goes unchanged into ownership
/// tags, the IAM path and the default bucket prefix, so it must already be in the one form all
/// three accept: two names that differ only where a sanitizer would fold them (`Prod`/`prod`,
/// `prod_eu`/`prod-eu`) would otherwise share one prefix and one IAM path.
pub fn check_cluster_name(cluster: &str) -> Result<(), String> {
    let ok = (1..=32).contains(&cluster.len())
        && cluster
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !cluster.starts_with('-')
        && !cluster.ends_with('-')
        && !cluster.contains("--");
    ok.then_some(()).ok_or_else(|| {
        format!(
            "cluster name {cluster:?} must be 1-32 lowercase letters, digits and single hyphens, starting and ending with a letter or digit (it goes unchanged into ownership tags, the IAM path and the bucket prefix)"
        )
    })
}

/// The bucket-name prefix of an installation: `explicit` (`--bucket-name-prefix`), else
/// `s3op-<cluster>-`. The default is given only to a cluster name without '-': the cluster name
/// then ends at the first '-' after `s3op-`, so no installation's default prefix starts another's
/// (`s3op-a-` would cover `s3op-a-b-`, the default of a cluster `a-b`), and neither can reach the
/// other's buckets. A cluster name with '-' must choose its prefix, which the administrator keeps
/// disjoint from every other installation's.
pub fn bucket_prefix(cluster: &str, explicit: Option<&str>) -> Result<String, String> {
    check_cluster_name(cluster)?;
    if let Some(p) = explicit {
        let ok = (1..=40).contains(&p.len())
            && p.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !p.starts_with('-');
        return ok.then(|| p.to_string()).ok_or_else(|| {
            format!(
                "bucket-name prefix {p:?} must be 1-40 lowercase letters, digits and hyphens, starting with a letter or digit"
            )
        });
    }
    if cluster.contains('-') {
        return Err(format!(
            "cluster name {cluster:?} contains '-', so it has no default bucket-name prefix: s3op-{cluster}- would fall under the prefix of cluster {:?}; set --bucket-name-prefix (an installation that already has buckets keeps s3op-{cluster}-)",
            cluster.split('-').next().unwrap_or_default()
        ));
    }
    Ok(format!("s3op-{cluster}-"))
}

/// The AWS partition of a region (`aws`, `aws-cn`, `aws-us-gov`).
/// The ARN of the EKS cluster `name` in `region` of `account`.
pub fn eks_cluster_arn(region: &str, account: &str, name: &str) -> String {
    format!(
        "arn:{}:eks:{region}:{account}:cluster/{name}",
        partition(region)
    )
}

pub fn partition(region: &str) -> &'static str {
    if region.starts_with("cn-") {
        "aws-cn"
    } else if region.starts_with("us-gov-") {
        "aws-us-gov"
    } else {
        "aws"
    }
}

pub fn bucket_arn(partition: &str, bucket: &str) -> String {
    format!("arn:{partition}:s3:::{bucket}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid_bucket_name(n: &str) -> bool {
        (3..=63).contains(&n.len())
            && n.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && n.chars().next().unwrap().is_ascii_alphanumeric()
            && n.chars().last().unwrap().is_ascii_alphanumeric()
            && !n.starts_with("xn--")
            && !n.starts_with("sthree-")
    }

    #[test]
    fn generated_bucket_names_follow_s3_rules() {
        let long = "a".repeat(253);
        for (ns, name) in [
            ("default", "photos"),
            ("team.a", "x"),
            (long.as_str(), long.as_str()),
            ("NS", "--.--"),
        ] {
            let n = bucket_name("s3op-", ns, name, "0b2f0e7e-uid");
            assert!(valid_bucket_name(&n), "{n}");
        }
    }

    #[test]
    fn generated_bucket_names_are_stable_and_unique_per_uid() {
        let a = bucket_name("s3op-", "default", "photos", "uid-1");
        assert_eq!(a, bucket_name("s3op-", "default", "photos", "uid-1"));
        assert_ne!(a, bucket_name("s3op-", "default", "photos", "uid-2"));
        assert!(a.starts_with("s3op-default-photos-"));
    }

    #[test]
    fn iam_names_fit_64_characters() {
        let long = "b".repeat(253);
        for n in [
            iam_name(&long, &long, "uid"),
            legacy_iam_name(&long, &long, "uid"),
        ] {
            assert_eq!(n.len(), 64, "{n}");
        }
    }

    /// New names carry 16 hex digits of the UID's hash (two objects of one name, or of long
    /// names cut to one stem, collide once in 2^64, not 2^32); the names made before keep 8.
    #[test]
    fn iam_names_carry_a_long_uid_hash_and_the_legacy_name_a_short_one() {
        let n = iam_name("team", "app", "uid-1");
        assert_eq!(n, format!("team-app-{}", short_hash("uid-1", 16)));
        let hash = n.rsplit('-').next().unwrap();
        assert!(
            hash.len() >= 12 && hash.bytes().all(|b| b.is_ascii_hexdigit()),
            "{n}"
        );
        let legacy = legacy_iam_name("team", "app", "uid-1");
        assert_eq!(legacy, format!("team-app-{}", short_hash("uid-1", 8)));
        assert_ne!(n, legacy);
        assert!(
            n.starts_with(&legacy),
            "the legacy hash is the new one's first digits"
        );
        assert_ne!(n, iam_name("team", "app", "uid-2"));
        // Long names that differ only past the cut still differ by their UID.
        let (a, b) = ("x".repeat(60) + "a", "x".repeat(60) + "b");
        assert_ne!(iam_name("ns", &a, "uid-a"), iam_name("ns", &b, "uid-b"));
    }

    #[test]
    fn cluster_names_must_be_in_their_one_form() {
        for ok in ["default", "prod", "prod-eu", "a1-b2-c3", &"c".repeat(32)] {
            assert_eq!(check_cluster_name(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "Prod",
            "prod_eu",
            "-a",
            "a-",
            "a--b",
            "a.b",
            "has/slash",
            &"c".repeat(33),
        ] {
            let why = check_cluster_name(bad).expect_err(bad);
            assert!(
                why.contains("lowercase letters, digits and single hyphens"),
                "{why}"
            );
        }
    }

    #[test]
    fn default_prefixes_are_per_cluster_and_valid_in_bucket_names() {
        assert_eq!(bucket_prefix("default", None).unwrap(), "s3op-default-");
        assert_eq!(
            bucket_prefix("prod-eu", Some("team-x-")).unwrap(),
            "team-x-"
        );
        let why = bucket_prefix("prod-eu", None).unwrap_err();
        assert!(
            why.contains("--bucket-name-prefix") && why.contains("\"prod\""),
            "{why}"
        );
        assert!(bucket_prefix("Prod", Some("x-")).is_err());
        assert!(bucket_prefix("prod", Some("Bad_")).is_err());
        let long = "c".repeat(32);
        let n = bucket_name(&bucket_prefix(&long, None).unwrap(), "ns", "n", "uid");
        assert!(valid_bucket_name(&n) && n.starts_with("s3op-ccc"), "{n}");
    }

    /// No installation's default prefix is a prefix of another's, nor of any name another
    /// generates: the operator policy of one (`arn:aws:s3:::<prefix>*`) reaches no bucket of the
    /// other.
    #[test]
    fn default_prefixes_of_distinct_clusters_are_disjoint() {
        let clusters = [
            "a", "ab", "a1", "b", "default", "defaults", "prod", "prod2", "x9",
        ];
        for a in clusters {
            let pa = bucket_prefix(a, None).unwrap();
            let policy = crate::aws::policy::operator_policy(&crate::aws::policy::Scope {
                partition: "aws".into(),
                account: "123456789012".into(),
                bucket_prefix: pa.clone(),
                iam_path: iam_path(a),
            });
            let buckets = policy["Statement"][0]["Resource"]
                .as_str()
                .unwrap()
                .to_string();
            assert_eq!(buckets, format!("arn:aws:s3:::{pa}*"));
            for b in clusters.iter().filter(|b| **b != a) {
                let pb = bucket_prefix(b, None).unwrap();
                for (ns, name) in [("default", "x"), ("b-c", "d"), ("-", "-")] {
                    let theirs = bucket_name(&pb, ns, name, "uid");
                    let arn = format!("arn:aws:s3:::{theirs}");
                    let covered = arn.starts_with(buckets.trim_end_matches('*'));
                    assert!(
                        !covered,
                        "{a}'s policy {buckets} covers {b}'s bucket {theirs}"
                    );
                }
                assert!(!iam_path(b).starts_with(&iam_path(a)), "{a} {b}");
            }
        }
    }

    #[test]
    fn partitions() {
        assert_eq!(partition("eu-west-1"), "aws");
        assert_eq!(partition("cn-north-1"), "aws-cn");
        assert_eq!(partition("us-gov-west-1"), "aws-us-gov");
    }
}
