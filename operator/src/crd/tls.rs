//! `spec.tls`: the certificate the sidecar's client ports serve, from a Secret of the user's or
//! from cert-manager.

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// TLS on the sidecar's HTTP and gRPC ports, and its metrics port. The admin port stays plain
/// HTTP (the kubelet's probes present no certificate; its other paths are loopback-only or need
/// the operator's token). A renewed certificate is served to new connections without restarting
/// the pod; open connections keep theirs.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[x_kube(
    validation = Rule::new("has(self.secretName) != has(self.issuerRef)")
        .message("tls takes exactly one of secretName (a Secret of yours) and issuerRef (cert-manager makes the Secret)")
)]
#[serde(rename_all = "camelCase")]
pub struct TlsSpec {
    /// A Secret of the resource's namespace, as cert-manager and `kubectl create secret tls`
    /// make them: tls.crt (the certificate and its chain), tls.key, and ca.crt (the root of the
    /// clients' certificates) where mutual is set. Mounted as a volume in the sidecar only.
    /// Where sidecars route sequences (extensions.sequence.routing Sidecar) they forward to
    /// each other over TLS, as the activator (scaleToZero) passes held calls on: ca.crt is then
    /// required, and the certificate must also name <name>-peers.<namespace>.svc and, with
    /// mutual, allow client authentication.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub secret_name: Option<String>,
    /// A cert-manager issuer: the operator renders a Certificate <name>-tls for the Service's
    /// DNS names (<name>, <name>.<namespace>, <name>.<namespace>.svc and
    /// <name>.<namespace>.svc.cluster.local, and the same of <name>-peers where sidecars route
    /// sequences), which cert-manager keeps, renewed, in the Secret <name>-tls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer_ref: Option<IssuerRef>,
    /// Mutual TLS: clients must present a certificate signed by the Secret's ca.crt (for
    /// cert-manager, the issuer's CA). Clients without one, or with one of another CA, are
    /// refused during the handshake.
    #[serde(default)]
    pub mutual: bool,
    /// The metrics port serves the same certificate, never asking for a client's (scrapers hold
    /// none): scrapers use https, trust the Secret's ca.crt and verify the name
    /// <name>.<namespace>.svc, which the certificate carries (they reach pods by address). The
    /// PodMonitor (monitoring.podMonitor) is rendered so. false: plain HTTP, for scrapers that
    /// cannot be given the CA.
    #[serde(default = "default_true")]
    pub metrics: bool,
}

fn default_true() -> bool {
    true
}

impl Default for TlsSpec {
    fn default() -> Self {
        TlsSpec {
            secret_name: None,
            issuer_ref: None,
            mutual: false,
            metrics: true,
        }
    }
}

impl TlsSpec {
    /// The name scrapers verify on the metrics port: the Service's, which the certificate
    /// carries.
    pub fn metrics_server_name(isvc_name: &str, namespace: &str) -> String {
        format!("{isvc_name}.{namespace}.svc")
    }

    /// The Secret the sidecar mounts: the user's, or the one cert-manager keeps for the
    /// Certificate of `isvc_name`.
    pub fn secret(&self, isvc_name: &str) -> String {
        match &self.secret_name {
            Some(name) => name.clone(),
            None => certificate_secret_name(isvc_name),
        }
    }
}

/// Name of the Certificate the operator renders from `tls.issuerRef`, and of the Secret
/// cert-manager keeps it in.
pub fn certificate_secret_name(isvc_name: &str) -> String {
    format!("{isvc_name}-tls")
}

/// A cert-manager issuer, as a Certificate's `issuerRef` names it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct IssuerRef {
    /// Name of the Issuer (in the resource's namespace) or ClusterIssuer.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Issuer or ClusterIssuer.
    #[serde(default)]
    pub kind: IssuerKind,
    /// API group of the issuer: cert-manager.io, or an external issuer's group.
    #[serde(default = "default_issuer_group")]
    #[schemars(length(min = 1, max = 253))]
    pub group: String,
}

fn default_issuer_group() -> String {
    "cert-manager.io".to_string()
}

/// Kind of a cert-manager issuer.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IssuerKind {
    /// An Issuer of the resource's namespace.
    #[default]
    Issuer,
    /// A ClusterIssuer.
    ClusterIssuer,
}

impl IssuerKind {
    /// The Kubernetes spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            IssuerKind::Issuer => "Issuer",
            IssuerKind::ClusterIssuer => "ClusterIssuer",
        }
    }
}
