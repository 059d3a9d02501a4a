//! Lease-based leader election against a scripted API server.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

mod common;

use std::time::Duration;

use common::mock::{self, not_found, step};
use http::{Method, StatusCode};
use infergate_operator::controller::leader::{Attempt, Election};
use infergate_operator::controller::rbac;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use serde_json::{Value, json};

const PATH: &str =
    "/apis/coordination.k8s.io/v1/namespaces/infergate-system/leases/infergate-operator";
const COLLECTION: &str = "/apis/coordination.k8s.io/v1/namespaces/infergate-system/leases";

fn election() -> Election {
    Election {
        lease_name: "infergate-operator".into(),
        identity: "me".into(),
        lease_duration: Duration::from_secs(15),
        retry_period: Duration::from_secs(2),
    }
}

fn lease(holder: &str, renewed_seconds_ago: i64, transitions: i32) -> Value {
    let renewed =
        Timestamp::from_second(Timestamp::now().as_second() - renewed_seconds_ago).unwrap();
    json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "infergate-operator", "namespace": "infergate-system", "resourceVersion": "41"},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15,
                 "renewTime": format!("{renewed:.6}"), "leaseTransitions": transitions},
    })
}

async fn attempt(steps: Vec<common::mock::Step>) -> (Attempt, Vec<common::mock::Seen>) {
    let (client, server) = mock::serve(steps);
    let api: Api<Lease> = Api::namespaced(client, "infergate-system");
    let result = election().try_acquire(&api).await.unwrap();
    let seen = server.await.unwrap();
    for s in &seen {
        let (group, resource, verb) = s.permission();
        assert!(
            rbac::allows(rbac::LEADER_ELECTION_RULES, &group, &resource, verb),
            "{verb} {group}/{resource}"
        );
    }
    (result, seen)
}

#[tokio::test]
async fn a_missing_lease_is_created_and_won() {
    let (result, seen) = attempt(vec![
        step(Method::GET, PATH, StatusCode::NOT_FOUND, not_found()),
        step(
            Method::POST,
            COLLECTION,
            StatusCode::CREATED,
            lease("me", 0, 0),
        ),
    ])
    .await;
    assert_eq!(result, Attempt::Leader);
    assert_eq!(seen[1].body["spec"]["holderIdentity"], "me");
    assert_eq!(seen[1].body["spec"]["leaseDurationSeconds"], 15);
}

#[tokio::test]
async fn a_live_lease_of_another_holder_is_left_alone() {
    let (result, seen) = attempt(vec![step(
        Method::GET,
        PATH,
        StatusCode::OK,
        lease("other", 3, 2),
    )])
    .await;
    assert_eq!(
        result,
        Attempt::Follower {
            holder: "other".into()
        }
    );
    assert_eq!(
        seen.len(),
        1,
        "no write while another holder's lease is valid"
    );
}

#[tokio::test]
async fn an_expired_lease_is_taken_over_with_its_resource_version() {
    let (result, seen) = attempt(vec![
        step(Method::GET, PATH, StatusCode::OK, lease("other", 60, 2)),
        step(Method::PUT, PATH, StatusCode::OK, lease("me", 0, 3)),
    ])
    .await;
    assert_eq!(result, Attempt::Leader);
    let written = &seen[1].body;
    assert_eq!(written["spec"]["holderIdentity"], "me");
    assert_eq!(written["spec"]["leaseTransitions"], 3);
    assert_eq!(
        written["metadata"]["resourceVersion"], "41",
        "optimistic concurrency"
    );
}

#[tokio::test]
async fn our_own_lease_is_renewed_and_a_lost_race_makes_a_follower() {
    let (result, seen) = attempt(vec![
        step(Method::GET, PATH, StatusCode::OK, lease("me", 5, 1)),
        step(Method::PUT, PATH, StatusCode::OK, lease("me", 0, 1)),
    ])
    .await;
    assert_eq!(result, Attempt::Leader);
    assert_eq!(
        seen[1].body["spec"]["leaseTransitions"], 1,
        "renewal is not a transition"
    );

    let conflict = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "the object has been modified", "reason": "Conflict", "code": 409});
    let (result, _) = attempt(vec![
        step(Method::GET, PATH, StatusCode::OK, lease("other", 60, 2)),
        step(Method::PUT, PATH, StatusCode::CONFLICT, conflict),
    ])
    .await;
    assert!(matches!(result, Attempt::Follower { .. }));
}

#[tokio::test]
async fn release_clears_our_holder_and_leaves_another_holders_lease_alone() {
    let (client, server) = mock::serve(vec![
        step(Method::GET, PATH, StatusCode::OK, lease("me", 1, 4)),
        step(Method::PUT, PATH, StatusCode::OK, lease("", 0, 4)),
    ]);
    let api: Api<Lease> = Api::namespaced(client, "infergate-system");
    assert!(election().release(&api).await.unwrap());
    let seen = server.await.unwrap();
    let written = &seen[1].body;
    assert!(
        written["spec"]
            .get("holderIdentity")
            .is_none_or(Value::is_null)
    );
    assert_eq!(written["spec"]["leaseDurationSeconds"], 1);
    assert_eq!(written["metadata"]["resourceVersion"], "41");

    let (client, server) = mock::serve(vec![step(
        Method::GET,
        PATH,
        StatusCode::OK,
        lease("other", 1, 5),
    )]);
    let api: Api<Lease> = Api::namespaced(client, "infergate-system");
    assert!(!election().release(&api).await.unwrap());
    assert_eq!(server.await.unwrap().len(), 1, "nothing written");
}
