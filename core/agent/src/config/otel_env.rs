//! The OpenTelemetry environment variables of an OTLP metrics exporter, read as the
//! OpenTelemetry SDK environment-variable specification and the OTLP exporter
//! specification define them: `OTEL_EXPORTER_OTLP_{,METRICS_}*` (the signal-specific one
//! wins), `OTEL_METRIC_EXPORT_INTERVAL`/`_TIMEOUT`, `OTEL_METRICS_EXPORTER`,
//! `OTEL_SDK_DISABLED`.
//!
//! Only parsing lives here (from a lookup function, so tests need no process
//! environment); where the values go and what wins over them is in `otlp_sources.rs`.
//! `OTEL_RESOURCE_ATTRIBUTES` and `OTEL_SERVICE_NAME` are read with the resource, by the
//! exporter (`rocewatch_export::otlp::resource`).
//!
//! As the specification says, a variable set to the empty string is as if unset. A value
//! that cannot be used is refused with the variable's name: the SDKs' "warn and use the
//! default" would export somewhere else than the operator asked, silently.

use std::path::PathBuf;
use std::time::Duration;

/// A variable whose value cannot be used: its name and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{var}: {message}")]
pub struct EnvError {
    pub var: String,
    pub message: String,
}

fn refuse(var: &str, message: impl Into<String>) -> EnvError {
    EnvError {
        var: var.to_string(),
        message: message.into(),
    }
}

/// A value and the variable it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FromVar<T> {
    pub var: &'static str,
    pub value: T,
}

/// How an endpoint variable is used: the general one is a base URL (`/v1/metrics` is
/// appended for OTLP/HTTP), the signal-specific one is the URL itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointVar {
    pub var: &'static str,
    pub url: String,
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` (a base URL), not `..._METRICS_ENDPOINT`.
    pub general: bool,
}

/// Every OTEL_* value that bears on OTLP metrics export, parsed; `None` where unset.
/// Protocol, compression and temporality are the config keys' own spellings
/// (`http/protobuf`, `gzip`, `delta`), checked here.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OtelEnv {
    pub endpoint: Option<EndpointVar>,
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` when the metrics' endpoint is the signal-specific
    /// variable's: the base the specification builds the logs' URL from.
    pub general_endpoint: Option<String>,
    /// `OTEL_EXPORTER_OTLP_LOGS_ENDPOINT`: the logs' URL, used as is.
    pub logs_endpoint: Option<FromVar<String>>,
    pub protocol: Option<FromVar<&'static str>>,
    pub headers: Option<FromVar<Vec<(String, String)>>>,
    pub timeout: Option<FromVar<Duration>>,
    pub compression: Option<FromVar<&'static str>>,
    pub ca_file: Option<FromVar<PathBuf>>,
    pub cert_file: Option<FromVar<PathBuf>>,
    pub key_file: Option<FromVar<PathBuf>>,
    pub temporality: Option<FromVar<&'static str>>,
    pub interval: Option<FromVar<Duration>>,
    /// Why OTLP export is off (`OTEL_SDK_DISABLED=true`, `OTEL_METRICS_EXPORTER=none`).
    pub disabled: Option<String>,
    /// `OTEL_METRICS_EXPORTER` names `otlp`: export even without an endpoint variable (to
    /// the specification's default, `http://localhost:4318`).
    pub otlp_selected: bool,
    /// Values that cannot be used: the key under `exporters.otlp` each would set
    /// (`tls` for the certificate files, "" for the switches) and why.
    pub invalid: Vec<(&'static str, EnvError)>,
}

/// The specification's default endpoint of OTLP/HTTP (gRPC: port 4317).
pub const DEFAULT_HTTP_ENDPOINT: &str = "http://localhost:4318";
pub const DEFAULT_GRPC_ENDPOINT: &str = "http://localhost:4317";

/// The signal-specific variable, else the general one; empty is unset.
fn pick(
    get: &dyn Fn(&str) -> Option<String>,
    metrics: &'static str,
    general: &'static str,
) -> Option<(&'static str, String)> {
    [metrics, general].into_iter().find_map(|var| {
        get(var)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .map(|v| (var, v))
    })
}

