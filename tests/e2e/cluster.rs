//! The operator as real Pods on the test node (`hack/env.sh up --node`, root): its image built
//! from the project's Dockerfile and imported into the node's containerd, then installed the way
//! users install it: `helm install` of the chart, and `kubectl apply -k` of each kustomize
//! overlay. Kubelet runs the Pods, probes them and enforces their security context; an
//! application Pod proves that a BucketAccess's Secret works with the AWS SDK's default chain.
//!
//! These tests need the node: without one they fail (never skip) and say how to start it.
//!
//! The installations here watch every namespace (the chart's default, the `cluster` overlay), and
//! the overlays use the fixed names they ship with (`s3-operator-system`, `team-a`, `team-b`), so
//! each test holds the harness's exclusive gate (`cluster_wide`): no other operator runs on the
//! same API server meanwhile, or a cluster-wide Pod would reconcile its objects.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, EvictParams, ListParams, PostParams};
use s3_operator::api::{Bucket, BucketAccess};
use serde_json::{Value, json};

use crate::audit::{audit, inventory};
use crate::node::*;
use crate::support::*;

/// The chart's release name (its full name, since it contains the chart's name).
const RELEASE: &str = "s3-operator";
/// Where every kustomize overlay runs the operator.
const OVERLAY_NS: &str = "s3-operator-system";

// ---------------------------------------------------------------- Helm

/// `helm install` of the chart with the image built here: two replicas probed Ready by kubelet,
/// one leader, the samples Ready and an application Pod using their Secret; then the PDB, an
/// upgrade, a leader handover and the uninstall.
#[tokio::test]
async fn helm_chart_runs_as_pods_on_a_real_node() {
    let node = node();
    // Release `s3-operator` names its metrics reader `s3-operator-metrics-reader`, as the bundle
    // and the overlays do, and uninstalling deletes it.
    let _names = PACKAGE_NAMES.write().await;
    let _turn = cluster_wide().await;
    let started = Instant::now();
    let images = images(&node).await;
    let client = admin().await;
    let release = HelmRelease {
        ns: namespace(&client, "helm-pods").await,
        team: namespace(&client, "helm-team").await,
        cluster: format!("h{}", random(6)),
        aws_endpoint: node.aws_endpoint.clone(),
    };
    let scene = release.scene();
    release.install(&images.tag).await;
    eprintln!("helm install --wait: done at {:.0?}", started.elapsed());

    let pods = two_replicas_run(&release.ns, &images.tag).await;
    let leader = helm_test_passes_with_one_leader(&release.ns, &pods).await;
    let samples = samples_ready(&release.team).await;
    eprintln!("samples Ready at {:.0?}", started.elapsed());
    let app_key = app_writes_through_the_secret(&release.team, &images.app, &samples).await;
    eprintln!("application Pod succeeded at {:.0?}", started.elapsed());

    // The PodDisruptionBudget: one eviction allowed, the next refused until the replacement is
    // Ready.
    pdb_allows_one_eviction(&release.ns, &pods, &leader).await;
    let pods = wait_rolled_out(&release.ns, RELEASE, 2).await;
    eprintln!("PDB checked at {:.0?}", started.elapsed());

    let (pods, leader) = upgrade_rolls_both_while_ready(&release, images, &pods, &samples).await;
    eprintln!(
        "helm upgrade rolled both replicas at {:.0?}",
        started.elapsed()
    );

    // Deleting the leader hands over: it releases the Lease on SIGTERM and the standby (or, if
    // it is quicker, the leader's replacement Pod) takes it.
    leader_hands_over(&release.ns, &release.lease(), &pods, &leader).await;

    uninstall_keeps_crds_objects_and_data(&release, &samples, &app_key).await;
    eprintln!("helm uninstall checked at {:.0?}", started.elapsed());

    // What the uninstall left by design goes now, so no other test meets it.
    purge_aws(&release.cluster).await;
    drop(scene);
    eprintln!("helm test done in {:.0?}", started.elapsed());
}

