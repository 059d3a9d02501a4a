//! The Deployment: the model server and the sidecar in one pod.
//!
//! Pod layout:
//!
//! - **Sidecar** (`infergate`): by default a native sidecar, i.e. an init container with
//!   `restartPolicy: Always`. The kubelet starts it before the model server, starts the model
//!   server once the sidecar's startup probe passes, and stops it after the model server, so
//!   requests that arrive during start-up or shutdown get a protocol error instead of a refused
//!   connection. `sidecar.mode: Regular` makes it an ordinary container instead.
//! - **Model server** (`model`): the user's container. By default (`model.listen: Loopback`) it
//!   listens on loopback only and declares no port: every client goes through the sidecar. With
//!   `listen: Pod` its gRPC (or REST) port is declared.
//! - **Extra containers** from `pod.containers`, appended as written.
//!
//! Probes, and why they never make the sidecar wait for the model server:
//!
//! - The sidecar's probes are on its **admin port**, which answers `/livez` and `/readyz` in
//!   plain HTTP to anyone, whatever TLS or credentials the client ports ask for (`spec.tls`):
//!   the kubelet presents neither.
//! - Its **startup** and **liveness** probes are `/livez`, which answers as soon as the sidecar
//!   serves, whatever the model server does. This matters for the native sidecar: the kubelet
//!   does not start the next container (the model server) until the sidecar's startup probe
//!   passes, so a startup probe that waited for the model would deadlock the pod.
//! - Its **readiness** probe is `/readyz`, which passes once the sidecar has discovered the model
//!   server's models and the model server reports ready. Readiness does not gate the start of
//!   other containers; it only decides whether the pod receives traffic, so the model's load time
//!   is covered by it without blocking anything.
//! - The model server gets **startup** and **liveness** probes that it accepts connections on its
//!   gRPC port: the startup probe's budget (`model.probes`) is the time the model may take to
//!   load, and the liveness probe restarts a model server that stopped listening. On loopback the
//!   kubelet cannot connect to it, so the probes are HTTP on the sidecar's admin port
//!   (`/upstream/livez`), which connects for it; with `listen: Pod` they are TCP. It has no
//!   readiness probe of its own: the sidecar's readiness already follows it.
//!
//! Security: the sidecar runs with the `restricted` Pod Security Standard's settings; the model
//! server and the extra containers get them for every field the user leaves unset (see
//! `security.rs`), so the pods are admitted in namespaces that enforce that profile.
//!
//! Shared memory: when `extensions.systemSharedMemory` is enabled, one memory-backed emptyDir of
//! the requested size is mounted at `/dev/shm` in *every* container of the pod. A container
//! without that mount would see the runtime's private 64 MiB `/dev/shm` instead and could not
//! share regions. CUDA shared memory (`extensions.cudaSharedMemory`) sets
//! `shareProcessNamespace: true`: CUDA IPC needs the exporting and importing processes to have
//! different PIDs, which separate PID namespaces do not guarantee.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment,
};
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMapProjection, ConfigMapVolumeSource, Container, ContainerPort,
    DownwardAPIProjection, DownwardAPIVolumeFile, EmptyDirVolumeSource, EnvVar, EnvVarSource,
    ExecAction, HTTPGetAction, KeyToPath, Lifecycle, LifecycleHandler, ObjectFieldSelector,
    PodSpec, PodTemplateSpec, Probe, ProjectedVolumeSource, ResourceRequirements, SeccompProfile,
    SecretVolumeSource, SecurityContext, ServiceAccountTokenProjection, TCPSocketAction, Volume,
    VolumeMount, VolumeProjection,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use super::config::{CONFIG_DIR, CONFIG_FILE, config_map_name, labels_dir};
use super::security::restricted_defaults;
use super::storage;
use super::{CONFIG_HASH_ANNOTATION, OperatorSettings, Variant, child_meta};
use crate::crd::{
    InferenceService, InferenceServiceSpec, ModelListen, SidecarMode, UpstreamProtocol,
};

