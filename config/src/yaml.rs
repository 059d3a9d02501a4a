//! The only place YAML is read or written, so the YAML library can be swapped in one module.

use super::SidecarConfig;

/// Parses a configuration document. An empty document is the default configuration.
pub fn from_str(text: &str) -> Result<SidecarConfig, String> {
    if text.trim().is_empty() {
        return Ok(SidecarConfig::default());
    }
    serde_yaml::from_str(text).map_err(|e| e.to_string())
}

/// Renders a configuration as YAML (used by the operator for its ConfigMap).
pub fn to_string(config: &SidecarConfig) -> Result<String, String> {
    serde_yaml::to_string(config).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BackendConfig;

    #[test]
    fn empty_document_is_default() {
        assert_eq!(from_str("").unwrap(), SidecarConfig::default());
    }

    #[test]
    fn round_trip() {
        let mut cfg = SidecarConfig::default();
        cfg.server.http_port = 9000;
        cfg.backend = BackendConfig::Builtin {
            models: vec!["simple".into()],
        };
        let text = to_string(&cfg).unwrap();
        assert_eq!(from_str(&text).unwrap(), cfg);
    }

    #[test]
    fn upstream_model_settings_carry_a_config_overlay_and_a_sequence_mode() {
        let text = "backend:\n  kind: upstream\n  url: grpc://127.0.0.1:8001\n  models:\n    - name: seq\n      sequence: sidecar\n      config: {max_batch_size: 8, sequence_batching: {max_sequence_idle_microseconds: 5000000}}\n";
        let cfg = from_str(text).unwrap();
        let BackendConfig::Upstream(up) = cfg.backend else {
            panic!("not an upstream backend");
        };
        let model = &up.models[0];
        assert_eq!(model.sequence, Some(crate::SequenceMode::Sidecar));
        let overlay = model.config.as_ref().unwrap();
        assert_eq!(overlay["max_batch_size"], 8);
        assert_eq!(
            overlay["sequence_batching"]["max_sequence_idle_microseconds"],
            5_000_000
        );
        let err = from_str(&text.replace("sidecar", "somewhere")).unwrap_err();
        assert!(err.contains("somewhere"), "{err}");
    }

    #[test]
    fn limits_are_read_alone_and_the_rest_keep_their_defaults() {
        let cfg = from_str("limits:\n  max_cuda_pinned_bytes: 0\n").unwrap();
        assert_eq!(cfg.limits.max_cuda_pinned_bytes, 0);
        assert_eq!(
            cfg.limits.max_shm_bytes,
            SidecarConfig::default().limits.max_shm_bytes
        );
        assert_eq!(
            SidecarConfig::default().limits.max_cuda_pinned_bytes,
            64 << 20
        );
    }

    #[test]
    fn restrictions_are_read_and_written_only_when_set() {
        let text = "server:\n  http_restricted_api: ['inference,metadata:infer-key=infer-value']\n  grpc_restricted_protocol: ['health:k=v']\n";
        let cfg = from_str(text).unwrap();
        assert_eq!(
            cfg.server.http_restricted_api,
            ["inference,metadata:infer-key=infer-value"]
        );
        assert_eq!(cfg.server.grpc_restricted_protocol, ["health:k=v"]);
        assert_eq!(from_str(&to_string(&cfg).unwrap()).unwrap(), cfg);
        let plain = to_string(&SidecarConfig::default()).unwrap();
        assert!(!plain.contains("restricted"), "{plain}");
    }

    #[test]
    fn unknown_fields_are_rejected() {
        let err = from_str("server:\n  http_prot: 1\n").unwrap_err();
        assert!(err.contains("http_prot"), "{err}");
    }
}
