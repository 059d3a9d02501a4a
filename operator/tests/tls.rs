//! `spec.tls`: the Secret mounted in the sidecar only, both client ports serving it, the
//! Certificate cert-manager keeps, and what clients are told (URL, appProtocol).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

mod common;

use common::{MINIMAL, all_containers, pod, sidecar_config, volume, with_spec};
use infergate_operator::render::{self, Children, OperatorSettings};
use serde_json::json;

fn build(tls: &str) -> Children {
    let isvc = with_spec("resnet", &format!("{MINIMAL}  tls: {tls}\n"));
    render::build_children(&isvc, &OperatorSettings::default())
        .unwrap_or_else(|e| panic!("render failed: {e}"))
}

#[test]
fn a_secret_of_the_users_is_mounted_whole_in_the_sidecar_alone() {
    let children = build("{secretName: resnet-cert}");
    let pod = pod(&children);
    let secret = volume(pod, "infergate-tls").secret.as_ref().unwrap();
    assert_eq!(secret.secret_name.as_deref(), Some("resnet-cert"));
    // Whole, not by subPath: the kubelet's update of a renewed Secret reaches the files.
    assert!(secret.items.is_none());
    for container in all_containers(pod) {
        let mounts: Vec<_> = container
            .volume_mounts
            .iter()
            .flatten()
            .filter(|m| m.name == "infergate-tls")
            .collect();
        if container.name == "infergate" {
            assert_eq!(mounts.len(), 1);
            assert_eq!(mounts[0].mount_path, "/etc/infergate/tls");
            assert_eq!(mounts[0].read_only, Some(true));
            assert!(mounts[0].sub_path.is_none());
        } else {
            assert!(mounts.is_empty(), "{} sees the key", container.name);
        }
    }
    assert!(children.certificate.is_none());
}

#[test]
fn both_client_ports_serve_the_secret_and_mutual_asks_for_its_ca() {
    let config = sidecar_config(&build("{secretName: resnet-cert}"));
    let server = &config.server;
    assert!(server.http_tls.use_ssl && server.grpc_tls.use_ssl);
    assert!(!server.http_tls.use_ssl_mutual);
    assert_eq!(
        server.grpc_tls.server_cert.as_deref(),
        Some("/etc/infergate/tls/tls.crt")
    );
    assert_eq!(
        server.grpc_tls.server_key.as_deref(),
        Some("/etc/infergate/tls/tls.key")
    );
    assert_eq!(server.grpc_tls.root_cert, None);
    assert_eq!(server.http_tls, server.grpc_tls);

    let config = sidecar_config(&build("{secretName: resnet-cert, mutual: true}"));
    for tls in [&config.server.http_tls, &config.server.grpc_tls] {
        assert!(tls.use_ssl_mutual);
        assert_eq!(tls.root_cert.as_deref(), Some("/etc/infergate/tls/ca.crt"));
    }
}

#[test]
fn the_probes_stay_on_the_plain_admin_port() {
    let children = build("{secretName: resnet-cert, mutual: true}");
    let sidecar = all_containers(pod(&children))
        .into_iter()
        .find(|c| c.name == "infergate")
        .unwrap();
    for probe in [
        &sidecar.startup_probe,
        &sidecar.liveness_probe,
        &sidecar.readiness_probe,
    ] {
        let get = probe.as_ref().unwrap().http_get.as_ref().unwrap();
        assert_eq!(
            serde_json::to_value(&get.port).unwrap(),
            json!("admin"),
            "{get:?}"
        );
        assert_eq!(get.scheme, None, "the kubelet probes in plain HTTP");
    }
}