pub use crate::pod_names::{
    AUTH_DIR, AUTH_VOLUME, CONFIG_VOLUME, HOOK_DIR, HOOK_VOLUME, LABELS_VOLUME_PREFIX,
    MODEL_CONTAINER, RESERVED_VOLUME_PREFIX, SHM_VOLUME, SIDECAR_CONTAINER, TLS_DIR, TLS_VOLUME,
    TOKEN_DIR, TOKEN_VOLUME, UPSTREAM_PORT_NAME, UPSTREAM_REST_PORT_NAME,
};

/// The Secret of the control APIs' key, where they take one.
fn control_key(spec: &InferenceServiceSpec) -> Option<&crate::crd::ControlKey> {
    let control = &spec.auth.control_apis;
    control
        .key
        .as_ref()
        .filter(|_| control.from == crate::crd::ControlFrom::Key)
}

/// The hook binary in the sidecar's own image (a regular sidecar's hook runs it there).
const HOOK_IN_SIDECAR_IMAGE: &str = "/usr/local/bin/infergate-drain";

/// The Deployment `<name>` (the canary's, `<name>-canary`, from the canary's view of the
/// resource: `super::canary`).
pub(super) fn deployment(
    isvc: &InferenceService,
    settings: &OperatorSettings,
    owner: &OwnerReference,
    config_hash: &str,
    variant: Variant,
) -> Deployment {
    let spec = &isvc.spec;
    let sidecar = sidecar_container(isvc, settings);
    let storage = storage::parts(isvc, settings);
    // Init containers in the order they run: the model's fetch, the user's, then the native
    // sidecar (which keeps running).
    let mut init_containers: Vec<Container> = storage
        .as_ref()
        .and_then(|s| s.init_container.clone())
        .into_iter()
        .collect();
    init_containers.extend(
        spec.pod
            .init_containers
            .iter()
            .map(|c| users_container(isvc, c)),
    );
    let mut containers = vec![model_container(
        isvc,
        storage.as_ref().map(|s| &s.model_mount),
    )];
    match spec.sidecar.mode {
        SidecarMode::Native => init_containers.push(sidecar),
        SidecarMode::Regular => containers.push(sidecar),
    }
    containers.extend(spec.pod.containers.iter().map(|c| users_container(isvc, c)));
    let mut volumes = volumes(isvc, variant);
    volumes.extend(storage.into_iter().flat_map(|s| s.volumes));

    let pod = &spec.pod;
    let mut template_labels = pod.labels.clone();
    template_labels.extend(variant.pod_labels(isvc));
    let mut annotations = pod.annotations.clone();
    annotations.insert(
        "kubectl.kubernetes.io/default-container".to_string(),
        MODEL_CONTAINER.to_string(),
    );
    annotations.insert(CONFIG_HASH_ANNOTATION.to_string(), config_hash.to_string());

    // The namespace's default account where the pods need none of their own.
    let pods_account = super::identity::pods_service_account(isvc)
        .unwrap_or_else(|| DEFAULT_SERVICE_ACCOUNT.to_string());
    let pod_spec = PodSpec {
        init_containers: (!init_containers.is_empty()).then_some(init_containers),
        containers,
        volumes: Some(volumes),
        share_process_namespace: spec.extensions.cuda_shared_memory.enabled.then_some(true),
        node_selector: non_empty_map(&pod.node_selector),
        tolerations: non_empty(&pod.tolerations),
        topology_spread_constraints: non_empty(&pod.topology_spread_constraints),
        affinity: pod.affinity.clone(),
        priority_class_name: pod.priority_class_name.clone(),
        runtime_class_name: pod.runtime_class_name.clone(),
        // Always named, and the deprecated `serviceAccount` with it: the API server fills a
        // missing `serviceAccountName` back from `serviceAccount`, which it keeps from an earlier
        // apply, so an account dropped from the spec would stay in the template (and, once the
        // operator deletes that account, no new pod could be made).
        service_account_name: Some(pods_account.clone()),
        service_account: Some(pods_account),
        // Only the sidecar gets the token it needs (`sidecar_token`); every container gets one
        // only where the resource asks.
        automount_service_account_token: Some(pod.automount_service_account_token == Some(true)),
        image_pull_secrets: non_empty(&pod.image_pull_secrets),
        security_context: pod.security_context.clone(),
        termination_grace_period_seconds: Some(pod.termination_grace_period_seconds),
        ..PodSpec::default()
    };

    Deployment {
        metadata: child_meta(isvc, variant.name(isvc, ""), owner),
        spec: Some(DeploymentSpec {
            // The autoscaler owns the count when there is one, and with scale to zero the
            // scale subresource does (the activator raises it from 0, the operator brings it to
            // spec.replicas and to 0 when idle); applying none leaves its value.
            replicas: (spec.autoscaling.is_none() && spec.scale_to_zero.is_none())
                .then_some(spec.replicas),
            strategy: Some(strategy(isvc)),
            progress_deadline_seconds: spec.rollout.progress_deadline_seconds,
            selector: LabelSelector {
                match_labels: Some(variant.selector_labels(isvc)),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(template_labels),
                    annotations: Some(annotations),
                    ..ObjectMeta::default()
                }),
                spec: Some(pod_spec),
            },
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    }
}

