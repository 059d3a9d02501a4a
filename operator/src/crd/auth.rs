//! `spec.auth`: who may call the control APIs (the model repository, logging and trace
//! settings), which change what the service does for every client, and who may call inference.

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Who may call what. Health, metadata and statistics stay open to every client of the Service,
/// as in Triton (restrict who reaches the Service with networkPolicy).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AuthSpec {
    /// The control APIs: load and unload of models and the repository index, the log settings,
    /// the trace settings. Shared memory is served to the pod's own containers only, whatever
    /// this says.
    #[serde(default, rename = "controlAPIs")]
    pub control_apis: ControlApis,
    /// Inference (REST and gRPC, streams included).
    #[serde(default)]
    pub inference: InferenceAuth,
}

/// Who may call inference.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[x_kube(validation = Rule::new(
    "self.from == 'Identity' || (!has(self.audience) && !has(self.verb))"
)
.message("inference.audience and inference.verb are read only with inference.from Identity"))]
#[serde(rename_all = "camelCase")]
pub struct InferenceAuth {
    /// Anyone (the default): every client of the Service, as Triton leaves it. Identity: only
    /// callers that send a ServiceAccount token bound to the service's audience
    /// (`Authorization: Bearer <token>`, a projected token), and whose account a Role in this
    /// namespace grants `verb` on this InferenceService. The sidecar checks tokens against the
    /// cluster's service-account issuer keys and asks the API server with a
    /// LocalSubjectAccessReview; the operator gives the pods a ServiceAccount token and a Role
    /// for that.
    #[serde(default)]
    pub from: InferenceFrom,
    /// With from Identity: the audience tokens must be bound to. Default:
    /// infergate.dev/<namespace>/<name>.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub audience: Option<String>,
    /// With from Identity: the verb a Role must grant on `inferenceservices` (group
    /// `infergate.dev`) for this resource. Default: infer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = r"^[a-z][-a-z0-9]*$"))]
    pub verb: Option<String>,
}

impl AuthSpec {
    /// Whether some API takes a Kubernetes identity: the sidecar then checks tokens, and the
    /// pods need a token and a Role to ask the API server.
    pub fn by_identity(&self) -> bool {
        self.inference.by_identity() || self.control_apis.by_identity()
    }
}

impl InferenceAuth {
    /// Whether callers must prove an identity.
    pub fn by_identity(&self) -> bool {
        self.from == InferenceFrom::Identity
    }

    /// The verb a Role grants for it.
    pub fn verb(&self) -> &str {
        self.verb.as_deref().unwrap_or(DEFAULT_INFER_VERB)
    }
}

/// Who may call inference.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum InferenceFrom {
    /// Every client.
    #[default]
    Anyone,
    /// Callers with a ServiceAccount token for the audience, granted the verb.
    Identity,
}

/// The verb a Role grants for inference by default.
pub const DEFAULT_INFER_VERB: &str = "infer";

/// Who may call the control APIs.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[x_kube(
    validation = Rule::new("self.from != 'Key' || has(self.key)")
        .message("controlAPIs.from Key needs controlAPIs.key (the Secret that holds the key)"),
    validation = Rule::new("self.from == 'Key' || !has(self.key)")
        .message("controlAPIs.key is read only with controlAPIs.from Key"),
    validation = Rule::new("self.from == 'Identity' || !has(self.verb)")
        .message("controlAPIs.verb is read only with controlAPIs.from Identity")
)]
#[serde(rename_all = "camelCase")]
pub struct ControlApis {
    /// Pod (the default): only the pod's own containers, on loopback, may call them; any other
    /// caller gets Triton's restricted-API answer (HTTP 403, gRPC UNAVAILABLE). Key: callers
    /// that send the key of `key` in its header, from anywhere. Identity: callers that send a
    /// ServiceAccount token bound to the service's audience (inference.audience where inference
    /// takes an identity, else infergate.dev/<namespace>/<name>) and whose account a Role in this
    /// namespace grants `verb` on this InferenceService, from anywhere. Anyone: every client of
    /// the Service, as Triton leaves them.
    #[serde(default)]
    pub from: ControlFrom,
    /// With from Identity: the verb a Role must grant on `inferenceservices` (group
    /// `infergate.dev`) for this resource. Default: control.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = r"^[a-z][-a-z0-9]*$"))]
    pub verb: Option<String>,
    /// With from Key: where the key is. The Secret is mounted in the sidecar and read again as it
    /// changes, so a new key takes effect without a restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<ControlKey>,
}

/// Who may call the control APIs.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ControlFrom {
    /// The pod's own containers only.
    #[default]
    Pod,
    /// Callers with the key.
    Key,
    /// Callers with a ServiceAccount token for the audience, granted the verb.
    Identity,
    /// Every client.
    Anyone,
}

impl ControlApis {
    /// Whether callers must prove an identity.
    pub fn by_identity(&self) -> bool {
        self.from == ControlFrom::Identity
    }

    /// The verb a Role grants for them.
    pub fn verb(&self) -> &str {
        self.verb.as_deref().unwrap_or(DEFAULT_CONTROL_VERB)
    }
}

/// The verb a Role grants for the control APIs by default.
pub const DEFAULT_CONTROL_VERB: &str = "control";

/// A key in a Secret of the resource's namespace, and the header that carries it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ControlKey {
    /// The Secret.
    #[schemars(length(min = 1, max = 253))]
    pub secret_name: String,
    /// The Secret's key holding the value (one line).
    #[serde(default = "default_secret_key")]
    #[schemars(length(min = 1, max = 253), regex(pattern = r"^[-._a-zA-Z0-9]+$"))]
    pub secret_key: String,
    /// The header clients send it in (gRPC: the metadata key triton-grpc-protocol-<header>, as
    /// Triton names restricted protocols' keys).
    #[serde(default = "default_header")]
    #[schemars(
        length(min = 1, max = 64),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub header: String,
}

fn default_secret_key() -> String {
    "key".to_string()
}

fn default_header() -> String {
    "infergate-control-key".to_string()
}

/// The control APIs, by their restricted-API names.
pub const CONTROL_APIS: &str = "model-repository,logging,trace";
