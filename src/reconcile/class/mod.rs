//! Classes: which class an object is under (the one it names, or its namespace's default), as a
//! pure function of the classes and the namespace's labels. What a class then fills in and
//! forbids is per kind, next to this file.

pub mod access;
pub mod bucket;

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::{PartialObjectMeta, Selector, SelectorExt};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};

use crate::api::condition::Reason;
use crate::api::{BucketAccessClass, BucketClass, DEFAULT_CLASS_ANNOTATION};
use crate::reconcile::{Blocked, Error};

/// The classes and namespaces as the operator's watches see them (read live: a change to a
/// class or to a namespace's labels reaches the next pass). Without stores (classes off, or a
/// unit test that sets none) no class applies, as when none exists.
#[derive(Clone, Default)]
pub struct Classes {
    stores: Option<Stores>,
}

#[derive(Clone)]
struct Stores {
    buckets: Store<BucketClass>,
    accesses: Store<BucketAccessClass>,
    namespaces: Store<PartialObjectMeta<Namespace>>,
}

impl Classes {
    pub fn new(
        buckets: Store<BucketClass>,
        accesses: Store<BucketAccessClass>,
        namespaces: Store<PartialObjectMeta<Namespace>>,
    ) -> Self {
        Classes {
            stores: Some(Stores {
                buckets,
                accesses,
                namespaces,
            }),
        }
    }

    /// The BucketClass a Bucket in `ns` naming `named` is under (see [`resolve`]).
    pub fn bucket_class(
        &self,
        ns: &str,
        named: Option<&str>,
    ) -> Result<Option<Arc<BucketClass>>, Error> {
        let Some(s) = &self.stores else {
            return Ok(None);
        };
        Ok(resolve(named, ns, &s.labels(ns)?, &s.buckets.state())?)
    }

    /// The BucketAccessClass a BucketAccess in `ns` naming `named` is under.
    pub fn access_class(
        &self,
        ns: &str,
        named: Option<&str>,
    ) -> Result<Option<Arc<BucketAccessClass>>, Error> {
        let Some(s) = &self.stores else {
            return Ok(None);
        };
        Ok(resolve(named, ns, &s.labels(ns)?, &s.accesses.state())?)
    }
}

impl Stores {
    /// The labels of namespace `ns`. One the watch has not shown yet is an error (retried),
    /// never "no labels": that could skip the class a selector gives it.
    fn labels(&self, ns: &str) -> Result<BTreeMap<String, String>, Error> {
        self.namespaces
            .get(&ObjectRef::new(ns))
            .map(|n| n.labels().clone())
            .ok_or_else(|| Error::UnknownNamespace(ns.to_string()))
    }
}

/// What both class kinds share for resolution.
pub trait Class: Resource<DynamicType = ()> {
    fn namespace_selector(&self) -> Option<&LabelSelector>;
}

impl Class for BucketClass {
    fn namespace_selector(&self) -> Option<&LabelSelector> {
        self.spec.namespace_selector.as_ref()
    }
}

impl Class for BucketAccessClass {
    fn namespace_selector(&self) -> Option<&LabelSelector> {
        self.spec.namespace_selector.as_ref()
    }
}

/// Does `class` admit a namespace with these labels? No selector, or an empty one: every
/// namespace. A selector the API server would refuse (an unknown operator) admits none, so a
/// mistyped class fails closed.
pub fn admits<C: Class>(class: &C, namespace_labels: &BTreeMap<String, String>) -> bool {
    let Some(selector) = class.namespace_selector() else {
        return true;
    };
    Selector::try_from(selector.clone()).is_ok_and(|s| s.matches(namespace_labels))
}

fn is_default<C: Class>(class: &C) -> bool {
    class
        .annotations()
        .get(DEFAULT_CLASS_ANNOTATION)
        .map(String::as_str)
        == Some("true")
}

