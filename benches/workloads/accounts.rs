//! Pairs spread over three AWS accounts (`--accounts N`): the operator's own and the emulator's
//! two others, each reached through a role assumed with an ExternalId, one namespace and one
//! default class per account. It measures what a second and third account cost: AssumeRole
//! calls per account, AWS calls per pair against the single-account floor, and the ratio.

use std::collections::BTreeMap;
use std::time::Instant;

use kube::api::Api;
use s3_operator::api::{Bucket, BucketAccess};
use s3_operator::aws::policy;
use serde::Serialize;

use crate::scale::{
    self, CONCURRENCY, Workload, all_ready, calls, create_objects, delta, footprint,
};
use crate::support::*;

#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
pub struct AccountsRun {
    pub n: usize,
    /// The operator's own account included.
    pub accounts: usize,
    /// The same `n` pairs' calls made directly in the operator's own account.
    pub floor_s: f64,
    pub converge_s: f64,
    pub ratio: f64,
    /// `service:Operation` → calls per pair: the floor's, and the operator's (STS's
    /// GetCallerIdentity included; AssumeRole is counted apart, as the SDK makes it).
    pub floor_calls: BTreeMap<String, f64>,
    pub operator_calls: BTreeMap<String, f64>,
    /// AWSAccount → AssumeRole calls while converging (`s3_operator_assume_role_total`).
    pub assume_role: BTreeMap<String, f64>,
    /// The credentials' lifetime the SDK asks STS for: one AssumeRole per account per this.
    pub session_s: u64,
    pub aws_failures: f64,
    pub rss_peak_mib: f64,
}

/// `n` pairs, a third in each account, converged by one operator; the floor is the same `n`
/// pairs' calls in the operator's own account (one emulator serves every account, so an
/// account's calls cost what the home account's do).
pub async fn accounts(n: usize) -> AccountsRun {
    let client = admin().await;
    install_crds().await;
    let cluster = format!("ac{}", random(5));
    let mut namespaces = Vec::new();
    for i in 0..3 {
        namespaces.push(namespace(&client, &format!("acct{i}")).await);
    }
    let targets = [Target::other(), Target::member().await];
    let roles: Vec<String> = targets.iter().map(|t| t.role_arn(&cluster)).collect();
    let opts = OperatorOpts {
        namespaces: namespaces.clone(),
        cluster: Some(cluster.clone()),
        resync: "1h",
        extra_args: vec![
            "--max-concurrent-reconciles".into(),
            CONCURRENCY.to_string(),
            "--namespace-aws-read-rate".into(),
            "0".into(),
            "--namespace-aws-write-rate".into(),
            "0".into(),
        ],
        policy: Some(policy::with_assume_roles(operator_policy(&cluster), &roles)),
        env: vec![("RUST_LOG".into(), "info".into())],
        ..Default::default()
    };
    let id =
        Identity::with_policy(&opts.namespaces, opts.cluster.clone(), opts.policy.clone()).await;
    for t in &targets {
        t.set_up(&cluster).await;
    }
    eprintln!("[accounts {n}] floor");
    let floor = scale::floor(&id, &namespaces[0], n, Workload::Pairs).await;

    external_id_secret(&client, &id.operator_ns, "ext", EXTERNAL_ID).await;
    let mut names = Vec::new();
    for (i, t) in targets.iter().enumerate() {
        let name = format!("{cluster}-{i}");
        aws_account(&client, &name, &t.role_arn(&cluster), "ext").await;
        account_class(&client, &name, &namespaces[i + 1], &name, true).await;
        names.push(name);
    }
    eprintln!("[accounts {n}] operator: {n} pairs over 3 accounts");
    let op = Operator::start_as(&id, &opts, "bench").await;
    let peak = scale::Sampler::start(op.pid());
    let before = op.metrics().await;
    let (all_b, all_a) = (
        Api::<Bucket>::all(client.clone()),
        Api::<BucketAccess>::all(client.clone()),
    );
    let start = Instant::now();
    let ready_b = tokio::spawn(all_ready(all_b, n));
    let ready_a = tokio::spawn(all_ready(all_a, n));
    let creates = namespaces.iter().enumerate().map(|(k, ns)| {
        let client = client.clone();
        async move {
            let (buckets, accesses) = (
                Api::<Bucket>::namespaced(client.clone(), ns),
                Api::<BucketAccess>::namespaced(client, ns),
            );
            let mine = (0..n).filter(|i| i % 3 == k).map(|i| format!("p{i}"));
            create_objects(&buckets, &accesses, mine, Workload::Pairs).await;
        }
    });
    futures::future::join_all(creates).await;
    let done = ready_b.await.unwrap().max(ready_a.await.unwrap());
    let converge_s = done.duration_since(start).as_secs_f64();
    eprintln!(
        "[accounts {n}] converged in {converge_s:.1}s (floor {:.1}s)",
        floor.secs
    );
    op.wait_settled(std::time::Duration::from_secs(3)).await;
    let after = op.metrics().await;
    let mut assume_role = BTreeMap::new();
    for name in &names {
        let labels = [("account", name.as_str()), ("outcome", "ok")];
        let count = metric_sum(&after, "s3_operator_assume_role_total", &labels);
        assume_role.insert(name.clone(), count);
    }
    let failed = |t: &str| scale::failed(t);
    let run = AccountsRun {
        n,
        accounts: 3,
        floor_s: floor.secs,
        converge_s,
        ratio: converge_s / floor.secs,
        floor_calls: floor.calls,
        operator_calls: delta(&calls(&after), &calls(&before), n),
        assume_role,
        session_s: 3600,
        aws_failures: failed(&after) - failed(&before),
        rss_peak_mib: peak.peak().max(footprint(op.pid()).peak),
    };
    // The audit reads the operator's own account: its namespace's objects only.
    assert_eq!(
        crate::audit::audit(&id.cluster, &namespaces[..1]).await,
        Vec::<String>::new(),
        "the audit of the accounts run"
    );
    run
}
