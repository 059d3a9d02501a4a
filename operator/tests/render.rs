//! What one InferenceService renders into, for a matrix of specs: the important fields are
//! asserted one by one rather than compared with large golden files.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

mod common;

use common::{MINIMAL, UID, all_containers, pod, sidecar_config, volume, with_spec};
use infergate_operator::crd::{InferenceService, ModelListen};
use infergate_operator::render::{
    self, CONFIG_HASH_ANNOTATION, Children, DEFAULT_SIDECAR_IMAGE, KubernetesVersion,
    OperatorSettings, RenderError,
};
use k8s_openapi::api::core::v1::{Container, PodSpec, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

fn build(isvc: &InferenceService) -> Children {
    render::build_children(isvc, &OperatorSettings::default())
        .unwrap_or_else(|e| panic!("render failed: {e}"))
}

fn container<'a>(pod: &'a PodSpec, name: &str) -> &'a Container {
    all_containers(pod)
        .into_iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no container {name}"))
}

fn mounts(c: &Container) -> Vec<(&str, &str)> {
    c.volume_mounts
        .iter()
        .flatten()
        .map(|m| (m.name.as_str(), m.mount_path.as_str()))
        .collect()
}

fn http_path(probe: &Option<Probe>) -> (&str, &IntOrString) {
    let get = probe.as_ref().unwrap().http_get.as_ref().unwrap();
    (get.path.as_deref().unwrap(), &get.port)
}

