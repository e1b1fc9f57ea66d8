//! What a BucketAccessClass makes of a BucketAccess: its rotation default filled in where the
//! access sets none, then its limits checked against the result. Pure: the pass resolves the
//! class and reports what this returns.

use std::borrow::Cow;
use std::fmt::Display;
use std::time::Duration;

use kube::ResourceExt;

use super::Classes;
use crate::api::condition::Reason;
use crate::api::{BucketAccess, BucketAccessClass, BucketAccessSpec, CredentialsType};
use crate::reconcile::{Blocked, Error};

/// The class an access is under (none when no class applies), or the violation that naming it
/// is (a class that does not exist, or whose selector leaves the namespace out).
pub type InForce = super::InForce<BucketAccessClass>;
pub use super::{name, version};

/// The class `access` is under, as the watches see it now. A namespace not seen yet is an
/// error (retried), not a violation.
pub fn in_force(classes: &Classes, access: &BucketAccess) -> Result<InForce, Error> {
    let ns = access.namespace().ok_or(Error::NoNamespace)?;
    super::violation(classes.access_class(&ns, access.spec.class_name.as_deref()))
}

/// The access as the pass works from it: the class's defaults filled in, its limits kept
/// (else the violation, naming field, class and rule). `floor` is the operator's
/// `--min-rotation-interval`, which the plan enforces on an access's own interval; a class
/// default below it is the class's fault and reported as such.
pub fn admit<'a>(
    access: &'a BucketAccess,
    class: &InForce,
    floor: Duration,
) -> Result<Cow<'a, BucketAccess>, Blocked> {
    let Some(class) = class.clone()? else {
        return Ok(Cow::Borrowed(access));
    };
    let spec = with_defaults(&access.spec, &class);
    if access.spec.credentials.rotation.is_none()
        && let Some(r) = &spec.credentials.rotation
        && r.interval < floor
    {
        let rule = format!(
            "its rotation.default interval {} is shorter than the operator's --min-rotation-interval {}",
            human(r.interval),
            human(floor)
        );
        return Err(breaks("spec.credentials.rotation", "unset", &class, rule));
    }
    check(&spec, &class)?;
    Ok(Cow::Owned(BucketAccess {
        spec,
        ..access.clone()
    }))
}

/// `spec` with what `class` fills in: the rotation of an `AccessKey` access that sets none,
/// and the management mode.
pub fn with_defaults(spec: &BucketAccessSpec, class: &BucketAccessClass) -> BucketAccessSpec {
    let mut spec = spec.clone();
    spec.management = spec.management.or(class.spec.default_management);
    let credentials = &mut spec.credentials;
    if credentials.type_ == CredentialsType::AccessKey && credentials.rotation.is_none() {
        credentials.rotation = class.spec.rotation.as_ref().and_then(|r| r.default.clone());
    }
    spec
}

/// The first limit of `class` that `spec` (already defaulted) breaks.
pub fn check(spec: &BucketAccessSpec, class: &BucketAccessClass) -> Result<(), Blocked> {
    let c = &class.spec;
    let kind = spec.credentials.type_;
    if !c.allowed_credential_types.is_empty() && !c.allowed_credential_types.contains(&kind) {
        let rule = format!("allowedCredentialTypes is {:?}", c.allowed_credential_types);
        let value = format_args!("{kind:?}");
        return Err(breaks("spec.credentials.type", value, class, rule));
    }
    // Every Bucket the access grants keeps to the same rules: another Bucket of the list is
    // no way around them.
    let grants = std::iter::once(("spec".to_string(), spec.permission, spec.prefix.as_ref()))
        .chain(spec.additional_buckets.iter().enumerate().map(|(i, g)| {
            let at = format!("spec.additionalBuckets[{i}]");
            (at, g.permission, g.prefix.as_ref())
        }));
    for (at, permission, prefix) in grants {
        if !c.allowed_permissions.is_empty() && !c.allowed_permissions.contains(&permission) {
            let rule = format!("allowedPermissions is {:?}", c.allowed_permissions);
            let value = format_args!("{permission:?}");
            return Err(breaks(&format!("{at}.permission"), value, class, rule));
        }
        if c.require_prefix && prefix.is_none() {
            let rule = "requirePrefix is true";
            return Err(breaks(&format!("{at}.prefix"), "unset", class, rule));
        }
    }
    let buckets = 1 + spec.additional_buckets.len();
    if let Some(max) = c.max_buckets
        && buckets > usize::from(max)
    {
        let rule = format!("maxBuckets is {max}");
        let value = format_args!("{buckets} Buckets");
        return Err(breaks("spec.additionalBuckets", value, class, rule));
    }
    let mode = spec.management.unwrap_or_default();
    if !c.allowed_management_modes.is_empty() && !c.allowed_management_modes.contains(&mode) {
        let rule = format!("allowedManagementModes is {:?}", c.allowed_management_modes);
        return Err(breaks(
            "spec.management",
            format_args!("{mode:?}"),
            class,
            rule,
        ));
    }
    check_rotation(spec, class)
}

