//! `spec.upstream`: how the sidecar reaches the model server.

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How the sidecar reaches the model server.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[x_kube(
    validation = Rule::new("self.protocol != 'rest' || has(self.restPort)").message("upstream.protocol rest needs upstream.restPort, the model server's V2 REST port").field_path(".restPort")
)]
#[serde(rename_all = "camelCase")]
pub struct Upstream {
    /// Protocol the model server speaks: grpc (V2 gRPC, inference.GRPCInferenceService; REST as
    /// well for small calls where restPort is set), or rest (V2 REST only, at restPort, for a
    /// model server without gRPC: every call goes over HTTP/1.1, and grpcPort is not used).
    #[serde(default)]
    pub protocol: UpstreamProtocol,
    /// The model server's V2 gRPC port on loopback. It must differ from the sidecar's ports
    /// (8000-8003 by default), so Triton needs --grpc-port=9001 (and its HTTP and metrics ports
    /// moved as well).
    #[serde(default = "default_upstream_grpc_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub grpc_port: i32,
    /// The model server's V2 REST port on loopback, where it has one (Triton: its --http-port,
    /// 9000 once moved off the sidecar's ports). Inference calls that carry at most 64 KiB of
    /// tensor data then go over it, the others over gRPC: Triton answers small requests sooner
    /// over REST. Unset: every call over gRPC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub rest_port: Option<i32>,
}

impl Default for Upstream {
    fn default() -> Self {
        Upstream {
            protocol: UpstreamProtocol::default(),
            grpc_port: default_upstream_grpc_port(),
            rest_port: None,
        }
    }
}

fn default_upstream_grpc_port() -> i32 {
    9001
}

/// Wire protocol between the sidecar and the model server.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum UpstreamProtocol {
    /// V2 gRPC.
    #[default]
    Grpc,
    /// V2 REST only, at upstream.restPort.
    Rest,
}
