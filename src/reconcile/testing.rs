//! Test doubles for the reconcilers' I/O: a fake Kubernetes API server (a tower service under a
//! real `kube::Client`, as kube-rs's controller-rs fixtures do) and a fake AWS endpoint (S3, IAM
//! and STS over HTTP on a local port, behind the operator's own `Aws` and its transport). Each
//! answers from rules a test gives and records every request, so a test runs a real pass over a
//! real [`Context`] and asserts what went out.
//!
//! A request is named by its method, path and the parameters that choose the operation: S3's
//! subresources (`GET /b?tagging`) and the query protocol's `Action` (`POST /?Action=CreateUser`
//! for IAM). Valued parameters (`x-id`, `max-keys`, `fieldManager`) are left out of the name;
//! [`Seen`] keeps them. S3 is addressed path-style, so a bucket's path ends in `/`.
//!
//! ```text
//! let fakes = Fakes::start().await;
//! fakes.accept_events("ns");
//! fakes.kube.on("PATCH /apis/s3.operator.dev/v1alpha1/namespaces/ns/buckets/b", Reply::json(200, &b));
//! fakes.aws.once("GET /s3op-b/?tagging", Reply::s3_error(404, "NoSuchBucket"));
//! fakes.aws.on("POST /?Action=CreateUser", Reply::query_error(409, "EntityAlreadyExists"));
//! let out = reconcile(Arc::new(b), Arc::new(fakes.context())).await;
//! assert_eq!(fakes.aws.requests(), ["GET /s3op-b/?tagging", ...]);
//! ```
//!
//! The AWS clients honour the proxy variables as in production: a proxy set in the test's
//! environment must exempt 127.0.0.1 (`NO_PROXY`).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use http::{Request, Response, StatusCode, header};

use super::context::Context;
use super::events::Events;
use super::object::MANAGER;
use crate::aws::Aws;
use crate::metrics::Metrics;

/// One request a fake received.
#[derive(Clone, Debug)]
pub struct Seen {
    /// When it arrived, counted across both fakes of a [`Fakes`]: orders a Kubernetes write
    /// against an AWS one.
    pub at: usize,
    pub method: String,
    pub path: String,
    /// The URL's query, and for a form body (AWS query protocol) its fields too.
    pub params: Vec<(String, Option<String>)>,
    pub body: Bytes,
}

impl Seen {
    /// `METHOD /path?subresource&Action=Op`: what the request asks for.
    pub fn name(&self) -> String {
        let chosen: Vec<String> = self
            .params
            .iter()
            .filter_map(|(k, v)| match v {
                None => Some(k.clone()),
                Some(v) if k == "Action" => Some(format!("{k}={v}")),
                Some(_) => None,
            })
            .collect();
        match chosen.is_empty() {
            true => format!("{} {}", self.method, self.path),
            false => format!("{} {}?{}", self.method, self.path, chosen.join("&")),
        }
    }

    /// The body as JSON (a Kubernetes request's).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }

    /// A parameter of the URL or form body.
    pub fn param(&self, key: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == key)
            .and_then(|(_, v)| v.as_deref())
    }

    /// Does `pattern` (`METHOD /path?a&b=c`) choose this request? Its method and path are equal,
    /// its subresources are exactly the request's, and its valued parameters are among them.
    fn chosen_by(&self, pattern: &str) -> bool {
        let (method, rest) = pattern.split_once(' ').expect("METHOD /path");
        let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
        let wanted = parse_params(query);
        let subresources = |ps: &[(String, Option<String>)]| {
            let mut keys: Vec<String> = (ps.iter())
                .filter(|(_, v)| v.is_none())
                .map(|(k, _)| k.clone())
                .collect();
            keys.sort();
            keys
        };
        method == self.method
            && path == self.path
            && subresources(&wanted) == subresources(&self.params)
            && wanted
                .iter()
                .all(|w| w.1.is_none() || self.params.contains(w))
    }
}

