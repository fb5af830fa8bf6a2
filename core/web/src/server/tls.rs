//! The rustls server configuration of a web configuration's `tls_server_config`.

use std::path::Path;
use std::sync::Arc;

use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};

use super::config::{ClientAuth, Pem, TlsSettings, TlsVersion};
use super::error::WebError;

/// Go's names of the TLS 1.2 suites rustls offers (TLS 1.3 suites are not configurable,
/// as in Go).
const SUITES: &[(&str, rustls::CipherSuite)] = {
    use rustls::CipherSuite as C;
    &[
        (
            "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
            C::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        ),
        (
            "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
            C::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        ),
        (
            "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
            C::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
        ),
        (
            "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
            C::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
        ),
        (
            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
            C::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        ),
        (
            "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
            C::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
        ),
        (
            "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
            C::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
        ),
        (
            "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
            C::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
        ),
    ]
};

/// Go's curve names and rustls's.
const CURVES: &[(&str, &str)] = &[
    ("X25519", "X25519"),
    ("CurveP256", "secp256r1"),
    ("CurveP384", "secp384r1"),
];

fn names<T>(table: &[(&str, T)]) -> String {
    table
        .iter()
        .map(|(go, _)| *go)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Each of Go's `names` as ours, from `table`; an unknown one names the key.
fn lookup<T: Copy>(
    file: &Path,
    key: &str,
    table: &[(&str, T)],
    wanted: &[String],
) -> Result<Vec<T>, WebError> {
    wanted
        .iter()
        .map(|name| {
            table
                .iter()
                .find(|(go, _)| go == name)
                .map(|(_, ours)| *ours)
                .ok_or_else(|| {
                    WebError::invalid(
                        file,
                        format!("tls_server_config.{key}"),
                        format!("{name:?} is not offered; one of {}", names(table)),
                    )
                })
        })
        .collect()
}

fn provider(file: &Path, t: &TlsSettings) -> Result<CryptoProvider, WebError> {
    let mut p = rustls::crypto::ring::default_provider();
    if !t.cipher_suites.is_empty() {
        let wanted = lookup(file, "cipher_suites", SUITES, &t.cipher_suites)?;
        // The configured order, then every TLS 1.3 suite (not configurable, as in Go).
        let all = p.cipher_suites.clone();
        p.cipher_suites = wanted
            .iter()
            .filter_map(|w| all.iter().find(|s| s.suite() == *w).copied())
            .chain(
                all.iter()
                    .filter(|s| s.version() == &rustls::version::TLS13)
                    .copied(),
            )
            .collect();
    }
    if !t.curve_preferences.is_empty() {
        let all = p.kx_groups.clone();
        let groups = lookup(file, "curve_preferences", CURVES, &t.curve_preferences)?
            .into_iter()
            .filter_map(|ours| {
                all.iter()
                    .find(|g| format!("{:?}", g.name()).eq_ignore_ascii_case(ours))
                    .copied()
            })
            .collect();
        p.kx_groups = groups;
    }
    Ok(p)
}

fn certs(file: &Path, key: &str, pem: &Pem) -> Result<Vec<CertificateDer<'static>>, WebError> {
    let certs: Vec<_> = CertificateDer::pem_slice_iter(pem.text.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| WebError::invalid(file, key, format!("{}: {e}", pem.origin)))?;
    if certs.is_empty() {
        return Err(WebError::invalid(
            file,
            key,
            format!("{}: no PEM certificate in it", pem.origin),
        ));
    }
    Ok(certs)
}

/// Build the server configuration; every error names the key and the file at fault.
pub fn server_config(file: &Path, t: &TlsSettings) -> Result<rustls::ServerConfig, WebError> {
    let provider = Arc::new(provider(file, t)?);
    let versions: Vec<&'static rustls::SupportedProtocolVersion> = [
        (TlsVersion::Tls12, &rustls::version::TLS12),
        (TlsVersion::Tls13, &rustls::version::TLS13),
    ]
    .into_iter()
    .filter(|(v, _)| *v >= t.min_version && *v <= t.max_version)
    .map(|(_, p)| p)
    .collect();
    let chain = certs(file, "tls_server_config.cert_file", &t.cert)?;
    let key = PrivateKeyDer::from_pem_slice(t.key.text.as_bytes()).map_err(|e| {
        WebError::invalid(
            file,
            "tls_server_config.key_file",
            format!("{}: {e}", t.key.origin),
        )
    })?;
    let algs = provider.signature_verification_algorithms;
    let verifier: Option<Arc<dyn ClientCertVerifier>> = match t.client_auth {
        ClientAuth::NoClientCert => None,
        ClientAuth::RequestClientCert | ClientAuth::RequireAnyClientCert => {
            Some(Arc::new(AnyClientCert {
                mandatory: t.client_auth == ClientAuth::RequireAnyClientCert,
                algs,
            }))
        }
        ClientAuth::VerifyClientCertIfGiven | ClientAuth::RequireAndVerifyClientCert => {
            let ca = t.client_ca.as_ref().expect("checked when read");
            let mut roots = RootCertStore::empty();
            for c in certs(file, "tls_server_config.client_ca_file", ca)? {
                roots.add(c).map_err(|e| {
                    WebError::invalid(
                        file,
                        "tls_server_config.client_ca_file",
                        format!("{}: {e}", ca.origin),
                    )
                })?;
            }
            let mut b =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::clone(&provider));
            if t.client_auth == ClientAuth::VerifyClientCertIfGiven {
                b = b.allow_unauthenticated();
            }
            let v = b.build().map_err(|e| {
                WebError::invalid(
                    file,
                    "tls_server_config.client_ca_file",
                    format!("{}: {e}", ca.origin),
                )
            })?;
            Some(v)
        }
    };
    // client_allowed_sans (read() allows it only where a certificate is required).
    let verifier = match verifier {
        Some(v) if !t.client_allowed_sans.is_empty() => Some(Arc::new(AllowedSans {
            inner: v,
            allowed: t.client_allowed_sans.clone(),
        })
            as Arc<dyn ClientCertVerifier>),
        v => v,
    };
    let builder = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&versions)
        .map_err(|e| WebError::invalid(file, "tls_server_config", e.to_string()))?;
    let builder = match verifier {
        Some(v) => builder.with_client_cert_verifier(v),
        None => builder.with_no_client_auth(),
    };
    let mut cfg = builder.with_single_cert(chain, key).map_err(|e| {
        WebError::invalid(
            file,
            "tls_server_config.key_file",
            format!("{} does not go with the certificate: {e}", t.key.origin),
        )
    })?;
    cfg.ignore_client_order = t.prefer_server_cipher_suites;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(cfg)
}

