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

/// An IAM user or role name: `<namespace>-<name>-<hash of uid>`, at most 64 characters.
pub fn iam_name(namespace: &str, name: &str, uid: &str) -> String {
    let hash = short_hash(uid, 8);
    let mut stem = format!("{namespace}-{name}");
    stem.truncate(64 - hash.len() - 1);
    format!("{stem}-{hash}")
}

/// The IAM path every entity of one operator installation lives under.
pub fn iam_path(cluster: &str) -> String {
    format!("/s3-operator/{cluster}/")
}

/// The default bucket-name prefix of an installation: `s3op-<cluster>-`, so the operator policies
/// of two clusters in one account cover disjoint buckets. The cluster name is lowercased and
/// anything S3 does not allow becomes '-'.
pub fn default_bucket_prefix(cluster: &str) -> String {
    format!("s3op-{}-", sanitize(cluster).trim_matches('-'))
}

/// The AWS partition of a region (`aws`, `aws-cn`, `aws-us-gov`).
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
        let n = iam_name(&long, &long, "uid");
        assert_eq!(n.len(), 64);
        assert!(n.ends_with(&short_hash("uid", 8)));
    }

    #[test]
    fn default_prefixes_are_per_cluster_and_valid_in_bucket_names() {
        assert_eq!(default_bucket_prefix("default"), "s3op-default-");
        assert_eq!(default_bucket_prefix("Prod_EU"), "s3op-prod-eu-");
        assert_ne!(default_bucket_prefix("a"), default_bucket_prefix("b"));
        let n = bucket_name(&default_bucket_prefix(&"c".repeat(32)), "ns", "n", "uid");
        assert!(valid_bucket_name(&n) && n.starts_with("s3op-ccc"), "{n}");
    }

    #[test]
    fn partitions() {
        assert_eq!(partition("eu-west-1"), "aws");
        assert_eq!(partition("cn-north-1"), "aws-cn");
        assert_eq!(partition("us-gov-west-1"), "aws-us-gov");
    }
}