#[test]
fn cpu_defaults() {
    let isvc = with_spec("resnet", MINIMAL);
    let children = build(&isvc);
    let pod = pod(&children);

    // Native sidecar: an init container that keeps running; the model is the only container.
    let init = pod.init_containers.as_ref().unwrap();
    assert_eq!(init.len(), 1);
    let sidecar = &init[0];
    assert_eq!(sidecar.name, "infergate");
    assert_eq!(sidecar.restart_policy.as_deref(), Some("Always"));
    assert_eq!(sidecar.image.as_deref(), Some(DEFAULT_SIDECAR_IMAGE));
    assert_eq!(
        sidecar.args.as_ref().unwrap(),
        &["--config", "/etc/infergate/config/config.yaml"]
    );
    let names: Vec<&str> = pod.containers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["model"]);

    // Probes: the sidecar's startup and liveness never depend on the model; all three are on
    // the admin port's health-only paths, which need no credential and no TLS.
    let admin = IntOrString::String("admin".into());
    assert_eq!(http_path(&sidecar.startup_probe), ("/livez", &admin));
    assert_eq!(http_path(&sidecar.liveness_probe), ("/livez", &admin));
    assert_eq!(http_path(&sidecar.readiness_probe), ("/readyz", &admin));
    // The model server listens on loopback (model.listen: Loopback): no port of it is declared,
    // and the kubelet, which cannot reach loopback, asks the sidecar whether it accepts
    // connections.
    let model = container(pod, "model");
    let startup = model.startup_probe.as_ref().unwrap();
    // By number: the kubelet resolves a port's name among the probed container's own ports, and
    // the admin port is the sidecar's.
    let admin_number = IntOrString::Int(8003);
    assert_eq!(
        http_path(&model.startup_probe),
        ("/upstream/livez", &admin_number)
    );
    assert_eq!(
        http_path(&model.liveness_probe),
        ("/upstream/livez", &admin_number)
    );
    assert_eq!(startup.period_seconds, Some(10));
    assert_eq!(startup.failure_threshold, Some(60));
    assert_eq!(
        model.liveness_probe.as_ref().unwrap().failure_threshold,
        Some(3)
    );
    assert!(model.readiness_probe.is_none());
    assert_eq!(model.ports, None);
    // The preStop hook runs the drain binary the sidecar copied into the shared hook volume,
    // which the model container mounts read-only; it reaches the admin port on loopback.
    let drain = model
        .lifecycle
        .as_ref()
        .unwrap()
        .pre_stop
        .as_ref()
        .unwrap()
        .exec
        .as_ref()
        .unwrap();
    assert_eq!(
        drain.command.as_deref().unwrap(),
        [
            "/var/run/infergate/hook/infergate-drain",
            "--port=8003",
            "--seconds=5"
        ]
    );
    assert!(
        model
            .volume_mounts
            .iter()
            .flatten()
            .any(|m| m.name == "infergate-hook"
                && m.mount_path == "/var/run/infergate/hook"
                && m.read_only == Some(true))
    );
    assert!(
        sidecar
            .volume_mounts
            .iter()
            .flatten()
            .any(|m| m.name == "infergate-hook" && m.read_only.is_none())
    );
    let config = sidecar_config(&children);
    assert_eq!(
        config.server.drain_hook_dir.as_deref(),
        Some("/var/run/infergate/hook")
    );
    // Drains are bounded by the grace period (60 s by default).
    assert_eq!(config.server.max_drain_seconds, 60);
    // Without a status token, the sidecar answers /status on loopback only.
    assert!(config.server.status_token_sha256.is_empty());

    // Sidecar hardening and default resources.
    let sc = sidecar.security_context.as_ref().unwrap();
    assert_eq!(sc.run_as_non_root, Some(true));
    assert_eq!(sc.run_as_user, Some(65532));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(
        sc.capabilities.as_ref().unwrap().drop.as_ref().unwrap(),
        &["ALL"]
    );
    let requests = sidecar
        .resources
        .as_ref()
        .unwrap()
        .requests
        .as_ref()
        .unwrap();
    assert_eq!(requests["cpu"].0, "100m");
    assert_eq!(requests["memory"].0, "128Mi");
    let side_ports: Vec<(&str, i32)> = sidecar
        .ports
        .iter()
        .flatten()
        .map(|p| (p.name.as_deref().unwrap(), p.container_port))
        .collect();
    assert_eq!(
        side_ports,
        [
            ("http", 8000),
            ("grpc", 8001),
            ("metrics", 8002),
            ("admin", 8003)
        ]
    );

    // No shared memory, no CUDA, one replica: no /dev/shm, no shared PID namespace, no PDB.
    assert!(
        all_containers(pod)
            .iter()
            .all(|c| mounts(c).iter().all(|(_, p)| *p != "/dev/shm"))
    );
    assert!(pod.share_process_namespace.is_none());
    assert!(children.pdb.is_none());
    assert_eq!(pod.termination_grace_period_seconds, Some(60));

    // The Service: the sidecar's client ports only.
    let svc = children.service.spec.as_ref().unwrap();
    let ports: Vec<(&str, i32, IntOrString, &str)> = svc
        .ports
        .iter()
        .flatten()
        .map(|p| {
            (
                p.name.as_deref().unwrap(),
                p.port,
                p.target_port.clone().unwrap(),
                p.app_protocol.as_deref().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        ports,
        [
            ("http", 8000, IntOrString::String("http".into()), "http"),
            (
                "grpc",
                8001,
                IntOrString::String("grpc".into()),
                "kubernetes.io/h2c"
            ),
        ]
    );
    assert_eq!(svc.type_.as_deref(), Some("ClusterIP"));
    assert!(svc.session_affinity.is_none());

    // The sidecar's configuration.
    let config = sidecar_config(&children);
    assert_eq!(config.server.admin_port, 8003);
    assert_eq!(config.server.http_port, 8000);
    assert_eq!(config.server.grpc_port, 8001);
    assert!(!config.server.allow_client_shm);
    assert_eq!(config.server.log_format, "json");
    // No workerThreads: the sidecar's own default.
    assert_eq!(config.server.worker_threads, 1);
    match &config.backend {
        infergate_config::BackendConfig::Upstream(up) => {
            assert_eq!(up.url, "grpc://127.0.0.1:9001");
            // No REST port named: every call over gRPC.
            assert_eq!(up.rest_url, None);
            assert!(up.models.is_empty());
            // No shared /dev/shm: the model server could not open a staging pool.
            assert_eq!(up.staging_shm_bytes, 0);
        }
        other => panic!("backend {other:?}"),
    }

    // Names and namespace.
    assert_eq!(
        children.config_map.metadata.name.as_deref(),
        Some("resnet-sidecar")
    );
    for meta in children.metas() {
        assert_eq!(meta.namespace.as_deref(), Some("ml"));
    }
    assert_eq!(
        render::service_urls(&isvc),
        infergate_operator::crd::ServiceUrls {
            rest: "http://resnet.ml.svc:8000".into(),
            grpc: "resnet.ml.svc:8001".into(),
        }
    );
    assert_eq!(
        render::selector_string(&isvc),
        "app.kubernetes.io/instance=resnet,app.kubernetes.io/name=infergate"
    );
}

#[test]
fn owner_references_and_labels() {
    let isvc = with_spec(
        "resnet",
        &format!(
            "  replicas: 3\n{MINIMAL}  pod:\n    labels:\n      team: vision\n      app.kubernetes.io/name: not-ours\n"
        ),
    );
    let children = build(&isvc);
    assert_eq!(children.metas().len(), 5); // ConfigMap, Deployment, Service, PDB, NetworkPolicy
    for meta in children.metas() {
        let owners = meta.owner_references.as_ref().unwrap();
        assert_eq!(owners.len(), 1);
        let o = &owners[0];
        assert_eq!(o.api_version, "infergate.dev/v1alpha1");
        assert_eq!(o.kind, "InferenceService");
        assert_eq!(o.name, "resnet");
        assert_eq!(o.uid, UID);
        assert_eq!(o.controller, Some(true));
        assert_eq!(o.block_owner_deletion, Some(true));
        let labels = meta.labels.as_ref().unwrap();
        assert_eq!(labels["app.kubernetes.io/name"], "infergate");
        assert_eq!(labels["app.kubernetes.io/instance"], "resnet");
        assert_eq!(labels["app.kubernetes.io/managed-by"], "infergate-operator");
    }
    let deploy = children.deployment.spec.as_ref().unwrap();
    let selector = deploy.selector.match_labels.as_ref().unwrap();
    assert_eq!(selector.len(), 2, "the selector is name + instance only");
    let template_labels = deploy
        .template
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .as_ref()
        .unwrap();
    // The user's pod labels are kept, but cannot override the selector's.
    assert_eq!(template_labels["team"], "vision");
    assert_eq!(template_labels["app.kubernetes.io/name"], "infergate");
    assert_eq!(
        children.service.spec.as_ref().unwrap().selector.as_ref(),
        Some(selector)
    );
    let pdb = children.pdb.as_ref().unwrap().spec.as_ref().unwrap();
    assert_eq!(pdb.max_unavailable, Some(IntOrString::Int(1)));
    assert_eq!(
        pdb.selector.as_ref().unwrap().match_labels.as_ref(),
        Some(selector)
    );

    // The selector does not depend on anything but the name.
    let other = with_spec(
        "resnet",
        "  replicas: 1\n  model:\n    image: other\n  sidecar:\n    mode: Regular\n  pod:\n    labels: {x: y}\n",
    );
    assert_eq!(
        build(&other).deployment.spec.unwrap().selector,
        deploy.selector
    );
}

#[test]
fn missing_uid_or_name_is_an_error() {
    let mut isvc = with_spec("resnet", MINIMAL);
    isvc.metadata.uid = None;
    assert_eq!(
        render::build_children(&isvc, &OperatorSettings::default()),
        Err(RenderError::MissingUid("resnet".into()))
    );
    isvc.metadata.name = None;
    assert_eq!(
        render::build_children(&isvc, &OperatorSettings::default()),
        Err(RenderError::MissingName)
    );
}

#[test]
fn regular_sidecar() {
    let isvc = with_spec(
        "resnet",
        &format!("{MINIMAL}  sidecar:\n    mode: Regular\n"),
    );
    let children = build(&isvc);
    let pod = pod(&children);
    assert!(pod.init_containers.is_none());
    let names: Vec<&str> = pod.containers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["model", "infergate"]);
    let sidecar = container(pod, "infergate");
    assert!(sidecar.restart_policy.is_none());
    assert!(sidecar.lifecycle.as_ref().unwrap().pre_stop.is_some());
    assert_eq!(http_path(&sidecar.startup_probe).0, "/livez");
}

