use infergate_proto::model_config;

use super::*;
use crate::core::params::ParamValue;

/// A one-instance model with this `dynamic_batching` body.
fn queue(batching: &str) -> Arc<Queue> {
    let text = format!("name: \"m\" dynamic_batching {{ {batching} }}");
    let config = model_config::parse_text(&text).unwrap();
    Queue::for_model(&config, 1).unwrap().unwrap()
}

fn place(queue: &Queue, priority: u64, timeout_us: u64) -> Place {
    let mut parameters = Parameters::default();
    parameters.insert("priority", ParamValue::Uint(priority));
    parameters.insert("timeout", ParamValue::Uint(timeout_us));
    queue.place(Some(&parameters))
}

/// Starts a request's wait for the instance; its answer arrives on the returned channel.
fn spawn_admit(
    queue: &Arc<Queue>,
    place: Place,
    done: &tokio::sync::mpsc::UnboundedSender<(&'static str, Admitted)>,
    name: &'static str,
) -> tokio::task::JoinHandle<()> {
    let (queue, done) = (queue.clone(), done.clone());
    tokio::spawn(async move {
        let answer = queue.admit(place, "[request id: <id_unknown>] ").await;
        let _ = done.send((name, answer));
    })
}

/// Lets every spawned task run as far as it can.
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_free_instance_runs_at_once_and_a_busy_one_is_waited_for_in_order() {
    let q = queue("");
    let first = q.admit(place(&q, 0, 0), "").await.unwrap();
    let (done, mut answers) = tokio::sync::mpsc::unbounded_channel();
    spawn_admit(&q, place(&q, 0, 0), &done, "second");
    settle().await;
    spawn_admit(&q, place(&q, 0, 0), &done, "third");
    settle().await;
    assert_eq!(q.counts(), (1, 2));
    assert!(
        answers.try_recv().is_err(),
        "nothing runs while the instance is busy"
    );
    drop(first);
    let (name, second) = answers.recv().await.unwrap();
    assert_eq!(name, "second");
    assert_eq!(q.counts(), (1, 1), "the instance passed on, not freed");
    drop(second.unwrap());
    let (name, third) = answers.recv().await.unwrap();
    assert_eq!(name, "third");
    drop(third.unwrap());
    assert_eq!(q.counts(), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn a_full_level_refuses_in_tritons_words() {
    let q = queue("default_queue_policy { max_queue_size: 1 }");
    let _running = q.admit(place(&q, 0, 0), "").await.unwrap();
    let (done, _answers) = tokio::sync::mpsc::unbounded_channel();
    spawn_admit(&q, place(&q, 0, 0), &done, "queued");
    settle().await;
    let refused = Error::from(
        q.admit(place(&q, 0, 0), "[request id: 7] ")
            .await
            .unwrap_err(),
    );
    assert_eq!(refused.code, crate::error::Code::Unavailable);
    assert_eq!(
        refused.message,
        "[request id: 7] Exceeds maximum queue size"
    );
}

#[tokio::test(start_paused = true)]
async fn without_levels_only_the_default_policy_applies() {
    let q = queue("priority_queue_policy { key: 0 value { max_queue_size: 1 } }");
    let _running = q.admit(place(&q, 0, 0), "").await.unwrap();
    let (done, _answers) = tokio::sync::mpsc::unbounded_channel();
    for name in ["first", "second"] {
        spawn_admit(&q, place(&q, 0, 0), &done, name);
        settle().await;
    }
    assert_eq!(
        q.counts(),
        (1, 2),
        "the unbounded default policy queued both"
    );
}

#[tokio::test(start_paused = true)]
async fn the_highest_level_goes_first_and_unknown_levels_take_the_default() {
    let q = queue("priority_levels: 3 default_priority_level: 3");
    assert_eq!(place(&q, 0, 0).level, 3);
    assert_eq!(place(&q, 4, 0).level, 3, "past the last level: the default");
    assert_eq!(place(&q, 2, 0).level, 2);
    assert_eq!(q.place(None).level, 3, "plain parameters: the default");
    let running = q.admit(place(&q, 0, 0), "").await.unwrap();
    let (done, mut answers) = tokio::sync::mpsc::unbounded_channel();
    for (name, priority) in [("low", 3), ("middle", 2), ("high", 1), ("high-2", 1)] {
        spawn_admit(&q, place(&q, priority, 0), &done, name);
        settle().await;
    }
    drop(running);
    let mut order = Vec::new();
    for _ in 0..4 {
        let (name, permit) = answers.recv().await.unwrap();
        order.push(name);
        drop(permit.unwrap());
    }
    assert_eq!(order, ["high", "high-2", "middle", "low"]);
}

#[tokio::test(start_paused = true)]
async fn a_request_waiting_past_its_timeout_is_rejected() {
    let q = queue("default_queue_policy { default_timeout_microseconds: 1000 }");
    let running = q.admit(place(&q, 0, 0), "").await.unwrap();
    let (done, mut answers) = tokio::sync::mpsc::unbounded_channel();
    spawn_admit(&q, place(&q, 0, 0), &done, "late");
    let (_, answer) = answers.recv().await.unwrap();
    assert_eq!(answer.unwrap_err(), Refused::TimedOut);
    let error = Error::from(Refused::TimedOut);
    assert_eq!(error.code, crate::error::Code::Unavailable);
    assert_eq!(error.message, TIMEOUT_EXPIRED);
    assert_eq!(q.counts(), (1, 0), "it left the queue");
    drop(running);
    assert_eq!(q.counts(), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn a_request_timeout_only_shortens_an_overridable_default() {
    let q = queue(
        "default_queue_policy { default_timeout_microseconds: 10000000 allow_timeout_override: true }",
    );
    let now = Instant::now();
    let deadline = |timeout_us| {
        let p = place(&q, 0, timeout_us);
        q.policy(p.level).deadline(now, p.timeout)
    };
    assert_eq!(deadline(1000), Some(now + Duration::from_millis(1)));
    assert_eq!(deadline(20_000_000), Some(now + Duration::from_secs(10)));
    assert_eq!(deadline(0), Some(now + Duration::from_secs(10)));
    let fixed = queue("default_queue_policy { default_timeout_microseconds: 10000000 }");
    let p = place(&fixed, 0, 1000);
    assert_eq!(
        fixed.policy(p.level).deadline(now, p.timeout),
        Some(now + Duration::from_secs(10)),
        "no override allowed"
    );
    let none = queue("default_queue_policy { allow_timeout_override: true }");
    let p = place(&none, 0, 1000);
    assert_eq!(
        none.policy(p.level).deadline(now, p.timeout),
        None,
        "Triton's rule: only a shorter timeout than the default replaces it"
    );
}

#[tokio::test(start_paused = true)]
async fn a_delayed_request_goes_behind_its_level_but_before_lower_levels() {
    let q = queue(
        "priority_levels: 2 default_priority_level: 2 \
         priority_queue_policy { key: 1 value { timeout_action: DELAY default_timeout_microseconds: 1000 } }",
    );
    let running = q.admit(place(&q, 0, 0), "").await.unwrap();
    let (done, mut answers) = tokio::sync::mpsc::unbounded_channel();
    spawn_admit(&q, place(&q, 1, 0), &done, "delayed");
    settle().await;
    tokio::time::sleep(Duration::from_millis(2)).await;
    spawn_admit(&q, place(&q, 2, 0), &done, "low");
    settle().await;
    spawn_admit(&q, place(&q, 1, 0), &done, "timely");
    settle().await;
    assert_eq!(q.counts(), (1, 3), "a delayed request still waits");
    drop(running);
    let mut order = Vec::new();
    for _ in 0..3 {
        let (name, permit) = answers.recv().await.unwrap();
        order.push(name);
        tokio::time::sleep(Duration::from_millis(5)).await;
        drop(permit.unwrap());
    }
    assert_eq!(order, ["timely", "delayed", "low"]);
}

#[tokio::test(start_paused = true)]
async fn a_request_that_leaves_the_queue_gives_up_its_place_and_its_turn() {
    let q = queue("");
    let running = q.admit(place(&q, 0, 0), "").await.unwrap();
    let (done, mut answers) = tokio::sync::mpsc::unbounded_channel();
    let gone = spawn_admit(&q, place(&q, 0, 0), &done, "gone");
    settle().await;
    spawn_admit(&q, place(&q, 0, 0), &done, "stays");
    settle().await;
    gone.abort();
    settle().await;
    assert_eq!(q.counts(), (1, 1));
    drop(running);
    let (name, permit) = answers.recv().await.unwrap();
    assert_eq!(name, "stays");
    drop(permit.unwrap());
    assert_eq!(q.counts(), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn a_turn_given_to_a_request_that_has_left_passes_on() {
    let q = queue("");
    let running = q.admit(place(&q, 0, 0), "").await.unwrap();
    let (done, mut answers) = tokio::sync::mpsc::unbounded_channel();
    let gone = spawn_admit(&q, place(&q, 0, 0), &done, "gone");
    settle().await;
    spawn_admit(&q, place(&q, 0, 0), &done, "next");
    settle().await;
    // The turn goes to "gone", which is stopped before it can take it (the test's runtime
    // has one thread, so it has not run since).
    drop(running);
    gone.abort();
    let (name, permit) = answers.recv().await.unwrap();
    assert_eq!(name, "next");
    drop(permit.unwrap());
    assert_eq!(q.counts(), (0, 0));
}

#[test]
fn priority_settings_triton_refuses_are_refused_in_its_words() {
    for (batching, message) in [
        (
            "priority_levels: 2",
            "default priority level must be in range [1, 2] for m",
        ),
        (
            "priority_levels: 2 default_priority_level: 3",
            "default priority level must be in range [1, 2] for m",
        ),
        (
            "priority_levels: 2 default_priority_level: 1 priority_queue_policy { key: 3 value { } }",
            "priority queue policy must have priority level in range [1, 2] for m",
        ),
        (
            "priority_levels: 2 default_priority_level: 1 preserve_ordering: true",
            "Only one priority level is allowed when 'preserve_ordering' is true for m",
        ),
    ] {
        let text = format!("name: \"m\" dynamic_batching {{ {batching} }}");
        let config = model_config::parse_text(&text).unwrap();
        let error = Queue::for_model(&config, 1).err().unwrap();
        assert_eq!(error.message, message, "{batching}");
    }
    let config = model_config::parse_text("name: \"m\"").unwrap();
    assert!(Queue::for_model(&config, 1).unwrap().is_none());
}
