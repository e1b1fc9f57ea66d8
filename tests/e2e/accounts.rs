//! Many AWS accounts: a class names an AWSAccount, and the Buckets and BucketAccesses of its
//! namespaces live in that account, reached through a role the operator assumes there with an
//! ExternalId. The emulator's second account (moto keys resources by the caller's account)
//! stands for the target; it checks the role's trust and its ExternalId as STS does.

use std::time::{Duration, Instant};

use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use s3_operator::api::{AWSAccount, Bucket, BucketClass, RECONCILE_REQUESTED_AT};
use s3_operator::aws::{drift_queue, naming, policy};
use serde_json::json;

use crate::access::access;
use crate::drift_events::{WITHIN, corrected};
use crate::support::*;

const T: Duration = Duration::from_secs(60);
/// The AWSAccount's status once its Ready condition is `ready` ("True" or "False").
async fn account_ready(
    client: &kube::Client,
    name: &str,
    ready: &str,
) -> s3_operator::api::AWSAccountStatus {
    let api = Api::<AWSAccount>::all(client.clone());
    wait_for(&format!("AWSAccount {name} Ready={ready}"), T, || async {
        let status = api.get(name).await.ok()?.status?;
        let c = status.conditions.iter().find(|c| c.type_ == "Ready")?;
        (c.status == ready).then_some(status.clone())
    })
    .await
}

async fn wait_gone<K>(api: &Api<K>, name: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    wait_for(&format!("{name} gone"), T, || async {
        api.get_opt(name).await.unwrap().is_none().then_some(())
    })
    .await;
}

/// An operator for `namespaces` whose own policy may assume the roles of `targets`, and those
/// roles made (after its IAM user exists, which their trust names).
async fn operator_for(
    namespaces: &[String],
    cluster: &str,
    targets: &[&Target],
) -> (Operator, Identity) {
    operator_with(namespaces, cluster, targets, &[]).await
}

/// The same, with `extra_args`.
async fn operator_with(
    namespaces: &[String],
    cluster: &str,
    targets: &[&Target],
    extra_args: &[&str],
) -> (Operator, Identity) {
    operator_named(namespaces, cluster, targets, extra_args, (None, None)).await
}

/// The same, the targets' roles scoped to the AWSAccounts' own bucket-name prefix and IAM path
/// (`names`; `None`: the operator's).
async fn operator_named(
    namespaces: &[String],
    cluster: &str,
    targets: &[&Target],
    extra_args: &[&str],
    (prefix, path): (Option<&str>, Option<&str>),
) -> (Operator, Identity) {
    let roles: Vec<String> = targets.iter().map(|t| t.role_arn(cluster)).collect();
    let opts = OperatorOpts {
        namespaces: namespaces.to_vec(),
        cluster: Some(cluster.to_string()),
        resync: "10m",
        policy: Some(policy::with_assume_roles(operator_policy(cluster), &roles)),
        extra_args: extra_args.iter().map(|a| a.to_string()).collect(),
        ..Default::default()
    };
    let id =
        Identity::with_policy(&opts.namespaces, opts.cluster.clone(), opts.policy.clone()).await;
    for t in targets {
        t.set_up_named(cluster, prefix, path).await;
    }
    (Operator::start_as(&id, &opts, "0").await, id)
}

/// A Ready Bucket `b` (deleted with its data) and an Available access `a` to it, in `ns`
/// under `class`.
async fn pair_in(client: &kube::Client, ns: &str, class: &str) -> AccessPair {
    let spec = json!({"className": class, "deletionPolicy": "Delete", "forceDelete": true});
    let access_spec = json!({"bucketRef": {"name": "b"}, "permission": "ReadWrite"});
    AccessPair::create(client, ns, bucket("b", spec), access("a", access_spec)).await
}

/// The pair's Bucket and access both record `account` (the AWSAccount `name`), its user is in
/// that account, and its bucket is listed there and not in the operator's own.
async fn lives_in(pair: &AccessPair, name: &str, account: &Target) {
    let status = pair.buckets.get("b").await.unwrap().status.unwrap();
    let recorded = status.account.expect("status.account");
    assert_eq!(
        (recorded.name.as_str(), recorded.id.as_str()),
        (name, account.id.as_str())
    );
    let access_status = pair.access.status.clone().unwrap();
    assert_eq!(access_status.account, Some(recorded));
    let user_arn = pair.user_arn();
    assert!(
        user_arn.starts_with(&format!("arn:aws:iam::{}:user/", account.id)),
        "{user_arn}"
    );
    assert!(account.buckets().await.contains(&pair.s3_name));
    assert!(!buckets_of(&admin_s3()).await.contains(&pair.s3_name));
}

