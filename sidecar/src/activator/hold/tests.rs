use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;

fn hold(max_calls: usize, max_bytes: u64) -> Arc<Hold> {
    Arc::new(Hold::new(Limits {
        max_calls,
        max_bytes,
        timeout: Duration::from_secs(30),
    }))
}

#[tokio::test]
async fn held_calls_go_on_in_the_order_they_came_once_ready() {
    let hold = hold(10, 1 << 20);
    let order = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let mut waiting = Vec::new();
    for i in 0..5 {
        let held = hold.admit().unwrap();
        let (hold, order) = (hold.clone(), order.clone());
        waiting.push(tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(5);
            let turn = hold.wait(&held, deadline, false).await.unwrap();
            order.lock().push(i);
            drop(turn);
        }));
        // Each queues before the next comes.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(order.lock().is_empty(), "nothing goes on while starting");
    assert_eq!(hold.held().0, 5);
    let took = hold.set_phase(Phase::Ready).await;
    assert!(took.is_some(), "a start with calls waiting is timed");
    for w in waiting {
        w.await.unwrap();
    }
    assert_eq!(*order.lock(), vec![0, 1, 2, 3, 4]);
    assert_eq!(hold.held(), (0, 0), "every call left the hold");
}

#[tokio::test]
async fn calls_and_bytes_past_the_caps_are_refused() {
    let hold = hold(2, 100);
    let mut first = hold.admit().unwrap();
    let _second = hold.admit().unwrap();
    assert_eq!(hold.admit().err(), Some(Refusal::Full));
    first.take_bytes(60).unwrap();
    assert_eq!(first.take_bytes(41), Err(Refusal::Full));
    first.take_bytes(40).unwrap();
    assert_eq!(hold.held(), (2, 100));
    drop(first);
    assert_eq!(hold.held(), (1, 0));
    assert!(hold.admit().is_ok(), "a place freed is taken again");
}

#[tokio::test]
async fn a_failure_reaches_the_held_calls_at_once() {
    let hold = hold(10, 1 << 20);
    let held = hold.admit().unwrap();
    let waiter = {
        let hold = hold.clone();
        tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(30);
            hold.wait(&held, deadline, false).await.err()
        })
    };
    tokio::time::sleep(Duration::from_millis(10)).await;
    hold.set_phase(Phase::Failed(Arc::from("ImagePullFailed: no such image")))
        .await;
    let refusal = tokio::time::timeout(Duration::from_secs(1), waiter)
        .await
        .expect("answered at once")
        .unwrap();
    assert_eq!(
        refusal,
        Some(Refusal::Failed(Arc::from("ImagePullFailed: no such image")))
    );
}

#[tokio::test]
async fn the_hold_ends_at_its_deadline_or_the_callers() {
    let hold = hold(10, 1 << 20);
    let held = hold.admit().unwrap();
    let soon = Instant::now() + Duration::from_millis(30);
    assert_eq!(
        hold.wait(&held, soon, false).await.err(),
        Some(Refusal::TimedOut)
    );
    let soon = Instant::now() + Duration::from_millis(30);
    assert_eq!(
        hold.wait(&held, soon, true).await.err(),
        Some(Refusal::Deadline)
    );
}

#[tokio::test]
async fn the_hold_closes_again_when_no_sidecar_is_ready() {
    let hold = hold(10, 1 << 20);
    hold.set_phase(Phase::Ready).await;
    let held = hold.admit().unwrap();
    let now = Instant::now() + Duration::from_secs(1);
    let turn = hold.wait(&held, now, false).await;
    assert!(turn.is_ok(), "open while ready");
    drop(turn);
    hold.set_phase(Phase::Starting).await;
    let soon = Instant::now() + Duration::from_millis(30);
    assert_eq!(
        hold.wait(&held, soon, false).await.err(),
        Some(Refusal::TimedOut),
        "closed again"
    );
}
