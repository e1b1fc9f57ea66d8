//! Classes: which class an object is under (the one it names, or its namespace's default), as a
//! pure function of the classes and the namespace's labels. What a class then fills in and
//! forbids is per kind, next to this file.

pub mod access;
pub mod bucket;

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::{Expression, PartialObjectMeta, Selector, SelectorExt};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};

use crate::api::condition::Reason;
use crate::api::{BucketAccessClass, BucketClass, DEFAULT_CLASS_ANNOTATION};
use crate::reconcile::{Blocked, Error};

/// The class an object is under (none when no class applies), or the violation that naming it
/// is (a class that does not exist or cannot be read, or whose selector leaves the namespace
/// out). A pass resolves it once and every later step reads it.
pub type InForce<C> = Result<Option<Arc<C>>, Blocked>;

/// A lookup's result as the class in force: a violation is the object's to report, any other
/// error (a namespace not seen yet) is retried.
fn violation<C>(found: Result<Option<Arc<C>>, Error>) -> Result<InForce<C>, Error> {
    match found {
        Ok(class) => Ok(Ok(class)),
        Err(Error::Blocked(why)) => Ok(Err(why)),
        Err(e) => Err(e),
    }
}

/// The name status reports as the class in force.
pub fn name<C: Resource>(class: &InForce<C>) -> Option<String> {
    class.as_ref().ok()?.as_ref().map(|c| c.name_any())
}

/// The class as an input of a pass: a pass settled under one version of it is not settled
/// under the next, so an edited class is checked at once, not at the next resync.
pub fn version<C: Resource>(class: &InForce<C>) -> String {
    match class {
        Ok(Some(c)) => format!(
            "{}@{}",
            c.name_any(),
            c.resource_version().unwrap_or_default()
        ),
        Ok(None) => String::new(),
        Err(why) => why.message.clone(),
    }
}

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
    unreadable: Unreadables,
}

/// A class the operator could not decode: what its metadata and, if that much could be read,
/// its selector say. Every namespace it might govern fails closed ([`resolve`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Unreadable {
    pub name: String,
    /// Why it could not be decoded (serde's message: a field and what was wrong with it).
    pub error: String,
    /// Annotated as its kind's default class.
    pub default: bool,
    pub created: Option<jiff::Timestamp>,
    /// Its `spec.namespaceSelector`, if that could be read (`Some(None)`: it has none).
    pub selector: Option<Option<LabelSelector>>,
}

/// The classes each kind's watch could not decode, by kind and name (written by the watches).
#[derive(Clone, Default)]
pub struct Unreadables {
    pub buckets: Arc<RwLock<BTreeMap<String, Unreadable>>>,
    pub accesses: Arc<RwLock<BTreeMap<String, Unreadable>>>,
}

impl Unreadables {
    fn list(map: &RwLock<BTreeMap<String, Unreadable>>) -> Vec<Unreadable> {
        // A poisoned lock still holds the last complete write.
        let map = map.read().unwrap_or_else(|e| e.into_inner());
        map.values().cloned().collect()
    }
}

