//! TLS and basic authentication on the listeners, configured by a web configuration file
//! in the format of Prometheus's exporter-toolkit (the file node_exporter users already
//! have works as it is): `tls_server_config` (certificate and key, client CA and client
//! auth type, allowed client SANs, TLS versions, cipher suites, curves),
//! `http_server_config.headers`, `basic_auth_users` (bcrypt).
//!
//! The file and the files it names are looked at again when a connection arrives (a
//! `stat` each): a renewed certificate is served without a restart, as exporter-toolkit
//! does. A file that turns bad, or a change that would weaken anything (`weaken`: TLS,
//! client certificates and their CA and names, versions, cipher suites, users and
//! passwords, the rate limit, headers), keeps the running settings and says so once at
//! error level: such a change is applied by an operator's SIGHUP (or a restart) only.

pub mod auth;
pub mod config;
mod error;
pub mod tls;
pub mod weaken;

pub use error::WebError;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use hyper::header::{HeaderName, HeaderValue};

/// One loaded web configuration.
#[derive(Clone)]
pub struct Web {
    pub tls: Option<tokio_rustls::TlsAcceptor>,
    pub users: Option<Arc<auth::Users>>,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// Whether a client is asked for a certificate it must have and that the CA signed.
    pub requires_client_cert: bool,
    /// `rate_limit`: requests beyond it get a 429.
    pub limiter: Option<Arc<crate::token_bucket::TokenBucket>>,
    /// What a log line says about the settings.
    pub summary: String,
    /// What it protects with, compared when the file changes.
    pub policy: weaken::Policy,
}

impl std::fmt::Debug for Web {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.summary)
    }
}

impl Web {
    /// Read and check `path` and build what serving needs; errors name the file and key.
    pub fn load(path: &Path) -> Result<(Web, Vec<PathBuf>), WebError> {
        let (file, tls, files) = config::read(path)?;
        let mut summary = Vec::new();
        let mut policy = weaken::Policy {
            users: file.basic_auth_users.clone(),
            rate_limit: config::rate_limit(path, &file.rate_limit)?,
            headers: file
                .http_server_config
                .iter()
                .flat_map(|h| &h.headers)
                .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
                .collect(),
            tls: None,
        };
        let acceptor = match &tls {
            Some(t) => {
                let cfg = tls::server_config(path, t)?;
                policy.tls = Some(tls::policy(t, &cfg));
                summary.push(format!(
                    "TLS (client certificates: {:?}, min {:?})",
                    t.client_auth,
                    t.min_version.max(config::TlsVersion::Tls12)
                ));
                Some(tokio_rustls::TlsAcceptor::from(Arc::new(cfg)))
            }
            None => None,
        };
        let users = if file.basic_auth_users.is_empty() {
            None
        } else {
            summary.push(format!(
                "basic auth ({} user(s))",
                file.basic_auth_users.len()
            ));
            Some(auth::Users::new(file.basic_auth_users.clone()))
        };
        let headers = file
            .http_server_config
            .iter()
            .flat_map(|h| &h.headers)
            .filter_map(|(k, v)| {
                Some((
                    HeaderName::from_bytes(k.as_bytes()).ok()?,
                    HeaderValue::from_str(v).ok()?,
                ))
            })
            .collect();
        let limiter = policy.rate_limit.map(|(burst, interval)| {
            summary.push(format!("rate limit {burst} per {interval:?}"));
            Arc::new(crate::token_bucket::TokenBucket::new(burst, interval))
        });
        let web = Web {
            tls: acceptor,
            users,
            headers,
            limiter,
            requires_client_cert: tls
                .as_ref()
                .is_some_and(|t| t.client_auth == config::ClientAuth::RequireAndVerifyClientCert),
            summary: if summary.is_empty() {
                "plain HTTP, no authentication".into()
            } else {
                summary.join(", ")
            },
            policy,
        };
        Ok((web, files))
    }

    /// Whether a client must authenticate (a password or a verified certificate).
    pub fn authenticates(&self) -> bool {
        self.users.is_some() || self.requires_client_cert
    }
}

type Stamp = Vec<Option<(SystemTime, u64)>>;

fn stamp(files: &[PathBuf]) -> Stamp {
    files
        .iter()
        .map(|f| {
            let m = std::fs::metadata(f).ok()?;
            Some((m.modified().ok()?, m.len()))
        })
        .collect()
}

/// A listener's web configuration, read again when its files change.
#[derive(Debug)]
pub struct WebListener {
    path: PathBuf,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    web: Web,
    files: Vec<PathBuf>,
    stamp: Stamp,
    /// The stamp of a change that was refused, and when (said once per change).
    refused: Option<(Stamp, Instant)>,
    /// When the files were last looked at.
    checked: Option<Instant>,
}

