//! Where each `[exporters.otlp]` value comes from, and the OpenTelemetry variables put
//! under the file.
//!
//! Precedence, highest first: the command line (`--otlp-endpoint`, `--otlp-protocol`,
//! `--export-interval`), `ROCEWATCH_EXPORTERS__OTLP__*`, the file, `OTEL_*`, the built-in
//! defaults. The OpenTelemetry specification makes its variables the defaults that
//! explicit configuration overrides; rocewatch's own file and variables are that explicit
//! configuration (a value someone wrote for rocewatch, not one inherited by every process
//! of a pod). Two switches are the exception: `OTEL_SDK_DISABLED=true` and
//! `OTEL_METRICS_EXPORTER=none` turn off OTLP export that the file or `ROCEWATCH_*` turn
//! on, because their purpose is to turn telemetry off for a whole environment without
//! editing each program's configuration; a flag on the command line still turns it on
//! (the most explicit of all, for one run).
//!
//! Values are merged key by key: `OTEL_EXPORTER_OTLP_HEADERS` adds the headers the file
//! does not name, `OTEL_EXPORTER_OTLP_CLIENT_KEY` the TLS key the file leaves out.
//! `config check` prints each value with its origin ([`OtlpSources::lines`]).

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use rocewatch_export::otlp::config::{OtlpConfig, OtlpProtocol};
use serde_json::{Map, Value};

use super::otel_env::{self, OtelEnv};

/// Where a value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    Default,
    /// The configuration file (its name).
    File(String),
    /// A `ROCEWATCH_*` variable.
    Env(String),
    /// An OpenTelemetry variable.
    Otel(&'static str),
    /// A command-line flag.
    Flag(&'static str),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Default => f.write_str("default"),
            Origin::File(name) => f.write_str(name),
            Origin::Env(var) => f.write_str(var),
            Origin::Otel(var) => f.write_str(var),
            Origin::Flag(flag) => f.write_str(flag),
        }
    }
}

/// How the endpoint was given, which says how its URL is made.
#[derive(Debug, Clone, PartialEq, Eq)]
enum EndpointRule {
    /// The file, `ROCEWATCH_*` or the command line: a base URL (no path, or `/`) gets the
    /// signal path for OTLP/HTTP; any other path is used as given.
    Explicit,
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`: always a base URL for OTLP/HTTP.
    General,
    /// `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`: used as is.
    AsIs,
    /// `OTEL_METRICS_EXPORTER=otlp` with no endpoint: the specification's default.
    SpecDefault,
}

/// The origin of every `[exporters.otlp]` value that was set, by its key under
/// `exporters.otlp` (`endpoint`, `tls.ca_file`, `headers.x-scope-orgid`), and how the
/// endpoint was made.
#[derive(Debug, Clone, Default)]
pub struct OtlpSources {
    origins: BTreeMap<String, Origin>,
    /// Each value as given (JSON), but for headers' (credentials).
    given: BTreeMap<String, String>,
    endpoint: Option<(String, EndpointRule)>,
    /// What was done to the endpoint as given (`/v1/metrics appended`).
    endpoint_note: Option<&'static str>,
    /// The logs' endpoint as given (the file, `ROCEWATCH_*`, `OTEL_EXPORTER_OTLP_LOGS_ENDPOINT`).
    logs: Option<(String, EndpointRule)>,
    /// How the logs' endpoint was made (`/v1/logs appended`).
    logs_note: Option<&'static str>,
    /// Why OTLP export is off though something configured it.
    pub disabled: Option<String>,
    /// Switch variables whose values cannot be used, ignored (`OTEL_METRICS_EXPORTER=
    /// prometheus`): the specification warns and goes on.
    pub ignored: Vec<String>,
    /// The OpenTelemetry variables, for an endpoint given on the command line only.
    otel: OtelEnv,
}

/// The signal path appended to base URLs.
const SIGNAL_PATH: &str = "v1/metrics";
/// The logs' signal path.
const LOGS_PATH: &str = "v1/logs";

/// `ROCEWATCH_EXPORTERS__OTLP__HEADERS__<NAME>`: the header name, with `_` as `-`. An
/// environment variable's name cannot hold `-`, and header names are written with it
/// (`X-Scope-OrgID`, `dd-api-key`) while `_` in one is rare and dropped by common
/// proxies: a name with `_` goes in the file or `OTEL_EXPORTER_OTLP_HEADERS`.
pub fn header_var(var: &str) -> Option<String> {
    let rest = var.strip_prefix("ROCEWATCH_")?;
    let lower = rest.to_ascii_lowercase();
    let name = lower.strip_prefix("exporters__otlp__headers__")?;
    (!name.is_empty()).then(|| name.replace('_', "-"))
}

