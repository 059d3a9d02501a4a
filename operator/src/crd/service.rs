//! `spec.service`: the Service clients connect to.

use std::collections::BTreeMap;

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The client Service.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ServiceSpec {
    /// Service type: ClusterIP, NodePort or LoadBalancer.
    #[serde(default, rename = "type")]
    pub type_: ServiceType,
    /// Annotations of the Service (load-balancer settings, for example).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// A Gateway (Gateway API) that exposes the Service on one hostname: an HTTPRoute for REST
    /// and a GRPCRoute for gRPC, both `<name>`, attached to it. Unset: no route.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<GatewayRoutes>,
}

/// The Gateway the routes attach to, and the hostname clients use.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GatewayRoutes {
    /// The Gateway's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// The Gateway's namespace. Unset: the resource's (a Gateway elsewhere must allow routes
    /// from this namespace, its listeners' allowedRoutes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub namespace: Option<String>,
    /// The hostname of both routes, e.g. resnet.models.example.com.
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub hostname: String,
    /// The listener (sectionName) of the HTTPRoute. Unset: every listener that takes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub http_section_name: Option<String>,
    /// The listener (sectionName) of the GRPCRoute. Unset: every listener that takes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub grpc_section_name: Option<String>,
}

/// Service type.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ServiceType {
    /// Reachable inside the cluster.
    #[default]
    ClusterIP,
    /// Also on a port of every node.
    NodePort,
    /// Also through a cloud load balancer.
    LoadBalancer,
}

impl ServiceType {
    /// The Kubernetes spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceType::ClusterIP => "ClusterIP",
            ServiceType::NodePort => "NodePort",
            ServiceType::LoadBalancer => "LoadBalancer",
        }
    }
}