fn one(get: &dyn Fn(&str) -> Option<String>, var: &'static str) -> Option<String> {
    get(var)
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// Milliseconds, as the specification writes every timeout and interval.
fn millis(var: &str, v: &str) -> Result<Duration, EnvError> {
    v.parse::<u64>().map(Duration::from_millis).map_err(|_| {
        refuse(
            var,
            format!("{v:?} is not a whole number of milliseconds (e.g. 10000 for 10 s)"),
        )
    })
}

type Get<'a> = &'a dyn Fn(&str) -> Option<String>;

/// One variable (or a signal-specific and general pair) into its place in `env`.
type Reader = fn(Get, &mut OtelEnv) -> Result<(), EnvError>;

/// Read every variable through `get` (`std::env::var(..).ok()` in the agent). A value
/// that cannot be used is kept in [`OtelEnv::invalid`] with the key it would set: it is
/// refused only where it would be used (OTLP export configured, and the key not set by
/// the file), as these variables are often set for every process of a pod.
pub fn read(get: Get) -> OtelEnv {
    let readers: [(&str, Reader); 10] = [
        ("endpoint", read_endpoint),
        ("logs_endpoint", read_logs_endpoint),
        ("protocol", read_protocol),
        ("headers", read_headers),
        ("timeout", read_timeout),
        ("interval", read_interval),
        ("compression", read_compression),
        ("tls", read_tls),
        ("temporality", read_temporality),
        ("", read_switches),
    ];
    let mut env = OtelEnv::default();
    for (key, reader) in readers {
        if let Err(e) = reader(get, &mut env) {
            env.invalid.push((key, e));
        }
    }
    env
}

/// `url` when it is an `http://` or `https://` URL.
fn http_url(var: &str, url: String) -> Result<String, EnvError> {
    if url.starts_with("http://") || url.starts_with("https://") {
        Ok(url)
    } else {
        Err(refuse(
            var,
            format!("{url:?} is not an http:// or https:// URL"),
        ))
    }
}

fn read_endpoint(get: Get, env: &mut OtelEnv) -> Result<(), EnvError> {
    if let Some((var, url)) = pick(
        get,
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ) {
        let url = http_url(var, url)?;
        env.endpoint = Some(EndpointVar {
            var,
            general: var == "OTEL_EXPORTER_OTLP_ENDPOINT",
            url,
        });
    }
    Ok(())
}

/// `OTEL_EXPORTER_OTLP_LOGS_ENDPOINT`, and the general endpoint when the metrics' is the
/// signal-specific one (the logs' base then, as the specification builds it).
fn read_logs_endpoint(get: Get, env: &mut OtelEnv) -> Result<(), EnvError> {
    let var = "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT";
    if let Some(url) = one(get, var) {
        env.logs_endpoint = Some(FromVar {
            var,
            value: http_url(var, url)?,
        });
    }
    let general = "OTEL_EXPORTER_OTLP_ENDPOINT";
    if one(get, "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT").is_some() {
        if let Some(url) = one(get, general) {
            env.general_endpoint = Some(http_url(general, url)?);
        }
    }
    Ok(())
}

fn read_protocol(get: Get, env: &mut OtelEnv) -> Result<(), EnvError> {
    if let Some((var, v)) = pick(
        get,
        "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ) {
        let value = match v.as_str() {
            "grpc" => "grpc",
            "http/protobuf" => "http/protobuf",
            "http/json" => return Err(refuse(var, "http/json is not supported by rocewatch: use http/protobuf (every OTLP/HTTP receiver takes it) or grpc")),
            other => return Err(refuse(var, format!("{other:?} is not an OTLP protocol: grpc or http/protobuf"))),
        };
        env.protocol = Some(FromVar { var, value });
    }
    Ok(())
}

fn read_headers(get: Get, env: &mut OtelEnv) -> Result<(), EnvError> {
    if let Some((var, v)) = pick(
        get,
        "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
        "OTEL_EXPORTER_OTLP_HEADERS",
    ) {
        env.headers = Some(FromVar {
            var,
            value: parse_headers(var, &v)?,
        });
    }
    Ok(())
}

/// The exporter's own timeout (signal-specific, then general), else the periodic
/// reader's `OTEL_METRIC_EXPORT_TIMEOUT`: rocewatch has one timeout, per request.
fn read_timeout(get: Get, env: &mut OtelEnv) -> Result<(), EnvError> {
    let timeout = pick(
        get,
        "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT",
        "OTEL_EXPORTER_OTLP_TIMEOUT",
    )
    .or_else(|| one(get, "OTEL_METRIC_EXPORT_TIMEOUT").map(|v| ("OTEL_METRIC_EXPORT_TIMEOUT", v)));
    if let Some((var, v)) = timeout {
        env.timeout = Some(FromVar {
            var,
            value: millis(var, &v)?,
        });
    }
    Ok(())
}

fn read_interval(get: Get, env: &mut OtelEnv) -> Result<(), EnvError> {
    let var = "OTEL_METRIC_EXPORT_INTERVAL";
    if let Some(v) = one(get, var) {
        env.interval = Some(FromVar {
            var,
            value: millis(var, &v)?,
        });
    }
    Ok(())
}

fn read_compression(get: Get, env: &mut OtelEnv) -> Result<(), EnvError> {
    if let Some((var, v)) = pick(
        get,
        "OTEL_EXPORTER_OTLP_METRICS_COMPRESSION",
        "OTEL_EXPORTER_OTLP_COMPRESSION",
    ) {
        let value = match v.to_ascii_lowercase().as_str() {
            "gzip" => "gzip",
            "none" => "none",
            _ => {
                return Err(refuse(
                    var,
                    format!("{v:?} is not a compression rocewatch sends: gzip or none"),
                ))
            }
        };
        env.compression = Some(FromVar { var, value });
    }
    Ok(())
}

fn read_tls(get: Get, env: &mut OtelEnv) -> Result<(), EnvError> {
    for (metrics, general, slot) in [
        (
            "OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE",
            "OTEL_EXPORTER_OTLP_CERTIFICATE",
            &mut env.ca_file,
        ),
        (
            "OTEL_EXPORTER_OTLP_METRICS_CLIENT_CERTIFICATE",
            "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
            &mut env.cert_file,
        ),
        (
            "OTEL_EXPORTER_OTLP_METRICS_CLIENT_KEY",
            "OTEL_EXPORTER_OTLP_CLIENT_KEY",
            &mut env.key_file,
        ),
    ] {
        *slot = pick(get, metrics, general).map(|(var, v)| FromVar {
            var,
            value: PathBuf::from(v),
        });
    }
    Ok(())
}

fn read_temporality(get: Get, env: &mut OtelEnv) -> Result<(), EnvError> {
    let var = "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE";
    if let Some(v) = one(get, var) {
        let value = match v.to_ascii_lowercase().as_str() {
            "cumulative" => "cumulative",
            "delta" => "delta",
            "lowmemory" => "lowmemory",
            _ => {
                return Err(refuse(
                    var,
                    format!(
                        "{v:?} is not a temporality preference: cumulative, delta or lowmemory"
                    ),
                ))
            }
        };
        env.temporality = Some(FromVar { var, value });
    }
    Ok(())
}

/// `OTEL_SDK_DISABLED` and `OTEL_METRICS_EXPORTER`.
fn read_switches(get: Get, env: &mut OtelEnv) -> Result<(), EnvError> {
    // A boolean is true only as the case-insensitive "true" (the specification); any other
    // value is false, and one that is neither says so rather than being read as false
    // without a word.
    if let Some(v) = one(get, "OTEL_SDK_DISABLED") {
        match v.to_ascii_lowercase().as_str() {
            "true" => env.disabled = Some("OTEL_SDK_DISABLED=true".into()),
            "false" => {}
            _ => {
                return Err(refuse(
                    "OTEL_SDK_DISABLED",
                    format!("{v:?} is not true or false"),
                ))
            }
        }
    }
    if let Some(v) = one(get, "OTEL_METRICS_EXPORTER") {
        let var = "OTEL_METRICS_EXPORTER";
        for name in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match name {
                "otlp" => env.otlp_selected = true,
                "none" => {
                    env.disabled
                        .get_or_insert_with(|| "OTEL_METRICS_EXPORTER=none".into());
                }
                "prometheus" => return Err(refuse(var, "rocewatch serves Prometheus from [exporters.prometheus] (or --prometheus-listen), not from this variable: use otlp or none here")),
                "console" => return Err(refuse(var, "rocewatch prints collections with [exporters.stdout] (or --stdout), not from this variable: use otlp or none here")),
                other => return Err(refuse(var, format!("{other:?} is not an exporter rocewatch has: otlp or none"))),
            }
        }
    }
    Ok(())
}

