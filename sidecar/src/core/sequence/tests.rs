use infergate_proto::model_config;

use super::*;

fn scheduler(idle_us: u64) -> Arc<Scheduler> {
    let text = format!(
        "name: \"seq\" max_batch_size: 1 sequence_batching {{ max_sequence_idle_microseconds: {idle_us} \
         control_input [ {{ name: \"START\" control [ {{ kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] }} ] }} ] }}"
    );
    let config = model_config::parse_text(&text).unwrap();
    Scheduler::for_model(&config).unwrap().unwrap()
}

fn params(id: u64, start: bool, end: bool) -> SequenceParams {
    SequenceParams {
        id: Some(CorrelationId::Number(id)),
        start,
        end,
        timeout: Duration::ZERO,
    }
}

#[tokio::test]
async fn start_flags_and_controls() {
    let s = scheduler(1_000_000);
    let err = s
        .admit(&params(7, false, false), 1, true, "")
        .await
        .err()
        .unwrap();
    assert!(err.message.contains("must specify the START flag"), "{err}");
    let a = s.admit(&params(7, true, false), 1, true, "").await.unwrap();
    assert_eq!(a.controls[0].name, "START");
    assert_eq!(a.controls[0].shape, vec![1, 1]);
    assert_eq!(&a.controls[0].data[..], &1i32.to_le_bytes());
    drop(a);
    let b = s.admit(&params(7, false, true), 1, true, "").await.unwrap();
    assert_eq!(&b.controls[0].data[..], &0i32.to_le_bytes());
    drop(b);
    // END forgot the sequence.
    assert!(
        s.admit(&params(7, false, false), 1, true, "")
            .await
            .is_err()
    );
    let no_id = SequenceParams::default();
    assert!(
        s.admit(&no_id, 1, true, "")
            .await
            .err()
            .unwrap()
            .message
            .contains("non-zero")
    );
    assert!(
        s.admit(&params(8, true, false), 2, true, "")
            .await
            .err()
            .unwrap()
            .message
            .contains("batch-size 1")
    );
}

/// A sequence that waited in the backlog longer than the idle timeout must not be released
/// between its first request and its next one.
#[tokio::test]
async fn backlog_wait_does_not_count_as_idle() {
    let s = scheduler(100_000); // 100 ms idle, one slot
    drop(s.admit(&params(1, true, false), 1, true, "").await.unwrap()); // holds the only slot
    let waiting = tokio::spawn({
        let s = s.clone();
        async move { drop(s.admit(&params(2, true, false), 1, true, "").await.unwrap()) }
    });
    // Sequence 1 goes idle and is released; sequence 2 then gets the slot.
    tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(60)).await;
    let next = s.admit(&params(2, false, false), 1, true, "").await;
    assert!(next.is_ok(), "{:?}", next.err());
    assert!(s.counters().timeouts >= 1);
}

/// A request that overtakes its sequence's START on the way in still runs, after it.
#[tokio::test]
async fn a_start_overtaken_by_the_next_request_still_comes_first() {
    let s = scheduler(1_000_000);
    let early = tokio::spawn({
        let s = s.clone();
        async move {
            s.admit(&params(9, false, false), 1, true, "")
                .await
                .map(|a| a.controls[0].data.clone())
        }
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    let start = s.admit(&params(9, true, false), 1, true, "").await.unwrap();
    assert_eq!(&start.controls[0].data[..], &1i32.to_le_bytes());
    drop(start);
    let early = early.await.unwrap().unwrap();
    assert_eq!(
        &early[..],
        &0i32.to_le_bytes(),
        "the overtaking request runs as a middle request"
    );
}

/// A request that arrives while the END of its sequence is queued or running runs behind
/// the END instead of being refused; once the END has run, START is required again.
#[tokio::test]
async fn an_end_overtaking_the_previous_request_does_not_refuse_it() {
    let s = scheduler(1_000_000);
    drop(
        s.admit(&params(11, true, false), 1, true, "")
            .await
            .unwrap(),
    );
    let end = s
        .admit(&params(11, false, true), 1, true, "")
        .await
        .unwrap();
    let late = tokio::spawn({
        let s = s.clone();
        async move {
            s.admit(&params(11, false, false), 1, true, "")
                .await
                .is_ok()
        }
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    drop(end);
    assert!(late.await.unwrap(), "the overtaken request runs");
    let after = s.admit(&params(11, false, false), 1, true, "").await;
    assert!(
        after.err().unwrap().message.contains("START"),
        "after the END, START is required"
    );
    assert_eq!(s.counters().active, 0, "the slot is free again");
}

fn with_timeout(mut params: SequenceParams, timeout: Duration) -> SequenceParams {
    params.timeout = timeout;
    params
}

/// Triton's backlog timeout: a sequence waiting for a slot past a request's `timeout` is
/// refused, with every request of it that waits, and forgotten; a sequence with a slot is
/// not bounded by its requests' timeouts.
#[tokio::test]
async fn a_backlogged_sequence_past_its_timeout_is_refused_and_forgotten() {
    let s = scheduler(60_000_000); // one slot
    let holder = s.admit(&params(1, true, false), 1, true, "").await.unwrap();
    let late = |params: SequenceParams| {
        let s = s.clone();
        tokio::spawn(async move { s.admit(&params, 1, true, "").await.err() })
    };
    let start = late(with_timeout(
        params(2, true, false),
        Duration::from_millis(50),
    ));
    tokio::time::sleep(Duration::from_millis(5)).await;
    let middle = late(params(2, false, false));
    // Sequence 1 holds its slot: its last request's timeout does not apply.
    let own = late(with_timeout(
        params(1, false, true),
        Duration::from_millis(1),
    ));
    for refused in [start, middle] {
        let error = tokio::time::timeout(Duration::from_secs(5), refused)
            .await
            .unwrap()
            .unwrap()
            .expect("refused");
        assert_eq!(error.code, crate::error::Code::Unavailable);
        assert_eq!(error.message, BACKLOG_EXPIRED);
    }
    let forgotten = s.admit(&params(2, false, false), 1, true, "").await;
    assert!(
        forgotten.err().unwrap().message.contains("START"),
        "an expired sequence needs a START again"
    );
    drop(holder);
    assert!(own.await.unwrap().is_none(), "sequence 1's END runs");
    assert_eq!(s.counters().backlog, 0);
    let fresh = s.admit(&params(2, true, false), 1, true, "").await;
    assert!(fresh.is_ok(), "a new START of the id runs");
}

/// The earliest deadline among a backlogged sequence's requests bounds its wait.
#[tokio::test]
async fn a_later_request_can_bring_a_backlog_deadline_closer() {
    let s = scheduler(60_000_000);
    let _holder = s.admit(&params(1, true, false), 1, true, "").await.unwrap();
    let started = std::time::Instant::now();
    let start = tokio::spawn({
        let s = s.clone();
        async move {
            let p = with_timeout(params(2, true, false), Duration::from_secs(30));
            s.admit(&p, 1, true, "").await.err()
        }
    });
    tokio::time::sleep(Duration::from_millis(5)).await;
    let p = with_timeout(params(2, false, false), Duration::from_millis(20));
    let next = s.admit(&p, 1, true, "").await.err().expect("refused");
    assert_eq!(next.message, BACKLOG_EXPIRED);
    let first = tokio::time::timeout(Duration::from_secs(5), start)
        .await
        .unwrap()
        .unwrap()
        .expect("refused");
    assert_eq!(first.message, BACKLOG_EXPIRED);
    assert!(started.elapsed() < Duration::from_secs(5));
}
