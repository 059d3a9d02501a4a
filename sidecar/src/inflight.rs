//! What the calls in flight hold, on the HTTP and gRPC ports: whether a connection has a call in
//! flight (its `Activity`, which the accept loop reads to close idle connections), and the bytes
//! of request bodies the calls hold, against one budget for the whole process
//! (`limits.max_inflight_request_bytes`).
//!
//! `Tracked` wraps a connection's service. Each call gets a `Call`, shared by its request body
//! and its answer: the call counts as in flight, and its request bytes as held, until both are
//! done with (the answer's body ended or dropped, the request body dropped). A request body that
//! would take the budget past its limit fails with `Busy`, which the ports answer with 503 /
//! `UNAVAILABLE` `server is busy` instead of growing the process's memory.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Buf;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use tower::Service;

/// The message of the refusal.
pub const BUSY: &str = "server is busy";

/// The process's budget of request bytes held by calls in flight.
#[derive(Debug)]
pub struct ByteBudget {
    limit: u64,
    held: AtomicU64,
}

impl ByteBudget {
    pub fn new(limit: u64) -> Arc<Self> {
        Arc::new(ByteBudget {
            limit,
            held: AtomicU64::new(0),
        })
    }

    /// Bytes held now.
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    fn try_take(&self, n: u64) -> bool {
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_add(n).filter(|&total| total <= self.limit)
            })
            .is_ok()
    }

    fn give_back(&self, n: u64) {
        self.held.fetch_sub(n, Ordering::AcqRel);
    }
}

/// Milliseconds since the first call of the process: a clock an atomic can hold.
fn now_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    let start = START.get_or_init(Instant::now);
    u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// Whether one connection has calls in flight, and since when it has had none.
#[derive(Clone, Debug, Default)]
pub struct Activity(Arc<ActivityState>);

#[derive(Debug, Default)]
struct ActivityState {
    in_flight: AtomicUsize,
    /// When the last call ended (or the connection began), in `now_ms`.
    quiet_since: AtomicU64,
}

impl Activity {
    /// A connection that begins now.
    pub fn begin() -> Self {
        let activity = Activity::default();
        activity.0.quiet_since.store(now_ms(), Ordering::Relaxed);
        activity
    }

    /// How long the connection has had no call in flight; none while one is.
    pub fn idle_for(&self) -> Option<Duration> {
        if self.0.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        let since = self.0.quiet_since.load(Ordering::Relaxed);
        Some(Duration::from_millis(now_ms().saturating_sub(since)))
    }

    fn call_begins(&self) {
        self.0.in_flight.fetch_add(1, Ordering::AcqRel);
    }

    fn call_ends(&self) {
        self.0.quiet_since.store(now_ms(), Ordering::Relaxed);
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One call: in flight, holding its request bytes, until its last part is dropped.
#[derive(Debug)]
struct Call {
    activity: Activity,
    budget: Arc<ByteBudget>,
    held: AtomicU64,
}

impl Call {
    fn begin(activity: &Activity, budget: &Arc<ByteBudget>) -> Arc<Self> {
        activity.call_begins();
        Arc::new(Call {
            activity: activity.clone(),
            budget: budget.clone(),
            held: AtomicU64::new(0),
        })
    }

    fn take(&self, n: u64) -> bool {
        if !self.budget.try_take(n) {
            return false;
        }
        self.held.fetch_add(n, Ordering::Relaxed);
        true
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        self.budget.give_back(*self.held.get_mut());
        self.activity.call_ends();
    }
}

/// The error a request body fails with when the budget is spent. Its source is the gRPC status
/// it means, which tonic finds there; the HTTP port looks for it with `is_busy`.
#[derive(Debug)]
pub struct Busy(tonic::Status);

impl Busy {
    fn new() -> Self {
        Busy(tonic::Status::unavailable(BUSY))
    }
}

impl std::fmt::Display for Busy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(BUSY)
    }
}

