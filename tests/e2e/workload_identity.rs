//! Workload identity end to end: a ServiceAccountRole (IRSA) is assumed with ServiceAccount
//! tokens the API server signs, which the emulator checks as STS does (the account's OIDC
//! provider for the issuer, the issuer's keys from its discovery document, audience, expiry, the
//! role's trust conditions): from the host with every token STS must refuse, and from a Pod
//! through the SDK's default chain only.

use std::process::{Command, Stdio};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Pod, Secret, ServiceAccount};
use kube::api::{Api, DeleteParams, PostParams};
use s3_operator::api::BucketAccess;
use serde_json::{Value, json};

use crate::access::access;
use crate::node::{images, node, phase, strings};
use crate::support::*;

const T: Duration = Duration::from_secs(60);
const STS_AUDIENCE: &str = "sts.amazonaws.com";
/// The role's grant: read and write under this prefix only.
const PREFIX: &str = "reports/";

/// A namespace with an operator that knows the environment's OIDC provider, a Bucket, and a
/// ReadWrite ServiceAccountRole access for ServiceAccount `reporter` under PREFIX. ServiceAccount
/// `intruder` exists in the same namespace and has no access.
struct Irsa {
    ns: String,
    bucket: String,
    role_arn: String,
    _op: Operator,
}

async fn irsa(tag: &str) -> Irsa {
    let client = admin().await;
    let ns = namespace(&client, tag).await;
    let op = Operator::start(OperatorOpts {
        namespaces: vec![ns.clone()],
        extra_args: strings(&["--oidc-provider-arn", &env().oidc_provider_arn]),
        ..Default::default()
    })
    .await;
    let spec = json!({"bucketRef": {"name": "b"}, "permission": "ReadWrite", "prefix": PREFIX,
        "credentials": {"type": "ServiceAccountRole", "serviceAccountName": "reporter"}});
    let scene = workload_scene(&ns, access("irsa", spec)).await;
    let status = scene.access.status.unwrap();
    Irsa {
        ns,
        bucket: scene.s3_name,
        role_arn: status.role_arn.expect("status.roleArn"),
        _op: op,
    }
}

/// What both workload identity kinds are tested in, in `ns` (whose operator runs):
/// ServiceAccounts `reporter` and `intruder`, a Ready Bucket `b` (deleted with its objects), and
/// `access` (for `reporter`), Available.
pub(crate) async fn workload_scene(ns: &str, access: BucketAccess) -> AccessPair {
    let client = admin().await;
    let sas = Api::<ServiceAccount>::namespaced(client.clone(), ns);
    for sa in ["reporter", "intruder"] {
        let obj = serde_json::from_value(json!({"metadata": {"name": sa}})).unwrap();
        sas.create(&PostParams::default(), &obj).await.unwrap();
    }
    let spec = json!({"deletionPolicy": "Delete", "forceDelete": true});
    AccessPair::create(&client, ns, bucket("b", spec), access).await
}

/// A token the API server issues for `sa` (TokenRequest, as kubelet's projected volume does).
pub(crate) async fn token(ns: &str, sa: &str, audience: &str) -> String {
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![audience.into()],
            expiration_seconds: Some(600),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<ServiceAccount>::namespaced(admin().await, ns)
        .create_token_request(sa, &PostParams::default(), &request)
        .await
        .unwrap()
        .status
        .expect("a token")
        .token
}

/// AssumeRoleWithWebIdentity, unsigned as the SDKs send it: the session's S3 client, or the
/// error code STS answered.
async fn assume(role_arn: &str, token: &str) -> Result<aws_sdk_s3::Client, String> {
    let conf = aws_sdk_sts::config::Builder::new()
        .behavior_version(aws_sdk_sts::config::BehaviorVersion::latest())
        .region(aws_sdk_sts::config::Region::new(env().region.clone()))
        .endpoint_url(&env().aws_endpoint)
        .build();
    let out = aws_sdk_sts::Client::from_conf(conf)
        .assume_role_with_web_identity()
        .role_arn(role_arn)
        .role_session_name("e2e")
        .web_identity_token(token)
        .send()
        .await
        .map_err(|e| {
            e.into_service_error()
                .meta()
                .code()
                .unwrap_or("?")
                .to_string()
        })?;
    let c = out.credentials.expect("credentials");
    Ok(s3_session(
        &c.access_key_id,
        &c.secret_access_key,
        Some(c.session_token),
    ))
}

/// `token` with its claims changed by `edit` and signed again with the RSA key in `key_pem`.
fn resigned(token: &str, key_pem: &std::path::Path, edit: impl FnOnce(&mut Value)) -> String {
    let mut parts = token.split('.');
    let header = parts.next().unwrap();
    let mut claims: Value =
        serde_json::from_slice(&B64.decode(parts.next().unwrap()).unwrap()).expect("JWT claims");
    edit(&mut claims);
    let signed = format!("{header}.{}", B64.encode(claims.to_string()));
    let mut openssl = Command::new("openssl")
        .args(["dgst", "-sha256", "-sign"])
        .arg(key_pem)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("openssl");
    use std::io::Write;
    let mut stdin = openssl.stdin.take().unwrap();
    stdin.write_all(signed.as_bytes()).unwrap();
    drop(stdin);
    let out = openssl.wait_with_output().unwrap();
    assert!(out.status.success(), "openssl dgst -sign failed");
    format!("{signed}.{}", B64.encode(out.stdout))
}

