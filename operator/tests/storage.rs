//! The model from `spec.model.storageUri`: the init container that fetches it, the volumes, the
//! model container's mount, the user's init containers and topology spread, and the checks.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

mod common;

use common::{MINIMAL, pod, volume, with_spec};
use infergate_operator::crd::InferenceService;
use infergate_operator::render::{self, Children, OperatorSettings, RenderError};
use k8s_openapi::api::core::v1::Container;

fn build(isvc: &InferenceService) -> Children {
    render::build_children(isvc, &OperatorSettings::default())
        .unwrap_or_else(|e| panic!("render failed: {e}"))
}

fn problems(isvc: &InferenceService) -> Vec<String> {
    match render::build_children(isvc, &OperatorSettings::default()) {
        Err(RenderError::Invalid { problems, .. }) => problems,
        other => panic!("expected problems, got {other:?}"),
    }
}

fn names(containers: &[Container]) -> Vec<&str> {
    containers.iter().map(|c| c.name.as_str()).collect()
}

const S3: &str = "    storageUri: s3://models/triton-repo\n    storage:\n      secretName: s3-creds\n      sizeLimit: 20Gi\n";

#[test]
fn s3_is_fetched_by_an_init_container_before_anything_else() {
    let isvc = with_spec(
        "svc",
        &format!(
            "{MINIMAL}{S3}  pod:\n    initContainers:\n    - name: warmup\n      image: busybox\n"
        ),
    );
    let children = build(&isvc);
    let pod = pod(&children);
    let init = pod.init_containers.as_ref().unwrap();
    assert_eq!(names(init), ["storage-initializer", "warmup", "infergate"]);

    let fetch = &init[0];
    assert_eq!(
        fetch.image.as_deref(),
        Some(render::DEFAULT_STORAGE_INITIALIZER_IMAGE)
    );
    assert_eq!(
        fetch.args.as_deref().unwrap(),
        ["s3://models/triton-repo", "/mnt/models"]
    );
    assert_eq!(
        fetch.termination_message_policy.as_deref(),
        Some("FallbackToLogsOnError")
    );
    assert_eq!(fetch.restart_policy, None, "runs to completion");
    let mounts: Vec<(&str, &str, Option<bool>)> = fetch
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| (m.name.as_str(), m.mount_path.as_str(), m.read_only))
        .collect();
    assert_eq!(
        mounts,
        [
            ("infergate-model-storage", "/mnt/models", None),
            (
                "infergate-storage-secret",
                "/var/run/secrets/infergate/storage",
                Some(true)
            ),
        ]
    );
    let env = fetch.env.as_ref().unwrap();
    assert_eq!(env[0].name, "INFERGATE_STORAGE_SECRET_DIR");
    let sc = fetch.security_context.as_ref().unwrap();
    assert_eq!(sc.run_as_non_root, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));

    // The user's init container gets the same security defaults.
    let warmup = &init[1];
    assert_eq!(
        warmup.security_context.as_ref().unwrap().run_as_non_root,
        Some(true)
    );

    let model = pod.containers.iter().find(|c| c.name == "model").unwrap();
    let model_mount = model
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.name == "infergate-model-storage")
        .unwrap();
    assert_eq!(model_mount.mount_path, "/mnt/models");
    assert_eq!(model_mount.read_only, Some(true));
    // The credentials reach the init container only.
    assert!(
        !model
            .volume_mounts
            .iter()
            .flatten()
            .any(|m| m.name == "infergate-storage-secret")
    );
    let data = volume(pod, "infergate-model-storage");
    let empty_dir = data.empty_dir.as_ref().unwrap();
    assert_eq!(empty_dir.size_limit.as_ref().unwrap().0, "20Gi");
    let secret = volume(pod, "infergate-storage-secret");
    assert_eq!(
        secret.secret.as_ref().unwrap().secret_name.as_deref(),
        Some("s3-creds")
    );
}