fn parse_params(query: &str) -> Vec<(String, Option<String>)> {
    let decode = |s: &str| {
        let s = s.replace('+', " ");
        percent_encoding::percent_decode_str(&s)
            .decode_utf8_lossy()
            .into_owned()
    };
    (query.split('&'))
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (decode(k), Some(decode(v))),
            None => (decode(p), None),
        })
        .collect()
}

/// What a fake answers.
#[derive(Clone, Debug)]
pub enum Reply {
    Body {
        status: u16,
        content_type: &'static str,
        body: String,
    },
    /// The request's own body (a created Event, say), with this status.
    Echo(u16),
}

impl Reply {
    pub fn json(status: u16, value: impl serde::Serialize) -> Reply {
        let body = serde_json::to_string(&value).expect("serializable");
        Reply::Body {
            status,
            content_type: "application/json",
            body,
        }
    }

    /// A Kubernetes `Status` failure, as the API server sends it (`409`, `"Conflict"`).
    pub fn kube_error(code: u16, reason: &str) -> Reply {
        let status = serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": format!("{reason} (from the fake API server)"), "reason": reason,
            "code": code,
        });
        Reply::json(code, status)
    }

    pub fn xml(status: u16, body: impl Into<String>) -> Reply {
        Reply::Body {
            status,
            content_type: "application/xml",
            body: body.into(),
        }
    }

    /// An empty success (most S3 writes).
    pub fn ok() -> Reply {
        Reply::xml(200, "")
    }

    /// An S3 (REST-XML) error.
    pub fn s3_error(status: u16, code: &str) -> Reply {
        Reply::xml(
            status,
            format!("<Error><Code>{code}</Code><Message>{code} (fake)</Message></Error>"),
        )
    }

    /// An IAM or STS (query protocol) error.
    pub fn query_error(status: u16, code: &str) -> Reply {
        Reply::xml(
            status,
            format!(
                "<ErrorResponse><Error><Type>Sender</Type><Code>{code}</Code>\
                 <Message>{code} (fake)</Message></Error><RequestId>r</RequestId></ErrorResponse>"
            ),
        )
    }

    /// An IAM (query protocol) answer to `action` whose result element holds `result`: `""`
    /// for the writes that answer nothing.
    pub fn iam(action: &str, result: &str) -> Reply {
        Reply::xml(
            200,
            format!(
                "<{action}Response xmlns=\"https://iam.amazonaws.com/doc/2010-05-08/\">\
                 <{action}Result>{result}</{action}Result>\
                 <ResponseMetadata><RequestId>r</RequestId></ResponseMetadata></{action}Response>"
            ),
        )
    }

    /// GetBucketTagging's answer.
    pub fn s3_tags(tags: &BTreeMap<String, String>) -> Reply {
        let tags: String = (tags.iter())
            .map(|(k, v)| format!("<Tag><Key>{k}</Key><Value>{v}</Value></Tag>"))
            .collect();
        Reply::xml(200, format!("<Tagging><TagSet>{tags}</TagSet></Tagging>"))
    }

    fn response(&self, seen: &Seen) -> Response<Body> {
        let (status, content_type, body) = match self {
            Reply::Body {
                status,
                content_type,
                body,
            } => (*status, *content_type, Body::from(body.clone())),
            Reply::Echo(status) => (*status, "application/json", Body::from(seen.body.clone())),
        };
        Response::builder()
            .status(StatusCode::from_u16(status).expect("a status code"))
            .header(header::CONTENT_TYPE, content_type)
            .body(body)
            .expect("a response")
    }
}

struct Rule {
    pattern: String,
    reply: Reply,
    /// How many more requests it answers; `None`: any number.
    left: Option<usize>,
}

