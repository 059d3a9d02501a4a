//! Who is calling: the address a connection comes from, which each port gives its requests.
//!
//! The pod is the unit of trust: a caller on loopback is a container of the same pod (a pod's
//! containers share one network namespace, and only they share its `/dev/shm`). What only the
//! pod may do (use shared memory, drain the sidecar) is refused to every other caller.

use std::net::{IpAddr, SocketAddr};
use std::task::{Context, Poll};

use http::Request;
use tower::Service;

/// The address of the connection a request came on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caller(pub SocketAddr);

impl Caller {
    /// The caller a request carries (none where no port gave one: then it is not local).
    pub fn of(extensions: &http::Extensions) -> Option<Caller> {
        extensions.get::<Caller>().copied()
    }

    /// The address as an audit line writes it: an IPv4 client of an IPv6 socket as plain IPv4
    /// (`10.1.2.3:4000`, not `[::ffff:10.1.2.3]:4000`).
    pub fn shown(&self) -> String {
        SocketAddr::new(self.0.ip().to_canonical(), self.0.port()).to_string()
    }

    /// On loopback (an IPv4-mapped loopback address on an IPv6 socket included).
    pub fn is_local(&self) -> bool {
        match self.0.ip() {
            IpAddr::V4(ip) => ip.is_loopback(),
            IpAddr::V6(ip) => {
                ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
            }
        }
    }
}

/// A request came on a TLS connection whose client presented a certificate that the port's
/// verifier accepted (on the admin port: one of `server.status_client_ca`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CertifiedClient;

/// Whether a request's caller is local; a request without one is not.
pub fn is_local(caller: Option<Caller>) -> bool {
    caller.is_some_and(|c| c.is_local())
}

/// A connection's service that gives each of its requests the connection's caller.
#[derive(Clone)]
pub struct WithCaller<S> {
    inner: S,
    caller: Option<Caller>,
}

impl<S> WithCaller<S> {
    pub fn new(inner: S, caller: Option<Caller>) -> Self {
        WithCaller { inner, caller }
    }
}

impl<S, B> Service<Request<B>> for WithCaller<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        if let Some(caller) = self.caller {
            request.extensions_mut().insert(caller);
        }
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_callers_are_local() {
        let local = |addr: &str| Caller(addr.parse().unwrap()).is_local();
        assert!(local("127.0.0.1:5000"));
        assert!(local("127.8.9.1:5000"));
        assert!(local("[::1]:5000"));
        assert!(local("[::ffff:127.0.0.1]:5000"));
        assert!(!local("10.0.0.7:5000"));
        assert!(!local("192.0.2.2:5000"));
        assert!(!local("[::ffff:10.0.0.7]:5000"));
        assert!(!local("[fd00::1]:5000"));
        assert!(!is_local(None));
    }
}