impl std::error::Error for Busy {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// Whether `error`, or one of its sources, is the budget's refusal.
pub fn is_busy(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(e) = next {
        if e.is::<Busy>() {
            return true;
        }
        next = e.source();
    }
    false
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A request body whose bytes are taken from the budget as they arrive.
pub struct Budgeted<B> {
    inner: B,
    call: Arc<Call>,
}

impl<B> Body for Budgeted<B>
where
    B: Body + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let len = frame.data_ref().map_or(0, |d| d.remaining() as u64);
                if len > 0 && !self.call.take(len) {
                    return Poll::Ready(Some(Err(Box::new(Busy::new()))));
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// An answer's body: the call stays in flight until it ends or is dropped.
pub struct Answer<B> {
    inner: B,
    call: Option<Arc<Call>>,
}

impl<B> Body for Answer<B>
where
    B: Body + Unpin,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None)) {
            self.call = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A connection's service, its calls tracked (module docs).
#[derive(Clone)]
pub struct Tracked<S> {
    inner: S,
    activity: Activity,
    budget: Arc<ByteBudget>,
}

impl<S> Tracked<S> {
    pub fn new(inner: S, activity: Activity, budget: Arc<ByteBudget>) -> Self {
        Tracked {
            inner,
            activity,
            budget,
        }
    }
}

impl<S, B, A> Service<Request<B>> for Tracked<S>
where
    S: Service<Request<Budgeted<B>>, Response = Response<A>>,
{
    type Response = Response<Answer<A>>;
    type Error = S::Error;
    type Future = Answering<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let call = Call::begin(&self.activity, &self.budget);
        let request = request.map(|inner| Budgeted {
            inner,
            call: call.clone(),
        });
        Answering {
            inner: self.inner.call(request),
            call: Some(call),
        }
    }
}

pin_project_lite::pin_project! {
    /// The service's future; its answer's body keeps the call.
    pub struct Answering<F> {
        #[pin]
        inner: F,
        call: Option<Arc<Call>>,
    }
}

impl<F, A, E> Future for Answering<F>
where
    F: Future<Output = Result<Response<A>, E>>,
{
    type Output = Result<Response<Answer<A>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        match this.inner.poll(cx) {
            Poll::Ready(Ok(response)) => {
                let call = this.call.take();
                Poll::Ready(Ok(response.map(|inner| Answer { inner, call })))
            }
            Poll::Ready(Err(e)) => {
                *this.call = None;
                Poll::Ready(Err(e))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};

    #[test]
    fn the_budget_refuses_what_would_go_past_it_and_takes_back_what_is_given() {
        let budget = ByteBudget::new(10);
        assert!(budget.try_take(6));
        assert!(!budget.try_take(5));
        assert!(budget.try_take(4));
        budget.give_back(6);
        assert_eq!(budget.held(), 4);
        assert!(budget.try_take(6));
    }

    #[tokio::test]
    async fn a_call_holds_its_bytes_and_its_connection_until_its_answer_ends() {
        let budget = ByteBudget::new(100);
        let activity = Activity::begin();
        assert!(activity.idle_for().is_some());
        let call = Call::begin(&activity, &budget);
        let body = Budgeted {
            inner: Full::new(Bytes::from_static(&[0; 60])),
            call: call.clone(),
        };
        let collected = body.collect().await.map(|c| c.to_bytes().len());
        assert_eq!(collected.ok(), Some(60));
        assert_eq!(budget.held(), 60);
        assert_eq!(activity.idle_for(), None);
        // A second call cannot take what the first holds.
        let second = Call::begin(&activity, &budget);
        let refused = Budgeted {
            inner: Full::new(Bytes::from_static(&[0; 60])),
            call: second,
        }
        .collect()
        .await;
        let error = refused.err().map(|e| is_busy(&*e));
        assert_eq!(error, Some(true));
        let answer = Answer {
            inner: Full::new(Bytes::from_static(b"ok")),
            call: Some(call),
        };
        assert!(answer.collect().await.is_ok());
        assert_eq!(budget.held(), 0);
        assert!(activity.idle_for().is_some());
    }
}
