//! The REST router driven in-process, without sockets.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

use axum::body::Body;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use infergate_config::SidecarConfig;
use infergate_sidecar::log::LogControl;
use infergate_sidecar::{http as rest, server};
use tower::ServiceExt;

fn router() -> axum::Router {
    let state =
        server::build_state(&SidecarConfig::default(), LogControl::detached("info")).unwrap();
    state.health.set_ready(true);
    rest::router(state)
}

async fn call(method: &str, uri: &str, body: &str) -> (StatusCode, http::HeaderMap, Vec<u8>) {
    let request = Request::builder()
        .method(method)
        .uri(uri)
        .body(Body::from(body.to_string()))
        .unwrap();
    let response = router().oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response
        .into_body()
        .collect()
        .await
        .unwrap()
        .to_bytes()
        .to_vec();
    (status, headers, bytes)
}

fn json(bytes: &[u8]) -> serde_json::Value {
    serde_json::from_slice(bytes).unwrap()
}

#[tokio::test]
async fn health_and_metadata() {
    let (status, _, body) = call("GET", "/v2/health/ready", "").await;
    assert_eq!((status, body.len()), (StatusCode::OK, 0));
    let (status, _, body) = call("GET", "/v2", "").await;
    assert_eq!(status, StatusCode::OK);
    let meta = json(&body);
    assert_eq!(meta["name"], "triton");
    assert!(
        meta["extensions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e == "binary_tensor_data")
    );
}

#[tokio::test]
async fn simple_infer_json() {
    let body = r#"{"inputs":[
        {"name":"INPUT0","datatype":"INT32","shape":[1,16],"data":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]},
        {"name":"INPUT1","datatype":"INT32","shape":[1,16],"data":[[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]]}]}"#;
    let (status, headers, out) = call("POST", "/v2/models/simple/infer", body).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&out));
    assert_eq!(headers["content-type"], "application/json");
    let r = json(&out);
    assert_eq!(r["outputs"][0]["name"], "OUTPUT0");
    assert_eq!(r["outputs"][0]["data"][15], 17);
    assert_eq!(r["outputs"][1]["data"][0], 0);
}

