//! The web configuration file of Prometheus's exporter-toolkit (node_exporter's
//! `--web.config.file`), read as it is: `tls_server_config`, `http_server_config`,
//! `basic_auth_users`. Unknown keys are refused (exporter-toolkit reads strictly too): a
//! security setting that is silently ignored would serve more openly than its author meant.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::error::WebError;

/// The file as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebConfigFile {
    #[serde(default)]
    pub tls_server_config: Option<TlsServerConfig>,
    #[serde(default)]
    pub http_server_config: Option<HttpServerConfig>,
    /// User name → bcrypt hash (`$2y$`, `$2b$`, `$2a$`).
    #[serde(default)]
    pub basic_auth_users: BTreeMap<String, String>,
    #[serde(default)]
    pub rate_limit: Option<RateLimit>,
}

/// `rate_limit`: requests answered per `interval`, with `burst` at once; beyond, a 429.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimit {
    #[serde(default)]
    pub burst: u32,
    /// A Go duration (`1s`, `100ms`); 0 or absent: no limit.
    #[serde(default)]
    pub interval: Option<String>,
}

/// The response headers exporter-toolkit lets a web configuration add, with the values
/// it allows (`None`: any).
const HEADERS: &[(&str, Option<&[&str]>)] = &[
    ("Strict-Transport-Security", None),
    ("X-Content-Type-Options", Some(&["nosniff"])),
    ("X-Frame-Options", Some(&["deny", "sameorigin"])),
    ("X-XSS-Protection", None),
    ("Content-Security-Policy", None),
];

/// `tls_server_config`
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsServerConfig {
    #[serde(default)]
    pub cert_file: Option<PathBuf>,
    #[serde(default)]
    pub key_file: Option<PathBuf>,
    /// The certificate itself (PEM), instead of `cert_file`.
    #[serde(default)]
    pub cert: Option<String>,
    /// The key itself (PEM), instead of `key_file`.
    #[serde(default)]
    pub key: Option<String>,
    #[serde(default)]
    pub client_auth_type: Option<String>,
    #[serde(default)]
    pub client_ca_file: Option<PathBuf>,
    #[serde(default)]
    pub client_ca: Option<String>,
    #[serde(default)]
    pub client_allowed_sans: Vec<String>,
    #[serde(default)]
    pub min_version: Option<String>,
    #[serde(default)]
    pub max_version: Option<String>,
    #[serde(default)]
    pub cipher_suites: Vec<String>,
    #[serde(default)]
    pub curve_preferences: Vec<String>,
    #[serde(default)]
    pub prefer_server_cipher_suites: Option<bool>,
}

/// `http_server_config`
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpServerConfig {
    /// Accepted for compatibility; the listeners speak HTTP/1.1 (Prometheus scrapes and
    /// Alertmanager webhooks use it).
    #[serde(default)]
    pub http2: Option<bool>,
    /// Response headers added to every answer (e.g. `Strict-Transport-Security`).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

/// How a client must identify itself with a certificate (Go's `tls.ClientAuthType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    NoClientCert,
    RequestClientCert,
    RequireAnyClientCert,
    VerifyClientCertIfGiven,
    RequireAndVerifyClientCert,
}

impl ClientAuth {
    fn parse(s: &str) -> Option<ClientAuth> {
        Some(match s {
            "" | "NoClientCert" => ClientAuth::NoClientCert,
            "RequestClientCert" => ClientAuth::RequestClientCert,
            // RequireClientCert: exporter-toolkit's older name.
            "RequireAnyClientCert" | "RequireClientCert" => ClientAuth::RequireAnyClientCert,
            "VerifyClientCertIfGiven" => ClientAuth::VerifyClientCertIfGiven,
            "RequireAndVerifyClientCert" => ClientAuth::RequireAndVerifyClientCert,
            _ => return None,
        })
    }

    /// Whether a client without a certificate is turned away.
    pub fn requires(self) -> bool {
        matches!(
            self,
            ClientAuth::RequireAnyClientCert | ClientAuth::RequireAndVerifyClientCert
        )
    }

    /// Whether the CA pool decides who gets in.
    pub fn verifies(self) -> bool {
        matches!(
            self,
            ClientAuth::VerifyClientCertIfGiven | ClientAuth::RequireAndVerifyClientCert
        )
    }
}

/// TLS versions as the file names them. rustls speaks 1.2 and 1.3 only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TlsVersion {
    Tls10,
    Tls11,
    Tls12,
    Tls13,
}

impl TlsVersion {
    fn parse(s: &str) -> Option<TlsVersion> {
        Some(match s {
            "TLS10" => TlsVersion::Tls10,
            "TLS11" => TlsVersion::Tls11,
            "TLS12" => TlsVersion::Tls12,
            "TLS13" => TlsVersion::Tls13,
            _ => return None,
        })
    }
}

/// PEM text and where it came from (for errors).
#[derive(Debug, Clone)]
pub struct Pem {
    pub text: String,
    pub origin: String,
}

