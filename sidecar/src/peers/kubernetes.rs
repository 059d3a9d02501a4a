//! Discovery in Kubernetes: the peers are the pods of a headless Service, as its EndpointSlices
//! list them. The sidecar watches the slices (`list` and `watch` on `endpointslices` in its own
//! namespace is all it needs) and replaces the membership each time they change.
//!
//! Only the slices with the Service's name and the labels configured are read (`slice_selector`).
//! Every pod the slices name is a peer, ready or not: readiness comes from the sidecars' own
//! probes, which see a peer start and drain sooner than the slices do, and a pod that is
//! draining must still be asked for the sequences it holds. A pod leaves the list when it leaves
//! the slices, that is when it is gone.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};

use super::membership::Members;

/// The label the EndpointSlice controller puts on every slice of a Service.
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The slices' port that peers are reached at; where no port has this name, the first.
const PORT_NAME: &str = "grpc";
/// Where a pod finds its namespace when `$POD_NAMESPACE` is not set.
const NAMESPACE_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// Which Service to watch, in which namespace, and this sidecar's address among its pods.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub namespace: String,
    pub service: String,
    pub me: String,
    /// Labels the Service's slices must carry to be read (`server.sequence_peers_labels`).
    pub labels: Option<String>,
}

impl Target {
    /// `[NAMESPACE/]SERVICE`; the namespace defaults to `$POD_NAMESPACE`, then the pod's
    /// service-account namespace. This sidecar is `$POD_IP` at `grpc_port`.
    pub fn from_setting(setting: &str, grpc_port: u16) -> Result<Target, String> {
        Target::parse(
            setting,
            std::env::var("POD_IP").ok(),
            own_namespace,
            grpc_port,
        )
    }

    /// `[NAMESPACE/]SERVICE` of other sidecars, a canary's, which this one is not among.
    pub fn of_others(setting: &str) -> Result<Target, String> {
        let (namespace, service) = split(setting, own_namespace)?;
        Ok(Target {
            namespace,
            service,
            me: String::new(),
            labels: None,
        })
    }

    fn parse(
        setting: &str,
        pod_ip: Option<String>,
        own_namespace: impl FnOnce() -> Result<String, String>,
        grpc_port: u16,
    ) -> Result<Target, String> {
        let (namespace, service) = split(setting, own_namespace)?;
        let ip = pod_ip.ok_or_else(|| {
            "$POD_IP is not set: give the sidecar its pod's address (the downward API's status.podIP)"
                .to_string()
        })?;
        let ip: std::net::IpAddr = ip
            .parse()
            .map_err(|_| format!("$POD_IP '{ip}' is not an IP address"))?;
        Ok(Target {
            namespace,
            service,
            me: std::net::SocketAddr::new(ip, grpc_port).to_string(),
            labels: None,
        })
    }
}

/// The namespace and the name of `[NAMESPACE/]NAME`; the namespace defaults as
/// [`Target::from_setting`]'s does.
pub fn namespaced_name(setting: &str) -> Result<(String, String), String> {
    split(setting, own_namespace)
}

/// The namespace and the Service of `[NAMESPACE/]SERVICE`.
fn split(
    setting: &str,
    own_namespace: impl FnOnce() -> Result<String, String>,
) -> Result<(String, String), String> {
    Ok(match setting.split_once('/') {
        Some((namespace, service)) => (namespace.to_string(), service.to_string()),
        None => (own_namespace()?, setting.to_string()),
    })
}

fn own_namespace() -> Result<String, String> {
    if let Ok(namespace) = std::env::var("POD_NAMESPACE") {
        return Ok(namespace);
    }
    std::fs::read_to_string(NAMESPACE_FILE)
        .map(|s| s.trim().to_string())
        .map_err(|e| {
            format!("no namespace given, $POD_NAMESPACE is not set and {NAMESPACE_FILE}: {e}")
        })
}

/// Watches the Service's EndpointSlices and keeps `members` equal to the pods they name, until
/// aborted. Errors (the API server unreachable, access refused) are logged and retried with
/// backoff; the membership stays as last seen meanwhile.
pub async fn watch(members: Arc<Members>, target: Target) {
    let client = loop {
        match kube::Client::try_default().await {
            Ok(client) => break client,
            Err(e) => {
                tracing::warn!(error = %e, service = %target.service, "no Kubernetes client for peer discovery; retrying");
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        }
    };
    let api = Api::<EndpointSlice>::namespaced(client, &target.namespace);
    let config = watcher::Config::default()
        .labels(&slice_selector(&target.service, target.labels.as_deref()));
    let mut events = std::pin::pin!(watcher::watcher(api, config).default_backoff());
    let mut slices = Slices::default();
    let mut listing = None::<Slices>;
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(event) => event,
            Err(e) => {
                tracing::warn!(namespace = %target.namespace, service = %target.service, error = %e, "watching peers");
                continue;
            }
        };
        match event {
            Event::Init => listing = Some(Slices::default()),
            Event::InitApply(slice) => {
                if let Some(listing) = &mut listing {
                    listing.apply(&slice);
                }
            }
            Event::InitDone => slices = listing.take().unwrap_or_default(),
            Event::Apply(slice) => slices.apply(&slice),
            Event::Delete(slice) => slices.delete(&slice),
        }
        if listing.is_none() {
            members.replace(&slices.addresses());
        }
    }
}

