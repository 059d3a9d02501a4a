//! `spec.auth` and the pods' credentials: the control APIs served to the pod alone by default, a
//! key from a Secret where asked, everyone where asked; and no service-account token where
//! nothing in the pod uses one.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

mod common;

use common::{MINIMAL, all_containers, pod, with_spec};
use infergate_operator::render::{self, Children, OperatorSettings};

fn build(extra: &str) -> Children {
    let isvc = with_spec("resnet", &format!("{MINIMAL}{extra}"));
    render::build_children(&isvc, &OperatorSettings::default())
        .unwrap_or_else(|e| panic!("render failed: {e}"))
}

fn server(children: &Children) -> infergate_config::ServerSettings {
    let text = &children.config_map.data.as_ref().unwrap()["config.yaml"];
    let config: infergate_config::SidecarConfig = infergate_config::yaml::from_str(text).unwrap();
    config.validate(&[]).unwrap();
    config.server
}

fn mounts_auth(children: &Children) -> Vec<(String, String)> {
    all_containers(pod(children))
        .into_iter()
        .flat_map(|c| {
            c.volume_mounts
                .iter()
                .flatten()
                .filter(|m| m.name == "infergate-auth")
                .map(|m| (c.name.clone(), m.mount_path.clone()))
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn by_default_the_control_apis_are_the_pods_alone() {
    let children = build("");
    let server = server(&children);
    assert_eq!(server.pod_only_api, ["model-repository,logging,trace"]);
    assert!(server.http_restricted_api_file.is_empty());
    assert!(mounts_auth(&children).is_empty());
}

#[test]
fn a_key_from_a_secret_guards_them_on_both_ports_and_only_the_sidecar_mounts_it() {
    let children = build(
        "  auth:\n    controlAPIs:\n      from: Key\n      key: {secretName: ops-key, secretKey: token}\n",
    );
    let server = server(&children);
    assert!(server.pod_only_api.is_empty());
    let setting = "model-repository,logging,trace:infergate-control-key=/etc/infergate/auth/token";
    assert_eq!(server.http_restricted_api_file, [setting]);
    assert_eq!(server.grpc_restricted_protocol_file, [setting]);
    assert_eq!(
        mounts_auth(&children),
        [("infergate".to_string(), "/etc/infergate/auth".to_string())]
    );
    let volume = common::volume(pod(&children), "infergate-auth");
    let secret = volume.secret.as_ref().unwrap();
    assert_eq!(secret.secret_name.as_deref(), Some("ops-key"));
    assert!(
        secret.items.is_none(),
        "mounted whole, so a changed key arrives"
    );
}

#[test]
fn anyone_leaves_them_as_triton_does() {
    let server = server(&build("  auth:\n    controlAPIs: {from: Anyone}\n"));
    assert!(server.pod_only_api.is_empty() && server.http_restricted_api_file.is_empty());
}

#[test]
fn a_key_without_its_secret_is_refused() {
    let isvc = with_spec("resnet", MINIMAL);
    let mut isvc = isvc;
    isvc.spec.auth.control_apis.from = infergate_operator::crd::ControlFrom::Key;
    let refused = render::build_children(&isvc, &OperatorSettings::default()).unwrap_err();
    assert!(
        refused.to_string().contains("auth.controlAPIs.key"),
        "{refused}"
    );
}

#[test]
fn the_pods_get_a_token_only_where_something_uses_it() {
    let token = |extra: &str| pod(&build(extra)).automount_service_account_token;
    assert_eq!(token(""), Some(false));
    // Sidecars that route sequences watch their peers' EndpointSlices with it.
    assert_eq!(
        token("  extensions:\n    sequence: {enabled: true, routing: Sidecar}\n"),
        Some(true)
    );
    assert_eq!(
        token("  pod: {automountServiceAccountToken: true}\n"),
        Some(true)
    );
}
