//! Infergate's sidecar: the Open Inference Protocol (KServe V2) with Triton's extensions over
//! REST and gRPC, in front of built-in models or a model server.
//!
//! The process:
//!
//! - [`cli`]: command-line flags, each overriding a field of the configuration file.
//! - [`server`]: builds the state, binds the four ports, serves until SIGTERM or SIGINT, drains.
//! - [`allocator`]: glibc's malloc thresholds raised, by starting the binary once more with them.
//! - [`open_files`]: the open-file limit, raised to the hard limit at start.
//! - [`log`]: logging (Triton's layouts, text or JSON; stderr or a file), changeable at run time
//!   over REST and gRPC as Triton changes it; its lines in Triton's two layouts.
//!
//! The ports:
//!
//! - [`accept`]: the accept loop every port shares: connection caps, idle connections, graceful
//!   shutdown.
//! - [`tls`]: TLS on a port, its files read again when they change.
//! - [`inflight`]: the calls in flight on a connection, and the request bytes they hold against
//!   the process's budget.
//! - [`http`]: the REST front end: every route, with Triton's status codes, errors and headers.
//! - [`grpc`]: the gRPC front end: `inference.GRPCInferenceService` and `grpc.health.v1.Health`.
//! - [`admin`]: the admin port's `GET /status`, what is live per extension, read by the operator.
//! - [`drain`]: `GET /drain?seconds=N` on the admin port, the pod's preStop hook.
//! - [`metrics`]: Prometheus text on the metrics port, with Triton's `nv_inference_*` families.
//! - [`host_metrics`]: the CPU and memory gauges Triton exports beside its inference metrics.
//! - [`trace`]: the trace extension: its settings, and OpenTelemetry spans of sampled requests
//!   exported over OTLP.
//! - [`restricted`]: the APIs and protocols restricted to requests with a header, as Triton's
//!   `--http-restricted-api` and `--grpc-restricted-protocol` set them, or to the pod.
//! - [`reload`]: files read again while serving (certificates, keys).
//!
//! Inference, whatever the wire protocol:
//!
//! - [`front_door`]: the one way into inference: the model looked up once, the root trace span,
//!   the failed-inference line, the sequence peers' routing, then the pipeline.
//! - [`core`]: models and their registry, requests and responses, validation, sequences,
//!   classification, statistics, and the pipeline that ties them together.
//! - [`peers`]: sequences across replicas: each sequence's requests go to the replica that holds
//!   its state, over the peers' gRPC ports.
//! - [`canary`]: a canary's share of the clients' calls, split per call and sent to its pods.
//! - [`backend`]: where inference runs: the built-in models, or a model server upstream.
//!
//! Shared by all of the above:
//!
//! - [`cxx_number`]: numbers read as the C++ library reads them (`std::stoi`, `std::stol`), which
//!   is how Triton reads numeric headers, parameters and settings.
//! - [`json`]: the JSON dialect Triton's HTTP front end speaks, with rapidjson's number text.
//! - [`tensor`]: tensors as a datatype, a shape and reference-counted little-endian bytes.
//! - [`grpc_message`]: the gRPC messages' typed fields read into the core's forms, for the gRPC
//!   front end and the upstream backend.
//! - [`shm`]: client shared memory (system and CUDA) and the staging pool; the `unsafe` code it
//!   needs lives in the `infergate-shm` crate.
//! - [`protocol`]: REST or gRPC, where Triton's two front ends differ.
//! - [`caller`]: the address a request came from; only a caller on loopback is in the pod.
//! - [`error`]: the protocol's error, mapped to HTTP and gRPC status codes as Triton maps them.
//! - [`health`]: liveness, readiness and draining.
//! - [`state`]: what every port shares: the model repository, the shared-memory registry, the
//!   server's identity, limits, health, log settings and the upstream, if any.

#![forbid(unsafe_code)]

pub mod accept;
pub mod activator;
pub mod admin;
pub mod admin_access;
pub mod allocator;
pub mod audit;
pub mod backend;
pub mod caller;
pub mod canary;
pub mod cli;
pub mod core;
pub mod cxx_number;
pub mod drain;
pub mod error;
pub mod front_door;
pub mod grpc;
pub mod grpc_message;
pub mod health;
pub mod host_metrics;
pub mod http;
pub mod identity;
pub mod inflight;
pub mod json;
pub mod log;
pub mod metrics;
pub mod open_files;
pub mod peers;
pub mod protocol;
pub mod reload;
pub mod restricted;
pub mod server;
pub mod shm;
pub mod state;
pub mod tensor;
pub mod tls;
pub mod trace;
pub mod traffic;
