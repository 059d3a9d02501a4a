//! Reconcile scenarios against a mock API server (tower-test): the exact requests the
//! controller sends for create, no-op, drift, scale-down and API errors.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use common::mock::{self, Seen, Step, not_found, server_error, step};
use common::{MINIMAL, with_spec};
use http::{Method, StatusCode};
use infergate_operator::controller::apply;
use infergate_operator::controller::metrics::Metrics;
use infergate_operator::controller::probe::Prober;
use infergate_operator::controller::rbac;
use infergate_operator::controller::reconcile::{self, Context, backoff};
use infergate_operator::controller::status::{self, Observed};
use infergate_operator::crd::InferenceService;
use infergate_operator::render::{self, Children, OperatorSettings};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use serde_json::{Value, json};

const NS: &str = "/namespaces/ml";

/// Runs `reconcile` against a server that expects exactly `steps`, in order.
async fn run(
    isvc: InferenceService,
    steps: Vec<Step>,
) -> (Result<Action, reconcile::Error>, Vec<Seen>, Arc<Context>) {
    let (client, server) = mock::serve(steps);
    let ctx = Arc::new(Context::new(
        client,
        OperatorSettings::default(),
        Prober::new(Duration::from_millis(200), HashMap::new()),
        Arc::new(Metrics::default()),
        None,
    ));
    let result = reconcile::reconcile(Arc::new(isvc), ctx.clone()).await;
    let seen = server.await.unwrap();
    for s in &seen {
        let (group, resource, verb) = s.permission();
        assert!(
            rbac::allows(rbac::CLUSTER_RULES, &group, &resource, verb),
            "the ClusterRole does not allow {verb} {group}/{resource}"
        );
    }
    (result, seen, ctx)
}

/// A resource without the NetworkPolicy rendered by default: these tests follow the apply of a
/// few children step by step, and the policy's own apply is no different from the PDB's
/// (`tests/network.rs` checks what is rendered, `tests/cluster` that it is stored and deleted).
fn service(replicas: i32) -> InferenceService {
    let mut isvc = with_spec(
        "svc",
        &format!("  replicas: {replicas}\n{MINIMAL}  networkPolicy: {{enabled: false}}\n"),
    );
    isvc.metadata.generation = Some(1);
    isvc
}

fn children(isvc: &InferenceService) -> Children {
    render::build_children(isvc, &OperatorSettings::default()).unwrap()
}

fn value<T: serde::Serialize>(object: &T) -> Value {
    serde_json::to_value(object).unwrap()
}

/// What the server would hold after the operator applied `object`: its hash annotation, a
/// resourceVersion and a uid added.
fn stored<T: serde::Serialize>(object: &T) -> Value {
    let mut v = apply::as_applied(object).unwrap();
    v["metadata"]["resourceVersion"] = json!("7");
    v["metadata"]["uid"] = json!("0b9d2f8e-1111-2222-3333-444455556666");
    v
}

fn cm_path() -> String {
    format!("/api/v1{NS}/configmaps/svc-sidecar")
}
/// The read that finds no headless Service of sequence peers (and so none of their objects).
fn no_peer_objects() -> Step {
    missing(&format!("/api/v1{NS}/services/svc-peers"))
}
/// The read that finds no Role of identity checks (and so none of their objects).
fn no_identity_objects() -> Step {
    missing(&format!(
        "/apis/rbac.authorization.k8s.io/v1{NS}/roles/svc-identity"
    ))
}
fn deploy_path() -> String {
    format!("/apis/apps/v1{NS}/deployments/svc")
}
fn svc_path() -> String {
    format!("/api/v1{NS}/services/svc")
}
fn pdb_path() -> String {
    format!("/apis/policy/v1{NS}/poddisruptionbudgets/svc")
}
fn pods_path() -> String {
    format!("/api/v1{NS}/pods")
}
fn status_path() -> String {
    format!("/apis/infergate.dev/v1alpha1{NS}/inferenceservices/svc/status")
}

fn empty_pods() -> Value {
    json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": []})
}

/// The reads of a reconcile whose ConfigMap, Deployment and Service are already as desired.
fn unchanged_children(want: &Children) -> Vec<Step> {
    vec![
        get(&cm_path(), stored(&want.config_map)),
        no_peer_objects(),
        no_identity_objects(),
        get(&deploy_path(), stored(&want.deployment)),
        get(&svc_path(), stored(&want.service)),
    ]
}

