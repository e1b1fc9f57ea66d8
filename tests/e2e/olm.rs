//! The bundle installed the way users install it from OperatorHub, and the way
//! `operator-sdk run bundle` does (operator-sdk itself cannot be had here): OLM's olm and catalog
//! operators run as Pods on the test node (`hack/olm.sh install`), a file-based catalog image
//! holds the bundle and a previous version (`hack/olm.sh catalog`), and each test subscribes to
//! it with an OperatorGroup for one install mode. OLM resolves the Subscription, unpacks the bundle
//! image, creates the RBAC and the Deployment, and the operator's Pods run with `WATCH_NAMESPACE`
//! from the OperatorGroup.
//!
//! Every test holds `PACKAGE_NAMES` for writing: OLM creates and, with the CSV, deletes the
//! bundle's ClusterRole `s3-operator-metrics-reader`, which the overlays and the chart's release
//! `s3-operator` also ship. The AllNamespaces test also holds `cluster_wide`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Instant;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use s3_operator::api::{Bucket, BucketAccess};
use serde_json::{Value, json};

use crate::node::*;
use crate::packaging::{
    KUBE_VERSION, as_operator, core_flow, install_monitoring_crds, leases_only_in, refused,
};
use crate::support::*;

/// OLM's global catalog namespace (the quickstart's `--namespace`): Subscriptions anywhere may
/// name a CatalogSource there.
const OLM_NS: &str = "olm";
const CATALOG: &str = "s3-operator-catalog";
const PACKAGE: &str = "s3-operator";
const CHANNEL: &str = "candidate";
/// The previous version in the catalog, which the current one replaces in the channel. It runs
/// the operator image's second tag, so that the upgrade rolls the Pods to a new image.
const PREVIOUS: &str = "0.1.0-e2e.0";
/// The CSV's Deployment and ServiceAccount.
const OPERATOR: &str = "s3-operator";

fn csv_name(version: &str) -> String {
    format!("{PACKAGE}.v{version}")
}

/// An API of OLM's `operators.coreos.com` kinds, in `ns`.
async fn olm_api(ns: &str, version: &str, kind: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("operators.coreos.com", version, kind);
    Api::namespaced_with(admin().await, ns, &ApiResource::from_gvk(&gvk))
}

/// Runs hack/olm.sh on the node's environment; returns its stdout.
fn olm_sh(state_dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new(repo().join("hack/olm.sh"))
        .args(args)
        .env("KUBECONFIG", &env().kubeconfig)
        .env("S3OP_ENV_DIR", state_dir)
        .current_dir(repo())
        .stderr(Stdio::inherit())
        .output()
        .expect("hack/olm.sh");
    assert!(out.status.success(), "hack/olm.sh {args:?} failed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

// ---------------------------------------------------------------- OLM and the catalog

static OLM: tokio::sync::OnceCell<PathBuf> = tokio::sync::OnceCell::const_new();

/// OLM on the node and the CatalogSource serving this bundle, once per test binary; returns the
/// directory of the bundle in the catalog (the current version). They stay installed (as on a
/// user's cluster); the environment goes with the run.
async fn olm(node: &Node) -> &'static Path {
    OLM.get_or_init(|| async {
        let started = Instant::now();
        let images = images(node).await;
        // The bundle ships a ServiceMonitor and a PrometheusRule: OLM installs them only where
        // their CRDs exist.
        install_monitoring_crds().await;
        let (state_dir, current, previous) = (
            node.state_dir.clone(),
            format!("{OPERATOR_REPO}:{}", images.tag),
            format!("{OPERATOR_REPO}:{}", images.upgrade_tag),
        );
        let dir = logs_dir().join(format!("olm-{}", random(5)));
        let d = dir.to_str().expect("path").to_string();
        let catalog = tokio::task::spawn_blocking(move || {
            olm_sh(&state_dir, &["install"]);
            let out = olm_sh(&state_dir, &["catalog", &d, &current, PREVIOUS, &previous]);
            out.lines().last().expect("the catalog image").to_string()
        })
        .await
        .expect("installing OLM");
        let source: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "operators.coreos.com/v1alpha1",
            "kind": "CatalogSource",
            "metadata": {"name": CATALOG, "namespace": OLM_NS},
            "spec": {
                "sourceType": "grpc",
                "image": catalog,
                "displayName": "s3-operator (built here)",
                "grpcPodConfig": {"securityContextConfig": "restricted"},
            },
        }))
        .unwrap();
        let api = olm_api(OLM_NS, "v1alpha1", "CatalogSource").await;
        // A CatalogSource left by an earlier run serves that run's catalog (and reports READY
        // for it) until OLM replaces its Pod: start from a new one.
        let _ = api.delete(CATALOG, &Default::default()).await;
        wait_for("an earlier CatalogSource to go", T, || async {
            api.get_opt(CATALOG).await.ok()?.is_none().then_some(())
        })
        .await;
        api.create(&Default::default(), &source)
            .await
            .expect("create the CatalogSource");
        wait_for("the CatalogSource to serve (READY)", T, || async {
            let s = api.get(CATALOG).await.ok()?;
            (s.data["status"]["connectionState"]["lastObservedState"] == "READY").then_some(())
        })
        .await;
        eprintln!(
            "OLM up and the catalog {catalog} served in {:.0?}",
            started.elapsed()
        );
        dir.join(format!("bundle-v{}", env!("CARGO_PKG_VERSION")))
    })
    .await
}