fn now() -> i64 {
    jiff::Timestamp::now().as_second()
}

/// The role is assumed only with a token STS would accept: signed by the cluster's issuer, for
/// STS's audience, unexpired, for exactly the named ServiceAccount of this namespace. The
/// session then reads and writes under the prefix and nowhere else; deleting the access deletes
/// the role, and the token no longer opens anything.
#[tokio::test]
async fn only_the_named_service_accounts_tokens_assume_the_role() {
    let irsa = irsa("irsa").await;
    let (ns, role) = (&irsa.ns, &irsa.role_arn);
    let good = token(ns, "reporter", STS_AUDIENCE).await;

    let s3 = assume(role, &good).await.expect("reporter's token");
    let inside = format!("{PREFIX}from-host.txt");
    crate::access::put(&s3, &irsa.bucket, &inside)
        .await
        .unwrap();
    crate::access::get(&s3, &irsa.bucket, &inside)
        .await
        .unwrap();
    let outside = crate::access::put(&s3, &irsa.bucket, "elsewhere.txt").await;
    assert!(outside.unwrap_err().contains("AccessDenied"));

    // Another namespace's ServiceAccount of the same name.
    let other_ns = namespace(&admin().await, "irsa-other").await;
    let sas = Api::<ServiceAccount>::namespaced(admin().await, &other_ns);
    let obj = serde_json::from_value(json!({"metadata": {"name": "reporter"}})).unwrap();
    sas.create(&PostParams::default(), &obj).await.unwrap();
    let refused = [
        (
            "another ServiceAccount",
            token(ns, "intruder", STS_AUDIENCE).await,
        ),
        (
            "another namespace",
            token(&other_ns, "reporter", STS_AUDIENCE).await,
        ),
        ("another audience", token(ns, "reporter", "vault").await),
    ];
    let codes: Vec<_> = futures::future::join_all(refused.iter().map(|(_, t)| assume(role, t)))
        .await
        .into_iter()
        .map(|r| r.err().unwrap_or_else(|| "accepted".into()))
        .collect();
    assert_eq!(
        codes,
        ["AccessDenied", "AccessDenied", "InvalidIdentityToken"],
        "{:?}",
        refused.map(|(what, _)| what)
    );

    // Signed by the issuer's own key but expired; and the same claims signed by another key.
    let issuer_key = env().state_dir.join("pki/sa.key");
    let expired = resigned(&good, &issuer_key, |c| {
        c["iat"] = json!(now() - 3700);
        c["nbf"] = json!(now() - 3700);
        c["exp"] = json!(now() - 100);
    });
    assert_eq!(
        assume(role, &expired).await.err().unwrap(),
        "ExpiredTokenException"
    );
    let other_key = env().state_dir.join("irsa-forger.key");
    let made = Command::new("openssl")
        .args(["genrsa", "-out"])
        .arg(&other_key)
        .arg("2048")
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(made.success());
    let forged = resigned(&good, &other_key, |_| {});
    assert_eq!(
        assume(role, &forged).await.err().unwrap(),
        "InvalidIdentityToken"
    );
    // Controls: the re-signing itself is sound (the issuer's key, claims untouched, passes).
    assume(role, &resigned(&good, &issuer_key, |_| {}))
        .await
        .expect("re-signed by the issuer");

    let secret = Api::<Secret>::namespaced(admin().await, ns)
        .get("irsa")
        .await;
    let data = secret_data(&secret.unwrap());
    assert_eq!(data["AWS_ROLE_ARN"], *role);
    assert_eq!(data["AWS_ENDPOINT_URL_STS"], env().aws_endpoint);
    assert!(
        !data.contains_key("AWS_SECRET_ACCESS_KEY"),
        "no long-lived keys"
    );

    let accesses = Api::<BucketAccess>::namespaced(admin().await, ns);
    accesses
        .delete("irsa", &DeleteParams::default())
        .await
        .unwrap();
    let gone = || async { assume(role, &good).await.err() };
    let code = wait_for("the role deleted with its access", T, gone).await;
    assert_eq!(code, "AccessDenied");
}

/// A Pod configured as EKS's webhook configures it (a projected token for STS's audience,
/// `AWS_WEB_IDENTITY_TOKEN_FILE`, `AWS_ROLE_ARN` from the Secret) writes and reads under its
/// prefix through the SDK's default chain alone; the same Pod outside the prefix, or as another
/// ServiceAccount, fails.
#[tokio::test]
async fn a_pod_uses_its_role_through_the_default_chain() {
    let node = node();
    let images = images(&node).await;
    let irsa = irsa("irsa-pod").await;
    let key = format!("{PREFIX}from-pod.txt");
    let run = |name: &'static str, sa: &'static str, key: String| {
        let (ns, image, endpoint) = (
            irsa.ns.clone(),
            images.app.clone(),
            node.aws_endpoint.clone(),
        );
        async move { run_web_identity_app(&ns, name, sa, &image, &endpoint, &key).await }
    };
    let intruder = prefix_pods(&irsa.bucket, &key, run).await;
    assert!(
        !intruder.0 && intruder.1.contains("AssumeRoleWithWebIdentity"),
        "another ServiceAccount:\n{}",
        intruder.1
    );
}

