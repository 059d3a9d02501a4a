//! Names the operator gives to parts of the pod (containers, volumes, ports): shared by the render
//! that creates them and the checks that keep users' additions from clashing with them.

/// Name of the sidecar container.
pub const SIDECAR_CONTAINER: &str = "infergate";
/// Name of the model server container.
pub const MODEL_CONTAINER: &str = "model";
/// Name of the `/dev/shm` volume.
pub const SHM_VOLUME: &str = "infergate-shm";
/// Name of the volume holding the sidecar's configuration.
pub const CONFIG_VOLUME: &str = "infergate-config";
/// Name of the volume the sidecar copies its preStop hook (`infergate-drain`) into.
pub const HOOK_VOLUME: &str = "infergate-hook";
/// Where that volume is mounted, and where the sidecar copies the hook at start
/// (`server.drain_hook_dir`): read-only in the model container, whose hook runs it there (its
/// image has no sidecar binary of its own).
pub const HOOK_DIR: &str = "/var/run/infergate/hook";
/// Name of the volume holding the client ports' certificate (the Secret of `spec.tls`).
pub const TLS_VOLUME: &str = "infergate-tls";
/// Where that volume is mounted in the sidecar, whole (not by `subPath`, which a renewed Secret
/// would never reach).
pub const TLS_DIR: &str = "/etc/infergate/tls";
/// Name of the volume holding the control APIs' key (the Secret of `spec.auth.controlAPIs.key`).
pub const AUTH_VOLUME: &str = "infergate-auth";
/// Where that volume is mounted in the sidecar, whole.
pub const AUTH_DIR: &str = "/etc/infergate/auth";
/// Name of the volume holding the sidecar's ServiceAccount token (with the cluster's CA and the
/// namespace), where the sidecar needs one: projected into the sidecar alone.
pub const TOKEN_VOLUME: &str = "infergate-token";
/// Where that volume is mounted: the path every Kubernetes client reads in a pod.
pub const TOKEN_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// Prefix of the volumes holding label files (`infergate-labels-<index of the model>`).
pub const LABELS_VOLUME_PREFIX: &str = "infergate-labels-";
/// Prefix reserved for the operator's volumes.
pub const RESERVED_VOLUME_PREFIX: &str = "infergate-";
/// Name of the model server's gRPC port on its container.
pub const UPSTREAM_PORT_NAME: &str = "upstream-grpc";
/// The model server's REST port, where `upstream.restPort` names one.
pub const UPSTREAM_REST_PORT_NAME: &str = "upstream-rest";
/// Name of the init container that fetches the model from `model.storageUri`.
pub const STORAGE_INIT_CONTAINER: &str = "storage-initializer";
/// Name of the volume the model is fetched into.
pub const MODEL_STORAGE_VOLUME: &str = "infergate-model-storage";
/// Name of the volume holding the storage credentials (`model.storage.secretName`).
pub const STORAGE_SECRET_VOLUME: &str = "infergate-storage-secret";
