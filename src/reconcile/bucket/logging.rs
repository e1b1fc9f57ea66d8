//! spec.logging: where a Bucket's server access logs go, and the grant its target's bucket
//! policy gives the S3 logging service. Both are pure functions of the cached Bucket objects, so
//! a target's plan stays pure and its steady state writes nothing; a change of one end wakes the
//! other (see [`Linked`]). Whether the target's S3 bucket is held by its Bucket is read with the
//! rest of what a pass observes and judged here ([`target_not_held`]).

use crate::reconcile::InAccount;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use super::Desired;
use super::replication;
use crate::api::Bucket;
use crate::api::condition::{Reason, is_ready};
use crate::aws::s3::logging::LogTarget;
use crate::aws::tags::Ownership;
use crate::aws::{naming, policy};
use crate::reconcile::refs::Referrers;
use crate::reconcile::{Blocked, Settings, bucket, owner};

/// The field every refusal names.
const FIELD: &str = "spec.logging.targetBucketRef";

/// The Bucket object a Bucket logs into, by name (`None`: it does not log into one).
fn target_name(b: &Bucket) -> Option<&str> {
    let logging = b.spec.logging.as_ref()?;
    logging.target_bucket_ref.as_ref().map(|r| r.name.as_str())
}

/// The S3 name and region a Bucket object stands for, resolved as its own reconciler does:
/// from its spec and UID, never from status (which whoever can edit the object can write).
fn resolve(
    b: &Bucket,
    settings: &Settings,
    default_region: &str,
) -> Result<(String, String), Blocked> {
    let owner = owner(b, &settings.cluster_name);
    bucket::desired(b, settings, default_region, &owner).map(|d| (d.name, d.region))
}

/// What one pass of a Bucket needs from the cache beyond the object itself.
#[derive(Clone, Debug, Default)]
pub struct Links {
    /// The Bucket object this one logs into, if it names one that exists.
    pub target: Option<Arc<Bucket>>,
    /// ARNs of the buckets of this namespace that log into this one (sorted).
    pub sources: Vec<String>,
    /// The Bucket objects of this namespace its replication rules name, that exist.
    pub destinations: Vec<Arc<Bucket>>,
}

impl Links {
    /// The cached inputs of a pass: a pass is settled only while they are unchanged.
    pub fn fingerprint(&self) -> String {
        let target = self
            .target
            .as_ref()
            .map(|t| t.resource_version().unwrap_or_default())
            .unwrap_or_default();
        let destinations: Vec<String> = (self.destinations.iter())
            .map(|d| {
                format!(
                    "{}@{}",
                    d.name_any(),
                    d.resource_version().unwrap_or_default()
                )
            })
            .collect();
        if destinations.is_empty() {
            return format!("{target}|{}", self.sources.join(","));
        }
        format!(
            "{target}|{}|{}",
            self.sources.join(","),
            destinations.join(",")
        )
    }
}

/// The links of `b` in `buckets` (the cached Buckets).
pub fn links(
    b: &Bucket,
    buckets: &[Arc<Bucket>],
    settings: &Settings,
    default_region: &str,
) -> Links {
    let ns = b.metadata.namespace.clone();
    let target = target_name(b).and_then(|t| {
        buckets
            .iter()
            .find(|o| o.metadata.name.as_deref() == Some(t) && o.metadata.namespace == ns)
            .cloned()
    });
    let named: Vec<&str> = replication::destination_names(b).collect();
    let destinations = match named.is_empty() {
        true => vec![],
        false => (buckets.iter())
            .filter(|o| o.metadata.namespace == ns)
            .filter(|o| {
                o.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| named.contains(&n))
            })
            .cloned()
            .collect(),
    };
    Links {
        target,
        sources: sources(b, buckets, settings, default_region),
        destinations,
    }
}