/// Runs `run` as ServiceAccount `reporter` on `key` (under its grant's prefix) and on a key
/// outside it, and as `intruder` (no grant) on `key`, at once: the first writes and reads its
/// object, the second is refused with AccessDenied. Returns the intruder's (succeeded, log).
pub(crate) async fn prefix_pods<F, R>(bucket: &str, key: &str, run: F) -> (bool, String)
where
    F: Fn(&'static str, &'static str, String) -> R,
    R: Future<Output = (bool, String)>,
{
    let (inside, outside, intruder) = futures::join!(
        run("inside", "reporter", key.to_string()),
        run("outside", "reporter", "elsewhere.txt".into()),
        run("intruder", "intruder", key.to_string()),
    );
    assert!(inside.0, "the Pod's log:\n{}", inside.1);
    let body = admin_s3().get_object().bucket(bucket).key(key).send().await;
    assert!(body.is_ok(), "the Pod's object: {body:?}");
    assert!(
        !outside.0 && outside.1.contains("AccessDenied"),
        "outside the prefix:\n{}",
        outside.1
    );
    intruder
}

/// Runs bucket-app as `sa` with the web identity settings; (succeeded, log).
async fn run_web_identity_app(
    ns: &str,
    name: &str,
    sa: &str,
    image: &str,
    endpoint: &str,
    key: &str,
) -> (bool, String) {
    const TOKEN_DIR: &str = "/var/run/secrets/eks.amazonaws.com/serviceaccount";
    // The Secret's endpoints are the operator's (loopback here); the Pod reaches moto at the node.
    let env = json!([
        {"name": "AWS_WEB_IDENTITY_TOKEN_FILE", "value": format!("{TOKEN_DIR}/token")},
        {"name": "AWS_ENDPOINT_URL_S3", "value": endpoint},
        {"name": "AWS_ENDPOINT_URL_STS", "value": endpoint},
    ]);
    let token = Token {
        audience: STS_AUDIENCE,
        dir: TOKEN_DIR,
        file: "token",
        seconds: 3600,
    };
    let app = App {
        ns,
        name,
        sa,
        image,
        key,
        secret: "irsa",
    };
    run_app(&app, token, env).await
}

/// An application Pod: bucket-app (restricted, as `sa`) on `key`, with `secret` through
/// `envFrom`.
pub(crate) struct App<'a> {
    pub(crate) ns: &'a str,
    pub(crate) name: &'a str,
    pub(crate) sa: &'a str,
    pub(crate) image: &'a str,
    pub(crate) key: &'a str,
    pub(crate) secret: &'a str,
}

/// The projected ServiceAccount token an application Pod is given: its audience, where it is
/// mounted, and how long it lives.
pub(crate) struct Token {
    pub(crate) audience: &'static str,
    pub(crate) dir: &'static str,
    pub(crate) file: &'static str,
    pub(crate) seconds: i64,
}

/// Runs `app` with `token` projected and `env`; (succeeded, log).
pub(crate) async fn run_app(app: &App<'_>, token: Token, env: Value) -> (bool, String) {
    let App {
        ns,
        name,
        sa,
        image,
        key,
        secret,
    } = *app;
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "serviceAccountName": sa,
            "restartPolicy": "Never",
            "automountServiceAccountToken": false,
            "enableServiceLinks": false,
            "securityContext": {"runAsNonRoot": true, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
            "volumes": [{"name": "token", "projected": {"sources": [{"serviceAccountToken": {
                "audience": token.audience, "expirationSeconds": token.seconds, "path": token.file}}]}}],
            "containers": [{
                "name": "app",
                "image": image,
                "imagePullPolicy": "Never",
                "args": [key],
                "envFrom": [{"secretRef": {"name": secret}}],
                "env": env,
                "volumeMounts": [{"name": "token", "readOnly": true, "mountPath": token.dir}],
                "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                    "capabilities": {"drop": ["ALL"]}},
            }],
        },
    }))
    .unwrap();
    let api = Api::<Pod>::namespaced(admin().await, ns);
    api.create(&PostParams::default(), &pod).await.unwrap();
    let done = wait_for(
        &format!("Pod {ns}/{name} to finish"),
        crate::node::T,
        || async {
            let p = api.get(name).await.ok()?;
            matches!(phase(&p), "Succeeded" | "Failed").then_some(p)
        },
    )
    .await;
    let (_, logs, _) = try_tool("kubectl", &["logs", "-n", ns, name], None);
    (phase(&done) == "Succeeded", logs)
}