/// The file, checked and with its PEM files read: what [`super::tls`] builds from.
#[derive(Debug, Clone)]
pub struct TlsSettings {
    pub cert: Pem,
    pub key: Pem,
    pub client_auth: ClientAuth,
    pub client_ca: Option<Pem>,
    pub client_allowed_sans: Vec<String>,
    pub min_version: TlsVersion,
    pub max_version: TlsVersion,
    pub cipher_suites: Vec<String>,
    pub curve_preferences: Vec<String>,
    pub prefer_server_cipher_suites: bool,
}

/// The rate limit as (burst, interval), `None` when there is none.
pub fn rate_limit(
    path: &Path,
    r: &Option<RateLimit>,
) -> Result<Option<(u32, std::time::Duration)>, WebError> {
    let Some(r) = r else { return Ok(None) };
    let interval = match r.interval.as_deref().map(str::trim) {
        None | Some("") | Some("0") | Some("0s") => return Ok(None),
        Some(i) => rocewatch_duration::RATE_INTERVAL
            .parse(i)
            .map_err(|e| WebError::invalid(path, "rate_limit.interval", format!("{i:?}: {e}")))?,
    };
    if r.burst == 0 {
        return Err(WebError::invalid(
            path,
            "rate_limit.burst",
            "must be at least 1 when an interval is set (0 would refuse every request)",
        ));
    }
    Ok(Some((r.burst, interval)))
}