/// The label selector of the slices read: the Service's name, and the labels the configuration
/// names (`server.sequence_peers_labels`; the operator names the InferenceService's, which the
/// EndpointSlice controller copies from the Service onto its slices). Hygiene, not a defence:
/// whoever may write slices can copy the labels.
fn slice_selector(service: &str, labels: Option<&str>) -> String {
    match labels.filter(|l| !l.is_empty()) {
        Some(labels) => format!("{SERVICE_NAME_LABEL}={service},{labels}"),
        None => format!("{SERVICE_NAME_LABEL}={service}"),
    }
}

/// The peers' addresses by slice name.
#[derive(Default)]
struct Slices(BTreeMap<String, Vec<String>>);

impl Slices {
    fn apply(&mut self, slice: &EndpointSlice) {
        let name = slice.metadata.name.clone().unwrap_or_default();
        self.0.insert(name, addresses(slice));
    }

    fn delete(&mut self, slice: &EndpointSlice) {
        self.0
            .remove(slice.metadata.name.as_deref().unwrap_or_default());
    }

    fn addresses(&self) -> Vec<String> {
        let mut all: Vec<String> = self.0.values().flatten().cloned().collect();
        all.sort_unstable();
        all.dedup();
        all
    }
}

/// `IP:PORT` of each endpoint of a slice, at its `grpc` port. Each endpoint's first address is
/// the pod's (the Service's address family); endpoints without a port to reach are left out.
fn addresses(slice: &EndpointSlice) -> Vec<String> {
    let ports = slice.ports.as_deref().unwrap_or_default();
    let port = ports
        .iter()
        .find(|p| p.name.as_deref() == Some(PORT_NAME))
        .or_else(|| ports.first())
        .and_then(|p| p.port)
        .and_then(|p| u16::try_from(p).ok());
    let Some(port) = port else {
        return Vec::new();
    };
    slice
        .endpoints
        .iter()
        .filter_map(|endpoint| endpoint.addresses.first())
        .filter_map(|address| address.parse::<std::net::IpAddr>().ok())
        .map(|ip| std::net::SocketAddr::new(ip, port).to_string())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slice(name: &str, value: serde_json::Value) -> EndpointSlice {
        let mut value = value;
        value["metadata"] = serde_json::json!({"name": name});
        value["addressType"] = "IPv4".into();
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn only_the_slices_with_the_services_name_and_the_labels_named_are_read() {
        assert_eq!(
            slice_selector("seq-peers", Some("app.kubernetes.io/instance=seq")),
            "kubernetes.io/service-name=seq-peers,app.kubernetes.io/instance=seq"
        );
        assert_eq!(
            slice_selector("seq-peers", None),
            "kubernetes.io/service-name=seq-peers"
        );
    }

    #[test]
    fn takes_every_endpoint_at_the_grpc_port() {
        let s = slice(
            "a",
            serde_json::json!({
                "ports": [{"name": "http", "port": 8000}, {"name": "grpc", "port": 8001}],
                "endpoints": [
                    {"addresses": ["10.0.0.2"], "conditions": {"ready": true}},
                    {"addresses": ["10.0.0.3"], "conditions": {"ready": false}},
                    {"addresses": ["10.0.0.4"], "conditions": {"ready": false, "terminating": true}},
                ],
            }),
        );
        assert_eq!(
            addresses(&s),
            ["10.0.0.2:8001", "10.0.0.3:8001", "10.0.0.4:8001"]
        );
    }

    #[test]
    fn without_ports_a_slice_names_no_peer() {
        let s = slice(
            "a",
            serde_json::json!({"endpoints": [{"addresses": ["10.0.0.2"]}]}),
        );
        assert!(addresses(&s).is_empty());
    }

    #[test]
    fn slices_merge_sorted_and_deduplicated_and_go_when_deleted() {
        let a = slice(
            "a",
            serde_json::json!({"ports": [{"name": "grpc", "port": 8001}],
                "endpoints": [{"addresses": ["10.0.0.9"]}, {"addresses": ["10.0.0.2"]}]}),
        );
        let b = slice(
            "b",
            serde_json::json!({"ports": [{"name": "grpc", "port": 8001}],
                "endpoints": [{"addresses": ["10.0.0.2"]}, {"addresses": ["fe80::1"]}]}),
        );
        let mut slices = Slices::default();
        slices.apply(&a);
        slices.apply(&b);
        assert_eq!(
            slices.addresses(),
            ["10.0.0.2:8001", "10.0.0.9:8001", "[fe80::1]:8001"]
        );
        slices.delete(&a);
        assert_eq!(slices.addresses(), ["10.0.0.2:8001", "[fe80::1]:8001"]);
    }

    #[test]
    fn the_setting_names_the_namespace_or_the_pod_does() {
        let pod = |namespace: &'static str| move || Ok(namespace.to_string());
        let target = Target::parse("models/seq-peers", Some("10.1.2.3".into()), pod("x"), 8001);
        assert_eq!(
            target.unwrap(),
            Target {
                namespace: "models".into(),
                service: "seq-peers".into(),
                me: "10.1.2.3:8001".into(),
                labels: None,
            }
        );
        let target = Target::parse("seq-peers", Some("fd00::7".into()), pod("team"), 8001).unwrap();
        assert_eq!(
            (target.namespace.as_str(), target.me.as_str()),
            ("team", "[fd00::7]:8001")
        );
        let missing = Target::parse("seq-peers", None, pod("team"), 8001).unwrap_err();
        assert!(missing.contains("$POD_IP is not set"), "{missing}");
        let bad = Target::parse("seq-peers", Some("pod-a".into()), pod("team"), 8001).unwrap_err();
        assert!(bad.contains("not an IP address"), "{bad}");
    }
}
