use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use futures::future::BoxFuture;
use infergate_proto::{DataType, model_config};
use tokio::sync::Semaphore;

use super::*;
use crate::core::model::{Backend, Execution, Model};
use crate::core::params::ParamValue;
use crate::core::run_batch::ModelRunner;

/// A model server that answers each input as the output of the same number (`INPUT0` as
/// `OUTPUT0`), records the batch size of every execution, and finishes an execution only when
/// the test lets it (`gate`).
struct Recorder {
    sizes: parking_lot::Mutex<Vec<u64>>,
    gate: Semaphore,
    fail: AtomicBool,
    panic: AtomicBool,
}

impl Recorder {
    fn new(open: usize) -> Arc<Self> {
        Arc::new(Recorder {
            sizes: parking_lot::Mutex::default(),
            gate: Semaphore::new(open),
            fail: AtomicBool::new(false),
            panic: AtomicBool::new(false),
        })
    }

    fn sizes(&self) -> Vec<u64> {
        self.sizes.lock().clone()
    }
}

impl Backend for Recorder {
    fn execute<'a>(&'a self, execution: Execution<'a>) -> BoxFuture<'a, Result<Vec<Tensor>>> {
        Box::pin(async move {
            self.sizes.lock().push(execution.batch_size);
            if let Ok(permit) = self.gate.acquire().await {
                permit.forget();
            }
            if self.panic.swap(false, Ordering::SeqCst) {
                panic!("a defect in the model's code");
            }
            if self.fail.load(Ordering::SeqCst) {
                return Err(Error::internal("the model failed"));
            }
            Ok(execution
                .inputs
                .iter()
                .map(|t| Tensor {
                    name: t.name.replace("INPUT", "OUTPUT"),
                    ..t.clone()
                })
                .collect())
        })
    }
}

/// A model with `max_batch_size`, one input and output of `dims`, one instance per `instances`,
/// and this `dynamic_batching` body.
fn model(
    backend: Arc<Recorder>,
    max_batch: u32,
    dims: &str,
    instances: u32,
    batching: &str,
) -> Arc<Model> {
    let text = format!(
        "name: \"m\" max_batch_size: {max_batch} \
         input [{{ name: \"INPUT0\" data_type: TYPE_INT32 dims: [{dims}] }}] \
         output [{{ name: \"OUTPUT0\" data_type: TYPE_INT32 dims: [{dims}] }}] \
         instance_group [{{ count: {instances} }}] \
         dynamic_batching {{ {batching} }}"
    );
    let config = model_config::parse_text(&text).unwrap();
    Arc::new(Model::new(config, 1, backend, HashMap::new()).unwrap())
}

/// A request of `rows` rows of `width` INT32s, each row's values starting at `first`.
fn job(rows: i64, width: i64, first: i32) -> Job {
    let values: Vec<u8> = (0..rows * width)
        .flat_map(|i| (first + i as i32).to_le_bytes())
        .collect();
    Job {
        inputs: vec![Tensor::new(
            "INPUT0",
            DataType::Int32,
            vec![rows, width],
            Bytes::from(values),
        )],
        input_regions: Vec::new(),
        outputs: vec!["OUTPUT0".to_string()],
        output_shm: Vec::new(),
        classification: vec![0],
        batch_size: rows as u64,
        parameters: Parameters::default(),
        traced: None,
    }
}

fn submit(model: &Arc<Model>, job: Job) -> oneshot::Receiver<Reply> {
    submit_at(model, job, 0, 0)
}

fn submit_at(
    model: &Arc<Model>,
    job: Job,
    priority: u64,
    timeout_us: u64,
) -> oneshot::Receiver<Reply> {
    let batcher = model.batcher.clone().unwrap();
    let mut parameters = Parameters::default();
    parameters.insert("priority", ParamValue::Uint(priority));
    parameters.insert("timeout", ParamValue::Uint(timeout_us));
    let place = batcher.place(Some(&parameters));
    batcher.submit(&runner(model), place, job, "").unwrap()
}

fn runner(model: &Arc<Model>) -> Arc<dyn Runner> {
    Arc::new(ModelRunner(model.clone()))
}

/// Lets every spawned task run as far as it can.
async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