/// A fake server: the first rule that chooses a request answers it. A request no rule chooses
/// is recorded and answered with `unscripted`, an error no pass takes for success.
pub struct Fake {
    rules: Mutex<Vec<Rule>>,
    seen: Mutex<Vec<Seen>>,
    unscripted: Reply,
    clock: Arc<AtomicUsize>,
}

impl Fake {
    fn new(unscripted: Reply, clock: Arc<AtomicUsize>) -> Arc<Fake> {
        Arc::new(Fake {
            rules: Mutex::default(),
            seen: Mutex::default(),
            unscripted,
            clock,
        })
    }

    /// Answers every request `pattern` chooses with `reply`.
    pub fn on(&self, pattern: &str, reply: Reply) -> &Fake {
        self.rule(pattern, reply, None)
    }

    /// Answers the next request `pattern` chooses with `reply`, then leaves it to later rules.
    pub fn once(&self, pattern: &str, reply: Reply) -> &Fake {
        self.rule(pattern, reply, Some(1))
    }

    fn rule(&self, pattern: &str, reply: Reply, left: Option<usize>) -> &Fake {
        let pattern = pattern.to_string();
        (self.rules.lock().expect("rules")).push(Rule {
            pattern,
            reply,
            left,
        });
        self
    }

    /// Every request so far, named ([`Seen::name`]), in the order they arrived.
    pub fn requests(&self) -> Vec<String> {
        self.seen().iter().map(Seen::name).collect()
    }

    /// The same, sorted: for requests a pass sends concurrently.
    pub fn requests_sorted(&self) -> Vec<String> {
        let mut all = self.requests();
        all.sort();
        all
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("seen").clone()
    }

    /// The requests that chose `pattern`.
    pub fn matching(&self, pattern: &str) -> Vec<Seen> {
        let seen = self.seen();
        seen.into_iter().filter(|s| s.chosen_by(pattern)).collect()
    }

    /// The bodies of the requests that chose `pattern`, as JSON (a Kubernetes request's).
    pub fn bodies(&self, pattern: &str) -> Vec<serde_json::Value> {
        self.matching(pattern).iter().map(Seen::json).collect()
    }

    async fn answer<B>(&self, request: Request<B>) -> Response<Body>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<tower::BoxError>,
    {
        let (parts, body) = request.into_parts();
        let body = axum::body::to_bytes(Body::new(body), usize::MAX)
            .await
            .expect("a request body");
        let mut params = parse_params(parts.uri.query().unwrap_or_default());
        let form = parts.headers.get(header::CONTENT_TYPE).is_some_and(|t| {
            (t.to_str().unwrap_or_default()).starts_with("application/x-www-form-urlencoded")
        });
        if form {
            params.extend(parse_params(&String::from_utf8_lossy(&body)));
        }
        let seen = Seen {
            at: self.clock.fetch_add(1, Ordering::SeqCst),
            method: parts.method.to_string(),
            path: parts.uri.path().to_string(),
            params,
            body,
        };
        let reply = self.reply_for(&seen);
        self.seen.lock().expect("seen").push(seen.clone());
        reply.response(&seen)
    }

    fn reply_for(&self, seen: &Seen) -> Reply {
        let mut rules = self.rules.lock().expect("rules");
        let open = |r: &&mut Rule| r.left != Some(0) && seen.chosen_by(&r.pattern);
        match rules.iter_mut().find(open) {
            Some(rule) => {
                rule.left = rule.left.map(|n| n - 1);
                rule.reply.clone()
            }
            None => self.unscripted.clone(),
        }
    }
}

/// The Ready condition a status write carried: its status, reason and message.
pub fn ready_in(status_patch: &serde_json::Value) -> (String, String, String) {
    let c = &status_patch["status"]["conditions"][0];
    let text = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    (text("status"), text("reason"), text("message"))
}