#[tokio::test]
async fn binary_output_framing() {
    let body = r#"{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[2],"data":[1.5,-2]}],
                   "outputs":[{"name":"OUTPUT0","parameters":{"binary_data":true}}]}"#;
    let (status, headers, out) = call("POST", "/v2/models/identity_fp32/infer", body).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["content-type"], "application/octet-stream");
    let json_len: usize = headers["inference-header-content-length"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let header = json(&out[..json_len]);
    assert_eq!(header["outputs"][0]["parameters"]["binary_data_size"], 8);
    let expected: Vec<u8> = [1.5f32, -2.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    assert_eq!(&out[json_len..], &expected[..]);
}

#[tokio::test]
async fn protocol_errors() {
    let (status, _, out) = call("POST", "/v2/models/nope/infer", r#"{"inputs":[]}"#).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        json(&out)["error"],
        "Request for unknown model: 'nope' is not found"
    );
    let (status, _, out) = call("POST", "/v2/models/simple/infer", "{").await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(
        json(&out)["error"]
            .as_str()
            .unwrap()
            .starts_with("failed to parse the request JSON buffer:")
    );
    let (status, _, out) = call("DELETE", "/v2/health/live", "").await;
    assert_eq!(
        (status, json(&out)),
        (
            StatusCode::METHOD_NOT_ALLOWED,
            serde_json::json!({"error": "Method Not Allowed"})
        )
    );
    let (status, _, out) = call("GET", "/v2/nothing/here", "").await;
    assert_eq!(
        (status, json(&out)),
        (
            StatusCode::NOT_FOUND,
            serde_json::json!({"error": "Not Found"})
        )
    );
    let (status, _, _) = call("GET", "/v2/models/simple/versions/x", "").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn statistics_count_requests() {
    let state =
        server::build_state(&SidecarConfig::default(), LogControl::detached("info")).unwrap();
    let app = rest::router(state);
    let body = r#"{"inputs":[{"name":"INPUT0","datatype":"INT8","shape":[3],"data":[1,2,3]}]}"#;
    for _ in 0..3 {
        let req = Request::post("/v2/models/identity_int8/infer")
            .body(Body::from(body))
            .unwrap();
        assert_eq!(
            app.clone().oneshot(req).await.unwrap().status(),
            StatusCode::OK
        );
    }
    let req = Request::get("/v2/models/identity_int8/stats")
        .body(Body::empty())
        .unwrap();
    let out = app
        .oneshot(req)
        .await
        .unwrap()
        .into_body()
        .collect()
        .await
        .unwrap()
        .to_bytes();
    let stats = json(&out);
    let s = &stats["model_stats"][0];
    assert_eq!(s["inference_count"], 3);
    assert_eq!(s["inference_stats"]["success"]["count"], 3);
    assert_eq!(s["inference_stats"]["queue"]["count"], 3);
}

/// The admin status and `/v2` agree on CUDA shared memory: without a usable driver the
/// extension is not advertised and the admin endpoint says why; with one it is listed.
#[tokio::test]
async fn cuda_shared_memory_is_advertised_only_where_usable() {
    let state =
        server::build_state(&SidecarConfig::default(), LogControl::detached("info")).unwrap();
    let admin = infergate_sidecar::admin::router(state.clone());
    // As the admin port gives it: a caller in the pod, on loopback.
    let in_the_pod = infergate_sidecar::caller::Caller("127.0.0.1:40000".parse().unwrap());
    let response = admin
        .oneshot(
            Request::get("/status")
                .extension(in_the_pod)
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let status = json(&response.into_body().collect().await.unwrap().to_bytes());
    let cuda = status["extensions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "cuda_shared_memory")
        .unwrap()
        .clone();
    let (_, _, body) = call("GET", "/v2", "").await;
    let listed = json(&body)["extensions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e == "cuda_shared_memory");
    if cuda["state"] == "Unsupported" {
        assert!(!listed);
        assert!(!cuda["reason"].as_str().unwrap().is_empty());
        assert_eq!(status["gpu"]["devices"], serde_json::json!([]));
        assert_eq!(status["gpu"]["reason"], cuda["reason"]);
    } else {
        // Client shm is off by default, so a usable driver reports "Disabled" here.
        assert_eq!(cuda["state"], "Disabled");
        assert!(listed);
        assert!(!status["gpu"]["devices"].as_array().unwrap().is_empty());
    }
}

/// `--http-restricted-api` as Triton's L0_http `test.sh` sets it, through the HTTP port's whole
/// service (the restriction is checked before the router and the short way to inference).
#[tokio::test]
async fn restricted_apis_want_their_header() {
    let mut config = SidecarConfig::default();
    config.server.http_restricted_api = vec![
        "model-repository:admin-key=admin-value".into(),
        "inference,metadata:infer-key=infer-value".into(),
    ];
    let state = server::build_state(&config, LogControl::detached("info")).unwrap();
    state.health.set_ready(true);
    let front = rest::front(state);
    let call = |method: &str, uri: &str, header: Option<(&str, &str)>, body: &str| {
        let mut request = Request::builder().method(method).uri(uri);
        if let Some((k, v)) = header {
            request = request.header(k, v);
        }
        let request = request.body(Body::from(body.to_string())).unwrap();
        let front = front.clone();
        async move {
            let response = front.oneshot(request).await.unwrap();
            let status = response.status();
            let bytes = response.into_body().collect().await.unwrap().to_bytes();
            (status, String::from_utf8_lossy(&bytes).into_owned())
        }
    };
    let infer_body = r#"{"inputs":[
        {"name":"INPUT0","datatype":"INT32","shape":[1,16],"data":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]},
        {"name":"INPUT1","datatype":"INT32","shape":[1,16],"data":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}]}"#;
    let infer_refusal = r#"{"error":"This API is restricted, expecting header 'infer-key'"}"#;
    let admin_refusal = r#"{"error":"This API is restricted, expecting header 'admin-key'"}"#;
    let infer_key = Some(("infer-key", "infer-value"));

    let refused = (StatusCode::FORBIDDEN, infer_refusal.to_string());
    assert_eq!(
        call("POST", "/v2/models/simple/infer", None, infer_body).await,
        refused
    );
    assert_eq!(
        call(
            "POST",
            "/v2/models/simple/infer",
            Some(("infer-key", "x")),
            infer_body
        )
        .await,
        refused
    );
    assert_eq!(call("GET", "/v2", None, "").await, refused);
    assert_eq!(
        call("GET", "/v2/models/simple/versions/1", None, "").await,
        refused
    );
    // Before the method: a GET to the infer path is refused, then 405 with the header.
    assert_eq!(
        call("GET", "/v2/models/simple/infer", None, "").await,
        refused
    );
    assert_eq!(
        call("GET", "/v2/models/simple/infer", infer_key, "")
            .await
            .0,
        StatusCode::METHOD_NOT_ALLOWED
    );
    let (status, body) = call("POST", "/v2/models/simple/infer", infer_key, infer_body).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(call("GET", "/v2", infer_key, "").await.0, StatusCode::OK);

    assert_eq!(
        call("POST", "/v2/repository/models/simple/unload", infer_key, "").await,
        (StatusCode::FORBIDDEN, admin_refusal.to_string())
    );
    let (status, body) = call(
        "POST",
        "/v2/repository/models/simple/unload",
        Some(("admin-key", "admin-value")),
        "",
    )
    .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(
        body.contains("explicit model load / unload is not allowed"),
        "{body}"
    );

    // Other APIs are not restricted.
    assert_eq!(
        call("GET", "/v2/models/simple/stats", None, "").await.0,
        StatusCode::OK
    );
    assert_eq!(
        call("GET", "/v2/health/ready", None, "").await.0,
        StatusCode::OK
    );
    assert_eq!(
        call("GET", "/v2/models/simple/config", None, "").await.0,
        StatusCode::OK
    );
    assert_eq!(
        call("GET", "/v2/nothing", None, "").await.0,
        StatusCode::NOT_FOUND
    );
}

/// `/status` `traffic`, what the operator's scale to zero reads: inference counts, health and
/// metadata do not.
#[tokio::test]
async fn only_inference_is_traffic_in_the_admin_status() {
    let state =
        server::build_state(&SidecarConfig::default(), LogControl::detached("info")).unwrap();
    state.health.set_ready(true);
    let in_the_pod = infergate_sidecar::caller::Caller("127.0.0.1:40000".parse().unwrap());
    let traffic = || async {
        let admin = infergate_sidecar::admin::router(state.clone());
        let response = admin
            .oneshot(
                Request::get("/status")
                    .extension(in_the_pod)
                    .body(Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        json(&response.into_body().collect().await.unwrap().to_bytes())["traffic"].clone()
    };
    let rest = |method: &str, uri: &str, body: &str| {
        Request::builder()
            .method(method)
            .uri(uri)
            .body(Body::from(body.to_string()))
            .unwrap()
    };
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let idle = traffic().await;
    assert_eq!(idle["in_flight"], 0);
    assert_eq!(idle["live_sequences"], 0);
    assert!(idle["quiet_seconds"].as_u64().unwrap() >= 1, "{idle}");
    for uri in ["/v2/health/ready", "/v2", "/v2/models/simple"] {
        let response = rest::router(state.clone())
            .oneshot(rest("GET", uri, ""))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{uri}");
    }
    assert!(
        traffic().await["quiet_seconds"].as_u64().unwrap() >= 1,
        "health and metadata are not traffic"
    );
    let infer = r#"{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"INT32","data":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]},{"name":"INPUT1","shape":[1,16],"datatype":"INT32","data":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}]}"#;
    let response = rest::router(state.clone())
        .oneshot(rest("POST", "/v2/models/simple/infer", infer))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(traffic().await["quiet_seconds"], 0, "an inference is");
}
