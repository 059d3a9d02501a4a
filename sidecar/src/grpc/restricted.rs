//! `--grpc-restricted-protocol` on the gRPC port: which protocol an RPC belongs to, as Triton's
//! gRPC server assigns them, and the refusal of a call without the protocol's metadata key
//! (`triton-grpc-protocol-<key>`): `UNAVAILABLE` "This protocol is restricted, expecting header
//! '<key>'", before the call reaches its service. A refused `ModelStreamInfer` ends at once with
//! that status, as Triton ends it before reading a request.

use std::convert::Infallible;
use std::task::{Context, Poll};

use futures::future::{Either, Ready, ready};
use http::{Request, Response};
use infergate_config::RestrictedCategory;
use tonic::body::Body;
use tower::Service;

use crate::audit;
use crate::caller::Caller;
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

impl<S, B> Service<Request<B>> for Restricted<S>
where
    S: Service<Request<B>, Response = Response<Body>, Error = Infallible>,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Either<S::Future, Ready<Result<Response<Body>, Infallible>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        // Without a key or a pod-only API configured there is nothing to refuse or audit.
        let guard = &self.state.grpc_restricted;
        let path = request.uri().path();
        if !guard.is_empty()
            && let Some(category) = category(path)
        {
            let caller = Caller::of(request.extensions());
            let refused = guard.check(category, request.headers(), caller).err();
            if audit::is_control(category) {
                let allowed = refused.is_none();
                audit::control_call("grpc", category, None, path, caller, guard, allowed);
            }
            if let Some(message) = refused {
                let (parts, ()) = tonic::Status::unavailable(message)
                    .into_http::<()>()
                    .into_parts();
                return Either::Right(ready(Ok(Response::from_parts(parts, Body::empty()))));
            }
        }
        Either::Left(self.inner.call(request))
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
