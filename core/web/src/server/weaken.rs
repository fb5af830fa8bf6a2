//! What a web configuration protects with, and what a change of it would weaken. The
//! listeners take a changed file on their own only when nothing is weakened; anything
//! else waits for an operator's SIGHUP (`WebListener::current`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::config::{ClientAuth, TlsVersion};

/// The settings of a web configuration that decide who gets in and how.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    /// `None`: plain HTTP.
    pub tls: Option<TlsPolicy>,
    /// `basic_auth_users`: user → bcrypt hash.
    pub users: BTreeMap<String, String>,
    /// `rate_limit` as (burst, interval).
    pub rate_limit: Option<(u32, Duration)>,
    /// `http_server_config.headers`, by lower-case name.
    pub headers: BTreeMap<String, String>,
}

/// `tls_server_config`, as served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsPolicy {
    pub client_auth: ClientAuth,
    /// Every certificate of the client CA (DER), when the CA decides (`verifies`).
    pub client_cas: BTreeSet<Vec<u8>>,
    /// `client_allowed_sans`; empty: any name.
    pub allowed_sans: BTreeSet<String>,
    /// The lowest version offered (1.2 at least).
    pub min_version: TlsVersion,
    /// Every cipher suite offered.
    pub cipher_suites: BTreeSet<String>,
    /// Every key exchange group offered.
    pub curves: BTreeSet<String>,
}

/// What `new` would protect less than `old` does, one entry per setting, each naming its
/// key; empty when nothing (a renewed certificate, a stricter setting, no change).
pub fn weakens(old: &Policy, new: &Policy) -> Vec<String> {
    let mut out = Vec::new();
    match (&old.tls, &new.tls) {
        (Some(_), None) => out.push("tls_server_config: TLS turned off (plain HTTP)".into()),
        (Some(o), Some(n)) => tls(o, n, &mut out),
        _ => {}
    }
    if !old.users.is_empty() && new.users.is_empty() {
        out.push("basic_auth_users: removed (no password asked)".into());
    } else if !old.users.is_empty() {
        for (user, hash) in &new.users {
            match old.users.get(user) {
                None => out.push(format!("basic_auth_users: adds user {user:?}")),
                Some(h) if h != hash => out.push(format!(
                    "basic_auth_users: changes the password of {user:?}"
                )),
                Some(_) => {}
            }
        }
    }
    match (old.rate_limit, new.rate_limit) {
        (Some(_), None) => out.push("rate_limit: removed".into()),
        (Some((ob, oi)), Some((nb, ni))) => {
            if nb > ob {
                out.push(format!("rate_limit.burst: raised from {ob} to {nb}"));
            }
            if ni < oi {
                out.push(format!(
                    "rate_limit.interval: shortened from {} to {} (more requests)",
                    humantime::format_duration(oi),
                    humantime::format_duration(ni)
                ));
            }
        }
        _ => {}
    }
    for (name, value) in &old.headers {
        match new.headers.get(name) {
            None => out.push(format!("http_server_config.headers: removes {name}")),
            Some(v) if v != value => out.push(format!(
                "http_server_config.headers: changes {name} from {value:?} to {v:?}"
            )),
            Some(_) => {}
        }
    }
    out
}

