//! EKS Pod Identity end to end: the operator keeps one association per ServiceAccount in the
//! emulator's EKS, to a role of the access's own or to the administrator's shared role narrowed
//! by a session policy. Credentials come the way they do on EKS, through the Pod Identity agent
//! (the environment's stand-in, which calls the emulator's EKS Auth AssumeRoleForPodIdentity
//! with the Pod's ServiceAccount token): from the host with tokens the API server issues, and
//! from a Pod through the SDK's default chain only.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, PostParams};
use s3_operator::api::{Bucket, BucketAccess, Permission};
use s3_operator::aws::{naming, policy, tags};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

type Association = aws_sdk_eks::types::PodIdentityAssociation;

use crate::access::access;
use crate::node::{images, node, strings};
use crate::support::*;
use crate::workload_identity::{App, Token, prefix_pods, run_app, token, workload_scene};

const T: Duration = Duration::from_secs(60);
/// The audience of the tokens the Pod Identity agent takes.
const AUDIENCE: &str = "pods.eks.amazonaws.com";
/// The grant: read and write under this prefix only.
const PREFIX: &str = "reports/";

/// A namespace whose operator serves PodIdentity credentials (with the shared role or not), a
/// Bucket, and a ReadWrite access `pi` under PREFIX for ServiceAccount `reporter`; ServiceAccount
/// `intruder` has no access.
struct Setup {
    ns: String,
    bucket: String,
    cluster: String,
    shared: Option<String>,
    accesses: Api<BucketAccess>,
    op: Operator,
}

fn eks_cluster() -> String {
    env()
        .eks_cluster_name
        .clone()
        .expect("S3OP_EKS_CLUSTER_NAME: restart the environment (hack/env.sh down, then up)")
}

fn admin_eks() -> aws_sdk_eks::Client {
    let (k, s) = &env().admin_key;
    let creds = aws_sdk_eks::config::Credentials::new(k, s, None, None, "e2e");
    let conf = aws_sdk_eks::config::Builder::new()
        .behavior_version(aws_sdk_eks::config::BehaviorVersion::latest())
        .region(aws_sdk_eks::config::Region::new(env().region.clone()))
        .endpoint_url(&env().aws_endpoint)
        .credentials_provider(creds)
        .build();
    aws_sdk_eks::Client::from_conf(conf)
}

/// A role EKS Pod Identity may assume, allowed what the installation's boundary allows (its
/// buckets): the shared role an administrator creates once.
async fn pod_role(cluster: &str, name: &str) -> String {
    let trust = json!({"Version": "2012-10-17", "Statement": [{"Effect": "Allow",
        "Principal": {"Service": AUDIENCE}, "Action": ["sts:AssumeRole", "sts:TagSession"]}]});
    let iam = admin_iam();
    let role = iam
        .create_role()
        .role_name(name)
        .path("/platform/")
        .assume_role_policy_document(trust.to_string())
        .send()
        .await
        .expect("create the role");
    let buckets = policy::boundary_policy(&scope(cluster));
    iam.put_role_policy()
        .role_name(name)
        .policy_name("operator-buckets")
        .policy_document(buckets.to_string())
        .send()
        .await
        .expect("its policy");
    role.role.expect("a role").arn
}

/// The operator's IAM policy as `s3-operator iam-policy` prints it for the installation of
/// `cluster` run with `args` (its EKS flags).
fn rendered_policy(cluster: &str, args: &[String]) -> Value {
    let mut render = strings(&[
        "iam-policy",
        "--account-id",
        ACCOUNT,
        "--cluster-name",
        cluster,
    ]);
    render.extend(args.iter().cloned());
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_s3-operator"))
        .args(&render)
        .output()
        .expect("s3-operator iam-policy");
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).expect("a policy")
}

async fn setup(tag: &str, shared: bool) -> Setup {
    let client = admin().await;
    let ns = namespace(&client, tag).await;
    let cluster = format!("t{}", random(6));
    let eks = eks_cluster();
    let shared = match shared {
        true => Some(pod_role(&cluster, &format!("s3op-shared-{}", random(6))).await),
        false => None,
    };
    let mut args = strings(&["--eks-cluster-name", &eks]);
    args.extend(
        shared
            .iter()
            .flat_map(|r| strings(&["--pod-identity-role-arn", r])),
    );
    let doc = rendered_policy(&cluster, &args);
    let op = Operator::start(OperatorOpts {
        namespaces: vec![ns.clone()],
        cluster: Some(cluster.clone()),
        extra_args: args,
        policy: Some(doc),
        ..Default::default()
    })
    .await;
    let AccessPair {
        s3_name: bucket,
        accesses,
        ..
    } = workload_scene(&ns, pod_access("pi", Some(PREFIX))).await;
    Setup {
        ns,
        bucket,
        cluster,
        shared,
        accesses,
        op,
    }
}