/// A container the user describes in `pod.containers` or `pod.initContainers`: the restricted
/// profile's defaults for what its securityContext leaves unset, and the shared `/dev/shm`.
fn users_container(isvc: &InferenceService, container: &Container) -> Container {
    let spec = &isvc.spec;
    let mut container = container.clone();
    container.security_context = Some(restricted_defaults(
        container.security_context.as_ref(),
        spec.pod.security_context.as_ref(),
        spec.sidecar.run_as_user,
    ));
    if spec.extensions.system_shared_memory.enabled {
        container
            .volume_mounts
            .get_or_insert_with(Vec::new)
            .push(shm_mount());
    }
    container
}

/// Whether the sidecar gets a token of its own: it needs one (to watch its peers, to check
/// callers' identities) and the pod does not mount one in every container already.
fn sidecar_token(isvc: &InferenceService) -> bool {
    super::identity::pods_need_token(isvc)
        && isvc.spec.pod.automount_service_account_token != Some(true)
}

/// What the kubelet mounts for a ServiceAccount, as a volume of its own so that only the
/// sidecar mounts it and the model server never holds the pod's identity: a token it renews
/// (an hour), the cluster's CA (the `kube-root-ca.crt` ConfigMap every namespace has) and the
/// namespace.
fn token_volume() -> Volume {
    Volume {
        name: TOKEN_VOLUME.to_string(),
        projected: Some(ProjectedVolumeSource {
            default_mode: None,
            sources: Some(vec![
                VolumeProjection {
                    service_account_token: Some(ServiceAccountTokenProjection {
                        audience: None,
                        expiration_seconds: Some(3607),
                        path: "token".to_string(),
                    }),
                    ..VolumeProjection::default()
                },
                VolumeProjection {
                    config_map: Some(ConfigMapProjection {
                        name: "kube-root-ca.crt".to_string(),
                        items: Some(vec![KeyToPath {
                            key: "ca.crt".to_string(),
                            path: "ca.crt".to_string(),
                            mode: None,
                        }]),
                        optional: None,
                    }),
                    ..VolumeProjection::default()
                },
                VolumeProjection {
                    downward_api: Some(DownwardAPIProjection {
                        items: Some(vec![DownwardAPIVolumeFile {
                            path: "namespace".to_string(),
                            field_ref: Some(ObjectFieldSelector {
                                api_version: Some("v1".to_string()),
                                field_path: "metadata.namespace".to_string(),
                            }),
                            ..DownwardAPIVolumeFile::default()
                        }]),
                    }),
                    ..VolumeProjection::default()
                },
            ]),
        }),
        ..Volume::default()
    }
}