/// The key under `exporters.otlp` a `ROCEWATCH_*` override sets (`tls.ca_file`).
fn rocewatch_key(var: &str) -> Option<String> {
    if let Some(h) = header_var(var) {
        return Some(format!("headers.{h}"));
    }
    let lower = var.strip_prefix("ROCEWATCH_")?.to_ascii_lowercase();
    lower
        .strip_prefix("exporters__otlp__")
        .map(|k| k.replace("__", "."))
}

fn ms(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

impl OtlpSources {
    /// Put the `ROCEWATCH_` headers (`overrides`: every `ROCEWATCH_*` override) and the
    /// OpenTelemetry variables into the merged file-and-`ROCEWATCH_*` document `doc`,
    /// under what is there, and record where each value came from.
    pub fn apply(
        doc: &mut Value,
        file: &str,
        overrides: &[(String, String)],
        otel: &OtelEnv,
    ) -> Result<OtlpSources, otel_env::EnvError> {
        let mut s = OtlpSources {
            otel: otel.clone(),
            ignored: otel.ignored().map(|e| format!("{e}: ignored")).collect(),
            ..OtlpSources::default()
        };
        let Some(root) = doc.as_object_mut() else {
            return Ok(s);
        };
        let headers: Vec<(String, String)> = overrides
            .iter()
            .filter_map(|(k, v)| Some((header_var(k)?, v.clone())))
            .collect();
        if !headers.is_empty() {
            if let Some(h) = table(root, "exporters")
                .and_then(|e| table(e, "otlp"))
                .and_then(|o| table(o, "headers"))
            {
                for (name, v) in headers {
                    h.retain(|k, _| !k.eq_ignore_ascii_case(&name));
                    h.insert(name, Value::String(v));
                }
            }
        }
        let configured = root.get("exporters").and_then(|e| e.get("otlp")).is_some();
        if let Some(why) = &otel.disabled {
            if let Some(e) = root.get_mut("exporters").and_then(Value::as_object_mut) {
                e.remove("otlp");
            }
            if configured || otel.endpoint.is_some() {
                s.disabled = Some(why.clone());
            }
            return Ok(s);
        }
        let endpoint_var =
            otel.endpoint.is_some() || otel.invalid.iter().any(|(k, _)| *k == "endpoint");
        if !configured && !endpoint_var && !otel.otlp_selected {
            return Ok(s);
        }
        // Not a table (`exporters = 5`): the decoding says what is wrong.
        if let Some(otlp) = table(root, "exporters").and_then(|e| table(e, "otlp")) {
            // Headers and TLS files are merged key by key: a bad variable would be used.
            let taken = |k: &str| !matches!(k, "headers" | "tls") && otlp.contains_key(k);
            if let Some(e) = otel.refused(taken) {
                return Err(e.clone());
            }
            s.record_given(otlp, file, overrides);
            s.put_otel(otlp, otel);
        }
        Ok(s)
    }

    /// The origin of each key the document has: a `ROCEWATCH_*` variable that sets it,
    /// else the file.
    fn record_given(
        &mut self,
        otlp: &Map<String, Value>,
        file: &str,
        overrides: &[(String, String)],
    ) {
        let by_var: BTreeMap<String, &String> = overrides
            .iter()
            .filter_map(|(k, _)| Some((rocewatch_key(k)?, k)))
            .collect();
        let mut keys = Vec::new();
        for (k, v) in otlp {
            match v.as_object() {
                Some(t) if matches!(k.as_str(), "tls" | "headers" | "resource") => {
                    keys.extend(t.iter().map(|(sub, v)| (format!("{k}.{sub}"), v)));
                }
                _ => keys.push((k.clone(), v)),
            }
        }
        for (k, v) in keys {
            if !k.starts_with("headers.") {
                self.given.insert(k.clone(), v.to_string());
            }
            let origin = match by_var.get(&k.to_ascii_lowercase()) {
                Some(var) => Origin::Env((*var).clone()),
                None => Origin::File(file.to_string()),
            };
            self.origins.insert(k, origin);
        }
        if let Some(Value::String(e)) = otlp.get("endpoint") {
            self.endpoint = Some((e.clone(), EndpointRule::Explicit));
        }
        if let Some(Value::String(e)) = otlp.get("logs_endpoint") {
            self.logs = Some((e.clone(), EndpointRule::Explicit));
        }
    }

    /// `v` at `key` (`tls.ca_file`) from `var`, unless the document has the key.
    fn put(&mut self, otlp: &mut Map<String, Value>, key: &str, var: &'static str, v: Value) {
        let (parent, leaf) = match key.split_once('.') {
            Some((p, l)) => (Some(p), l),
            None => (None, key),
        };
        let t = match parent {
            Some(p) => table(otlp, p),
            None => Some(otlp),
        };
        let Some(t) = t else { return };
        if !t.keys().any(|k| k.eq_ignore_ascii_case(leaf)) {
            if parent != Some("headers") {
                self.given.insert(key.to_string(), v.to_string());
            }
            t.insert(leaf.to_string(), v);
            self.origins.insert(key.to_string(), Origin::Otel(var));
        }
    }

    /// Each OpenTelemetry value the document leaves unset.
    fn put_otel(&mut self, otlp: &mut Map<String, Value>, otel: &OtelEnv) {
        if let Some(e) = &otel.endpoint {
            let rule = if e.general {
                EndpointRule::General
            } else {
                EndpointRule::AsIs
            };
            if !otlp.contains_key("endpoint") {
                self.endpoint = Some((e.url.clone(), rule));
            }
            self.put(otlp, "endpoint", e.var, Value::String(e.url.clone()));
        } else if otel.otlp_selected && !otlp.contains_key("endpoint") {
            let url = otel_env::DEFAULT_HTTP_ENDPOINT.to_string();
            self.endpoint = Some((url.clone(), EndpointRule::SpecDefault));
            self.put(
                otlp,
                "endpoint",
                "OTEL_METRICS_EXPORTER",
                Value::String(url),
            );
        }
        if let Some(l) = &otel.logs_endpoint {
            if !otlp.contains_key("logs_endpoint") {
                self.logs = Some((l.value.clone(), EndpointRule::AsIs));
            }
            self.put(otlp, "logs_endpoint", l.var, Value::String(l.value.clone()));
        }
        let text = |s: &str| Value::String(s.to_string());
        let path = |p: &std::path::Path| Value::String(p.display().to_string());
        if let Some(p) = &otel.protocol {
            self.put(otlp, "protocol", p.var, text(p.value));
        }
        if let Some(c) = &otel.compression {
            self.put(otlp, "compression", c.var, text(c.value));
        }
        if let Some(t) = &otel.temporality {
            self.put(otlp, "temporality", t.var, text(t.value));
        }
        if let Some(t) = &otel.timeout {
            self.put(otlp, "timeout", t.var, text(&ms(t.value)));
        }
        if let Some(i) = &otel.interval {
            self.put(otlp, "interval", i.var, text(&ms(i.value)));
        }
        for (key, v) in [
            ("tls.ca_file", &otel.ca_file),
            ("tls.cert_file", &otel.cert_file),
            ("tls.key_file", &otel.key_file),
        ] {
            if let Some(v) = v {
                self.put(otlp, key, v.var, path(&v.value));
            }
        }
        if let Some(h) = &otel.headers {
            for (name, v) in &h.value {
                self.put(otlp, &format!("headers.{name}"), h.var, text(v));
            }
        }
    }

    /// The endpoint's URL once the protocol is known (`OTEL_EXPORTER_OTLP_ENDPOINT` and a
    /// base URL in the file get `/v1/metrics` for OTLP/HTTP).
    pub fn resolve_endpoint(&mut self, o: &mut OtlpConfig) {
        self.endpoint_note = None;
        let Some((given, rule)) = &self.endpoint else {
            return;
        };
        let http = o.protocol == OtlpProtocol::HttpProtobuf;
        let base = match rule {
            EndpointRule::AsIs => false,
            EndpointRule::General | EndpointRule::SpecDefault => http,
            EndpointRule::Explicit => http && matches!(otel_env::url_path(given), "" | "/"),
        };
        o.endpoint = if *rule == EndpointRule::SpecDefault && !http {
            otel_env::DEFAULT_GRPC_ENDPOINT.to_string()
        } else if base {
            self.endpoint_note = Some("/v1/metrics appended");
            otel_env::append_signal_path(given, SIGNAL_PATH)
        } else {
            given.clone()
        };
        self.resolve_logs(o);
    }

    /// The logs' endpoint (events, the agent's own logs), as the specification makes it:
    /// the one given (a base URL in the file gets `/v1/logs`, as the endpoint gets
    /// `/v1/metrics`; `OTEL_EXPORTER_OTLP_LOGS_ENDPOINT` is used as is); else beside the
    /// metrics ([`OtlpConfig::logs_url`]), unless the metrics' endpoint is
    /// `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`, which speaks for the metrics alone: then, as
    /// when the metrics' URL says nothing of the logs', `OTEL_EXPORTER_OTLP_ENDPOINT` with
    /// `/v1/logs`. With none of these, none: the events' start says so with the fix.
    fn resolve_logs(&mut self, o: &mut OtlpConfig) {
        self.logs_note = None;
        let http = o.protocol == OtlpProtocol::HttpProtobuf;
        if let Some((given, rule)) = &self.logs {
            let base = *rule == EndpointRule::Explicit
                && http
                && matches!(otel_env::url_path(given), "" | "/");
            o.logs_endpoint = Some(if base {
                self.logs_note = Some("/v1/logs appended");
                otel_env::append_signal_path(given, LOGS_PATH)
            } else {
                given.clone()
            });
            return;
        }
        o.logs_endpoint = None;
        let only_metrics = matches!(self.endpoint, Some((_, EndpointRule::AsIs)));
        let general = self.otel.general_endpoint.clone().or_else(|| {
            let e = self.otel.endpoint.as_ref().filter(|e| e.general)?;
            Some(e.url.clone())
        });
        match general {
            Some(g) if only_metrics || o.logs_url().is_err() => {
                o.logs_endpoint = Some(if http {
                    self.logs_note = Some("/v1/logs appended");
                    otel_env::append_signal_path(&g, LOGS_PATH)
                } else {
                    g
                });
                self.origins.insert(
                    "logs_endpoint".into(),
                    Origin::Otel("OTEL_EXPORTER_OTLP_ENDPOINT"),
                );
            }
            _ => {
                self.origins.remove("logs_endpoint");
            }
        }
    }

    /// The OpenTelemetry variable a key's value came from, if it did (errors about the
    /// value name it).
    pub fn otel_var(&self, key: &str) -> Option<&'static str> {
        match self.origins.get(key)? {
            Origin::Otel(var) => Some(var),
            _ => None,
        }
    }

    /// `--otlp-endpoint`, `--otlp-protocol` and `--export-interval`, over everything else.
    pub fn apply_flags(
        &mut self,
        otlp: &mut Option<OtlpConfig>,
        endpoint: Option<&str>,
        protocol: Option<OtlpProtocol>,
        interval: Option<Duration>,
    ) -> Result<(), otel_env::EnvError> {
        if let Some(ep) = endpoint {
            if otlp.is_none() {
                if let Some(e) = self.otel.refused(|k| k == "endpoint") {
                    return Err(e.clone());
                }
                *otlp = Some(self.config_of_otel(ep));
            }
            let o = otlp.as_mut().expect("set above");
            o.endpoint = ep.to_string();
            self.endpoint = Some((ep.to_string(), EndpointRule::Explicit));
            self.origins
                .insert("endpoint".into(), Origin::Flag("--otlp-endpoint"));
        }
        let Some(o) = otlp.as_mut() else {
            return Ok(());
        };
        if let Some(p) = protocol {
            o.protocol = p;
            self.origins
                .insert("protocol".into(), Origin::Flag("--otlp-protocol"));
        }
        if let Some(i) = interval {
            o.interval = i;
            self.origins
                .insert("interval".into(), Origin::Flag("--export-interval"));
        }
        self.resolve_endpoint(o);
        Ok(())
    }

    /// `[exporters.otlp]` for an endpoint given on the command line only: the endpoint and
    /// what the OpenTelemetry variables say (headers, TLS, timeout...).
    fn config_of_otel(&mut self, endpoint: &str) -> OtlpConfig {
        let mut t = Map::new();
        t.insert("endpoint".into(), Value::String(endpoint.to_string()));
        let otel = self.otel.clone();
        self.put_otel(&mut t, &otel);
        // The variables' values were checked when read; decoding them cannot fail.
        serde_json::from_value(Value::Object(t))
            .unwrap_or_else(|_| OtlpConfig::new(endpoint, OtlpProtocol::default()))
    }

    /// `exporters.otlp.KEY = VALUE (ORIGIN)` for the values OpenTelemetry variables can set
    /// and every value set anywhere; header values are not shown (credentials).
    pub fn lines(&self, o: &OtlpConfig) -> Vec<String> {
        // Beside the endpoint's line (the closure below holds `out` until its last use).
        let logs = match o.logs_url() {
            Ok(url) => {
                let how = match (self.origins.get("logs_endpoint"), self.logs_note) {
                    (Some(o), Some(n)) => format!("{o}, {n}"),
                    (Some(o), None) => o.to_string(),
                    (None, _) => "beside exporters.otlp.endpoint".into(),
                };
                format!("exporters.otlp.logs_endpoint = {url:?} ({how})")
            }
            Err(why) => format!("exporters.otlp.logs_endpoint = none ({why})"),
        };
        let origin = |k: &str| self.origins.get(k).cloned().unwrap_or(Origin::Default);
        let mut out = Vec::new();
        let mut line = |k: &str, v: String, note: Option<&str>| {
            let o = origin(k);
            let note = note.map(|n| format!(", {n}")).unwrap_or_default();
            out.push(format!("exporters.otlp.{k} = {v} ({o}{note})"));
        };
        line("endpoint", format!("{:?}", o.endpoint), self.endpoint_note);
        let protocol = match o.protocol {
            OtlpProtocol::HttpProtobuf => "http/protobuf",
            OtlpProtocol::Grpc => "grpc",
        };
        line("protocol", format!("{protocol:?}"), None);
        line("interval", format!("{:?}", ms(o.interval)), None);
        line("timeout", format!("{:?}", ms(o.timeout)), None);
        line(
            "compression",
            format!("{:?}", format!("{:?}", o.compression).to_ascii_lowercase()),
            None,
        );
        line(
            "temporality",
            format!("{:?}", format!("{:?}", o.temporality).to_ascii_lowercase()),
            None,
        );
        for (k, v) in &self.origins {
            if matches!(
                k.as_str(),
                "endpoint"
                    | "logs_endpoint"
                    | "protocol"
                    | "interval"
                    | "timeout"
                    | "compression"
                    | "temporality"
            ) {
                continue;
            }
            let shown = if let Some(name) = k.strip_prefix("headers.") {
                let len = o
                    .headers
                    .iter()
                    .find(|(h, _)| h.eq_ignore_ascii_case(name))
                    .map_or(0, |(_, v)| v.len());
                format!("<{len} bytes, not shown>")
            } else {
                self.given.get(k).cloned().unwrap_or_default()
            };
            out.push(format!("exporters.otlp.{k} = {shown} ({v})"));
        }
        out.insert(1, logs);
        out
    }
}