#[test]
fn system_shared_memory() {
    let isvc = with_spec(
        "shm",
        &format!(
            "{MINIMAL}  extensions:\n    systemSharedMemory: {{enabled: true, size: 2Gi}}\n  pod:\n    containers:\n      - name: client\n        image: busybox\n"
        ),
    );
    let children = build(&isvc);
    let pod = pod(&children);
    let volume = volume(pod, "infergate-shm");
    let empty_dir = volume.empty_dir.as_ref().unwrap();
    assert_eq!(empty_dir.medium.as_deref(), Some("Memory"));
    assert_eq!(empty_dir.size_limit.as_ref().unwrap().0, "2Gi");
    let containers = all_containers(pod);
    assert_eq!(containers.len(), 3);
    for c in containers {
        assert!(
            mounts(c).contains(&("infergate-shm", "/dev/shm")),
            "{} lacks /dev/shm",
            c.name
        );
    }
    let config = sidecar_config(&children);
    assert!(config.server.allow_client_shm);
    // A quarter of the shared /dev/shm (2Gi), capped at 256 MiB, for the staging pool.
    match &config.backend {
        infergate_config::BackendConfig::Upstream(up) => {
            assert_eq!(up.staging_shm_bytes, 256 << 20)
        }
        other => panic!("not an upstream backend: {other:?}"),
    }
    assert!(pod.share_process_namespace.is_none());
}

#[test]
fn gpu_with_cuda_shared_memory() {
    let isvc = with_spec(
        "gpu",
        &format!(
            "{MINIMAL}    resources:\n      limits: {{nvidia.com/gpu: 1, memory: 16Gi}}\n  extensions:\n    cudaSharedMemory: {{enabled: true}}\n  pod:\n    runtimeClassName: nvidia\n    tolerations: [{{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}}]\n"
        ),
    );
    let children = build(&isvc);
    let pod = pod(&children);
    assert_eq!(pod.share_process_namespace, Some(true));
    assert_eq!(pod.runtime_class_name.as_deref(), Some("nvidia"));
    assert_eq!(pod.tolerations.as_ref().unwrap().len(), 1);
    let model = container(pod, "model");
    let limits = model.resources.as_ref().unwrap().limits.as_ref().unwrap();
    assert_eq!(limits["nvidia.com/gpu"].0, "1");
    // The sidecar needs no GPU (it forwards CUDA handles) and gets no /dev/shm without system shm.
    let sidecar = container(pod, "infergate");
    assert!(sidecar.resources.as_ref().unwrap().limits.is_none());
    assert!(
        pod.volumes
            .iter()
            .flatten()
            .all(|v| v.name != "infergate-shm")
    );
}

#[test]
fn gpu_without_cuda_shares_no_process_namespace() {
    let isvc = with_spec(
        "gpu",
        &format!("{MINIMAL}    resources:\n      limits: {{nvidia.com/gpu: 1}}\n"),
    );
    assert!(pod(&build(&isvc)).share_process_namespace.is_none());
}

#[test]
fn sequences_with_client_ip_routing() {
    let isvc = with_spec(
        "seq",
        &format!(
            "  replicas: 2\n{MINIMAL}  models:\n    - {{name: simple_sequence, maxBatchSize: 8}}\n  extensions:\n    sequence: {{enabled: true, routing: ClientIP, clientIpTimeoutSeconds: 600}}\n"
        ),
    );
    let children = build(&isvc);
    let svc = children.service.spec.as_ref().unwrap();
    assert_eq!(svc.session_affinity.as_deref(), Some("ClientIP"));
    assert_eq!(
        svc.session_affinity_config
            .as_ref()
            .unwrap()
            .client_ip
            .as_ref()
            .unwrap()
            .timeout_seconds,
        Some(600)
    );
    assert!(children.pdb.is_some());
    match sidecar_config(&children).backend {
        infergate_config::BackendConfig::Upstream(up) => {
            assert_eq!(up.models.len(), 1);
            assert_eq!(up.models[0].name, "simple_sequence");
            assert_eq!(up.models[0].max_batch_size, Some(8));
        }
        other => panic!("backend {other:?}"),
    }

    // Stream routing leaves the Service alone.
    let stream = with_spec(
        "seq",
        &format!("  replicas: 2\n{MINIMAL}  extensions:\n    sequence: {{enabled: true}}\n"),
    );
    assert!(
        build(&stream)
            .service
            .spec
            .unwrap()
            .session_affinity
            .is_none()
    );
}