/// A ReadWrite PodIdentity access for ServiceAccount `reporter`.
fn pod_access(name: &str, prefix: Option<&str>) -> BucketAccess {
    let spec = json!({"bucketRef": {"name": "b"}, "permission": "ReadWrite", "prefix": prefix,
        "credentials": {"type": "PodIdentity", "serviceAccountName": "reporter"}});
    access(name, spec)
}

/// The association of `sa` in `ns`, as EKS describes it.
async fn association_of(ns: &str, sa: &str) -> Option<Association> {
    let eks = admin_eks();
    let listed = eks
        .list_pod_identity_associations()
        .cluster_name(eks_cluster())
        .namespace(ns)
        .service_account(sa)
        .send()
        .await
        .expect("list associations");
    let id = listed.associations?.first()?.association_id.clone()?;
    let described = eks
        .describe_pod_identity_association()
        .cluster_name(eks_cluster())
        .association_id(id)
        .send()
        .await
        .expect("describe the association");
    described.association
}

fn policy_of(a: &Association) -> Option<Value> {
    a.policy
        .as_deref()
        .map(|p| serde_json::from_str(p).expect("JSON"))
}

/// Credentials from the agent stand-in's loopback URL for `token`, as the SDK's container
/// credentials provider asks (the token as the whole Authorization header): an S3 client of
/// that session, or the error code the agent passed on.
async fn through_agent(token: &str) -> Result<aws_sdk_s3::Client, String> {
    let url = env()
        .pod_identity_agent_url
        .clone()
        .expect("S3OP_POD_IDENTITY_AGENT_URL: restart the environment");
    let (addr, path) = url
        .trim_start_matches("http://")
        .split_once('/')
        .expect("a URL with a path");
    let mut sock = tokio::net::TcpStream::connect(addr)
        .await
        .expect("the agent");
    let request = format!("GET /{path} HTTP/1.0\r\nHost: {addr}\r\nAuthorization: {token}\r\n\r\n");
    sock.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    sock.read_to_string(&mut answer).await.unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
    let status = head.split_whitespace().nth(1).unwrap_or_default();
    let body: Value = serde_json::from_str(body).expect("JSON");
    if status != "200" {
        return Err(body["code"].as_str().unwrap_or(status).to_string());
    }
    let field = |k: &str| body[k].as_str().expect(k).to_string();
    Ok(s3_session(
        &field("AccessKeyId"),
        &field("SecretAccessKey"),
        Some(field("Token")),
    ))
}

/// The association is the operator's (tagged for this access), names the right role (the
/// access's own, trusted by Pod Identity for this ServiceAccount only, or the shared one with
/// the grant as its session policy), and status and Secret say so without any key.
async fn association_is_as_designed(s: &Setup) -> Association {
    let access = s.accesses.get("pi").await.unwrap();
    let status = access.status.clone().unwrap();
    let a = association_of(&s.ns, "reporter")
        .await
        .expect("the association");
    assert_eq!(status.pod_identity_association_id, a.association_id);
    assert_eq!(status.role_arn, a.role_arn);
    let tags = a.tags.clone().unwrap_or_default();
    assert_eq!(tags.get(tags::CLUSTER), Some(&s.cluster));
    assert_eq!(tags.get(tags::UID), access.metadata.uid.as_ref());
    let grant = policy::access_policy("aws", &s.bucket, Permission::ReadWrite, Some(PREFIX));
    match &s.shared {
        Some(shared) => {
            assert_eq!(a.role_arn.as_ref(), Some(shared));
            assert_eq!(policy_of(&a), Some(grant));
            assert_eq!(
                a.disable_session_tags,
                Some(true),
                "EKS's rule for a policy"
            );
        }
        None => {
            assert_eq!(policy_of(&a), None);
            let arn = a.role_arn.clone().unwrap();
            let name = arn.rsplit('/').next().unwrap();
            let role = admin_iam().get_role().role_name(name).send().await;
            let role = role.unwrap().role.unwrap();
            let trust = policy::decode_document(&role.assume_role_policy_document.unwrap());
            let want = policy::pod_identity_trust_policy(
                &naming::eks_cluster_arn(&env().region, ACCOUNT, &eks_cluster()),
                &s.ns,
                "reporter",
            );
            assert_eq!(trust, Some(want));
            assert!(role.permissions_boundary.is_some(), "the boundary caps it");
        }
    }
    let secret = Api::<Secret>::namespaced(admin().await, &s.ns)
        .get("pi")
        .await;
    let data = secret_data(&secret.unwrap());
    assert_eq!(data["BUCKET_NAME"], s.bucket);
    for key in ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ROLE_ARN"] {
        assert!(!data.contains_key(key), "{key} in the Secret");
    }
    a
}

