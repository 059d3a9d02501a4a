//! `spec.extensions`: the protocol extensions that need the pod or the Service set up for them
//! (system and CUDA shared memory, sequences).

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Protocol extensions that need the pod or the Service to be set up for them.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Extensions {
    /// Client system shared memory (Triton's system_shared_memory extension).
    #[serde(default)]
    pub system_shared_memory: SystemSharedMemory,
    /// Client CUDA shared memory (Triton's cuda_shared_memory extension).
    #[serde(default)]
    pub cuda_shared_memory: CudaSharedMemory,
    /// Sequences (stateful models) and how their requests reach one pod.
    #[serde(default)]
    pub sequence: Sequence,
}

/// System shared memory: clients in the same pod register POSIX shared-memory regions and pass
/// tensors through them instead of the socket.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[x_kube(
    validation = Rule::new(
        "!self.enabled || (has(self.size) && isQuantity(self.size) && quantity(self.size).isGreaterThan(quantity('0')))"
    ).message("systemSharedMemory.size must be a quantity greater than 0 (e.g. 1Gi) when systemSharedMemory is enabled").field_path(".size")
)]
#[serde(rename_all = "camelCase")]
pub struct SystemSharedMemory {
    /// Let clients register regions (off by default, as in Triton). Mounts a memory-backed
    /// emptyDir of the given size at /dev/shm in every container of the pod.
    #[serde(default)]
    pub enabled: bool,
    /// Size of /dev/shm, a quantity such as 2Gi. Required when enabled. The pages written there
    /// count against the memory limit of the container that writes them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    pub size: Option<String>,
}

/// CUDA shared memory: clients in the same pod pass GPU buffers by CUDA IPC handle.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CudaSharedMemory {
    /// Request the extension. Needs a GPU on the model server (model.resources.limits); puts the
    /// pod's containers into one process namespace, which CUDA IPC needs.
    #[serde(default)]
    pub enabled: bool,
}

/// Sequence (stateful model) settings.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Sequence {
    /// Request the extension: the service serves sequence models.
    #[serde(default)]
    pub enabled: bool,
    /// How the requests of one sequence reach the same pod. Stream: clients send a sequence on
    /// one gRPC stream (ModelStreamInfer), which stays on one pod. ClientIP: the Service pins a
    /// client address to a pod (breaks behind proxies that hide client addresses).
    /// SingleReplica: at most one replica. Sidecar: the sidecars route each sequence to the
    /// replica that holds it, over REST, gRPC and streams alike, and keep sequences in flight
    /// where they are while replicas come and go (a headless Service `<name>-peers` lists the
    /// pods; the sidecars watch its EndpointSlices).
    #[serde(default)]
    pub routing: SequenceRouting,
    /// With ClientIP routing, how long a client stays pinned to its pod after its last request,
    /// in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 86400))]
    pub client_ip_timeout_seconds: Option<i32>,
}

impl Sequence {
    /// Whether the sidecars route sequences between the replicas.
    pub fn routed_by_sidecars(&self) -> bool {
        self.enabled && self.routing == SequenceRouting::Sidecar
    }
}

/// How the requests of a sequence reach one pod.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SequenceRouting {
    /// One gRPC stream per sequence.
    #[default]
    Stream,
    /// Service session affinity by client IP.
    #[serde(rename = "ClientIP")]
    ClientIp,
    /// One replica only.
    SingleReplica,
    /// The sidecars route each sequence to the replica that holds it (docs/sequences.md).
    Sidecar,
}
