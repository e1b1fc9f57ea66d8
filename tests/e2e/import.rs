//! `s3-operator import`: buckets made directly in the emulator with assorted settings come back
//! as Bucket manifests that, applied, are Ready in Observe and InSync with no AWS write (counted
//! at the emulator's request log) and no Kubernetes write by the operator but their status.

use std::process::Command;
use std::time::{Duration, Instant};

use aws_sdk_s3::types::{
    BucketVersioningStatus, CorsConfiguration, CorsRule, ExpirationStatus, LifecycleExpiration,
    LifecycleRule, LifecycleRuleFilter, ObjectOwnership, OwnershipControls, OwnershipControlsRule,
    PublicAccessBlockConfiguration, ServerSideEncryption, ServerSideEncryptionByDefault,
    ServerSideEncryptionConfiguration, ServerSideEncryptionRule, VersioningConfiguration,
};
use kube::api::{Api, Patch, PatchParams, PostParams};
use s3_operator::api::condition::IN_SYNC;
use s3_operator::api::{Bucket, Management, Versioning};
use s3_operator::aws::policy;
use serde_json::json;

use crate::bucket::tagging;
use crate::support::*;

const BUCKETS: usize = 50;

/// Bucket `i` of the fleet, made by hand as a tool other than the operator would: every one
/// encrypted, with ownership controls and a TLS-only policy (what the operator requires), and
/// otherwise assorted: versioning on, suspended or never set, public access block on or off,
/// a lifecycle rule, CORS, tags, a reader statement.
async fn make(name: &str, i: usize) {
    let s3 = admin_s3();
    let locked = i == LOCKED;
    (s3.create_bucket().bucket(name))
        .object_lock_enabled_for_bucket(locked)
        .send()
        .await
        .unwrap();
    let tags = [("team", ["a", "b", "c"][i % 3]), ("fleet", "imported")];
    s3.put_bucket_tagging()
        .bucket(name)
        .tagging(tagging(&tags))
        .send()
        .await
        .unwrap();
    let sse = ServerSideEncryptionByDefault::builder()
        .sse_algorithm(ServerSideEncryption::Aes256)
        .build()
        .unwrap();
    let rule = ServerSideEncryptionRule::builder().apply_server_side_encryption_by_default(sse);
    let sse = ServerSideEncryptionConfiguration::builder()
        .rules(rule.build())
        .build()
        .unwrap();
    s3.put_bucket_encryption()
        .bucket(name)
        .server_side_encryption_configuration(sse)
        .send()
        .await
        .unwrap();
    let owner = OwnershipControlsRule::builder()
        .object_ownership(ObjectOwnership::BucketOwnerEnforced)
        .build()
        .unwrap();
    let owner = OwnershipControls::builder().rules(owner).build().unwrap();
    s3.put_bucket_ownership_controls()
        .bucket(name)
        .ownership_controls(owner)
        .send()
        .await
        .unwrap();
    let on = !i.is_multiple_of(4);
    let pab = PublicAccessBlockConfiguration::builder()
        .block_public_acls(on)
        .ignore_public_acls(on)
        .block_public_policy(on)
        .restrict_public_buckets(on)
        .build();
    s3.put_public_access_block()
        .bucket(name)
        .public_access_block_configuration(pab)
        .send()
        .await
        .unwrap();
    if i % 3 != 2 {
        let status = if i.is_multiple_of(3) {
            BucketVersioningStatus::Enabled
        } else {
            BucketVersioningStatus::Suspended
        };
        let v = VersioningConfiguration::builder().status(status).build();
        s3.put_bucket_versioning()
            .bucket(name)
            .versioning_configuration(v)
            .send()
            .await
            .unwrap();
    }
    if i.is_multiple_of(5) {
        let rule = LifecycleRule::builder()
            .id("expire-tmp")
            .status(ExpirationStatus::Enabled)
            .filter(LifecycleRuleFilter::builder().prefix("tmp/").build())
            .expiration(LifecycleExpiration::builder().days(7).build())
            .build()
            .unwrap();
        let conf = aws_sdk_s3::types::BucketLifecycleConfiguration::builder()
            .rules(rule)
            .build()
            .unwrap();
        s3.put_bucket_lifecycle_configuration()
            .bucket(name)
            .lifecycle_configuration(conf)
            .send()
            .await
            .unwrap();
    }
    if i.is_multiple_of(7) {
        let rule = CorsRule::builder()
            .allowed_methods("GET")
            .allowed_origins("https://example.com")
            .build()
            .unwrap();
        let conf = CorsConfiguration::builder()
            .cors_rules(rule)
            .build()
            .unwrap();
        s3.put_bucket_cors()
            .bucket(name)
            .cors_configuration(conf)
            .send()
            .await
            .unwrap();
    }
    more_aspects(&s3, name, i).await;
    let arn = format!("arn:aws:s3:::{name}");
    let readers = json!({"Sid": "Readers", "Effect": "Allow",
        "Principal": {"AWS": format!("arn:aws:iam::{ACCOUNT}:root")},
        "Action": "s3:GetObject", "Resource": format!("{arn}/*")});
    let extra = if i.is_multiple_of(2) {
        vec![readers]
    } else {
        vec![]
    };
    let doc = policy::bucket_policy(&arn, &extra);
    s3.put_bucket_policy()
        .bucket(name)
        .policy(doc.to_string())
        .send()
        .await
        .unwrap();
}

