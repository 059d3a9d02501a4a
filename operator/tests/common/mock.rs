//! A scripted mock API server (tower-test): it expects exactly the listed requests, in order,
//! answers each, and fails the test on anything else.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};

/// One expected request and the answer to give.
#[derive(Clone)]
pub struct Step {
    method: Method,
    path: String,
    status: StatusCode,
    body: Value,
}

pub fn step(method: Method, path: &str, status: StatusCode, body: Value) -> Step {
    Step {
        method,
        path: path.to_string(),
        status,
        body,
    }
}

pub fn not_found() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": "not found", "reason": "NotFound", "code": 404})
}

pub fn server_error() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": "etcdserver: request timed out", "reason": "InternalError", "code": 500})
}

/// A request as the server saw it.
#[derive(Debug)]
pub struct Seen {
    pub method: Method,
    pub path: String,
    pub query: String,
    pub body: Value,
}

/// A client whose requests go to a server expecting `steps`; the handle yields what it saw.
pub fn serve(steps: Vec<Step>) -> (Client, tokio::task::JoinHandle<Vec<Seen>>) {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let server = tokio::spawn(async move {
        let mut seen = Vec::new();
        for expected in steps {
            let Some((request, reply)) = handle.next_request().await else {
                panic!(
                    "the controller stopped before {} {}",
                    expected.method, expected.path
                );
            };
            let method = request.method().clone();
            let path = request.uri().path().to_string();
            let query = request.uri().query().unwrap_or_default().to_string();
            let bytes = http_body_util::BodyExt::collect(request.into_body())
                .await
                .unwrap()
                .to_bytes();
            let body = if bytes.is_empty() {
                Value::Null
            } else {
                serde_json::from_slice(&bytes).unwrap()
            };
            assert_eq!(
                (&method, path.as_str()),
                (&expected.method, expected.path.as_str()),
                "unexpected request; seen so far: {seen:#?}"
            );
            seen.push(Seen {
                method,
                path,
                query,
                body,
            });
            let response = Response::builder()
                .status(expected.status)
                .header("content-type", "application/json")
                .body(Body::from(serde_json::to_vec(&expected.body).unwrap()))
                .unwrap();
            reply.send_response(response);
        }
        // Nothing more may come: a further request would be a write we did not expect.
        let extra = tokio::time::timeout(Duration::from_millis(200), handle.next_request()).await;
        if let Ok(Some((request, _))) = extra {
            panic!(
                "unexpected extra request {} {}",
                request.method(),
                request.uri()
            );
        }
        seen
    });
    (client, server)
}

impl Seen {
    /// The RBAC (group, resource, verb) this request needs.
    pub fn permission(&self) -> (String, String, &'static str) {
        let parts: Vec<&str> = self.path.trim_start_matches('/').split('/').collect();
        // /api/v1/... or /apis/GROUP/VERSION/...
        let (group, rest) = match parts.first() {
            Some(&"api") => ("", &parts[2..]),
            _ => (parts[1], &parts[3..]),
        };
        let rest = match rest {
            ["namespaces", _, tail @ ..] => tail,
            tail => tail,
        };
        let (resource, named) = match rest {
            [r] => (r.to_string(), false),
            [r, _] => (r.to_string(), true),
            [r, _, sub] => (format!("{r}/{sub}"), true),
            other => panic!("unexpected path {other:?}"),
        };
        let verb = match (&self.method, named) {
            (&Method::GET, true) => "get",
            (&Method::GET, false) if self.query.contains("watch=true") => "watch",
            (&Method::GET, false) => "list",
            (&Method::POST, _) => "create",
            (&Method::PUT, _) => "update",
            (&Method::PATCH, _) => "patch",
            (&Method::DELETE, _) => "delete",
            (m, _) => panic!("unexpected method {m}"),
        };
        (group.to_string(), resource, verb)
    }
}
