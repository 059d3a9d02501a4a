//! The bodies of the fuzz targets in `libfuzzer/fuzz_targets/`, one module each, so that a finding can be
//! replayed and debugged without libFuzzer. Every target checks properties of the answer, not
//! only that nothing panicked.

pub mod bytes_tensor;
pub mod generate;
pub mod grpc_infer;
pub mod harness;
pub mod http_infer;
pub mod json_tensor;
pub mod operator_children;
pub mod shm_params;
pub mod tls_handshake;
