//! The model from `spec.model.storageUri`, ready in the model container before it starts.
//!
//! - `s3://`, `gs://`, `http(s)://`: an init container, `storage-initializer`, copies the model
//!   into an emptyDir that the model container mounts read-only at `storage.mountPath`. It runs
//!   first, before the sidecar and the user's init containers, so that the model server never
//!   starts without its model. Its arguments are `[URI, DESTINATION]`, the convention KServe's
//!   storage initializer uses too, so either image works. The Secret `storage.secretName` is
//!   mounted into it alone (files, not environment variables: keys such as
//!   `gcloud-application-credentials.json` are not variable names), never into the model server.
//!   Its termination message (the fetch error) is what `status.lastFailureInfo` reports.
//!   `model.storage.uriFrom` gives the whole URI from a Secret's key instead (a presigned URL):
//!   it reaches the init container as `INFERGATE_STORAGE_URI`, and its argument is
//!   `--uri-from-env=INFERGATE_STORAGE_URI`.
//! - `pvc://CLAIM/PATH`: the claim itself, mounted read-only with `subPath: PATH`; no copy.

use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, EnvVar, EnvVarSource, PersistentVolumeClaimVolumeSource,
    ResourceRequirements, SecretKeySelector, SecretVolumeSource, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::OperatorSettings;
use super::security::restricted_defaults;
use crate::crd::InferenceService;
use crate::crd::UriFrom;
use crate::pod_names::{MODEL_STORAGE_VOLUME, STORAGE_INIT_CONTAINER, STORAGE_SECRET_VOLUME};
use crate::storage_uri::{self, StorageUri};

/// Where the init container finds the Secret's keys, one file each.
pub const STORAGE_SECRET_DIR: &str = "/var/run/secrets/infergate/storage";

/// The init container's variable that holds the URI given by `model.storage.uriFrom`.
const URI_ENV: &str = "INFERGATE_STORAGE_URI";

/// `INFERGATE_STORAGE_URI` from the Secret's key: the kubelet reads it, so the operator needs
/// no access to the Secret, and the URI is in no object the operator writes.
fn uri_env(from: &UriFrom) -> EnvVar {
    EnvVar {
        name: URI_ENV.to_string(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: from.secret_key_ref.name.clone(),
                key: from.secret_key_ref.key.clone(),
                optional: Some(false),
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }
}

/// What the pod needs for the model in storage.
pub(super) struct ModelStorageParts {
    /// The init container that fetches it (none for `pvc://`).
    pub init_container: Option<Container>,
    /// The volumes: the model's, and the Secret's.
    pub volumes: Vec<Volume>,
    /// The model container's read-only mount of the model.
    pub model_mount: VolumeMount,
}

/// The parts for `spec.model.storageUri`, `None` when it is unset or invalid (the checks report
/// an invalid one before anything is rendered).
pub(super) fn parts(
    isvc: &InferenceService,
    settings: &OperatorSettings,
) -> Option<ModelStorageParts> {
    let spec = &isvc.spec;
    let storage = &spec.model.storage;
    // The URI as the fetcher's first argument, or, from a Secret, in its environment only.
    let (uri_argument, uri_env) = match (&spec.model.storage_uri, &storage.uri_from) {
        (Some(uri), _) => (uri.clone(), None),
        (None, Some(from)) => (format!("--uri-from-env={URI_ENV}"), Some(uri_env(from))),
        (None, None) => return None,
    };
    let parsed = match &spec.model.storage_uri {
        Some(uri) => storage_uri::parse(uri).ok()?,
        None => StorageUri::Fetched,
    };
    if let StorageUri::Claim { claim, path } = parsed {
        return Some(ModelStorageParts {
            init_container: None,
            volumes: vec![Volume {
                name: MODEL_STORAGE_VOLUME.to_string(),
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name: claim,
                    read_only: Some(true),
                }),
                ..Volume::default()
            }],
            model_mount: VolumeMount {
                name: MODEL_STORAGE_VOLUME.to_string(),
                mount_path: storage.mount_path.clone(),
                sub_path: (!path.is_empty()).then_some(path),
                read_only: Some(true),
                ..VolumeMount::default()
            },
        });
    }

    let mut volumes = vec![Volume {
        name: MODEL_STORAGE_VOLUME.to_string(),
        empty_dir: Some(EmptyDirVolumeSource {
            size_limit: storage.size_limit.clone().map(Quantity),
            ..EmptyDirVolumeSource::default()
        }),
        ..Volume::default()
    }];
    let mut mounts = vec![VolumeMount {
        name: MODEL_STORAGE_VOLUME.to_string(),
        mount_path: storage.mount_path.clone(),
        ..VolumeMount::default()
    }];
    let mut env: Vec<EnvVar> = uri_env.into_iter().collect();
    if let Some(secret) = &storage.secret_name {
        volumes.push(Volume {
            name: STORAGE_SECRET_VOLUME.to_string(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(secret.clone()),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        });
        mounts.push(VolumeMount {
            name: STORAGE_SECRET_VOLUME.to_string(),
            mount_path: STORAGE_SECRET_DIR.to_string(),
            read_only: Some(true),
            ..VolumeMount::default()
        });
        env.push(EnvVar {
            name: "INFERGATE_STORAGE_SECRET_DIR".to_string(),
            value: Some(STORAGE_SECRET_DIR.to_string()),
            ..EnvVar::default()
        });
    }
    let resources = storage
        .resources
        .clone()
        .unwrap_or_else(|| ResourceRequirements {
            requests: Some(
                [
                    ("cpu".to_string(), Quantity("100m".to_string())),
                    ("memory".to_string(), Quantity("128Mi".to_string())),
                ]
                .into(),
            ),
            ..ResourceRequirements::default()
        });
    let init_container = Container {
        name: STORAGE_INIT_CONTAINER.to_string(),
        image: Some(
            storage
                .initializer_image
                .clone()
                .unwrap_or_else(|| settings.storage_initializer_image.clone()),
        ),
        args: Some(vec![uri_argument, storage.mount_path.clone()]),
        env: (!env.is_empty()).then_some(env),
        resources: Some(resources),
        volume_mounts: Some(mounts),
        // The fetch error is the container's last words: the kubelet keeps them as the
        // termination message when the image writes none to /dev/termination-log.
        termination_message_policy: Some("FallbackToLogsOnError".to_string()),
        security_context: Some(restricted_defaults(
            None,
            spec.pod.security_context.as_ref(),
            spec.sidecar.run_as_user,
        )),
        ..Container::default()
    };
    Some(ModelStorageParts {
        init_container: Some(init_container),
        volumes,
        model_mount: VolumeMount {
            name: MODEL_STORAGE_VOLUME.to_string(),
            mount_path: storage.mount_path.clone(),
            read_only: Some(true),
            ..VolumeMount::default()
        },
    })
}