#[test]
fn clients_are_told_https() {
    let children = build("{secretName: resnet-cert}");
    let service = serde_json::to_value(&children.service).unwrap();
    let protocols: Vec<&str> = service["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["appProtocol"].as_str().unwrap())
        .collect();
    assert_eq!(protocols, ["https", "https"]);
    let isvc = with_spec("resnet", &format!("{MINIMAL}  tls: {{secretName: c}}\n"));
    assert_eq!(
        render::service_urls(&isvc).rest,
        "https://resnet.ml.svc:8000"
    );
    let plain = with_spec("resnet", MINIMAL);
    assert_eq!(
        render::service_urls(&plain).rest,
        "http://resnet.ml.svc:8000"
    );
}

#[test]
fn an_issuer_gets_a_certificate_for_the_services_names_in_the_mounted_secret() {
    let children = build("{issuerRef: {name: team-ca}, mutual: true}");
    let certificate = serde_json::to_value(children.certificate.as_ref().unwrap()).unwrap();
    assert_eq!(certificate["apiVersion"], "cert-manager.io/v1");
    assert_eq!(certificate["kind"], "Certificate");
    assert_eq!(certificate["metadata"]["name"], "resnet-tls");
    assert_eq!(certificate["metadata"]["namespace"], "ml");
    assert_eq!(
        certificate["metadata"]["ownerReferences"][0]["kind"],
        "InferenceService"
    );
    let spec = &certificate["spec"];
    assert_eq!(spec["secretName"], "resnet-tls");
    assert_eq!(
        spec["issuerRef"],
        json!({"name": "team-ca", "kind": "Issuer", "group": "cert-manager.io"})
    );
    assert_eq!(
        spec["dnsNames"],
        json!([
            "resnet",
            "resnet.ml",
            "resnet.ml.svc",
            "resnet.ml.svc.cluster.local"
        ])
    );
    assert_eq!(spec["privateKey"]["rotationPolicy"], "Always");
    let secret = volume(pod(&children), "infergate-tls")
        .secret
        .as_ref()
        .unwrap();
    assert_eq!(secret.secret_name.as_deref(), Some("resnet-tls"));
    // Applied before the Deployment whose pods mount its Secret.
    let kinds = common::applied_kinds(&children);
    let position = |kind: &str| kinds.iter().position(|k| k == kind).unwrap();
    assert!(
        position("Certificate") < position("Deployment"),
        "{kinds:?}"
    );
}

#[test]
fn a_cluster_issuer_and_another_cluster_domain() {
    let isvc = with_spec(
        "resnet",
        &format!("{MINIMAL}  tls: {{issuerRef: {{name: corp, kind: ClusterIssuer}}}}\n"),
    );
    let settings = OperatorSettings {
        cluster_domain: "corp.example".into(),
        ..OperatorSettings::default()
    };
    let children = render::build_children(&isvc, &settings).unwrap();
    let certificate = serde_json::to_value(children.certificate.as_ref().unwrap()).unwrap();
    assert_eq!(certificate["spec"]["issuerRef"]["kind"], "ClusterIssuer");
    assert_eq!(
        certificate["spec"]["dnsNames"][3],
        "resnet.ml.svc.corp.example"
    );
}

#[test]
fn without_tls_nothing_changes() {
    let isvc = with_spec("resnet", MINIMAL);
    let children = render::build_children(&isvc, &OperatorSettings::default()).unwrap();
    assert!(children.certificate.is_none());
    assert!(
        pod(&children)
            .volumes
            .iter()
            .flatten()
            .all(|v| v.name != "infergate-tls")
    );
    let config = sidecar_config(&children);
    assert!(config.server.http_tls.is_off() && config.server.grpc_tls.is_off());
}

const SIDECAR_ROUTING: &str = "  extensions:\n    sequence: {enabled: true, routing: Sidecar}\n";

#[test]
fn sidecars_that_route_sequences_dial_each_other_over_tls_for_the_peers_name() {
    let isvc = with_spec(
        "resnet",
        &format!("{MINIMAL}{SIDECAR_ROUTING}  tls: {{secretName: resnet-cert, mutual: true}}\n"),
    );
    let children = render::build_children(&isvc, &OperatorSettings::default()).unwrap();
    let peers = sidecar_config(&children).server.sequence_peers_tls;
    assert_eq!(
        peers.root_cert.as_deref(),
        Some("/etc/infergate/tls/ca.crt")
    );
    assert_eq!(peers.server_name.as_deref(), Some("resnet-peers.ml.svc"));
    // Their ports are mutual: each presents the service's certificate.
    assert_eq!(
        peers.client_cert.as_deref(),
        Some("/etc/infergate/tls/tls.crt")
    );
    assert_eq!(
        peers.client_key.as_deref(),
        Some("/etc/infergate/tls/tls.key")
    );

    let isvc = with_spec(
        "resnet",
        &format!("{MINIMAL}{SIDECAR_ROUTING}  tls: {{secretName: resnet-cert}}\n"),
    );
    let children = render::build_children(&isvc, &OperatorSettings::default()).unwrap();
    let peers = sidecar_config(&children).server.sequence_peers_tls;
    assert!(peers.root_cert.is_some() && peers.client_cert.is_none());
}

#[test]
fn the_certificate_of_sidecars_that_route_sequences_names_the_peers_service_too() {
    let isvc = with_spec(
        "resnet",
        &format!("{MINIMAL}{SIDECAR_ROUTING}  tls: {{issuerRef: {{name: ca}}, mutual: true}}\n"),
    );
    let children = render::build_children(&isvc, &OperatorSettings::default()).unwrap();
    let certificate = serde_json::to_value(children.certificate.as_ref().unwrap()).unwrap();
    let names = certificate["spec"]["dnsNames"].as_array().unwrap();
    assert!(names.contains(&json!("resnet-peers.ml.svc")), "{names:?}");
    assert!(names.contains(&json!("resnet.ml.svc")), "{names:?}");
    assert!(
        certificate["spec"]["usages"]
            .as_array()
            .unwrap()
            .contains(&json!("client auth"))
    );
}

#[test]
fn the_metrics_port_serves_the_certificate_to_scrapers_that_hold_none() {
    let monitored = |tls: &str| {
        let isvc = with_spec(
            "resnet",
            &format!(
                "{MINIMAL}  tls: {tls}\n  monitoring: {{servicePort: true, podMonitor: true}}\n"
            ),
        );
        render::build_children(&isvc, &OperatorSettings::default())
            .unwrap_or_else(|e| panic!("render failed: {e}"))
    };
    let children = monitored("{secretName: resnet-cert, mutual: true}");
    let server = sidecar_config(&children).server;
    let metrics = &server.metrics_tls;
    assert!(metrics.use_ssl);
    // Never mutual: a scraper presents no certificate, whatever the client ports ask.
    assert!(!metrics.use_ssl_mutual && metrics.root_cert.is_none());
    assert_eq!(metrics.server_cert, server.http_tls.server_cert);
    // The PodMonitor scrapes over https, trusting the Secret's CA, verifying the Service's
    // name: pods are reached by address, which the certificate does not name.
    let pm = serde_json::to_value(children.pod_monitor.as_ref().unwrap()).unwrap();
    let endpoint = &pm["spec"]["podMetricsEndpoints"][0];
    assert_eq!(endpoint["scheme"], "https");
    assert_eq!(
        endpoint["tlsConfig"],
        json!({"ca": {"secret": {"name": "resnet-cert", "key": "ca.crt"}},
               "serverName": format!("resnet.{}.svc", children.service.metadata.namespace.as_deref().unwrap())})
    );
    let app_protocol = |children: &Children| {
        let ports = children
            .service
            .spec
            .as_ref()
            .unwrap()
            .ports
            .as_ref()
            .unwrap();
        let metrics = ports.iter().find(|p| p.name.as_deref() == Some("metrics"));
        metrics.unwrap().app_protocol.clone().unwrap()
    };
    assert_eq!(app_protocol(&children), "https");

    // metrics: false keeps it plain, for scrapers that cannot be given the CA.
    let plain = monitored("{secretName: resnet-cert, metrics: false}");
    assert!(!sidecar_config(&plain).server.metrics_tls.use_ssl);
    let pm = serde_json::to_value(plain.pod_monitor.as_ref().unwrap()).unwrap();
    assert!(pm["spec"]["podMetricsEndpoints"][0].get("scheme").is_none());
    assert_eq!(app_protocol(&plain), "http");
}
