//! The REST client: one method per V2 route the upstream backend calls (health, metadata,
//! repository index, configuration, shared-memory registration, inference), over kept-alive
//! HTTP/1.1 connections (`http1.rs`), each answer read into the gRPC message its gRPC
//! counterpart gives.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, StatusCode};
use infergate_proto::inference::cuda_shared_memory_status_response::RegionStatus as CudaRegionStatus;
use infergate_proto::inference::model_metadata_response::TensorMetadata;
use infergate_proto::inference::repository_index_response::ModelIndex;
use infergate_proto::inference::system_shared_memory_status_response::RegionStatus;
use infergate_proto::inference::{
    CudaSharedMemoryRegisterRequest, CudaSharedMemoryStatusResponse, ModelConfigResponse,
    ModelInferRequest, ModelInferResponse, ModelMetadataResponse, RepositoryIndexResponse,
    ServerMetadataResponse, SystemSharedMemoryRegisterRequest, SystemSharedMemoryStatusResponse,
};
use serde_json::{Value as J, json};
use tonic::Status;

use super::codec::{decode_response, encode_request, error_status};
use crate::backend::upstream::answer::Answer;
use crate::backend::upstream::http1::{self, Http1Client};
use crate::trace::ContextHeaders;
use infergate_proto::wire::HEADER_LENGTH;

#[derive(Clone)]
pub struct RestClient {
    /// Kept-alive connections to `host:port`, shared by the clones.
    client: Arc<Http1Client>,
    max_body: usize,
    /// Whether the upstream takes and gives tensors as binary data; learned from its `/v2`.
    binary: Arc<AtomicBool>,
}

impl RestClient {
    /// A client for the V2 REST endpoint at `url`; connections idle for longer than `max_idle`
    /// are closed instead of reused.
    pub fn new(url: &str, max_body: usize, max_idle: Duration) -> Self {
        let authority = url.trim_end_matches('/');
        let authority = authority.split_once("://").map_or(authority, |(_, a)| a);
        RestClient {
            client: Arc::new(
                Http1Client::new(authority, Duration::from_secs(2)).with_max_idle_age(max_idle),
            ),
            max_body,
            binary: Arc::new(AtomicBool::new(true)),
        }
    }

    /// Binary tensor data is used only when the upstream lists the extension.
    pub fn set_binary(&self, binary: bool) {
        self.binary.store(binary, Ordering::Relaxed);
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Vec<Bytes>,
        header_length: Option<usize>,
        context: &ContextHeaders,
    ) -> Answer<http1::Response> {
        let header_length_text = header_length.map(|n| n.to_string());
        let mut headers: Vec<(&str, &str)> = match &header_length_text {
            Some(len) => vec![
                (HEADER_LENGTH, len),
                ("content-type", "application/octet-stream"),
            ],
            None if !body.is_empty() => vec![("content-type", "application/json")],
            None => Vec::new(),
        };
        headers.extend(context.iter().map(|(name, value)| (*name, value.as_str())));
        let request = http1::Request {
            method: method.as_str(),
            path,
            headers: &headers,
            body: &body,
        };
        self.client
            .call(&request, self.max_body)
            .await
            .map_err(|e| {
                let text = e.to_string();
                match e {
                    http1::Error::Connect(_) => {
                        let mut status = Status::unavailable(text.clone());
                        status.set_source(Arc::new(Unreachable(text)));
                        status
                    }
                    http1::Error::TooLarge(_) => Status::resource_exhausted(text),
                    // The connection broke before the answer was complete: the upstream died.
                    // The cause goes with the status, which tells it from an UNAVAILABLE the
                    // upstream answered itself.
                    http1::Error::Broken(_) => {
                        let mut status = Status::unavailable(text.clone());
                        status.set_source(Arc::new(Broken(text)));
                        status
                    }
                }
            })
    }

    /// A JSON request whose answer must be 200 with a JSON body.
    async fn json(&self, method: Method, path: &str, body: Option<&J>) -> Answer<J> {
        let body = match body {
            Some(b) => vec![Bytes::from(b.to_string())],
            None => Vec::new(),
        };
        let reply = self.send(method, path, body, None, &[]).await?;
        if reply.status != StatusCode::OK {
            return Err(error_status(reply.status, &reply.body));
        }
        if reply.body.is_empty() {
            return Ok(J::Null);
        }
        serde_json::from_slice(&reply.body).map_err(|e| {
            Status::internal(format!(
                "the upstream answered {path} with invalid JSON: {e}"
            ))
        })
    }

