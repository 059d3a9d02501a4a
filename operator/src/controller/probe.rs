//! Asks each ready pod's sidecar what is live: `GET /status` on its admin port, with a time
//! limit, a size limit and bounded parallelism, so a pod that hangs cannot stall a reconcile.
//! With the operator's client certificate, over TLS (`crate::status_client`); otherwise over
//! plain HTTP, with the status token where there is one.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use super::status::{AdminStatus, PodReport};
use crate::status_client::StatusClientCertificate;
use crate::status_token::StatusToken;

/// Largest admin status accepted (a sidecar's is a few KiB).
const MAX_STATUS_BYTES: usize = 1 << 20;
/// Pods probed at once.
const PARALLEL_PROBES: usize = 16;

/// Probes sidecars' admin endpoints.
#[derive(Clone)]
pub struct Prober {
    transport: Transport,
    timeout: Duration,
    /// `pod-ip:port` → `host:port`: where to reach a pod instead (tests whose pods are not real
    /// processes point this at sidecars on loopback). Empty in production.
    address_map: HashMap<String, String>,
    /// Presented as `Authorization: Bearer …`: a sidecar answers `/status` off loopback only
    /// to a token whose digest its configuration lists.
    token: Option<StatusToken>,
}

impl Prober {
    /// A prober over plain HTTP.
    pub fn new(timeout: Duration, address_map: HashMap<String, String>) -> Self {
        Prober {
            transport: Transport::Plain(client(http_connector(timeout))),
            timeout,
            address_map,
            token: None,
        }
    }

    /// The client certificate to present, over TLS; without one, plain HTTP.
    pub fn with_client_certificate(
        mut self,
        certificate: Option<&StatusClientCertificate>,
    ) -> Result<Self, String> {
        let Some(certificate) = certificate else {
            return Ok(self);
        };
        let mut connector = http_connector(self.timeout);
        // TLS is the outer connector's to speak.
        connector.enforce_http(false);
        let tls = HttpsConnectorBuilder::new()
            .with_tls_config(certificate.client_config()?)
            .https_only()
            .enable_http1()
            .wrap_connector(connector);
        self.transport = Transport::Tls(client(tls));
        Ok(self)
    }

    /// The status token to present.
    pub fn with_token(mut self, token: Option<StatusToken>) -> Self {
        self.token = token;
        self
    }

    /// Probes every pod that is ready and has an address; the others are not asked.
    pub async fn probe_ready_pods(&self, pods: &[Pod], admin_port: i32) -> Vec<PodReport> {
        let targets: Vec<(String, String)> = pods
            .iter()
            .filter(|p| is_ready(p) && p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| {
                let ip = p.status.as_ref()?.pod_ip.clone()?;
                Some((p.name_any(), authority(&ip, admin_port)))
            })
            .collect();
        let mut reports: Vec<PodReport> = futures::stream::iter(targets)
            .map(|(pod, addr)| async move {
                let outcome = self.probe(&addr).await;
                PodReport { pod, outcome }
            })
            .buffer_unordered(PARALLEL_PROBES)
            .collect()
            .await;
        reports.sort_by(|a, b| a.pod.cmp(&b.pod));
        reports
    }

    /// The address to dial for a pod address: an exact entry of the map, else a
    /// `*:PORT` entry for the port, else the address itself.
    fn mapped<'a>(&'a self, addr: &'a str) -> &'a str {
        let wildcard = || {
            let (_, port) = addr.rsplit_once(':')?;
            self.address_map.get(&format!("*:{port}"))
        };
        self.address_map
            .get(addr)
            .or_else(wildcard)
            .map_or(addr, String::as_str)
    }