/// The test's Helm release: the operator in `ns`, watching only `team`.
struct HelmRelease {
    ns: String,
    team: String,
    cluster: String,
    aws_endpoint: String,
}

impl HelmRelease {
    /// What a failure explains, and what the end (or a panic) undoes.
    fn scene(&self) -> Scene {
        let (ns, team) = (&self.ns, &self.team);
        let mut scene = Scene::new(&[ns, team]);
        scene.run(
            "helm",
            &["uninstall", RELEASE, "-n", ns, "--wait", "--timeout", "90s"],
        );
        scene.undo.push(Undo::Release(team.clone()));
        scene.run(
            "kubectl",
            &["delete", "namespace", ns, team, "--wait=false"],
        );
        let binding = format!("{ns}-scraper");
        scene.run(
            "kubectl",
            &[
                "delete",
                "clusterrolebinding",
                &binding,
                "--ignore-not-found",
            ],
        );
        scene
    }

    fn lease(&self) -> String {
        format!("{RELEASE}-leader")
    }

    /// The chart's values for image `tag`, written to a file kept with the e2e logs.
    fn values(&self, tag: &str) -> String {
        let v = json!({
            "image": {"repository": OPERATOR_REPO, "tag": tag, "pullPolicy": "Never"},
            "replicaCount": 2,
            "clusterName": self.cluster,
            // Its own namespace only: objects other tests left elsewhere are no business of this
            // installation (the cluster overlay's test runs one that watches everything).
            "watchNamespaces": [self.team],
            "logLevel": "info,s3_operator=debug",
            // moto on the node's bridge address, which Pods reach.
            "aws": {"endpointUrl": self.aws_endpoint, "region": env().region},
            "extraEnv": aws_secret_env(),
        });
        let path = logs_dir().join(format!("helm-values-{}-{tag}.yaml", self.cluster));
        std::fs::write(&path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
        path.display().to_string()
    }

    /// `helm install` or `helm upgrade` to image `tag`, waiting for the rollout.
    async fn helm(&self, verb: &str, tag: &str) {
        let args = strings(&[
            verb,
            RELEASE,
            "charts/s3-operator",
            "-n",
            &self.ns,
            "-f",
            &self.values(tag),
            "--wait",
            "--timeout",
            "5m",
        ]);
        tool_async("helm", args).await;
    }

    /// The operator's key pair reaches its Pods only through a Secret and the chart's extraEnv.
    async fn install(&self, tag: &str) {
        let key = operator_key(&self.cluster).await;
        create_aws_secret(&self.ns, &key).await;
        self.helm("install", tag).await;
    }
}

/// Two replicas of image `tag`, Running and probed Ready.
async fn two_replicas_run(ns: &str, tag: &str) -> Vec<Pod> {
    let pods = wait_rolled_out(ns, RELEASE, 2).await;
    for p in &pods {
        let c = &p.spec.as_ref().unwrap().containers[0];
        assert_eq!(
            c.image.as_deref(),
            Some(format!("{OPERATOR_REPO}:{tag}").as_str())
        );
    }
    pods
}

/// Exactly one replica leads; the chart's own check passes, as a user runs it: a Pod of the
/// operator image probes /readyz through a Service made for the test. Returns the leader.
async fn helm_test_passes_with_one_leader(ns: &str, pods: &[Pod]) -> String {
    let leader = wait_leader(ns, &format!("{RELEASE}-leader"), pods).await;
    let out = tool_async(
        "helm",
        strings(&["test", RELEASE, "-n", ns, "--timeout", "2m"]),
    )
    .await;
    let phases: Vec<&str> = out
        .lines()
        .filter_map(|l| l.strip_prefix("Phase:"))
        .map(str::trim)
        .collect();
    assert!(
        !phases.is_empty() && phases.iter().all(|p| *p == "Succeeded"),
        "helm test: {out}"
    );
    only_the_leader_reports_leading(ns, pods, &leader).await;
    leader
}

/// An application takes the Secret as it is and writes through the SDK's default chain;
/// returns the key it wrote.
async fn app_writes_through_the_secret(team: &str, image: &str, samples: &Samples) -> String {
    let app_key = format!("e2e/{}.txt", random(6));
    let s3_name = &samples.s3_name;
    run_app(team, "bucket-app", image, &samples.secret_name, &app_key).await;
    let got = admin_s3()
        .get_object()
        .bucket(s3_name)
        .key(&app_key)
        .send()
        .await
        .unwrap_or_else(|e| panic!("the app's object {s3_name}/{app_key}: {e:?}"));
    let body = got.body.collect().await.unwrap().into_bytes();
    assert!(
        String::from_utf8_lossy(&body).starts_with("written by bucket-app"),
        "{body:?}"
    );
    app_key
}

/// helm upgrade to another tag rolls both replicas while the objects stay Ready, and leaves
/// one bucket and one IAM user that audit clean. Returns the new Pods and their leader.
async fn upgrade_rolls_both_while_ready(
    release: &HelmRelease,
    images: &Images,
    pods: &[Pod],
    samples: &Samples,
) -> (Vec<Pod>, String) {
    let (ns, team) = (&release.ns, &release.team);
    let client = admin().await;
    let before: Vec<String> = pods.iter().map(name_of).collect();
    let mut watch = ReadyWatch::start(team, &samples.bucket, &samples.access);
    // Listed before the upgrade starts, so its first moment is watched too.
    watch.listed().await;
    release.helm("upgrade", &images.upgrade_tag).await;
    let pods = wait_rolled_out(ns, RELEASE, 2).await;
    let not_ready = watch.finish().await;
    assert!(
        not_ready.is_empty(),
        "the objects stopped being Ready during the upgrade: {not_ready:?}"
    );
    for p in &pods {
        assert!(
            !before.contains(&name_of(p)),
            "{} was not replaced by the upgrade",
            name_of(p)
        );
        let c = &p.spec.as_ref().unwrap().containers[0];
        assert_eq!(
            c.image.as_deref(),
            Some(format!("{OPERATOR_REPO}:{}", images.upgrade_tag).as_str())
        );
    }
    let leader = wait_leader(ns, &release.lease(), &pods).await;
    let buckets = Api::<Bucket>::namespaced(client.clone(), team);
    let accesses = Api::<BucketAccess>::namespaced(client, team);
    wait_reason(&buckets, &samples.bucket, "Available", T).await;
    wait_reason(&accesses, &samples.access, "Available", T).await;
    let problems = audit(&release.cluster, std::slice::from_ref(team)).await;
    assert!(problems.is_empty(), "after the upgrade: {problems:#?}");
    let inv = inventory(&release.cluster).await;
    assert_eq!(inv.buckets.len(), 1, "one bucket: {:?}", inv.buckets.keys());
    assert_eq!(inv.users.len(), 1, "one IAM user: {:?}", inv.users.keys());
    (pods, leader)
}

/// helm uninstall: the chart's README says Helm never deletes the CRDs of crds/. The Buckets
/// and BucketAccesses are the users' objects, not the release's, so they stay, and so do the
/// bucket and its data (nothing deletes a bucket but the operator acting on a deleted Bucket).
async fn uninstall_keeps_crds_objects_and_data(
    release: &HelmRelease,
    samples: &Samples,
    app_key: &str,
) {
    let (ns, team, s3_name) = (&release.ns, &release.team, &samples.s3_name);
    tool_async(
        "helm",
        strings(&["uninstall", RELEASE, "-n", ns, "--wait", "--timeout", "2m"]),
    )
    .await;
    wait_for("the operator Pods to be gone", T, || async {
        let left = Api::<Pod>::namespaced(admin().await, ns)
            .list(&ListParams::default().labels(&format!("app.kubernetes.io/instance={RELEASE}")))
            .await
            .ok()?;
        left.items.is_empty().then_some(())
    })
    .await;
    let client = admin().await;
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    for crd in ["buckets.s3.operator.dev", "bucketaccesses.s3.operator.dev"] {
        let c = crds.get_opt(crd).await.unwrap();
        assert!(
            c.is_some_and(|c| c.metadata.deletion_timestamp.is_none()),
            "the CRD {crd} stays after helm uninstall"
        );
    }
    let buckets = Api::<Bucket>::namespaced(client.clone(), team);
    let kept = buckets
        .get(&samples.bucket)
        .await
        .expect("the Bucket stays");
    assert!(kept.metadata.deletion_timestamp.is_none());
    assert_eq!(
        kept.status.and_then(|s| s.bucket_name).as_deref(),
        Some(s3_name.as_str())
    );
    Api::<BucketAccess>::namespaced(client, team)
        .get(&samples.access)
        .await
        .expect("the BucketAccess stays");
    assert!(bucket_exists(s3_name).await, "the bucket {s3_name} stays");
    let data = admin_s3()
        .get_object()
        .bucket(s3_name)
        .key(app_key)
        .send()
        .await;
    assert!(data.is_ok(), "the app's object stays: {data:?}");
}

async fn run_app(ns: &str, name: &str, image: &str, secret: &str, key: &str) {
    let env_from = json!([{"secretRef": {"name": secret}}]);
    run_app_from(ns, name, image, env_from, key).await
}

/// Runs bucket-app on `key` as a Pod whose environment comes from `env_from` (Secrets and
/// ConfigMaps), and fails with its log unless it succeeds.
pub(crate) async fn run_app_from(ns: &str, name: &str, image: &str, env_from: Value, key: &str) {
    run_app_containers(ns, name, image, &[(env_from, json!([]))], key).await;
}

/// Runs a Pod with one application container per entry of `containers` (its `envFrom` and
/// `env`), each writing `key`, and waits until all succeeded.
pub(crate) async fn run_app_containers(
    ns: &str,
    name: &str,
    image: &str,
    containers: &[(Value, Value)],
    key: &str,
) {
    let containers: Vec<Value> = (containers.iter().enumerate())
        .map(|(i, (env_from, env))| {
            json!({
                "name": format!("app-{i}"),
                "image": image,
                "imagePullPolicy": "Never",
                "args": [key],
                "envFrom": env_from,
                "env": env,
                "securityContext": {
                    "allowPrivilegeEscalation": false,
                    "readOnlyRootFilesystem": true,
                    "capabilities": {"drop": ["ALL"]},
                },
            })
        })
        .collect();
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "bucket-app"}},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": false,
            "enableServiceLinks": false,
            "securityContext": {
                "runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": containers,
        },
    }))
    .unwrap();
    let api = Api::<Pod>::namespaced(admin().await, ns);
    api.create(&PostParams::default(), &pod).await.unwrap();
    let done = wait_for(
        &format!("the application Pod {ns}/{name} to finish"),
        T,
        || async {
            let p = api.get(name).await.ok()?;
            matches!(phase(&p), "Succeeded" | "Failed").then_some(p)
        },
    )
    .await;
    let (_, logs, _) = try_tool(
        "kubectl",
        &["logs", "-n", ns, name, "--all-containers"],
        None,
    );
    assert_eq!(
        phase(&done),
        "Succeeded",
        "the application Pod failed; its log:\n{logs}"
    );
    eprintln!("application Pod log:\n{logs}");
}