/// Credentials through the agent reach the prefix only, and only for the named ServiceAccount
/// with the Pod Identity audience.
async fn only_the_service_account_gets_its_prefix(s: &Setup) {
    let good = token(&s.ns, "reporter", AUDIENCE).await;
    // Associations are eventually consistent on EKS; here they hold at once.
    let s3 = through_agent(&good).await.expect("reporter's credentials");
    let inside = format!("{PREFIX}from-host.txt");
    crate::access::put(&s3, &s.bucket, &inside).await.unwrap();
    crate::access::get(&s3, &s.bucket, &inside).await.unwrap();
    let outside = crate::access::put(&s3, &s.bucket, "elsewhere.txt").await;
    assert!(outside.unwrap_err().contains("AccessDenied"));
    let intruder = through_agent(&token(&s.ns, "intruder", AUDIENCE).await).await;
    assert_eq!(intruder.err().as_deref(), Some("ResourceNotFoundException"));
    let sts_audience = through_agent(&token(&s.ns, "reporter", "sts.amazonaws.com").await).await;
    assert_eq!(sts_audience.err().as_deref(), Some("InvalidTokenException"));
}

/// The operator's AWS writes while `during` runs and a few resyncs (3 s) pass.
async fn writes_during<F: Future<Output = ()>>(s: &Setup, during: F) -> Vec<String> {
    let before = emulator_requests(&s.op.aws_key_id).await;
    during.await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let after = emulator_requests(&s.op.aws_key_id).await;
    aws_writes_between(&before, &after).into_keys().collect()
}

/// Both modes, end to end: the association as designed, credentials only for the named
/// ServiceAccount and only under the prefix, no write in steady state, drift put back, a
/// deleted association made again, a second access on the ServiceAccount refused without a
/// write, and deletion removing the association (and the access's own role).
async fn end_to_end(shared: bool) {
    let s = setup(if shared { "pi-shared" } else { "pi-own" }, shared).await;
    let a = association_is_as_designed(&s).await;
    only_the_service_account_gets_its_prefix(&s).await;
    let quiet = writes_during(&s, async {}).await;
    assert!(quiet.is_empty(), "steady state wrote {quiet:?}");
    let again = drift_is_put_back(&s, &a).await;
    a_second_access_is_refused_without_a_write(&s, &again).await;
    a_bucket_gone_withdraws_the_grant(&s).await;
    deletion_removes_the_association_then_the_role(&s, &again).await;
}

/// The association `a` changed outside (the shared role's session policy widened to the whole
/// bucket, or the access's own association pointed at another role) is put back; deleted
/// outside, it is made again and the status names the new one. Returns the new one.
async fn drift_is_put_back(s: &Setup, a: &Association) -> Association {
    let id = a.association_id.clone().unwrap();
    let update = admin_eks()
        .update_pod_identity_association()
        .cluster_name(eks_cluster())
        .association_id(&id);
    let update = match &s.shared {
        Some(_) => {
            let wide = policy::access_policy("aws", &s.bucket, Permission::ReadWrite, None);
            update.policy(wide.to_string()).disable_session_tags(true)
        }
        None => update.role_arn(pod_role(&s.cluster, &format!("s3op-other-{}", random(6))).await),
    };
    update.send().await.expect("change the association");
    wait_for("the association put back", T, || async {
        let now = association_of(&s.ns, "reporter").await?;
        (now.role_arn == a.role_arn && policy_of(&now) == policy_of(a)).then_some(())
    })
    .await;
    admin_eks()
        .delete_pod_identity_association()
        .cluster_name(eks_cluster())
        .association_id(&id)
        .send()
        .await
        .expect("delete the association");
    let again = wait_for("the association made again", T, || async {
        let status = s.accesses.get("pi").await.ok()?.status?;
        let now = association_of(&s.ns, "reporter").await?;
        let named = status.pod_identity_association_id == now.association_id;
        (now.association_id != Some(id.clone()) && named).then_some(now)
    })
    .await;
    let notes = [
        "Set role and session policy of",
        "Recreated EKS Pod Identity association",
    ];
    wait_event(&s.ns, "DriftCorrected", &notes).await;
    again
}

/// A second access on the same ServiceAccount is refused, naming no other object, and nothing
/// is written to AWS; the association (`current`) stays as it is.
async fn a_second_access_is_refused_without_a_write(s: &Setup, current: &Association) {
    let conflict = writes_during(s, async {
        s.accesses
            .create(&PostParams::default(), &pod_access("pi2", None))
            .await
            .unwrap();
        wait_reason(&s.accesses, "pi2", "OwnershipConflict", T).await;
    })
    .await;
    assert!(conflict.is_empty(), "the conflict wrote {conflict:?}");
    let msg = wait_reason(&s.accesses, "pi2", "OwnershipConflict", T).await;
    assert_eq!(
        msg,
        "the EKS Pod Identity association of ServiceAccount reporter is held by another object of this installation; it will not be modified"
    );
    let still = association_of(&s.ns, "reporter").await.unwrap();
    let kept = policy_of(&still).is_some();
    assert_eq!(
        (still.association_id, still.role_arn, kept),
        (
            current.association_id.clone(),
            current.role_arn.clone(),
            s.shared.is_some()
        )
    );
}

