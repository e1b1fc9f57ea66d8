//! Policy documents in one canonical form, so a resync never rewrites a policy that means the
//! same as the one it wants.

use serde_json::{Value, json};

use super::VERSION;

/// A policy document in one canonical form, so two documents that mean the same compare equal
/// and a resync never rewrites a policy only because S3 formats or orders it differently: a
/// single value and a one-element list are the same, lists are sets, `"*"` is `{"AWS": "*"}`,
/// an account id is its root ARN (S3 stores it so), condition values are strings, and the
/// statements are in a fixed order.
pub fn normalize_policy(doc: &Value, partition: &str) -> Value {
    let statements = match &doc["Statement"] {
        Value::Array(a) => a.clone(),
        Value::Null => vec![],
        one => vec![one.clone()],
    };
    let mut statements: Vec<Value> = statements
        .iter()
        .map(|s| normalize_statement(s, partition))
        .collect();
    statements.sort_by_key(|s| s.to_string());
    statements.dedup();
    json!({"Version": doc.get("Version").cloned().unwrap_or(json!(VERSION)), "Statement": statements})
}

fn string_set(v: &Value) -> Value {
    let mut items: Vec<String> = match v {
        Value::Array(a) => a.iter().map(scalar).collect(),
        other => vec![scalar(other)],
    };
    items.sort();
    items.dedup();
    json!(items)
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn normalize_statement(s: &Value, partition: &str) -> Value {
    let Value::Object(fields) = s else {
        return s.clone();
    };
    let mut out = serde_json::Map::new();
    for (key, value) in fields {
        let value = match key.as_str() {
            "Action" | "NotAction" | "Resource" | "NotResource" => string_set(value),
            "Principal" | "NotPrincipal" => normalize_principal(value, partition),
            "Condition" => match value {
                Value::Object(ops) => Value::Object(
                    ops.iter()
                        .map(|(op, keys)| {
                            let keys = match keys {
                                Value::Object(k) => Value::Object(
                                    k.iter().map(|(k, v)| (k.clone(), string_set(v))).collect(),
                                ),
                                other => other.clone(),
                            };
                            (op.clone(), keys)
                        })
                        .collect(),
                ),
                other => other.clone(),
            },
            _ => value.clone(),
        };
        out.insert(key.clone(), value);
    }
    Value::Object(out)
}

fn normalize_principal(p: &Value, partition: &str) -> Value {
    let map = match p {
        Value::String(s) if s == "*" => {
            return json!({"AWS": ["*"]});
        }
        Value::Object(m) => m.clone(),
        other => return other.clone(),
    };
    Value::Object(
        map.into_iter()
            .map(|(kind, v)| {
                let mut v = string_set(&v);
                if kind == "AWS"
                    && let Value::Array(items) = &mut v
                {
                    for item in items.iter_mut() {
                        if let Some(id) = item.as_str().filter(|s| is_account_id(s)) {
                            *item = json!(format!("arn:{partition}:iam::{id}:root"));
                        }
                    }
                    v = string_set(&v);
                }
                (kind, v)
            })
            .collect(),
    )
}

/// A 12-digit AWS account id.
pub fn is_account_id(s: &str) -> bool {
    s.len() == 12 && s.bytes().all(|b| b.is_ascii_digit())
}

/// Policy documents as IAM returns them are URL-encoded JSON; compare them as JSON values so
/// formatting and key order never cause a spurious write.
pub fn decode_document(encoded: &str) -> Option<Value> {
    let decoded = percent_encoding::percent_decode_str(encoded)
        .decode_utf8()
        .ok()?;
    serde_json::from_str(&decoded)
        .or_else(|_| serde_json::from_str(encoded))
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aws::policy::*;

    #[test]
    fn policies_that_mean_the_same_normalize_the_same() {
        let ours = bucket_policy(
            "arn:aws:s3:::b",
            &[
                json!({"Sid": "Read", "Effect": "Allow", "Principal": {"AWS": ["111122223333"]},
                     "Action": ["s3:GetObject", "s3:ListBucket"], "Resource": ["arn:aws:s3:::b/*"]}),
            ],
        );
        // As S3 may return it: statements reordered, singletons unwrapped, lists reordered,
        // the account id as its root ARN, a boolean condition value.
        let theirs = json!({"Version": "2012-10-17", "Statement": [
            {"Sid": "Read", "Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::111122223333:root"},
             "Action": ["s3:ListBucket", "s3:GetObject"], "Resource": "arn:aws:s3:::b/*"},
            {"Sid": TLS_ONLY_SID, "Effect": "Deny", "Principal": {"AWS": "*"}, "Action": ["s3:*"],
             "Resource": ["arn:aws:s3:::b/*", "arn:aws:s3:::b"],
             "Condition": {"Bool": {"aws:SecureTransport": false}}},
        ]});
        assert_eq!(
            normalize_policy(&ours, "aws"),
            normalize_policy(&theirs, "aws")
        );
        let mut changed = theirs.clone();
        changed["Statement"][1]["Condition"]["Bool"]["aws:SecureTransport"] = json!("true");
        assert_ne!(
            normalize_policy(&ours, "aws"),
            normalize_policy(&changed, "aws")
        );
    }

    #[test]
    fn documents_compare_after_url_decoding() {
        let v = json!({"a": [1, 2]});
        let enc: String = percent_encoding::utf8_percent_encode(
            &v.to_string(),
            percent_encoding::NON_ALPHANUMERIC,
        )
        .to_string();
        assert_eq!(decode_document(&enc), Some(v.clone()));
        assert_eq!(decode_document(&v.to_string()), Some(v));
    }
}
