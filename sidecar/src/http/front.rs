//! The HTTP port's first stop: restricted APIs are refused (`restricted.rs`), inference calls go
//! straight to their handler, every other request to the axum router.
//!
//! The router (two nested routers, Triton's path rules and the rejection mapping around them)
//! costs twenty-six to twenty-nine allocations a request: URL parameters, the matched path,
//! boxed bodies and futures, for a route table that the inference calls, nearly all of the
//! traffic, do not need (see docs/performance/archive.md, "Allocations per request"). Only
//! paths that need neither percent-decoding nor any of Triton's path rules take the short way;
//! the router answers the others exactly as before.

use std::convert::Infallible;
use std::task::{Context, Poll};

use axum::Router;
use axum::body::Body;
use axum::response::Response;
use futures::future::{BoxFuture, Either};
use http::{Method, Request};
use tower::Service;

use super::path_rules::is_decimal_version;
use super::{infer, restricted};
use crate::audit;
use crate::caller::Caller;
use crate::state::SharedState;

/// The HTTP port's service: `POST /v2/models/{m}[/versions/{v}]/infer` to the inference handler,
/// the rest to `router`.
#[derive(Clone)]
pub struct Front {
    state: SharedState,
    router: Router,
    /// The connection's caller: handed to the inference handler, and given to the router's
    /// requests as an extension (the short way needs no extension, which would cost an
    /// allocation per call).
    caller: Option<Caller>,
}

impl Front {
    pub fn new(state: SharedState, router: Router) -> Self {
        Front {
            state,
            router,
            caller: None,
        }
    }

    /// The service of one connection, from `caller`.
    pub fn for_caller(&self, caller: Option<Caller>) -> Self {
        Front {
            caller,
            ..self.clone()
        }
    }

    pub fn state(&self) -> SharedState {
        self.state.clone()
    }
}

/// The model and version (empty: the latest) an inference path names, when it is plainly one:
/// a non-empty model name without `%` (the router percent-decodes names) and, in the versions
/// form, a decimal version, as Triton's route pattern wants it.
fn infer_target(path: &str) -> Option<(&str, &str)> {
    let rest = path.strip_prefix("/v2/models/")?.strip_suffix("/infer")?;
    let (model, version) = match rest.split_once('/') {
        None => (rest, None),
        Some((model, tail)) => (model, Some(tail.strip_prefix("versions/")?)),
    };
    if model.is_empty() || model.contains('%') {
        return None;
    }
    match version {
        None => Some((model, "")),
        Some(v) if is_decimal_version(v) => Some((model, v)),
        Some(_) => None,
    }
}

impl<B> Service<Request<B>> for Front
where
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Either<
        BoxFuture<'static, Result<Response, Infallible>>,
        <Router as Service<Request<B>>>::Future,
    >;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Service::<Request<B>>::poll_ready(&mut self.router, cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let path = request.uri().path();
        // Triton's verbose line for each request (`--log-verbose=1`).
        tracing::debug!("HTTP request: {} {path}", request.method());
        // Triton refuses a restricted API before it looks at anything else. Without a key, a
        // pod-only API or identities configured there is nothing to refuse or audit, and no
        // path to classify.
        let guard = &self.state.http_restricted;
        if (!guard.is_empty() || self.state.identity.is_some())
            && let Some(category) = restricted::category(path)
        {
            let refused = restricted::refusal(guard, category, request.headers(), self.caller);
            let identity = self
                .state
                .identity
                .as_ref()
                .filter(|identity| identity.guards(category));
            if let (Some(identity), None) = (identity, &refused) {
                // The rest waits for the caller's identity.
                let (identity, mut front) = (identity.clone(), self.clone());
                return Either::Left(Box::pin(async move {
                    let (method, path) = (Some(request.method().as_str()), request.uri().path());
                    let (caller, headers) = (front.caller, request.headers());
                    let checked = audit::identity_call(
                        &identity, "http", category, method, path, caller, headers,
                    )
                    .await;
                    match checked {
                        Ok(()) => front.route(request).await,
                        Err(refusal) => Ok(restricted::identity_refusal(refusal)),
                    }
                }));
            }
            if audit::is_control(category) {
                let method = Some(request.method().as_str());
                let (caller, allowed) = (self.caller, refused.is_none());
                audit::control_call("http", category, method, path, caller, guard, allowed);
            }
            if let Some(refused) = refused {
                return Either::Left(Box::pin(futures::future::ready(Ok(refused))));
            }
        }
        self.route(request)
    }
}

impl Front {
    /// A request let through: inference the short way, the rest to the router.
    fn route<B>(&mut self, mut request: Request<B>) -> <Front as Service<Request<B>>>::Future
    where
        B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
        B::Error: Into<axum::BoxError>,
    {
        let target = (request.method() == Method::POST)
            .then(|| infer_target(request.uri().path()))
            .flatten()
            .map(|(model, version)| (model.to_string(), version.to_string()));
        match target {
            Some((model, version)) => {
                let (state, caller) = (self.state.clone(), self.caller);
                let (parts, body) = request.into_parts();
                Either::Left(Box::pin(async move {
                    let body = Body::new(body);
                    let headers = parts.headers;
                    Ok(infer::run_infer(state, caller, model, version, headers, body).await)
                }))
            }
            None => {
                if let Some(caller) = self.caller {
                    request.extensions_mut().insert(caller);
                }
                // The router is always ready (axum's `poll_ready` answers at once).
                Either::Right(self.router.call(request))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::infer_target;

    #[test]
    fn plain_inference_paths_take_the_short_way() {
        assert_eq!(
            infer_target("/v2/models/simple/infer"),
            Some(("simple", ""))
        );
        assert_eq!(
            infer_target("/v2/models/simple/versions/1/infer"),
            Some(("simple", "1"))
        );
        assert_eq!(
            infer_target("/v2/models/a.b-c_d/versions/0012/infer"),
            Some(("a.b-c_d", "0012"))
        );
    }

    #[test]
    fn everything_else_goes_to_the_router() {
        for path in [
            "/v2/models//infer",
            "/v2/models/simple/infer/",
            "/v2/models/simple/ready",
            "/v2/models/sim%20ple/infer",
            "/v2/models/simple/versions//infer",
            "/v2/models/simple/versions/x/infer",
            "/v2/models/simple/versions/1/2/infer",
            "/v2/models/simple/version/1/infer",
            "/v2/models/simple/x/infer",
            "/v2/models/infer",
            "/v2//models/simple/infer",
            "v2/models/simple/infer",
        ] {
            assert_eq!(infer_target(path), None, "{path}");
        }
    }
}