/// The table `key` of `t`, made when absent; `None` when `key` holds something else (the
/// decoding refuses it with its key path).
fn table<'a>(t: &'a mut Map<String, Value>, key: &str) -> Option<&'a mut Map<String, Value>> {
    t.entry(key.to_string())
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
}

#[cfg(test)]
mod tests {
    use super::super::{otel_env, Config, ConfigError};
    use rocewatch_export::otlp::config::OtlpProtocol;
    use std::collections::HashMap;
    use std::time::Duration;

    /// `toml` as the file, with these `ROCEWATCH_*` and `OTEL_*` variables.
    fn load(toml: &str, vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("rw.toml");
        std::fs::write(&f, toml).unwrap();
        let overrides: Vec<(String, String)> = vars
            .iter()
            .filter(|(k, _)| k.starts_with("ROCEWATCH_"))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let otel: HashMap<String, String> = vars
            .iter()
            .filter(|(k, _)| k.starts_with("OTEL_"))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let otel = otel_env::read(&move |k: &str| otel.get(k).cloned());
        Config::load_from(Some(&f), &overrides, &otel)
    }

    fn endpoint(toml: &str, vars: &[(&str, &str)]) -> String {
        load(toml, vars).unwrap().exporters.otlp.unwrap().endpoint
    }