impl OtelEnv {
    /// The first value that cannot be used and would be: its key is not in `taken` (set
    /// by the file or `ROCEWATCH_*`). The switches' (key "") are never refused: the
    /// specification has an unknown value of an enum or boolean variable warned about
    /// and ignored ([`OtelEnv::ignored`]), and a pod's `OTEL_METRICS_EXPORTER=prometheus`
    /// meant for another process must not stop the agent.
    pub fn refused(&self, taken: impl Fn(&str) -> bool) -> Option<&EnvError> {
        self.invalid
            .iter()
            .find(|(key, _)| !key.is_empty() && !taken(key))
            .map(|(_, e)| e)
    }

    /// The switches' values that cannot be used: warned about and ignored.
    pub fn ignored(&self) -> impl Iterator<Item = &EnvError> {
        self.invalid
            .iter()
            .filter(|(key, _)| key.is_empty())
            .map(|(_, e)| e)
    }
}

/// `key1=value1,key2=value2` (the W3C baggage format without its `;` properties): keys
/// and values trimmed, values percent-decoded; empty members skipped. A member without
/// `=`, an empty key, a key that is not an HTTP header name, a bad `%` escape or a value
/// that is not UTF-8 once decoded is refused, naming the variable and the member's place
/// (not its value: it is often a credential).
pub fn parse_headers(var: &str, s: &str) -> Result<Vec<(String, String)>, EnvError> {
    let mut out: Vec<(String, String)> = Vec::new();
    for (i, member) in s.split(',').enumerate() {
        let n = i + 1;
        if member.trim().is_empty() {
            continue;
        }
        let Some((k, v)) = member.split_once('=') else {
            return Err(refuse(
                var,
                format!("header {n} has no '=': write key=value,key2=value2"),
            ));
        };
        let key = k.trim();
        if key.is_empty() {
            return Err(refuse(var, format!("header {n} has an empty name")));
        }
        if !key.bytes().all(is_token_byte) {
            return Err(refuse(
                var,
                format!("header {n}: {key:?} is not an HTTP header name"),
            ));
        }
        let value = percent_decode(v.trim())
            .map_err(|why| refuse(var, format!("header {n} ({key}): {why}")))?;
        let key = key.to_ascii_lowercase();
        out.retain(|(k, _)| *k != key);
        out.push((key, value));
    }
    Ok(out)
}

