//! Who to probe: the static list, a DNS name (every 30 s) and a peers file (when it
//! changes), deduplicated.

use std::net::ToSocketAddrs;
use std::time::{Duration, SystemTime};

use super::config::ProbesConfig;

/// How long a DNS answer is used before the name is resolved again.
pub(super) const DNS_REFRESH: Duration = Duration::from_secs(30);

/// The peers of the static list, the DNS name and the file: the file is read again only
/// when it changes (modification time or size), the name resolved again every
/// [`DNS_REFRESH`]. Both block, so the prober calls this on the blocking pool.
/// What identifies a version of the peers file: modification time and size.
pub(super) type FileVersion = (Option<SystemTime>, u64);

pub struct PeerSource {
    cfg: ProbesConfig,
    file: Option<(FileVersion, Vec<String>)>,
    dns: Option<(std::time::Instant, Vec<String>)>,
}

impl PeerSource {
    pub fn new(cfg: ProbesConfig) -> Self {
        PeerSource {
            cfg,
            file: None,
            dns: None,
        }
    }

    /// The peers, deduplicated, in that order, and what could not be read.
    pub fn peers(&mut self) -> (Vec<String>, Vec<String>) {
        let mut problems = Vec::new();
        if let Some(name) = &self.cfg.peers_dns {
            if self
                .dns
                .as_ref()
                .is_none_or(|(at, _)| at.elapsed() >= DNS_REFRESH)
            {
                match (name.as_str(), 0).to_socket_addrs() {
                    Ok(addrs) => {
                        let ips = addrs.map(|a| a.ip().to_string()).collect();
                        self.dns = Some((std::time::Instant::now(), ips));
                    }
                    // The last answer stays in use; the failure is reported.
                    Err(e) => problems.push(format!("peers_dns {name}: {e}")),
                }
            }
        }
        if let Some(f) = &self.cfg.peers_file {
            match std::fs::metadata(f) {
                Ok(m) => {
                    let key = (m.modified().ok(), m.len());
                    if self.file.as_ref().is_none_or(|(k, _)| *k != key) {
                        match std::fs::read_to_string(f) {
                            Ok(text) => {
                                let list = parse_peers_file(&text);
                                self.file = Some((key, list));
                            }
                            Err(e) => problems.push(format!("peers_file {}: {e}", f.display())),
                        }
                    }
                }
                Err(e) => {
                    self.file = None;
                    problems.push(format!("peers_file {}: {e}", f.display()));
                }
            }
        }
        let mut out: Vec<String> = Vec::new();
        let from_dns = self.dns.iter().flat_map(|(_, v)| v);
        let from_file = self.file.iter().flat_map(|(_, v)| v);
        for p in self.cfg.peers.iter().chain(from_dns).chain(from_file) {
            let p = p.trim();
            if !p.is_empty() && !out.iter().any(|o| o == p) {
                out.push(p.to_string());
            }
        }
        (out, problems)
    }
}

/// A peers file: one peer (address or name) per line; `#` starts a comment; blank lines
/// and surrounding space do not count.
pub fn parse_peers_file(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or_default().trim())
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_from_list_dns_and_file_deduplicated() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("peers");
        std::fs::write(
            &f,
            "# the mesh\n10.0.0.3\n10.0.0.1  # dup of the list\n\n10.0.0.4\n",
        )
        .unwrap();
        let cfg: ProbesConfig = toml::from_str(&format!(
            "peers = [\"10.0.0.1\", \"10.0.0.2\"]\npeers_dns = \"localhost\"\npeers_file = {f:?}"
        ))
        .unwrap();
        let mut src = PeerSource::new(cfg);
        let (p, problems) = src.peers();
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(&p[..2], ["10.0.0.1", "10.0.0.2"]);
        assert!(
            p.contains(&"127.0.0.1".to_string()) || p.contains(&"::1".to_string()),
            "{p:?}"
        );
        assert_eq!(&p[p.len() - 2..], ["10.0.0.3", "10.0.0.4"]);
        // The file is read again when it changes (here its size does).
        std::fs::write(&f, "10.0.0.9\n").unwrap();
        assert_eq!(src.peers().0.last().unwrap(), "10.0.0.9");
        std::fs::remove_file(&f).unwrap();
        let (p, problems) = src.peers();
        assert!(problems[0].contains("peers_file"), "{problems:?}");
        assert!(
            !p.contains(&"10.0.0.9".to_string()),
            "a removed file lists no peers"
        );
    }
}