/// The rotation bounds, for access keys (a role has no keys to rotate). A maximum means every
/// key must rotate.
fn check_rotation(spec: &BucketAccessSpec, class: &BucketAccessClass) -> Result<(), Blocked> {
    let Some(bounds) = &class.spec.rotation else {
        return Ok(());
    };
    if spec.credentials.type_ != CredentialsType::AccessKey {
        return Ok(());
    }
    let field = "spec.credentials.rotation.interval";
    match (&spec.credentials.rotation, bounds.minimum, bounds.maximum) {
        (None, _, Some(max)) => {
            let max = human(max);
            let rule = format!("rotation.maximum is {max}, so AccessKey credentials must rotate");
            Err(breaks("spec.credentials.rotation", "unset", class, rule))
        }
        (Some(r), Some(min), _) if r.interval < min => {
            let rule = format!("rotation.minimum is {}", human(min));
            Err(breaks(field, human(r.interval), class, rule))
        }
        (Some(r), _, Some(max)) if r.interval > max => {
            let rule = format!("rotation.maximum is {}", human(max));
            Err(breaks(field, human(r.interval), class, rule))
        }
        _ => Ok(()),
    }
}

/// The violation: `field` (at `value`) breaks `rule` of `class`.
fn breaks(
    field: &str,
    value: impl Display,
    class: &BucketAccessClass,
    rule: impl Display,
) -> Blocked {
    let msg = format!(
        "{field} {value} breaks BucketAccessClass {}: {rule}",
        class.name_any()
    );
    Blocked::new(Reason::ClassViolation, msg)
}