// ---------------------------------------------------------------- one installation

/// An OperatorGroup and a Subscription in `ns` (the operator's namespace), and what they made.
struct Install {
    ns: String,
    /// The OperatorGroup's target namespaces; empty for AllNamespaces.
    targets: Vec<String>,
    /// The installation's name in AWS (CLUSTER_NAME), under its own permissions boundary.
    cluster: String,
    scene: Scene,
}

impl Install {
    /// Subscribes `ns` to the package for `targets`, with `starting` as the first CSV and manual
    /// approval when given (approve with `approve`), automatic otherwise.
    async fn subscribe(
        node: &Node,
        ns: &str,
        targets: &[String],
        unwatched: &[String],
        starting: Option<&str>,
    ) -> Install {
        let cluster = format!("o{}", random(6));
        let mut all: Vec<&str> = vec![ns, OLM_NS];
        all.extend(targets.iter().chain(unwatched).map(String::as_str));
        let mut scene = Scene::new(&all);
        Self::explain_with_olm(&mut scene, ns);
        Self::clear_earlier_installs(&mut scene, ns, targets, unwatched).await;
        Self::create_subscription(node, ns, &cluster, targets, starting).await;
        Install {
            ns: ns.to_string(),
            targets: targets.to_vec(),
            cluster,
            scene,
        }
    }

    /// What a failure shows of OLM: the objects it made of the Subscription and their status,
    /// then the logs of OLM's operators.
    fn explain_with_olm(scene: &mut Scene, ns: &str) {
        for n in [ns, OLM_NS] {
            let kinds =
                "catalogsources,subscriptions,installplans,clusterserviceversions,operatorgroups";
            scene
                .explain
                .push(strings(&["get", kinds, "-n", n, "-o", "wide"]));
            let status =
                r#"jsonpath={range .items[*]}{.kind}/{.metadata.name}: {.status}{"\n"}{end}"#;
            scene
                .explain
                .push(strings(&["get", kinds, "-n", n, "-o", status]));
        }
        for d in ["olm-operator", "catalog-operator"] {
            let dep = format!("deployment/{d}");
            scene
                .explain
                .push(strings(&["logs", "-n", OLM_NS, &dep, "--tail", "100"]));
        }
    }

    /// Makes the target namespaces and removes what an earlier install in `ns` left.
    async fn clear_earlier_installs(
        scene: &mut Scene,
        ns: &str,
        targets: &[String],
        unwatched: &[String],
    ) {
        for t in targets.iter().chain(unwatched) {
            ensure_namespace(t).await;
            scene.undo.push(Undo::Release(t.clone()));
        }
        // The Subscription first, so OLM does not install a newer CSV while the CSVs go.
        for what in ["subscription", "clusterserviceversions", "operatorgroup"] {
            scene.run(
                "kubectl",
                &[
                    "delete",
                    what,
                    "--all",
                    "-n",
                    ns,
                    "--wait",
                    "--timeout",
                    "90s",
                ],
            );
        }
        // OLM removes the bundle's cluster-scoped objects (the metrics-reader ClusterRole, which
        // other packages ship too) some time after their CSV: wait, so the next install of the
        // same names does not meet them.
        scene.run(
            "kubectl",
            &[
                "wait",
                "--for=delete",
                "clusterrole/s3-operator-metrics-reader",
                "--timeout",
                "120s",
            ],
        );
        let mut gone: Vec<String> = vec!["delete".into(), "namespace".into(), ns.into()];
        gone.extend(
            targets
                .iter()
                .chain(unwatched)
                .filter(|t| *t != ns)
                .cloned(),
        );
        gone.push("--wait=false".into());
        scene.run(
            "kubectl",
            &gone.iter().map(String::as_str).collect::<Vec<_>>(),
        );
    }

