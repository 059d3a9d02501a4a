//! The NetworkPolicy `<name>`, from `spec.networkPolicy` (rendered unless `enabled: false`):
//! ingress to the pods only where the service needs it. Clients reach the sidecar's HTTP and gRPC ports, the operator its admin port
//! (the status probe; without it the resource is never Ready), scrapers its metrics port. The
//! model server's ports get no rule: clients go through the sidecar, which reaches the model
//! server on loopback, where policies do not apply. Probes come from the kubelet on the node,
//! which CNI plugins admit.

use std::collections::BTreeMap;

use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use super::{OperatorSettings, all_pods_selector, child_meta};
use crate::crd::InferenceService;

/// The namespace whose pods may scrape the metrics port where the spec lists no scrapers: where
/// kube-prometheus-stack and most Prometheus installs put themselves.
pub const MONITORING_NAMESPACE: &str = "monitoring";

/// `app.kubernetes.io/name` of the operator's pods, as the Helm chart labels them.
pub const OPERATOR_POD_NAME: &str = "infergate-operator";

fn tcp(port: i32) -> NetworkPolicyPort {
    NetworkPolicyPort {
        port: Some(IntOrString::Int(port)),
        protocol: Some("TCP".to_string()),
        ..NetworkPolicyPort::default()
    }
}

fn labels(pairs: &[(&str, &str)]) -> LabelSelector {
    LabelSelector {
        match_labels: Some(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
        ),
        ..LabelSelector::default()
    }
}

pub(super) fn network_policy(
    isvc: &InferenceService,
    settings: &OperatorSettings,
    owner: &OwnerReference,
) -> Option<NetworkPolicy> {
    let policy = Some(&isvc.spec.network_policy).filter(|p| p.enabled)?;
    let ports = &isvc.spec.sidecar.ports;
    let operator = if policy.operator.is_empty() {
        vec![NetworkPolicyPeer {
            pod_selector: Some(labels(&[("app.kubernetes.io/name", OPERATOR_POD_NAME)])),
            namespace_selector: Some(match &settings.operator_namespace {
                Some(ns) => labels(&[("kubernetes.io/metadata.name", ns)]),
                None => LabelSelector::default(),
            }),
            ..NetworkPolicyPeer::default()
        }]
    } else {
        policy.operator.clone()
    };
    // The activator passes the calls it held on to the pods: it is a client too.
    let mut clients = policy.clients.clone();
    if !clients.is_empty() && isvc.spec.scale_to_zero.is_some() {
        clients.push(NetworkPolicyPeer {
            pod_selector: Some(LabelSelector {
                match_labels: Some(super::activator::activator_selector_labels(isvc)),
                ..LabelSelector::default()
            }),
            ..NetworkPolicyPeer::default()
        });
    }
    let mut ingress = vec![
        NetworkPolicyIngressRule {
            from: (!clients.is_empty()).then_some(clients),
            ports: Some(vec![tcp(ports.http), tcp(ports.grpc)]),
        },
        NetworkPolicyIngressRule {
            from: Some(operator),
            ports: Some(vec![tcp(ports.admin)]),
        },
    ];
    let scrapers = if policy.metrics_scrapers.is_empty() {
        vec![NetworkPolicyPeer {
            namespace_selector: Some(labels(&[(
                "kubernetes.io/metadata.name",
                MONITORING_NAMESPACE,
            )])),
            ..NetworkPolicyPeer::default()
        }]
    } else {
        policy.metrics_scrapers.clone()
    };
    ingress.push(NetworkPolicyIngressRule {
        from: Some(scrapers),
        ports: Some(vec![tcp(ports.metrics)]),
    });
    Some(NetworkPolicy {
        metadata: child_meta(isvc, isvc.name_any(), owner),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(all_pods_selector(isvc)),
            policy_types: Some(vec!["Ingress".to_string()]),
            ingress: Some(ingress),
            ..NetworkPolicySpec::default()
        }),
    })
}