    pub async fn server_ready(&self) -> Answer<bool> {
        let reply = self
            .send(Method::GET, "/v2/health/ready", Vec::new(), None, &[])
            .await?;
        Ok(reply.status == StatusCode::OK)
    }

    pub async fn server_metadata(&self) -> Answer<ServerMetadataResponse> {
        let v = self.json(Method::GET, "/v2", None).await?;
        Ok(ServerMetadataResponse {
            name: text(&v["name"]),
            version: text(&v["version"]),
            extensions: strings(&v["extensions"]),
        })
    }

    pub async fn repository_index(&self, ready: bool) -> Answer<RepositoryIndexResponse> {
        let v = self
            .json(
                Method::POST,
                "/v2/repository/index",
                Some(&json!({"ready": ready})),
            )
            .await?;
        let models = v
            .as_array()
            .map(|models| {
                models
                    .iter()
                    .map(|m| ModelIndex {
                        name: text(&m["name"]),
                        version: text(&m["version"]),
                        state: text(&m["state"]),
                        reason: text(&m["reason"]),
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(RepositoryIndexResponse { models })
    }

    pub async fn model_metadata(&self, name: &str) -> Answer<ModelMetadataResponse> {
        let v = self
            .json(Method::GET, &format!("/v2/models/{}", segment(name)), None)
            .await?;
        let tensors = |v: &J| -> Vec<TensorMetadata> {
            v.as_array()
                .map(|ts| {
                    ts.iter()
                        .map(|t| TensorMetadata {
                            name: text(&t["name"]),
                            datatype: text(&t["datatype"]),
                            shape: t["shape"]
                                .as_array()
                                .map(|d| d.iter().filter_map(J::as_i64).collect())
                                .unwrap_or_default(),
                        })
                        .collect()
                })
                .unwrap_or_default()
        };
        Ok(ModelMetadataResponse {
            name: text(&v["name"]),
            versions: strings(&v["versions"]),
            platform: text(&v["platform"]),
            inputs: tensors(&v["inputs"]),
            outputs: tensors(&v["outputs"]),
        })
    }

    pub async fn model_config(&self, name: &str) -> Answer<ModelConfigResponse> {
        let v = self
            .json(
                Method::GET,
                &format!("/v2/models/{}/config", segment(name)),
                None,
            )
            .await?;
        let config = infergate_proto::model_config::from_json(&v).map_err(|e| {
            Status::internal(format!("the upstream's configuration of '{name}': {e}"))
        })?;
        Ok(ModelConfigResponse {
            config: Some(config),
        })
    }

    pub async fn shm_status(&self, name: &str) -> Answer<SystemSharedMemoryStatusResponse> {
        let regions = self
            .shm_regions("systemsharedmemory", name, |r| RegionStatus {
                name: text(&r["name"]),
                key: text(&r["key"]),
                offset: r["offset"].as_u64().unwrap_or(0),
                byte_size: r["byte_size"].as_u64().unwrap_or(0),
            })
            .await?
            .into_iter()
            .map(|status| (status.name.clone(), status))
            .collect();
        Ok(SystemSharedMemoryStatusResponse { regions })
    }

    /// The regions a status route lists (`/v2/{kind}/status`, or one region's when `name` is
    /// given), each read by `entry`.
    async fn shm_regions<T>(
        &self,
        kind: &str,
        name: &str,
        entry: impl Fn(&J) -> T,
    ) -> Answer<Vec<T>> {
        let path = if name.is_empty() {
            format!("/v2/{kind}/status")
        } else {
            format!("/v2/{kind}/region/{}/status", segment(name))
        };
        let v = self.json(Method::GET, &path, None).await?;
        Ok(v.as_array()
            .map(|rs| rs.iter().map(entry).collect())
            .unwrap_or_default())
    }

    pub async fn shm_register(&self, request: SystemSharedMemoryRegisterRequest) -> Answer<()> {
        let body =
            json!({"key": request.key, "offset": request.offset, "byte_size": request.byte_size});
        let path = format!(
            "/v2/systemsharedmemory/region/{}/register",
            segment(&request.name)
        );
        self.json(Method::POST, &path, Some(&body))
            .await
            .map(|_| ())
    }

    pub async fn shm_unregister(&self, name: &str) -> Answer<()> {
        let path = format!("/v2/systemsharedmemory/region/{}/unregister", segment(name));
        self.json(Method::POST, &path, None).await.map(|_| ())
    }

    /// Registers a client's CUDA buffer by its IPC handle (base64 on REST, as Triton takes it).
    pub async fn cuda_register(&self, request: CudaSharedMemoryRegisterRequest) -> Answer<()> {
        use base64::Engine as _;
        let handle = base64::engine::general_purpose::STANDARD.encode(&request.raw_handle);
        let body = json!({
            "raw_handle": {"b64": handle},
            "device_id": request.device_id,
            "byte_size": request.byte_size,
        });
        let path = format!(
            "/v2/cudasharedmemory/region/{}/register",
            segment(&request.name)
        );
        self.json(Method::POST, &path, Some(&body))
            .await
            .map(|_| ())
    }

    pub async fn cuda_status(&self, name: &str) -> Answer<CudaSharedMemoryStatusResponse> {
        let regions = self
            .shm_regions("cudasharedmemory", name, |r| CudaRegionStatus {
                name: text(&r["name"]),
                device_id: r["device_id"].as_u64().unwrap_or(0),
                byte_size: r["byte_size"].as_u64().unwrap_or(0),
            })
            .await?
            .into_iter()
            .map(|status| (status.name.clone(), status))
            .collect();
        Ok(CudaSharedMemoryStatusResponse { regions })
    }

    pub async fn cuda_unregister(&self, name: &str) -> Answer<()> {
        let path = format!("/v2/cudasharedmemory/region/{}/unregister", segment(name));
        self.json(Method::POST, &path, None).await.map(|_| ())
    }

    pub async fn infer(
        &self,
        request: &ModelInferRequest,
        context: &ContextHeaders,
    ) -> Answer<ModelInferResponse> {
        let binary = self.binary.load(Ordering::Relaxed);
        let (body, header_length) = encode_request(request, binary)?;
        let mut path = format!("/v2/models/{}", segment(&request.model_name));
        if !request.model_version.is_empty() {
            path.push_str(&format!("/versions/{}", segment(&request.model_version)));
        }
        path.push_str("/infer");
        let reply = self
            .send(Method::POST, &path, body, header_length, context)
            .await?;
        if reply.status != StatusCode::OK {
            return Err(error_status(reply.status, &reply.body));
        }
        decode_response(&reply.body, reply.header_length)
    }
}

/// The upstream could not be connected to, so nothing of the request reached it: the source of
/// the `Status` such a call fails with, for a caller that has another way to send it.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Unreachable(String);

/// A connection that broke in the middle of a call: the cause of the `Status` it fails with.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Broken(String);

/// Whether a call failed without reaching the upstream at all (the connection was refused or
/// timed out), so that sending it another way cannot run the model twice.
pub fn is_unreachable(status: &Status) -> bool {
    std::error::Error::source(status).is_some_and(|s| s.is::<Unreachable>())
}

/// A JSON string's text; empty where the value is not a string.
fn text(v: &J) -> String {
    v.as_str().unwrap_or_default().to_string()
}

fn strings(v: &J) -> Vec<String> {
    v.as_array()
        .map(|a| a.iter().filter_map(J::as_str).map(str::to_string).collect())
        .unwrap_or_default()
}

/// A model or region name as one path segment: everything but unreserved characters escaped.
fn segment(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_refused_connection_is_unreachable_and_says_why() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let client = RestClient::new(
            &format!("http://127.0.0.1:{port}"),
            1 << 20,
            Duration::from_secs(1),
        );
        let request = ModelInferRequest {
            model_name: "simple".into(),
            ..Default::default()
        };
        let status = client.infer(&request, &[]).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unavailable);
        assert!(is_unreachable(&status), "{status:?}");
        assert!(
            status.message().to_lowercase().contains("refused"),
            "{}",
            status.message()
        );
        // Other failures are not.
        assert!(!is_unreachable(&Status::unavailable("draining")));
    }

    #[test]
    fn names_are_escaped_into_one_path_segment() {
        assert_eq!(segment("a b/../c"), "a%20b%2F..%2Fc");
    }
}