    /// What a user sets for their AWS account before subscribing: the installation's name and
    /// the endpoint (moto on the node's bridge) in the ConfigMap the CSV reads with envFrom,
    /// beside the key pair's Secret.
    async fn create_settings(node: &Node, ns: &str, cluster: &str) {
        let settings: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "s3-operator-config"},
            "data": {
                "CLUSTER_NAME": cluster,
                "AWS_ENDPOINT_URL": node.aws_endpoint,
                "AWS_REGION": env().region,
                "RUST_LOG": "info,s3_operator=debug",
            },
        }))
        .unwrap();
        Api::namespaced(admin().await, ns)
            .create(&Default::default(), &settings)
            .await
            .expect("create the settings ConfigMap");
    }

    /// The key pair's Secret, the settings ConfigMap, the OperatorGroup and the Subscription.
    async fn create_subscription(
        node: &Node,
        ns: &str,
        cluster: &str,
        targets: &[String],
        starting: Option<&str>,
    ) {
        let key = operator_key(cluster).await;
        create_aws_secret(ns, &key).await;
        let mut group = json!({
            "apiVersion": "operators.coreos.com/v1",
            "kind": "OperatorGroup",
            "metadata": {"name": OPERATOR, "namespace": ns},
            "spec": {},
        });
        if !targets.is_empty() {
            group["spec"]["targetNamespaces"] = json!(targets);
        }
        Self::create_settings(node, ns, cluster).await;
        let mut sub = json!({
            "apiVersion": "operators.coreos.com/v1alpha1",
            "kind": "Subscription",
            "metadata": {"name": PACKAGE, "namespace": ns},
            "spec": {
                "channel": CHANNEL,
                "name": PACKAGE,
                "source": CATALOG,
                "sourceNamespace": OLM_NS,
                "installPlanApproval": "Automatic",
            },
        });
        if let Some(csv) = starting {
            sub["spec"]["startingCSV"] = json!(csv);
            sub["spec"]["installPlanApproval"] = json!("Manual");
        }
        for (version, kind, o) in [
            ("v1", "OperatorGroup", group),
            ("v1alpha1", "Subscription", sub),
        ] {
            let o: DynamicObject = serde_json::from_value(o).unwrap();
            olm_api(ns, version, kind)
                .await
                .create(&Default::default(), &o)
                .await
                .unwrap_or_else(|e| panic!("create the {kind}: {e}"));
        }
    }

    /// Approves the InstallPlan that installs CSV `csv` (Manual approval), until OLM has
    /// made that CSV. Under load OLM can resolve the Subscription twice and make a second plan
    /// for the same CSV: only the one the Subscription names (`status.installPlanRef`) is
    /// carried out, so that one is approved, and again should it change.
    async fn approve(&self, csv: &str) {
        let plans = olm_api(&self.ns, "v1alpha1", "InstallPlan").await;
        let subs = olm_api(&self.ns, "v1alpha1", "Subscription").await;
        let csvs = olm_api(&self.ns, "v1alpha1", "ClusterServiceVersion").await;
        let approved = Patch::Merge(json!({"spec": {"approved": true}}));
        wait_for(
            &format!("an approved InstallPlan to make {csv}"),
            T,
            || async {
                if csvs.get_opt(csv).await.ok()?.is_some() {
                    return Some(());
                }
                let sub = subs.get(PACKAGE).await.ok()?;
                let name = sub.data["status"]["installPlanRef"]["name"].as_str()?;
                let plan = plans.get(name).await.ok()?;
                let names = plan.data["spec"]["clusterServiceVersionNames"].as_array()?;
                if names.iter().any(|n| n == csv) && plan.data["spec"]["approved"] != true {
                    plans
                        .patch(name, &PatchParams::default(), &approved)
                        .await
                        .expect("approve the InstallPlan");
                }
                None
            },
        )
        .await;
    }

    /// Waits until CSV `csv` is Succeeded and its Deployment has rolled out, every Pod on
    /// `image` and told its OperatorGroup's namespaces; returns the Pods.
    async fn succeeded(&self, csv: &str, image: &str) -> Vec<k8s_openapi::api::core::v1::Pod> {
        let csvs = olm_api(&self.ns, "v1alpha1", "ClusterServiceVersion").await;
        wait_for(&format!("CSV {csv} to reach Succeeded"), T, || async {
            let c = csvs.get(csv).await.ok()?;
            (c.data["status"]["phase"] == "Succeeded").then_some(())
        })
        .await;
        let pods = wait_rolled_out(&self.ns, OPERATOR, 2).await;
        let targets = self.targets.join(",");
        for p in &pods {
            let c = &p.spec.as_ref().unwrap().containers[0];
            assert_eq!(c.image.as_deref(), Some(image), "{}", name_of(p));
            // The CSV's WATCH_NAMESPACE reads this annotation, which OLM sets from the
            // OperatorGroup (empty: every namespace).
            let annotations = p.metadata.annotations.clone().unwrap_or_default();
            assert_eq!(
                annotations.get("olm.targetNamespaces").map(String::as_str),
                Some(targets.as_str()),
                "{}: the OperatorGroup's namespaces",
                name_of(p)
            );
            let watch = c.env.iter().flatten().find(|e| e.name == "WATCH_NAMESPACE");
            let field = watch
                .and_then(|e| e.value_from.as_ref())
                .and_then(|v| v.field_ref.as_ref())
                .map(|f| f.field_path.as_str());
            assert_eq!(
                field,
                Some("metadata.annotations['olm.targetNamespaces']"),
                "{}: WATCH_NAMESPACE comes from the OperatorGroup",
                name_of(p)
            );
        }
        pods
    }

    /// What the OLM-made RBAC allows the operator's ServiceAccount: nothing a package must not
    /// grant, and Leases only in its own namespace.
    async fn rbac_is_least(&self, flow_ns: &str, unwatched: Option<&str>) {
        let client = as_operator(&self.ns, OPERATOR).await;
        refused(&client, flow_ns, unwatched).await;
        let mut elsewhere = vec![flow_ns, "default"];
        elsewhere.extend(unwatched);
        leases_only_in(&client, &self.ns, &elsewhere).await;
    }
}