#[test]
fn the_image_and_mount_path_can_be_chosen_and_no_secret_means_anonymous() {
    let isvc = with_spec(
        "svc",
        &format!(
            "{MINIMAL}    storageUri: https://example.com/models/resnet.tar.gz\n    storage:\n      mountPath: /models\n      initializerImage: my/fetch:1\n"
        ),
    );
    let settings = OperatorSettings {
        storage_initializer_image: "operator/default:2".into(),
        ..OperatorSettings::default()
    };
    let children = render::build_children(&isvc, &settings).unwrap();
    let pod = pod(&children);
    let fetch = &pod.init_containers.as_ref().unwrap()[0];
    assert_eq!(fetch.image.as_deref(), Some("my/fetch:1"));
    assert_eq!(
        fetch.args.as_deref().unwrap(),
        ["https://example.com/models/resnet.tar.gz", "/models"]
    );
    assert_eq!(fetch.env, None);
    assert!(
        !pod.volumes
            .iter()
            .flatten()
            .any(|v| v.name == "infergate-storage-secret")
    );

    // Without initializerImage, the operator's setting.
    let isvc = with_spec("svc", &format!("{MINIMAL}    storageUri: gs://b/m\n"));
    let children = render::build_children(&isvc, &settings).unwrap();
    let fetch = &common::pod(&children).init_containers.as_ref().unwrap()[0];
    assert_eq!(fetch.image.as_deref(), Some("operator/default:2"));
}

#[test]
fn a_claim_is_mounted_read_only_without_a_copy() {
    let isvc = with_spec(
        "svc",
        &format!("{MINIMAL}    storageUri: pvc://model-repo/triton/\n"),
    );
    let children = build(&isvc);
    let pod = pod(&children);
    assert_eq!(
        names(pod.init_containers.as_ref().unwrap()),
        ["infergate"],
        "no fetch"
    );
    let claim = volume(pod, "infergate-model-storage")
        .persistent_volume_claim
        .as_ref()
        .unwrap();
    assert_eq!(
        (claim.claim_name.as_str(), claim.read_only),
        ("model-repo", Some(true))
    );
    let model = pod.containers.iter().find(|c| c.name == "model").unwrap();
    let mount = model
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.name == "infergate-model-storage")
        .unwrap();
    assert_eq!(mount.sub_path.as_deref(), Some("triton"));
    assert_eq!(mount.read_only, Some(true));
}

#[test]
fn topology_spread_constraints_pass_through() {
    let isvc = with_spec(
        "svc",
        &format!(
            "{MINIMAL}  pod:\n    topologySpreadConstraints:\n    - maxSkew: 1\n      topologyKey: topology.kubernetes.io/zone\n      whenUnsatisfiable: ScheduleAnyway\n      labelSelector:\n        matchLabels: {{app.kubernetes.io/instance: svc}}\n"
        ),
    );
    let children = build(&isvc);
    let spread = pod(&children).topology_spread_constraints.as_ref().unwrap();
    assert_eq!(spread.len(), 1);
    assert_eq!(spread[0].topology_key, "topology.kubernetes.io/zone");
    assert_eq!(spread[0].max_skew, 1);
}

