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

/// Who in the pod holds a ServiceAccount token: (the pod mounts one in every container, the
/// containers with the sidecar's own token volume at the standard path).
fn token_holders(children: &Children) -> (Option<bool>, Vec<String>) {
    let pod = pod(children);
    let holders = all_containers(pod)
        .into_iter()
        .filter(|c| {
            c.volume_mounts.iter().flatten().any(|m| {
                m.name == "infergate-token"
                    && m.mount_path == "/var/run/secrets/kubernetes.io/serviceaccount"
            })
        })
        .map(|c| c.name.clone())
        .collect();
    (pod.automount_service_account_token, holders)
}

#[test]
fn the_pods_get_a_token_only_where_something_uses_it() {
    let token = |extra: &str| token_holders(&build(extra));
    assert_eq!(token(""), (Some(false), vec![]));
    // Sidecars that route sequences watch their peers' EndpointSlices with it: the sidecar
    // alone gets one, the model server none.
    assert_eq!(
        token("  extensions:\n    sequence: {enabled: true, routing: Sidecar}\n"),
        (Some(false), vec!["infergate".to_string()])
    );
    // Every container, where the resource asks (then the sidecar uses the pod's).
    assert_eq!(
        token("  pod: {automountServiceAccountToken: true}\n"),
        (Some(true), vec![])
    );
    assert_eq!(
        token(
            "  pod: {automountServiceAccountToken: true}\n  extensions:\n    sequence: {enabled: true, routing: Sidecar}\n"
        ),
        (Some(true), vec![])
    );
    // What the kubelet would mount: the token, the cluster's CA and the namespace.
    let children = build("  extensions:\n    sequence: {enabled: true, routing: Sidecar}\n");
    let volume = common::volume(pod(&children), "infergate-token");
    let sources = volume.projected.as_ref().unwrap().sources.as_ref().unwrap();
    let token = sources[0].service_account_token.as_ref().unwrap();
    assert_eq!(
        (token.path.as_str(), token.audience.as_ref()),
        ("token", None)
    );
    let ca = sources[1].config_map.as_ref().unwrap();
    assert_eq!(ca.name, "kube-root-ca.crt");
    let namespace = &sources[2]
        .downward_api
        .as_ref()
        .unwrap()
        .items
        .as_ref()
        .unwrap()[0];
    assert_eq!(
        namespace.field_ref.as_ref().unwrap().field_path,
        "metadata.namespace"
    );
}

/// The resource in namespace `apps` (the review is made there).
fn build_in_apps(extra: &str) -> Children {
    let isvc = common::isvc(&format!(
        "apiVersion: infergate.dev/v1alpha1\nkind: InferenceService\nmetadata:\n  name: resnet\n  namespace: apps\nspec:\n{MINIMAL}{extra}"
    ));
    render::build_children(&isvc, &OperatorSettings::default())
        .unwrap_or_else(|e| panic!("render failed: {e}"))
}

#[test]
fn inference_by_identity_checks_tokens_for_the_services_audience_and_the_infer_verb() {
    let children = build_in_apps("  auth:\n    inference: {from: Identity}\n");
    let identity = server(&children).identity.expect("server.identity");
    let ns = "apps".to_string();
    assert_eq!(identity.apis, ["inference"]);
    assert_eq!(identity.audience, format!("infergate.dev/{ns}/resnet"));
    assert_eq!(identity.verify, infergate_config::TokenVerification::Jwks);
    let authorize = identity.authorize.expect("authorize");
    assert_eq!(
        (
            authorize.namespace.as_str(),
            authorize.name.as_str(),
            authorize.verb.as_str()
        ),
        (ns.as_str(), "resnet", "infer")
    );
    // The pods run with an account of their own, allowed to ask reviews only; its token is the
    // sidecar's alone.
    assert_eq!(
        token_holders(&children),
        (Some(false), vec!["infergate".to_string()])
    );
    let pod = pod(&children);
    assert_eq!(pod.service_account_name.as_deref(), Some("resnet-identity"));
    let objects = children.identity.as_ref().expect("identity objects");
    assert_eq!(
        objects
            .service_account
            .as_ref()
            .and_then(|a| a.metadata.name.as_deref()),
        Some("resnet-identity")
    );
    let rules = objects.role.rules.as_ref().unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(
        rules[0].resources.as_deref(),
        Some(&["localsubjectaccessreviews".to_string()][..])
    );
    assert_eq!(rules[0].verbs, ["create"]);
    let subject = &objects.role_binding.subjects.as_ref().unwrap()[0];
    assert_eq!(subject.name, "resnet-identity");
    // Applied before the Deployment, whose pods need the account.
    let kinds = common::applied_kinds(&children);
    let at = |kind: &str| kinds.iter().position(|k| k == kind).unwrap();
    assert!(at("RoleBinding") < at("Deployment"), "{kinds:?}");
}