/// The links of `b` from the context's caches: of its namespace, only the Buckets it names and
/// those naming it are looked at.
pub fn links_in(b: &Bucket, ctx: &InAccount<'_>) -> Links {
    let (ns, name) = (b.namespace().unwrap_or_default(), b.name_any());
    // The scope holding `b` holds its whole namespace.
    let key = ObjectRef::<Bucket>::new(&name).within(&ns);
    let Some(cache) = ctx.buckets.iter().find(|c| c.store.get(&key).is_some()) else {
        return Links::default();
    };
    let mut related: Vec<ObjectRef<Bucket>> = named(b)
        .map(|n| ObjectRef::new(n).within(&ns))
        .chain(cache.refs.naming(&ns, &name))
        .collect();
    related.sort_by(|x, y| x.name.cmp(&y.name));
    related.dedup();
    let related: Vec<Arc<Bucket>> = related.iter().filter_map(|r| cache.store.get(r)).collect();
    links(b, &related, &ctx.settings, &ctx.aws.region)
}

/// ARNs of the buckets that log into `target`: the Buckets of its namespace (never another's)
/// that name it, are not being deleted, and are in its region. Sorted, so the policy is steady.
pub fn sources(
    target: &Bucket,
    buckets: &[Arc<Bucket>],
    settings: &Settings,
    default_region: &str,
) -> Vec<String> {
    let (ns, name) = (target.namespace(), target.name_any());
    let logging_here: Vec<&Arc<Bucket>> = buckets
        .iter()
        .filter(|b| target_name(b) == Some(name.as_str()))
        .filter(|b| b.namespace() == ns && b.name_any() != name)
        .filter(|b| b.metadata.deletion_timestamp.is_none())
        .collect();
    // Most Buckets receive no logs: they resolve nothing.
    if logging_here.is_empty() {
        return vec![];
    }
    let Ok((_, region)) = resolve(target, settings, default_region) else {
        return vec![];
    };
    let mut arns: Vec<String> = logging_here
        .into_iter()
        .filter_map(|b| resolve(b, settings, default_region).ok())
        .filter(|(_, r)| *r == region)
        .map(|(n, r)| naming::bucket_arn(naming::partition(&r), &n))
        .collect();
    arns.sort();
    arns.dedup();
    arns
}

/// The bucket policy `policy` of a bucket (`arn`) with the logging grant for `sources` added
/// after the spec's statements: the operator's own, so the spec.policy guard does not apply.
pub fn with_grant(
    mut doc: serde_json::Value,
    arn: &str,
    sources: &[String],
    account: &str,
) -> serde_json::Value {
    if let (Some(grant), Some(all)) = (
        policy::logging_statement(arn, sources, account),
        doc["Statement"].as_array_mut(),
    ) {
        all.push(grant);
    }
    doc
}

/// What `source`'s logging should be (`None`: unmanaged; `Some(None)`: off), or why it cannot
/// be served, naming spec.logging.targetBucketRef. `target`: the Bucket it names, if cached.
pub fn wanted(
    source: &Bucket,
    source_region: &str,
    target: Option<&Bucket>,
    settings: &Settings,
    default_region: &str,
) -> Result<Option<Option<LogTarget>>, Blocked> {
    let Some(logging) = &source.spec.logging else {
        return Ok(None);
    };
    let Some(r) = &logging.target_bucket_ref else {
        return Ok(Some(None));
    };
    let (ns, name) = (source.namespace().unwrap_or_default(), &r.name);
    if *name == source.name_any() {
        let msg = format!("{FIELD} names this Bucket itself: a bucket may not log into itself");
        return Err(Blocked::new(Reason::InvalidSpec, msg));
    }
    let Some(target) = target.filter(|t| t.metadata.deletion_timestamp.is_none()) else {
        let msg = format!("{FIELD}: Bucket {name} does not exist in namespace {ns}");
        return Err(Blocked::new(Reason::BucketNotFound, msg));
    };
    let (bucket, region) = resolve(target, settings, default_region).map_err(|why| {
        let msg = format!("{FIELD}: Bucket {name} cannot be served: {}", why.message);
        Blocked::new(Reason::BucketNotReady, msg)
    })?;
    if region != source_region {
        let msg = format!(
            "{FIELD}: Bucket {name} is in region {region}, this Bucket in {source_region}; S3 delivers logs only within a region"
        );
        return Err(Blocked::new(Reason::InvalidSpec, msg));
    }
    let ready = target
        .status
        .as_ref()
        .is_some_and(|s| is_ready(&s.conditions));
    if !ready {
        let msg = format!("{FIELD}: Bucket {name} is not Ready");
        return Err(Blocked::new(Reason::BucketNotReady, msg));
    }
    let prefix = logging.target_prefix.clone().unwrap_or_default();
    Ok(Some(Some(LogTarget { bucket, prefix })))
}