/// An install mode from subscribing to Buckets served: the CSV Succeeded, every CRD (the class
/// kinds too) established, two Pods Ready on the current image, the samples' flow in the last
/// target namespace, least RBAC, and exactly the OperatorGroup's namespaces served.
async fn install_mode(prefix: &str, targets_of: impl Fn(&str) -> Vec<String>) {
    let node = node();
    let _names = PACKAGE_NAMES.write().await;
    let all_namespaces = targets_of("").is_empty();
    // Scoped too, it holds its share of the gate: a cluster-wide operator of another test would
    // serve the namespace this one shows unwatched.
    let _turn = if all_namespaces {
        cluster_wide().await
    } else {
        Pass::acquire(false).await
    };
    let started = Instant::now();
    olm(&node).await;
    let images = images(&node).await;
    let ns = namespace(&admin().await, prefix).await;
    let targets = targets_of(&ns);
    // AllNamespaces serves every namespace: one more to show it.
    let flow_ns = targets.last().cloned().unwrap_or(format!("{ns}-app"));
    let unwatched = if all_namespaces {
        vec![]
    } else {
        vec![format!("{ns}-other")]
    };
    let mut extra = unwatched.clone();
    if all_namespaces {
        extra.push(flow_ns.clone());
    }
    let install = Install::subscribe(&node, &ns, &targets, &extra, None).await;
    let current = format!("{OPERATOR_REPO}:{}", images.tag);
    let version = env!("CARGO_PKG_VERSION");
    install.succeeded(&csv_name(version), &current).await;
    eprintln!(
        "{prefix}: CSV Succeeded, 2 Pods Ready at {:.0?}",
        started.elapsed()
    );
    every_crd_established().await;
    core_flow(&flow_ns).await;
    install
        .rbac_is_least(&flow_ns, unwatched.first().map(String::as_str))
        .await;
    let watched = if all_namespaces {
        vec![flow_ns.clone()]
    } else {
        targets.clone()
    };
    serves_exactly(prefix, &install.cluster, &watched, &unwatched).await;
    purge_aws(&install.cluster).await;
    eprintln!("{prefix}: done at {:.0?}", started.elapsed());
    drop(install.scene);
}