/// Evicting one replica is allowed; evicting the other before the replacement is Ready would
/// leave none, and the PodDisruptionBudget refuses it with 429.
async fn pdb_allows_one_eviction(ns: &str, pods: &[Pod], leader: &str) {
    let client = admin().await;
    let pdbs = Api::<PodDisruptionBudget>::namespaced(client.clone(), ns);
    wait_for("the PDB to allow one disruption", T, || async {
        let p = pdbs.get(RELEASE).await.ok()?;
        let s = p.status?;
        (s.observed_generation >= p.metadata.generation
            && s.current_healthy == 2
            && s.disruptions_allowed == 1)
            .then_some(())
    })
    .await;
    // The client's default retries would wait out a 429 until the replacement is Ready.
    let api = Api::<Pod>::namespaced(admin_without_retries().await, ns);
    let standby = pods
        .iter()
        .map(name_of)
        .find(|n| n != leader)
        .expect("a standby");
    api.evict(&standby, &EvictParams::default())
        .await
        .unwrap_or_else(|e| panic!("evicting {standby} (the budget allows one): {e:?}"));
    match api.evict(leader, &EvictParams::default()).await {
        Err(kube::Error::Api(s)) if s.code == 429 => {
            eprintln!("second eviction refused: {}", s.message)
        }
        other => panic!("evicting {leader} as well must be refused with 429, got {other:?}"),
    }
    let p = api.get(leader).await.expect("the leader is still there");
    assert!(
        p.metadata.deletion_timestamp.is_none(),
        "the refused eviction deleted nothing"
    );
}