/// Completes `d` with what needs the cache: the logging grant of the buckets that log into this
/// one (`links.sources`), added to its policy, and this Bucket's own logging. `Some(_)`: why
/// spec.logging cannot be served (the whole pass waits, as for a refused spec.policy).
pub fn complete(
    d: &mut Desired,
    b: &Bucket,
    settings: &Settings,
    default_region: &str,
    links: &Links,
) -> Option<Blocked> {
    let arn = naming::bucket_arn(naming::partition(&d.region), &d.name);
    if let Ok(doc) = &mut d.policy {
        *doc = with_grant(doc.take(), &arn, &links.sources, &settings.account_id);
    }
    let target = links.target.as_deref();
    match wanted(b, &d.region, target, settings, default_region) {
        Ok(w) => d.logging = w,
        Err(why) => return Some(why),
    }
    None
}

/// The S3 bucket `d` logs into and the Bucket it stands for, if it logs into one: whose tags
/// the pass reads before anything else.
pub fn target<'a>(d: &'a Desired, links: &'a Links) -> Option<(&'a LogTarget, &'a Bucket)> {
    match (&d.logging, links.target.as_deref()) {
        (Some(Some(to)), Some(target)) => Some((to, target)),
        _ => None,
    }
}

/// Why logs may not go to the S3 bucket `to`: its tags (`None`: it does not exist) do not say it
/// is held by the Bucket `target` (whose status is no proof).
pub fn target_not_held(
    to: &LogTarget,
    target: &Bucket,
    tags: Option<&BTreeMap<String, String>>,
    cluster: &str,
) -> Option<Blocked> {
    let o = owner(target, cluster);
    let held = tags.is_some_and(|tags| o.judge(tags) == Ownership::Ours);
    (!held).then(|| {
        let msg = format!(
            "{FIELD}: S3 bucket {} is not held by Bucket {}",
            to.bucket,
            target.name_any()
        );
        Blocked::new(Reason::BucketNotReady, msg)
    })
}

/// S3 refuses logging into a bucket whose policy does not grant it yet. The grant is written by
/// the target's own pass, which the same change wakes and which may run just after this one:
/// retried with backoff rather than reported as a spec to fix.
pub fn target_not_granted_yet(mut e: crate::aws::Error) -> crate::aws::Error {
    if e.is("InvalidTargetBucketForLogging") {
        e.kind = crate::aws::ErrorKind::Transient;
    }
    e
}

/// Maps a Bucket change to the Buckets it concerns besides itself: the target it logs into
/// (or replicates into) now and the ones before (whose grant changes), and the Buckets that log
/// or replicate into it (whose target changed). Remembers each Bucket's target from the changes it hears.
#[derive(Default)]
pub struct Linked {
    before: Mutex<HashMap<ObjectRef<Bucket>, Vec<String>>>,
}

/// The Bucket objects `b` names: the one it logs into and its replication destinations.
pub fn named(b: &Bucket) -> impl Iterator<Item = &str> {
    target_name(b)
        .into_iter()
        .chain(replication::destination_names(b))
}

