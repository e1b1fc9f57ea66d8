//! What an access hands to applications in the shapes other tools already read (pure): the
//! Secret's keys under the names `spec.credentials.secretKeys` gives them (COSI's `COSI_S3_*`,
//! or a tool's own), and the bucket's facts in a ConfigMap with ObjectBucketClaim's keys
//! (`spec.configMap`). Credentials never go to the ConfigMap: its keys are fixed here.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};

use super::plan::BucketFacts;
use super::{ACCESS_LABEL, MANAGED_BY, MANAGED_BY_LABEL};
use crate::api::{BucketAccess, DataKey};

/// Every key the operator writes to an access's Secret: the only ones a key map may rename.
pub const SECRET_KEYS: [&str; 8] = [
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_REGION",
    "BUCKET_NAME",
    "BUCKET_ARN",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ENDPOINT_URL_STS",
    "AWS_ROLE_ARN",
];

/// The keys each Bucket granted gets, its [`key_suffix`] appended, in the Secret of an access
/// that grants several (`spec.additionalBuckets`).
pub const BUCKET_KEYS: [&str; 3] = ["BUCKET_NAME", "BUCKET_ARN", "BUCKET_REGION"];

/// What a Bucket's own keys end in: `_` and its name in capitals, `-` and `.` as `_`.
pub fn key_suffix(bucket: &str) -> String {
    let upper = bucket.chars().map(|c| match c {
        'a'..='z' | 'A'..='Z' | '0'..='9' => c.to_ascii_uppercase(),
        _ => '_',
    });
    std::iter::once('_').chain(upper).collect()
}

/// Why the Buckets of `access` cannot each have keys of their own: two names that end the same
/// keys, or a key `spec.credentials.secretKeys` renames onto one of them (either value would
/// overwrite the other).
pub fn check_bucket_keys(access: &BucketAccess) -> Result<(), String> {
    let spec = &access.spec;
    if spec.additional_buckets.is_empty() {
        return Ok(());
    }
    let mut seen = BTreeMap::new();
    for name in spec.buckets() {
        let suffix = key_suffix(name);
        if let Some(other) = seen.insert(suffix.clone(), name) {
            return Err(format!(
                "spec.additionalBuckets: Buckets {other} and {name} would both write BUCKET_NAME{suffix}; their names must differ by more than '-' and '.'"
            ));
        }
    }
    for (from, to) in &spec.credentials.secret_keys {
        for (suffix, name) in &seen {
            if BUCKET_KEYS.iter().any(|k| format!("{k}{suffix}") == to.0) {
                return Err(format!(
                    "spec.credentials.secretKeys.{from}: {} is a key of Bucket {name}; one value would overwrite the other",
                    to.0
                ));
            }
        }
    }
    Ok(())
}

/// Each Bucket's own keys (`BUCKET_NAME_<REF>`, ...), for `buckets` (the Bucket's name and
/// facts), added to `data`.
pub fn add_bucket_keys<'a>(
    data: &mut BTreeMap<String, String>,
    buckets: impl Iterator<Item = (&'a str, &'a BucketFacts)>,
) {
    for (name, facts) in buckets {
        let suffix = key_suffix(name);
        let values = [&facts.name, &facts.arn, &facts.region];
        for (key, value) in BUCKET_KEYS.iter().zip(values) {
            data.insert(format!("{key}{suffix}"), value.clone());
        }
    }
}

/// Why `map` (`spec.credentials.secretKeys`) cannot be applied: the schema's rules, checked
/// again before anything is written, since a key that lost its value to another would hand an
/// application the wrong credential.
pub fn check_key_map(map: &BTreeMap<String, DataKey>) -> Result<(), String> {
    const FIELD: &str = "spec.credentials.secretKeys";
    for (from, to) in map {
        if !SECRET_KEYS.contains(&from.as_str()) {
            return Err(format!(
                "{FIELD} may rename only the keys the operator writes ({}), not {from}",
                SECRET_KEYS.join(", ")
            ));
        }
        let to = to.0.as_str();
        let valid = !to.is_empty()
            && to.len() <= 253
            && (to.bytes()).all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b));
        if !valid {
            return Err(format!(
                "{FIELD}.{from}: {to:?} is not a valid Secret key (letters, digits, '-', '_' and '.', at most 253)"
            ));
        }
        if to != from && SECRET_KEYS.contains(&to) {
            return Err(format!(
                "{FIELD}.{from}: {to} is the name of another key the operator writes; one value would overwrite the other"
            ));
        }
        if let Some((other, _)) = map.iter().find(|(k, v)| *k != from && v.0 == to) {
            return Err(format!(
                "{FIELD} renames both {from} and {other} to {to}; one value would overwrite the other"
            ));
        }
    }
    Ok(())
}