    /// `GET http(s)://addr/status`, parsed.
    pub async fn probe(&self, addr: &str) -> Result<AdminStatus, String> {
        let target = self.mapped(addr);
        let uri: http::Uri = format!("{}://{target}/status", self.transport.scheme())
            .parse()
            .map_err(|e| format!("bad address {target}: {e}"))?;
        let call = async {
            let mut request = http::Request::get(uri);
            if let Some(token) = &self.token {
                request = request.header(http::header::AUTHORIZATION, token.authorization());
            }
            let request = request
                .body(Empty::new())
                .map_err(|e| format!("bad request to {target}: {e}"))?;
            let response = self
                .transport
                .request(request)
                .await
                .map_err(|e| format!("admin endpoint {target} unreachable: {e}"))?;
            let status = response.status();
            let body = Limited::new(response.into_body(), MAX_STATUS_BYTES)
                .collect()
                .await
                .map_err(|e| format!("admin status from {target} unreadable: {e}"))?
                .to_bytes();
            if !status.is_success() {
                return Err(format!("admin endpoint {target} answered {status}"));
            }
            serde_json::from_slice::<AdminStatus>(&body)
                .map_err(|e| format!("admin status from {target} is not valid: {e}"))
        };
        match tokio::time::timeout(self.timeout, call).await {
            Ok(result) => result,
            Err(_) => Err(format!(
                "admin endpoint {target} did not answer within {} ms",
                self.timeout.as_millis()
            )),
        }
    }
}

/// How the admin ports are reached.
#[derive(Clone)]
enum Transport {
    Plain(Client<HttpConnector, Empty<Bytes>>),
    /// With the operator's client certificate.
    Tls(Client<HttpsConnector<HttpConnector>, Empty<Bytes>>),
}

impl Transport {
    fn scheme(&self) -> &'static str {
        match self {
            Transport::Plain(_) => "http",
            Transport::Tls(_) => "https",
        }
    }

    async fn request(
        &self,
        request: http::Request<Empty<Bytes>>,
    ) -> Result<http::Response<hyper::body::Incoming>, hyper_util::client::legacy::Error> {
        match self {
            Transport::Plain(client) => client.request(request).await,
            Transport::Tls(client) => client.request(request).await,
        }
    }
}

fn http_connector(timeout: Duration) -> HttpConnector {
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(timeout));
    connector.set_nodelay(true);
    connector
}

fn client<C>(connector: C) -> Client<C, Empty<Bytes>>
where
    C: hyper_util::client::legacy::connect::Connect + Clone,
{
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .build(connector)
}

/// A pod address and port as a URL's authority: an IPv6 address in brackets
/// (`[fd00::5]:8003`), an IPv4 one as it is.
fn authority(ip: &str, port: i32) -> String {
    match ip.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V6(v6)) => format!("[{v6}]:{port}"),
        _ => format!("{ip}:{port}"),
    }
}

/// Whether the pod's `Ready` condition is true.
pub fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Parses `FROM=TO` pairs (`10.0.0.5:8003=127.0.0.1:41234`); `*:8003=...`
/// stands for every pod address with that port.
pub fn parse_address_map(pairs: &[String]) -> Result<HashMap<String, String>, String> {
    pairs
        .iter()
        .map(|p| {
            p.split_once('=')
                .filter(|(a, b)| !a.is_empty() && !b.is_empty())
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .ok_or_else(|| format!("{p:?} is not FROM=TO"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prober(pairs: &[&str]) -> Prober {
        let pairs: Vec<String> = pairs.iter().map(|p| p.to_string()).collect();
        Prober::new(
            Duration::from_millis(100),
            parse_address_map(&pairs).unwrap(),
        )
    }

    #[test]
    fn exact_entries_win_over_the_port_wildcard() {
        let p = prober(&["10.0.0.5:8003=127.0.0.1:1", "*:8003=127.0.0.1:2"]);
        assert_eq!(p.mapped("10.0.0.5:8003"), "127.0.0.1:1");
        assert_eq!(p.mapped("10.0.0.6:8003"), "127.0.0.1:2");
        assert_eq!(p.mapped("10.0.0.6:9000"), "10.0.0.6:9000");
    }

    #[test]
    fn ipv6_pod_addresses_are_bracketed_and_still_mapped_by_port() {
        assert_eq!(authority("10.0.0.5", 8003), "10.0.0.5:8003");
        assert_eq!(authority("fd00::5", 8003), "[fd00::5]:8003");
        let p = prober(&["*:8003=127.0.0.1:2"]);
        assert_eq!(p.mapped(&authority("fd00::5", 8003)), "127.0.0.1:2");
        let uri: http::Uri = format!("http://{}/status", authority("fd00::5", 8003))
            .parse()
            .unwrap();
        assert_eq!(uri.host(), Some("[fd00::5]"));
    }

    #[test]
    fn malformed_pairs_are_refused() {
        assert!(parse_address_map(&["10.0.0.5:8003".to_string()]).is_err());
        assert!(parse_address_map(&["=127.0.0.1:1".to_string()]).is_err());
    }
}
