//! `spec.model.storage`: how the model named by `spec.model.storageUri` reaches the model server.

use k8s_openapi::api::core::v1::ResourceRequirements;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::schema::resources_schema;

/// How the model in storageUri is fetched and mounted. s3://, gs:// and http(s):// URIs are
/// copied by an init container (storage-initializer) into an emptyDir before the model server
/// starts; pvc:// mounts the claim. A fetch that fails (bad URI, missing object, wrong
/// credentials) shows in status.lastFailureInfo with reason ModelFetchFailed and the storage's
/// own error.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("self.mountPath.startsWith('/') && !self.mountPath.contains('..') && self.mountPath != '/'")
        .message("storage.mountPath must be an absolute path below /, without '..'"),
)]
pub struct ModelStorage {
    /// Where the model container finds the model, read-only.
    #[serde(default = "default_mount_path")]
    #[schemars(length(min = 2, max = 1024))]
    pub mount_path: String,
    /// Secret with the storage's credentials, given to the init container (never to the model
    /// server). S3: keys AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, optional AWS_SESSION_TOKEN,
    /// AWS_REGION and AWS_ENDPOINT_URL (an S3-compatible server such as MinIO or Ceph, e.g.
    /// http://minio.storage:9000). GCS: key gcloud-application-credentials.json (a service
    /// account key). HTTP(S): optional key HTTP_AUTHORIZATION, sent as the Authorization header.
    /// Unset: anonymous access (S3 and GCS also use the pod's workload identity where the cluster
    /// provides one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub secret_name: Option<String>,
    /// The whole URI from a Secret's key, instead of storageUri: for a URI that is itself a
    /// credential, such as a presigned URL. It reaches the init container's environment only:
    /// not the pod spec, its arguments, its log or the resource's status. s3://, gs:// and
    /// http(s):// (not pvc://). The fetcher is then called with --uri-from-env, which
    /// KServe's storage initializer does not know.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri_from: Option<UriFrom>,
    /// Image of the init container. Unset: the operator's (--storage-initializer-image; the Helm
    /// value storageInitializer.image), built from docker/storage-initializer.Dockerfile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub initializer_image: Option<String>,
    /// Most the copy may take on the node's disk (the emptyDir's sizeLimit), e.g. 20Gi. Unset:
    /// no limit beyond the node's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub size_limit: Option<String>,
    /// CPU and memory of the init container. Unset: requests of 100m CPU and 128Mi memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "resources_schema")]
    pub resources: Option<ResourceRequirements>,
}

impl Default for ModelStorage {
    fn default() -> Self {
        ModelStorage {
            mount_path: default_mount_path(),
            secret_name: None,
            uri_from: None,
            initializer_image: None,
            size_limit: None,
            resources: None,
        }
    }
}

/// Where model.storage.uriFrom takes the URI from.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct UriFrom {
    /// A key of a Secret in the resource's namespace.
    pub secret_key_ref: SecretKeyRef,
}

/// A key of a Secret in the resource's namespace.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct SecretKeyRef {
    /// The Secret's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// The key whose value is the URI.
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

/// KServe's mount path for fetched models.
pub fn default_mount_path() -> String {
    "/mnt/models".to_string()
}