// ---------------------------------------------------------------- kustomize

/// `kubectl apply -k` of a kustomization that uses `overlay` as its base and sets only what this
/// machine needs: the image built here (never pulled), the cluster name, moto's address and the
/// AWS key pair from a Secret. Its Pods run and become Ready, and it serves exactly its
/// namespaces: a Bucket in `watched` becomes Ready, one in each of `unwatched` is never touched.
async fn overlay_runs(overlay: &str, watched: &[String], unwatched: &[String]) {
    let node = node();
    // The overlays' fixed names are shared with packaging.rs's kustomize and OLM tests: first
    // that lock, then the gate, as those tests take them.
    let _names = PACKAGE_NAMES.write().await;
    let _turn = cluster_wide().await;
    let started = Instant::now();
    let images = images(&node).await;
    for kind in ["servicemonitors", "prometheusrules"] {
        apply_crds(
            &Path::new(&tools_bin()).join(format!("../crds/monitoring.coreos.com_{kind}.yaml")),
        )
        .await;
    }
    install_crds().await;
    for ns in watched.iter().chain(unwatched) {
        ensure_namespace(ns).await;
    }
    let cluster = format!("k{}", random(6));
    let key = operator_key(&cluster).await;

    let dir = logs_dir().join(format!("kustomize-{overlay}-{cluster}"));
    std::fs::create_dir_all(&dir).unwrap();
    let mut manager_env = vec![
        json!({"name": "CLUSTER_NAME", "value": cluster}),
        json!({"name": "AWS_ENDPOINT_URL", "value": node.aws_endpoint}),
        json!({"name": "RUST_LOG", "value": "info,s3_operator=debug"}),
    ];
    manager_env.extend(aws_secret_env().as_array().unwrap().iter().cloned());
    let patch = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "s3-operator"},
        "spec": {"template": {"spec": {"containers": [{
            "name": "manager",
            "imagePullPolicy": "Never",
            "env": manager_env,
        }]}}},
    });
    let kustomization = json!({
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [
            relative(&dir, &repo().join("config/overlays").join(overlay)),
            "aws-secret.yaml",
        ],
        "images": [{
            "name": "ghcr.io/s3-operator/s3-operator",
            "newName": OPERATOR_REPO,
            "newTag": images.tag,
        }],
        "patches": [{
            "target": {"kind": "Deployment", "name": "s3-operator"},
            "patch": serde_json::to_string(&patch).unwrap(),
        }],
    });
    std::fs::write(
        dir.join("kustomization.yaml"),
        serde_json::to_string_pretty(&kustomization).unwrap(),
    )
    .unwrap();
    let secret = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": AWS_SECRET, "namespace": OVERLAY_NS},
        "stringData": {"AWS_ACCESS_KEY_ID": key.0, "AWS_SECRET_ACCESS_KEY": key.1},
    });
    std::fs::write(
        dir.join("aws-secret.yaml"),
        serde_json::to_string(&secret).unwrap(),
    )
    .unwrap();
    // What the test removes afterwards: everything but the CRDs (shared with every other test)
    // and the Namespace (the next overlay installs into it again).
    let dir_s = dir.display().to_string();
    let rendered = tool("kustomize", &["build", &dir_s], None);
    // The Deployment first: its Pods still have their RBAC to release the Lease as they stop.
    let mut removable: Vec<Value> = serde_yaml::Deserializer::from_str(&rendered)
        .map(|d| <Value as serde::Deserialize>::deserialize(d).expect("YAML"))
        .filter(|d| {
            !["CustomResourceDefinition", "Namespace"].contains(&d["kind"].as_str().unwrap_or(""))
        })
        .collect();
    removable.sort_by_key(|d| d["kind"] != "Deployment");
    let removable: Vec<String> = removable
        .iter()
        .map(|d| format!("---\n{}", serde_yaml::to_string(d).unwrap()))
        .collect();
    let removable_path = dir.join("operator.yaml");
    std::fs::write(&removable_path, removable.concat()).unwrap();

    let mut all_ns: Vec<&str> = vec![OVERLAY_NS];
    all_ns.extend(watched.iter().chain(unwatched).map(String::as_str));
    let mut scene = Scene::new(&all_ns);
    let removable_s = removable_path.display().to_string();
    scene.run(
        "kubectl",
        &[
            "delete",
            "-f",
            &removable_s,
            "--ignore-not-found",
            "--cascade=foreground",
            "--wait",
            "--timeout",
            "90s",
        ],
    );
    for ns in watched.iter().chain(unwatched) {
        scene.undo.push(Undo::Release(ns.clone()));
    }

    tool_async("kubectl", strings(&["apply", "-k", &dir_s])).await;
    let pods = wait_rolled_out(OVERLAY_NS, "s3-operator", 2).await;
    for p in &pods {
        let c = &p.spec.as_ref().unwrap().containers[0];
        assert_eq!(
            c.image.as_deref(),
            Some(format!("{OPERATOR_REPO}:{}", images.tag).as_str())
        );
    }
    wait_leader(OVERLAY_NS, "s3-operator-leader", &pods).await;
    eprintln!(
        "{overlay}: 2 Pods Ready, one leader at {:.0?}",
        started.elapsed()
    );

    serves_exactly(overlay, &cluster, watched, unwatched).await;
    tool_async(
        "kubectl",
        strings(&[
            "delete",
            "-f",
            &removable_s,
            "--cascade=foreground",
            "--wait",
            "--timeout",
            "2m",
        ]),
    )
    .await;
    wait_for(
        &format!("{overlay}: the operator Pods to be gone"),
        T,
        || async {
            live_pods(OVERLAY_NS, "app.kubernetes.io/name=s3-operator")
                .await
                .is_empty()
                .then_some(())
        },
    )
    .await;
    scene.undo.clear();
    drop(scene);
    eprintln!("{overlay}: done in {:.0?}", started.elapsed());
}