#[test]
fn storage_problems_are_reported() {
    let cases = [
        (
            "    storageUri: ftp://host/model\n".to_string(),
            "model.storageUri: \"ftp://host/model\": scheme \"ftp\" is not supported",
        ),
        (
            "    storageUri: models/resnet\n".to_string(),
            "has no scheme",
        ),
        (
            "    storageUri: pvc://Repo\n".to_string(),
            "is not a PersistentVolumeClaim name",
        ),
        (
            "    storage:\n      secretName: creds\n".to_string(),
            "model.storage is set but neither model.storageUri nor model.storage.uriFrom is",
        ),

        (
            "    storageUri: s3://b/m\n    volumeMounts:\n    - {name: x, mountPath: /mnt/models/}\n"
                .to_string(),
            "model.volumeMounts[0] mounts /mnt/models, where the model from model.storageUri is mounted",
        ),
    ];
    for (model, expected) in cases {
        let isvc = with_spec("svc", &format!("{MINIMAL}{model}"));
        let found = problems(&isvc);
        assert!(
            found.iter().any(|p| p.contains(expected)),
            "{expected:?} not in {found:?}"
        );
    }
    for reserved in ["storage-initializer", "infergate", "model"] {
        let isvc = with_spec(
            "svc",
            &format!(
                "{MINIMAL}  pod:\n    initContainers:\n    - name: {reserved}\n      image: x\n"
            ),
        );
        let found = problems(&isvc);
        assert!(
            found.iter().any(|p| p.contains("is reserved")),
            "{reserved}: {found:?}"
        );
    }
    let isvc = with_spec(
        "svc",
        &format!(
            "{MINIMAL}  pod:\n    initContainers:\n    - name: a\n      image: x\n    containers:\n    - name: a\n      image: y\n"
        ),
    );
    assert!(problems(&isvc).iter().any(|p| {
        p.contains("pod.initContainers[0].name \"a\" is already used by pod.containers[0]")
    }));
}

#[test]
fn a_uri_from_a_secret_reaches_the_fetcher_in_its_environment_only() {
    let isvc = with_spec(
        "svc",
        &format!(
            "{MINIMAL}    storage:\n      uriFrom:\n        secretKeyRef: {{name: presigned, key: url}}\n"
        ),
    );
    let children = build(&isvc);
    let init = pod(&children).init_containers.as_ref().unwrap();
    let fetch = &init[0];
    assert_eq!(fetch.name, "storage-initializer");
    assert_eq!(
        fetch.args.as_deref().unwrap(),
        ["--uri-from-env=INFERGATE_STORAGE_URI", "/mnt/models"]
    );
    let env = fetch.env.as_ref().unwrap();
    let uri = env
        .iter()
        .find(|e| e.name == "INFERGATE_STORAGE_URI")
        .unwrap();
    assert!(uri.value.is_none());
    let key = uri
        .value_from
        .as_ref()
        .unwrap()
        .secret_key_ref
        .as_ref()
        .unwrap();
    assert_eq!((key.name.as_str(), key.key.as_str()), ("presigned", "url"));
    // The model container mounts the fetched model as it would from storageUri.
    let model = &pod(&children).containers[0];
    assert!(
        model
            .volume_mounts
            .iter()
            .flatten()
            .any(|m| m.mount_path == "/mnt/models" && m.read_only == Some(true))
    );
}

/// A resource as the operator may still meet it where the API server did not check it (a CRD
/// of an older version, say): the render refuses what the CRD's rules refuse.
#[test]
fn credentials_in_storage_are_refused_by_the_render_too() {
    let cases = [
        (
            serde_json::json!({"storageUri": "https://u:hunter2@host/m.tgz"}),
            "carries a credential (a user name or password before the host",
        ),
        (
            serde_json::json!({"storageUri": "https://host/m.tgz?X-Amz-Signature=ab"}),
            "the query parameter X-Amz-Signature",
        ),
        (
            serde_json::json!({"storageUri": "http://host/m.tgz",
                               "storage": {"secretName": "creds"}}),
            "would travel in clear: use https://",
        ),
        (
            serde_json::json!({"storageUri": "s3://b/m",
                               "storage": {"uriFrom": {"secretKeyRef": {"name": "s", "key": "u"}}}}),
            "give model.storageUri or model.storage.uriFrom, not both",
        ),
    ];
    for (storage, expected) in cases {
        let mut isvc = with_spec("svc", MINIMAL);
        let mut model = serde_json::to_value(&isvc.spec.model).unwrap();
        for (k, v) in storage.as_object().unwrap() {
            model[k] = v.clone();
        }
        isvc.spec.model = serde_json::from_value(model).unwrap();
        let found = problems(&isvc);
        assert!(
            found.iter().any(|p| p.contains(expected)),
            "{expected:?} not in {found:?}"
        );
        assert!(!found.join(" ").contains("hunter2"), "{found:?}");
    }
}