/// The S3 client of the pair's Secret.
async fn app_of(pair: &AccessPair) -> aws_sdk_s3::Client {
    let data = pair.secret_data().await;
    s3_with(&data["AWS_ACCESS_KEY_ID"], &data["AWS_SECRET_ACCESS_KEY"])
}

async fn put(app: &aws_sdk_s3::Client, bucket: &str) -> Result<(), String> {
    let put = app
        .put_object()
        .bucket(bucket)
        .key("k")
        .body(b"v".to_vec().into());
    put.send().await.map(|_| ()).map_err(|e| format!("{e:?}"))
}

/// A class in another account puts a tenant's Bucket and BucketAccess there and nowhere else,
/// with credentials that work there; a wrong ExternalId is AccountUnavailable with nothing
/// written; a class edited to another account moves nothing; deleting cleans the right account.
#[tokio::test]
async fn a_class_puts_buckets_and_identities_in_its_account_and_nowhere_else() {
    let client = admin().await;
    install_crds().await;
    let ns = namespace(&client, "acct").await;
    let cluster = format!("acct{}", random(5));
    let target = Target::other();
    let (op, _) = operator_for(std::slice::from_ref(&ns), &cluster, &[&target]).await;
    let role = target.role_arn(&cluster);
    // The trust names the operator's principal, not its account: another identity there,
    // allowed everything in its own account and holding the ExternalId, is refused.
    assert_eq!(
        assume_as_admin(&role, &cluster).await,
        Err("AccessDenied".to_string())
    );
    let (good, bad) = (format!("{cluster}-a"), format!("{cluster}-bad"));
    external_id_secret(&client, &op.operator_ns, "ext", EXTERNAL_ID).await;
    external_id_secret(&client, &op.operator_ns, "wrong", "not-the-external-id").await;
    aws_account(&client, &good, &role, "ext").await;
    aws_account(&client, &bad, &role, "wrong").await;
    class_in(&client, &good, &ns, &good).await;
    class_in(&client, &bad, &ns, &bad).await;

    let pair = pair_in(&client, &ns, &good).await;
    lives_in(&pair, &good, &target).await;
    let ready = account_ready(&client, &good, "True").await;
    assert_eq!(ready.account_id.as_deref(), Some(target.id.as_str()));
    let c = &ready.conditions[0];
    assert_eq!(c.reason, "Available");
    assert!(c.message.contains(&target.id), "{}", c.message);
    let written = put(&app_of(&pair).await, &pair.s3_name).await;
    written.expect("the access's keys write into the bucket in the target account");
    a_wrong_external_id_writes_nothing(&pair, (&cluster, &bad), &target).await;
    // The refusal is said on the AWSAccount too, in STS's words but never with the ExternalId.
    let refused = account_ready(&client, &bad, "False").await;
    assert_eq!(refused.account_id.as_deref(), Some(target.id.as_str()));
    let c = &refused.conditions[0];
    assert_eq!(c.reason, "AccountUnavailable");
    assert!(
        c.message
            .contains("not authorized to perform: sts:AssumeRole"),
        "{}",
        c.message
    );
    for secret in ["not-the-external-id", EXTERNAL_ID] {
        assert!(!c.message.contains(secret), "{}", c.message);
    }
    let shown = tool(
        "kubectl",
        &["get", "awsaccount", &bad, "--no-headers"],
        None,
    );
    assert!(
        shown.contains(&target.id) && shown.contains("False"),
        "ACCOUNT ID and READY columns: {shown}"
    );
    a_class_edit_moves_nothing(&client, &pair, (&good, &bad), &target).await;
    // Every pass of both objects, the class edit's included, and the status written on the
    // AWSAccount used one set of credentials: the role was assumed once, and the refused
    // account was tried without a session to keep.
    let assumed = |account: String, outcome| {
        let op = &op;
        async move {
            let labels = [("account", account.as_str()), ("outcome", outcome)];
            op.metric("s3_operator_assume_role_total", &labels).await
        }
    };
    assert_eq!(assumed(good.clone(), "ok").await, 1.0, "AssumeRole once");
    assert!(assumed(bad.clone(), "error").await >= 1.0);
    assert_eq!(assumed(bad.clone(), "ok").await, 0.0);
    deleting_cleans_the_target(&pair, &target).await;
    for name in [&good, &bad] {
        let dp = DeleteParams::default();
        let _ = Api::<BucketClass>::all(client.clone())
            .delete(name, &dp)
            .await;
        let _ = Api::<AWSAccount>::all(client.clone())
            .delete(name, &dp)
            .await;
    }
    drop(op);
}