/// `to` as a path relative to the directory `from` (kustomize refuses absolute paths).
fn relative(from: &Path, to: &Path) -> String {
    let (from, to) = (
        from.canonicalize().expect("from"),
        to.canonicalize().expect("to"),
    );
    let common = from
        .components()
        .zip(to.components())
        .take_while(|(a, b)| a == b)
        .count();
    let mut rel = PathBuf::new();
    for _ in from.components().skip(common) {
        rel.push("..");
    }
    rel.extend(to.components().skip(common));
    rel.display().to_string()
}

#[tokio::test]
async fn kustomize_cluster_overlay_runs_as_pods() {
    node();
    let client = admin().await;
    let a = namespace(&client, "kz-cluster-a").await;
    let b = namespace(&client, "kz-cluster-b").await;
    overlay_runs("cluster", &[a, b], &[]).await;
}

#[tokio::test]
async fn kustomize_namespaces_overlay_runs_as_pods() {
    node();
    let client = admin().await;
    let other = namespace(&client, "kz-ns-other").await;
    overlay_runs("namespaces", &["team-a".into(), "team-b".into()], &[other]).await;
}

#[tokio::test]
async fn kustomize_own_namespace_overlay_runs_as_pods() {
    node();
    let client = admin().await;
    let other = namespace(&client, "kz-own-other").await;
    overlay_runs(
        "own-namespace",
        &[OVERLAY_NS.into()],
        &[other, "team-a".into()],
    )
    .await;
}