/// `data` with its keys renamed as `map` says.
pub fn renamed(
    data: BTreeMap<String, String>,
    map: &BTreeMap<String, DataKey>,
) -> BTreeMap<String, String> {
    data.into_iter()
        .map(|(k, v)| match map.get(&k) {
            Some(to) => (to.0.clone(), v),
            None => (k, v),
        })
        .collect()
}

/// The ConfigMap `access` writes its bucket's facts to, if it asks for one.
pub fn config_map_name(access: &BucketAccess) -> Option<String> {
    let asked = access.spec.config_map.as_ref()?;
    Some(asked.name.clone().unwrap_or_else(|| access.name_any()))
}

/// ObjectBucketClaim's keys for the bucket `facts` names, served at `endpoint` (a custom S3
/// endpoint) or else at AWS's regional endpoint. `BUCKET_SUBREGION` is there, empty, as a
/// claim's ConfigMap has it for AWS.
pub fn bucket_facts(facts: &BucketFacts, endpoint: Option<&str>) -> BTreeMap<String, String> {
    let (host, port) = match endpoint.and_then(host_and_port) {
        Some(at) => at,
        None => (aws_host(&facts.region), 443),
    };
    BTreeMap::from([
        ("BUCKET_NAME".to_string(), facts.name.clone()),
        ("BUCKET_HOST".to_string(), host),
        ("BUCKET_PORT".to_string(), port.to_string()),
        ("BUCKET_REGION".to_string(), facts.region.clone()),
        ("BUCKET_SUBREGION".to_string(), String::new()),
    ])
}

/// S3's regional endpoint host in the region's partition.
fn aws_host(region: &str) -> String {
    let suffix = match crate::aws::naming::partition(region) {
        "aws-cn" => "amazonaws.com.cn",
        _ => "amazonaws.com",
    };
    format!("s3.{region}.{suffix}")
}

/// The host and port of an endpoint URL (the scheme's port when it names none).
fn host_and_port(endpoint: &str) -> Option<(String, u16)> {
    let uri: http::Uri = endpoint.parse().ok()?;
    let host = uri.host()?.trim_start_matches('[').trim_end_matches(']');
    let port = uri.port_u16().unwrap_or(match uri.scheme_str() {
        Some("http") => 80,
        _ => 443,
    });
    Some((host.to_string(), port))
}

/// The ConfigMap holding `data`, labelled as the operator's and controlled by `access` (it goes
/// with it).
pub fn desired_config_map(
    access: &BucketAccess,
    name: &str,
    data: BTreeMap<String, String>,
) -> ConfigMap {
    ConfigMap {
        metadata: metadata(access, name),
        data: Some(data),
        ..Default::default()
    }
}

/// The metadata of an object `access` writes to its namespace as `name`: labelled as the
/// operator's and controlled by `access`, so it goes with it.
pub fn metadata(access: &BucketAccess, name: &str) -> ObjectMeta {
    let labels = BTreeMap::from([
        (MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string()),
        (ACCESS_LABEL.to_string(), access.name_any()),
    ]);
    let owner = access
        .controller_owner_ref(&())
        .expect("BucketAccess has a name and uid");
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: access.namespace(),
        labels: Some(labels),
        owner_references: Some(vec![owner]),
        ..Default::default()
    }
}

/// Does `current` say all `want` says: each of its keys, labels and owner?
pub fn in_shape(current: &ConfigMap, want: &ConfigMap) -> bool {
    let owner = want.owner_references().first();
    holds(want.data.as_ref(), current.data.as_ref())
        && holds(Some(want.labels()), Some(current.labels()))
        && owner.is_some_and(|o| current.owner_references().contains(o))
}

/// Does `have` hold every entry of `want`? Entries someone else added are theirs: a server-side
/// apply never removes another manager's fields, so demanding their absence would rewrite the
/// object at every pass without ever removing them.
pub fn holds<V: PartialEq>(
    want: Option<&BTreeMap<String, V>>,
    have: Option<&BTreeMap<String, V>>,
) -> bool {
    (want.into_iter().flatten()).all(|(k, v)| have.and_then(|h| h.get(k)) == Some(v))
}

/// The data keys of `object` the operator applied last (its field manager's `Apply` entry in
/// managedFields). One it applied and no longer wants (a Bucket's keys once it is no longer
/// granted) is removed only by an apply that leaves it out; a key someone else added is theirs
/// and never counts.
pub fn applied_keys<K: Resource>(object: &K) -> Vec<String> {
    let entries = object.meta().managed_fields.iter().flatten();
    entries
        .filter(|m| m.manager.as_deref() == Some(crate::reconcile::MANAGER))
        .filter(|m| m.operation.as_deref() == Some("Apply"))
        .filter_map(|m| m.fields_v1.as_ref()?.0.get("f:data")?.as_object())
        .flat_map(|data| data.keys().filter_map(|k| k.strip_prefix("f:")))
        .map(str::to_string)
        .collect()
}