/// The Bucket deleted: the grant is withdrawn. The shared role's association goes (its session
/// policy is all that narrows the role); the access's own role loses its policy and keeps its
/// association.
async fn a_bucket_gone_withdraws_the_grant(s: &Setup) {
    let buckets = Api::<Bucket>::namespaced(admin().await, &s.ns);
    buckets.delete("b", &DeleteParams::default()).await.unwrap();
    wait_reason(&s.accesses, "pi", "BucketNotFound", T).await;
    match &s.shared {
        Some(_) => {
            let gone = || async {
                association_of(&s.ns, "reporter")
                    .await
                    .is_none()
                    .then_some(())
            };
            wait_for("the shared role's association deleted", T, gone).await;
        }
        None => {
            let role = s.accesses.get("pi").await.unwrap().status.unwrap().role_arn;
            let name = role.unwrap().rsplit('/').next().unwrap().to_string();
            wait_for("the role's policy removed", T, || async {
                let iam = admin_iam();
                let read = iam
                    .get_role_policy()
                    .role_name(&name)
                    .policy_name("s3-operator-access");
                read.send().await.is_err().then_some(())
            })
            .await;
            assert!(association_of(&s.ns, "reporter").await.is_some());
        }
    }
}

/// Deleting the accesses removes the association, then the access's own role.
async fn deletion_removes_the_association_then_the_role(s: &Setup, current: &Association) {
    for name in ["pi2", "pi"] {
        s.accesses
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }
    wait_for("the access deleted", T, || async {
        s.accesses
            .get_opt("pi")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    assert!(association_of(&s.ns, "reporter").await.is_none());
    if s.shared.is_none() {
        let role = current.role_arn.clone().unwrap();
        let name = role.rsplit('/').next().unwrap();
        let gone = admin_iam().get_role().role_name(name).send().await;
        assert!(gone.is_err(), "the access's role deleted");
    }
}

#[tokio::test]
async fn a_role_per_access_is_associated_and_kept() {
    end_to_end(false).await;
}

#[tokio::test]
async fn the_shared_role_is_narrowed_per_access_and_kept() {
    end_to_end(true).await;
}

/// A Pod configured as EKS's webhook configures it (only the container credentials URL of the
/// agent and a projected token for its audience) plus the Secret writes and reads under its
/// prefix through the SDK's default chain alone, on the shared role; outside the prefix, or as
/// another ServiceAccount, it fails.
#[tokio::test]
async fn a_pod_uses_the_shared_role_through_the_agent() {
    let node = node();
    let images = images(&node).await;
    let s = setup("pi-pod", true).await;
    let key = format!("{PREFIX}from-pod.txt");
    let run = |name: &'static str, sa: &'static str, key: String| {
        let (ns, image, endpoint) = (s.ns.clone(), images.app.clone(), node.aws_endpoint.clone());
        async move { run_pod_identity_app(&ns, name, sa, &image, &endpoint, &key).await }
    };
    let intruder = prefix_pods(&s.bucket, &key, run).await;
    // The agent finds no association for it: the SDK gets no credentials at all.
    assert!(
        !intruder.0
            && intruder
                .1
                .contains("HTTP credential provider: StatusCode(404)"),
        "another ServiceAccount:\n{}",
        intruder.1
    );
}

/// Runs bucket-app as `sa` with what EKS's Pod Identity webhook injects; (succeeded, log).
async fn run_pod_identity_app(
    ns: &str,
    name: &str,
    sa: &str,
    image: &str,
    endpoint: &str,
    key: &str,
) -> (bool, String) {
    let token = Token {
        audience: AUDIENCE,
        dir: "/var/run/secrets/pods.eks.amazonaws.com/serviceaccount",
        file: "eks-pod-identity-token",
        seconds: 86400,
    };
    // The Secret's endpoint is the operator's (loopback here); the Pod reaches moto at the node.
    let env = json!([
        {"name": "AWS_CONTAINER_CREDENTIALS_FULL_URI", "value": "http://169.254.170.23/v1/credentials"},
        {"name": "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "value": format!("{}/{}", token.dir, token.file)},
        {"name": "AWS_ENDPOINT_URL_S3", "value": endpoint},
    ]);
    let app = App {
        ns,
        name,
        sa,
        image,
        key,
        secret: "pi",
    };
    run_app(&app, token, env).await
}
