//! Client deadlines (`grpc-timeout`), answered as gRPC's own servers answer them.
//!
//! tonic's server enforces `grpc-timeout` itself, but ends an expired call with `CANCELLED`
//! "Timeout expired", where gRPC's servers (Triton's among them) and clients say
//! `DEADLINE_EXCEEDED`. The client's timer and the server's fire at nearly the same moment, so
//! which code a client saw was a race. This layer, with the server of `grpc::serve` (which has
//! no timeout of its own), ends the call at its deadline with `DEADLINE_EXCEEDED` "Deadline
//! Exceeded", the words gRPC's clients use when their own timer fires first.

use std::convert::Infallible;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::{Either, FutureExt, Map};
use http::{HeaderValue, Request, Response};
use tokio::time::Timeout;
use tokio::time::error::Elapsed;
use tonic::body::Body;
use tower::{Layer, Service};

/// The answer to a call whose deadline passed. The message is written as is: tonic would
/// percent-encode its space, which some clients print undecoded ("Deadline%20Exceeded").
fn deadline_exceeded(answer: Result<Answer, Elapsed>) -> Answer {
    answer.unwrap_or_else(|_| {
        let mut response = tonic::Status::new(tonic::Code::DeadlineExceeded, "").into_http();
        let message = HeaderValue::from_static("Deadline Exceeded");
        response.headers_mut().insert("grpc-message", message);
        Ok(response)
    })
}

type Answer = Result<Response<Body>, Infallible>;
type WithDeadline<F> = Map<Timeout<F>, fn(Result<Answer, Elapsed>) -> Answer>;

/// Wraps a service in [`Deadline`].
#[derive(Clone, Copy, Debug, Default)]
pub struct DeadlineLayer;

impl<S> Layer<S> for DeadlineLayer {
    type Service = Deadline<S>;

    fn layer(&self, inner: S) -> Deadline<S> {
        Deadline { inner }
    }
}

/// Ends each call at the deadline its `grpc-timeout` header sets, if any.
#[derive(Clone, Debug)]
pub struct Deadline<S> {
    inner: S,
}

impl<S, B> Service<Request<B>> for Deadline<S>
where
    S: Service<Request<B>, Response = Response<Body>, Error = Infallible>,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Either<S::Future, WithDeadline<S::Future>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let limit = request
            .headers()
            .get("grpc-timeout")
            .and_then(parse_timeout);
        let answer = self.inner.call(request);
        match limit {
            None => Either::Left(answer),
            Some(limit) => Either::Right(
                tokio::time::timeout(limit, answer).map(deadline_exceeded as fn(_) -> _),
            ),
        }
    }
}

/// `grpc-timeout`: at most 8 digits and a unit (`H`, `M`, `S`, `m`, `u`, `n`), as the gRPC over
/// HTTP/2 specification writes it. Anything else is ignored, as gRPC's servers ignore it.
pub(crate) fn parse_timeout(value: &HeaderValue) -> Option<Duration> {
    let text = value.to_str().ok()?;
    let digits = text.get(..text.len().checked_sub(1)?)?;
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let amount: u64 = digits.parse().ok()?;
    let duration = match text.as_bytes().last()? {
        b'H' => Duration::from_secs(amount * 3600),
        b'M' => Duration::from_secs(amount * 60),
        b'S' => Duration::from_secs(amount),
        b'm' => Duration::from_millis(amount),
        b'u' => Duration::from_micros(amount),
        b'n' => Duration::from_nanos(amount),
        _ => return None,
    };
    Some(duration)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Option<Duration> {
        parse_timeout(&HeaderValue::from_str(text).unwrap())
    }

    #[test]
    fn every_unit_of_the_specification_is_read() {
        assert_eq!(parsed("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(parsed("3M"), Some(Duration::from_secs(180)));
        assert_eq!(parsed("4S"), Some(Duration::from_secs(4)));
        assert_eq!(parsed("500m"), Some(Duration::from_millis(500)));
        assert_eq!(parsed("99999999u"), Some(Duration::from_micros(99_999_999)));
        assert_eq!(parsed("0n"), Some(Duration::ZERO));
        assert_eq!(
            parsed("99999999H"),
            Some(Duration::from_secs(99_999_999 * 3600))
        );
    }

    #[test]
    fn malformed_values_are_ignored() {
        for text in [
            "",
            "m",
            "5",
            "123456789m",
            "5x",
            "-5m",
            "+5m",
            "5 m",
            "5.0S",
            "١m",
        ] {
            let Ok(value) = HeaderValue::from_str(text) else {
                continue;
            };
            assert_eq!(parse_timeout(&value), None, "{text:?}");
        }
    }

    #[derive(Clone)]
    struct Slow(Duration);

    impl Service<Request<()>> for Slow {
        type Response = Response<Body>;
        type Error = Infallible;
        type Future = futures::future::BoxFuture<'static, Answer>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: Request<()>) -> Self::Future {
            let wait = self.0;
            async move {
                tokio::time::sleep(wait).await;
                Ok(tonic::Status::ok("done").into_http())
            }
            .boxed()
        }
    }

    fn status(response: &Response<Body>) -> (String, String) {
        let header = |name| {
            let value = response.headers().get(name).map(|v| v.to_str().unwrap());
            value.unwrap_or_default().to_string()
        };
        (header("grpc-status"), header("grpc-message"))
    }

    async fn call(service_takes: Duration, grpc_timeout: Option<&str>) -> (String, String) {
        let mut service = DeadlineLayer.layer(Slow(service_takes));
        let mut request = Request::new(());
        if let Some(timeout) = grpc_timeout {
            let value = HeaderValue::from_str(timeout).unwrap();
            request.headers_mut().insert("grpc-timeout", value);
        }
        let Ok(response) = service.call(request).await;
        status(&response)
    }

    #[tokio::test]
    async fn a_call_past_its_deadline_is_deadline_exceeded() {
        let answer = call(Duration::from_secs(60), Some("20m")).await;
        assert_eq!(answer, ("4".to_string(), "Deadline Exceeded".to_string()));
    }

    #[tokio::test]
    async fn calls_within_or_without_a_deadline_are_answered() {
        let done = ("0".to_string(), "done".to_string());
        assert_eq!(call(Duration::from_millis(20), Some("10S")).await, done);
        assert_eq!(call(Duration::from_millis(20), None).await, done);
        assert_eq!(call(Duration::from_millis(20), Some("1x")).await, done);
        assert_eq!(call(Duration::from_millis(20), Some("0")).await, done);
    }
}