/// A Bucket of the class whose AWSAccount has the wrong ExternalId: AccountUnavailable with
/// STS's refusal, nothing recorded or made in either account.
async fn a_wrong_external_id_writes_nothing(
    pair: &AccessPair,
    (cluster, class): (&str, &str),
    target: &Target,
) {
    // Other tests make buckets in both accounts meanwhile: only this installation's count.
    let ours = |mut all: Vec<String>| {
        all.retain(|b| b.starts_with(&prefix(cluster)));
        all
    };
    let seen = || async {
        let (there, here) = (target.buckets().await, buckets_of(&admin_s3()).await);
        (ours(there), ours(here))
    };
    let before = seen().await;
    let b2 = bucket("b2", json!({"className": class}));
    pair.buckets
        .create(&PostParams::default(), &b2)
        .await
        .unwrap();
    let msg = wait_reason(&pair.buckets, "b2", "AccountUnavailable", T).await;
    assert!(msg.contains(class), "names the AWSAccount: {msg}");
    // STS's own refusal, not a Secret the operator could not read.
    assert!(
        msg.contains("not authorized to perform: sts:AssumeRole"),
        "{msg}"
    );
    let b2 = pair.buckets.get("b2").await.unwrap();
    assert!(
        b2.status.as_ref().unwrap().account.is_none(),
        "not recorded"
    );
    assert!(b2.metadata.finalizers.is_none_or(|f| f.is_empty()));
    assert_eq!(before, seen().await);
    assert_eq!(before.0, std::slice::from_ref(&pair.s3_name));
    pair.buckets
        .delete("b2", &DeleteParams::default())
        .await
        .unwrap();
    // It never began: its deletion needs no account.
    wait_gone(&pair.buckets, "b2").await;
}

/// The class edited to another account: a violation, the bucket stays where it is; edited
/// back, Available again.
async fn a_class_edit_moves_nothing(
    client: &kube::Client,
    pair: &AccessPair,
    (good, bad): (&str, &str),
    target: &Target,
) {
    let classes = Api::<BucketClass>::all(client.clone());
    let to = |a: &str| Patch::Merge(json!({"spec": {"account": a}}));
    classes
        .patch(good, &PatchParams::default(), &to(bad))
        .await
        .unwrap();
    let msg = wait_reason(&pair.buckets, "b", "ClassViolation", T).await;
    assert!(msg.contains("never moved"), "{msg}");
    assert!(target.buckets().await.contains(&pair.s3_name));
    classes
        .patch(good, &PatchParams::default(), &to(good))
        .await
        .unwrap();
    wait_reason(&pair.buckets, "b", "Available", T).await;
}

/// Deleting the access and the Bucket deletes the user and the bucket in the target account.
async fn deleting_cleans_the_target(pair: &AccessPair, target: &Target) {
    let (user, dp) = (pair.user(), DeleteParams::default());
    pair.accesses.delete("a", &dp).await.unwrap();
    wait_gone(&pair.accesses, "a").await;
    assert!(
        !target.user_exists(&user).await,
        "the user is deleted in the target account"
    );
    pair.buckets.delete("b", &dp).await.unwrap();
    wait_gone(&pair.buckets, "b").await;
    assert!(!target.buckets().await.contains(&pair.s3_name));
}

