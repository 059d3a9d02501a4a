//! Gateway API routes to the client Service (`service.gateway`): an HTTPRoute for REST and a
//! GRPCRoute for gRPC, both `<name>`, on the one hostname, attached to the Gateway named. Every
//! call goes to the service's sidecars, which split it with a canary where there is one, so the
//! routes need no weights.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;
use kube::api::{ApiResource, DynamicObject};
use serde_json::{Value, json};

use super::child_meta;
use crate::crd::InferenceService;

const GROUP: &str = "gateway.networking.k8s.io";

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: GROUP.to_string(),
        version: "v1".to_string(),
        api_version: format!("{GROUP}/v1"),
        kind: kind.to_string(),
        plural: plural.to_string(),
    }
}

/// The Gateway API's HTTPRoute.
pub fn http_route_resource() -> ApiResource {
    resource("HTTPRoute", "httproutes")
}

/// The Gateway API's GRPCRoute.
pub fn grpc_route_resource() -> ApiResource {
    resource("GRPCRoute", "grpcroutes")
}

/// The HTTPRoute `<name>` to the Service's `http` port.
pub(super) fn http_route(isvc: &InferenceService, owner: &OwnerReference) -> Option<DynamicObject> {
    let port = isvc.spec.sidecar.ports.http;
    route(isvc, owner, &http_route_resource(), port, |g| {
        g.http_section_name.as_deref()
    })
}

/// The GRPCRoute `<name>` to the Service's `grpc` port.
pub(super) fn grpc_route(isvc: &InferenceService, owner: &OwnerReference) -> Option<DynamicObject> {
    let port = isvc.spec.sidecar.ports.grpc;
    route(isvc, owner, &grpc_route_resource(), port, |g| {
        g.grpc_section_name.as_deref()
    })
}

fn route(
    isvc: &InferenceService,
    owner: &OwnerReference,
    kind: &ApiResource,
    port: i32,
    section: impl Fn(&crate::crd::GatewayRoutes) -> Option<&str>,
) -> Option<DynamicObject> {
    let gateway = isvc.spec.service.gateway.as_ref()?;
    let name = isvc.name_any();
    let mut parent = json!({"group": GROUP, "kind": "Gateway", "name": gateway.name});
    if let Some(namespace) = &gateway.namespace {
        parent["namespace"] = json!(namespace);
    }
    if let Some(section) = section(gateway) {
        parent["sectionName"] = json!(section);
    }
    let backend: Value = json!({"group": "", "kind": "Service", "name": name, "port": port});
    let mut object = DynamicObject::new(&name, kind);
    object.metadata = child_meta(isvc, name.clone(), owner);
    object.data = json!({
        "spec": {
            "parentRefs": [parent],
            "hostnames": [gateway.hostname],
            "rules": [{"backendRefs": [backend]}],
        }
    });
    Some(object)
}