/// The class an object in namespace `ns` (with `labels`) is under: the one its spec names, or
/// else the newest default class that admits the namespace (as the API server picks among
/// several default StorageClasses), or none. Naming a class that does not exist, or one whose
/// selector leaves this namespace out, is a violation.
pub fn resolve<C: Class>(
    named: Option<&str>,
    ns: &str,
    labels: &BTreeMap<String, String>,
    classes: &[Arc<C>],
) -> Result<Option<Arc<C>>, Blocked> {
    let kind = C::kind(&());
    let Some(name) = named else {
        let default = classes
            .iter()
            .filter(|c| is_default(c.as_ref()) && admits(c.as_ref(), labels))
            .max_by_key(|c| (c.creation_timestamp().map(|t| t.0), c.name_any()));
        return Ok(default.cloned());
    };
    let class = classes
        .iter()
        .find(|c| c.name_any() == name)
        .ok_or_else(|| {
            Blocked::new(
                Reason::ClassViolation,
                format!("spec.className names {kind} {name}, which does not exist"),
            )
        })?;
    if !admits(class.as_ref(), labels) {
        return Err(Blocked::new(
            Reason::ClassViolation,
            format!(
                "spec.className: {kind} {name} may not be used in namespace {ns} (its spec.namespaceSelector does not match the namespace's labels)"
            ),
        ));
    }
    Ok(Some(class.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::BucketClassSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelectorRequirement, Time};

    fn class(
        name: &str,
        default: bool,
        age_s: i64,
        selector: Option<LabelSelector>,
    ) -> Arc<BucketClass> {
        let mut c = BucketClass::new(
            name,
            BucketClassSpec {
                namespace_selector: selector,
                ..Default::default()
            },
        );
        if default {
            c.annotations_mut()
                .insert(DEFAULT_CLASS_ANNOTATION.into(), "true".into());
        }
        c.metadata.creation_timestamp = Some(Time(
            jiff::Timestamp::from_second(1_700_000_000 + age_s).unwrap(),
        ));
        Arc::new(c)
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn env(value: &str) -> LabelSelector {
        LabelSelector {
            match_labels: Some(labels(&[("env", value)])),
            ..Default::default()
        }
    }

    #[test]
    fn the_newest_default_that_admits_the_namespace_applies() {
        let classes = vec![
            class("old", true, 0, None),
            class("new", true, 10, None),
            class("prod", true, 20, Some(env("prod"))),
            class("plain", false, 30, None),
        ];
        let pick = |l| {
            resolve(None, "ns", &l, &classes)
                .unwrap()
                .map(|c| c.name_any())
        };
        assert_eq!(pick(labels(&[])), Some("new".into()));
        assert_eq!(pick(labels(&[("env", "prod")])), Some("prod".into()));
        assert!(
            resolve::<BucketClass>(None, "ns", &labels(&[]), &[])
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn a_named_class_must_exist_and_admit_the_namespace() {
        let classes = vec![class("prod", false, 0, Some(env("prod")))];
        let err = resolve(Some("gold"), "team-a", &labels(&[]), &classes).unwrap_err();
        assert_eq!(err.reason, Reason::ClassViolation);
        assert!(
            err.message
                .contains("BucketClass gold, which does not exist"),
            "{err}"
        );
        let err =
            resolve(Some("prod"), "team-a", &labels(&[("env", "dev")]), &classes).unwrap_err();
        assert!(
            err.message
                .contains("BucketClass prod may not be used in namespace team-a"),
            "{err}"
        );
        let ok = resolve(
            Some("prod"),
            "team-a",
            &labels(&[("env", "prod")]),
            &classes,
        )
        .unwrap();
        assert_eq!(ok.map(|c| c.name_any()), Some("prod".into()));
    }

    #[test]
    fn selectors_match_as_the_api_server_does_and_a_broken_one_admits_none() {
        let expr = |operator: &str, values: Option<Vec<String>>| LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "tier".into(),
                operator: operator.into(),
                values,
            }]),
            ..Default::default()
        };
        let gold = labels(&[("tier", "gold")]);
        let none = labels(&[]);
        let admit = |s: LabelSelector, l: &BTreeMap<String, String>| {
            admits(class("c", false, 0, Some(s)).as_ref(), l)
        };
        assert!(admit(expr("In", Some(vec!["gold".into()])), &gold));
        assert!(!admit(expr("In", Some(vec!["gold".into()])), &none));
        assert!(admit(expr("NotIn", Some(vec!["gold".into()])), &none));
        assert!(admit(expr("Exists", None), &gold));
        assert!(admit(expr("DoesNotExist", None), &none));
        assert!(!admit(expr("Matches", Some(vec!["gold".into()])), &gold));
        assert!(
            admit(LabelSelector::default(), &none),
            "an empty selector admits all"
        );
    }
}