/// The end of a reconcile: list the pods, then (when it changed) write status. The Deployment
/// is not read again: the apply step already returned it.
fn observe(isvc: &InferenceService, writes_status: bool) -> Vec<Step> {
    let mut steps = vec![get(&pods_path(), empty_pods())];
    if writes_status {
        steps.push(step(
            Method::PATCH,
            &status_path(),
            StatusCode::OK,
            value(isvc),
        ));
    }
    steps
}

/// A GET answered with `body`.
fn get(path: &str, body: Value) -> Step {
    step(Method::GET, path, StatusCode::OK, body)
}

/// An apply that creates the object at `path`.
fn created(path: &str, body: Value) -> Step {
    step(Method::PATCH, path, StatusCode::CREATED, body)
}

/// A GET of an object that does not exist.
fn missing(path: &str) -> Step {
    step(Method::GET, path, StatusCode::NOT_FOUND, not_found())
}

/// The reads that find no HorizontalPodAutoscaler, NetworkPolicy, ScaledObject, PodMonitor,
/// Certificate or canary (a spec without autoscaling, monitoring, an issuer or a canary still
/// looks, so that one dropped from the spec is deleted).
fn no_autoscaler_or_monitor() -> Vec<Step> {
    vec![
        missing(&format!(
            "/apis/autoscaling/v2{NS}/horizontalpodautoscalers/svc"
        )),
        missing(&format!(
            "/apis/networking.k8s.io/v1{NS}/networkpolicies/svc"
        )),
        missing(&format!("/apis/keda.sh/v1alpha1{NS}/scaledobjects/svc")),
        missing(&format!(
            "/apis/monitoring.coreos.com/v1{NS}/podmonitors/svc"
        )),
        missing(&format!(
            "/apis/gateway.networking.k8s.io/v1{NS}/httproutes/svc"
        )),
        missing(&format!(
            "/apis/gateway.networking.k8s.io/v1{NS}/grpcroutes/svc"
        )),
        missing(&format!(
            "/apis/cert-manager.io/v1{NS}/certificates/svc-tls"
        )),
        missing(&format!("/api/v1{NS}/configmaps/svc-canary-sidecar")),
        missing(&format!("/api/v1{NS}/configmaps/svc-activator")),
    ]
}