/// Does `access` control `object` (its owner reference carries the access's UID)?
pub fn owned_by<K: Resource>(object: &K, access: &BucketAccess) -> bool {
    object
        .owner_references()
        .iter()
        .any(|o| Some(&o.uid) == access.meta().uid.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only the operator's own applied keys count: another manager's, or the operator's from an
    /// update rather than an apply, do not.
    #[test]
    fn applied_keys_are_the_operators_own_apply() {
        let secret: k8s_openapi::api::core::v1::Secret =
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "app", "managedFields": [
                    {"manager": "s3-operator", "operation": "Apply",
                     "fieldsV1": {"f:data": {"f:BUCKET_NAME": {}, "f:BUCKET_NAME_LOGS": {}},
                                  "f:metadata": {"f:labels": {}}}},
                    {"manager": "kubectl", "operation": "Apply",
                     "fieldsV1": {"f:data": {"f:MINE": {}}}},
                    {"manager": "s3-operator", "operation": "Update",
                     "fieldsV1": {"f:data": {"f:OLD": {}}}},
                ]},
            }))
            .unwrap();
        assert_eq!(applied_keys(&secret), ["BUCKET_NAME", "BUCKET_NAME_LOGS"]);
    }

    fn map(entries: &[(&str, &str)]) -> BTreeMap<String, DataKey> {
        (entries.iter())
            .map(|(k, v)| (k.to_string(), DataKey(v.to_string())))
            .collect()
    }

    /// COSI's names and a tool's own are accepted; a map that would drop a value (two keys to
    /// one name, or onto another key the operator writes), rename a key the operator does not
    /// write, or make a key Kubernetes refuses is refused, naming the field.
    #[test]
    fn a_key_map_is_refused_when_a_value_would_be_lost() {
        let cosi = map(&[
            ("AWS_ACCESS_KEY_ID", "COSI_S3_ACCESS_KEY_ID"),
            ("AWS_SECRET_ACCESS_KEY", "COSI_S3_ACCESS_SECRET_KEY"),
            ("AWS_REGION", "COSI_S3_REGION"),
            ("BUCKET_NAME", "COSI_S3_BUCKET_ID"),
            ("AWS_ENDPOINT_URL_S3", "COSI_S3_ENDPOINT"),
        ]);
        assert_eq!(check_key_map(&cosi), Ok(()));
        assert_eq!(check_key_map(&map(&[("AWS_REGION", "AWS_REGION")])), Ok(()));
        let refused = |m: &[(&str, &str)]| check_key_map(&map(m)).unwrap_err();
        let both = refused(&[("AWS_REGION", "X"), ("BUCKET_NAME", "X")]);
        assert!(
            both.contains("renames both AWS_REGION and BUCKET_NAME to X"),
            "{both}"
        );
        let onto = refused(&[("BUCKET_NAME", "AWS_SECRET_ACCESS_KEY")]);
        assert!(onto.contains("another key the operator writes"), "{onto}");
        let foreign = refused(&[("PASSWORD", "X")]);
        assert!(foreign.contains("not PASSWORD"), "{foreign}");
        let invalid = refused(&[("AWS_REGION", "a/b")]);
        assert!(
            invalid.starts_with("spec.credentials.secretKeys.AWS_REGION"),
            "{invalid}"
        );
        assert!(refused(&[("AWS_REGION", "")]).contains("not a valid Secret key"));
    }

    #[test]
    fn renaming_moves_each_named_key_and_keeps_the_rest() {
        let data = BTreeMap::from([
            ("AWS_REGION".to_string(), "eu-west-1".to_string()),
            ("BUCKET_NAME".to_string(), "b".to_string()),
        ]);
        let out = renamed(data, &map(&[("AWS_REGION", "REGION")]));
        assert_eq!(
            out,
            BTreeMap::from([
                ("BUCKET_NAME".to_string(), "b".to_string()),
                ("REGION".to_string(), "eu-west-1".to_string()),
            ])
        );
    }

    /// AWS's regional endpoint (in its partition) on 443, or the custom endpoint's host and
    /// port, the scheme's when it names none.
    #[test]
    fn bucket_facts_name_where_the_bucket_is_served() {
        let facts = |region: &str| BucketFacts {
            name: "b".into(),
            region: region.into(),
            arn: "arn:aws:s3:::b".into(),
        };
        let at = |region: &str, endpoint: Option<&str>| {
            let f = bucket_facts(&facts(region), endpoint);
            (f["BUCKET_HOST"].clone(), f["BUCKET_PORT"].clone())
        };
        let aws = bucket_facts(&facts("eu-west-1"), None);
        assert_eq!(aws["BUCKET_NAME"], "b");
        assert_eq!(aws["BUCKET_REGION"], "eu-west-1");
        assert_eq!(aws["BUCKET_SUBREGION"], "");
        assert_eq!(aws.len(), 5, "no other keys: {aws:?}");
        assert_eq!(
            at("eu-west-1", None),
            ("s3.eu-west-1.amazonaws.com".into(), "443".into())
        );
        assert_eq!(at("cn-north-1", None).0, "s3.cn-north-1.amazonaws.com.cn");
        let moto = Some("http://10.88.0.1:5000");
        assert_eq!(at("eu-west-1", moto), ("10.88.0.1".into(), "5000".into()));
        let plain = Some("http://minio.storage.svc");
        assert_eq!(
            at("eu-west-1", plain),
            ("minio.storage.svc".into(), "80".into())
        );
        let tls = Some("https://s3.example.com");
        assert_eq!(
            at("eu-west-1", tls),
            ("s3.example.com".into(), "443".into())
        );
    }

    /// A ConfigMap is in shape with the data, labels and owner it should have: not with a value
    /// edited, but with a key someone else added (theirs).
    #[test]
    fn a_config_map_is_in_shape_only_as_the_operator_writes_it() {
        let access: BucketAccess = serde_json::from_value(serde_json::json!({
            "apiVersion": "s3.operator.dev/v1alpha1", "kind": "BucketAccess",
            "metadata": {"name": "a", "namespace": "ns", "uid": "uid-a"},
            "spec": {"bucketRef": {"name": "b"}, "permission": "ReadOnly", "configMap": {}},
        }))
        .unwrap();
        assert_eq!(config_map_name(&access).as_deref(), Some("a"));
        let data = BTreeMap::from([("BUCKET_NAME".to_string(), "b".to_string())]);
        let want = desired_config_map(&access, "a", data);
        assert!(in_shape(&want, &want));
        assert!(owned_by(&want, &access));
        let mut edited = want.clone();
        let data = edited.data.as_mut().unwrap();
        data.insert("BUCKET_NAME".into(), "x".into());
        assert!(!in_shape(&edited, &want));
        let mut added = want.clone();
        let data = added.data.as_mut().unwrap();
        data.insert("EXTRA".into(), "x".into());
        assert!(in_shape(&added, &want), "another's key is theirs");
        let mut foreign = want.clone();
        foreign.metadata.owner_references = None;
        assert!(!in_shape(&foreign, &want));
        assert!(!owned_by(&foreign, &access));
    }

    /// The names of every list of quoted names (`['A', 'B']`) in `text`.
    fn listed(text: &str) -> Vec<std::collections::BTreeSet<String>> {
        text.split('[')
            .skip(1)
            .filter_map(|rest| rest.split_once(']'))
            .filter(|(list, _)| list.starts_with('\''))
            .map(|(list, _)| {
                (list.split(','))
                    .map(|n| n.trim().trim_matches('\'').to_string())
                    .collect()
            })
            .collect()
    }

    /// The CEL rules on `spec.credentials.secretKeys` spell the operator's keys out (a derive
    /// attribute cannot take a constant): each list, and the first rule's message, is exactly
    /// `SECRET_KEYS`, so a key added to the Secret cannot be left out of what may be renamed.
    #[test]
    fn the_secret_key_rules_list_exactly_the_keys_the_operator_writes() {
        use kube::CustomResourceExt;
        use std::collections::BTreeSet;
        let crd = serde_json::to_value(BucketAccess::crd()).unwrap();
        let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        let field =
            &schema["properties"]["spec"]["properties"]["credentials"]["properties"]["secretKeys"];
        let rules = field["x-kubernetes-validations"]
            .as_array()
            .expect("CEL rules");
        let want: BTreeSet<String> = SECRET_KEYS.iter().map(|k| k.to_string()).collect();
        let lists: Vec<BTreeSet<String>> = (rules.iter())
            .flat_map(|r| listed(r["rule"].as_str().unwrap_or_default()))
            .collect();
        assert_eq!(lists.len(), 2, "{rules:?}");
        for list in lists {
            assert_eq!(list, want);
        }
        let message = rules[0]["message"].as_str().unwrap_or_default();
        let (_, named) = message.split_once(": ").expect("the keys, named");
        let named: BTreeSet<String> = named.split(", ").map(str::to_string).collect();
        assert_eq!(named, want, "{message}");
    }
}
