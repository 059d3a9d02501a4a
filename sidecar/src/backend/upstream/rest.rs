//! V2 over REST to the upstream (`--upstream http://HOST:PORT`), for model servers without a
//! gRPC endpoint. Requests carry tensors as binary data (`Inference-Header-Content-Length`)
//! when the upstream lists `binary_tensor_data`, as JSON otherwise; answers are turned into the
//! gRPC messages the rest of the upstream backend reads, and HTTP errors into `tonic::Status`
//! by their status code, so `grpc://` and `http://` upstreams behave alike.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, StatusCode};
use infergate_proto::DataType;
use infergate_proto::inference::cuda_shared_memory_status_response::RegionStatus as CudaRegionStatus;
use infergate_proto::inference::infer_parameter::ParameterChoice;
use infergate_proto::inference::model_infer_response::InferOutputTensor;
use infergate_proto::inference::model_metadata_response::TensorMetadata;
use infergate_proto::inference::repository_index_response::ModelIndex;
use infergate_proto::inference::system_shared_memory_status_response::RegionStatus;
use infergate_proto::inference::{
    CudaSharedMemoryRegisterRequest, CudaSharedMemoryStatusResponse, InferParameter,
    ModelConfigResponse, ModelInferRequest, ModelInferResponse, ModelMetadataResponse,
    RepositoryIndexResponse, ServerMetadataResponse, SystemSharedMemoryRegisterRequest,
    SystemSharedMemoryStatusResponse,
};
use serde_json::{Value as J, json};
use tonic::Status;

use super::answer::Answer;
use super::http1::{self, Http1Client};
use crate::json::{self, Value, Writer};
use crate::tensor::shape::element_count;
use crate::trace::ContextHeaders;
use infergate_proto::wire::HEADER_LENGTH;

/// Nesting allowed in an upstream's answer (its `data` arrays are a tensor's dimensions).
const MAX_DEPTH: u32 = 100;

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

/// The request as JSON, followed by the inputs' bytes when they travel as binary data.
fn encode_request(
    request: &ModelInferRequest,
    binary: bool,
) -> Answer<(Vec<Bytes>, Option<usize>)> {
    let mut w = Writer::with_capacity(256);
    let mut chunks = vec![Bytes::new()];
    let mut raw = request.raw_input_contents.iter();
    w.byte(b'{');
    if !request.id.is_empty() {
        w.key("id").string(request.id.as_bytes()).byte(b',');
    }
    if !request.parameters.is_empty() {
        w.key("parameters");
        write_parameters(&mut w, &request.parameters);
        w.byte(b',');
    }
    w.key("inputs").byte(b'[');
    for (i, input) in request.inputs.iter().enumerate() {
        if i > 0 {
            w.byte(b',');
        }
        w.byte(b'{')
            .key("name")
            .string(input.name.as_bytes())
            .byte(b',');
        w.key("datatype")
            .string(input.datatype.as_bytes())
            .byte(b',');
        w.key("shape").i64_array(&input.shape);
        // Inputs in a shared-memory region have no bytes here (the staging plan left them out
        // of the raw contents).
        let in_region = input.parameters.contains_key("shared_memory_region");
        let mut parameters = input.parameters.clone();
        let data = if in_region { None } else { raw.next() };
        match data {
            Some(data) if binary => {
                parameters.insert(
                    "binary_data_size".to_string(),
                    int_parameter(data.len() as i64),
                );
                chunks.push(data.clone());
            }
            Some(data) => {
                let datatype = DataType::from_protocol(&input.datatype).ok_or_else(|| {
                    Status::invalid_argument(format!("invalid datatype for input {}", input.name))
                })?;
                if matches!(datatype, DataType::Fp16 | DataType::Bf16) {
                    return Err(Status::unimplemented(format!(
                        "input '{}' is {datatype}, which JSON cannot carry, and the upstream does not accept binary tensor data",
                        input.name
                    )));
                }
                w.byte(b',').key("data");
                json::data::encode(&mut w, datatype, data);
            }
            None => {}
        }
        if !parameters.is_empty() {
            w.byte(b',').key("parameters");
            write_parameters(&mut w, &parameters);
        }
        w.byte(b'}');
    }
    w.byte(b']');
    if !request.outputs.is_empty() {
        w.byte(b',').key("outputs").byte(b'[');
        for (i, output) in request.outputs.iter().enumerate() {
            if i > 0 {
                w.byte(b',');
            }
            w.byte(b'{').key("name").string(output.name.as_bytes());
            let mut parameters = output.parameters.clone();
            if binary && !parameters.contains_key("shared_memory_region") {
                parameters.insert(
                    "binary_data".to_string(),
                    InferParameter {
                        parameter_choice: Some(ParameterChoice::BoolParam(true)),
                    },
                );
            }
            if !parameters.is_empty() {
                w.byte(b',').key("parameters");
                write_parameters(&mut w, &parameters);
            }
            w.byte(b'}');
        }
        w.byte(b']');
    }
    w.byte(b'}');
    let header_length = w.buf.len();
    chunks[0] = Bytes::from(w.into_bytes());
    let has_binary = chunks.len() > 1;
    Ok((chunks, has_binary.then_some(header_length)))
}

