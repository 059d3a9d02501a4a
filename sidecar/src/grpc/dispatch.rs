//! Hands each gRPC call to its service by the path's service name.
//!
//! The port serves two services. tonic's `Routes` would put an axum router in front of them,
//! which for every call stores the URL parameters and the matched path in the request and boxes
//! its body and futures: thirteen allocations a call, for a choice between two prefixes
//! (see docs/performance/archive.md, "Allocations per request"). Calls to any other service are
//! answered as `Routes` answers them: `UNIMPLEMENTED` with no message.

use std::convert::Infallible;
use std::task::{Context, Poll};

use futures::future::{Either, Ready, ready};
use http::{Request, Response};
use tonic::body::Body;
use tonic::server::NamedService;
use tower::Service;

type Answer = Result<Response<Body>, Infallible>;

/// The gRPC port's services: the inference service and the standard health service.
#[derive(Clone)]
pub struct Services<I, H> {
    inference: I,
    health: H,
}

impl<I, H> Services<I, H>
where
    I: NamedService,
    H: NamedService,
{
    pub fn new(inference: I, health: H) -> Self {
        Services { inference, health }
    }

    /// Which service a request's path (`/package.Service/Method`) names.
    fn route(path: &str) -> Route {
        let service = path
            .strip_prefix('/')
            .and_then(|rest| rest.split_once('/'))
            .filter(|(_, method)| !method.is_empty())
            .map(|(service, _)| service);
        match service {
            Some(name) if name == I::NAME => Route::Inference,
            Some(name) if name == H::NAME => Route::Health,
            _ => Route::Unknown,
        }
    }
}

enum Route {
    Inference,
    Health,
    Unknown,
}

impl<I, H, B> Service<Request<B>> for Services<I, H>
where
    I: NamedService + Service<Request<B>, Response = Response<Body>, Error = Infallible>,
    H: NamedService + Service<Request<B>, Response = Response<Body>, Error = Infallible>,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Either<Either<I::Future, H::Future>, Ready<Answer>>;

    /// Both generated servers are always ready (they poll nothing before a call).
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let path = request.uri().path();
        // The verbose line for each call (`--log-verbose=1`), as Triton logs its handlers'.
        tracing::debug!("gRPC request: {path}");
        match Self::route(path) {
            Route::Inference => Either::Left(Either::Left(self.inference.call(request))),
            Route::Health => Either::Left(Either::Right(self.health.call(request))),
            Route::Unknown => Either::Right(ready(Ok(unimplemented()))),
        }
    }
}

fn unimplemented() -> Response<Body> {
    let (parts, ()) = tonic::Status::unimplemented("")
        .into_http::<()>()
        .into_parts();
    Response::from_parts(parts, Body::empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Inference;
    impl NamedService for Inference {
        const NAME: &'static str = "inference.GRPCInferenceService";
    }
    struct Health;
    impl NamedService for Health {
        const NAME: &'static str = "grpc.health.v1.Health";
    }
    type Both = Services<Inference, Health>;

    #[test]
    fn calls_go_to_the_service_their_path_names() {
        assert!(matches!(
            Both::route("/inference.GRPCInferenceService/ModelInfer"),
            Route::Inference
        ));
        assert!(matches!(
            Both::route("/inference.GRPCInferenceService/NoSuchMethod"),
            Route::Inference
        ));
        assert!(matches!(
            Both::route("/grpc.health.v1.Health/Check"),
            Route::Health
        ));
    }

    #[test]
    fn other_paths_are_unknown() {
        for path in [
            "",
            "/",
            "/inference.GRPCInferenceService",
            "/inference.GRPCInferenceService/",
            "/inference.GRPCInferenceServiceX/ModelInfer",
            "/grpc.health.v1.Health",
            "/other.Service/Method",
            "inference.GRPCInferenceService/ModelInfer",
        ] {
            assert!(matches!(Both::route(path), Route::Unknown), "{path}");
        }
    }
}
