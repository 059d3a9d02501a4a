//! `status.tls`: the client ports' TLS as the sidecars serve it, from their admin status. What the
//! spec asks for only fills the gap while no pod has answered.

use k8s_openapi::jiff::Timestamp;
use serde::Deserialize;

use crate::crd::{InferenceService, PortTls, TlsStatus};

/// The `tls` object of a sidecar's admin status.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct AdminTls {
    #[serde(default)]
    pub http: AdminPortTls,
    #[serde(default)]
    pub grpc: AdminPortTls,
    #[serde(default)]
    pub metrics: AdminPortTls,
}

/// One client port's TLS in a sidecar's admin status.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct AdminPortTls {
    #[serde(default)]
    pub enabled: bool,
    #[serde(default)]
    pub mutual: bool,
    /// Expiry of the certificate served, in seconds since the epoch.
    #[serde(default)]
    pub not_after: Option<i64>,
}

impl AdminPortTls {
    fn state(&self) -> &'static str {
        match (self.enabled, self.mutual) {
            (false, _) => "Off",
            (true, false) => "On",
            (true, true) => "Mutual",
        }
    }
}

/// `status.tls` from the reports of the pods that answered.
pub fn tls_status(isvc: &InferenceService, reports: &[&AdminTls]) -> TlsStatus {
    let unreported = match &isvc.spec.tls {
        None => "Off",
        Some(_) => "Pending",
    };
    let port = |pick: fn(&AdminTls) -> &AdminPortTls, unreported: &str| {
        let mut states = reports.iter().map(|r| pick(r).state());
        let state = match states.next() {
            None => unreported,
            Some(first) if states.all(|s| s == first) => first,
            Some(_) => "Mixed",
        };
        PortTls {
            state: state.to_string(),
            pods_reporting: i32::try_from(reports.len()).unwrap_or(i32::MAX),
        }
    };
    let http = port(|r| &r.http, unreported);
    let grpc = port(|r| &r.grpc, unreported);
    let metrics_unreported = match isvc.spec.metrics_tls() {
        Some(_) => "Pending",
        None => "Off",
    };
    let metrics = port(|r| &r.metrics, metrics_unreported);
    let summary = if http.state == grpc.state {
        http.state.clone()
    } else {
        "Mixed".to_string()
    };
    let not_after = reports
        .iter()
        .flat_map(|r| [&r.http, &r.grpc])
        .filter(|p| p.enabled)
        .filter_map(|p| p.not_after)
        .min()
        .and_then(|seconds| Timestamp::from_second(seconds).ok())
        .map(|t| t.to_string());
    TlsStatus {
        summary,
        http,
        grpc,
        metrics,
        not_after,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::TlsSpec;

    fn isvc(tls: bool) -> InferenceService {
        let mut isvc: InferenceService = serde_json::from_value(serde_json::json!({
            "apiVersion": "infergate.dev/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": "m", "namespace": "ns"},
            "spec": {"model": {"image": "triton"}},
        }))
        .unwrap();
        if tls {
            isvc.spec.tls = Some(TlsSpec {
                secret_name: Some("m-cert".into()),
                ..TlsSpec::default()
            });
        }
        isvc
    }

    fn port(enabled: bool, mutual: bool, not_after: Option<i64>) -> AdminPortTls {
        AdminPortTls {
            enabled,
            mutual,
            not_after,
        }
    }

    #[test]
    fn pods_that_agree_give_their_state_and_the_first_expiry() {
        let a = AdminTls {
            http: port(true, true, Some(2_000_000_000)),
            grpc: port(true, true, Some(1_900_000_000)),
            metrics: port(true, false, Some(1_900_000_000)),
        };
        let b = AdminTls {
            http: port(true, true, Some(1_800_000_000)),
            grpc: port(true, true, Some(1_800_000_000)),
            metrics: port(true, false, Some(1_800_000_000)),
        };
        let status = tls_status(&isvc(true), &[&a, &b]);
        assert_eq!(status.summary, "Mutual");
        // The metrics port is never mutual, and is not in the summary of the client ports.
        assert_eq!(status.metrics.state, "On");
        assert_eq!(status.http.pods_reporting, 2);
        assert_eq!(status.not_after.as_deref(), Some("2027-01-15T08:00:00Z"));
    }

    #[test]
    fn a_rollout_between_certificates_and_plaintext_is_mixed() {
        let old = AdminTls::default();
        let new = AdminTls {
            http: port(true, false, Some(1_800_000_000)),
            grpc: port(true, false, Some(1_800_000_000)),
            metrics: port(false, false, None),
        };
        let status = tls_status(&isvc(true), &[&old, &new]);
        assert_eq!(status.summary, "Mixed");
        assert_eq!(status.grpc.state, "Mixed");
        assert_eq!(tls_status(&isvc(true), &[&new]).summary, "On");
    }

    #[test]
    fn without_reports_the_spec_says_pending_or_off() {
        let pending = tls_status(&isvc(true), &[]);
        assert_eq!(pending.summary, "Pending");
        assert_eq!(pending.metrics.state, "Pending");
        let mut plain_metrics = isvc(true);
        plain_metrics.spec.tls.as_mut().unwrap().metrics = false;
        assert_eq!(tls_status(&plain_metrics, &[]).metrics.state, "Off");
        let off = tls_status(&isvc(false), &[]);
        assert_eq!((off.summary.as_str(), off.not_after), ("Off", None));
        let plain = AdminTls::default();
        assert_eq!(tls_status(&isvc(false), &[&plain]).summary, "Off");
    }
}