/// What `cfg`, built from `t`, protects with: the client CA's certificates (when it
/// decides), the allowed names, and the versions, suites and groups offered.
pub fn policy(t: &TlsSettings, cfg: &rustls::ServerConfig) -> super::weaken::TlsPolicy {
    let p = cfg.crypto_provider();
    super::weaken::TlsPolicy {
        client_auth: t.client_auth,
        client_cas: t
            .client_ca
            .as_ref()
            .filter(|_| t.client_auth.verifies())
            .map(|ca| {
                CertificateDer::pem_slice_iter(ca.text.as_bytes())
                    .filter_map(Result::ok)
                    .map(|c| c.as_ref().to_vec())
                    .collect()
            })
            .unwrap_or_default(),
        allowed_sans: t.client_allowed_sans.iter().cloned().collect(),
        min_version: t.min_version.max(TlsVersion::Tls12),
        cipher_suites: p
            .cipher_suites
            .iter()
            .map(|s| format!("{:?}", s.suite()))
            .collect(),
        curves: p
            .kx_groups
            .iter()
            .map(|g| format!("{:?}", g.name()))
            .collect(),
    }
}

/// `RequestClientCert` and `RequireAnyClientCert`: a certificate is asked for (and for the
/// second, required) but not checked against a CA; the handshake's signature still is.
#[derive(Debug)]
struct AnyClientCert {
    mandatory: bool,
    algs: WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for AnyClientCert {
    fn client_auth_mandatory(&self) -> bool {
        self.mandatory
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algs.supported_schemes()
    }
}

/// Every subject alternative name of a certificate as exporter-toolkit compares them: DNS
/// names, e-mail addresses, IP addresses (their text form) and URIs, exactly.
fn san_values(der: &CertificateDer<'_>) -> Result<Vec<String>, rustls::Error> {
    use x509_parser::extensions::GeneralName;
    let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref())
        .map_err(|e| rustls::Error::General(format!("client certificate: {e}")))?;
    let san = cert
        .subject_alternative_name()
        .map_err(|e| rustls::Error::General(format!("client certificate: {e}")))?;
    let mut out = Vec::new();
    for name in san.iter().flat_map(|s| s.value.general_names.iter()) {
        match name {
            GeneralName::DNSName(n) | GeneralName::RFC822Name(n) | GeneralName::URI(n) => {
                out.push(n.to_string())
            }
            GeneralName::IPAddress(b) => {
                if let Ok(v4) = <[u8; 4]>::try_from(*b) {
                    out.push(std::net::Ipv4Addr::from(v4).to_string());
                } else if let Ok(v6) = <[u8; 16]>::try_from(*b) {
                    out.push(std::net::Ipv6Addr::from(v6).to_string());
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

/// `client_allowed_sans`: the client certificate must also name one of these, compared
/// exactly with its subject alternative names (as exporter-toolkit does; no wildcards).
#[derive(Debug)]
struct AllowedSans {
    inner: Arc<dyn ClientCertVerifier>,
    allowed: Vec<String>,
}

impl ClientCertVerifier for AllowedSans {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let ok = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        let names = san_values(end_entity)?;
        if names.iter().any(|n| self.allowed.contains(n)) {
            Ok(ok)
        } else {
            Err(rustls::Error::General(format!(
                "the client certificate's names ({}) are none of client_allowed_sans",
                names.join(", ")
            )))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sans_are_compared_as_exporter_toolkit_does() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(vec![
            "*.example.com".to_string(),
            "10.0.0.1".to_string(),
        ])
        .unwrap();
        p.subject_alt_names.push(rcgen::SanType::URI(
            "spiffe://cluster/ns/monitoring/sa/prometheus"
                .try_into()
                .unwrap(),
        ));
        let cert = p.self_signed(&key).unwrap();
        let names = san_values(cert.der()).unwrap();
        assert_eq!(
            names,
            [
                "*.example.com",
                "10.0.0.1",
                "spiffe://cluster/ns/monitoring/sa/prometheus"
            ]
        );
        // Exact: a wildcard in the certificate does not stand for a name in the list.
        assert!(!names.contains(&"prom.example.com".to_string()));
    }
}