impl Linked {
    pub fn related(&self, refs: &Referrers<Bucket>, b: &Bucket) -> Vec<ObjectRef<Bucket>> {
        let ns = b.namespace().unwrap_or_default();
        let me = ObjectRef::from_obj(b);
        let now: Vec<String> = named(b).map(str::to_string).collect();
        let before = {
            let mut before = self.before.lock().expect("linked map poisoned");
            match now.is_empty() {
                // A Bucket being deleted names nothing from now on: its entry goes with it.
                false if b.metadata.deletion_timestamp.is_none() => before.insert(me, now.clone()),
                _ => before.remove(&me),
            }
        };
        let mut out: Vec<ObjectRef<Bucket>> = now
            .into_iter()
            .chain(before.into_iter().flatten())
            .map(|t| ObjectRef::new(&t).within(&ns))
            .chain(refs.naming(&ns, &b.name_any()))
            .collect();
        out.sort_by_key(|r| r.name.clone());
        out.dedup();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{BucketSpec, Logging, LoggingTargetRef};
    use crate::reconcile::bucket::fixtures::named_bucket;

    fn settings() -> Settings {
        Settings::for_tests()
    }

    fn b(ns: &str, name: &str, logs_to: Option<&str>, ready: bool) -> Arc<Bucket> {
        let spec = BucketSpec {
            logging: logs_to.map(|t| Logging {
                target_bucket_ref: Some(LoggingTargetRef { name: t.into() }),
                target_prefix: Some(format!("{name}/")),
            }),
            ..Default::default()
        };
        named_bucket(ns, name, spec, ready)
    }

    fn blocked(r: Result<Option<Option<LogTarget>>, Blocked>) -> Blocked {
        r.expect_err("blocked")
    }

    #[test]
    fn the_target_is_resolved_from_its_spec_and_must_be_ready_and_elsewhere() {
        let s = settings();
        let target = b("ns", "logs", None, true);
        let source = b("ns", "photos", Some("logs"), true);
        let got = wanted(&source, "us-east-1", Some(&target), &s, "us-east-1").unwrap();
        assert_eq!(
            got,
            Some(Some(LogTarget {
                bucket: "s3op-ns-logs".into(),
                prefix: "photos/".into()
            }))
        );
        let why = blocked(wanted(&source, "us-east-1", None, &s, "us-east-1"));
        assert_eq!(why.reason, Reason::BucketNotFound);
        assert!(
            why.message.contains(FIELD) && why.message.contains("logs"),
            "{why}"
        );
        let unready = b("ns", "logs", None, false);
        let why = blocked(wanted(
            &source,
            "us-east-1",
            Some(&unready),
            &s,
            "us-east-1",
        ));
        assert!(
            why.message.contains(FIELD) && why.message.contains("not Ready"),
            "{why}"
        );
        let why = blocked(wanted(&source, "eu-west-1", Some(&target), &s, "us-east-1"));
        assert!(why.message.contains("region"), "{why}");
        let selfish = b("ns", "photos", Some("photos"), true);
        let why = blocked(wanted(
            &selfish,
            "us-east-1",
            Some(&selfish),
            &s,
            "us-east-1",
        ));
        assert_eq!(why.reason, Reason::InvalidSpec);
        assert!(
            why.message.contains(FIELD) && why.message.contains("itself"),
            "{why}"
        );
    }

    #[test]
    fn omitted_is_unmanaged_and_empty_turns_logging_off() {
        let s = settings();
        let plain = b("ns", "plain", None, true);
        assert_eq!(
            wanted(&plain, "us-east-1", None, &s, "us-east-1").unwrap(),
            None
        );
        let mut off = (*plain).clone();
        off.spec.logging = Some(Logging::default());
        assert_eq!(
            wanted(&off, "us-east-1", None, &s, "us-east-1").unwrap(),
            Some(None)
        );
    }

    #[test]
    fn the_grant_names_exactly_the_sources_of_the_targets_namespace() {
        let s = settings();
        let target = b("ns", "logs", None, true);
        let mut leaving = (*b("ns", "leaving", Some("logs"), true)).clone();
        leaving.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now()),
        );
        let all = vec![
            target.clone(),
            b("ns", "photos", Some("logs"), false),
            b("ns", "docs", Some("logs"), true),
            b("ns", "other", Some("elsewhere"), true),
            b("ns", "plain", None, true),
            // Same object name in another namespace: never granted.
            b("intruder", "spy", Some("logs"), true),
            Arc::new(leaving),
        ];
        let arns = sources(&target, &all, &s, "us-east-1");
        assert_eq!(
            arns,
            ["arn:aws:s3:::s3op-ns-docs", "arn:aws:s3:::s3op-ns-photos"]
        );
        let doc = policy::bucket_policy("arn:aws:s3:::s3op-ns-logs", &[]);
        let doc = with_grant(doc, "arn:aws:s3:::s3op-ns-logs", &arns, &s.account_id);
        let grant = &doc["Statement"][1];
        assert_eq!(grant["Sid"], policy::LOGGING_SID);
        assert_eq!(grant["Principal"]["Service"], policy::LOGGING_SERVICE);
        assert_eq!(grant["Resource"], "arn:aws:s3:::s3op-ns-logs/*");
        assert_eq!(
            grant["Condition"]["ArnLike"]["aws:SourceArn"],
            serde_json::json!(arns)
        );
        assert_eq!(
            grant["Condition"]["StringEquals"]["aws:SourceAccount"],
            "123456789012"
        );
        // No sources: no grant, the policy is the TLS-only statement alone.
        let lone = with_grant(
            policy::bucket_policy("arn:aws:s3:::s3op-ns-plain", &[]),
            "arn:aws:s3:::s3op-ns-plain",
            &sources(&all[4], &all, &s, "us-east-1"),
            &s.account_id,
        );
        assert_eq!(lone["Statement"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn links_change_their_fingerprint_when_either_end_changes() {
        let s = settings();
        let target = b("ns", "logs", None, true);
        let source = b("ns", "photos", Some("logs"), true);
        let all = vec![target.clone(), source.clone()];
        let as_target = links(&target, &all, &s, "us-east-1");
        let as_source = links(&source, &all, &s, "us-east-1");
        assert_eq!(as_target.sources, ["arn:aws:s3:::s3op-ns-photos"]);
        assert_eq!(
            as_source.target.as_deref().map(|t| t.name_any()),
            Some("logs".into())
        );
        let alone = links(&target, &all[..1], &s, "us-east-1");
        assert_ne!(alone.fingerprint(), as_target.fingerprint());
        let mut newer = (*target).clone();
        newer.metadata.resource_version = Some("8".into());
        let moved = links(&source, &[Arc::new(newer), source.clone()], &s, "us-east-1");
        assert_ne!(moved.fingerprint(), as_source.fingerprint());
        // A Bucket linked to nothing has the same fingerprint forever.
        let plain = b("ns", "plain", None, true);
        assert_eq!(links(&plain, &all, &s, "us-east-1").fingerprint(), "|");
    }

    /// A pass looks only at the Buckets it names and those naming it, and finds what a look at
    /// every cached Bucket finds: its target, its sources of its namespace, its destinations.
    #[tokio::test]
    async fn a_pass_finds_its_links_from_the_index_as_from_the_whole_cache() {
        let target = b("ns", "logs", None, true);
        let mut all: Vec<Arc<Bucket>> = (0..50)
            .map(|i| b("ns", &format!("plain-{i}"), None, true))
            .collect();
        all.extend([
            target.clone(),
            b("ns", "photos", Some("logs"), true),
            b("ns", "videos", Some("logs"), true),
            b("other", "photos", Some("logs"), true),
            b("ns", "looped", Some("looped"), true),
        ]);
        let objects: Vec<Bucket> = all.iter().map(|o| (**o).clone()).collect();
        let ctx = crate::reconcile::Context {
            buckets: vec![crate::reconcile::refs::Buckets::of(&objects)],
            ..crate::reconcile::Context::for_tests()
        };
        let cx = InAccount::home(&ctx);
        for o in &all {
            let from_index = links_in(o, &cx);
            let from_all = links(o, &all, &cx.settings, &cx.aws.region);
            assert_eq!(
                from_index.fingerprint(),
                from_all.fingerprint(),
                "{}",
                o.name_any()
            );
        }
        let of_target = links_in(&target, &cx);
        assert_eq!(
            of_target.sources,
            ["arn:aws:s3:::s3op-ns-photos", "arn:aws:s3:::s3op-ns-videos"]
        );
        let source = all.iter().find(|o| o.name_any() == "photos").unwrap();
        let of_source = links_in(source, &cx);
        assert_eq!(of_source.target.map(|t| t.name_any()), Some("logs".into()));
        // A Bucket no cache holds has no links.
        let stray = b("ns", "stray", Some("logs"), true);
        assert!(links_in(&stray, &cx).target.is_none());
    }

    #[test]
    fn a_change_wakes_the_old_and_new_targets_and_the_sources() {
        let reader = crate::reconcile::refs::buckets();
        let target = b("ns", "logs", None, true);
        let source = b("ns", "photos", Some("logs"), true);
        for o in [&target, &source, &b("other", "x", Some("logs"), true)] {
            reader.put(o);
        }
        let linked = Linked::default();
        let names = |v: Vec<ObjectRef<Bucket>>| {
            v.into_iter()
                .map(|r| format!("{}/{}", r.namespace.unwrap_or_default(), r.name))
                .collect::<Vec<_>>()
        };
        assert_eq!(names(linked.related(&reader, &source)), ["ns/logs"]);
        // The target changed: its sources of its namespace only.
        assert_eq!(names(linked.related(&reader, &target)), ["ns/photos"]);
        // The source moved to another target: both targets hear of it.
        let moved = b("ns", "photos", Some("archive"), true);
        assert_eq!(
            names(linked.related(&reader, &moved)),
            ["ns/archive", "ns/logs"]
        );
        // It stopped logging: the last target hears of it, and then nobody.
        let stopped = b("ns", "photos", None, true);
        assert_eq!(names(linked.related(&reader, &stopped)), ["ns/archive"]);
        assert!(linked.related(&reader, &stopped).is_empty());
        // A source being deleted wakes its target once and leaves nothing remembered.
        let mut deleted = (*b("ns", "photos", Some("logs"), true)).clone();
        deleted.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now()),
        );
        assert_eq!(names(linked.related(&reader, &deleted)), ["ns/logs"]);
        assert!(linked.before.lock().unwrap().is_empty());
    }

