//! Triton's `--trace-config`: settings given as `[<mode>,]<name>=<value>`, read into the trace
//! configuration the sidecar starts with. The general settings are `level` (repeatable: OFF,
//! TIMESTAMPS, TENSORS), `rate`, `count` and `mode` (`triton` or `opentelemetry`); the
//! `opentelemetry` ones are `url`, `resource` (`key=value`, repeatable) and the batch span
//! processor's `bsp_max_queue_size`, `bsp_schedule_delay` (ms) and `bsp_max_export_batch_size`;
//! the `triton` ones are `file` and `log-frequency`. Beyond Triton's, the `opentelemetry` ones
//! include the TLS towards the collector: `certificate` (the roots its certificate must chain
//! to), `client_certificate` and `client_key` (for a collector that asks for one), named after
//! the OpenTelemetry variables `OTEL_EXPORTER_OTLP_CERTIFICATE`, `..._CLIENT_CERTIFICATE` and
//! `..._CLIENT_KEY`, which the sidecar reads when the settings are not given.
//!
//! In mode `triton` traces are written to the `file` as Triton writes them; without a file no
//! level can be on, as in Triton. In mode `opentelemetry` spans are exported over OTLP/HTTP.

/// What Triton calls the trace mode: where traces go.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TraceMode {
    /// Triton's trace files: JSON written to `file`. Without a file, tracing stays off, as in
    /// Triton.
    #[default]
    Triton,
    /// OpenTelemetry spans exported over OTLP/HTTP to `url`.
    OpenTelemetry,
}

impl TraceMode {
    pub fn as_str(self) -> &'static str {
        match self {
            TraceMode::Triton => "triton",
            TraceMode::OpenTelemetry => "opentelemetry",
        }
    }
}

/// A trace level, Triton's names. Several may be on together (TIMESTAMPS and TENSORS).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum TraceLevel {
    Timestamps,
    Tensors,
}

impl TraceLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            TraceLevel::Timestamps => "TIMESTAMPS",
            TraceLevel::Tensors => "TENSORS",
        }
    }

    /// A level as the command line gives it (`--trace-level`, `--trace-config level=`), read
    /// as Triton reads it (`ParseTraceLevelOption`): in any case, `false` and `off` for OFF, and
    /// `true`, `on`, `min` and `max` (older names) for TIMESTAMPS besides the levels' own names.
    pub fn parse_option(value: &str) -> Result<Option<TraceLevel>, String> {
        match value.to_ascii_lowercase().as_str() {
            "false" | "off" => Ok(None),
            "true" | "on" | "min" | "max" | "timestamps" => Ok(Some(TraceLevel::Timestamps)),
            "tensors" => Ok(Some(TraceLevel::Tensors)),
            _ => Err(format!(
                "unknown trace level '{value}': expected OFF, TIMESTAMPS or TENSORS"
            )),
        }
    }

    /// A level's name as the trace settings API takes it (upper case, exactly); `None` for
    /// OFF, which is the absence of levels.
    pub fn parse(name: &str) -> Result<Option<TraceLevel>, String> {
        match name {
            "OFF" => Ok(None),
            "TIMESTAMPS" => Ok(Some(TraceLevel::Timestamps)),
            "TENSORS" => Ok(Some(TraceLevel::Tensors)),
            _ => Err(format!(
                "unknown trace level '{name}': expected OFF, TIMESTAMPS or TENSORS"
            )),
        }
    }
}

/// Triton's default OTLP/HTTP address, written as Triton reports it (no scheme).
pub const DEFAULT_OTLP_URL: &str = "localhost:4318/v1/traces";

/// The trace configuration at start; level, rate and count can change at run time through the
/// trace settings API.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceConfig {
    pub mode: TraceMode,
    /// Empty: OFF.
    pub levels: Vec<TraceLevel>,
    /// One request in `rate` is traced.
    pub rate: u32,
    /// How many more requests are traced; -1 without end.
    pub count: i32,
    /// Triton mode's `log-frequency`: every this many traces go to `<file>.<n>`; 0 keeps them
    /// for `file` until the settings change or the server stops.
    pub log_frequency: u32,
    /// Triton mode's trace file (a path, relative to the working directory unless absolute).
    pub file: Option<String>,
    /// The OTLP/HTTP traces endpoint; `http://` is assumed when no scheme is given.
    pub url: String,
    /// Whether `url` was given (Triton's settings answer lists it only then).
    pub url_given: bool,
    /// Attributes of the OpenTelemetry resource (`service.name` among them, when given).
    pub resource: Vec<(String, String)>,
    pub bsp_max_queue_size: u32,
    pub bsp_schedule_delay_ms: u32,
    pub bsp_max_export_batch_size: u32,
    /// The TLS files towards an `https://` collector, where given here (the sidecar falls back
    /// on the OpenTelemetry variables for each one not given).
    pub tls: OtlpTlsSettings,
}

/// Paths of the PEM files for TLS towards the OTLP collector.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OtlpTlsSettings {
    /// The roots the collector's certificate must chain to; none: the system's.
    pub certificate: Option<String>,
    /// The certificate to present where the collector asks for one (mutual TLS).
    pub client_certificate: Option<String>,
    pub client_key: Option<String>,
}

impl Default for TraceConfig {
    fn default() -> Self {
        TraceConfig {
            mode: TraceMode::Triton,
            levels: Vec::new(),
            rate: 1000,
            count: -1,
            log_frequency: 0,
            file: None,
            url: DEFAULT_OTLP_URL.to_string(),
            url_given: false,
            resource: Vec::new(),
            bsp_max_queue_size: 2048,
            bsp_schedule_delay_ms: 5000,
            bsp_max_export_batch_size: 512,
            tls: OtlpTlsSettings::default(),
        }
    }
}