impl WebListener {
    /// Load `path`; an error names the file and key.
    pub fn load(path: &Path) -> Result<Arc<WebListener>, WebError> {
        let (web, files) = Web::load(path)?;
        let stamp = stamp(&files);
        Ok(Arc::new(WebListener {
            path: path.to_path_buf(),
            state: Mutex::new(State {
                web,
                files,
                stamp,
                refused: None,
                checked: None,
            }),
        }))
    }

    /// What a reload to `new` (the web configuration file a reloaded configuration names;
    /// `None`: none, plain HTTP) would weaken compared with the settings served now,
    /// without looking at the files again. A SIGHUP takes the file as it is (the
    /// operator's act) and says this at warn level.
    pub fn weakened_by(&self, new: Option<&Path>) -> Result<Vec<String>, WebError> {
        let new = match new {
            Some(p) => Web::load(p)?.0.policy,
            None => weaken::Policy::default(),
        };
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        Ok(weaken::weakens(&s.web.policy, &new))
    }

    /// The settings now. At most once a second the files are looked at (a `stat` each) and
    /// read again when one changed. A change that does not load, or that would protect less
    /// in any way ([`weaken::weakens`]: a file rewritten in place and caught half-way, an
    /// edit by mistake), is refused and said at error level, naming the file and what it
    /// would weaken: the running settings stay until a SIGHUP or a restart takes the file
    /// as it is. A refused change is tried again when the files change or after 30 s.
    pub fn current(&self, name: &str) -> Web {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let t = Instant::now();
        if s.checked
            .is_some_and(|c| t.duration_since(c) < Duration::from_secs(1))
        {
            return s.web.clone();
        }
        s.checked = Some(t);
        // Stamped before reading: a change while it is read is seen next time.
        let now = stamp(&s.files);
        let retry = match &s.refused {
            Some((st, at)) => *st != now || t.duration_since(*at) > Duration::from_secs(30),
            None => true,
        };
        if now != s.stamp && retry {
            let refused = match Web::load(&self.path) {
                Ok((web, files)) => match weaken::weakens(&s.web.policy, &web.policy) {
                    weaker if weaker.is_empty() => {
                        tracing::info!(
                            "{name}: {} changed; now serving {}",
                            self.path.display(),
                            web.summary
                        );
                        s.stamp = if files == s.files { now } else { stamp(&files) };
                        s.web = web;
                        s.files = files;
                        s.refused = None;
                        return s.web.clone();
                    }
                    weaker => format!(
                        "it would weaken {}; to serve it as it is, send SIGHUP or restart",
                        weaker.join("; ")
                    ),
                },
                Err(e) => format!("it does not load: {e}"),
            };
            if s.refused.as_ref().is_none_or(|(st, _)| *st != now) {
                tracing::error!(
                    "{name}: {} changed and is refused, the running settings stay: {refused}",
                    self.path.display()
                );
            }
            s.refused = Some((now, t));
        }
        s.web.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Files {
        dir: tempfile::TempDir,
    }

    impl Files {
        fn new() -> Files {
            let dir = tempfile::tempdir().unwrap();
            let key = rcgen::KeyPair::generate().unwrap();
            let cert = rcgen::CertificateParams::new(vec!["localhost".into()])
                .unwrap()
                .self_signed(&key)
                .unwrap();
            std::fs::write(dir.path().join("server.pem"), cert.pem()).unwrap();
            std::fs::write(dir.path().join("server.key"), key.serialize_pem()).unwrap();
            std::fs::write(dir.path().join("ca.pem"), cert.pem()).unwrap();
            Files { dir }
        }

        fn web(&self, yaml: &str) -> PathBuf {
            let p = self.dir.path().join("web.yml");
            std::fs::write(&p, yaml).unwrap();
            p
        }

        fn error(&self, yaml: &str) -> String {
            let p = self.web(yaml);
            let e = Web::load(&p).unwrap_err().to_string();
            assert!(e.starts_with(&p.display().to_string()), "{e}");
            e
        }
    }

    const TLS: &str = "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n";

    #[test]
    fn a_node_exporter_web_config_loads_with_paths_relative_to_it() {
        let f = Files::new();
        let hash = bcrypt::hash("pw", 4).unwrap();
        let p = f.web(&format!(
            "{TLS}  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.pem\n  min_version: TLS13\n  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]\n  curve_preferences: [X25519, CurveP256]\nhttp_server_config:\n  http2: false\n  headers:\n    Strict-Transport-Security: max-age=31536000\nbasic_auth_users:\n  prometheus: {hash}\n"
        ));
        let (web, files) = Web::load(&p).unwrap();
        assert!(web.tls.is_some() && web.users.is_some() && web.requires_client_cert);
        assert!(web.authenticates());
        assert_eq!(web.headers.len(), 1);
        assert_eq!(files.len(), 4, "{files:?}");
        assert!(
            web.summary.contains("TLS") && web.summary.contains("basic auth"),
            "{}",
            web.summary
        );
        // An empty file and an empty TLS section: plain HTTP, as exporter-toolkit.
        let (web, _) = Web::load(&f.web("")).unwrap();
        assert!(web.tls.is_none() && web.users.is_none() && !web.authenticates());
        let (web, _) = Web::load(&f.web("tls_server_config: {}\n")).unwrap();
        assert!(web.tls.is_none());
    }

    #[test]
    fn errors_name_the_file_and_the_key() {
        let f = Files::new();
        for (yaml, want) in [
            (
                "tls_server_config:\n  cert_file: server.pem\n  kee_file: x\n",
                "unknown field `kee_file`",
            ),
            (
                "tls_server_config:\n  cert_file: server.pem\n",
                "tls_server_config.key_file: missing",
            ),
            (
                "tls_server_config:\n  cert_file: nope.pem\n  key_file: server.key\n",
                "tls_server_config.cert_file: ",
            ),
            (
                &format!("{TLS}  client_auth_type: RequireAndVerify\n"),
                "tls_server_config.client_auth_type: \"RequireAndVerify\"",
            ),
            (
                &format!("{TLS}  client_auth_type: RequireAndVerifyClientCert\n"),
                "tls_server_config.client_ca_file: RequireAndVerifyClientCert needs",
            ),
            (
                &format!("{TLS}  client_ca_file: ca.pem\n"),
                "tls_server_config.client_auth_type: a client CA is set",
            ),
            (
                &format!("{TLS}  max_version: TLS11\n"),
                "tls_server_config.max_version: TLS 1.0 and 1.1 are not offered",
            ),
            (
                &format!("{TLS}  min_version: TLS13\n  max_version: TLS12\n"),
                "lower than min_version",
            ),
            (
                &format!("{TLS}  min_version: SSL3\n"),
                "tls_server_config.min_version: \"SSL3\"",
            ),
            (
                &format!("{TLS}  cipher_suites: [TLS_RSA_WITH_AES_128_CBC_SHA]\n"),
                "tls_server_config.cipher_suites: \"TLS_RSA_WITH_AES_128_CBC_SHA\" is not offered",
            ),
            (
                &format!("{TLS}  curve_preferences: [CurveP521]\n"),
                "tls_server_config.curve_preferences: \"CurveP521\"",
            ),
            (
                "tls_server_config:\n  cert_file: server.key\n  key_file: server.key\n",
                "no PEM certificate",
            ),
            (
                "tls_server_config:\n  cert_file: server.pem\n  key_file: server.pem\n",
                "tls_server_config.key_file: ",
            ),
            (
                "basic_auth_users:\n  prometheus: hunter2\n",
                "basic_auth_users.prometheus: not a bcrypt hash",
            ),
            (
                "basic_auth_users: [a, b]\n",
                "basic_auth_users: invalid type",
            ),
            (
                "http_server_config:\n  headers:\n    \"bad header\": x\n",
                "http_server_config.headers.bad header",
            ),
        ] {
            let e = f.error(yaml);
            assert!(e.contains(want), "{yaml}\nwanted {want:?} in: {e}");
        }
        let missing = f.dir.path().join("missing.yml");
        assert!(Web::load(&missing)
            .unwrap_err()
            .to_string()
            .contains("missing.yml"));
    }

    /// Look at the files at the next call (current() does at most once a second).
    fn recheck(l: &WebListener) {
        l.state.lock().unwrap().checked = None;
    }

    #[test]
    fn a_renewed_certificate_is_taken_and_a_broken_or_weaker_file_is_refused() {
        let f = Files::new();
        let p = f.web(TLS);
        let l = WebListener::load(&p).unwrap();
        assert!(l.current("test").tls.is_some());
        let hash = bcrypt::hash("pw", 4).unwrap();
        // Changed: basic auth appears (a longer file, so the stamp differs at any clock).
        std::fs::write(&p, format!("{TLS}basic_auth_users:\n  u: {hash}\n")).unwrap();
        assert!(
            l.current("test").users.is_none(),
            "not looked at again within a second"
        );
        recheck(&l);
        assert!(l.current("test").users.is_some());
        // Broken: the last good settings stay.
        std::fs::write(f.dir.path().join("server.key"), "not a key, and longer than before ........................................................................................................................................................................................................................").unwrap();
        recheck(&l);
        let w = l.current("test");
        assert!(w.tls.is_some() && w.users.is_some());
        // Weaker: an empty file (a rewrite caught half-way), TLS off, the users removed:
        // refused, the listener keeps its protection.
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        std::fs::write(f.dir.path().join("server.pem"), cert.pem()).unwrap();
        std::fs::write(f.dir.path().join("server.key"), key.serialize_pem()).unwrap();
        for weaker in [
            String::new(),
            format!("basic_auth_users:\n  u: {hash}\n"),
            TLS.to_string(),
        ] {
            std::fs::write(&p, &weaker).unwrap();
            recheck(&l);
            let w = l.current("test");
            assert!(
                w.tls.is_some() && w.users.is_some(),
                "{weaker:?} is refused"
            );
        }
    }

    #[test]
    fn a_half_written_file_that_drops_the_allowed_sans_is_refused_until_sighup() {
        let f = Files::new();
        let whole = format!("{TLS}  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.pem\n  client_allowed_sans: [agent]\n");
        let p = f.web(&whole);
        let l = WebListener::load(&p).unwrap();
        let sans = |w: &Web| w.policy.tls.as_ref().unwrap().allowed_sans.clone();
        assert_eq!(sans(&l.current("test")).len(), 1);
        // Truncated, then caught before the last line was written.
        std::fs::write(&p, whole.split("  client_allowed_sans").next().unwrap()).unwrap();
        recheck(&l);
        assert_eq!(
            sans(&l.current("test")),
            ["agent".to_string()].into(),
            "the names stay"
        );
        // A stricter change is taken: TLS 1.3 only.
        std::fs::write(&p, format!("{whole}  min_version: TLS13\n")).unwrap();
        recheck(&l);
        let w = l.current("test");
        assert_eq!(
            w.policy.tls.as_ref().unwrap().min_version,
            config::TlsVersion::Tls13
        );
        // What a SIGHUP does: the file loaded as it is.
        std::fs::write(&p, whole.split("  client_allowed_sans").next().unwrap()).unwrap();
        assert!(sans(&WebListener::load(&p).unwrap().current("test")).is_empty());
    }

    #[test]
    fn cipher_suites_keep_tls12_and_sans_need_a_required_certificate() {
        let f = Files::new();
        let p = f.web(&format!("{TLS}  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305]\n"));
        let (web, _) = Web::load(&p).unwrap();
        let cfg = web.tls.unwrap();
        let suites: Vec<String> = cfg
            .config()
            .crypto_provider()
            .cipher_suites
            .iter()
            .map(|s| format!("{:?}", s.suite()))
            .collect();
        assert_eq!(
            suites.iter().filter(|s| !s.starts_with("TLS13")).count(),
            2,
            "{suites:?}"
        );
        // TLS 1.2 only, with those suites: loads.
        Web::load(&f.web(&format!("{TLS}  max_version: TLS12\n  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256]\n"))).unwrap();
        // client_allowed_sans where a client may show no certificate: refused.
        for auth in ["VerifyClientCertIfGiven", "RequestClientCert"] {
            let e = f.error(&format!("{TLS}  client_auth_type: {auth}\n  client_ca_file: ca.pem\n  client_allowed_sans: [prometheus]\n"));
            assert!(
                e.contains(
                    "client_allowed_sans: needs client_auth_type RequireAndVerifyClientCert"
                ),
                "{e}"
            );
        }
        Web::load(&f.web(&format!(
            "{TLS}  client_auth_type: RequireClientCert\n  client_allowed_sans: [prometheus]\n"
        )))
        .unwrap();
    }

    #[test]
    fn headers_and_rate_limit_as_exporter_toolkit_allows() {
        let f = Files::new();
        let (web, _) = Web::load(&f.web("http_server_config:\n  headers:\n    X-Frame-Options: deny\nrate_limit:\n  burst: 2\n  interval: 1h\n")).unwrap();
        assert_eq!(web.headers.len(), 1);
        let l = web.limiter.unwrap();
        assert!(
            l.allow() && l.allow() && !l.allow(),
            "burst 2, then one an hour"
        );
        for (yaml, want) in [
            (
                "http_server_config:\n  headers:\n    Content-Length: \"0\"\n",
                "not a header a web configuration may set",
            ),
            (
                "http_server_config:\n  headers:\n    X-Frame-Options: allow\n",
                "\"allow\" is not allowed; one of deny, sameorigin",
            ),
            (
                "rate_limit:\n  burst: 0\n  interval: 1s\n",
                "rate_limit.burst: must be at least 1",
            ),
            (
                "rate_limit:\n  burst: 1\n  interval: soon\n",
                "rate_limit.interval",
            ),
            // Bounded as every duration is (issue 27: 18446744073709551615s was taken).
            (
                "rate_limit:\n  burst: 1\n  interval: 18446744073709551615s\n",
                "is more than this setting allows: at most 1h",
            ),
        ] {
            let e = f.error(yaml);
            assert!(e.contains(want), "{yaml}: {e}");
        }
    }

    proptest::proptest! {
        #[test]
        fn authorization_headers_never_panic(h in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            let _ = auth::basic(&h);
        }
    }
}