    #[test]
    fn an_endpoint_is_joined_as_the_specification_joins_each_kind() {
        let otlp = |e: &str| format!("[exporters.otlp]\nendpoint = {e:?}\n");
        let grpc = |e: &str| format!("[exporters.otlp]\nendpoint = {e:?}\nprotocol = \"grpc\"\n");
        for (toml, vars, want) in [
            // A base URL in the file is treated as OTEL_EXPORTER_OTLP_ENDPOINT is.
            (otlp("http://c:4318"), vec![], "http://c:4318/v1/metrics"),
            (otlp("http://c:4318/"), vec![], "http://c:4318/v1/metrics"),
            (
                otlp("http://c:4318/v1/metrics"),
                vec![],
                "http://c:4318/v1/metrics",
            ),
            (
                otlp("http://vm:8428/opentelemetry/v1/metrics"),
                vec![],
                "http://vm:8428/opentelemetry/v1/metrics",
            ),
            (otlp("http://c:4318/custom"), vec![], "http://c:4318/custom"),
            (grpc("http://c:4317"), vec![], "http://c:4317"),
            // The general variable is a base, its path kept; the signal one is as is.
            (
                "".into(),
                vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318/otlp/")],
                "http://c:4318/otlp/v1/metrics",
            ),
            (
                "".into(),
                vec![("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://c:4318")],
                "http://c:4318",
            ),
            (
                "".into(),
                vec![
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"),
                    ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                ],
                "http://c:4317",
            ),
            // OTEL_METRICS_EXPORTER=otlp alone: the specification's default endpoint.
            (
                "".into(),
                vec![("OTEL_METRICS_EXPORTER", "otlp")],
                "http://localhost:4318/v1/metrics",
            ),
            (
                "".into(),
                vec![
                    ("OTEL_METRICS_EXPORTER", "otlp"),
                    ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                ],
                "http://localhost:4317",
            ),
        ] {
            assert_eq!(endpoint(&toml, &vars), want, "{toml} {vars:?}");
        }
        assert!(load("", &[]).unwrap().exporters.otlp.is_none());
    }