/// A duration as people write it (`48h`, `90m`), not in seconds.
fn human(d: impl Into<Duration>) -> String {
    let d = jiff::SignedDuration::try_from(d.into()).unwrap_or(jiff::SignedDuration::MAX);
    format!("{d:#}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use crate::api::BucketAccessClassSpec;
    use serde_json::{Value, json};

    fn class(spec: Value) -> BucketAccessClass {
        let spec: BucketAccessClassSpec = serde_json::from_value(spec).unwrap();
        BucketAccessClass::new("sandbox", spec)
    }

    fn access(spec: Value) -> BucketAccess {
        let mut spec = spec;
        spec["bucketRef"] = json!({"name": "b"});
        serde_json::from_value(json!({
            "apiVersion": "s3.operator.dev/v1alpha1", "kind": "BucketAccess",
            "metadata": {"name": "a", "namespace": "team-a"},
            "spec": spec,
        }))
        .unwrap()
    }

    const FLOOR: Duration = Duration::from_secs(10);

    fn refused(a: Value, c: Value) -> String {
        let class: InForce = Ok(Some(Arc::new(class(c))));
        let why = admit(&access(a), &class, FLOOR).unwrap_err();
        assert_eq!(why.reason, Reason::ClassViolation);
        why.message
    }

    fn rotation(a: &BucketAccess) -> Option<(String, String)> {
        let r = a.spec.credentials.rotation.as_ref()?;
        Some((human(r.interval), human(r.grace_period)))
    }

    #[test]
    fn the_rotation_default_fills_only_an_access_key_access_that_sets_none() {
        let c: InForce = Ok(Some(Arc::new(class(json!({
            "rotation": {"default": {"interval": "720h", "gracePeriod": "1h"}}
        })))));
        let unset = access(json!({"permission": "ReadOnly"}));
        let got = admit(&unset, &c, FLOOR).unwrap();
        assert_eq!(rotation(&got), Some(("720h".into(), "1h".into())));
        let own = access(json!({"permission": "ReadOnly",
            "credentials": {"rotation": {"interval": "24h", "gracePeriod": "10m"}}}));
        let got = admit(&own, &c, FLOOR).unwrap();
        assert_eq!(rotation(&got), Some(("24h".into(), "10m".into())));
        let role = access(json!({"permission": "ReadOnly",
            "credentials": {"type": "ServiceAccountRole", "serviceAccountName": "app"}}));
        assert_eq!(rotation(&admit(&role, &c, FLOOR).unwrap()), None);
        // No class: the access as it is.
        assert!(matches!(
            admit(&unset, &Ok(None), FLOOR),
            Ok(Cow::Borrowed(_))
        ));
    }

    #[test]
    fn each_limit_is_refused_naming_field_class_and_rule() {
        let types = json!({"allowedCredentialTypes": ["ServiceAccountRole"]});
        assert_eq!(
            refused(json!({"permission": "ReadOnly"}), types),
            "spec.credentials.type AccessKey breaks BucketAccessClass sandbox: allowedCredentialTypes is [ServiceAccountRole]"
        );
        let pod = json!({"permission": "ReadOnly",
            "credentials": {"type": "PodIdentity", "serviceAccountName": "app"}});
        let types = json!({"allowedCredentialTypes": ["ServiceAccountRole"]});
        assert_eq!(
            refused(pod, types),
            "spec.credentials.type PodIdentity breaks BucketAccessClass sandbox: allowedCredentialTypes is [ServiceAccountRole]"
        );
        let perms = json!({"allowedPermissions": ["ReadOnly"]});
        assert_eq!(
            refused(json!({"permission": "ReadWrite"}), perms),
            "spec.permission ReadWrite breaks BucketAccessClass sandbox: allowedPermissions is [ReadOnly]"
        );
        let prefix = json!({"requirePrefix": true});
        assert_eq!(
            refused(json!({"permission": "ReadOnly"}), prefix),
            "spec.prefix unset breaks BucketAccessClass sandbox: requirePrefix is true"
        );
        // Another Bucket of the access is no way around the rules.
        let other = |permission: &str, prefix: Option<&str>| {
            json!({"permission": "ReadOnly", "prefix": "p/", "additionalBuckets": [
                {"bucketRef": {"name": "c"}, "permission": permission, "prefix": prefix}]})
        };
        assert_eq!(
            refused(
                other("ReadWrite", Some("p/")),
                json!({"allowedPermissions": ["ReadOnly"]})
            ),
            "spec.additionalBuckets[0].permission ReadWrite breaks BucketAccessClass sandbox: allowedPermissions is [ReadOnly]"
        );
        assert_eq!(
            refused(other("ReadOnly", None), json!({"requirePrefix": true})),
            "spec.additionalBuckets[0].prefix unset breaks BucketAccessClass sandbox: requirePrefix is true"
        );
        assert_eq!(
            refused(other("ReadOnly", Some("p/")), json!({"maxBuckets": 1})),
            "spec.additionalBuckets 2 Buckets breaks BucketAccessClass sandbox: maxBuckets is 1"
        );
        let modes = json!({"allowedManagementModes": ["Manage"]});
        assert_eq!(
            refused(
                json!({"permission": "ReadOnly", "management": "Observe"}),
                modes
            ),
            "spec.management Observe breaks BucketAccessClass sandbox: allowedManagementModes is [Manage]"
        );
        // The class's own default is held to its own list too.
        let modes = json!({"allowedManagementModes": ["Observe"], "defaultManagement": "Manage"});
        assert_eq!(
            refused(json!({"permission": "ReadOnly"}), modes),
            "spec.management Manage breaks BucketAccessClass sandbox: allowedManagementModes is [Observe]"
        );
    }

    #[test]
    fn the_class_default_management_fills_only_an_access_that_sets_none() {
        use crate::api::Management;
        let c: InForce = Ok(Some(Arc::new(class(
            json!({"defaultManagement": "Observe"}),
        ))));
        let unset = access(json!({"permission": "ReadOnly"}));
        let got = admit(&unset, &c, FLOOR).unwrap();
        assert_eq!(got.spec.management, Some(Management::Observe));
        let own = access(json!({"permission": "ReadOnly", "management": "Manage"}));
        let got = admit(&own, &c, FLOOR).unwrap();
        assert_eq!(got.spec.management, Some(Management::Manage));
    }

    #[test]
    fn what_a_class_allows_passes() {
        let c: InForce = Ok(Some(Arc::new(class(json!({
            "allowedCredentialTypes": ["AccessKey"], "allowedPermissions": ["ReadOnly", "WriteOnly"],
            "requirePrefix": true, "rotation": {"minimum": "1h", "maximum": "48h"}
        })))));
        let ok = access(json!({"permission": "WriteOnly", "prefix": "in/",
            "credentials": {"rotation": {"interval": "1h", "gracePeriod": "10m"}}}));
        assert!(admit(&ok, &c, FLOOR).is_ok());
        let ok = access(json!({"permission": "ReadOnly", "prefix": "in/",
            "credentials": {"rotation": {"interval": "48h", "gracePeriod": "10m"}}}));
        assert!(admit(&ok, &c, FLOOR).is_ok(), "the bounds are inclusive");
        // An empty class limits nothing.
        let any = access(json!({"permission": "ReadWrite"}));
        assert!(admit(&any, &Ok(Some(Arc::new(class(json!({}))))), FLOOR).is_ok());
    }

    #[test]
    fn the_rotation_interval_keeps_within_the_bounds_and_a_maximum_means_rotate() {
        let bounds = json!({"rotation": {"minimum": "1h", "maximum": "48h"}});
        let every = |i: &str| {
            json!({"permission": "ReadOnly",
                "credentials": {"rotation": {"interval": i, "gracePeriod": "1s"}}})
        };
        assert_eq!(
            refused(every("30m"), bounds.clone()),
            "spec.credentials.rotation.interval 30m breaks BucketAccessClass sandbox: rotation.minimum is 1h"
        );
        assert_eq!(
            refused(every("49h"), bounds.clone()),
            "spec.credentials.rotation.interval 49h breaks BucketAccessClass sandbox: rotation.maximum is 48h"
        );
        assert_eq!(
            refused(json!({"permission": "ReadOnly"}), bounds.clone()),
            "spec.credentials.rotation unset breaks BucketAccessClass sandbox: rotation.maximum is 48h, so AccessKey credentials must rotate"
        );
        // A role has no keys: the bounds do not reach it.
        let role = access(json!({"permission": "ReadOnly",
            "credentials": {"type": "ServiceAccountRole", "serviceAccountName": "app"}}));
        assert!(admit(&role, &Ok(Some(Arc::new(class(bounds)))), FLOOR).is_ok());
        assert_eq!(
            human(Duration::from_secs(5400)),
            "1h 30m",
            "as people write it"
        );
        // Only a minimum: no rotation at all is allowed.
        let min = json!({"rotation": {"minimum": "1h"}});
        let c: InForce = Ok(Some(Arc::new(class(min))));
        assert!(admit(&access(json!({"permission": "ReadOnly"})), &c, FLOOR).is_ok());
    }

    /// The operator's floor stays: a class default below it is refused as the class's doing (an
    /// access's own interval below it is the plan's refusal, whatever the class's minimum).
    #[test]
    fn a_class_default_below_the_operators_floor_is_the_class_violation() {
        let c = json!({"rotation": {"default": {"interval": "1m", "gracePeriod": "10s"}}});
        let class: InForce = Ok(Some(Arc::new(class(c))));
        let a = access(json!({"permission": "ReadOnly"}));
        let why = admit(&a, &class, Duration::from_secs(3600)).unwrap_err();
        assert_eq!(
            why.message,
            "spec.credentials.rotation unset breaks BucketAccessClass sandbox: its rotation.default interval 1m is shorter than the operator's --min-rotation-interval 1h"
        );
        assert!(admit(&a, &class, Duration::from_secs(60)).is_ok());
    }

    /// A class that cannot be used is the violation itself; its version and name say so.
    #[test]
    fn the_class_in_force_is_reported_and_versioned() {
        let mut c = class(json!({}));
        c.metadata.resource_version = Some("7".into());
        let c: InForce = Ok(Some(Arc::new(c)));
        assert_eq!(
            (name(&c), version(&c)),
            (Some("sandbox".into()), "sandbox@7".into())
        );
        let none: InForce = Ok(None);
        assert_eq!((name(&none), version(&none)), (None, String::new()));
        let bad: InForce = Err(Blocked::new(Reason::ClassViolation, "no such class"));
        assert_eq!(name(&bad), None);
        let why = admit(&access(json!({"permission": "ReadOnly"})), &bad, FLOOR).unwrap_err();
        assert_eq!(why.message, "no such class");
    }
}