/// RFC 9110's `tchar`: what a header name is made of.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn percent_decode(v: &str) -> Result<String, String> {
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = |c: Option<&u8>| c.and_then(|c| (*c as char).to_digit(16));
            match (hex(b.get(i + 1)), hex(b.get(i + 2))) {
                (Some(h), Some(l)) => out.push((h * 16 + l) as u8),
                _ => {
                    return Err(format!(
                        "a '%' at byte {i} is not followed by two hex digits"
                    ))
                }
            }
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "the value is not UTF-8 once percent-decoded".to_string())
}

/// The path of an `http(s)://` URL: from the first `/` after the authority to the query
/// or fragment; empty when there is none.
pub fn url_path(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = &rest[..rest.find(['?', '#']).unwrap_or(rest.len())];
    rest.find('/').map_or("", |i| &rest[i..])
}

/// `base` with the signal's path (`v1/metrics`) appended to its path, as the
/// specification builds per-signal URLs from `OTEL_EXPORTER_OTLP_ENDPOINT`: one `/`
/// between them whether or not the base ends with one; a query stays at the end.
pub fn append_signal_path(base: &str, signal: &str) -> String {
    let at = base.find("://").map_or(0, |i| i + 3);
    let cut = base[at..].find(['?', '#']).map_or(base.len(), |i| at + i);
    let (head, tail) = base.split_at(cut);
    let sep = if head.ends_with('/') { "" } else { "/" };
    format!("{head}{sep}{signal}{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> Result<OtelEnv, EnvError> {
        let env = read_all(pairs);
        match env.invalid.first() {
            Some((_, e)) => Err(e.clone()),
            None => Ok(env),
        }
    }

    fn read_all(pairs: &[(&str, &str)]) -> OtelEnv {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        read(&move |k: &str| map.get(k).cloned())
    }

    #[test]
    fn the_signal_path_is_appended_once_whatever_the_base_ends_with() {
        for (base, want) in [
            ("http://c:4318", "http://c:4318/v1/metrics"),
            ("http://c:4318/", "http://c:4318/v1/metrics"),
            ("https://c/otlp", "https://c/otlp/v1/metrics"),
            ("https://c/otlp/", "https://c/otlp/v1/metrics"),
            (
                "http://c:4318?tenant=a",
                "http://c:4318/v1/metrics?tenant=a",
            ),
            ("http://c:4318/p/?x=1", "http://c:4318/p/v1/metrics?x=1"),
        ] {
            assert_eq!(append_signal_path(base, "v1/metrics"), want, "{base}");
        }
        for (url, path) in [
            ("http://c:4318", ""),
            ("http://c:4318/", "/"),
            ("http://c:4318/v1/metrics", "/v1/metrics"),
            ("http://c/a/b?x=/y", "/a/b"),
            ("http://c?x=/y", ""),
        ] {
            assert_eq!(url_path(url), path, "{url}");
        }
    }

    #[test]
    fn the_signal_specific_variable_wins_and_the_general_endpoint_is_a_base() {
        let e = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4318"),
            (
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
                "http://b:4318/custom",
            ),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2000"),
            ("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "1500"),
            ("OTEL_METRIC_EXPORT_TIMEOUT", "9000"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "a=1"),
            ("OTEL_EXPORTER_OTLP_METRICS_HEADERS", "b=2"),
        ])
        .unwrap();
        let ep = e.endpoint.unwrap();
        assert_eq!(
            (ep.var, ep.url.as_str(), ep.general),
            (
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
                "http://b:4318/custom",
                false
            )
        );
        assert_eq!(e.timeout.unwrap().value, Duration::from_millis(1500));
        assert_eq!(e.headers.unwrap().value, vec![("b".into(), "2".into())]);
        // Empty is unset: the general one is used.
        let e = env(&[
            ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", ""),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4318"),
            ("OTEL_METRIC_EXPORT_TIMEOUT", "9000"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "500"),
        ])
        .unwrap();
        assert!(e.endpoint.unwrap().general);
        let t = e.timeout.unwrap();
        assert_eq!(
            (t.var, t.value),
            ("OTEL_METRIC_EXPORT_TIMEOUT", Duration::from_secs(9))
        );
        assert_eq!(e.interval.unwrap().value, Duration::from_millis(500));
        assert_eq!(env(&[]).unwrap(), OtelEnv::default());
    }

    #[test]
    fn values_rocewatch_cannot_use_are_refused_by_variable() {
        for (var, value, says) in [
            (
                "OTEL_EXPORTER_OTLP_PROTOCOL",
                "http/json",
                "use http/protobuf",
            ),
            (
                "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
                "thrift",
                "grpc or http/protobuf",
            ),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "10s", "milliseconds"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "-1", "milliseconds"),
            ("OTEL_EXPORTER_OTLP_COMPRESSION", "zstd", "gzip or none"),
            (
                "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE",
                "sometimes",
                "cumulative, delta or lowmemory",
            ),
            ("OTEL_SDK_DISABLED", "yes", "true or false"),
            (
                "OTEL_METRICS_EXPORTER",
                "prometheus",
                "[exporters.prometheus]",
            ),
            (
                "OTEL_METRICS_EXPORTER",
                "otlp,console",
                "[exporters.stdout]",
            ),
            ("OTEL_METRICS_EXPORTER", "zipkin", "otlp or none"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "a=1,b", "header 2 has no '='"),
        ] {
            let e = env(&[(var, value)]).expect_err(value);
            assert_eq!(e.var, var, "{value}");
            assert!(e.message.contains(says), "{var}={value}: {e}");
        }
    }

    #[test]
    fn case_and_switches_as_the_specification_reads_them() {
        let e = env(&[
            (
                "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE",
                "LowMemory",
            ),
            ("OTEL_EXPORTER_OTLP_COMPRESSION", "GZIP"),
            ("OTEL_SDK_DISABLED", "TRUE"),
        ])
        .unwrap();
        assert_eq!(e.temporality.unwrap().value, "lowmemory");
        assert_eq!(e.compression.unwrap().value, "gzip");
        assert_eq!(e.disabled.as_deref(), Some("OTEL_SDK_DISABLED=true"));
        let e = env(&[("OTEL_METRICS_EXPORTER", "none")]).unwrap();
        assert_eq!(e.disabled.as_deref(), Some("OTEL_METRICS_EXPORTER=none"));
        let e = env(&[
            ("OTEL_METRICS_EXPORTER", "otlp"),
            ("OTEL_SDK_DISABLED", "false"),
        ])
        .unwrap();
        assert!(e.otlp_selected && e.disabled.is_none());
    }

    #[test]
    fn headers_are_trimmed_percent_decoded_and_lowercased() {
        assert_eq!(
            parse_headers(
                "V",
                " X-Scope-OrgID = tenant%201 ,,authorization=Basic%20dTpw%3D%3D, dd-api-key= ,"
            )
            .unwrap(),
            vec![
                ("x-scope-orgid".to_string(), "tenant 1".to_string()),
                ("authorization".into(), "Basic dTpw==".into()),
                ("dd-api-key".into(), String::new()),
            ]
        );
        // '=' inside a value is the value's.
        assert_eq!(
            parse_headers("V", "k=a=b").unwrap(),
            vec![("k".into(), "a=b".into())]
        );
        for (bad, says) in [
            ("=v", "empty name"),
            ("a b=v", "not an HTTP header name"),
            ("k=%zz", "two hex digits"),
            ("k=%4", "two hex digits"),
            ("k=%ff", "not UTF-8"),
        ] {
            let e = parse_headers("OTEL_EXPORTER_OTLP_HEADERS", bad).unwrap_err();
            assert_eq!(e.var, "OTEL_EXPORTER_OTLP_HEADERS");
            assert!(e.message.contains(says), "{bad}: {e}");
        }
    }

    proptest::proptest! {
        /// Whatever the variable holds: no panic; an error names the variable; every
        /// name accepted is an HTTP header name.
        #[test]
        fn the_headers_parser_never_panics_and_names_the_variable(s in "\\PC{0,64}|[a-zA-Z%=, 0-9-]{0,64}") {
            match parse_headers("OTEL_EXPORTER_OTLP_HEADERS", &s) {
                Ok(hs) => {
                    for (k, _) in hs {
                        proptest::prop_assert!(!k.is_empty() && k.bytes().all(is_token_byte));
                    }
                }
                Err(e) => {
                    proptest::prop_assert_eq!(e.var.as_str(), "OTEL_EXPORTER_OTLP_HEADERS");
                    proptest::prop_assert!(e.to_string().starts_with("OTEL_EXPORTER_OTLP_HEADERS: "));
                }
            }
        }

        #[test]
        fn appending_the_signal_path_never_doubles_a_slash(host in "[a-z]{1,8}", path in "(/[a-z]{1,5}){0,3}/?") {
            let url = append_signal_path(&format!("http://{host}:4318{path}"), "v1/metrics");
            proptest::prop_assert!(url.ends_with("/v1/metrics"));
            proptest::prop_assert!(!url["http://".len()..].contains("//"), "{}", url);
        }
    }
}