    #[test]
    fn logs_go_only_to_a_bucket_its_bucket_holds() {
        let s = settings();
        let target = b("ns", "logs", None, true);
        let to = LogTarget {
            bucket: "s3op-ns-logs".into(),
            prefix: "photos/".into(),
        };
        let held = crate::aws::tags::with_ownership(&Default::default(), &owner(&*target, "c"));
        assert_eq!(
            target_not_held(&to, &target, Some(&held), &s.cluster_name),
            None
        );
        // Gone, or held by anyone else (whatever the target's status says): refused.
        let other = owner(&*b("ns", "other", None, true), "c");
        let elsewhere = crate::aws::tags::with_ownership(&Default::default(), &other);
        for tags in [None, Some(&elsewhere), Some(&Default::default())] {
            let why = target_not_held(&to, &target, tags, &s.cluster_name).expect("refused");
            assert_eq!(why.reason, Reason::BucketNotReady);
            assert!(
                why.message.contains(FIELD) && why.message.contains("s3op-ns-logs"),
                "{why}"
            );
        }
    }

    #[test]
    fn managed_logging_is_planned_kept_and_corrected_and_unmanaged_is_not() {
        use crate::reconcile::bucket::{BucketState, Change, Found, Plan, plan};
        let s = settings();
        let source = b("ns", "photos", Some("logs"), true);
        let o = owner(source.as_ref(), &s.cluster_name);
        let mut d = bucket::desired(&source, &s, "us-east-1", &o).unwrap();
        let to = LogTarget {
            bucket: "s3op-ns-logs".into(),
            prefix: "photos/".into(),
        };
        d.logging = Some(Some(to.clone()));
        let Plan::Apply(created) = plan(&d, &Found::Absent) else {
            panic!()
        };
        assert_eq!(created.last(), Some(&Change::Logging));
        assert_eq!(Change::Logging.aspect(), "logging");
        let converged = BucketState {
            tags: d.tags.clone(),
            public_access_block: Some(d.public_access_block),
            encryption: Some(d.encryption.clone()),
            policy: d.policy.clone().ok(),
            logging: Some(Some(to.clone())),
            ..Default::default()
        };
        let with = |logging| {
            Found::Present(Box::new(BucketState {
                logging,
                ..converged.clone()
            }))
        };
        assert_eq!(plan(&d, &with(Some(Some(to.clone())))), Plan::Apply(vec![]));
        let elsewhere = LogTarget {
            prefix: "other/".into(),
            ..to.clone()
        };
        for drifted in [Some(None), Some(Some(elsewhere))] {
            assert_eq!(
                plan(&d, &with(drifted.clone())),
                Plan::Apply(vec![Change::Logging]),
                "{drifted:?}"
            );
        }
        // Off and kept off: a new bucket needs no write; an existing one that logs is turned off.
        d.logging = Some(None);
        let Plan::Apply(created) = plan(&d, &Found::Absent) else {
            panic!()
        };
        assert!(!created.contains(&Change::Logging));
        assert_eq!(
            plan(&d, &with(Some(Some(to.clone())))),
            Plan::Apply(vec![Change::Logging])
        );
        // Unmanaged: whatever S3 holds stays.
        d.logging = None;
        assert_eq!(plan(&d, &with(None)), Plan::Apply(vec![]));
    }
}