    #[test]
    fn the_file_wins_over_otel_rocewatch_variables_over_the_file_and_the_rest_fills_in() {
        let c = load(
            "[exporters.otlp]\nendpoint = \"http://file:4318/v1/metrics\"\ninterval = \"5s\"\nheaders = { authorization = \"Bearer file\" }\n",
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel:4318"),
                ("OTEL_METRIC_EXPORT_INTERVAL", "1000"),
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
                ("OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Bearer%20otel,x-team=rdma"),
                ("OTEL_EXPORTER_OTLP_COMPRESSION", "none"),
                ("OTEL_EXPORTER_OTLP_CLIENT_KEY", "/k.pem"),
                ("ROCEWATCH_EXPORTERS__OTLP__INTERVAL", "7s"),
                ("ROCEWATCH_EXPORTERS__OTLP__HEADERS__X_SCOPE_ORGID", "12"),
            ],
        )
        .unwrap();
        let o = c.exporters.otlp.as_ref().unwrap();
        assert_eq!(o.endpoint, "http://file:4318/v1/metrics");
        assert_eq!(o.interval, Duration::from_secs(7));
        assert_eq!(o.timeout, Duration::from_millis(2500));
        assert_eq!(o.headers["authorization"], "Bearer file");
        assert_eq!(o.headers["x-team"], "rdma");
        // `-` for `_` in a header name from a variable; the value stays a string.
        assert_eq!(o.headers["x-scope-orgid"], "12");
        assert!(!o.headers.contains_key("x_scope_orgid"));
        assert_eq!(
            o.tls.as_ref().unwrap().key_file.as_deref(),
            Some(std::path::Path::new("/k.pem"))
        );
        let lines = c.otlp_sources.lines(o).join("\n");
        for want in [
            "exporters.otlp.endpoint = \"http://file:4318/v1/metrics\" (",
            "exporters.otlp.interval = \"7s\" (ROCEWATCH_EXPORTERS__OTLP__INTERVAL)",
            "exporters.otlp.timeout = \"2500ms\" (OTEL_EXPORTER_OTLP_TIMEOUT)",
            "exporters.otlp.compression = \"none\" (OTEL_EXPORTER_OTLP_COMPRESSION)",
            "exporters.otlp.protocol = \"http/protobuf\" (default)",
            "exporters.otlp.headers.x-scope-orgid = <2 bytes, not shown> (ROCEWATCH_EXPORTERS__OTLP__HEADERS__X_SCOPE_ORGID)",
            "exporters.otlp.headers.x-team = <4 bytes, not shown> (OTEL_EXPORTER_OTLP_HEADERS)",
            "exporters.otlp.tls.key_file = \"/k.pem\" (OTEL_EXPORTER_OTLP_CLIENT_KEY)",
        ] {
            assert!(lines.contains(want), "{want}\n{lines}");
        }
        assert!(!lines.contains("Bearer"), "{lines}");
        assert!(lines.contains("rw.toml)"), "{lines}");
    }

    #[test]
    fn the_switches_turn_off_what_the_file_turns_on_and_a_flag_turns_it_on_again() {
        let file = "[exporters.otlp]\nendpoint = \"http://file:4318/v1/metrics\"\n";
        for var in [
            ("OTEL_SDK_DISABLED", "true"),
            ("OTEL_METRICS_EXPORTER", "none"),
        ] {
            let mut c = load(file, &[var, ("OTEL_EXPORTER_OTLP_HEADERS", "a=1")]).unwrap();
            assert!(c.exporters.otlp.is_none(), "{var:?}");
            assert!(c
                .otlp_sources
                .disabled
                .as_deref()
                .unwrap()
                .starts_with(var.0));
            c.apply_otlp_flags(Some("http://flag:4318"), None, None)
                .unwrap();
            let o = c.exporters.otlp.as_ref().unwrap();
            assert_eq!(o.endpoint, "http://flag:4318/v1/metrics");
            assert_eq!(
                o.headers["a"], "1",
                "the variables' values with the flag's endpoint"
            );
        }
        // A flag's protocol after the file's base URL: the URL is made again.
        let mut c = load("[exporters.otlp]\nendpoint = \"http://c:4317\"\n", &[]).unwrap();
        c.apply_otlp_flags(None, Some(OtlpProtocol::Grpc), None)
            .unwrap();
        assert_eq!(c.exporters.otlp.as_ref().unwrap().endpoint, "http://c:4317");
        let lines = c
            .otlp_sources
            .lines(c.exporters.otlp.as_ref().unwrap())
            .join("\n");
        assert!(lines.contains("\"grpc\" (--otlp-protocol)"), "{lines}");
        let e = c
            .apply_otlp_flags(Some("localhost:4318"), None, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("<command line>: exporters.otlp.endpoint"), "{e}");
    }

    #[test]
    fn a_bad_value_names_its_variable_and_is_refused_only_where_it_is_used() {
        let file = "[exporters.otlp]\nendpoint = \"http://file:4318/v1/metrics\"\n";
        for (vars, says) in [
            (
                vec![("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")],
                "OTEL_EXPORTER_OTLP_PROTOCOL: http/json is not supported",
            ),
            (
                vec![("OTEL_EXPORTER_OTLP_TIMEOUT", "0")],
                "OTEL_EXPORTER_OTLP_TIMEOUT: exporters.otlp.timeout: 0s is less than",
            ),
            (
                vec![("OTEL_EXPORTER_OTLP_HEADERS", "novalue")],
                "OTEL_EXPORTER_OTLP_HEADERS: header 1 has no '='",
            ),
        ] {
            let e = load(file, &vars).expect_err(says).to_string();
            assert!(e.starts_with(says), "{vars:?}: {e}");
        }
        // A switch's unknown value is warned about and ignored (the specification): the
        // file's OTLP stands.
        let cfg = load(file, &[("OTEL_METRICS_EXPORTER", "console")]).unwrap();
        assert!(cfg.exporters.otlp.is_some());
        assert!(
            cfg.otlp_sources
                .ignored
                .iter()
                .any(|w| w.starts_with("OTEL_METRICS_EXPORTER: ") && w.ends_with(": ignored")),
            "{:?}",
            cfg.otlp_sources.ignored
        );
        // Delta and lowmemory are encoded (otlp::encode), so loaded, from the file or the variable.
        load(
            "[exporters.otlp]\nendpoint = \"http://c/v1/metrics\"\ntemporality = \"delta\"\n",
            &[],
        )
        .unwrap();
        load(
            file,
            &[(
                "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE",
                "LowMemory",
            )],
        )
        .unwrap();
        // What the file sets, or no OTLP at all: the variable is not used, not refused.
        load(
            &format!("{file}protocol = \"http/protobuf\"\n"),
            &[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")],
        )
        .unwrap();
        load(
            "",
            &[
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
                ("OTEL_METRICS_EXPORTER", "console"),
            ],
        )
        .unwrap();
        load(
            file,
            &[
                ("OTEL_SDK_DISABLED", "true"),
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "soon"),
            ],
        )
        .unwrap();
        let e = load("", &[("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318")])
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("OTEL_EXPORTER_OTLP_ENDPOINT: \"collector:4318\""),
            "{e}"
        );
    }

    /// Where logs go, as the specification makes it: `OTEL_EXPORTER_OTLP_LOGS_ENDPOINT` as
    /// is, the file's `logs_endpoint` (a base URL gets `/v1/logs`) over it; else beside the
    /// metrics, unless the metrics' endpoint is the signal-specific variable's: then
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`'s `/v1/logs`, or none (no `.../metrics/v1/logs`
    /// invented), said in `config check` with the fix.
    #[test]
    fn the_logs_endpoint_comes_from_where_the_specification_says() {
        let file = "[exporters.otlp]\nendpoint = \"http://file:4318/v1/metrics\"\n";
        let logs = |toml: &str, vars: &[(&str, &str)]| {
            let c = load(toml, vars).unwrap();
            let o = c.exporters.otlp.clone().unwrap();
            let line = c
                .otlp_sources
                .lines(&o)
                .into_iter()
                .find(|l| l.starts_with("exporters.otlp.logs_endpoint = "))
                .expect("a logs_endpoint line");
            (o.logs_url(), line)
        };
        let metrics_var = (
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
            "http://m:4318/metrics",
        );
        let general = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://g:4318");
        let logs_var = (
            "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT",
            "http://l:9428/insert/opentelemetry/v1/logs",
        );
        for (toml, vars, url, origin) in [
            (
                file.to_string(),
                vec![],
                "http://file:4318/v1/logs",
                "(beside exporters.otlp.endpoint)",
            ),
            // The file's endpoint wins over the general variable, for logs too.
            (
                file.into(),
                vec![general],
                "http://file:4318/v1/logs",
                "(beside exporters.otlp.endpoint)",
            ),
            (
                "".into(),
                vec![general],
                "http://g:4318/v1/logs",
                "(beside exporters.otlp.endpoint)",
            ),
            (
                "".into(),
                vec![metrics_var, general],
                "http://g:4318/v1/logs",
                "(OTEL_EXPORTER_OTLP_ENDPOINT, /v1/logs appended)",
            ),
            (
                "".into(),
                vec![
                    (
                        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
                        "http://m:4318/v1/metrics",
                    ),
                    general,
                ],
                "http://g:4318/v1/logs",
                "(OTEL_EXPORTER_OTLP_ENDPOINT, /v1/logs appended)",
            ),
            (
                "[exporters.otlp]\nendpoint = \"http://vm:8428/custom\"\n".into(),
                vec![general],
                "http://g:4318/v1/logs",
                "(OTEL_EXPORTER_OTLP_ENDPOINT, /v1/logs appended)",
            ),
            (
                "".into(),
                vec![metrics_var, logs_var],
                logs_var.1,
                "(OTEL_EXPORTER_OTLP_LOGS_ENDPOINT)",
            ),
            (
                format!("{file}logs_endpoint = \"http://lf:4318\"\n"),
                vec![logs_var],
                "http://lf:4318/v1/logs",
                "rw.toml, /v1/logs appended)",
            ),
            (
                "[exporters.otlp]\nendpoint = \"http://c:4317\"\nprotocol = \"grpc\"\n".into(),
                vec![],
                "http://c:4317",
                "(beside exporters.otlp.endpoint)",
            ),
        ] {
            let (got, line) = logs(&toml, &vars);
            assert_eq!(got.as_deref(), Ok(url), "{toml} {vars:?}");
            let head = format!("exporters.otlp.logs_endpoint = {url:?} (");
            assert!(
                line.starts_with(&head) && line.ends_with(origin),
                "{toml} {vars:?}: {line}"
            );
        }
        // Only a metrics URL that is not .../v1/metrics: none, and the fix said.
        for (toml, vars) in [
            ("".to_string(), vec![metrics_var]),
            (
                "[exporters.otlp]\nendpoint = \"http://vm:8428/custom\"\n".into(),
                vec![],
            ),
        ] {
            let (got, line) = logs(&toml, &vars);
            assert!(got.is_err(), "{toml} {vars:?}: {got:?}");
            assert!(
                line.starts_with("exporters.otlp.logs_endpoint = none (")
                    && line.contains(
                        "set exporters.otlp.logs_endpoint or OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"
                    ),
                "{line}"
            );
        }
        let e = load(file, &[("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", "l:4318")])
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT: \"l:4318\""),
            "{e}"
        );
    }
}