/// Two namespaces, each with a class in an account of its own: each tenant's credentials reach
/// only its own bucket, and what a tenant strips while no operator runs is swept in the account
/// it lived in.
#[tokio::test]
async fn two_accounts_keep_their_tenants_apart_and_are_each_swept() {
    let client = admin().await;
    install_crds().await;
    let (ns1, ns2) = (
        namespace(&client, "acct1").await,
        namespace(&client, "acct2").await,
    );
    let cluster = format!("two{}", random(5));
    let (one, two) = (Target::other(), Target::member().await);
    let (op, id) = operator_for(&[ns1.clone(), ns2.clone()], &cluster, &[&one, &two]).await;
    external_id_secret(&client, &op.operator_ns, "ext", EXTERNAL_ID).await;
    let (a1, a2) = (format!("{cluster}-one"), format!("{cluster}-two"));
    aws_account(&client, &a1, &one.role_arn(&cluster), "ext").await;
    aws_account(&client, &a2, &two.role_arn(&cluster), "ext").await;
    class_in(&client, &a1, &ns1, &a1).await;
    class_in(&client, &a2, &ns2, &a2).await;
    let (p1, p2) = (
        pair_in(&client, &ns1, &a1).await,
        pair_in(&client, &ns2, &a2).await,
    );
    lives_in(&p1, &a1, &one).await;
    lives_in(&p2, &a2, &two).await;
    let (app1, app2) = (app_of(&p1).await, app_of(&p2).await);
    put(&app1, &p1.s3_name)
        .await
        .expect("tenant 1 in its bucket");
    put(&app2, &p2.s3_name)
        .await
        .expect("tenant 2 in its bucket");
    let denied = |r: Result<(), String>| r.is_err_and(|e| e.contains("AccessDenied"));
    assert!(
        denied(put(&app1, &p2.s3_name).await),
        "tenant 1 reaches tenant 2's bucket"
    );
    assert!(
        denied(put(&app2, &p1.s3_name).await),
        "tenant 2 reaches tenant 1's bucket"
    );

    // Stripped while no operator runs: the next operator's sweep cleans the member account.
    let user = p2.user();
    op.terminate().await;
    strip_and_delete(&p2.accesses, "a").await;
    strip_and_delete(&p2.buckets, "b").await;
    let opts = OperatorOpts {
        namespaces: vec![ns1.clone(), ns2.clone()],
        cluster: Some(cluster.clone()),
        resync: "10m",
        extra_args: vec!["--orphan-sweep-period".into(), "2s".into()],
        ..Default::default()
    };
    let _sweeping = Operator::start_as(&id, &opts, "1").await;
    wait_for(
        "the sweep to delete the user in the member account",
        T,
        || async { (!two.user_exists(&user).await).then_some(()) },
    )
    .await;
    assert!(
        one.user_exists(&p1.user()).await,
        "the live tenant's user stays"
    );
}

/// An AWSAccount that sets its own bucket-name prefix and IAM path: what is made there is named
/// under them and recorded with them; a Bucket naming a bucket outside that prefix is refused
/// with nothing made; both are immutable; the AWSAccount made again with other names strands
/// nothing (its objects wait, AccountUnavailable, until it is as it was); the sweep finds a
/// stripped access's user under that path.
#[tokio::test]
async fn an_accounts_own_prefix_and_iam_path_name_what_is_made_there() {
    let client = admin().await;
    install_crds().await;
    let ns = namespace(&client, "acctn").await;
    let cluster = format!("nm{}", random(5));
    let (prefix, path) = (format!("t{}-", random(5)), format!("/platform/{cluster}/"));
    let target = Target::other();
    let role = target.role_arn(&cluster);
    let names = (Some(prefix.as_str()), Some(path.as_str()));
    let (op, id) =
        operator_named(std::slice::from_ref(&ns), &cluster, &[&target], &[], names).await;
    external_id_secret(&client, &op.operator_ns, "ext", EXTERNAL_ID).await;
    let accounts = Api::<AWSAccount>::all(client.clone());
    let named = |prefix: &str| {
        let obj = json!({"apiVersion": "s3.operator.dev/v1alpha1", "kind": "AWSAccount",
            "metadata": {"name": cluster},
            "spec": {"roleArn": role, "externalIdSecretRef": {"name": "ext", "key": "externalId"},
                     "bucketNamePrefix": prefix, "iamPath": path}});
        serde_json::from_value::<AWSAccount>(obj).expect("an AWSAccount")
    };
    accounts
        .create(&PostParams::default(), &named(&prefix))
        .await
        .unwrap();
    class_in(&client, &cluster, &ns, &cluster).await;

    let pair = pair_in(&client, &ns, &cluster).await;
    lives_in(&pair, &cluster, &target).await;
    assert!(pair.s3_name.starts_with(&prefix), "{}", pair.s3_name);
    let user_arn = pair.user_arn();
    assert!(
        user_arn.starts_with(&format!("arn:aws:iam::{}:user{path}", target.id)),
        "{user_arn}"
    );
    let recorded = pair.access.status.clone().unwrap().account.unwrap();
    assert_eq!(
        (
            recorded.bucket_name_prefix.as_deref(),
            recorded.iam_path.as_deref()
        ),
        (Some(prefix.as_str()), Some(path.as_str()))
    );
    put(&app_of(&pair).await, &pair.s3_name)
        .await
        .expect("the access's keys write into its bucket");
    outside_the_prefix_is_refused(&pair, &cluster, &target).await;
    names_are_immutable(&accounts, &cluster).await;
    made_again_with_other_names_strands_nothing(&accounts, &pair, named).await;

    // Stripped while no operator runs: the sweep finds the user under the account's path.
    let user = pair.user();
    op.terminate().await;
    strip_and_delete(&pair.accesses, "a").await;
    let sweeping = OperatorOpts {
        namespaces: vec![ns.clone()],
        cluster: Some(cluster.clone()),
        resync: "10m",
        extra_args: vec!["--orphan-sweep-period".into(), "2s".into()],
        ..Default::default()
    };
    let _op = Operator::start_as(&id, &sweeping, "1").await;
    wait_for(
        "the sweep to delete the user under the account's path",
        T,
        || async { (!target.user_exists(&user).await).then_some(()) },
    )
    .await;
    pair.buckets
        .delete("b", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&pair.buckets, "b").await;
    assert!(!target.buckets().await.contains(&pair.s3_name));
    let _ = Api::<BucketClass>::all(client.clone())
        .delete(&cluster, &DeleteParams::default())
        .await;
    let _ = accounts.delete(&cluster, &DeleteParams::default()).await;
}

