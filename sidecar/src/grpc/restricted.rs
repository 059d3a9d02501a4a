//! `--grpc-restricted-protocol` on the gRPC port: which protocol an RPC belongs to, as Triton's
//! gRPC server assigns them, and the refusal of a call without the protocol's metadata key
//! (`triton-grpc-protocol-<key>`): `UNAVAILABLE` "This protocol is restricted, expecting header
//! '<key>'", before the call reaches its service. A refused `ModelStreamInfer` ends at once with
//! that status, as Triton ends it before reading a request.

use std::convert::Infallible;
use std::task::{Context, Poll};

use futures::future::{BoxFuture, Either, ready};
use http::{Request, Response};
use infergate_config::RestrictedCategory;
use tonic::body::Body;
use tower::Service;

use crate::audit;
use crate::caller::Caller;
use crate::identity::Refusal;
use crate::state::SharedState;

/// Refuses calls to restricted protocols, then hands the rest to `inner`.
#[derive(Clone)]
pub struct Restricted<S> {
    state: SharedState,
    inner: S,
}

impl<S> Restricted<S> {
    pub fn new(state: SharedState, inner: S) -> Self {
        Restricted { state, inner }
    }
}

type Answer = Result<Response<Body>, Infallible>;

impl<S, B> Service<Request<B>> for Restricted<S>
where
    S: Service<Request<B>, Response = Response<Body>, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Either<S::Future, BoxFuture<'static, Answer>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        // Without a key, a pod-only API or identities configured there is nothing to refuse or
        // audit.
        let guard = &self.state.grpc_restricted;
        let path = request.uri().path();
        if (!guard.is_empty() || self.state.identity.is_some())
            && let Some(category) = category(path)
        {
            let caller = Caller::of(request.extensions());
            let refused = guard.check(category, request.headers(), caller).err();
            let identity = self
                .state
                .identity
                .as_ref()
                .filter(|identity| identity.guards(category));
            if let (Some(identity), None) = (identity, refused) {
                // The call waits for the caller's identity. The inner service was made ready
                // for this call: it goes with it, and a clone stays for the next.
                let identity = identity.clone();
                let clone = self.inner.clone();
                let mut inner = std::mem::replace(&mut self.inner, clone);
                return Either::Right(Box::pin(async move {
                    let (path, headers) = (request.uri().path(), request.headers());
                    let checked = audit::identity_call(
                        &identity, "grpc", category, None, path, caller, headers,
                    )
                    .await;
                    match checked {
                        Ok(()) => inner.call(request).await,
                        Err(refusal) => Ok(status_answer(identity_status(refusal))),
                    }
                }));
            }
            if audit::is_control(category) {
                let allowed = refused.is_none();
                audit::control_call("grpc", category, None, path, caller, guard, allowed);
            }
            if let Some(message) = refused {
                let answer = status_answer(tonic::Status::unavailable(message));
                return Either::Right(Box::pin(ready(Ok(answer))));
            }
        }
        Either::Left(self.inner.call(request))
    }
}

/// A call's end with `status`, before the call reaches its service.
fn status_answer(status: tonic::Status) -> Response<Body> {
    let (parts, ()) = status.into_http::<()>().into_parts();
    Response::from_parts(parts, Body::empty())
}

/// The status of a caller refused for its identity (`server.identity`).
fn identity_status(refusal: Refusal) -> tonic::Status {
    let message = refusal.message();
    match refusal {
        Refusal::Unauthenticated => tonic::Status::unauthenticated(message),
        Refusal::Forbidden => tonic::Status::permission_denied(message),
        Refusal::Unavailable => tonic::Status::unavailable(message),
    }
}

/// The protocol of an RPC (`/package.Service/Method`); `None` for RPCs Triton does not serve
/// (`grpc.health.v1.Health/Watch`, unknown methods), which are answered as before.
pub fn category(path: &str) -> Option<RestrictedCategory> {
    use RestrictedCategory as C;
    if path == "/grpc.health.v1.Health/Check" {
        return Some(C::Health);
    }
    let method = path.strip_prefix("/inference.GRPCInferenceService/")?;
    Some(match method {
        "ServerLive" | "ServerReady" | "ModelReady" => C::Health,
        "ServerMetadata" | "ModelMetadata" => C::Metadata,
        "ModelInfer" | "ModelStreamInfer" => C::Inference,
        "ModelConfig" => C::ModelConfig,
        "ModelStatistics" => C::Statistics,
        "RepositoryIndex" | "RepositoryModelLoad" | "RepositoryModelUnload" => C::ModelRepository,
        "SystemSharedMemoryStatus"
        | "SystemSharedMemoryRegister"
        | "SystemSharedMemoryUnregister"
        | "CudaSharedMemoryStatus"
        | "CudaSharedMemoryRegister"
        | "CudaSharedMemoryUnregister" => C::SharedMemory,
        "TraceSetting" => C::Trace,
        "LogSettings" => C::Logging,
        _ => return None,
    })
}

#[cfg(test)]
mod tests;