/// The bucket made with object lock (and versioning on, as object lock needs).
const LOCKED: usize = 12;

/// What the operator reads only when a spec sets it: a default retention on the locked bucket,
/// transfer acceleration on every ninth, an intelligent-tiering configuration on every
/// eleventh.
async fn more_aspects(s3: &aws_sdk_s3::Client, name: &str, i: usize) {
    use aws_sdk_s3::types::{
        BucketAccelerateStatus, IntelligentTieringAccessTier, IntelligentTieringConfiguration,
        IntelligentTieringStatus, ObjectLockRetentionMode, Tiering,
    };
    if i == LOCKED {
        let lock = crate::bucket_protection::lock_config(ObjectLockRetentionMode::Governance, 1);
        (s3.put_object_lock_configuration().bucket(name))
            .object_lock_configuration(lock)
            .send()
            .await
            .unwrap();
    }
    if i.is_multiple_of(9) {
        let on = aws_sdk_s3::types::AccelerateConfiguration::builder()
            .status(BucketAccelerateStatus::Enabled)
            .build();
        (s3.put_bucket_accelerate_configuration().bucket(name))
            .accelerate_configuration(on)
            .send()
            .await
            .unwrap();
    }
    if i.is_multiple_of(11) {
        let tier = Tiering::builder()
            .days(90)
            .access_tier(IntelligentTieringAccessTier::ArchiveAccess)
            .build()
            .unwrap();
        let conf = IntelligentTieringConfiguration::builder()
            .id("archive")
            .status(IntelligentTieringStatus::Enabled)
            .tierings(tier)
            .build()
            .unwrap();
        (s3.put_bucket_intelligent_tiering_configuration()
            .bucket(name))
        .id("archive")
        .intelligent_tiering_configuration(conf)
        .send()
        .await
        .unwrap();
    }
}