/// A Bucket in that account (its class is named as the cluster) naming a bucket under the
/// operator's own prefix: InvalidSpec naming the field and the account's prefix, nothing made.
async fn outside_the_prefix_is_refused(pair: &AccessPair, cluster: &str, target: &Target) {
    // Other tests make buckets in that account meanwhile: only this installation's count.
    let ours = || async {
        let mut all = target.buckets().await;
        all.retain(|b| b.starts_with(&prefix(cluster)) || b.starts_with(&pair.s3_name));
        all
    };
    let (class, before) = (cluster, ours().await);
    let own = format!("{}x", prefix(cluster));
    let b2 = bucket("b2", json!({"className": class, "bucketName": own}));
    pair.buckets
        .create(&PostParams::default(), &b2)
        .await
        .unwrap();
    let msg = wait_reason(&pair.buckets, "b2", "InvalidSpec", T).await;
    assert!(msg.contains("spec.bucketName"), "{msg}");
    assert!(msg.contains("spec.bucketNamePrefix"), "{msg}");
    assert_eq!(before, ours().await);
    assert_eq!(before, std::slice::from_ref(&pair.s3_name));
    pair.buckets
        .delete("b2", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&pair.buckets, "b2").await;
}

/// The API server refuses a changed, added or removed prefix or path, naming the field.
async fn names_are_immutable(accounts: &Api<AWSAccount>, name: &str) {
    for (patch, field) in [
        (
            json!({"spec": {"bucketNamePrefix": "other-"}}),
            "spec.bucketNamePrefix",
        ),
        (json!({"spec": {"iamPath": null}}), "spec.iamPath"),
    ] {
        let err = accounts
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .expect_err("an immutable field changed");
        assert!(
            err.to_string().contains(&format!("{field} is immutable")),
            "{err}"
        );
    }
}

/// The AWSAccount deleted and made again under another prefix: the Bucket made under the first
/// is AccountUnavailable saying both, and stays; made again as it was, Available.
async fn made_again_with_other_names_strands_nothing(
    accounts: &Api<AWSAccount>,
    pair: &AccessPair,
    named: impl Fn(&str) -> AWSAccount,
) {
    let name = named("x").metadata.name.unwrap();
    let name = &name;
    let remake = |prefix: String| {
        let obj = named(&prefix);
        async move {
            accounts
                .delete(name, &DeleteParams::default())
                .await
                .unwrap();
            wait_gone(accounts, name).await;
            accounts.create(&PostParams::default(), &obj).await.unwrap();
        }
    };
    let first = pair.access.status.clone().unwrap().account.unwrap();
    let first = first.bucket_name_prefix.unwrap();
    remake(format!("{first}z")).await;
    // The operator reads an AWSAccount again a minute after its last read at most (half a
    // minute after a failed one, as while it was gone): passes asked for until one sees it.
    let msg = passes_until(pair, "AccountUnavailable", "was made under").await;
    assert!(msg.contains(&format!("{first:?}")), "{msg}");
    assert!(target_kept(pair).await, "the bucket stays");
    remake(first).await;
    passes_until(pair, "Available", "").await;
}