/// The Deployment's strategy from `spec.rollout` (see `RolloutSpec::rolling_limits`).
fn strategy(isvc: &InferenceService) -> DeploymentStrategy {
    let spec = &isvc.spec;
    match spec.rollout.rolling_limits(spec.model.requests_gpu()) {
        None => DeploymentStrategy {
            type_: Some("Recreate".to_string()),
            rolling_update: None,
        },
        Some((max_surge, max_unavailable)) => DeploymentStrategy {
            type_: Some("RollingUpdate".to_string()),
            rolling_update: Some(RollingUpdateDeployment {
                max_surge: Some(max_surge),
                max_unavailable: Some(max_unavailable),
            }),
        },
    }
}

fn non_empty<T: Clone>(items: &[T]) -> Option<Vec<T>> {
    (!items.is_empty()).then(|| items.to_vec())
}

fn non_empty_map(map: &BTreeMap<String, String>) -> Option<BTreeMap<String, String>> {
    (!map.is_empty()).then(|| map.clone())
}

/// The operator's volumes (configuration, `/dev/shm`, label files), then the user's.
fn volumes(isvc: &InferenceService, variant: Variant) -> Vec<Volume> {
    let spec = &isvc.spec;
    let mut volumes = vec![Volume {
        name: CONFIG_VOLUME.to_string(),
        config_map: Some(ConfigMapVolumeSource {
            name: config_map_name(isvc, variant),
            ..ConfigMapVolumeSource::default()
        }),
        ..Volume::default()
    }];
    volumes.push(Volume {
        name: HOOK_VOLUME.to_string(),
        // One static binary of about a megabyte; the limit only bounds a misbehaving writer.
        empty_dir: Some(EmptyDirVolumeSource {
            medium: None,
            size_limit: Some(Quantity("16Mi".to_string())),
        }),
        ..Volume::default()
    });
    if let Some(key) = control_key(spec) {
        // The whole Secret, so that a changed key reaches the sidecar.
        volumes.push(Volume {
            name: AUTH_VOLUME.to_string(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(key.secret_name.clone()),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        });
    }
    if sidecar_token(isvc) {
        volumes.push(token_volume());
    }
    if let Some(tls) = &spec.tls {
        // The whole Secret, so that the kubelet's updates (a renewal) reach the sidecar.
        volumes.push(Volume {
            name: TLS_VOLUME.to_string(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(tls.secret(&isvc.name_any())),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        });
    }
    let shm = &spec.extensions.system_shared_memory;
    if shm.enabled {
        volumes.push(Volume {
            name: SHM_VOLUME.to_string(),
            empty_dir: Some(EmptyDirVolumeSource {
                medium: Some("Memory".to_string()),
                size_limit: shm.size.clone().map(Quantity),
            }),
            ..Volume::default()
        });
    }
    for (i, model) in spec.models.iter().enumerate() {
        if let Some(labels) = &model.labels {
            let mut keys: Vec<&String> = labels.outputs.values().collect();
            keys.sort();
            keys.dedup();
            volumes.push(Volume {
                name: format!("{LABELS_VOLUME_PREFIX}{i}"),
                config_map: Some(ConfigMapVolumeSource {
                    name: labels.config_map.clone(),
                    items: Some(
                        keys.into_iter()
                            .map(|k| KeyToPath {
                                key: k.clone(),
                                path: k.clone(),
                                mode: None,
                            })
                            .collect(),
                    ),
                    ..ConfigMapVolumeSource::default()
                }),
                ..Volume::default()
            });
        }
    }
    volumes.extend(spec.pod.volumes.iter().cloned());
    volumes
}

fn shm_mount() -> VolumeMount {
    VolumeMount {
        name: SHM_VOLUME.to_string(),
        mount_path: "/dev/shm".to_string(),
        ..VolumeMount::default()
    }
}

fn tcp_port(name: &str, port: i32) -> ContainerPort {
    ContainerPort {
        name: Some(name.to_string()),
        container_port: port,
        protocol: Some("TCP".to_string()),
        ..ContainerPort::default()
    }
}

/// The model server's ports the sidecar uses, declared on the pod with `listen: Pod`: gRPC (none
/// for a REST-only server) and REST.
fn upstream_ports(spec: &InferenceServiceSpec) -> Vec<ContainerPort> {
    let mut ports = Vec::new();
    if spec.upstream.protocol != UpstreamProtocol::Rest {
        ports.push(tcp_port(UPSTREAM_PORT_NAME, spec.upstream.grpc_port));
    }
    if let Some(rest_port) = spec.upstream.rest_port {
        ports.push(tcp_port(UPSTREAM_REST_PORT_NAME, rest_port));
    }
    ports
}

/// A probe that the model server accepts connections on the port the sidecar uses (gRPC, or
/// REST for a REST-only server). On loopback only the sidecar can connect, so its admin port
/// asks for the kubelet (`/upstream/livez`); on the pod's address the kubelet connects itself.
fn model_probe(spec: &InferenceServiceSpec, failures: i32) -> Probe {
    let m = &spec.model;
    let probe = match m.listen {
        ModelListen::Loopback => admin_probe(
            "/upstream/livez",
            IntOrString::Int(spec.sidecar.ports.admin),
            m.probes.period_seconds,
            failures,
        ),
        ModelListen::Pod => {
            let probed = if spec.upstream.protocol == UpstreamProtocol::Rest {
                UPSTREAM_REST_PORT_NAME
            } else {
                UPSTREAM_PORT_NAME
            };
            Probe {
                tcp_socket: Some(TCPSocketAction {
                    port: IntOrString::String(probed.to_string()),
                    ..TCPSocketAction::default()
                }),
                period_seconds: Some(m.probes.period_seconds),
                failure_threshold: Some(failures),
                ..Probe::default()
            }
        }
    };
    Probe {
        timeout_seconds: Some(2),
        ..probe
    }
}

/// A probe of the sidecar's admin port, whose `/livez`, `/readyz` and `/upstream/livez` need no
/// credential and no TLS, whatever the client ports ask of their clients. `port` is the port's
/// name in the sidecar's own probes; another container's probe must give the number, since the
/// kubelet resolves a name among the probed container's ports only.
fn admin_probe(path: &str, port: IntOrString, period: i32, failures: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.to_string()),
            port,
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(period),
        failure_threshold: Some(failures),
        timeout_seconds: Some(2),
        ..Probe::default()
    }
}

