//! `spec.networkPolicy`: a NetworkPolicy that admits what the service needs, for namespaces that
//! deny ingress by default.

use k8s_openapi::api::networking::v1::NetworkPolicyPeer;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::schema::objects_list;

/// The NetworkPolicy of the pods, rendered unless enabled is false. It admits clients to the
/// sidecar's HTTP and gRPC ports, the operator to the admin port (the status probe), and scrapers
/// to the metrics port; nothing reaches the model server's ports or the admin port's drain from
/// elsewhere. Egress is left alone: under a default-deny egress policy, allow DNS and the storage
/// endpoint (model.storageUri) for the pods.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NetworkPolicySpec {
    /// false: no NetworkPolicy (the namespace's own policies alone apply).
    #[serde(default = "enabled")]
    pub enabled: bool,
    /// Who may call the service (NetworkPolicyPeer objects: podSelector, namespaceSelector,
    /// ipBlock). Empty: anyone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "objects_list")]
    pub clients: Vec<NetworkPolicyPeer>,
    /// Who may scrape the metrics port. Empty: pods of the namespace named monitoring, where a
    /// Prometheus install usually runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "objects_list")]
    pub metrics_scrapers: Vec<NetworkPolicyPeer>,
    /// Who may reach the admin port: the operator's pods. Empty: pods labelled
    /// app.kubernetes.io/name=infergate-operator in the operator's namespace (any namespace
    /// when the operator does not know its own).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "objects_list")]
    pub operator: Vec<NetworkPolicyPeer>,
}

impl Default for NetworkPolicySpec {
    fn default() -> Self {
        NetworkPolicySpec {
            enabled: true,
            clients: Vec::new(),
            metrics_scrapers: Vec::new(),
            operator: Vec::new(),
        }
    }
}

fn enabled() -> bool {
    true
}
