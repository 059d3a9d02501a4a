//! The Infergate operator: the `InferenceService` custom resource, the pure functions that turn
//! one into the Kubernetes objects that run it (the sidecar's ConfigMap, a Deployment, a Service and
//! a PodDisruptionBudget), and the controller that applies them and reports status.
//!
//! - [`controller`]: `infergate-operator run` (the only module that talks to the API server).
//! - [`crd`]: the resource's types; the CRD is generated from them.
//! - [`admission`]: what the API server checks before storing a resource (defaults, schema, CEL
//!   rules), done offline.
//! - [`validate`]: what neither the schema nor CEL can check (free-form containers and volumes).
//! - [`pod_names`]: the names the operator gives to the pod's parts.
//! - [`storage_uri`]: `spec.model.storageUri`, parsed for the checks and the render.
//! - [`render`]: the desired children of a resource.
//! - [`input`]: manifest files to admitted resources.
//! - [`reference`]: the field reference of `docs/operator.md`, generated from the schema.
//! - [`yaml`]: the only module that reads or writes YAML.

#![forbid(unsafe_code)]

pub mod admission;
pub mod controller;
pub mod crd;
pub mod input;
pub mod pod_names;
pub mod reference;
pub mod render;
pub mod status_client;
pub mod status_token;
pub mod storage_uri;
pub mod validate;
pub mod yaml;