/// IAM's `<User>` element (GetUser's and CreateUser's results), under the operator's path.
pub fn iam_user(name: &str, boundary: Option<&str>, tags: &BTreeMap<String, String>) -> String {
    let boundary = boundary.map_or(String::new(), |arn| {
        format!(
            "<PermissionsBoundary><PermissionsBoundaryType>Policy</PermissionsBoundaryType>\
             <PermissionsBoundaryArn>{arn}</PermissionsBoundaryArn></PermissionsBoundary>"
        )
    });
    let tags: String = (tags.iter())
        .map(|(k, v)| format!("<member><Key>{k}</Key><Value>{v}</Value></member>"))
        .collect();
    format!(
        "<User><Path>/s3-operator/c/</Path><UserName>{name}</UserName><UserId>AIDA{name}</UserId>\
         <Arn>{}</Arn><CreateDate>2026-01-01T00:00:00Z</CreateDate>{boundary}<Tags>{tags}</Tags>\
         </User>",
        user_arn(name)
    )
}

/// The ARN of the user `name` in [`iam_user`].
pub fn user_arn(name: &str) -> String {
    format!("arn:aws:iam::123456789012:user/s3-operator/c/{name}")
}

/// ListAccessKeys' result: the user's keys (id, active), created a minute apart in this order.
pub fn iam_keys(user: &str, keys: &[(&str, bool)]) -> String {
    let members: String = (keys.iter().enumerate())
        .map(|(i, (id, active))| {
            let status = if *active { "Active" } else { "Inactive" };
            format!(
                "<member><UserName>{user}</UserName><AccessKeyId>{id}</AccessKeyId>\
                 <Status>{status}</Status><CreateDate>2026-01-01T00:0{i}:00Z</CreateDate></member>"
            )
        })
        .collect();
    format!("<AccessKeyMetadata>{members}</AccessKeyMetadata><IsTruncated>false</IsTruncated>")
}

