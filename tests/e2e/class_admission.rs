//! The optional ValidatingAdmissionPolicies of config/admission: `kubectl apply` of a Bucket or
//! BucketAccess that breaks the class it names is refused by the API server itself, with the
//! operator's message, and no webhook. The policies are shipped as they are; the test binds them
//! with its own binding, limited to its namespace and its classes, so no other test meets them.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::*;

const POLICIES: [&str; 2] = [
    "config/admission/bucket_class_policy.yaml",
    "config/admission/bucket_access_class_policy.yaml",
];

/// The shipped documents of `path`: the policy applied as it is, its binding returned.
fn policy_and_binding(path: &str) -> (Value, Value) {
    let text = std::fs::read_to_string(repo().join(path)).unwrap();
    let docs: Vec<Value> = serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect();
    let of = |kind: &str| docs.iter().find(|d| d["kind"] == kind).cloned().unwrap();
    (
        of("ValidatingAdmissionPolicy"),
        of("ValidatingAdmissionPolicyBinding"),
    )
}

/// `kubectl apply` of `doc` in `ns`: Ok(stdout) or Err(stderr).
fn kubectl_apply(ns: &str, doc: &Value) -> Result<String, String> {
    apply_with(ns, doc, &[])
}

fn apply_with(ns: &str, doc: &Value, extra: &[&str]) -> Result<String, String> {
    let mut args = vec!["apply", "-n", ns, "-f", "-"];
    args.extend_from_slice(extra);
    let (code, out, err) = try_tool("kubectl", &args, Some(&doc.to_string()));
    if code == 0 { Ok(out) } else { Err(err) }
}

/// Waits until the API server enforces both bindings: probed with server-side dry runs, which
/// admission judges like real requests but which create nothing (an object created by a probe
/// that came too early would make the next probe an update of an unchanged spec, which the
/// policies rightly let through).
async fn wait_enforced(ns: &str, probes: [&Value; 2]) -> Vec<String> {
    let mut refusals = Vec::new();
    for probe in probes {
        let refusal = wait_for(
            "the binding to be enforced",
            Duration::from_secs(30),
            || {
                let r = apply_with(ns, probe, &["--dry-run=server"]).err();
                async move { r }
            },
        )
        .await;
        refusals.push(refusal);
    }
    refusals
}

fn object(kind: &str, name: &str, spec: Value) -> Value {
    json!({"apiVersion": "s3.operator.dev/v1alpha1", "kind": kind,
           "metadata": {"name": name}, "spec": spec})
}