#[test]
fn dynamic_batching_reaches_the_sidecar_as_the_models_configuration() {
    let isvc = with_spec(
        "batched",
        &format!(
            "{MINIMAL}  models:\n    - name: scorer\n      maxBatchSize: 16\n      dynamicBatching: {{preferredBatchSize: [8, 16], maxQueueDelayMicroseconds: 2000}}\n    - {{name: plain}}\n"
        ),
    );
    match sidecar_config(&build(&isvc)).backend {
        infergate_config::BackendConfig::Upstream(up) => {
            assert_eq!(up.models[0].max_batch_size, Some(16));
            assert_eq!(
                up.models[0].config,
                Some(serde_json::json!({"dynamic_batching": {
                    "preferred_batch_size": [8, 16],
                    "max_queue_delay_microseconds": 2000,
                    "preserve_ordering": false,
                }}))
            );
            assert_eq!(
                up.models[1].config, None,
                "no batching asked, none rendered"
            );
        }
        other => panic!("backend {other:?}"),
    }
}

#[test]
fn classification_labels_from_a_config_map() {
    let isvc = with_spec(
        "dense",
        &format!(
            "{MINIMAL}  models:\n    - name: densenet_onnx\n      labels:\n        configMap: densenet-labels\n        outputs: {{fc6_1: densenet_labels.txt, fc6_2: densenet_labels.txt}}\n"
        ),
    );
    let children = build(&isvc);
    let pod = pod(&children);
    let volume = volume(pod, "infergate-labels-0");
    let cm = volume.config_map.as_ref().unwrap();
    assert_eq!(cm.name, "densenet-labels");
    let items = cm.items.as_ref().unwrap();
    assert_eq!(
        items.len(),
        1,
        "one item per key, even when two outputs share it"
    );
    assert_eq!(items[0].key, "densenet_labels.txt");
    let sidecar = container(pod, "infergate");
    assert!(
        mounts(sidecar).contains(&("infergate-labels-0", "/etc/infergate/labels/densenet_onnx"))
    );
    // Only the sidecar needs the labels; the model container mounts only the hook volume.
    assert_eq!(
        mounts(container(pod, "model")),
        [("infergate-hook", "/var/run/infergate/hook")]
    );
    match sidecar_config(&children).backend {
        infergate_config::BackendConfig::Upstream(up) => {
            assert_eq!(
                up.models[0].labels["fc6_1"],
                "/etc/infergate/labels/densenet_onnx/densenet_labels.txt"
            );
        }
        other => panic!("backend {other:?}"),
    }
}

#[test]
fn config_hash_follows_the_configuration() {
    let hash = |isvc: &InferenceService| {
        let children = build(isvc);
        let annotations = children
            .deployment
            .spec
            .as_ref()
            .unwrap()
            .template
            .metadata
            .as_ref()
            .unwrap()
            .annotations
            .clone()
            .unwrap();
        let data = &children.config_map.data.as_ref().unwrap()["config.yaml"];
        assert_eq!(
            annotations[CONFIG_HASH_ANNOTATION],
            render::config_hash(data.as_bytes())
        );
        annotations[CONFIG_HASH_ANNOTATION].clone()
    };
    let base = hash(&with_spec("a", MINIMAL));
    // Replicas and the model image do not change the sidecar's configuration: no extra rollout.
    assert_eq!(
        base,
        hash(&with_spec(
            "a",
            "  replicas: 4\n  model:\n    image: other\n"
        ))
    );
    // The log level does.
    assert_ne!(
        base,
        hash(&with_spec(
            "a",
            &format!("{MINIMAL}  sidecar:\n    logLevel: debug\n")
        ))
    );
}

#[test]
fn sidecar_image_from_spec_or_settings() {
    let settings = OperatorSettings {
        sidecar_image: "registry.local/infergate-sidecar:1".into(),
        ..OperatorSettings::default()
    };
    let image = |isvc: &InferenceService| {
        let children = render::build_children(isvc, &settings).unwrap();
        container(pod(&children), "infergate")
            .image
            .clone()
            .unwrap()
    };
    assert_eq!(
        image(&with_spec("a", MINIMAL)),
        "registry.local/infergate-sidecar:1"
    );
    assert_eq!(
        image(&with_spec(
            "a",
            &format!("{MINIMAL}  sidecar:\n    image: mine:2\n    imagePullPolicy: Always\n")
        )),
        "mine:2"
    );
}

#[test]
fn service_type_and_annotations() {
    let isvc = with_spec(
        "lb",
        &format!(
            "{MINIMAL}  service:\n    type: LoadBalancer\n    annotations: {{service.beta.kubernetes.io/aws-load-balancer-internal: \"true\"}}\n"
        ),
    );
    let svc = build(&isvc).service;
    assert_eq!(svc.spec.unwrap().type_.as_deref(), Some("LoadBalancer"));
    assert!(
        svc.metadata
            .annotations
            .unwrap()
            .contains_key("service.beta.kubernetes.io/aws-load-balancer-internal")
    );
}

#[test]
fn drain_hooks_on_every_supported_kubernetes() {
    // The hook is an exec of the drain binary, which Kubernetes 1.29 has too (it lacks the
    // sleep action): a regular-mode sidecar and the model server both wait on the drain, each
    // running the binary where its container has it.
    let isvc = with_spec("old", &format!("{MINIMAL}  sidecar:\n    mode: Regular\n"));
    for version in ["v1.29.4", "1.30"] {
        let settings = OperatorSettings {
            kubernetes_version: KubernetesVersion::parse(version).unwrap(),
            ..OperatorSettings::default()
        };
        let children = render::build_children(&isvc, &settings).unwrap();
        let hooks = drain_commands(&children);
        assert_eq!(
            hooks,
            [
                (
                    "model".to_string(),
                    "/var/run/infergate/hook/infergate-drain --port=8003 --seconds=5".to_string()
                ),
                (
                    "infergate".to_string(),
                    "/usr/local/bin/infergate-drain --port=8003 --seconds=5".to_string()
                ),
            ],
            "on {version}"
        );
    }
    assert!(KubernetesVersion::parse("1.28").is_err());
    assert!(KubernetesVersion::parse("one").is_err());
}