impl TraceConfig {
    /// Reads `--trace-config` settings, in order (a later setting of the same name wins, except
    /// `level` and `resource`, which add up). A `level=OFF` anywhere turns tracing off, whatever
    /// other levels say, as in Triton.
    pub fn parse(settings: &[String]) -> Result<TraceConfig, String> {
        let mut config = TraceConfig::default();
        let mut levels_given = false;
        let mut off_given = false;
        for setting in settings {
            let (scope, rest) = match setting.split_once(',') {
                Some((scope, rest)) if !scope.contains('=') => (Some(scope), rest),
                _ => (None, setting.as_str()),
            };
            let Some((name, value)) = rest.split_once('=') else {
                return Err(format!(
                    "'{setting}' is not a trace setting: expected [<mode>,]<name>=<value>"
                ));
            };
            let invalid = |what: &str| format!("'{setting}': {what}");
            match (scope, name) {
                (None, "level") => {
                    if !levels_given {
                        config.levels.clear();
                        levels_given = true;
                    }
                    let level = TraceLevel::parse_option(value).map_err(|e| invalid(&e))?;
                    off_given |= level.is_none();
                    if let Some(level) = level.filter(|l| !config.levels.contains(l)) {
                        config.levels.push(level);
                        config.levels.sort();
                    }
                }
                (None, "rate") => {
                    config.rate = positive(value).map_err(|e| invalid(&e))?;
                }
                (None, "count") => {
                    config.count = match value.parse::<i32>() {
                        Ok(n) if n >= -1 => n,
                        _ => return Err(invalid("count must be an integer, -1 or more")),
                    };
                }
                (None, "mode") => {
                    config.mode = match value {
                        "triton" => TraceMode::Triton,
                        "opentelemetry" => TraceMode::OpenTelemetry,
                        _ => return Err(invalid("mode must be triton or opentelemetry")),
                    };
                }
                (Some("triton"), "file") => config.file = Some(value.to_string()),
                (Some("triton"), "log-frequency" | "log_frequency") => {
                    config.log_frequency = value
                        .parse()
                        .map_err(|_| invalid("log-frequency must be a whole number"))?;
                }
                (Some("opentelemetry"), "url") => {
                    if value.is_empty() {
                        return Err(invalid("the url must not be empty"));
                    }
                    config.url = value.to_string();
                    config.url_given = true;
                }
                (Some("opentelemetry"), "resource") => {
                    let Some((key, attribute)) = value.split_once('=') else {
                        return Err(invalid("a resource is given as <key>=<value>"));
                    };
                    config.resource.retain(|(k, _)| k != key);
                    config
                        .resource
                        .push((key.to_string(), attribute.to_string()));
                }
                (Some("opentelemetry"), "bsp_max_queue_size") => {
                    config.bsp_max_queue_size = positive(value).map_err(|e| invalid(&e))?;
                }
                (Some("opentelemetry"), "bsp_schedule_delay") => {
                    config.bsp_schedule_delay_ms = positive(value).map_err(|e| invalid(&e))?;
                }
                (Some("opentelemetry"), "bsp_max_export_batch_size") => {
                    config.bsp_max_export_batch_size = positive(value).map_err(|e| invalid(&e))?;
                }
                (
                    Some("opentelemetry"),
                    file @ ("certificate" | "client_certificate" | "client_key"),
                ) => {
                    if value.is_empty() {
                        return Err(invalid("the file needs a path"));
                    }
                    let slot = match file {
                        "certificate" => &mut config.tls.certificate,
                        "client_certificate" => &mut config.tls.client_certificate,
                        _ => &mut config.tls.client_key,
                    };
                    *slot = Some(value.to_string());
                }
                (Some(scope @ ("triton" | "opentelemetry")), _) => {
                    return Err(invalid(&format!("unknown {scope} setting '{name}'")));
                }
                (Some(scope), _) => {
                    return Err(invalid(&format!(
                        "unknown trace mode '{scope}': expected triton or opentelemetry"
                    )));
                }
                (None, _) => return Err(invalid(&format!("unknown trace setting '{name}'"))),
            }
        }
        if off_given {
            config.levels.clear();
        }
        if config.mode == TraceMode::Triton && config.file.is_none() && !config.levels.is_empty() {
            // As Triton: a level without anywhere to write the trace.
            return Err(
                "a trace level needs a trace file (--trace-config triton,file=<path>) \
                        or --trace-config mode=opentelemetry"
                    .to_string(),
            );
        }
        if config.file.as_deref() == Some("") {
            return Err("'triton,file=': the trace file needs a path".to_string());
        }
        if config.tls != OtlpTlsSettings::default() && !config.is_https() {
            return Err(format!(
                "TLS files are given for the trace collector, but its url '{}' is not https://",
                config.url
            ));
        }
        if config.bsp_max_export_batch_size > config.bsp_max_queue_size {
            return Err(format!(
                "bsp_max_export_batch_size ({}) must not exceed bsp_max_queue_size ({})",
                config.bsp_max_export_batch_size, config.bsp_max_queue_size
            ));
        }
        Ok(config)
    }

    /// Whether the collector is reached over TLS.
    pub fn is_https(&self) -> bool {
        self.url
            .get(..8)
            .is_some_and(|scheme| scheme.eq_ignore_ascii_case("https://"))
    }

    /// The endpoint with its scheme: Triton takes `host:port/path`.
    pub fn endpoint(&self) -> String {
        if self.url.contains("://") {
            self.url.clone()
        } else {
            format!("http://{}", self.url)
        }
    }
}

fn positive(value: &str) -> Result<u32, String> {
    match value.parse::<u32>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err("must be a whole number above 0".to_string()),
    }
}

#[cfg(test)]
mod tests;