fn tls(old: &TlsPolicy, new: &TlsPolicy, out: &mut Vec<String>) {
    let auth = |why: &str| {
        format!(
            "tls_server_config.client_auth_type: {:?} to {:?} {why}",
            old.client_auth, new.client_auth
        )
    };
    if old.client_auth.requires() && !new.client_auth.requires() {
        out.push(auth("no longer requires a client certificate"));
    }
    if old.client_auth.verifies() && !new.client_auth.verifies() {
        out.push(auth("no longer checks client certificates against the CA"));
    }
    if old.client_auth.verifies() && new.client_auth.verifies() {
        let added = new.client_cas.difference(&old.client_cas).count();
        if added > 0 {
            out.push(format!(
                "tls_server_config.client_ca_file: {added} certificate(s) added to the client CA"
            ));
        }
    }
    if !old.allowed_sans.is_empty() && new.client_auth.requires() {
        if new.allowed_sans.is_empty() {
            out.push(
                "tls_server_config.client_allowed_sans: removed (any client certificate the CA signed gets in)"
                    .into(),
            );
        } else {
            let added: Vec<&str> = new
                .allowed_sans
                .difference(&old.allowed_sans)
                .map(String::as_str)
                .collect();
            if !added.is_empty() {
                out.push(format!(
                    "tls_server_config.client_allowed_sans: adds {}",
                    added.join(", ")
                ));
            }
        }
    }
    if new.min_version < old.min_version {
        out.push(format!(
            "tls_server_config.min_version: lowered from {:?} to {:?}",
            old.min_version, new.min_version
        ));
    }
    for (key, o, n) in [
        ("cipher_suites", &old.cipher_suites, &new.cipher_suites),
        ("curve_preferences", &old.curves, &new.curves),
    ] {
        let added: Vec<&str> = n.difference(o).map(String::as_str).collect();
        if !added.is_empty() {
            out.push(format!(
                "tls_server_config.{key}: adds {}",
                added.join(", ")
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    /// TLS requiring a certificate of one CA naming `agent`, TLS 1.3 only, two suites, one
    /// user, a rate limit and a header.
    fn strict() -> Policy {
        Policy {
            tls: Some(TlsPolicy {
                client_auth: ClientAuth::RequireAndVerifyClientCert,
                client_cas: [b"ca-1".to_vec()].into(),
                allowed_sans: set(&["agent"]),
                min_version: TlsVersion::Tls13,
                cipher_suites: set(&["TLS13_AES_128_GCM_SHA256", "TLS13_AES_256_GCM_SHA384"]),
                curves: set(&["X25519"]),
            }),
            users: [("prometheus".to_string(), "$2y$10$a".to_string())].into(),
            rate_limit: Some((2, Duration::from_secs(1))),
            headers: [(
                "strict-transport-security".to_string(),
                "max-age=31536000".to_string(),
            )]
            .into(),
        }
    }

    type Change = fn(&mut Policy);
    /// What a change is, the change, and what `weakens` must name (`None`: nothing).
    type Case = (&'static str, Change, Option<&'static str>);

    fn t(p: &mut Policy) -> &mut TlsPolicy {
        p.tls.as_mut().unwrap()
    }

    /// Changes of `tls_server_config` that weaken it (and no change at all).
    const TLS_CASES: &[Case] = &[
        ("the same", |_| {}, None),
        ("TLS off", |p| p.tls = None, Some("tls_server_config: TLS turned off")),
        (
            "client_allowed_sans dropped",
            |p| t(p).allowed_sans.clear(),
            Some("tls_server_config.client_allowed_sans: removed"),
        ),
        (
            "a SAN added",
            |p| {
                t(p).allowed_sans.insert("someone-else".into());
            },
            Some("tls_server_config.client_allowed_sans: adds someone-else"),
        ),
        (
            "a SAN removed",
            |p| {
                t(p).allowed_sans = set(&["agent-2"]);
            },
            Some("client_allowed_sans: adds agent-2"),
        ),
        (
            "certificates optional",
            |p| t(p).client_auth = ClientAuth::VerifyClientCertIfGiven,
            Some("RequireAndVerifyClientCert to VerifyClientCertIfGiven no longer requires a client certificate"),
        ),
        (
            "certificates unchecked",
            |p| {
                t(p).client_auth = ClientAuth::RequireAnyClientCert;
            },
            Some("no longer checks client certificates against the CA"),
        ),
        (
            "another CA added",
            |p| {
                t(p).client_cas.insert(b"ca-2".to_vec());
            },
            Some("tls_server_config.client_ca_file: 1 certificate(s) added"),
        ),
        (
            "TLS 1.2 allowed",
            |p| t(p).min_version = TlsVersion::Tls12,
            Some("tls_server_config.min_version: lowered from Tls13 to Tls12"),
        ),
        (
            "a cipher suite added",
            |p| {
                t(p).cipher_suites.insert("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256".into());
            },
            Some("tls_server_config.cipher_suites: adds TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"),
        ),
        (
            "a curve added",
            |p| {
                t(p).curves.insert("secp256r1".into());
            },
            Some("tls_server_config.curve_preferences: adds secp256r1"),
        ),
    ];

    /// Changes of users, rate limit and headers that weaken them.
    const AUTH_LIMIT_HEADER_CASES: &[Case] = &[
        (
            "a user added",
            |p| {
                p.users.insert("mallory".into(), "$2y$10$b".into());
            },
            Some("basic_auth_users: adds user \"mallory\""),
        ),
        (
            "a password changed",
            |p| {
                p.users.insert("prometheus".into(), "$2y$10$c".into());
            },
            Some("basic_auth_users: changes the password of \"prometheus\""),
        ),
        (
            "every user removed",
            |p| p.users.clear(),
            Some("basic_auth_users: removed"),
        ),
        (
            "rate limit off",
            |p| p.rate_limit = None,
            Some("rate_limit: removed"),
        ),
        (
            "a larger burst",
            |p| p.rate_limit = Some((5, Duration::from_secs(1))),
            Some("rate_limit.burst: raised from 2 to 5"),
        ),
        (
            "a shorter interval",
            |p| p.rate_limit = Some((2, Duration::from_millis(100))),
            Some("rate_limit.interval: shortened from 1s to 100ms"),
        ),
        (
            "a header removed",
            |p| p.headers.clear(),
            Some("http_server_config.headers: removes strict-transport-security"),
        ),
    ];

    /// Stricter, or the same protection: taken without a SIGHUP.
    const STRICTER_CASES: &[Case] = &[
        (
            "a cipher suite less",
            |p| {
                t(p).cipher_suites.remove("TLS13_AES_256_GCM_SHA384");
            },
            None,
        ),
        (
            "a CA certificate less",
            |p| {
                t(p).client_cas.clear();
            },
            None,
        ),
        (
            "a smaller burst, a longer interval",
            |p| p.rate_limit = Some((1, Duration::from_secs(10))),
            None,
        ),
        (
            "a header added",
            |p| {
                p.headers.insert("x-frame-options".into(), "deny".into());
            },
            None,
        ),
    ];

    #[test]
    fn what_weakens_and_what_does_not() {
        let cases = TLS_CASES
            .iter()
            .chain(AUTH_LIMIT_HEADER_CASES)
            .chain(STRICTER_CASES);
        for (what, change, want) in cases {
            let mut new = strict();
            change(&mut new);
            let got = weakens(&strict(), &new);
            match want {
                None => assert!(got.is_empty(), "{what}: {got:?}"),
                Some(w) => assert!(
                    got.len() == 1 && got[0].contains(w),
                    "{what}: wanted one entry with {w:?}, got {got:?}"
                ),
            }
        }
        // From plain HTTP anything is stronger; a user or a SAN less is stronger too.
        assert!(weakens(&Policy::default(), &strict()).is_empty());
        let mut more = strict();
        more.users.insert("other".into(), "$2y$10$d".into());
        t(&mut more).allowed_sans.insert("other".into());
        assert!(weakens(&more, &strict()).is_empty());
        // Several at once: each named.
        let mut open = strict();
        t(&mut open).allowed_sans.clear();
        t(&mut open).min_version = TlsVersion::Tls12;
        open.users.clear();
        assert_eq!(weakens(&strict(), &open).len(), 3);
    }
}