/// The account Kubernetes gives pods that name none.
const DEFAULT_SERVICE_ACCOUNT: &str = "default";

/// The sidecar's admin port, by the name it declares.
fn admin_port() -> IntOrString {
    IntOrString::String("admin".to_string())
}

/// The preStop hook: `infergate-drain`, which asks the sidecar's admin port on loopback to drain
/// (`/drain`, accepted from loopback only). The sidecar turns readiness off, sends clients to
/// other pods (GOAWAY, `Connection: close`), keeps answering the calls that still arrive, and
/// answers after `model.preStopSleepSeconds`. Only then is the container stopped. Where the
/// sidecars route sequences, it then waits for the sequences held in this pod to end
/// (`--sequences`), within the grace period. An `exec`, not an `httpGet`: the kubelet's HTTP
/// hooks come from the node, which the sidecar does not let drain it. `hook` is where the binary
/// is in the container that runs it.
fn pre_stop_drain(spec: &InferenceServiceSpec, hook: &str) -> Option<Lifecycle> {
    let seconds = spec.model.pre_stop_sleep_seconds;
    let sequences = sequence_drain_seconds(spec);
    let mut command = vec![
        hook.to_string(),
        format!("--port={}", spec.sidecar.ports.admin),
        format!("--seconds={seconds}"),
    ];
    if sequences > 0 {
        command.push(format!("--sequences={sequences}"));
    }
    (seconds > 0 || sequences > 0).then(|| Lifecycle {
        pre_stop: Some(LifecycleHandler {
            exec: Some(ExecAction {
                command: Some(command),
            }),
            ..LifecycleHandler::default()
        }),
        ..Lifecycle::default()
    })
}