/// A fake Kubernetes API server and a fake AWS endpoint, and a [`Context`] over both.
pub struct Fakes {
    pub kube: Arc<Fake>,
    pub aws: Arc<Fake>,
    aws_url: String,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Fakes {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// Where the Events about the objects of namespace `ns` are created.
pub fn events_path(ns: &str) -> String {
    format!("/apis/events.k8s.io/v1/namespaces/{ns}/events")
}

impl Fakes {
    /// Starts the fake AWS endpoint on a free local port; neither fake has any rule yet.
    pub async fn start() -> Fakes {
        let clock = Arc::new(AtomicUsize::new(0));
        let kube = Fake::new(Reply::kube_error(418, "Unscripted"), clock.clone());
        let aws = Fake::new(Reply::s3_error(400, "Unscripted"), clock);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a local port");
        let aws_url = format!("http://{}", listener.local_addr().expect("an address"));
        let app = axum::Router::new()
            .fallback(
                |axum::extract::State(fake): axum::extract::State<Arc<Fake>>,
                 request: axum::extract::Request| async move {
                    fake.answer(request).await
                },
            )
            .with_state(aws.clone());
        let server = tokio::spawn(async move {
            axum::serve(listener, app)
                .await
                .expect("the fake AWS endpoint");
        });
        Fakes {
            kube,
            aws,
            aws_url,
            server,
        }
    }

    /// A client whose every request the fake Kubernetes API server answers.
    pub fn kube_client(&self) -> kube::Client {
        let fake = self.kube.clone();
        let service = tower::service_fn(move |request: Request<kube::client::Body>| {
            let fake = fake.clone();
            async move { Ok::<_, Infallible>(fake.answer(request).await) }
        });
        kube::Client::new(service, "default")
    }

    /// The operator's AWS clients, over its own transport, sending to the fake endpoint. No
    /// retries: every request a test sees is one the pass made.
    pub fn aws(&self, metrics: Arc<Metrics>) -> Aws {
        let credentials =
            aws_sdk_s3::config::Credentials::new("AKID", "secret", None, None, "fake");
        let base = aws_config::SdkConfig::builder()
            .behavior_version(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new("us-east-1"))
            .endpoint_url(&self.aws_url)
            .credentials_provider(aws_sdk_s3::config::SharedCredentialsProvider::new(
                credentials,
            ))
            .retry_config(aws_config::retry::RetryConfig::disabled())
            .build();
        Aws::from_config(base, Some(self.aws_url.clone()), metrics)
    }

    /// A real context (test settings, see `Settings::for_tests`) over both fakes.
    pub fn context(&self) -> Context {
        let client = self.kube_client();
        let base = Context::for_tests();
        let aws = self.aws(base.metrics.clone());
        let home = super::accounts::Account::home(aws, super::Settings::for_tests());
        Context {
            events: Events::new(client.clone(), MANAGER, None),
            client,
            accounts: super::accounts::Accounts::home_only(home),
            ..base
        }
    }

    /// Answers Event writes in namespace `ns` (echoed back, as created).
    pub fn accept_events(&self, ns: &str) -> &Fakes {
        self.kube
            .on(&format!("POST {}", events_path(ns)), Reply::Echo(201));
        self
    }
}

mod tests {
    use super::*;

    fn seen(method: &str, path: &str, query: &str) -> Seen {
        Seen {
            at: 0,
            method: method.into(),
            path: path.into(),
            params: parse_params(query),
            body: Bytes::new(),
        }
    }

    #[test]
    fn a_pattern_chooses_by_subresource_and_ignores_unnamed_values() {
        let tagging = seen("GET", "/b", "tagging");
        assert!(tagging.chosen_by("GET /b?tagging"));
        assert!(!tagging.chosen_by("GET /b"), "a subresource must be named");
        assert!(!tagging.chosen_by("PUT /b?tagging"));
        let create = seen("PUT", "/b", "x-id=CreateBucket");
        assert!(create.chosen_by("PUT /b"));
        assert!(!create.chosen_by("PUT /b?tagging"));
        assert!(create.chosen_by("PUT /b?x-id=CreateBucket"));
        assert!(!create.chosen_by("PUT /b?x-id=Other"));
        assert_eq!(create.name(), "PUT /b");
        let versions = seen("GET", "/b", "versions&max-keys=1");
        assert_eq!(versions.name(), "GET /b?versions");
        assert_eq!(versions.param("max-keys"), Some("1"));
    }

    #[tokio::test]
    async fn rules_answer_in_order_and_once_rules_run_out() {
        let fakes = Fakes::start().await;
        let fake = &fakes.kube;
        fake.once("GET /x", Reply::json(200, "first"))
            .on("GET /x", Reply::json(200, "then"));
        let get = || Request::get("/x").body(Body::empty()).expect("a request");
        for want in ["\"first\"", "\"then\"", "\"then\""] {
            let body = axum::body::to_bytes(fake.answer(get()).await.into_body(), 100);
            assert_eq!(body.await.expect("a body"), want);
        }
        let other = fake.answer(Request::get("/y").body(Body::empty()).expect("a request"));
        assert_eq!(other.await.status(), 418);
        assert_eq!(fake.requests(), ["GET /x", "GET /x", "GET /x", "GET /y"]);
    }

    #[tokio::test]
    async fn the_aws_endpoint_answers_iam_by_action() {
        let fakes = Fakes::start().await;
        let pattern = "POST /?Action=GetUser";
        fakes
            .aws
            .on(pattern, Reply::query_error(404, "NoSuchEntity"));
        let aws = fakes.aws(Arc::new(Metrics::new()));
        let get = aws.iam().get_user().user_name("u").send();
        let err = Aws::call("iam", "GetUser", get).await.unwrap_err();
        assert!(err.not_found() && err.is("NoSuchEntity"), "{err}");
        assert_eq!(fakes.aws.requests(), [pattern]);
        assert_eq!(fakes.aws.matching(pattern)[0].param("UserName"), Some("u"));
    }
}