/// Read and check `path`; relative paths inside it are relative to its directory (as
/// exporter-toolkit resolves them). Returns the settings and every file they were read
/// from (the web configuration first), so a listener can tell when they change.
pub fn read(path: &Path) -> Result<(WebConfigFile, Option<TlsSettings>, Vec<PathBuf>), WebError> {
    let text = std::fs::read_to_string(path).map_err(|e| WebError::file(path, "", e))?;
    let file: WebConfigFile = if text.trim().is_empty() {
        WebConfigFile::default()
    } else {
        let de = serde_yaml::Deserializer::from_str(&text);
        serde_path_to_error::deserialize(de).map_err(|e| WebError::Invalid {
            file: path.to_path_buf(),
            key: e.path().to_string(),
            message: e.inner().to_string(),
        })?
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut files = vec![path.to_path_buf()];
    let tls = match &file.tls_server_config {
        Some(t) => tls_settings(path, dir, t, &mut files)?,
        None => None,
    };
    for (user, hash) in &file.basic_auth_users {
        if user.contains(':') {
            return Err(WebError::invalid(
                path,
                format!("basic_auth_users.{user}"),
                "a user name cannot contain ':' (it separates the name from the password)",
            ));
        }
        // Refuse what bcrypt cannot verify now, not on the first request (parsed, not
        // computed: a check at cost 31 would take hours).
        if hash.parse::<bcrypt::HashParts>().is_err() {
            return Err(WebError::invalid(
                path,
                format!("basic_auth_users.{user}"),
                "not a bcrypt hash (make one with `rocewatch config hash-password` or `htpasswd -nBC 10 \"\" | tr -d ':\\n'`)",
            ));
        }
    }
    if let Some(h) = &file.http_server_config {
        for (name, value) in &h.headers {
            let key = format!("http_server_config.headers.{name}");
            let Some((_, allowed)) = HEADERS.iter().find(|(h, _)| h.eq_ignore_ascii_case(name))
            else {
                return Err(WebError::invalid(
                    path,
                    key,
                    format!(
                        "not a header a web configuration may set; one of {}",
                        HEADERS
                            .iter()
                            .map(|(h, _)| *h)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
            };
            if allowed.is_some_and(|vs| !vs.iter().any(|v| v.eq_ignore_ascii_case(value)))
                || hyper::header::HeaderValue::from_str(value).is_err()
            {
                return Err(WebError::invalid(
                    path,
                    key,
                    format!(
                        "{value:?} is not allowed{}",
                        allowed
                            .map(|vs| format!("; one of {}", vs.join(", ")))
                            .unwrap_or_default()
                    ),
                ));
            }
        }
    }
    rate_limit(path, &file.rate_limit)?;
    Ok((file, tls, files))
}

fn tls_settings(
    path: &Path,
    dir: &Path,
    t: &TlsServerConfig,
    files: &mut Vec<PathBuf>,
) -> Result<Option<TlsSettings>, WebError> {
    let client_auth_name = t.client_auth_type.as_deref().unwrap_or("");
    let nothing_set = t.cert_file.is_none()
        && t.key_file.is_none()
        && t.cert.is_none()
        && t.key.is_none()
        && client_auth_name.is_empty()
        && t.client_ca_file.is_none()
        && t.client_ca.is_none();
    if nothing_set {
        // As exporter-toolkit: an empty section means plain HTTP.
        return Ok(None);
    }
    let mut pem =
        |file: &Option<PathBuf>, inline: &Option<String>, name: &str, inline_name: &str| {
            tls_pem(path, dir, files, file, inline, name, inline_name)
        };
    let cert = pem(&t.cert_file, &t.cert, "cert_file", "cert")?.ok_or_else(|| {
        WebError::invalid(
            path,
            tls_key("cert_file"),
            "missing (the server certificate, PEM)",
        )
    })?;
    let private = pem(&t.key_file, &t.key, "key_file", "key")?.ok_or_else(|| {
        WebError::invalid(
            path,
            tls_key("key_file"),
            "missing (the server's private key, PEM)",
        )
    })?;
    let client_ca = pem(
        &t.client_ca_file,
        &t.client_ca,
        "client_ca_file",
        "client_ca",
    )?;
    let client_auth = tls_client_auth(path, t, client_auth_name, client_ca.is_some())?;
    let (min_version, max_version) = tls_versions(path, t)?;
    Ok(Some(TlsSettings {
        cert,
        key: private,
        client_auth,
        client_ca,
        client_allowed_sans: t.client_allowed_sans.clone(),
        min_version,
        max_version,
        cipher_suites: t.cipher_suites.clone(),
        curve_preferences: t.curve_preferences.clone(),
        prefer_server_cipher_suites: t.prefer_server_cipher_suites.unwrap_or(true),
    }))
}

/// The full name of a key of `tls_server_config`, as errors name it.
fn tls_key(k: &str) -> String {
    format!("tls_server_config.{k}")
}

/// One PEM, from its file (read relative to `dir`, remembered in `files` to be watched)
/// or given inline; both set is an error.
fn tls_pem(
    path: &Path,
    dir: &Path,
    files: &mut Vec<PathBuf>,
    file: &Option<PathBuf>,
    inline: &Option<String>,
    name: &str,
    inline_name: &str,
) -> Result<Option<Pem>, WebError> {
    match (file, inline) {
        (Some(_), Some(_)) => Err(WebError::invalid(
            path,
            tls_key(name),
            format!("set {name} or {inline_name}, not both"),
        )),
        (Some(f), None) => {
            let f = dir.join(f);
            let text = std::fs::read_to_string(&f).map_err(|e| {
                WebError::file(path, &tls_key(name), format!("{}: {e}", f.display()))
            })?;
            files.push(f.clone());
            Ok(Some(Pem {
                text,
                origin: f.display().to_string(),
            }))
        }
        (None, Some(t)) => Ok(Some(Pem {
            text: t.clone(),
            origin: tls_key(inline_name),
        })),
        (None, None) => Ok(None),
    }
}

/// `client_auth_type`, checked against the client CA and `client_allowed_sans` it needs
/// or makes pointless.
fn tls_client_auth(
    path: &Path,
    t: &TlsServerConfig,
    client_auth_name: &str,
    has_client_ca: bool,
) -> Result<ClientAuth, WebError> {
    let client_auth = ClientAuth::parse(client_auth_name).ok_or_else(|| {
        WebError::invalid(
            path,
            tls_key("client_auth_type"),
            format!("{client_auth_name:?}: one of NoClientCert, RequestClientCert, RequireAnyClientCert, VerifyClientCertIfGiven, RequireAndVerifyClientCert"),
        )
    })?;
    if client_auth.verifies() && !has_client_ca {
        return Err(WebError::invalid(
            path,
            tls_key("client_ca_file"),
            format!("{client_auth_name} needs the CA that signs client certificates"),
        ));
    }
    if client_auth == ClientAuth::NoClientCert && has_client_ca {
        return Err(WebError::invalid(
            path,
            tls_key("client_auth_type"),
            "a client CA is set but no client_auth_type asks for client certificates (set RequireAndVerifyClientCert)",
        ));
    }
    // Only where a client must show a certificate: with the optional kinds a client that
    // shows none would pass unchecked.
    if !t.client_allowed_sans.is_empty()
        && !matches!(
            client_auth,
            ClientAuth::RequireAnyClientCert | ClientAuth::RequireAndVerifyClientCert
        )
    {
        return Err(WebError::invalid(
            path,
            tls_key("client_allowed_sans"),
            "needs client_auth_type RequireAndVerifyClientCert (or RequireAnyClientCert)",
        ));
    }
    Ok(client_auth)
}

/// `min_version` and `max_version` (defaults TLS 1.2 and 1.3); TLS 1.0 and 1.1 are never
/// offered.
fn tls_versions(path: &Path, t: &TlsServerConfig) -> Result<(TlsVersion, TlsVersion), WebError> {
    let version = |v: &Option<String>, name: &str, default: TlsVersion| match v.as_deref() {
        None | Some("") => Ok(default),
        Some(s) => TlsVersion::parse(s).ok_or_else(|| {
            WebError::invalid(
                path,
                tls_key(name),
                format!("{s:?}: one of TLS10, TLS11, TLS12, TLS13"),
            )
        }),
    };
    let min_version = version(&t.min_version, "min_version", TlsVersion::Tls12)?;
    let max_version = version(&t.max_version, "max_version", TlsVersion::Tls13)?;
    if max_version < TlsVersion::Tls12 {
        return Err(WebError::invalid(
            path,
            tls_key("max_version"),
            "TLS 1.0 and 1.1 are not offered (rocewatch speaks TLS 1.2 and 1.3)",
        ));
    }
    if max_version < min_version {
        return Err(WebError::invalid(
            path,
            tls_key("max_version"),
            "lower than min_version",
        ));
    }
    Ok((min_version, max_version))
}
