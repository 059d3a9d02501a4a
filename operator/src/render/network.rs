//! The NetworkPolicy `<name>`, from `spec.networkPolicy`: ingress to the pods only where the
//! service needs it. Clients reach the sidecar's HTTP and gRPC ports, the operator its admin port
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

use super::{OperatorSettings, child_meta, selector_labels};
use crate::crd::InferenceService;

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
    let policy = isvc.spec.network_policy.as_ref()?;
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
    let mut ingress = vec![
        NetworkPolicyIngressRule {
            from: (!policy.clients.is_empty()).then(|| policy.clients.clone()),
            ports: Some(vec![tcp(ports.http), tcp(ports.grpc)]),
        },
        NetworkPolicyIngressRule {
            from: Some(operator),
            ports: Some(vec![tcp(ports.admin)]),
        },
    ];
    if !policy.metrics_scrapers.is_empty() {
        ingress.push(NetworkPolicyIngressRule {
            from: Some(policy.metrics_scrapers.clone()),
            ports: Some(vec![tcp(ports.metrics)]),
        });
    }
    Some(NetworkPolicy {
        metadata: child_meta(isvc, isvc.name_any(), owner),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_labels: Some(selector_labels(isvc)),
                ..LabelSelector::default()
            }),
            policy_types: Some(vec!["Ingress".to_string()]),
            ingress: Some(ingress),
            ..NetworkPolicySpec::default()
        }),
    })
}