#[test]
fn an_identity_uses_the_accounts_the_pods_already_run_with() {
    let own = build_in_apps(
        "  pod: {serviceAccountName: fraud-sa}\n  auth:\n    inference: {from: Identity, audience: fraud.example, verb: predict}\n",
    );
    let identity = server(&own).identity.unwrap();
    assert_eq!(identity.audience, "fraud.example");
    assert_eq!(identity.authorize.unwrap().verb, "predict");
    assert_eq!(pod(&own).service_account_name.as_deref(), Some("fraud-sa"));
    let objects = own.identity.as_ref().unwrap();
    assert!(objects.service_account.is_none());
    assert_eq!(
        objects.role_binding.subjects.as_ref().unwrap()[0].name,
        "fraud-sa"
    );

    let routed = build_in_apps(
        "  extensions:\n    sequence: {enabled: true, routing: Sidecar}\n  auth:\n    inference: {from: Identity}\n",
    );
    assert_eq!(
        pod(&routed).service_account_name.as_deref(),
        Some("resnet-sequence-peers")
    );
    let objects = routed.identity.as_ref().unwrap();
    assert!(objects.service_account.is_none());
    assert_eq!(
        objects.role_binding.subjects.as_ref().unwrap()[0].name,
        "resnet-sequence-peers"
    );
    // Anyone (the default) renders none of it.
    assert!(build("").identity.is_none());
    assert!(server(&build("")).identity.is_none());
}

#[test]
fn the_control_apis_by_identity_ask_a_verb_of_their_own() {
    use infergate_config::RestrictedCategory as Api;
    // Alone: the control APIs take a token for the service's audience and the control verb;
    // inference stays open, and the pod-only rule is not rendered (callers come from anywhere).
    let control = build_in_apps("  auth:\n    controlAPIs: {from: Identity}\n");
    let settings = server(&control);
    assert!(
        settings.pod_only_api.is_empty(),
        "{:?}",
        settings.pod_only_api
    );
    let identity = settings.identity.expect("server.identity");
    assert_eq!(identity.apis, ["model-repository,logging,trace"]);
    assert_eq!(identity.audience, "infergate.dev/apps/resnet");
    let rule = identity.authorize.expect("authorize");
    for api in [Api::ModelRepository, Api::Logging, Api::Trace] {
        assert_eq!(rule.verb_for(api), "control");
    }
    // The pods get what asking the API server takes, as for inference.
    assert!(control.identity.is_some());
    assert_eq!(
        token_holders(&control),
        (Some(false), vec!["infergate".to_string()])
    );

    // With inference: one audience, a verb for each, so that one Role may grant inference and
    // another the control APIs.
    let both = build_in_apps(
        "  auth:\n    inference: {from: Identity, audience: fraud.example}\n    controlAPIs: {from: Identity, verb: administer}\n",
    );
    let identity = server(&both).identity.unwrap();
    assert_eq!(
        identity.apis,
        ["inference", "model-repository,logging,trace"]
    );
    assert_eq!(identity.audience, "fraud.example");
    let rule = identity.authorize.unwrap();
    assert_eq!(rule.verb_for(Api::Inference), "infer");
    for api in [Api::ModelRepository, Api::Logging, Api::Trace] {
        assert_eq!(rule.verb_for(api), "administer");
    }
    // What the sidecar is given, it accepts.
    let config = common::sidecar_config(&both);
    assert_eq!(config.validate(&[]), Ok(()));
}