/// Asks for passes of the pair's Bucket until its Ready reason is `reason` with a message
/// containing `says`; returns the message.
async fn passes_until(pair: &AccessPair, reason: &str, says: &str) -> String {
    wait_for(&format!("Bucket b {reason}: {says}"), T * 2, || async {
        let patch = json!({"metadata": {"annotations": {RECONCILE_REQUESTED_AT: random(8)}}});
        let params = PatchParams::default();
        pair.buckets
            .patch("b", &params, &Patch::Merge(patch))
            .await
            .ok()?;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let status = pair.buckets.get("b").await.ok()?.status?;
        let c = status.conditions.into_iter().find(|c| c.type_ == "Ready")?;
        (c.reason == reason && c.message.contains(says)).then_some(c.message)
    })
    .await
}

/// The pair's bucket is still in the target account.
async fn target_kept(pair: &AccessPair) -> bool {
    Target::other().buckets().await.contains(&pair.s3_name)
}

/// Deletes `name` and removes its finalizers, as a tenant may; waits until it is gone.
async fn strip_and_delete<K>(api: &Api<K>, name: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let _ = api.delete(name, &DeleteParams::default()).await;
    let strip = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    let _ = api.patch(name, &PatchParams::default(), &strip).await;
    wait_gone(api, name).await;
}

/// What the member account's admin and the operator's account's admin set up for the member's
/// drift events, as `s3-operator iam-policy --target-account <id> --drift-events-rule` renders
/// it: in the member account the role EventBridge assumes and the rule forwarding to the
/// operator's account's default bus; on that bus the statement allowing exactly that rule.
async fn forward_drift_events(member: &Target, cluster: &str) {
    let region = &env().region;
    let fwd = drift_queue::member_rule(
        "aws",
        &member.id,
        ACCOUNT,
        region,
        cluster,
        &prefix(cluster),
    );
    let text = |v: &serde_json::Value| v.as_str().expect("a string").to_string();
    let role = text(&fwd["roleName"]);
    member
        .iam
        .create_role()
        .role_name(&role)
        .assume_role_policy_document(fwd["trustPolicy"].to_string())
        .send()
        .await
        .expect("the forwarding role");
    member
        .iam
        .put_role_policy()
        .role_name(&role)
        .policy_name("put-drift-events")
        .policy_document(fwd["rolePolicy"].to_string())
        .send()
        .await
        .expect("the forwarding role's policy");
    let (k, s, t) = member_credentials().await;
    let creds = aws_sdk_eventbridge::config::Credentials::new(k, s, Some(t), None, "e2e");
    let conf = aws_sdk_eventbridge::config::Builder::new()
        .behavior_version(aws_sdk_eventbridge::config::BehaviorVersion::latest())
        .region(aws_sdk_eventbridge::config::Region::new(region.clone()))
        .endpoint_url(&env().aws_endpoint)
        .credentials_provider(creds)
        .build();
    let events = aws_sdk_eventbridge::Client::from_conf(conf);
    let rule = text(&fwd["ruleName"]);
    events
        .put_rule()
        .name(&rule)
        .event_pattern(fwd["eventPattern"].to_string())
        .send()
        .await
        .expect("the member's rule");
    let target = aws_sdk_eventbridge::types::Target::builder()
        .id(text(&fwd["target"]["Id"]))
        .arn(text(&fwd["target"]["Arn"]))
        .role_arn(text(&fwd["target"]["RoleArn"]))
        .build()
        .expect("a target");
    events
        .put_targets()
        .rule(&rule)
        .targets(target)
        .send()
        .await
        .expect("the member's rule's target");
    let bus_policy = json!({"Version": "2012-10-17", "Statement": [fwd["busPolicyStatement"]]});
    eventbridge()
        .put_permission()
        .policy(bus_policy.to_string())
        .send()
        .await
        .expect("the home bus's policy");
}