#[test]
fn model_probes_can_be_turned_off() {
    let isvc = with_spec(
        "p",
        &format!("{MINIMAL}    probes: {{enabled: false}}\n    preStopSleepSeconds: 0\n"),
    );
    let children = build(&isvc);
    let model = container(pod(&children), "model");
    assert!(model.startup_probe.is_none());
    assert!(model.liveness_probe.is_none());
    assert!(model.lifecycle.is_none());
}

#[test]
fn a_rest_port_sends_small_calls_over_rest() {
    let isvc = with_spec(
        "triton",
        &format!("{MINIMAL}  upstream:\n    grpcPort: 9001\n    restPort: 9000\n"),
    );
    let children = build(&isvc);
    match &sidecar_config(&children).backend {
        infergate_config::BackendConfig::Upstream(up) => {
            assert_eq!(up.url, "grpc://127.0.0.1:9001");
            assert_eq!(up.rest_url.as_deref(), Some("http://127.0.0.1:9000"));
        }
        other => panic!("backend {other:?}"),
    }
    // On loopback (the default) neither port is declared; listening on the pod's address, both.
    assert_eq!(container(pod(&children), "model").ports, None);
    let mut on_pod = isvc.clone();
    on_pod.spec.model.listen = ModelListen::Pod;
    let children = build(&on_pod);
    let model = container(pod(&children), "model");
    let ports: Vec<(&str, i32)> = model
        .ports
        .iter()
        .flatten()
        .map(|p| (p.name.as_deref().unwrap_or(""), p.container_port))
        .collect();
    assert_eq!(ports, [("upstream-grpc", 9001), ("upstream-rest", 9000)]);

    // Admission refuses this (a CEL rule); rendering refuses it too, for resources that got past
    // an API server without the rules.
    let mut clash = isvc.clone();
    clash.spec.upstream.rest_port = Some(8000);
    match render::build_children(&clash, &OperatorSettings::default()) {
        Err(RenderError::Invalid { problems, .. }) => assert!(
            problems
                .join("\n")
                .contains("port 8000 of upstream.restPort is already used by sidecar.ports.http"),
            "{problems:?}"
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn worker_threads_reach_the_sidecar_configuration() {
    let isvc = with_spec(
        "triton",
        &format!("{MINIMAL}  sidecar:\n    workerThreads: 0\n"),
    );
    assert_eq!(sidecar_config(&build(&isvc)).server.worker_threads, 0);
}

#[test]
fn the_connection_age_reaches_the_sidecar_configuration() {
    let isvc = with_spec(
        "triton",
        &format!(
            "{MINIMAL}  sidecar:\n    maxConnectionAgeSeconds: 60\n    maxConnectionAgeGraceSeconds: 30\n"
        ),
    );
    let limits = sidecar_config(&build(&isvc)).limits;
    assert_eq!(limits.max_connection_age_seconds, 60);
    assert_eq!(limits.max_connection_age_grace_seconds, 30);
    // Unset: the sidecar's own default.
    let plain = sidecar_config(&build(&with_spec("triton", MINIMAL))).limits;
    assert_eq!(
        plain.max_connection_age_seconds,
        infergate_config::DEFAULT_MAX_CONNECTION_AGE_SECONDS
    );
}

#[test]
fn pod_level_problems_are_reported() {
    let cases = [
        (
            "  pod:\n    containers: [{name: model, image: x}]\n".to_string(),
            "is reserved",
        ),
        (
            "  pod:\n    containers: [{name: c, image: x, ports: [{containerPort: 8000}]}]\n"
                .to_string(),
            "port 8000 of pod.containers[0].ports[0] is already used by sidecar.ports.http",
        ),
        (
            "  pod:\n    containers: [{name: c, image: x, ports: [{name: http, containerPort: 7000}]}]\n"
                .to_string(),
            "port name \"http\"",
        ),
        (
            "  pod:\n    volumes: [{name: infergate-x, emptyDir: {}}]\n".to_string(),
            "are reserved",
        ),
        (
            "  extensions:\n    systemSharedMemory: {enabled: true, size: 1Gi}\n  pod:\n    containers: [{name: c, image: x, volumeMounts: [{name: v, mountPath: /dev/shm}]}]\n"
                .to_string(),
            "mounts /dev/shm",
        ),
    ];
    for (extra, want) in cases {
        let isvc = with_spec("bad", &format!("{MINIMAL}{extra}"));
        match render::build_children(&isvc, &OperatorSettings::default()) {
            Err(RenderError::Invalid { problems, .. }) => {
                let text = problems.join("\n");
                assert!(text.contains(want), "wanted {want:?} in {text}");
            }
            other => panic!("{extra}: {other:?}"),
        }
    }
}

#[test]
fn every_example_renders() {
    for (name, text) in common::example_files() {
        let docs = infergate_operator::input::parse(&text)
            .unwrap_or_else(|e| panic!("examples/{name}: {}", e.join("\n")));
        for doc in docs {
            if let infergate_operator::input::Document::InferenceService(mut isvc) = doc {
                isvc.metadata.uid = Some(UID.into());
                let children = render::build_children(&isvc, &OperatorSettings::default())
                    .unwrap_or_else(|e| panic!("examples/{name}: {e}"));
                sidecar_config(&children);
                let values = children.to_values().unwrap();
                assert!(values.len() >= 3);
                for v in &values {
                    assert!(
                        v["apiVersion"].is_string() && v["kind"].is_string(),
                        "{name}"
                    );
                }
                // Rendering is deterministic.
                assert_eq!(
                    render::build_children(&isvc, &OperatorSettings::default()).unwrap(),
                    children
                );
            }
        }
    }
}

/// The Deployment's strategy: (type, maxSurge, maxUnavailable).
fn rollout_of(spec: &str) -> (String, Option<IntOrString>, Option<IntOrString>) {
    let children = build(&with_spec("roll", spec));
    let strategy = children.deployment.spec.unwrap().strategy.unwrap();
    let rolling = strategy.rolling_update.unwrap_or_default();
    (
        strategy.type_.unwrap(),
        rolling.max_surge,
        rolling.max_unavailable,
    )
}

/// A rolling update with these counts.
fn rolling(surge: i32, unavailable: i32) -> (String, Option<IntOrString>, Option<IntOrString>) {
    (
        "RollingUpdate".into(),
        Some(IntOrString::Int(surge)),
        Some(IntOrString::Int(unavailable)),
    )
}

#[test]
fn a_gpu_model_rolls_without_needing_a_spare_gpu() {
    let pct = |s: &str| Some(IntOrString::String(s.into()));
    // No GPU: Kubernetes' own default, an extra pod first.
    assert_eq!(
        rollout_of(MINIMAL),
        ("RollingUpdate".into(), pct("25%"), pct("25%"))
    );
    // A GPU (or a MIG slice): the old pod goes first.
    for resource in ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "amd.com/gpu"] {
        let spec = format!("{MINIMAL}    resources:\n      limits: {{{resource}: 1}}\n");
        assert_eq!(rollout_of(&spec), rolling(0, 1), "{resource}");
    }
    // What the user sets wins; Recreate has no rolling limits.
    let gpu = format!("{MINIMAL}    resources:\n      limits: {{nvidia.com/gpu: 1}}\n");
    let spec = format!("{gpu}  rollout:\n    maxSurge: 1\n    maxUnavailable: 0\n");
    assert_eq!(rollout_of(&spec), rolling(1, 0));
    let spec = format!("{MINIMAL}  rollout:\n    strategy: Recreate\n");
    assert_eq!(rollout_of(&spec), ("Recreate".into(), None, None));
}

#[test]
fn a_rollout_that_could_never_replace_a_pod_is_refused() {
    let gpu = format!("{MINIMAL}    resources:\n      limits: {{nvidia.com/gpu: 1}}\n");
    // With a GPU, maxSurge defaults to 0: maxUnavailable 0 as well leaves nothing to move.
    let never = "maxSurge and maxUnavailable are both 0";
    // Neither a count nor a percentage: the schema cannot tell (int-or-string), the render does.
    let malformed = "must be a count of 0 or more or a percentage";
    for (spec, problem) in [
        (format!("{gpu}  rollout:\n    maxUnavailable: 0\n"), never),
        (
            format!("{MINIMAL}  rollout:\n    maxSurge: 0%\n    maxUnavailable: 0\n"),
            never,
        ),
        (
            format!("{MINIMAL}  rollout:\n    maxSurge: half\n"),
            malformed,
        ),
        (
            format!("{MINIMAL}  rollout:\n    maxUnavailable: -1\n"),
            malformed,
        ),
        (
            format!("{MINIMAL}  rollout:\n    maxUnavailable: '%'\n"),
            malformed,
        ),
    ] {
        let isvc = with_spec("roll", &spec);
        match render::build_children(&isvc, &OperatorSettings::default()) {
            Err(RenderError::Invalid { problems, .. }) => {
                assert!(problems.iter().any(|p| p.contains(problem)), "{problems:?}")
            }
            other => panic!("{spec}: {other:?}"),
        }
    }
}

#[test]
fn a_rest_only_upstream_is_reached_and_probed_over_rest() {
    let isvc = with_spec(
        "svc",
        &format!("{MINIMAL}  upstream:\n    protocol: rest\n    restPort: 8080\n"),
    );
    // On loopback the sidecar is asked, and it connects to the REST port it was given.
    let on_loopback = build(&isvc);
    let model = container(pod(&on_loopback), "model");
    let admin = IntOrString::Int(8003);
    assert_eq!(http_path(&model.startup_probe), ("/upstream/livez", &admin));
    let mut isvc = isvc;
    isvc.spec.model.listen = ModelListen::Pod;
    let children = build(&isvc);
    let config = sidecar_config(&children);
    match &config.backend {
        infergate_config::BackendConfig::Upstream(u) => {
            assert_eq!(u.url, "http://127.0.0.1:8080");
            assert_eq!(u.rest_url, None);
        }
        other => panic!("not an upstream: {other:?}"),
    }
    let model = container(pod(&children), "model");
    let names: Vec<_> = model
        .ports
        .iter()
        .flatten()
        .map(|p| (p.name.as_deref().unwrap(), p.container_port))
        .collect();
    assert_eq!(names, [("upstream-rest", 8080)]);
    let probe = model
        .startup_probe
        .as_ref()
        .unwrap()
        .tcp_socket
        .as_ref()
        .unwrap();
    assert_eq!(probe.port, IntOrString::String("upstream-rest".into()));

    // gRPC with REST beside it keeps gRPC as the url.
    let both = with_spec(
        "svc",
        &format!("{MINIMAL}  upstream:\n    restPort: 9000\n"),
    );
    match &sidecar_config(&build(&both)).backend {
        infergate_config::BackendConfig::Upstream(u) => {
            assert_eq!(u.url, "grpc://127.0.0.1:9001");
            assert_eq!(u.rest_url.as_deref(), Some("http://127.0.0.1:9000"));
        }
        other => panic!("not an upstream: {other:?}"),
    }
}

#[test]
fn tracing_reaches_the_sidecar_configuration_and_names_the_pod() {
    let isvc = with_spec(
        "resnet",
        &format!(
            "{MINIMAL}  sidecar:\n    tracing:\n      endpoint: otel-collector.observability:4318/v1/traces\n      level: TENSORS\n      rate: 10\n      resourceAttributes: {{service.name: fraud}}\n"
        ),
    );
    let children = build(&isvc);
    let config = sidecar_config(&children);
    assert_eq!(
        config.server.trace_config,
        [
            "mode=opentelemetry",
            "level=TIMESTAMPS",
            "level=TENSORS",
            "rate=10",
            "opentelemetry,url=otel-collector.observability:4318/v1/traces",
            "opentelemetry,resource=infergate.inference_service=resnet",
            "opentelemetry,resource=k8s.namespace.name=ml",
            "opentelemetry,resource=service.name=fraud",
        ]
    );
    // What the sidecar will read: a valid trace configuration.
    let trace = config.server.trace().unwrap();
    assert_eq!(trace.rate, 10);
    let sidecar = all_containers(pod(&children))
        .into_iter()
        .find(|c| c.name == "infergate")
        .unwrap();
    let env = sidecar.env.as_ref().unwrap();
    assert_eq!(env[0].name, "POD_NAME");
    assert_eq!(
        env[0]
            .value_from
            .as_ref()
            .unwrap()
            .field_ref
            .as_ref()
            .unwrap()
            .field_path,
        "metadata.name"
    );
    assert_eq!(env[1].value.as_deref(), Some("k8s.pod.name=$(POD_NAME)"));

    // Without tracing: none of it.
    let plain = build(&with_spec("triton", MINIMAL));
    assert!(sidecar_config(&plain).server.trace_config.is_empty());
}

#[test]
fn sidecar_routing_gives_a_headless_service_and_only_endpointslice_access() {
    let spec = |pod: &str| {
        format!(
            "  replicas: 3\n{MINIMAL}  models:\n    - {{name: simple_sequence}}\n  extensions:\n    sequence: {{enabled: true, routing: Sidecar}}\n{pod}"
        )
    };
    let children = build(&with_spec("seq", &spec("")));
    let peers = children.peers.as_ref().expect("peer objects");

    let headless = peers.service.spec.as_ref().unwrap();
    assert_eq!(peers.service.metadata.name.as_deref(), Some("seq-peers"));
    assert_eq!(headless.cluster_ip.as_deref(), Some("None"));
    assert_eq!(
        headless.selector,
        children.service.spec.as_ref().unwrap().selector
    );
    let ports = headless.ports.as_ref().unwrap();
    assert_eq!(ports.len(), 1);
    assert_eq!(ports[0].name.as_deref(), Some("grpc"));
    // The client Service pins nobody: the sidecars route.
    assert!(
        children
            .service
            .spec
            .as_ref()
            .unwrap()
            .session_affinity
            .is_none()
    );

    let rules = peers.role.rules.as_ref().unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(
        rules[0].api_groups.as_deref(),
        Some(&["discovery.k8s.io".to_string()][..])
    );
    assert_eq!(
        rules[0].resources.as_deref(),
        Some(&["endpointslices".to_string()][..])
    );
    assert_eq!(rules[0].verbs, ["list", "watch"]);
    assert_eq!(peers.role_binding.role_ref.name, "seq-sequence-peers");
    let subject = &peers.role_binding.subjects.as_ref().unwrap()[0];
    assert_eq!(
        (subject.kind.as_str(), subject.name.as_str()),
        ("ServiceAccount", "seq-sequence-peers")
    );
    assert_eq!(subject.namespace.as_deref(), Some("ml"));
    assert!(peers.service_account.is_some());
    assert_eq!(
        pod(&children).service_account_name.as_deref(),
        Some("seq-sequence-peers")
    );

    // The sidecar watches the headless Service, knowing its address and namespace.
    let config = sidecar_config(&children);
    assert_eq!(
        config.server.sequence_peers_service.as_deref(),
        Some("seq-peers")
    );
    // Only the slices of the InferenceService's own Service are read.
    assert_eq!(
        config.server.sequence_peers_labels.as_deref(),
        Some(
            "app.kubernetes.io/instance=seq,app.kubernetes.io/managed-by=infergate-operator,app.kubernetes.io/name=infergate"
        )
    );
    config.validate(&[]).unwrap();
    let sidecar = all_containers(pod(&children))
        .into_iter()
        .find(|c| c.name == "infergate")
        .unwrap();
    let env: Vec<(&str, &str)> = sidecar
        .env
        .as_ref()
        .unwrap()
        .iter()
        .map(|e| {
            let field = e.value_from.as_ref().unwrap().field_ref.as_ref().unwrap();
            (e.name.as_str(), field.field_path.as_str())
        })
        .collect();
    assert_eq!(
        env,
        [
            ("POD_IP", "status.podIP"),
            ("POD_NAMESPACE", "metadata.namespace")
        ]
    );

    // The pods' own service account is bound instead of a new one.
    let own = build(&with_spec(
        "seq",
        &spec("  pod:\n    serviceAccountName: models\n"),
    ));
    let peers = own.peers.as_ref().unwrap();
    assert!(peers.service_account.is_none());
    assert_eq!(
        peers.role_binding.subjects.as_ref().unwrap()[0].name,
        "models"
    );
    assert_eq!(pod(&own).service_account_name.as_deref(), Some("models"));

    // Other routings have none of it.
    let stream = build(&with_spec(
        "seq",
        &format!("  replicas: 2\n{MINIMAL}  extensions:\n    sequence: {{enabled: true}}\n"),
    ));
    assert!(stream.peers.is_none());
    assert!(
        sidecar_config(&stream)
            .server
            .sequence_peers_service
            .is_none()
    );
    // The namespace's default account, named, in both fields: a template's deprecated
    // `serviceAccount` would otherwise keep the peers' account after routing changes.
    let stream_pod = pod(&stream);
    assert_eq!(stream_pod.service_account_name.as_deref(), Some("default"));
    assert_eq!(stream_pod.service_account.as_deref(), Some("default"));
}

/// The preStop commands of every container that has one, each as one line.
fn drain_commands(children: &render::Children) -> Vec<(String, String)> {
    all_containers(pod(children))
        .into_iter()
        .filter_map(|c| {
            let hook = c.lifecycle.as_ref()?.pre_stop.as_ref()?;
            let command = hook.exec.as_ref()?.command.as_ref()?.join(" ");
            Some((c.name.clone(), command))
        })
        .collect()
}

/// The drain's arguments of every container's preStop hook (without the binary's path).
fn drain_paths(children: &render::Children) -> Vec<(String, String)> {
    drain_commands(children)
        .into_iter()
        .map(|(name, command)| {
            let args = command.split_once(' ').map_or("", |(_, a)| a);
            (name, args.to_string())
        })
        .collect()
}

#[test]
fn with_sidecar_routing_a_terminating_pod_waits_for_its_sequences() {
    let spec = |routing: &str, more: &str| {
        with_spec(
            "seq",
            &format!(
                "  replicas: 3\n{MINIMAL}  models:\n    - {{name: simple_sequence}}\n  extensions:\n    sequence: {{enabled: true, routing: {routing}}}\n{more}"
            ),
        )
    };
    // The default grace period (60 s) less the preStop sleep (5 s) and 10 s to stop.
    let routed = build(&spec("Sidecar", ""));
    let want = "--port=8003 --seconds=5 --sequences=45".to_string();
    assert_eq!(drain_paths(&routed), [("model".to_string(), want.clone())]);
    let regular = build(&spec("Sidecar", "  sidecar:\n    mode: Regular\n"));
    assert_eq!(drain_paths(&regular).len(), 2);
    assert!(drain_paths(&regular).iter().all(|(_, p)| *p == want));

    let longer = build(&spec(
        "Sidecar",
        "  pod:\n    terminationGracePeriodSeconds: 90\n",
    ));
    assert_eq!(
        drain_paths(&longer)[0].1,
        "--port=8003 --seconds=5 --sequences=75"
    );
    // A grace period too short for it leaves only the sleep.
    let short = build(&spec(
        "Sidecar",
        "  pod:\n    terminationGracePeriodSeconds: 12\n",
    ));
    assert_eq!(drain_paths(&short)[0].1, "--port=8003 --seconds=5");
    // No sleep: the hook still waits for the sequences.
    let no_sleep = build(&with_spec(
        "seq",
        &format!(
            "  replicas: 3\n{}  models:\n    - {{name: simple_sequence}}\n  extensions:\n    sequence: {{enabled: true, routing: Sidecar}}\n",
            MINIMAL.replace("  model:\n", "  model:\n    preStopSleepSeconds: 0\n")
        ),
    ));
    assert_eq!(
        drain_paths(&no_sleep)[0].1,
        "--port=8003 --seconds=0 --sequences=50"
    );

    // Other routings do not wait: their sequences are not found on other replicas anyway.
    let client_ip = build(&spec("ClientIP", ""));
    assert_eq!(drain_paths(&client_ip)[0].1, "--port=8003 --seconds=5");
}

#[test]
fn sidecar_routing_needs_room_for_the_peers_service_name() {
    let name = "a".repeat(60);
    let isvc = with_spec(
        &name,
        &format!("{MINIMAL}  extensions:\n    sequence: {{enabled: true, routing: Sidecar}}\n"),
    );
    let err = render::build_children(&isvc, &OperatorSettings::default()).unwrap_err();
    assert!(
        err.to_string()
            .contains("too long for extensions.sequence.routing Sidecar"),
        "{err}"
    );
}

#[test]
fn the_operators_status_token_reaches_the_sidecar_as_its_digest_only() {
    let token =
        infergate_operator::status_token::StatusToken::new("0123456789abcdef0123456789abcdef")
            .unwrap();
    let settings = OperatorSettings {
        status_token_sha256: Some(token.sha256_hex()),
        ..OperatorSettings::default()
    };
    let children = render::build_children(&with_spec("tok", MINIMAL), &settings).unwrap();
    let config = sidecar_config(&children);
    assert_eq!(config.server.status_token_sha256, [token.sha256_hex()]);
    // The token itself appears nowhere in what is rendered.
    let everything = format!("{children:?}");
    assert!(!everything.contains("0123456789abcdef0123456789abcdef"));
}

#[test]
fn the_operators_client_ca_reaches_the_sidecar_beside_its_configuration() {
    let ca = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    let settings = OperatorSettings {
        status_client_ca: Some(ca.to_string()),
        ..OperatorSettings::default()
    };
    let children = render::build_children(&with_spec("ca", MINIMAL), &settings).unwrap();
    let config = sidecar_config(&children);
    assert_eq!(
        config.server.status_client_ca.as_deref(),
        Some("/etc/infergate/config/status-client-ca.crt")
    );
    let data = children.config_map.data.as_ref().unwrap();
    assert_eq!(data["status-client-ca.crt"], ca);
    // The file is in the mounted ConfigMap's directory, mounted whole (a new CA reaches the pod).
    let pod = common::pod(&children);
    let sidecar = common::all_containers(pod)
        .into_iter()
        .find(|c| c.name == "infergate")
        .unwrap();
    let mount = sidecar
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.mount_path == "/etc/infergate/config")
        .unwrap();
    assert!(mount.sub_path.is_none());
    // Without one, neither the key nor the setting.
    let plain =
        render::build_children(&with_spec("ca", MINIMAL), &OperatorSettings::default()).unwrap();
    assert!(sidecar_config(&plain).server.status_client_ca.is_none());
    assert!(
        !plain
            .config_map
            .data
            .as_ref()
            .unwrap()
            .contains_key("status-client-ca.crt")
    );
}