#[tokio::test]
async fn create_applies_every_child_then_writes_status() {
    let isvc = service(2);
    let want = children(&isvc);
    let pdb = want.pdb.clone().unwrap();
    let steps = [
        vec![
            missing(&cm_path()),
            created(&cm_path(), stored(&want.config_map)),
            no_peer_objects(),
            no_identity_objects(),
            missing(&deploy_path()),
            created(&deploy_path(), stored(&want.deployment)),
            missing(&svc_path()),
            created(&svc_path(), stored(&want.service)),
            missing(&pdb_path()),
            created(&pdb_path(), stored(&pdb)),
        ],
        no_autoscaler_or_monitor(),
        observe(&isvc, true),
    ]
    .concat();
    let (result, seen, ctx) = run(isvc.clone(), steps).await;
    assert_eq!(result.unwrap(), Action::requeue(Duration::from_secs(10)));
    for s in seen.iter().filter(|s| s.method == Method::PATCH) {
        assert!(s.query.contains("fieldManager=infergate-operator"), "{s:?}");
        assert!(s.query.contains("force=true"), "{s:?}");
    }
    // The applied bodies are exactly the rendered objects, with the hash of what was applied.
    let mut expected = value(&want.deployment);
    let hash = seen[5].body["metadata"]["annotations"][apply::APPLIED_HASH_ANNOTATION].clone();
    assert!(hash.as_str().is_some_and(|h| h.len() == 16), "{hash}");
    expected["metadata"]["annotations"] = json!({apply::APPLIED_HASH_ANNOTATION: hash});
    assert_eq!(seen[5].body, expected);
    assert_eq!(seen[5].body, apply::as_applied(&want.deployment).unwrap());
    assert_eq!(seen[9].body, apply::as_applied(&pdb).unwrap());
    let pods = &seen[19];
    assert!(
        pods.query
            .contains("labelSelector=app.kubernetes.io%2Finstance%3Dsvc"),
        "{pods:?}"
    );
    let status = &seen[20].body;
    assert_eq!(status["apiVersion"], "infergate.dev/v1alpha1");
    assert_eq!(status["kind"], "InferenceService");
    assert_eq!(status["status"]["observedGeneration"], 1);
    assert_eq!(status["status"]["selector"], render::selector_string(&isvc));
    let ready = status["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap();
    assert_eq!(ready["status"], "False");
    assert_eq!(ctx.metrics.writes.get(), 4);
}

#[tokio::test]
async fn unchanged_children_and_status_cause_no_write() {
    let mut isvc = service(1);
    let want = children(&isvc);
    let deployment: k8s_openapi::api::apps::v1::Deployment =
        serde_json::from_value(stored(&want.deployment)).unwrap();
    let now = Time(Timestamp::from_second(1_700_000_000).unwrap());
    isvc.status = Some(status::compute(
        &isvc,
        &Observed {
            deployment: Some(&deployment),
            pods: &[],
            refusal: None,
            reports: &[],
            now,
        },
        None,
    ));
    let steps = [
        unchanged_children(&want),
        vec![missing(&pdb_path())],
        no_autoscaler_or_monitor(),
        observe(&isvc, false),
    ]
    .concat();
    let (result, seen, ctx) = run(isvc, steps).await;
    result.unwrap();
    assert!(seen.iter().all(|s| s.method == Method::GET), "{seen:#?}");
    assert_eq!(ctx.metrics.unchanged.get(), 3);
}

#[tokio::test]
async fn drifted_child_is_applied_again() {
    let isvc = service(1);
    let want = children(&isvc);
    let mut drifted = stored(&want.deployment);
    drifted["spec"]["replicas"] = json!(5); // someone scaled the Deployment by hand
    let seen = deployment_applied_again(&isvc, drifted).await;
    assert_eq!(seen[4].body["spec"]["replicas"], 1);
}

/// A reconcile that finds the Deployment stored as `stored_deployment` (everything else as
/// desired) and applies it again; the requests seen (the apply is the third).
async fn deployment_applied_again(isvc: &InferenceService, stored_deployment: Value) -> Vec<Seen> {
    let want = children(isvc);
    let steps = [
        vec![
            get(&cm_path(), stored(&want.config_map)),
            no_peer_objects(),
            no_identity_objects(),
            get(&deploy_path(), stored_deployment),
            step(
                Method::PATCH,
                &deploy_path(),
                StatusCode::OK,
                stored(&want.deployment),
            ),
            get(&svc_path(), stored(&want.service)),
            missing(&pdb_path()),
        ],
        no_autoscaler_or_monitor(),
        observe(isvc, true),
    ]
    .concat();
    let (result, seen, _) = run(isvc.clone(), steps).await;
    result.unwrap();
    seen
}

#[tokio::test]
async fn a_field_removed_from_the_spec_is_applied_again() {
    // The Deployment as applied for a spec with a nodeSelector; the spec no longer has one. The
    // stored object holds every desired field (and one more), yet it must be applied so that
    // server-side apply drops the nodeSelector.
    let before = with_spec(
        "svc",
        &format!("  replicas: 1\n{MINIMAL}  pod:\n    nodeSelector: {{pool: a}}\n"),
    );
    let isvc = service(1);
    let old = stored(&children(&before).deployment);
    assert_eq!(old["spec"]["template"]["spec"]["nodeSelector"]["pool"], "a");
    let seen = deployment_applied_again(&isvc, old).await;
    assert!(seen[3].body["spec"]["template"]["spec"]["nodeSelector"].is_null());
}

#[tokio::test]
async fn scaling_below_two_deletes_our_pdb_only() {
    let isvc = service(1);
    let want = children(&isvc);
    let pdb = children(&service(2)).pdb.unwrap(); // the PDB a 2-replica spec made, owned by us
    let steps = [
        unchanged_children(&want),
        vec![
            get(&pdb_path(), stored(&pdb)),
            step(Method::DELETE, &pdb_path(), StatusCode::OK, stored(&pdb)),
        ],
        no_autoscaler_or_monitor(),
        observe(&isvc, true),
    ]
    .concat();
    let (result, _, ctx) = run(isvc.clone(), steps).await;
    result.unwrap();
    assert_eq!(ctx.metrics.deletes.get(), 1);

    // A PDB of the same name that someone else owns is left alone.
    let mut foreign = stored(&pdb);
    foreign["metadata"]["ownerReferences"] = json!([]);
    let steps = [
        unchanged_children(&want),
        vec![get(&pdb_path(), foreign)],
        no_autoscaler_or_monitor(),
        observe(&isvc, true),
    ]
    .concat();
    run(isvc, steps).await.0.unwrap();
}

/// A reconcile that finds `foreign` where its Service would go: the Service is not written, and
/// the status says why. Returns the Ready condition written.
async fn refused_by(foreign: Value) -> Value {
    let isvc = service(1);
    let want = children(&isvc);
    let steps = vec![
        get(&cm_path(), stored(&want.config_map)),
        no_peer_objects(),
        no_identity_objects(),
        get(&deploy_path(), stored(&want.deployment)),
        get(&svc_path(), foreign),
        step(Method::PATCH, &status_path(), StatusCode::OK, value(&isvc)),
    ];
    let (result, seen, ctx) = run(isvc, steps).await;
    // Retried later (the other object may go away), without backoff: nothing failed.
    assert_eq!(result.unwrap(), Action::requeue(Duration::from_secs(10)));
    assert_eq!(seen.len(), 6, "{seen:?}");
    assert!(
        seen[..5].iter().all(|s| s.method == Method::GET),
        "{seen:?}"
    );
    assert_eq!(ctx.metrics.writes.get(), 0);
    seen[5].body["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap()
        .clone()
}

#[tokio::test]
async fn an_object_someone_else_made_is_never_taken_over() {
    let want = children(&service(1));
    let mut theirs = stored(&want.service);
    theirs["metadata"]["ownerReferences"] = json!([]);
    theirs["metadata"]["managedFields"] = json!([{"manager": "kubectl-client-side-apply",
        "operation": "Update", "apiVersion": "v1"}]);
    let ready = refused_by(theirs).await;
    assert_eq!(ready["status"], "False");
    assert_eq!(ready["reason"], "Conflict");
    assert_eq!(
        ready["message"],
        "Service 'svc' already exists and is not controlled by this InferenceService (no \
         controller; written by kubectl-client-side-apply): it is left as it is; delete or rename \
         it, or rename the InferenceService"
    );

    // Controlled by something else, an earlier InferenceService of the same name included.
    let mut other = stored(&want.service);
    other["metadata"]["ownerReferences"][0]["uid"] = json!("another-uid");
    let ready = refused_by(other).await;
    assert_eq!(ready["reason"], "Conflict");
    assert!(
        ready["message"]
            .as_str()
            .unwrap()
            .contains("(controlled by InferenceService 'svc')"),
        "{ready}"
    );
}

#[tokio::test]
async fn api_errors_fail_the_reconcile_and_back_off() {
    let isvc = service(1);
    let want = children(&isvc);
    let steps = vec![
        get(&cm_path(), stored(&want.config_map)),
        no_peer_objects(),
        no_identity_objects(),
        missing(&deploy_path()),
        step(
            Method::PATCH,
            &deploy_path(),
            StatusCode::INTERNAL_SERVER_ERROR,
            server_error(),
        ),
    ];
    let (result, _, ctx) = run(isvc.clone(), steps).await;
    let error = result.unwrap_err();
    assert!(
        error.to_string().contains("etcdserver: request timed out"),
        "{error}"
    );
    let isvc = Arc::new(isvc);
    assert_eq!(
        reconcile::error_policy(isvc.clone(), &error, ctx.clone()),
        Action::requeue(Duration::from_secs(1))
    );
    assert_eq!(
        reconcile::error_policy(isvc.clone(), &error, ctx.clone()),
        Action::requeue(Duration::from_secs(2))
    );
    assert_eq!(
        reconcile::error_policy(isvc, &error, ctx.clone()),
        Action::requeue(Duration::from_secs(4))
    );
    assert_eq!(ctx.metrics.reconcile_errors.get(), 1);
    assert_eq!(backoff(30), Duration::from_secs(300));
}

#[tokio::test]
async fn backoff_state_goes_with_a_deleted_resource() {
    use kube::runtime::{reflector, watcher};

    let (client, _server) = mock::serve(Vec::new()); // no API call is made here
    let mut ctx = Context::new(
        client,
        OperatorSettings::default(),
        Prober::new(Duration::from_millis(200), HashMap::new()),
        Arc::new(Metrics::default()),
        None,
    );
    let (store, mut writer) = reflector::store::<InferenceService>();
    let kept = service(1);
    let mut deleted = service(1);
    deleted.metadata.name = Some("gone".into());
    writer.apply_watcher_event(&watcher::Event::Apply(kept.clone()));
    writer.apply_watcher_event(&watcher::Event::Apply(deleted.clone()));
    ctx.known = Some(store);
    let ctx = Arc::new(ctx);
    let error = reconcile::Error::NoNamespace;
    reconcile::error_policy(Arc::new(deleted.clone()), &error, ctx.clone());
    reconcile::error_policy(Arc::new(kept.clone()), &error, ctx.clone());
    assert_eq!(ctx.failing(), 2);
    // "gone" is deleted while failing: the next failure of another resource drops its count.
    writer.apply_watcher_event(&watcher::Event::Delete(deleted));
    reconcile::error_policy(Arc::new(kept), &error, ctx.clone());
    assert_eq!(ctx.failing(), 1);
}

#[tokio::test]
async fn conflicts_are_errors_too() {
    let isvc = service(1);
    let conflict = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "Apply failed with 1 conflict", "reason": "Conflict", "code": 409});
    let steps = vec![
        missing(&cm_path()),
        step(Method::PATCH, &cm_path(), StatusCode::CONFLICT, conflict),
    ];
    let (result, _, _) = run(isvc, steps).await;
    assert!(
        matches!(result, Err(reconcile::Error::Kube(kube::Error::Api(ref e))) if e.code == 409)
    );
}