/// The hook's volume in a container: written by the sidecar, read-only everywhere else.
fn hook_mount(read_only: bool) -> VolumeMount {
    VolumeMount {
        name: HOOK_VOLUME.to_string(),
        mount_path: HOOK_DIR.to_string(),
        // `readOnly: false` is what the server stores as no field at all: leaving it out keeps
        // the stored Deployment equal to the rendered one (no rewrite on every reconcile).
        read_only: read_only.then_some(true),
        ..VolumeMount::default()
    }
}

/// Seconds of the grace period kept for the containers to stop once the hook has answered: the
/// model server's own shutdown and the sidecar's drain of the calls in flight.
const STOP_SECONDS: i64 = 10;

/// How long a terminating pod waits for the sequences it holds, where the sidecars route them:
/// what the grace period leaves after the preStop sleep and `STOP_SECONDS`.
fn sequence_drain_seconds(spec: &InferenceServiceSpec) -> i64 {
    if !spec.extensions.sequence.routed_by_sidecars() {
        return 0;
    }
    (spec.pod.termination_grace_period_seconds - spec.model.pre_stop_sleep_seconds - STOP_SECONDS)
        .max(0)
}

/// The sidecar container.
fn sidecar_container(isvc: &InferenceService, settings: &OperatorSettings) -> Container {
    let spec = &isvc.spec;
    let side = &spec.sidecar;
    let mut mounts = vec![
        VolumeMount {
            name: CONFIG_VOLUME.to_string(),
            mount_path: CONFIG_DIR.to_string(),
            read_only: Some(true),
            ..VolumeMount::default()
        },
        hook_mount(false),
    ];
    if control_key(spec).is_some() {
        mounts.push(VolumeMount {
            name: AUTH_VOLUME.to_string(),
            mount_path: AUTH_DIR.to_string(),
            read_only: Some(true),
            ..VolumeMount::default()
        });
    }
    if sidecar_token(isvc) {
        mounts.push(VolumeMount {
            name: TOKEN_VOLUME.to_string(),
            mount_path: TOKEN_DIR.to_string(),
            read_only: Some(true),
            ..VolumeMount::default()
        });
    }
    if spec.tls.is_some() {
        // Only the sidecar sees the key.
        mounts.push(VolumeMount {
            name: TLS_VOLUME.to_string(),
            mount_path: TLS_DIR.to_string(),
            read_only: Some(true),
            ..VolumeMount::default()
        });
    }
    if spec.extensions.system_shared_memory.enabled {
        mounts.push(shm_mount());
    }
    for (i, model) in spec.models.iter().enumerate() {
        if model.labels.is_some() {
            mounts.push(VolumeMount {
                name: format!("{LABELS_VOLUME_PREFIX}{i}"),
                mount_path: labels_dir(&model.name),
                read_only: Some(true),
                ..VolumeMount::default()
            });
        }
    }
    let resources = side
        .resources
        .clone()
        .unwrap_or_else(|| ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".to_string(), Quantity("100m".to_string())),
                ("memory".to_string(), Quantity("128Mi".to_string())),
            ])),
            ..ResourceRequirements::default()
        });
    Container {
        name: SIDECAR_CONTAINER.to_string(),
        image: Some(
            side.image
                .clone()
                .unwrap_or_else(|| settings.sidecar_image.clone()),
        ),
        image_pull_policy: side.image_pull_policy.map(|p| p.as_str().to_string()),
        args: Some(vec!["--config".to_string(), CONFIG_FILE.to_string()]),
        ports: Some(vec![
            tcp_port("http", side.ports.http),
            tcp_port("grpc", side.ports.grpc),
            tcp_port("metrics", side.ports.metrics),
            tcp_port("admin", side.ports.admin),
        ]),
        // A native sidecar is an init container that keeps running.
        restart_policy: (side.mode == SidecarMode::Native).then(|| "Always".to_string()),
        // Only the sidecar's own liveness: passes as soon as it serves (see the module docs).
        startup_probe: Some(admin_probe("/livez", admin_port(), 1, 30)),
        liveness_probe: Some(admin_probe("/livez", admin_port(), 10, 3)),
        // Follows the model server: no traffic until its models are discovered and it is ready.
        readiness_probe: Some(admin_probe("/readyz", admin_port(), 5, 2)),
        // A native sidecar is stopped after the model server and needs no hook of its own; a
        // regular one is stopped with it, so it waits on the same drain.
        lifecycle: match side.mode {
            SidecarMode::Native => None,
            SidecarMode::Regular => pre_stop_drain(spec, HOOK_IN_SIDECAR_IMAGE),
        },
        resources: Some(resources),
        security_context: Some(sidecar_security_context(side.run_as_user)),
        volume_mounts: Some(mounts),
        env: sidecar_env(isvc),
        ..Container::default()
    }
}

