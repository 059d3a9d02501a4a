//! `inference.GRPCInferenceService/ModelInfer` through the real tonic service: the input is the
//! encoded `ModelInferRequest` (raw or typed contents, parameters, shared-memory parameters).
//!
//! Checked: every answer carries a `grpc-status`; an OK answer holds one well-formed
//! `ModelInferResponse` message.

use bytes::{Buf, Bytes};
use http::Request;
use http_body_util::{BodyExt, Full};
use infergate_proto::inference::ModelInferResponse;
use prost::Message;
use tower::ServiceExt;

use crate::harness;

pub fn run(data: &[u8]) {
    let Ok(length) = u32::try_from(data.len()) else {
        return;
    };
    let mut framed = Vec::with_capacity(data.len() + 5);
    framed.push(0); // not compressed
    framed.extend_from_slice(&length.to_be_bytes());
    framed.extend_from_slice(data);
    let mut request = Request::builder()
        .method("POST")
        .uri("/inference.GRPCInferenceService/ModelInfer")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(Full::new(Bytes::from(framed)))
        .unwrap_or_else(|e| panic!("request: {e}"));
    request.extensions_mut().insert(harness::local_caller());
    let service = infergate_sidecar::grpc::inference_service(harness::sidecar().clone());
    let (status, body) = harness::runtime().block_on(async move {
        let response = service
            .oneshot(request)
            .await
            .unwrap_or_else(|e| panic!("service: {e:?}"));
        let (parts, body) = response.into_parts();
        let collected = body
            .collect()
            .await
            .unwrap_or_else(|e| panic!("response body: {e}"));
        let status = collected
            .trailers()
            .and_then(|t| t.get("grpc-status"))
            .or_else(|| parts.headers.get("grpc-status"))
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        (status, collected.to_bytes())
    });
    let status = status.unwrap_or_else(|| panic!("answer without grpc-status"));
    if status == "0" {
        let mut frame = body.clone();
        assert!(frame.len() >= 5, "OK answer without a message");
        let _compressed = frame.get_u8();
        let len = frame.get_u32() as usize;
        assert_eq!(len, frame.len(), "message length prefix");
        ModelInferResponse::decode(frame).unwrap_or_else(|e| panic!("OK answer: {e}"));
    }
}