/// An API server that accepts the connection and never answers: the reconcile gives up after
/// `reconcile_timeout` instead of holding the resource for ever, and is retried with backoff.
#[tokio::test(start_paused = true)]
async fn an_api_server_that_never_answers_times_out_and_backs_off() {
    let (api, mut handle) = tower_test::mock::pair::<
        http::Request<kube::client::Body>,
        http::Response<kube::client::Body>,
    >();
    let mut ctx = Context::new(
        kube::Client::new(api, "default"),
        OperatorSettings::default(),
        Prober::new(Duration::from_millis(200), HashMap::new()),
        Arc::new(Metrics::default()),
        None,
    );
    ctx.reconcile_timeout = Duration::from_secs(30);
    let ctx = Arc::new(ctx);
    // Hold every request without answering (dropping the reply would be an error, not a hang).
    let held = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Some((request, reply)) = handle.next_request().await {
            held.push((request.uri().path().to_string(), reply));
        }
        held.len()
    });
    let isvc = Arc::new(service(1));
    let started = tokio::time::Instant::now();
    let error = reconcile::reconcile(isvc.clone(), ctx.clone())
        .await
        .unwrap_err();
    assert!(matches!(error, reconcile::Error::Timeout(d) if d == Duration::from_secs(30)));
    assert_eq!(started.elapsed(), Duration::from_secs(30));
    assert!(error.to_string().contains("not answering"), "{error}");
    assert_eq!(ctx.metrics.reconcile_errors.get(), 1);
    assert_eq!(
        reconcile::error_policy(isvc.clone(), &error, ctx.clone()),
        Action::requeue(Duration::from_secs(1))
    );
    assert_eq!(
        reconcile::error_policy(isvc, &error, ctx.clone()),
        Action::requeue(Duration::from_secs(2))
    );
    drop(ctx);
    assert_eq!(
        held.await.unwrap(),
        1,
        "one request was in flight when it gave up"
    );
}

#[tokio::test]
async fn invalid_spec_is_reported_in_status_without_children() {
    // A container name the sidecar reserves: the schema lets it through, validation does not.
    let spec =
        format!("{MINIMAL}  pod:\n    containers:\n    - name: infergate\n      image: busybox\n");
    let mut isvc = with_spec("svc", &spec);
    isvc.metadata.generation = Some(3);
    assert!(
        render::build_children(&isvc, &OperatorSettings::default()).is_err(),
        "the fixture must be invalid"
    );
    let steps = vec![step(
        Method::PATCH,
        &status_path(),
        StatusCode::OK,
        value(&isvc),
    )];
    let (result, seen, _) = run(isvc, steps).await;
    assert_eq!(result.unwrap(), Action::await_change());
    let ready = seen[0].body["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap()
        .clone();
    assert_eq!(ready["reason"], "InvalidSpec");
    assert!(
        ready["message"].as_str().unwrap().contains("infergate"),
        "{ready}"
    );
}