/// Drift events per account: the member account's rule forwards its events to the operator's
/// account's bus, whose rule delivers them to the queue. The operator's own writes there (its
/// session of the role) count as `own` and wake nothing; a public access block removed and a
/// user policy widened there out of band are corrected within 5 s by their events (the resync
/// is an hour); an event for a user of the same name in the operator's own account wakes
/// nothing (IAM names are per account).
#[tokio::test]
async fn a_member_accounts_drift_events_reach_the_operator_through_its_bus() {
    let client = admin().await;
    install_crds().await;
    let ns = namespace(&client, "acctev").await;
    let cluster = format!("ev{}", random(5));
    let member = Target::member().await;
    let (url, queue_arn) = drift_queue_for(&cluster).await;
    let roles = vec![member.role_arn(&cluster)];
    let opts = OperatorOpts {
        namespaces: vec![ns.clone()],
        cluster: Some(cluster.clone()),
        resync: "1h",
        extra_args: vec!["--drift-events-queue-url".into(), url],
        policy: Some(policy::with_drift_queue(
            policy::with_assume_roles(operator_policy(&cluster), &roles),
            Some(&queue_arn),
        )),
        ..Default::default()
    };
    let id =
        Identity::with_policy(&opts.namespaces, opts.cluster.clone(), opts.policy.clone()).await;
    member.set_up(&cluster).await;
    forward_drift_events(&member, &cluster).await;
    let acct = format!("{cluster}-m");
    external_id_secret(&client, &id.operator_ns, "ext", EXTERNAL_ID).await;
    aws_account(&client, &acct, &member.role_arn(&cluster), "ext").await;
    class_in(&client, &acct, &ns, &acct).await;
    let op = Operator::start_as(&id, &opts, "0").await;
    op.wait_settled(Duration::from_secs(2)).await;
    let events = |outcome: &'static str| {
        let op = &op;
        async move {
            op.metric("s3_operator_drift_events_total", &[("outcome", outcome)])
                .await
        }
    };
    let own = events("own").await;

    let pair = pair_in(&client, &ns, &acct).await;
    lives_in(&pair, &acct, &member).await;
    op.wait_settled(Duration::from_secs(2)).await;
    let own_there = events("own").await - own;
    assert!(
        own_there >= 4.0,
        "the operator's writes in the member account come back as its own: {own_there}"
    );
    // Other tests share the emulator and its IAM events reach this queue too: the operator's
    // log (debug) names each event it took for drift.
    let (name, user) = (pair.s3_name.clone(), pair.user());
    let took_for_drift = |what: String| {
        let op = &op;
        async move { op.log_text().contains(&what) }
    };
    let bucket_event = format!("Bucket {{ name: \"{name}\"");
    let user_event = format!("Identity {{ name: \"{user}\"");
    assert!(
        !took_for_drift(bucket_event.clone()).await && !took_for_drift(user_event.clone()).await,
        "none of the operator's writes in the member account is taken for drift"
    );

    member
        .s3
        .delete_public_access_block()
        .bucket(&name)
        .send()
        .await
        .unwrap();
    let took_pab = corrected(
        "public access block removed in the member account",
        || async {
            member
                .s3
                .get_public_access_block()
                .bucket(&name)
                .send()
                .await
                .is_ok()
        },
    )
    .await;
    let user_policy = || async {
        let got = member
            .iam
            .get_user_policy()
            .user_name(&user)
            .policy_name("s3-operator-access")
            .send()
            .await
            .ok()?;
        policy::decode_document(&got.policy_document)
    };
    let granted = user_policy().await.expect("the access's user policy");
    let wide = json!({"Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]});
    member
        .iam
        .put_user_policy()
        .user_name(&user)
        .policy_name("s3-operator-access")
        .policy_document(wide.to_string())
        .send()
        .await
        .unwrap();
    let took_user = corrected("user policy widened in the member account", || async {
        user_policy().await.as_ref() == Some(&granted)
    })
    .await;
    for took in [took_pab, took_user] {
        assert!(took < WITHIN, "corrected in {took:?}, more than {WITHIN:?}");
    }
    // Counted when the pass that corrected publishes, after its last write: a moment after
    // AWS shows the correction.
    wait_for(
        "2 drift corrections counted",
        Duration::from_secs(10),
        || async {
            let drift = op.metric("s3_operator_drift_corrections_total", &[]).await;
            (drift >= 2.0).then_some(())
        },
    )
    .await;

    // A user of the same name in the operator's own account, its policy edited: the event
    // arrives and wakes nothing, so no S3 or IAM call follows.
    op.wait_settled(Duration::from_secs(2)).await;
    let calls = || op.s3_and_iam_calls();
    let before = calls().await;
    let home = admin_iam();
    assert_eq!(user, naming::iam_name(&ns, "a", &pair.uid()));
    home.create_user().user_name(&user).send().await.unwrap();
    home.put_user_policy()
        .user_name(&user)
        .policy_name("s3-operator-access")
        .policy_document(wide.to_string())
        .send()
        .await
        .unwrap();
    let home_event = format!("{user_event}, account: Some(\"{ACCOUNT}\") }}");
    wait_for("the same-named user's event read", T, || async {
        took_for_drift(home_event.clone()).await.then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        calls().await,
        before,
        "an event for a same-named user in another account wakes nothing"
    );
    let _ = home
        .delete_user_policy()
        .user_name(&user)
        .policy_name("s3-operator-access")
        .send()
        .await;
    let _ = home.delete_user().user_name(&user).send().await;
    drop(op);
}

/// AWS throttles per account, so the budgets are per account: a tenant flooding its Buckets in
/// another account spends that account's budget of its namespace, says so naming the account,
/// and the same namespace's Bucket in the operator's own account is not held up by it (its
/// budget there was not spent: a single Bucket's own writes may run past a burst of 4 and
/// defer its echo, so that is checked before it).
#[tokio::test]
async fn a_namespaces_flood_in_one_account_spends_only_its_budget_there() {
    let client = admin().await;
    install_crds().await;
    let ns = namespace(&client, "acctbudget").await;
    let cluster = format!("acctb{}", random(5));
    let target = Target::other();
    let budget = [
        "--namespace-aws-write-rate",
        "2",
        "--namespace-aws-write-burst",
        "4",
    ];
    let (op, _) = operator_with(std::slice::from_ref(&ns), &cluster, &[&target], &budget).await;
    let name = format!("{cluster}-a");
    external_id_secret(&client, &op.operator_ns, "ext", EXTERNAL_ID).await;
    aws_account(&client, &name, &target.role_arn(&cluster), "ext").await;
    class_in(&client, &name, &ns, &name).await;
    let buckets = Api::<Bucket>::namespaced(client.clone(), &ns);
    const N: usize = 10;
    for i in 0..N {
        let b = bucket(&format!("f-{i}"), json!({"className": name}));
        buckets.create(&PostParams::default(), &b).await.unwrap();
    }
    let said = format!("namespace {ns} in AWSAccount {name} has spent its budget of AWS writes");
    wait_event(&ns, "WriteBudgetExhausted", &[&said]).await;
    let deferred = |account: Option<&'static str>| {
        let op = &op;
        let name = name.clone();
        async move {
            let mut labels = vec![("controller", "bucket")];
            let account = account.map(str::to_string).unwrap_or(name);
            labels.push(("account", account.as_str()));
            op.metric("s3_operator_aws_write_budget_exhausted_total", &labels)
                .await
        }
    };
    assert!(deferred(None).await > 0.0, "counted under the account");
    assert_eq!(
        deferred(Some("")).await,
        0.0,
        "the flood spent nothing of the operator's own account's budget"
    );
    // The same namespace, the operator's own account: its own budget, untouched.
    let start = Instant::now();
    let home = bucket("home", json!({}));
    buckets.create(&PostParams::default(), &home).await.unwrap();
    wait_ready(&buckets, "home").await;
    let took = start.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "the home Bucket waited {took:?}"
    );
    let list = buckets.list(&Default::default()).await.unwrap();
    let flood_ready = list
        .items
        .iter()
        .filter(|b| b.metadata.name.as_deref() != Some("home"))
        .filter(|b| {
            let status = b.status.as_ref().map(|s| s.conditions.as_slice());
            s3_operator::api::condition::is_ready(status.unwrap_or_default())
        })
        .count();
    assert!(
        flood_ready < N,
        "the flood still waits for its account's budget"
    );
    let home_status = buckets.get("home").await.unwrap().status.unwrap();
    assert!(
        home_status.account.is_none(),
        "the home Bucket lives at home"
    );
    drop(op);
}