#[tokio::test]
async fn class_violations_are_refused_at_apply_time() {
    install_crds().await;
    for kind in ["bucketclasses", "bucketaccessclasses"] {
        apply_crds(&repo().join(format!("config/crd/bases/s3.operator.dev_{kind}.yaml"))).await;
    }
    let ns = namespace(&admin().await, "vap").await;
    let tag = random(5);
    let class = format!("e2e-prod-{tag}");
    let label = json!({"e2e-admission": tag});
    for (kind, spec) in [
        (
            "BucketClass",
            json!({"defaults": {"versioning": "Enabled"},
                   "constraints": {"requiredEncryption": "aws:kms", "allowForceDelete": false,
                                   "allowedRegions": [env().region]}}),
        ),
        (
            "BucketAccessClass",
            json!({"allowedPermissions": ["ReadOnly", "ReadWrite"],
                   "rotation": {"maximum": "720h"}, "maxBuckets": 2}),
        ),
    ] {
        let mut c = object(kind, &class, spec);
        c["metadata"]["labels"] = label.clone();
        kubectl_apply(&ns, &c).unwrap();
    }
    let mut bindings = Vec::new();
    for path in POLICIES {
        let (policy, mut binding) = policy_and_binding(path);
        kubectl_apply(&ns, &policy).unwrap();
        let name = format!("{}-{tag}", binding["metadata"]["name"].as_str().unwrap());
        binding["metadata"]["name"] = json!(name);
        binding["spec"]["paramRef"]["selector"] = json!({"matchLabels": label});
        binding["spec"]["matchResources"] = json!({"namespaceSelector": {"matchLabels":
            {"kubernetes.io/metadata.name": ns}}});
        kubectl_apply(&ns, &binding).unwrap();
        bindings.push(name);
    }

    // The API server starts enforcing a new binding within moments.
    let force = object(
        "Bucket",
        "forced",
        json!({"className": class, "encryption": {"algorithm": "aws:kms"}, "forceDelete": true}),
    );
    let write_only = object(
        "BucketAccess",
        "probe",
        json!({"className": class, "bucketRef": {"name": "good"}, "permission": "WriteOnly"}),
    );
    wait_enforced(&ns, [&force, &write_only]).await;
    let refusal = kubectl_apply(&ns, &force).unwrap_err();
    assert!(
        refusal.contains(&format!(
            "spec.forceDelete true breaks BucketClass {class}: constraints.allowForceDelete is false"
        )),
        "{refusal}"
    );
    let sse_s3 = object(
        "Bucket",
        "plain",
        json!({"className": class, "encryption": {"algorithm": "AES256"}}),
    );
    let refusal = kubectl_apply(&ns, &sse_s3).unwrap_err();
    assert!(
        refusal.contains(&format!(
            "spec.encryption.algorithm AES256 breaks BucketClass {class}: constraints.requiredEncryption is aws:kms"
        )),
        "{refusal}"
    );
    let elsewhere = object(
        "Bucket",
        "far",
        json!({"className": class, "region": "ap-south-2", "encryption": {"algorithm": "aws:kms"}}),
    );
    let refusal = kubectl_apply(&ns, &elsewhere).unwrap_err();
    assert!(
        refusal.contains(&format!(
            "spec.region ap-south-2 breaks BucketClass {class}: constraints.allowedRegions is [{}]",
            env().region
        )),
        "{refusal}"
    );

    // What keeps the class is accepted; a later spec change breaking it is refused, while
    // metadata changes and the deletion go through.
    let good = object(
        "Bucket",
        "good",
        json!({"className": class, "encryption": {"algorithm": "aws:kms"}}),
    );
    kubectl_apply(&ns, &good).expect("a Bucket keeping its class is accepted");
    let mut forced = good.clone();
    forced["spec"]["forceDelete"] = json!(true);
    let refusal = kubectl_apply(&ns, &forced).unwrap_err();
    assert!(
        refusal.contains("constraints.allowForceDelete is false"),
        "{refusal}"
    );
    let mut labelled = good.clone();
    labelled["metadata"]["labels"] = json!({"team": "a"});
    kubectl_apply(&ns, &labelled).expect("a metadata change is never judged");
    // Another class's Buckets and class-less Buckets are not this class's business.
    let unclassed = object("Bucket", "free", json!({"forceDelete": true}));
    kubectl_apply(&ns, &unclassed).expect("a Bucket naming no class is left to the operator");

    let access = |name: &str, spec: Value| {
        let mut s = json!({"className": class, "bucketRef": {"name": "good"}});
        s.as_object_mut()
            .unwrap()
            .extend(spec.as_object().unwrap().clone());
        object("BucketAccess", name, s)
    };
    let refusal = kubectl_apply(&ns, &access("w", json!({"permission": "WriteOnly"}))).unwrap_err();
    assert!(
        refusal.contains(&format!(
            "spec.permission WriteOnly breaks BucketAccessClass {class}: allowedPermissions is [ReadOnly, ReadWrite]"
        )),
        "{refusal}"
    );
    // Another Bucket of the access keeps to the same rules, and to the class's maxBuckets.
    let other = |permission: &str| json!({"bucketRef": {"name": "more"}, "permission": permission});
    let sneaked = json!({"permission": "ReadOnly", "additionalBuckets": [other("WriteOnly")]});
    let refusal = kubectl_apply(&ns, &access("sneaked", sneaked)).unwrap_err();
    assert!(
        refusal.contains(&format!(
            "spec.additionalBuckets[].permission breaks BucketAccessClass {class}: allowedPermissions is [ReadOnly, ReadWrite]"
        )),
        "{refusal}"
    );
    let three = json!({"permission": "ReadOnly", "additionalBuckets":
        [other("ReadOnly"), {"bucketRef": {"name": "most"}, "permission": "ReadOnly"}]});
    let refusal = kubectl_apply(&ns, &access("three", three)).unwrap_err();
    assert!(
        refusal.contains(&format!(
            "spec.additionalBuckets: 3 Buckets breaks BucketAccessClass {class}: maxBuckets is 2"
        )),
        "{refusal}"
    );
    let two = json!({"permission": "ReadOnly", "additionalBuckets": [other("ReadOnly")]});
    kubectl_apply(&ns, &access("two", two)).expect("two Buckets within maxBuckets");
    let slow = json!({"permission": "ReadOnly", "credentials":
        {"rotation": {"interval": "1000h", "gracePeriod": "1h"}}});
    let refusal = kubectl_apply(&ns, &access("slow", slow)).unwrap_err();
    assert!(
        refusal.contains("spec.credentials.rotation.interval 1000h breaks BucketAccessClass")
            && refusal.contains("rotation.maximum is 720h"),
        "{refusal}"
    );
    let monthly = json!({"permission": "ReadWrite", "credentials":
        {"rotation": {"interval": "720h", "gracePeriod": "1h"}}});
    kubectl_apply(&ns, &access("monthly", monthly)).expect("rotation within the maximum");

    for name in bindings {
        tool(
            "kubectl",
            &["delete", "validatingadmissionpolicybinding", &name],
            None,
        );
    }
    for kind in ["bucketclass", "bucketaccessclass"] {
        tool("kubectl", &["delete", kind, &class], None);
    }
}

