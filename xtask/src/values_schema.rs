//! The chart's values schema for its default classes (`classes.*.default`), made from the class
//! CRDs so that a value the API server would refuse is refused by `helm install` first, and a
//! field added to a class is accepted by the chart at once. The rest of values.schema.json is
//! hand-written; this rewrites only `properties.classes`.

use std::path::Path;

use serde_yaml::{Mapping, Value};

use crate::{Error, Generated, map, read, shape};

pub const SCHEMA: &str = "charts/s3-operator/values.schema.json";

/// values.schema.json with `properties.classes` made from the class CRDs.
pub fn file(root: &Path) -> Result<Generated, Error> {
    let mut schema: Value =
        serde_yaml::from_str(&read(root, SCHEMA)?).map_err(|source| Error::Yaml {
            path: SCHEMA.into(),
            source,
        })?;
    let props = schema
        .get_mut("properties")
        .and_then(Value::as_mapping_mut)
        .ok_or_else(|| shape(SCHEMA, "has no properties"))?;
    props.insert("classes".into(), classes()?);
    Ok(Generated {
        path: SCHEMA.into(),
        text: serde_json::to_string_pretty(&schema).expect("YAML values serialize as JSON") + "\n",
    })
}

fn classes() -> Result<Value, Error> {
    let kind = |kind: &str, what: &str| -> Result<Value, Error> {
        let default = map([
            ("type", "object".into()),
            (
                "description",
                format!(
                    "A {kind} the chart creates, annotated as the default {kind} of the namespaces it selects."
                )
                .into(),
            ),
            ("additionalProperties", false.into()),
            ("required", Value::Sequence(vec!["enabled".into()])),
            ("properties", Value::Mapping(default_class(kind, what)?)),
        ]);
        Ok(closed(
            &format!("{what} classes."),
            [("default", default)].into_iter(),
        ))
    };
    Ok(closed(
        "Classes the chart creates (the CRDs come with it). Off by default.",
        [
            ("bucket", kind("BucketClass", "Bucket")?),
            ("bucketAccess", kind("BucketAccessClass", "BucketAccess")?),
        ]
        .into_iter(),
    ))
}

/// `enabled`, `name` and every field of the kind's spec, closed at every level.
fn default_class(kind: &str, what: &str) -> Result<Mapping, Error> {
    let crd = s3_operator::api::crds()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .ok_or_else(|| shape(SCHEMA, format!("no CRD of kind {kind}")))?;
    let crd = serde_yaml::to_value(&crd).map_err(|source| Error::Yaml {
        path: format!("the {kind} CRD"),
        source,
    })?;
    let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
    let mut props = Mapping::new();
    props.insert(
        "enabled".into(),
        map([
            ("type", "boolean".into()),
            (
                "description",
                format!("Create the default {kind}; {what}s of the selected namespaces that name no class get it.").into(),
            ),
        ]),
    );
    props.insert(
        "name".into(),
        map([
            ("type", "string".into()),
            ("description", format!("Name of the {kind}.").into()),
            (
                "pattern",
                "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$".into(),
            ),
            ("maxLength", 253.into()),
        ]),
    );
    for (key, field) in spec["properties"].as_mapping().into_iter().flatten() {
        props.insert(key.clone(), json_schema(field));
    }
    Ok(props)
}

fn closed<'a>(description: &str, props: impl Iterator<Item = (&'a str, Value)>) -> Value {
    map([
        ("type", "object".into()),
        ("description", description.into()),
        ("additionalProperties", false.into()),
        (
            "properties",
            Value::Mapping(props.map(|(k, v)| (k.into(), v)).collect()),
        ),
    ])
}

/// A CRD schema as plain JSON schema: without the Kubernetes extensions (CEL rules are the API
/// server's), `nullable` and defaults (the chart passes on only what is set), and closed where
/// it lists its properties.
fn json_schema(crd: &Value) -> Value {
    let Some(m) = crd.as_mapping() else {
        return crd.clone();
    };
    let mut out = Mapping::new();
    for (k, v) in m {
        let v = match (k.as_str().unwrap_or_default(), v) {
            (k, _) if k.starts_with("x-kubernetes-") || k == "nullable" || k == "default" => {
                continue;
            }
            // Field names, which may be anything (`rotation.default`).
            ("properties", Value::Mapping(fields)) => Value::Mapping(
                fields
                    .iter()
                    .map(|(name, f)| (name.clone(), json_schema(f)))
                    .collect(),
            ),
            ("anyOf" | "oneOf" | "allOf", Value::Sequence(s)) => {
                Value::Sequence(s.iter().map(json_schema).collect())
            }
            _ => json_schema(v),
        };
        out.insert(k.clone(), v);
    }
    if out.contains_key("properties") && !out.contains_key("additionalProperties") {
        out.insert("additionalProperties".into(), false.into());
    }
    Value::Mapping(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kubernetes' extensions, `nullable` and defaults go; a field named like a keyword
    /// (`rotation.default`) stays; listed properties are closed.
    #[test]
    fn crd_schemas_become_closed_json_schemas() {
        let crd: Value = serde_yaml::from_str(
            "type: object\nnullable: true\nx-kubernetes-validations: [{rule: 'true'}]\n\
             properties:\n  default: {type: string, default: 1h}\n  \
             nullable: {type: boolean}\n  \
             list: {type: array, items: {type: object, properties: {a: {type: string}}}}\n",
        )
        .unwrap();
        let want: Value = serde_yaml::from_str(
            "type: object\n\
             properties:\n  default: {type: string}\n  nullable: {type: boolean}\n  \
             list: {type: array, items: {type: object, properties: {a: {type: string}},\n    \
             additionalProperties: false}}\n\
             additionalProperties: false\n",
        )
        .unwrap();
        assert_eq!(json_schema(&crd), want);
    }

    /// Every field of each class's spec is a value of its default class, and nothing else is.
    #[test]
    fn the_default_classes_take_exactly_the_spec_fields() {
        let classes = classes().unwrap();
        for (key, kind) in [
            ("bucket", "BucketClass"),
            ("bucketAccess", "BucketAccessClass"),
        ] {
            let props = &classes["properties"][key]["properties"]["default"]["properties"];
            let mut names: Vec<&str> = props
                .as_mapping()
                .unwrap()
                .keys()
                .filter_map(Value::as_str)
                .collect();
            names.sort();
            let crd = s3_operator::api::crds()
                .into_iter()
                .find(|c| c.spec.names.kind == kind)
                .unwrap();
            let spec = &crd.spec.versions[0]
                .schema
                .as_ref()
                .unwrap()
                .open_api_v3_schema;
            let spec = &spec.as_ref().unwrap().properties.as_ref().unwrap()["spec"];
            let mut want: Vec<&str> = spec
                .properties
                .as_ref()
                .unwrap()
                .keys()
                .map(String::as_str)
                .collect();
            want.extend(["enabled", "name"]);
            want.sort();
            assert_eq!(names, want, "{kind}");
        }
    }
}