/// Each replica's metrics (scraped with a token allowed to get them) say whether it leads:
/// exactly the Lease holder does.
async fn only_the_leader_reports_leading(ns: &str, pods: &[Pod], leader: &str) {
    let token = reader_token(ns, &format!("{RELEASE}-metrics-reader")).await;
    let statuses = wait_for("both replicas' leader metric", T, || async {
        let mut v = Vec::new();
        for p in pods {
            v.push((name_of(p), leader_metric(p, &token).await?));
        }
        Some(v)
    })
    .await;
    let leading: Vec<&String> = statuses
        .iter()
        .filter(|(_, v)| *v == 1.0)
        .map(|(n, _)| n)
        .collect();
    assert_eq!(
        leading,
        [&leader],
        "exactly the Lease holder reports leadership: {statuses:?}"
    );
}

/// The names of the samples and what the operator made for them.
struct Samples {
    bucket: String,
    access: String,
    s3_name: String,
    secret_name: String,
}

/// The samples (config/samples) created in `team` and Ready.
async fn samples_ready(team: &str) -> Samples {
    let client = admin().await;
    let buckets = Api::<Bucket>::namespaced(client.clone(), team);
    let accesses = Api::<BucketAccess>::namespaced(client, team);
    let b: Bucket = sample("s3_v1alpha1_bucket.yaml");
    let a: BucketAccess = sample("s3_v1alpha1_bucketaccess.yaml");
    let (b_name, a_name) = (name_of(&b), name_of(&a));
    buckets.create(&PostParams::default(), &b).await.unwrap();
    accesses.create(&PostParams::default(), &a).await.unwrap();
    wait_reason(&buckets, &b_name, "Available", T).await;
    wait_reason(&accesses, &a_name, "Available", T).await;
    let s3_name = buckets
        .get(&b_name)
        .await
        .unwrap()
        .status
        .and_then(|s| s.bucket_name)
        .expect("status.bucketName");
    let secret_name = accesses
        .get(&a_name)
        .await
        .unwrap()
        .status
        .and_then(|s| s.secret_name)
        .expect("status.secretName");
    Samples {
        bucket: b_name,
        access: a_name,
        s3_name,
        secret_name,
    }
}

/// Deleting the leader Pod: the standby or the replacement takes the Lease, and keeps it.
async fn leader_hands_over(ns: &str, lease: &str, pods: &[Pod], leader: &str) {
    let client = admin().await;
    let standby = pods
        .iter()
        .map(name_of)
        .find(|n| *n != leader)
        .expect("a standby");
    let deleted = Instant::now();
    Api::<Pod>::namespaced(client, ns)
        .delete(leader, &DeleteParams::default())
        .await
        .unwrap();
    let holder = wait_for(
        &format!("the Lease to pass from {leader} to another replica"),
        Duration::from_secs(30),
        || async { lease_holder(ns, lease).await.filter(|h| *h != leader) },
    )
    .await;
    eprintln!(
        "leader {leader} deleted: {holder} ({}) took the Lease after {:.1?}",
        if holder == standby {
            "the standby"
        } else {
            "its replacement"
        },
        deleted.elapsed()
    );
    wait_rolled_out(ns, RELEASE, 2).await;
    assert_eq!(
        lease_holder(ns, lease).await.as_deref(),
        Some(holder.as_str()),
        "leadership stays put once handed over"
    );
}