/// The chart renders the same policies under the release's names, bound to them, and the
/// default classes from its values; the API server accepts all of it.
#[tokio::test]
async fn the_chart_renders_the_policies_and_default_classes() {
    install_crds().await;
    for kind in ["bucketclasses", "bucketaccessclasses"] {
        apply_crds(&repo().join(format!("config/crd/bases/s3.operator.dev_{kind}.yaml"))).await;
    }
    let release = format!("r{}", random(5));
    let out = tool(
        "helm",
        &[
            "template",
            &release,
            "charts/s3-operator",
            "--kube-version",
            crate::packaging::KUBE_VERSION,
            "--set",
            "admissionPolicy.enabled=true",
            "--set",
            "classes.bucket.default.enabled=true",
            "--set",
            &format!("classes.bucket.default.name={release}"),
            "--set",
            "classes.bucket.default.constraints.allowForceDelete=false",
            "--set",
            "classes.bucketAccess.default.enabled=true",
            "--set",
            &format!("classes.bucketAccess.default.name={release}"),
            "--set",
            "classes.bucketAccess.default.rotation.maximum=720h",
            "--show-only",
            "templates/admission.yaml",
            "--show-only",
            "templates/classes.yaml",
        ],
        None,
    );
    let rendered: Vec<Value> = serde_yaml::Deserializer::from_str(&out)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|d: &Value| !d.is_null())
        .collect();
    let of =
        |kind: &str| -> Vec<&Value> { rendered.iter().filter(|d| d["kind"] == kind).collect() };
    let (policies, bindings) = (
        of("ValidatingAdmissionPolicy"),
        of("ValidatingAdmissionPolicyBinding"),
    );
    assert_eq!((policies.len(), bindings.len()), (2, 2), "{out}");
    for (i, path) in POLICIES.iter().enumerate() {
        let (policy, binding) = policy_and_binding(path);
        let name = policy["metadata"]["name"].as_str().unwrap();
        let named = name.replacen("s3-operator", &format!("{release}-s3-operator"), 1);
        assert_eq!(policies[i]["metadata"]["name"], json!(named));
        assert_eq!(policies[i]["spec"], policy["spec"], "{path}");
        assert_eq!(bindings[i]["spec"]["policyName"], json!(named));
        assert_eq!(bindings[i]["spec"]["paramRef"], binding["spec"]["paramRef"]);
    }
    for kind in ["BucketClass", "BucketAccessClass"] {
        let class = of(kind);
        assert_eq!(class.len(), 1, "{out}");
        assert_eq!(
            class[0]["metadata"]["annotations"]["s3.operator.dev/is-default-class"],
            "true"
        );
    }
    assert_eq!(
        of("BucketClass")[0]["spec"]["constraints"],
        json!({"allowForceDelete": false})
    );
    assert_eq!(
        of("BucketAccessClass")[0]["spec"]["rotation"],
        json!({"maximum": "720h"})
    );
    tool(
        "kubectl",
        &["apply", "--dry-run=server", "-f", "-"],
        Some(&out),
    );
}
