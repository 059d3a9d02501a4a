//! `service.gateway`: an HTTPRoute and a GRPCRoute, on the one hostname, attached to the Gateway
//! named, to the client Service's ports.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

mod common;

use common::{MINIMAL, with_spec};
use infergate_operator::render::{self, OperatorSettings};
use serde_json::json;

#[test]
fn both_routes_go_to_the_service_on_one_hostname() {
    let isvc = with_spec(
        "resnet",
        &format!(
            "{MINIMAL}  service:\n    gateway: {{name: public, namespace: gateways, hostname: resnet.models.example.com, grpcSectionName: grpc}}\n"
        ),
    );
    let children = render::build_children(&isvc, &OperatorSettings::default()).unwrap();
    let http = children.http_route.as_ref().expect("an HTTPRoute");
    let grpc = children.grpc_route.as_ref().expect("a GRPCRoute");
    let values = children.to_values().unwrap();
    let kinds: Vec<&str> = values.iter().filter_map(|v| v["kind"].as_str()).collect();
    assert!(
        kinds.contains(&"HTTPRoute") && kinds.contains(&"GRPCRoute"),
        "{kinds:?}"
    );
    for (route, port, section) in [(http, 8000, None), (grpc, 8001, Some("grpc"))] {
        assert_eq!(route.metadata.name.as_deref(), Some("resnet"));
        let spec = &route.data["spec"];
        let mut parent = json!({"group": "gateway.networking.k8s.io", "kind": "Gateway",
                                "name": "public", "namespace": "gateways"});
        if let Some(section) = section {
            parent["sectionName"] = json!(section);
        }
        assert_eq!(spec["parentRefs"], json!([parent]));
        assert_eq!(spec["hostnames"], json!(["resnet.models.example.com"]));
        assert_eq!(
            spec["rules"],
            json!([{"backendRefs": [{"group": "", "kind": "Service", "name": "resnet", "port": port}]}])
        );
    }
    let plain = render::build_children(&with_spec("resnet", MINIMAL), &OperatorSettings::default())
        .unwrap();
    assert!(plain.http_route.is_none() && plain.grpc_route.is_none());
}
