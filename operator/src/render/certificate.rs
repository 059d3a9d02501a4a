//! The cert-manager Certificate (cert-manager.io/v1) of `spec.tls.issuerRef`: the Service's DNS
//! names, kept renewed by cert-manager in the Secret the sidecar mounts.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;
use kube::api::{ApiResource, DynamicObject};
use serde_json::json;

use super::child_meta;
use crate::crd::{InferenceService, certificate_secret_name};

/// cert-manager's Certificate resource.
pub fn certificate_resource() -> ApiResource {
    ApiResource {
        group: "cert-manager.io".to_string(),
        version: "v1".to_string(),
        api_version: "cert-manager.io/v1".to_string(),
        kind: "Certificate".to_string(),
        plural: "certificates".to_string(),
    }
}

/// The names clients use for the Service `name` of `namespace`: the short name (same
/// namespace), with the namespace, with `svc`, and fully qualified under the cluster domain.
fn dns_names(name: &str, namespace: &str, cluster_domain: &str) -> Vec<String> {
    vec![
        name.to_string(),
        format!("{name}.{namespace}"),
        format!("{name}.{namespace}.svc"),
        format!("{name}.{namespace}.svc.{cluster_domain}"),
    ]
}

/// The Certificate `<name>-tls`, where `tls.issuerRef` is set. Its private key is made anew at
/// each renewal (`rotationPolicy: Always`). It is a server certificate, and a client one too
/// where the sidecars forward sequences to each other (under mutual TLS they present it).
pub(super) fn certificate(
    isvc: &InferenceService,
    owner: &OwnerReference,
    cluster_domain: &str,
) -> Option<DynamicObject> {
    let issuer = isvc.spec.tls.as_ref()?.issuer_ref.as_ref()?;
    let name = isvc.name_any();
    let namespace = isvc.namespace().unwrap_or_default();
    let secret = certificate_secret_name(&name);
    let mut names = dns_names(&name, &namespace, cluster_domain);
    let mut usages = vec!["digital signature", "key encipherment", "server auth"];
    if isvc.spec.sidecars_dial_peers() || isvc.spec.scale_to_zero.is_some() {
        // Sidecars forward sequences (and the canary's share) to each other, and the activator
        // passes held calls on to them, checking this name; where the ports are mutual, each
        // presents this certificate as a client.
        names.extend(dns_names(
            &super::peers_name(isvc),
            &namespace,
            cluster_domain,
        ));
        usages.push("client auth");
    }
    let mut object = DynamicObject::new(&secret, &certificate_resource());
    object.metadata = child_meta(isvc, secret.clone(), owner);
    object.data = json!({
        "spec": {
            "secretName": secret,
            "issuerRef": {"name": issuer.name, "kind": issuer.kind.as_str(), "group": issuer.group},
            "commonName": format!("{name}.{namespace}.svc"),
            "dnsNames": names,
            "usages": usages,
            "privateKey": {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"},
        }
    });
    Some(object)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_names_a_client_may_dial() {
        assert_eq!(
            dns_names("resnet", "team-a", "cluster.local"),
            [
                "resnet",
                "resnet.team-a",
                "resnet.team-a.svc",
                "resnet.team-a.svc.cluster.local"
            ]
        );
    }
}
