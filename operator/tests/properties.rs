//! Invariants of the rendered objects over generated specs.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

mod common;

use common::{all_containers, pod};

use std::collections::{BTreeMap, BTreeSet};

use infergate_operator::admission;
use infergate_operator::crd::{
    CudaSharedMemory, DynamicBatching, Extensions, InferenceService, InferenceServiceSpec,
    LabelFiles, ModelContainer, ModelListen, ModelSettings, PodOverrides, Sequence,
    SequenceRouting, SidecarMode, SidecarSpec, SystemSharedMemory, Upstream,
};
use infergate_operator::render::{self, CONFIG_HASH_ANNOTATION, OperatorSettings};
use infergate_operator::validate::is_dns1035_label;
use k8s_openapi::api::core::v1::{Container, ContainerPort, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use proptest::prelude::*;

#[derive(Debug, Clone)]
struct Knobs {
    name: String,
    replicas: i32,
    mode: SidecarMode,
    shm: Option<&'static str>,
    gpu: bool,
    cuda: bool,
    sequence: Option<SequenceRouting>,
    grpc_port: i32,
    model_ports: usize,
    models: Vec<(String, bool)>,
    extra_containers: Vec<usize>,
    namespace: Option<String>,
}

fn knobs() -> impl Strategy<Value = Knobs> {
    (
        "[a-z]([a-z0-9-]{0,61}[a-z0-9])?",
        0..5i32,
        prop_oneof![Just(SidecarMode::Native), Just(SidecarMode::Regular)],
        prop::option::of(prop_oneof![
            Just("64Mi"),
            Just("1Gi"),
            Just("2.5Gi"),
            Just("1G")
        ]),
        any::<bool>(),
        any::<bool>(),
        prop::option::of(prop_oneof![
            Just(SequenceRouting::Stream),
            Just(SequenceRouting::ClientIp),
            Just(SequenceRouting::SingleReplica),
        ]),
        9000..10000i32,
        0..3usize,
        prop::collection::vec(("[a-z][a-z0-9_.-]{0,20}", any::<bool>()), 0..4),
        prop::collection::vec(0..3usize, 0..3),
        prop::option::of("[a-z][a-z0-9-]{0,20}"),
    )
        .prop_map(
            |(
                name,
                replicas,
                mode,
                shm,
                gpu,
                cuda,
                sequence,
                grpc_port,
                model_ports,
                models,
                extra_containers,
                namespace,
            )| {
                // What admission would reject is brought back into the valid space.
                let cuda = cuda && gpu;
                let replicas = if sequence == Some(SequenceRouting::SingleReplica) {
                    replicas.min(1)
                } else {
                    replicas
                };
                let mut seen = BTreeSet::new();
                let models = models
                    .into_iter()
                    .filter(|(n, _)| seen.insert(n.clone()))
                    .collect();
                Knobs {
                    name,
                    replicas,
                    mode,
                    shm,
                    gpu,
                    cuda,
                    sequence,
                    grpc_port,
                    model_ports,
                    models,
                    extra_containers,
                    namespace,
                }
            },
        )
}

fn port(name: String, number: i32) -> ContainerPort {
    ContainerPort {
        name: Some(name),
        container_port: number,
        ..ContainerPort::default()
    }
}

fn build_isvc(k: &Knobs) -> InferenceService {
    let mut limits = BTreeMap::from([("memory".to_string(), Quantity("4Gi".into()))]);
    if k.gpu {
        limits.insert("nvidia.com/gpu".into(), Quantity("1".into()));
    }
    let spec = InferenceServiceSpec {
        replicas: k.replicas,
        model: ModelContainer {
            image: "nvcr.io/nvidia/tritonserver:24.10-py3".into(),
            resources: Some(ResourceRequirements {
                limits: Some(limits),
                ..ResourceRequirements::default()
            }),
            ports: (0..k.model_ports)
                .map(|i| port(format!("model-{i}"), 20000 + i as i32))
                .collect(),
            pre_stop_sleep_seconds: 5,
            // Both ways of listening, from a knob that already varies.
            listen: if k.grpc_port % 2 == 0 {
                ModelListen::Pod
            } else {
                ModelListen::Loopback
            },
            ..ModelContainer::default()
        },
        upstream: Upstream {
            grpc_port: k.grpc_port,
            ..Upstream::default()
        },
        models: k
            .models
            .iter()
            .map(|(name, labels)| ModelSettings {
                name: name.clone(),
                max_batch_size: Some(4),
                labels: labels.then(|| LabelFiles {
                    config_map: format!("{name}-labels").replace(['_', '.'], "-"),
                    outputs: BTreeMap::from([("OUT".to_string(), "labels.txt".to_string())]),
                }),
                dynamic_batching: (!labels).then(|| DynamicBatching {
                    preferred_batch_size: vec![4],
                    ..DynamicBatching::default()
                }),
            })
            .collect(),
        sidecar: SidecarSpec {
            mode: k.mode,
            ..SidecarSpec::default()
        },
        extensions: Extensions {
            system_shared_memory: SystemSharedMemory {
                enabled: k.shm.is_some(),
                size: k.shm.map(String::from),
            },
            cuda_shared_memory: CudaSharedMemory { enabled: k.cuda },
            sequence: Sequence {
                enabled: k.sequence.is_some(),
                routing: k.sequence.unwrap_or_default(),
                client_ip_timeout_seconds: None,
            },
        },
        pod: PodOverrides {
            containers: k
                .extra_containers
                .iter()
                .enumerate()
                .map(|(i, ports)| Container {
                    name: format!("client-{i}"),
                    image: Some("busybox".into()),
                    ports: Some(
                        (0..*ports)
                            .map(|p| port(format!("c{i}-{p}"), 30000 + (i * 10 + p) as i32))
                            .collect(),
                    ),
                    ..Container::default()
                })
                .collect(),
            ..PodOverrides::default()
        },
        ..serde_json::from_value(serde_json::json!({"model": {"image": "x"}})).unwrap()
    };
    let mut isvc = InferenceService::new(&k.name, spec);
    isvc.metadata.uid = Some(common::UID.into());
    isvc.metadata.namespace = k.namespace.clone();
    isvc
}

fn is_dns1123_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// DNS-1123 subdomain as Kubernetes checks it: at most 253 characters in all, labels of
/// lowercase letters, digits and '-' separated by dots (no limit per label).
fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// IANA_SVC_NAME, what Kubernetes wants for port names.
fn is_port_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 15
        && s.bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && s.bytes().any(|c| c.is_ascii_lowercase())
        && !s.starts_with('-')
        && !s.ends_with('-')
        && !s.contains("--")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn rendered_objects_keep_their_invariants(k in knobs()) {
        let isvc = build_isvc(&k);
        // The generator stays inside what the API server would admit.
        let value = serde_json::to_value(&isvc).unwrap();
        if let Err(problems) = admission::admit(&value) {
            panic!("generated spec not admitted: {problems:#?}");
        }
        let children = render::build_children(&isvc, &OperatorSettings::default())
            .unwrap_or_else(|e| panic!("{e}"));
        let pod = pod(&children);
        let containers = all_containers(pod);
        let deploy = children.deployment.spec.as_ref().unwrap();
        let selector = deploy.selector.match_labels.clone().unwrap();

        // Selector ⊆ pod labels, and every selector is the same.
        let template_labels = deploy.template.metadata.as_ref().unwrap().labels.clone().unwrap();
        for (key, value) in &selector {
            prop_assert_eq!(template_labels.get(key), Some(value));
        }
        prop_assert_eq!(children.service.spec.as_ref().unwrap().selector.as_ref(), Some(&selector));
        if let Some(pdb) = &children.pdb {
            prop_assert_eq!(pdb.spec.as_ref().unwrap().selector.as_ref().unwrap().match_labels.as_ref(), Some(&selector));
        }
        prop_assert_eq!(selector, render::selector_labels(&isvc));

        // Container ports unique across containers, by number and by name; names valid.
        let mut numbers = BTreeSet::new();
        let mut port_names = BTreeSet::new();
        for c in &containers {
            for p in c.ports.iter().flatten() {
                prop_assert!(numbers.insert(p.container_port), "port {} twice", p.container_port);
                if let Some(n) = &p.name {
                    prop_assert!(is_port_name(n), "port name {n}");
                    prop_assert!(port_names.insert(n.clone()), "port name {n} twice");
                }
            }
        }

        // /dev/shm in every container iff shared memory is requested, from the one volume.
        let shm_volume = pod.volumes.iter().flatten().find(|v| v.name == render::SHM_VOLUME);
        prop_assert_eq!(shm_volume.is_some(), k.shm.is_some());
        for c in &containers {
            let shm_mounts: Vec<_> = c.volume_mounts.iter().flatten()
                .filter(|m| m.mount_path == "/dev/shm").collect();
            if k.shm.is_some() {
                prop_assert_eq!(shm_mounts.len(), 1, "{} lacks /dev/shm", c.name);
                prop_assert_eq!(&shm_mounts[0].name, render::SHM_VOLUME);
            } else {
                prop_assert!(shm_mounts.is_empty());
            }
        }
        prop_assert_eq!(pod.share_process_namespace == Some(true), k.cuda);

        // A probe's port given by name is one of the probed container's own: the kubelet
        // resolves names nowhere else, and a probe of another container's port must give the
        // number.
        for c in &containers {
            let own: BTreeSet<&str> = c.ports.iter().flatten().filter_map(|p| p.name.as_deref()).collect();
            for probe in [&c.startup_probe, &c.liveness_probe, &c.readiness_probe].into_iter().flatten() {
                let port = probe.http_get.as_ref().map(|h| &h.port)
                    .or(probe.tcp_socket.as_ref().map(|t| &t.port));
                if let Some(IntOrString::String(name)) = port {
                    prop_assert!(own.contains(name.as_str()), "{} probes port {} it does not declare", c.name, name);
                }
            }
        }

        // Every mount names a volume of the pod.
        let volume_names: BTreeSet<&str> = pod.volumes.iter().flatten().map(|v| v.name.as_str()).collect();
        for c in &containers {
            for m in c.volume_mounts.iter().flatten() {
                prop_assert!(volume_names.contains(m.name.as_str()), "mount of missing volume {}", m.name);
            }
        }

        // Owner reference on every child.
        for meta in children.metas() {
            let owners = meta.owner_references.as_ref().unwrap();
            prop_assert_eq!(owners.len(), 1);
            prop_assert_eq!(owners[0].controller, Some(true));
            prop_assert_eq!(owners[0].block_owner_deletion, Some(true));
            prop_assert_eq!(&owners[0].uid, common::UID);
            prop_assert_eq!(&meta.namespace, &k.namespace);
            for value in meta.labels.iter().flatten().map(|(_, v)| v) {
                prop_assert!(value.len() <= 63, "label value {value}");
            }
        }

        // Names Kubernetes will accept.
        prop_assert!(is_dns1123_subdomain(children.config_map.metadata.name.as_deref().unwrap()));
        prop_assert!(is_dns1035_label(children.deployment.metadata.name.as_deref().unwrap()));
        prop_assert!(is_dns1035_label(children.service.metadata.name.as_deref().unwrap()));
        for c in &containers {
            prop_assert!(is_dns1123_label(&c.name), "container {}", c.name);
        }
        for v in &volume_names {
            prop_assert!(is_dns1123_label(v), "volume {v}");
        }
        let mut container_names = BTreeSet::new();
        for c in &containers {
            prop_assert!(container_names.insert(c.name.clone()), "container {} twice", c.name);
        }

        // The sidecar: native or regular as asked; its startup probe is its own liveness, on the
        // admin port's health-only path (no credential, no TLS).
        let sidecar = containers.iter().find(|c| c.name == render::SIDECAR_CONTAINER).unwrap();
        let in_init = pod.init_containers.iter().flatten().any(|c| c.name == render::SIDECAR_CONTAINER);
        prop_assert_eq!(in_init, k.mode == SidecarMode::Native);
        let startup = sidecar.startup_probe.as_ref().unwrap().http_get.as_ref().unwrap();
        prop_assert_eq!(startup.path.as_deref(), Some("/livez"));
        prop_assert_eq!(&startup.port, &IntOrString::String("admin".into()));

        // The Service exposes exactly the sidecar's HTTP and gRPC ports.
        let service_ports: Vec<i32> = children.service.spec.as_ref().unwrap()
            .ports.iter().flatten().map(|p| p.port).collect();
        prop_assert_eq!(service_ports, vec![8000, 8001]);

        // A PDB from two replicas up.
        prop_assert_eq!(children.pdb.is_some(), k.replicas >= 2);

        // The config hash matches the ConfigMap, and rendering is deterministic.
        let data = &children.config_map.data.as_ref().unwrap()[render::CONFIG_KEY];
        let annotations = deploy.template.metadata.as_ref().unwrap().annotations.as_ref().unwrap();
        prop_assert_eq!(&annotations[CONFIG_HASH_ANNOTATION], &render::config_hash(data.as_bytes()));
        prop_assert_eq!(render::build_children(&isvc, &OperatorSettings::default()).unwrap(), children.clone());
    }
}
