//! The client Service and the PodDisruptionBudget.

use k8s_openapi::api::core::v1::{
    ClientIPConfig, Service, ServicePort, ServiceSpec, SessionAffinityConfig,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use super::{child_meta, selector_labels};
use crate::crd::{InferenceService, SequenceRouting};

/// The Service `<name>`: the sidecar's HTTP and gRPC ports, and its metrics port when
/// `monitoring.servicePort` asks for it. The admin port stays off it (the admin status is for the
/// operator only), and the model server's ports are never exposed: clients go through the
/// sidecar.
pub(super) fn service(isvc: &InferenceService, owner: &OwnerReference) -> Service {
    let spec = &isvc.spec;
    let mut metadata = child_meta(isvc, isvc.name_any(), owner);
    if !spec.service.annotations.is_empty() {
        metadata.annotations = Some(spec.service.annotations.clone());
    }
    let sequence = &spec.extensions.sequence;
    let client_ip = sequence.enabled && sequence.routing == SequenceRouting::ClientIp;
    Service {
        metadata,
        spec: Some(ServiceSpec {
            type_: Some(spec.service.type_.as_str().to_string()),
            // With scale to zero the operator writes the endpoints: the pods', or the
            // activator's while no pod is ready (`activator.rs`). The selector then names a
            // label no pod carries, rather than none: the EndpointSlice controller keeps its own
            // slice of the Service empty (without a selector it would leave the last pods' in
            // it, which kube-proxy reads beside the operator's).
            selector: Some(match spec.scale_to_zero {
                None => selector_labels(isvc),
                Some(_) => no_pod_selector(),
            }),
            ports: Some(service_ports(isvc)),
            session_affinity: client_ip.then(|| "ClientIP".to_string()),
            session_affinity_config: client_ip.then_some(SessionAffinityConfig {
                client_ip: Some(ClientIPConfig {
                    timeout_seconds: sequence.client_ip_timeout_seconds,
                }),
            }),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// The label of the client Service's selector with scale to zero, which no pod carries (the
/// operator writes the Service's endpoints: `activator.rs`).
pub const ENDPOINTS_BY_LABEL: &str = "infergate.dev/endpoints-by";

/// The client Service's selector with scale to zero: no pod.
pub fn no_pod_selector() -> std::collections::BTreeMap<String, String> {
    std::collections::BTreeMap::from([(ENDPOINTS_BY_LABEL.to_string(), "operator".to_string())])
}

/// HTTP and gRPC, and metrics when asked for.
pub(super) fn service_ports(isvc: &InferenceService) -> Vec<ServicePort> {
    let ports = &isvc.spec.sidecar.ports;
    // With TLS both ports are HTTP over TLS (gRPC negotiates h2 by ALPN).
    let tls = isvc.spec.tls.is_some();
    let metrics_tls = isvc.spec.metrics_tls().is_some();
    let mut out = vec![
        ServicePort {
            name: Some("http".to_string()),
            port: ports.http,
            target_port: Some(IntOrString::String("http".to_string())),
            protocol: Some("TCP".to_string()),
            app_protocol: Some(if tls { "https" } else { "http" }.to_string()),
            ..ServicePort::default()
        },
        ServicePort {
            name: Some("grpc".to_string()),
            port: ports.grpc,
            target_port: Some(IntOrString::String("grpc".to_string())),
            protocol: Some("TCP".to_string()),
            // gRPC without TLS is HTTP/2 in clear text: the standard name for that.
            app_protocol: Some(if tls { "https" } else { "kubernetes.io/h2c" }.to_string()),
            ..ServicePort::default()
        },
    ];
    if isvc.spec.monitoring.service_port {
        out.push(ServicePort {
            name: Some("metrics".to_string()),
            port: ports.metrics,
            target_port: Some(IntOrString::String("metrics".to_string())),
            protocol: Some("TCP".to_string()),
            app_protocol: Some(if metrics_tls { "https" } else { "http" }.to_string()),
            ..ServicePort::default()
        });
    }
    out
}

/// The PodDisruptionBudget `<name>` from two replicas up: voluntary disruptions (node drains)
/// take one pod at a time. Pods that are not ready may always be evicted, so a model that never
/// loads cannot block a drain. With fewer replicas there is none: a budget on one pod would
/// block every drain.
pub(super) fn pdb(isvc: &InferenceService, owner: &OwnerReference) -> Option<PodDisruptionBudget> {
    let fewest = isvc
        .spec
        .autoscaling
        .as_ref()
        .map_or(isvc.spec.replicas, |a| a.min_replicas);
    (fewest >= 2).then(|| PodDisruptionBudget {
        metadata: child_meta(isvc, isvc.name_any(), owner),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector {
                match_labels: Some(selector_labels(isvc)),
                ..LabelSelector::default()
            }),
            unhealthy_pod_eviction_policy: Some("AlwaysAllow".to_string()),
            ..PodDisruptionBudgetSpec::default()
        }),
        ..PodDisruptionBudget::default()
    })
}