impl Classes {
    pub fn new(
        buckets: Store<BucketClass>,
        accesses: Store<BucketAccessClass>,
        namespaces: Store<PartialObjectMeta<Namespace>>,
        unreadable: Unreadables,
    ) -> Self {
        Classes {
            stores: Some(Stores {
                buckets,
                accesses,
                namespaces,
                unreadable,
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
        let unreadable = Unreadables::list(&s.unreadable.buckets);
        let classes = s.buckets.state();
        Ok(resolve(named, ns, &s.labels(ns)?, &classes, &unreadable)?)
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
        let unreadable = Unreadables::list(&s.unreadable.accesses);
        let classes = s.accesses.state();
        Ok(resolve(named, ns, &s.labels(ns)?, &classes, &unreadable)?)
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

/// Whether a selector admits a namespace.
#[derive(Clone, Debug, PartialEq)]
pub enum Admission {
    Admits,
    Excludes,
    /// The selector cannot be evaluated (the message says why): the class might govern the
    /// namespace, so it fails closed rather than admitting none.
    Unknown(String),
}

/// Does `selector` admit a namespace with these labels? No selector, or an empty one: every
/// namespace. One with a requirement the operator cannot evaluate (an operator other than In,
/// NotIn, Exists, DoesNotExist, which the CRD refuses) excludes the namespaces its other
/// requirements exclude (they are ANDed), and is [`Admission::Unknown`] for the rest.
pub fn admission(
    selector: Option<&LabelSelector>,
    namespace_labels: &BTreeMap<String, String>,
) -> Admission {
    let Some(selector) = selector else {
        return Admission::Admits;
    };
    let e = match Selector::try_from(selector.clone()) {
        Ok(s) if s.matches(namespace_labels) => return Admission::Admits,
        Ok(_) => return Admission::Excludes,
        Err(e) => e,
    };
    let mut evaluable = selector.clone();
    if let Some(list) = evaluable.match_expressions.as_mut() {
        list.retain(|r| Expression::try_from(r.clone()).is_ok());
    }
    match Selector::try_from(evaluable) {
        Ok(s) if !s.matches(namespace_labels) => Admission::Excludes,
        _ => Admission::Unknown(e.to_string()),
    }
}

fn is_default<C: Class>(class: &C) -> bool {
    class
        .annotations()
        .get(DEFAULT_CLASS_ANNOTATION)
        .map(String::as_str)
        == Some("true")
}

/// A default class that might govern a namespace: readable or not, and how it admits it.
struct Candidate<'a, C> {
    key: (Option<jiff::Timestamp>, String),
    class: Result<&'a Arc<C>, &'a Unreadable>,
    admission: Admission,
}

/// The class an object in namespace `ns` (with `labels`) is under: the one its spec names, or
/// else the newest default class that admits the namespace (as the API server picks among
/// several default StorageClasses), or none. Naming a class that does not exist, or one whose
/// selector leaves this namespace out, is a violation. So is every case the operator cannot
/// judge, failing closed: naming a class it cannot read (`unreadable`) or whose selector it
/// cannot evaluate, and, without a name, a default class it cannot read or evaluate that
/// would win if it admitted the namespace (an unreadable selector might admit it).
pub fn resolve<C: Class>(
    named: Option<&str>,
    ns: &str,
    labels: &BTreeMap<String, String>,
    classes: &[Arc<C>],
    unreadable: &[Unreadable],
) -> Result<Option<Arc<C>>, Blocked> {
    let kind = C::kind(&());
    let Some(name) = named else {
        return resolve_default(ns, labels, classes, unreadable);
    };
    let violation = |why: String| Err(Blocked::new(Reason::ClassViolation, why));
    if let Some(u) = unreadable.iter().find(|u| u.name == name) {
        return violation(format!(
            "spec.className names {kind} {name}, which the operator cannot read ({}); nothing is changed until the class is fixed",
            u.error
        ));
    }
    let Some(class) = classes.iter().find(|c| c.name_any() == name) else {
        return violation(format!(
            "spec.className names {kind} {name}, which does not exist"
        ));
    };
    match admission(class.namespace_selector(), labels) {
        Admission::Admits => Ok(Some(class.clone())),
        Admission::Excludes => violation(format!(
            "spec.className: {kind} {name} may not be used in namespace {ns} (its spec.namespaceSelector does not match the namespace's labels)"
        )),
        Admission::Unknown(e) => violation(format!(
            "spec.className: {kind} {name} has a spec.namespaceSelector the operator cannot evaluate ({e}); nothing is changed until the class is fixed"
        )),
    }
}

fn resolve_default<C: Class>(
    ns: &str,
    labels: &BTreeMap<String, String>,
    classes: &[Arc<C>],
    unreadable: &[Unreadable],
) -> Result<Option<Arc<C>>, Blocked> {
    let kind = C::kind(&());
    let readable = classes
        .iter()
        .filter(|c| is_default(c.as_ref()))
        .map(|c| Candidate {
            key: (c.creation_timestamp().map(|t| t.0), c.name_any()),
            class: Ok(c),
            admission: admission(c.namespace_selector(), labels),
        });
    let unread = unreadable.iter().filter(|u| u.default).map(|u| Candidate {
        key: (u.created, u.name.clone()),
        class: Err(u),
        admission: match &u.selector {
            Some(s) => admission(s.as_ref(), labels),
            None => Admission::Unknown("its spec.namespaceSelector cannot be read".into()),
        },
    });
    let newest = readable
        .chain(unread)
        .filter(|c| c.admission != Admission::Excludes)
        .max_by(|a, b| a.key.cmp(&b.key));
    let Some(winner) = newest else {
        return Ok(None);
    };
    let (name, why) = match (winner.class, winner.admission) {
        (Ok(c), Admission::Admits) => return Ok(Some(c.clone())),
        (Ok(c), Admission::Unknown(e)) => (
            c.name_any(),
            format!("whose spec.namespaceSelector the operator cannot evaluate ({e})"),
        ),
        (Err(u), _) => (
            u.name.clone(),
            format!("which the operator cannot read ({})", u.error),
        ),
        (Ok(_), Admission::Excludes) => return Ok(None),
    };
    Err(Blocked::new(
        Reason::ClassViolation,
        format!(
            "{kind} {name} is a default class {why}; it may govern namespace {ns}, so nothing is changed until the class is fixed"
        ),
    ))
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
            resolve(None, "ns", &l, &classes, &[])
                .unwrap()
                .map(|c| c.name_any())
        };
        assert_eq!(pick(labels(&[])), Some("new".into()));
        assert_eq!(pick(labels(&[("env", "prod")])), Some("prod".into()));
        assert!(
            resolve::<BucketClass>(None, "ns", &labels(&[]), &[], &[])
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn a_named_class_must_exist_and_admit_the_namespace() {
        let classes = vec![class("prod", false, 0, Some(env("prod")))];
        let err = resolve(Some("gold"), "team-a", &labels(&[]), &classes, &[]).unwrap_err();
        assert_eq!(err.reason, Reason::ClassViolation);
        assert!(
            err.message
                .contains("BucketClass gold, which does not exist"),
            "{err}"
        );
        let err = resolve(
            Some("prod"),
            "team-a",
            &labels(&[("env", "dev")]),
            &classes,
            &[],
        )
        .unwrap_err();
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
            &[],
        )
        .unwrap();
        assert_eq!(ok.map(|c| c.name_any()), Some("prod".into()));
    }

    #[test]
    fn selectors_match_as_the_api_server_does_and_a_broken_one_is_unknown() {
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
            admission(Some(&s), l) == Admission::Admits
        };
        assert!(admit(expr("In", Some(vec!["gold".into()])), &gold));
        assert!(!admit(expr("In", Some(vec!["gold".into()])), &none));
        assert!(admit(expr("NotIn", Some(vec!["gold".into()])), &none));
        assert!(admit(expr("Exists", None), &gold));
        assert!(admit(expr("DoesNotExist", None), &none));
        assert!(matches!(
            admission(Some(&expr("Matches", Some(vec!["gold".into()]))), &gold),
            Admission::Unknown(_)
        ));
        assert_eq!(
            admission(Some(&expr("In", Some(vec!["gold".into()]))), &none),
            Admission::Excludes
        );
        assert!(
            admit(LabelSelector::default(), &none),
            "an empty selector admits all"
        );
    }

    fn unreadable(
        name: &str,
        default: bool,
        age_s: i64,
        selector: Option<Option<LabelSelector>>,
    ) -> Unreadable {
        Unreadable {
            name: name.into(),
            error: "spec.rotation.maximum: unknown unit".into(),
            default,
            created: Some(jiff::Timestamp::from_second(1_700_000_000 + age_s).unwrap()),
            selector,
        }
    }

    #[test]
    fn a_named_class_that_cannot_be_read_or_evaluated_is_a_violation_naming_it() {
        let u = [unreadable("gold", false, 0, Some(None))];
        let err = resolve::<BucketClass>(Some("gold"), "a", &labels(&[]), &[], &u).unwrap_err();
        assert_eq!(err.reason, Reason::ClassViolation);
        assert!(
            err.message.contains("names BucketClass gold, which the operator cannot read (spec.rotation.maximum: unknown unit)"),
            "{err}"
        );
        let broken = LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "env".into(),
                operator: "Matches".into(),
                values: Some(vec!["prod".into()]),
            }]),
            ..Default::default()
        };
        let classes = vec![class("prod", false, 0, Some(broken))];
        let err = resolve(Some("prod"), "a", &labels(&[]), &classes, &[]).unwrap_err();
        assert!(
            err.message.contains(
                "BucketClass prod has a spec.namespaceSelector the operator cannot evaluate"
            ),
            "{err}"
        );
    }

    /// A default class the operator cannot judge fails closed in every namespace it might
    /// govern and would win in, and nowhere else.
    #[test]
    fn a_default_class_that_cannot_be_judged_fails_closed_where_it_might_govern() {
        let pick = |classes: &[Arc<BucketClass>], u: &[Unreadable], l: &[(&str, &str)]| {
            resolve(None, "a", &labels(l), classes, u).map(|c| c.map(|c| c.name_any()))
        };
        let older = vec![class("old", true, 0, None)];
        // Its selector can be read: only the namespaces it selects.
        let u = [unreadable("prod", true, 10, Some(Some(env("prod"))))];
        let err = pick(&older, &u, &[("env", "prod")]).unwrap_err();
        assert_eq!(err.reason, Reason::ClassViolation);
        assert!(
            err.message.starts_with("BucketClass prod is a default class which the operator cannot read (spec.rotation.maximum: unknown unit); it may govern namespace a"),
            "{err}"
        );
        assert_eq!(
            pick(&older, &u, &[("env", "dev")]).unwrap(),
            Some("old".into())
        );
        assert_eq!(
            pick(&[], &u, &[]).unwrap(),
            None,
            "a namespace it cannot select"
        );
        // Its selector cannot be read: every namespace.
        let u = [unreadable("any", true, 10, None)];
        assert!(pick(&older, &u, &[("env", "dev")]).is_err());
        assert!(pick(&[], &u, &[]).is_err());
        // A newer readable default that admits the namespace wins anyway.
        let newer = vec![class("new", true, 20, None)];
        assert_eq!(pick(&newer, &u, &[]).unwrap(), Some("new".into()));
        // Not a default: it governs only the objects that name it.
        let u = [unreadable("plain", false, 10, None)];
        assert_eq!(pick(&older, &u, &[]).unwrap(), Some("old".into()));
        // A readable default whose selector cannot be evaluated fails closed too.
        let broken = LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "env".into(),
                operator: "Matches".into(),
                values: None,
            }]),
            ..Default::default()
        };
        let mut narrowed = broken.clone();
        let classes = vec![
            class("old", true, 0, None),
            class("odd", true, 10, Some(broken)),
        ];
        let err = pick(&classes, &[], &[]).unwrap_err();
        assert!(
            err.message.contains("BucketClass odd is a default class whose spec.namespaceSelector the operator cannot evaluate"),
            "{err}"
        );
        // Its other requirements still exclude the namespaces they exclude.
        narrowed.match_labels = Some(labels(&[("env", "prod")]));
        let classes = vec![
            class("old", true, 0, None),
            class("odd", true, 10, Some(narrowed)),
        ];
        assert_eq!(
            pick(&classes, &[], &[("env", "dev")]).unwrap(),
            Some("old".into())
        );
        assert!(pick(&classes, &[], &[("env", "prod")]).is_err());
    }
}