#[tokio::test]
async fn olm_installs_own_namespace_from_the_catalog() {
    install_mode("olm-own", |op| vec![op.to_string()]).await;
}

#[tokio::test]
async fn olm_installs_single_namespace_from_the_catalog() {
    install_mode("olm-single", |op| vec![format!("{op}-a")]).await;
}

#[tokio::test]
async fn olm_installs_multi_namespace_from_the_catalog() {
    install_mode("olm-multi", |op| vec![format!("{op}-a"), format!("{op}-b")]).await;
}

#[tokio::test]
async fn olm_installs_all_namespaces_from_the_catalog() {
    install_mode("olm-all", |_| vec![]).await;
}

/// OLM installed every CRD the operator serves, the class kinds included, and the API server
/// serves each (Established).
async fn every_crd_established() {
    let crds = Api::<CustomResourceDefinition>::all(admin().await);
    for crd in s3_operator::api::crds() {
        let name = crd.metadata.name.unwrap();
        let got = crds
            .get(&name)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let established = got
            .status
            .and_then(|s| s.conditions)
            .into_iter()
            .flatten()
            .any(|c| c.type_ == "Established" && c.status == "True");
        assert!(established, "{name} is not Established");
    }
    let kinds: Vec<String> = s3_operator::api::crds()
        .into_iter()
        .map(|c| c.spec.names.kind)
        .collect();
    for kind in ["BucketClass", "BucketAccessClass"] {
        assert!(kinds.iter().any(|k| k == kind), "{kind} in {kinds:?}");
    }
}

// ---------------------------------------------------------------- upgrade through the channel

/// The previous version installed from the catalog, a Bucket and a BucketAccess Ready on it;
/// then the upgrade the channel offers: the CSV is replaced, the Pods roll to the new image, and
/// both objects stay Ready throughout, their Secret still working.
#[tokio::test]
async fn olm_upgrades_through_the_channel_keeping_objects_ready() {
    let node = node();
    let _names = PACKAGE_NAMES.write().await;
    // No cluster-wide operator of another test may serve its objects meanwhile.
    let _turn = Pass::acquire(false).await;
    let started = Instant::now();
    let bundle = olm(&node).await;
    let images = images(&node).await;
    let ns = namespace(&admin().await, "olm-upgrade").await;
    let install = previous_version_installed(&node, &ns, images).await;
    eprintln!("upgrade: {PREVIOUS} Succeeded at {:.0?}", started.elapsed());

    let (bucket, access) = ready_pair(&ns).await;
    let mut watch = ReadyWatch::start(&ns, &bucket, &access);
    // Listed before the upgrade starts, so its first moment is watched too.
    watch.listed().await;
    let version = env!("CARGO_PKG_VERSION");
    the_channel_upgrade_replaces_the_previous_csv(&install, &ns, images, version).await;
    let not_ready = watch.finish().await;
    assert!(
        not_ready.is_empty(),
        "objects left Ready during the upgrade: {not_ready:?}"
    );
    eprintln!("upgrade: {version} Succeeded at {:.0?}", started.elapsed());
    the_deployment_belongs_to_the_csv_of(&ns, version).await;
    install.rbac_is_least(&ns, None).await;
    scorecard(&ns, &csv_name(version), bundle).await;
    purge_aws(&install.cluster).await;
    drop(install.scene);
}

/// The previous version subscribed to in `ns` for `ns` alone, approved by hand, and Succeeded
/// on the operator image's second tag.
async fn previous_version_installed(node: &Node, ns: &str, images: &Images) -> Install {
    let install =
        Install::subscribe(node, ns, &[ns.to_string()], &[], Some(&csv_name(PREVIOUS))).await;
    install.approve(&csv_name(PREVIOUS)).await;
    let old = format!("{OPERATOR_REPO}:{}", images.upgrade_tag);
    install.succeeded(&csv_name(PREVIOUS), &old).await;
    install
}