fn ran(reply: std::result::Result<Reply, oneshot::error::RecvError>) -> Vec<Tensor> {
    match reply.expect("answered") {
        Ok(ran) => ran.outputs,
        Err(Failed::Refused(r)) => panic!("refused: {r:?}"),
        Err(Failed::Model { error, .. }) => panic!("failed: {}", error.message),
    }
}

fn int32s(t: &Tensor) -> Vec<i32> {
    t.data
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn requests_waiting_for_a_busy_instance_run_as_one_batch_and_each_gets_its_rows() {
    let backend = Recorder::new(0);
    let m = model(backend.clone(), 8, "2", 1, "");
    let first = submit(&m, job(1, 2, 0));
    settle().await;
    assert_eq!(backend.sizes(), [1], "the first runs at once, alone");
    let a = submit(&m, job(1, 2, 10));
    let b = submit(&m, job(2, 2, 20));
    let c = submit(&m, job(1, 2, 30));
    settle().await;
    assert_eq!(m.batcher.as_ref().unwrap().counts(), (3, 1));
    backend.gate.add_permits(2);
    assert_eq!(int32s(&ran(first.await)[0]), [0, 1]);
    let (a, b, c) = (ran(a.await), ran(b.await), ran(c.await));
    assert_eq!(
        backend.sizes(),
        [1, 4],
        "the three waiting ran as one batch of 4 rows"
    );
    assert_eq!(
        (a[0].shape.clone(), int32s(&a[0])),
        (vec![1, 2], vec![10, 11])
    );
    assert_eq!(
        (b[0].shape.clone(), int32s(&b[0])),
        (vec![2, 2], vec![20, 21, 22, 23])
    );
    assert_eq!(
        (c[0].shape.clone(), int32s(&c[0])),
        (vec![1, 2], vec![30, 31])
    );
    // Executions are the batcher's to count; requests and their rows, the pipeline's.
    let stats = m.stats.snapshot();
    assert_eq!(stats.execution_count, 2);
    assert_eq!(stats.batches.keys().copied().collect::<Vec<_>>(), [1, 4]);
}

#[tokio::test(start_paused = true)]
async fn a_batch_never_passes_max_batch_size() {
    let backend = Recorder::new(0);
    let m = model(backend.clone(), 4, "2", 1, "");
    let first = submit(&m, job(1, 2, 0));
    settle().await;
    let waiting: Vec<_> = (0..5).map(|i| submit(&m, job(1, 2, i))).collect();
    let big = submit(&m, job(4, 2, 100));
    settle().await;
    backend.gate.add_permits(10);
    ran(first.await);
    for w in waiting {
        ran(w.await);
    }
    ran(big.await);
    // 4 of the five, then the fifth (4 more rows would pass 4), then the 4-row request.
    assert_eq!(backend.sizes(), [1, 4, 1, 4]);
}

#[tokio::test(start_paused = true)]
async fn requests_that_differ_in_a_non_batch_dimension_do_not_join() {
    let backend = Recorder::new(0);
    let m = model(backend.clone(), 8, "-1", 1, "");
    let first = submit(&m, job(1, 2, 0));
    settle().await;
    let a = submit(&m, job(1, 2, 10));
    let b = submit(&m, job(1, 3, 20));
    let c = submit(&m, job(1, 2, 30));
    settle().await;
    backend.gate.add_permits(10);
    ran(first.await);
    assert_eq!(int32s(&ran(a.await)[0]), [10, 11]);
    assert_eq!(int32s(&ran(b.await)[0]), [20, 21, 22]);
    assert_eq!(int32s(&ran(c.await)[0]), [30, 31]);
    // The head's batch ends at the first request that does not match it, as in Triton.
    assert_eq!(backend.sizes(), [1, 1, 1, 1]);
}

#[tokio::test(start_paused = true)]
async fn the_queue_delay_holds_a_batch_open_for_more_requests_until_the_oldest_has_waited_it() {
    let backend = Recorder::new(100);
    let m = model(
        backend.clone(),
        8,
        "2",
        1,
        "max_queue_delay_microseconds: 5000",
    );
    let start = Instant::now();
    let a = submit(&m, job(1, 2, 0));
    tokio::time::sleep(Duration::from_millis(2)).await;
    assert!(backend.sizes().is_empty(), "held for the delay");
    let b = submit(&m, job(1, 2, 10));
    let a = ran(a.await);
    let b = ran(b.await);
    assert_eq!(backend.sizes(), [2]);
    // The runtime's (paused) clock covers all but the delay's last millisecond, which a thread
    // sleeps in real time.
    let waited = Instant::now() - start;
    assert!(
        (Duration::from_millis(4)..=Duration::from_millis(5)).contains(&waited),
        "sent when the oldest had waited the 5 ms: {waited:?}"
    );
    assert_eq!((int32s(&a[0]), int32s(&b[0])), (vec![0, 1], vec![10, 11]));
}

#[tokio::test(start_paused = true)]
async fn a_preferred_size_is_sent_without_waiting_out_the_delay() {
    let backend = Recorder::new(100);
    let m = model(
        backend.clone(),
        8,
        "2",
        1,
        "preferred_batch_size: [2, 4] max_queue_delay_microseconds: 1000000",
    );
    let start = Instant::now();
    let a = submit(&m, job(1, 2, 0));
    let b = submit(&m, job(1, 2, 10));
    let c = submit(&m, job(1, 2, 20));
    ran(a.await);
    ran(b.await);
    assert_eq!(
        backend.sizes(),
        [2],
        "the preferred 2 of the three went at once"
    );
    assert_eq!(Instant::now(), start);
    ran(c.await);
    assert_eq!(backend.sizes(), [2, 1]);
    let waited = Instant::now() - start;
    assert!(
        waited >= Duration::from_millis(999),
        "the last waited out the delay: {waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_error_of_the_model_fails_every_request_of_its_batch() {
    let backend = Recorder::new(0);
    let m = model(backend.clone(), 8, "2", 1, "");
    let first = submit(&m, job(1, 2, 0));
    settle().await;
    let a = submit(&m, job(1, 2, 10));
    let b = submit(&m, job(1, 2, 20));
    settle().await;
    backend.fail.store(true, Ordering::SeqCst);
    backend.gate.add_permits(10);
    for reply in [first.await, a.await, b.await] {
        match reply.unwrap() {
            Err(Failed::Model { error, .. }) => assert_eq!(error.message, "the model failed"),
            _ => panic!("expected the model's error"),
        }
    }
    assert_eq!(backend.sizes(), [1, 2]);
    assert_eq!(
        m.stats.snapshot().execution_count,
        0,
        "a failed execution is not counted"
    );
}

#[tokio::test(start_paused = true)]
async fn a_request_that_times_out_or_is_cancelled_in_the_queue_leaves_before_its_batch_is_sent() {
    let backend = Recorder::new(0);
    let m = model(
        backend.clone(),
        8,
        "2",
        1,
        "default_queue_policy { allow_timeout_override: true default_timeout_microseconds: 1000000 }",
    );
    let first = submit(&m, job(1, 2, 0));
    settle().await;
    let timed = submit_at(&m, job(1, 2, 10), 0, 1000);
    let cancelled = submit(&m, job(1, 2, 20));
    let kept = submit(&m, job(1, 2, 30));
    tokio::time::sleep(Duration::from_millis(1)).await;
    match timed.await.unwrap() {
        Err(Failed::Refused(Refused::TimedOut)) => {}
        _ => panic!("expected the timeout"),
    }
    drop(cancelled);
    backend.gate.add_permits(10);
    ran(first.await);
    assert_eq!(int32s(&ran(kept.await)[0]), [30, 31]);
    assert_eq!(backend.sizes(), [1, 1], "only the one left waiting ran");
}

#[tokio::test(start_paused = true)]
async fn higher_priority_requests_are_batched_first() {
    let backend = Recorder::new(0);
    let m = model(
        backend.clone(),
        2,
        "2",
        1,
        "priority_levels: 2 default_priority_level: 2",
    );
    let first = submit(&m, job(1, 2, 0));
    settle().await;
    let mut low = submit_at(&m, job(1, 2, 10), 2, 0);
    let high_a = submit_at(&m, job(1, 2, 20), 1, 0);
    let high_b = submit_at(&m, job(1, 2, 30), 1, 0);
    settle().await;
    backend.gate.add_permits(1);
    ran(first.await);
    settle().await;
    backend.gate.add_permits(1);
    ran(high_a.await);
    ran(high_b.await);
    assert!(
        low.try_recv().is_err(),
        "the low one, queued before them, runs after them"
    );
    backend.gate.add_permits(1);
    ran((&mut low).await);
    assert_eq!(backend.sizes(), [1, 2, 1]);
}

#[tokio::test(start_paused = true)]
async fn a_full_level_refuses_at_once() {
    let backend = Recorder::new(0);
    let m = model(
        backend.clone(),
        8,
        "2",
        1,
        "default_queue_policy { max_queue_size: 1 }",
    );
    let _first = submit(&m, job(1, 2, 0));
    settle().await;
    let _waiting = submit(&m, job(1, 2, 10));
    let batcher = m.batcher.clone().unwrap();
    let place = batcher.place(None);
    match batcher.submit(&runner(&m), place, job(1, 2, 20), "[request id: 7] ") {
        Err(refused) => assert_eq!(refused, Refused::QueueFull("[request id: 7] ".to_string())),
        Ok(_) => panic!("a full level took the request"),
    }
}

#[tokio::test(start_paused = true)]
async fn with_preserve_ordering_a_later_batch_waits_for_the_answers_of_an_earlier_one() {
    let backend = Recorder::new(0);
    let m = model(backend.clone(), 1, "2", 2, "preserve_ordering: true");
    let mut first = submit(&m, job(1, 2, 0));
    let mut second = submit(&m, job(1, 2, 10));
    settle().await;
    assert_eq!(backend.sizes(), [1, 1], "two instances, two batches");
    // One execution finishes: whichever it is, the first request's answer comes first.
    backend.gate.add_permits(1);
    settle().await;
    assert!(
        second.try_recv().is_err(),
        "the second is held until the first is answered"
    );
    backend.gate.add_permits(1);
    settle().await;
    ran(Ok(first.try_recv().unwrap()));
    ran(Ok(second.try_recv().unwrap()));
}

#[test]
fn preferred_sizes_past_the_max_batch_size_are_refused_in_tritons_words() {
    let text = "name: \"m\" max_batch_size: 4 dynamic_batching { preferred_batch_size: [8] }";
    let config = model_config::parse_text(text).unwrap();
    let e = Batcher::for_model(&config, 1).err().unwrap();
    assert_eq!(
        e.message,
        "dynamic batching preferred size must be <= max batch size for m"
    );
}

#[tokio::test(start_paused = true)]
async fn a_panicking_execution_fails_its_batch_and_the_next_batch_still_runs_in_order() {
    let backend = Recorder::new(10);
    let m = model(backend.clone(), 8, "2", 1, "preserve_ordering: true");
    backend.panic.store(true, Ordering::SeqCst);
    match submit(&m, job(1, 2, 0)).await.unwrap() {
        Err(Failed::Model { error, .. }) => {
            assert_eq!(error.message, "the model's execution panicked")
        }
        _ => panic!("expected the batch to fail"),
    }
    assert_eq!(int32s(&ran(submit(&m, job(1, 2, 10)).await)[0]), [10, 11]);
}

#[tokio::test(start_paused = true)]
async fn the_scheduler_hold_forms_no_batch_until_that_many_requests_wait_then_goes_away() {
    // Triton's TRITONSERVER_DELAY_SCHEDULER, set here as the batcher reads it at load.
    let backend = Recorder::new(10);
    let m = model(backend.clone(), 8, "2", 1, "preferred_batch_size: [ 2 ]");
    m.batcher.as_ref().unwrap().state.lock().hold = 3;
    let a = submit(&m, job(1, 2, 0));
    let b = submit(&m, job(1, 2, 10));
    settle().await;
    assert!(backend.sizes().is_empty(), "held: {:?}", backend.sizes());
    let c = submit(&m, job(1, 2, 20));
    settle().await;
    // Released by the third: as Triton then batches what waits (preferred size 2, then 1).
    ran(a.await);
    ran(b.await);
    ran(c.await);
    assert_eq!(backend.sizes(), [2, 1]);
    // Once only: the next request runs at once.
    let d = submit(&m, job(1, 2, 30));
    ran(d.await);
    assert_eq!(backend.sizes(), [2, 1, 1]);
}