fn int_parameter(v: i64) -> InferParameter {
    InferParameter {
        parameter_choice: Some(ParameterChoice::Int64Param(v)),
    }
}

/// Parameters in a stable order (sorted by name), so requests are reproducible.
fn write_parameters(w: &mut Writer, parameters: &HashMap<String, InferParameter>) {
    let mut entries: Vec<_> = parameters.iter().collect();
    entries.sort_by(|a, b| a.0.cmp(b.0));
    w.byte(b'{');
    for (i, (key, value)) in entries.into_iter().enumerate() {
        if i > 0 {
            w.byte(b',');
        }
        w.key(key);
        match &value.parameter_choice {
            Some(ParameterChoice::BoolParam(b)) => w.bool(*b),
            Some(ParameterChoice::Int64Param(v)) => w.i64(*v),
            Some(ParameterChoice::Uint64Param(v)) => w.u64(*v),
            Some(ParameterChoice::DoubleParam(v)) => w.f64(*v),
            Some(ParameterChoice::StringParam(s)) => w.string(s.as_bytes()),
            None => w.raw("null"),
        };
    }
    w.byte(b'}');
}

/// The upstream's answer as the gRPC message, with one raw entry per output (empty for an
/// output written to a shared-memory region), as Triton's gRPC answers are laid out.
fn decode_response(body: &Bytes, header_length: Option<usize>) -> Answer<ModelInferResponse> {
    let json_len = header_length.unwrap_or(body.len());
    if json_len > body.len() {
        return Err(Status::internal(format!(
            "the upstream's answer declares a {json_len}-byte header in a {}-byte body",
            body.len()
        )));
    }
    let doc = json::parse_lazy_data(&body[..json_len], MAX_DEPTH).map_err(|e| {
        Status::internal(format!(
            "the upstream answered with invalid JSON: {}",
            e.request_message()
        ))
    })?;
    let string = |v: Option<&Value<'_>>| v.and_then(Value::as_str).unwrap_or_default().to_string();
    let mut response = ModelInferResponse {
        model_name: string(doc.get("model_name")),
        model_version: string(doc.get("model_version")),
        id: string(doc.get("id")),
        ..Default::default()
    };
    let outputs = match doc.get("outputs") {
        Some(Value::Array(outputs)) => outputs.as_slice(),
        _ => &[],
    };
    let mut offset = json_len;
    for output in outputs {
        let name = string(output.get("name"));
        let datatype = string(output.get("datatype"));
        let shape: Vec<i64> = match output.get("shape") {
            Some(Value::Array(dims)) => dims.iter().filter_map(Value::as_i64).collect(),
            _ => Vec::new(),
        };
        let parameters = output.get("parameters");
        let binary_size = parameters
            .and_then(|p| p.get("binary_data_size"))
            .and_then(Value::as_u64);
        let data = match (binary_size, output.get("data")) {
            (Some(size), _) => {
                let end = usize::try_from(size)
                    .ok()
                    .and_then(|s| offset.checked_add(s))
                    .filter(|end| *end <= body.len())
                    .ok_or_else(|| {
                        Status::internal(format!(
                            "the upstream's output '{name}' declares {size} bytes beyond the end of its answer"
                        ))
                    })?;
                let data = body.slice(offset..end);
                offset = end;
                data
            }
            (None, Some(data)) => json_output(&name, &datatype, &shape, data)?,
            (None, None) => Bytes::new(),
        };
        response.outputs.push(InferOutputTensor {
            name,
            datatype,
            shape,
            ..Default::default()
        });
        response.raw_output_contents.push(data);
    }
    Ok(response)
}

fn json_output(name: &str, datatype: &str, shape: &[i64], data: &Value<'_>) -> Answer<Bytes> {
    let dt = DataType::from_protocol(datatype).ok_or_else(|| {
        Status::internal(format!(
            "the upstream's output '{name}' has datatype '{datatype}'"
        ))
    })?;
    let count = element_count(shape, name).map_err(|e| Status::internal(e.to_string()))?;
    if let Some(bytes) = data.decoded_as(dt, count) {
        return Ok(bytes);
    }
    let raw = data.raw_data().unwrap_or(b"[]");
    json::data::decode(raw, dt, count, MAX_DEPTH)
        .map(Bytes::from)
        .map_err(|e| Status::internal(format!("the upstream's output '{name}': {e:?}")))
}