/// The upgrade to `version` the channel offers, approved: its CSV Succeeded on the current
/// image, the previous CSV gone, and the new one recording the edge OLM took.
async fn the_channel_upgrade_replaces_the_previous_csv(
    install: &Install,
    ns: &str,
    images: &Images,
    version: &str,
) {
    install.approve(&csv_name(version)).await;
    let new = format!("{OPERATOR_REPO}:{}", images.tag);
    install.succeeded(&csv_name(version), &new).await;
    let csvs = olm_api(ns, "v1alpha1", "ClusterServiceVersion").await;
    wait_for(&format!("the replaced CSV {PREVIOUS} to go"), T, || async {
        csvs.get_opt(&csv_name(PREVIOUS))
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    let replaced = csvs.get(&csv_name(version)).await.unwrap();
    assert_eq!(
        replaced.data["spec"]["replaces"],
        json!(csv_name(PREVIOUS)),
        "OLM records the upgrade edge it took"
    );
}

/// The operator's Deployment in `ns` now belongs to the CSV of `version`.
async fn the_deployment_belongs_to_the_csv_of(ns: &str, version: &str) {
    let deployment = Api::<Deployment>::namespaced(admin().await, ns)
        .get(OPERATOR)
        .await
        .unwrap();
    assert_eq!(
        deployment
            .metadata
            .labels
            .unwrap_or_default()
            .get("olm.owner"),
        Some(&csv_name(version)),
        "the Deployment now belongs to the new CSV"
    );
}

/// A Bucket and a BucketAccess created and Ready in `ns`; returns their names.
async fn ready_pair(ns: &str) -> (String, String) {
    let client = admin().await;
    let name = format!("e2e-{}", random(5));
    let buckets = Api::<Bucket>::namespaced(client.clone(), ns);
    buckets
        .create(
            &Default::default(),
            &bucket(&name, json!({"deletionPolicy": "Delete"})),
        )
        .await
        .unwrap();
    let access: BucketAccess = serde_json::from_value(json!({
        "apiVersion": "s3.operator.dev/v1alpha1",
        "kind": "BucketAccess",
        "metadata": {"name": name},
        "spec": {"bucketRef": {"name": name}, "permission": "ReadWrite",
                 "credentials": {"secretName": format!("{name}-creds")}},
    }))
    .unwrap();
    let accesses = Api::<BucketAccess>::namespaced(client, ns);
    accesses.create(&Default::default(), &access).await.unwrap();
    wait_reason(&buckets, &name, "Available", T).await;
    wait_reason(&accesses, &name, "Available", T).await;
    (name.clone(), name)
}

// ---------------------------------------------------------------- scorecard's checks

/// What `operator-sdk scorecard`'s basic and olm suites check (its runner and test image come
/// from operator-sdk, which cannot be had here), on the CSV OLM installed in `ns` and on its
/// alm-examples created there: bundle validation, a spec in every example, owned CRDs with
/// resources, validation covering every example's spec field, and a spec or status descriptor
/// for every top-level field of the examples' spec and of their status once reconciled.
async fn scorecard(ns: &str, csv: &str, bundle: &Path) {
    the_bundle_validates_with_no_warnings(bundle);
    let (examples, owned) = the_csvs_examples_and_owned_crds(ns, csv).await;
    let crds = Api::<CustomResourceDefinition>::all(admin().await);
    for ex in &examples {
        an_example_is_validated_and_described_by_its_crd(ns, ex, &owned, &crds).await;
    }
    delete_examples(ns, &examples).await;
}

fn the_bundle_validates_with_no_warnings(bundle: &Path) {
    let out = tool(
        "bundle-validate",
        &[
            bundle.to_str().unwrap(),
            "--optional-values",
            &format!("k8s-version={}", &KUBE_VERSION[..4]),
        ],
        None,
    );
    assert!(!out.contains("WARN") && !out.contains("ERROR"), "{out}");
}

/// The alm-examples and the owned CRDs of the CSV `csv` in `ns`.
async fn the_csvs_examples_and_owned_crds(ns: &str, csv: &str) -> (Vec<Value>, Vec<Value>) {
    let csv = olm_api(ns, "v1alpha1", "ClusterServiceVersion")
        .await
        .get(csv)
        .await
        .unwrap();
    let examples = csv.metadata.annotations.as_ref().unwrap()["alm-examples"].clone();
    let examples: Vec<Value> = serde_json::from_str(&examples).expect("alm-examples is JSON");
    let owned = csv.data["spec"]["customresourcedefinitions"]["owned"]
        .as_array()
        .expect("owned CRDs")
        .clone();
    (examples, owned)
}

/// The example `ex` has a spec; its owned CRD lists resources and validates its spec (and its
/// status, for a kind with one); every top-level field of its spec, and of its status once
/// created and reconciled in `ns`, has a descriptor.
async fn an_example_is_validated_and_described_by_its_crd(
    ns: &str,
    ex: &Value,
    owned: &[Value],
    crds: &Api<CustomResourceDefinition>,
) {
    let kind = ex["kind"].as_str().unwrap();
    let spec = ex["spec"].as_object().filter(|s| !s.is_empty());
    let spec = spec.unwrap_or_else(|| panic!("basic-check-spec: the {kind} example has no spec"));
    let d = owned.iter().find(|d| d["kind"] == kind).expect("owned CRD");
    assert!(
        d["resources"].as_array().is_some_and(|r| !r.is_empty()),
        "olm-crds-have-resources: {kind} lists none"
    );
    let crd = crds.get(d["name"].as_str().unwrap()).await.unwrap();
    let version = crd
        .spec
        .versions
        .iter()
        .find(|v| json!(v.name) == d["version"]);
    let schema = json!(version.and_then(|v| v.schema.as_ref()).expect("a schema"));
    let props = &schema["openAPIV3Schema"]["properties"];
    // Classes have no status: only a kind with a status subresource must validate one.
    let has_status =
        version.is_some_and(|v| v.subresources.as_ref().is_some_and(|s| s.status.is_some()));
    assert!(
        !has_status || props["status"].is_object(),
        "olm-crds-have-validation: {kind} status"
    );
    let descriptors = |which: &str| -> Vec<String> {
        d[which]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|x| x["path"].as_str().map(String::from))
            .collect()
    };
    for key in spec.keys() {
        assert!(
            props["spec"]["properties"][key].is_object(),
            "olm-crds-have-validation: {kind} spec.{key} is not in the schema"
        );
        assert!(
            descriptors("specDescriptors").contains(key),
            "olm-spec-descriptors: {kind} spec.{key} has no descriptor"
        );
    }
    let status = create_example(ns, ex).await;
    for key in status.keys() {
        assert!(
            descriptors("statusDescriptors").contains(key),
            "olm-status-descriptors: {kind} status.{key} has no descriptor"
        );
    }
}

/// Creates an alm-example in `ns`; returns its status once Ready.
async fn create_example(ns: &str, ex: &Value) -> serde_json::Map<String, Value> {
    tool(
        "kubectl",
        &["apply", "-n", ns, "-f", "-"],
        Some(&ex.to_string()),
    );
    let name = ex["metadata"]["name"].as_str().unwrap();
    let status = match ex["kind"].as_str().unwrap() {
        "Bucket" => {
            let api = Api::<Bucket>::namespaced(admin().await, ns);
            wait_reason(&api, name, "Available", T).await;
            json!(api.get(name).await.unwrap().status)
        }
        "BucketAccess" => {
            let api = Api::<BucketAccess>::namespaced(admin().await, ns);
            wait_reason(&api, name, "Available", T).await;
            json!(api.get(name).await.unwrap().status)
        }
        // An account's status is written when a pass or the sweep first uses it, which no
        // example does: every key its schema allows stands for it.
        "AWSAccount" => {
            let crd = <s3_operator::api::AWSAccount as kube::CustomResourceExt>::crd();
            let schema = json!(crd.spec.versions[0].schema);
            let status = &schema["openAPIV3Schema"]["properties"]["status"]["properties"];
            assert!(status.is_object(), "AWSAccount has a status");
            status.clone()
        }
        // Classes are cluster-scoped and have no status; they are read, never reconciled.
        "BucketClass" | "BucketAccessClass" => Value::Null,
        other => panic!("an alm-example of unknown kind {other}"),
    };
    status.as_object().cloned().unwrap_or_default()
}

/// Deletes the examples while the operator runs (their AWS resources go with them).
async fn delete_examples(ns: &str, examples: &[Value]) {
    let client = admin().await;
    for ex in examples.iter().rev() {
        let name = ex["metadata"]["name"].as_str().unwrap();
        let kind = ex["kind"].as_str().unwrap();
        if kind == "Bucket" {
            // A versioned example bucket is only deleted with forceDelete.
            Api::<Bucket>::namespaced(client.clone(), ns)
                .patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"forceDelete": true}})),
                )
                .await
                .unwrap();
        }
        tool(
            "kubectl",
            &[
                "delete",
                kind,
                name,
                "-n",
                ns,
                "--wait",
                "--timeout",
                "120s",
            ],
            None,
        );
    }
}