/// The sidecar's (and the activator's) container security context: the restricted profile, a
/// read-only root, as `run_as_user`.
pub(super) fn sidecar_security_context(run_as_user: i64) -> SecurityContext {
    SecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(run_as_user),
        read_only_root_filesystem: Some(true),
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".to_string()]),
            ..Capabilities::default()
        }),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".to_string(),
            ..SeccompProfile::default()
        }),
        ..SecurityContext::default()
    }
}

/// What the sidecar learns from the downward API: the pod's name for its spans, and its
/// address and namespace where it watches peers (sequence peers, a canary's).
fn sidecar_env(isvc: &InferenceService) -> Option<Vec<EnvVar>> {
    let mut env = Vec::new();
    if isvc.spec.sidecar.tracing.is_some() {
        env.extend(tracing_env());
    }
    if isvc.spec.sidecars_dial_peers() {
        env.push(field_env("POD_IP", "status.podIP"));
        env.push(field_env("POD_NAMESPACE", "metadata.namespace"));
    }
    (!env.is_empty()).then_some(env)
}

fn field_env(name: &str, field_path: &str) -> EnvVar {
    EnvVar {
        name: name.to_string(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: field_path.to_string(),
                ..ObjectFieldSelector::default()
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }
}

/// The pod's name on the sidecar's spans (the rest of their resource is in its configuration).
fn tracing_env() -> Vec<EnvVar> {
    vec![
        field_env("POD_NAME", "metadata.name"),
        EnvVar {
            name: "OTEL_RESOURCE_ATTRIBUTES".to_string(),
            value: Some("k8s.pod.name=$(POD_NAME)".to_string()),
            ..EnvVar::default()
        },
    ]
}

/// The model server container.
fn model_container(isvc: &InferenceService, model_storage: Option<&VolumeMount>) -> Container {
    let spec = &isvc.spec;
    let m = &spec.model;
    let mut ports = Vec::new();
    if m.listen == ModelListen::Pod {
        ports.extend(upstream_ports(spec));
    }
    ports.extend(m.ports.iter().cloned());
    let mut mounts = m.volume_mounts.clone();
    mounts.extend(model_storage.cloned());
    mounts.push(hook_mount(true));
    if spec.extensions.system_shared_memory.enabled {
        mounts.push(shm_mount());
    }
    let probe = |failures: i32| model_probe(spec, failures);
    Container {
        name: MODEL_CONTAINER.to_string(),
        image: Some(m.image.clone()),
        image_pull_policy: m.image_pull_policy.map(|p| p.as_str().to_string()),
        command: non_empty(&m.command),
        args: non_empty(&m.args),
        env: non_empty(&m.env),
        env_from: non_empty(&m.env_from),
        resources: m.resources.clone(),
        ports: non_empty(&ports),
        volume_mounts: non_empty(&mounts),
        security_context: Some(restricted_defaults(
            m.security_context.as_ref(),
            spec.pod.security_context.as_ref(),
            spec.sidecar.run_as_user,
        )),
        startup_probe: m
            .probes
            .enabled
            .then(|| probe(m.probes.startup_failure_threshold)),
        liveness_probe: m
            .probes
            .enabled
            .then(|| probe(m.probes.liveness_failure_threshold)),
        lifecycle: pre_stop_drain(spec, &format!("{HOOK_DIR}/infergate-drain")),
        ..Container::default()
    }
}