/// An HTTP error answer in gRPC terms, keeping the upstream's message.
fn error_status(status: StatusCode, body: &[u8]) -> Status {
    let message = serde_json::from_slice::<J>(body)
        .ok()
        .and_then(|v| v.get("error").and_then(J::as_str).map(str::to_string))
        .unwrap_or_else(|| String::from_utf8_lossy(body).trim().to_string());
    let message = if message.is_empty() {
        format!("HTTP {status}")
    } else {
        message
    };
    match status {
        StatusCode::BAD_REQUEST | StatusCode::UNPROCESSABLE_ENTITY => {
            Status::invalid_argument(message)
        }
        StatusCode::NOT_FOUND => Status::not_found(message),
        StatusCode::CONFLICT => Status::already_exists(message),
        StatusCode::NOT_IMPLEMENTED | StatusCode::METHOD_NOT_ALLOWED => {
            Status::unimplemented(message)
        }
        StatusCode::SERVICE_UNAVAILABLE | StatusCode::BAD_GATEWAY => Status::unavailable(message),
        StatusCode::GATEWAY_TIMEOUT | StatusCode::REQUEST_TIMEOUT => {
            Status::deadline_exceeded(message)
        }
        StatusCode::PAYLOAD_TOO_LARGE => Status::resource_exhausted(message),
        _ => Status::internal(message),
    }
}

/// A connection failure with its cause (hyper's top-level message alone says little).
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
    use infergate_proto::inference::model_infer_request::{
        InferInputTensor, InferRequestedOutputTensor,
    };

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
        let status = client.infer(&request(), &[]).await.unwrap_err();
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

    fn request() -> ModelInferRequest {
        ModelInferRequest {
            model_name: "simple".into(),
            inputs: vec![InferInputTensor {
                name: "INPUT0".into(),
                datatype: "INT32".into(),
                shape: vec![1, 2],
                ..Default::default()
            }],
            outputs: vec![InferRequestedOutputTensor {
                name: "OUTPUT0".into(),
                ..Default::default()
            }],
            raw_input_contents: vec![Bytes::from_static(&[1, 0, 0, 0, 2, 0, 0, 0])],
            ..Default::default()
        }
    }

    #[test]
    fn binary_requests_carry_the_bytes_after_the_header() {
        let (chunks, header_length) = encode_request(&request(), true).unwrap();
        let header: J = serde_json::from_slice(&chunks[0]).unwrap();
        assert_eq!(header_length, Some(chunks[0].len()));
        assert_eq!(header["inputs"][0]["parameters"]["binary_data_size"], 8);
        assert_eq!(header["outputs"][0]["parameters"]["binary_data"], true);
        assert_eq!(chunks[1].as_ref(), &[1, 0, 0, 0, 2, 0, 0, 0]);
    }

    #[test]
    fn json_requests_carry_the_values() {
        let (chunks, header_length) = encode_request(&request(), false).unwrap();
        assert_eq!((chunks.len(), header_length), (1, None));
        let header: J = serde_json::from_slice(&chunks[0]).unwrap();
        assert_eq!(header["inputs"][0]["data"], json!([1, 2]));
        assert!(header["outputs"][0].get("parameters").is_none());
    }

    #[test]
    fn answers_with_binary_and_json_outputs_become_raw_contents() {
        let header = br#"{"model_name":"simple","outputs":[{"name":"A","datatype":"INT32","shape":[2],"parameters":{"binary_data_size":8}},{"name":"B","datatype":"INT32","shape":[2],"data":[3,4]}]}"#;
        let mut body = header.to_vec();
        body.extend_from_slice(&[1, 0, 0, 0, 2, 0, 0, 0]);
        let response = decode_response(&Bytes::from(body), Some(header.len())).unwrap();
        assert_eq!(response.outputs.len(), 2);
        assert_eq!(
            response.raw_output_contents[0].as_ref(),
            &[1, 0, 0, 0, 2, 0, 0, 0]
        );
        assert_eq!(
            response.raw_output_contents[1].as_ref(),
            &[3, 0, 0, 0, 4, 0, 0, 0]
        );
    }

    #[test]
    fn a_lying_binary_size_is_an_error_not_a_panic() {
        let header = br#"{"outputs":[{"name":"A","datatype":"INT32","shape":[2],"parameters":{"binary_data_size":18446744073709551615}}]}"#;
        let err = decode_response(&Bytes::from_static(header), Some(header.len())).unwrap_err();
        assert_eq!(err.code(), tonic::Code::Internal);
        assert!(decode_response(&Bytes::from_static(header), Some(10_000)).is_err());
    }

    #[test]
    fn http_errors_keep_their_message_and_map_to_grpc_codes() {
        let s = error_status(StatusCode::BAD_REQUEST, br#"{"error":"bad shape"}"#);
        assert_eq!(
            (s.code(), s.message()),
            (tonic::Code::InvalidArgument, "bad shape")
        );
        let s = error_status(StatusCode::SERVICE_UNAVAILABLE, b"");
        assert_eq!(s.code(), tonic::Code::Unavailable);
        assert_eq!(segment("a b/../c"), "a%20b%2F..%2Fc");
    }
}