/// Runs `s3-operator import` with the AWS key `key`; returns its stdout.
fn import(key: &(String, String), prefix: &str, ns: &str) -> String {
    let out = run_import(key, prefix, ns, &["--tag", "fleet=imported"]);
    assert!(out.status.success(), "import failed: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// Runs `s3-operator import` with `key`, the admin's kubeconfig and `more` arguments.
fn run_import(
    key: &(String, String),
    prefix: &str,
    ns: &str,
    more: &[&str],
) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_s3-operator"))
        .args(["import", "--prefix", prefix, "--namespace", ns])
        .args(more)
        .env("AWS_ACCESS_KEY_ID", &key.0)
        .env("AWS_SECRET_ACCESS_KEY", &key.1)
        .env("AWS_REGION", &env().region)
        .env("AWS_ENDPOINT_URL", &env().aws_endpoint)
        .env("KUBECONFIG", &env().kubeconfig)
        .env_remove("AWS_PROFILE")
        .output()
        .expect("s3-operator import runs")
}

/// Observed, Ready and InSync=True.
fn observed_in_sync(b: &Bucket) -> bool {
    let conds = b
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    let has = |t: &str, s: &str, r: &str| {
        conds
            .iter()
            .any(|c| c.type_ == t && c.status == s && c.reason == r)
    };
    has("Ready", "True", "Observed") && has(IN_SYNC, "True", "InSync")
}

#[tokio::test]
async fn imported_buckets_are_observed_in_sync_without_a_write() {
    let client = admin().await;
    let ns = namespace(&client, "import").await;
    let opts = OperatorOpts {
        namespaces: vec![ns.clone()],
        resync: "1h",
        ..Default::default()
    };
    let id = Identity::new(&opts.namespaces, None).await;
    let op = Operator::start_as(&id, &opts, "0").await;
    // Under the operator's prefix, so it may read them; one more, without the filter's tag.
    let fleet = format!("{}fleet{}-", prefix(&op.cluster), random(4));
    let names: Vec<String> = (0..BUCKETS).map(|i| format!("{fleet}{i:02}")).collect();
    for chunk in names.chunks(10) {
        let made = chunk
            .iter()
            .map(|n| make(n, n[fleet.len()..].parse().unwrap()));
        futures::future::join_all(made).await;
    }
    let untagged = format!("{fleet}untagged");
    admin_s3()
        .create_bucket()
        .bucket(&untagged)
        .send()
        .await
        .unwrap();
    op.wait_settled(Duration::from_secs(2)).await;
    let sent = op.sent().await;

    let text = import(&id.aws_key, &fleet, &ns);
    let docs: Vec<Bucket> = text
        .split("---\n")
        .filter(|d| {
            d.lines()
                .any(|l| !l.starts_with('#') && !l.trim().is_empty())
        })
        .map(|d| serde_yaml::from_str(d).unwrap_or_else(|e| panic!("{e}: {d}")))
        .collect();
    assert_eq!(
        docs.len(),
        BUCKETS,
        "the tag filter leaves out {untagged}:\n{text}"
    );
    // Each reproduces its bucket: nothing to flag.
    let flags: Vec<&str> = text.lines().filter(|l| l.starts_with('#')).collect();
    assert!(flags.is_empty(), "{flags:?}");

    // Each carries what its bucket holds (a setting left out would be unread, not a difference).
    for b in &docs {
        let s = &b.spec;
        let name = s.bucket_name.clone().unwrap();
        let i: usize = name[fleet.len()..].parse().unwrap();
        assert_eq!(s.management, Some(Management::Observe), "{name}");
        assert!(s.adopt_existing, "{name}");
        let versioning = [Some(Versioning::Enabled), Some(Versioning::Suspended), None][i % 3];
        assert_eq!(s.versioning, versioning, "{name}");
        let pab = s.public_access_block.unwrap();
        assert_eq!(pab.block_public_policy, !i.is_multiple_of(4), "{name}");
        assert_eq!(s.lifecycle_rules.is_some(), i.is_multiple_of(5), "{name}");
        assert_eq!(s.cors.is_some(), i.is_multiple_of(7), "{name}");
        let sids: Vec<_> = s.policy.iter().map(|p| p.sid.as_deref()).collect();
        let readers = if i.is_multiple_of(2) {
            vec![Some("Readers")]
        } else {
            vec![]
        };
        assert_eq!(sids, readers, "{name}");
        assert_eq!(
            s.tags.get("team").map(String::as_str),
            Some(["a", "b", "c"][i % 3])
        );
        assert!(
            s.encryption.is_some() && s.object_ownership.is_some(),
            "{name}"
        );
        let retention = (s.object_lock.as_ref()).and_then(|l| l.default_retention.as_ref());
        assert_eq!(retention.is_some(), i == LOCKED, "{name}");
        assert_eq!(
            s.transfer_acceleration.is_some(),
            i.is_multiple_of(9),
            "{name}"
        );
        assert_eq!(
            s.intelligent_tiering.is_some(),
            i.is_multiple_of(11),
            "{name}"
        );
        assert_eq!((&s.notifications, &s.logging), (&None, &None), "{name}");
    }

    let api: Api<Bucket> = Api::namespaced(client, &ns);
    let started = Instant::now();
    for b in &docs {
        api.create(&PostParams::default(), b).await.unwrap();
    }
    let what = format!("{BUCKETS} imported Buckets Observed and InSync");
    wait_for(&what, Duration::from_secs(120), || async {
        let all = api.list(&Default::default()).await.ok()?;
        let bad: Vec<_> = (all.items.iter())
            .filter(|b| !observed_in_sync(b))
            .map(|b| {
                (
                    b.metadata.name.clone(),
                    b.status.as_ref().map(|s| s.plan.clone()),
                )
            })
            .collect();
        if !bad.is_empty() && started.elapsed() > Duration::from_secs(60) {
            eprintln!("not yet in sync: {bad:?}");
        }
        (all.items.len() == BUCKETS && bad.is_empty()).then_some(())
    })
    .await;
    eprintln!(
        "import round trip: {BUCKETS} Buckets Observed and InSync in {:.1?}",
        started.elapsed()
    );
    op.wait_settled(Duration::from_secs(3)).await;
    let writes = sent.writes().await;
    let aws: Vec<&String> = writes.iter().filter(|w| w.starts_with("AWS ")).collect();
    assert!(aws.is_empty(), "AWS writes: {aws:?}");
    let other: Vec<&String> = (writes.iter())
        .filter(|w| !w.starts_with("AWS ") && !w.contains("buckets/status"))
        .collect();
    assert!(
        other.is_empty(),
        "Kubernetes writes besides status: {other:?}"
    );
    eprintln!(
        "import round trip: AWS writes 0, Kubernetes writes {} (status)",
        writes.len()
    );

    // In sync, switching one to Manage writes only the ownership tags it adopts it with.
    let one = docs[0].metadata.name.clone().unwrap();
    let sent = op.sent().await;
    let patch = json!({"spec": {"management": "Manage"}});
    api.patch(&one, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    wait_reason(&api, &one, "Available", Duration::from_secs(60)).await;
    op.wait_settled(Duration::from_secs(2)).await;
    let aws: Vec<String> = (sent.writes().await.into_iter())
        .filter(|w| w.starts_with("AWS "))
        .collect();
    assert_eq!(
        aws,
        ["AWS PUT bucket?tagging x1"],
        "Manage wrote more than adoption"
    );
}

/// `--account`: buckets of the emulator's second account import into a namespace whose class
/// puts Buckets in the AWSAccount for it, read with that account's credentials. The operator's
/// own credentials, or a class of the operator's own account, are refused before any bucket is
/// read, naming both sides; nothing is printed.
#[tokio::test]
async fn import_from_another_account_needs_its_credentials_and_a_class_there() {
    let client = admin().await;
    let ns = namespace(&client, "importacct").await;
    let target = Target::other();
    let tag = random(6);
    let account = format!("imp-{tag}");
    aws_account(&client, &account, &target.role_arn(&tag), "unused").await;
    let there = format!("imp-{tag}");
    account_class(&client, &there, &ns, &account, false).await;
    let home_class = format!("imp-home-{tag}");
    let obj = json!({"apiVersion": "s3.operator.dev/v1alpha1", "kind": "BucketClass",
        "metadata": {"name": home_class}, "spec": {}});
    Api::<s3_operator::api::BucketClass>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(obj).unwrap(),
        )
        .await
        .unwrap();
    let prefix = format!("s3op-imp{tag}-");
    let name = format!("{prefix}photos");
    target
        .s3
        .create_bucket()
        .bucket(&name)
        .send()
        .await
        .unwrap();
    let theirs = env()
        .other_admin_key
        .clone()
        .expect("the second account's admin key");

    let args = ["--account", account.as_str(), "--class", there.as_str()];
    let out = run_import(&theirs, &prefix, &ns, &args);
    assert!(out.status.success(), "import failed: {out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let head = format!(
        "# namespace {ns}: BucketClass {there} puts its Buckets in AWSAccount {account} (AWS account {}",
        target.id
    );
    assert!(text.starts_with(&head), "{text}");
    assert!(text.contains(&format!("bucketName: {name}")), "{text}");
    assert!(text.contains(&format!("className: {there}")), "{text}");

    // The operator's own credentials: not that account.
    let out = run_import(&env().admin_key, &prefix, &ns, &args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && out.stdout.is_empty(), "{out:?}");
    assert!(
        err.contains(&format!(
            "AWSAccount {account} is AWS account {}, but the AWS credentials act in account",
            target.id
        )),
        "{err}"
    );
    // A class of the operator's own account, asked to import another account's buckets.
    let args = [
        "--account",
        account.as_str(),
        "--class",
        home_class.as_str(),
    ];
    let out = run_import(&theirs, &prefix, &ns, &args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && out.stdout.is_empty(), "{out:?}");
    assert!(
        err.contains(&format!("BucketClass {home_class} puts its Buckets in the operator's own account, not AWSAccount {account} (--account)")),
        "{err}"
    );
    // And the class of that account without --account.
    let out = run_import(&theirs, &prefix, &ns, &["--class", there.as_str()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{out:?}");
    assert!(
        err.contains(&format!("import with --account {account}")),
        "{err}"
    );

    target
        .s3
        .delete_bucket()
        .bucket(&name)
        .send()
        .await
        .unwrap();
    let classes = Api::<s3_operator::api::BucketClass>::all(client.clone());
    for c in [&there, &home_class] {
        classes.delete(c, &Default::default()).await.unwrap();
    }
    let accounts = Api::<s3_operator::api::AWSAccount>::all(client);
    accounts
        .delete(&account, &Default::default())
        .await
        .unwrap();
}
