//! Who is exporting: the resource attributes receivers key a host's series on.
//!
//! Prometheus's OTLP receiver, Grafana Cloud and Mimir make `job` from `service.name` and
//! `instance` from `service.instance.id`, and keep the rest of the resource in
//! `target_info`: without `service.instance.id` every host arrives as `job=rocewatch` with
//! one empty `instance`, and hosts' series collide. So every export carries:
//!
//! - `service.name` (`rocewatch`), `service.version` (the crate's), `host.name`;
//! - `host.id`: the machine id (`/etc/machine-id`, or `[exporters.otlp] machine_id_file`),
//!   as the semantic conventions say for a host that is not a cloud instance;
//! - `service.instance.id`: a UUID v5 of the machine id in the namespace the semantic
//!   conventions give for an instance id derived from "an inherent unique ID"
//!   (`4d63009a-8d0f-11ee-aad7-4c796ed8e320`), so it survives restarts and upgrades (a
//!   random one per start would make a new Prometheus `instance` each time) and does not
//!   publish the machine id itself as the instance label. Without a usable machine id it
//!   is the UUID v5 of `host.name`, said once at start with the file at fault.
//!
//! The keys come from `opentelemetry-semantic-conventions`, and [`SCHEMA_URL`] (the
//! version of the conventions they are from) goes with the resource and the scope. A
//! key the user gives (`OTEL_RESOURCE_ATTRIBUTES`, `[exporters.otlp] resource`) wins over
//! these (`super::resource`). In Kubernetes, `k8s.node.name`/`k8s.pod.name` come from
//! the DaemonSet, through `OTEL_RESOURCE_ATTRIBUTES` built from the downward API.

use std::path::Path;

use opentelemetry_semantic_conventions::resource as keys;
use sha1::{Digest, Sha1};

use super::config::OtlpConfig;

/// The schema URL of the semantic conventions the resource's keys are from: the
/// `schema_url` of the resource and of the scope.
pub(crate) use opentelemetry_semantic_conventions::SCHEMA_URL;

/// The instrumentation scope's name and version: what produced the metrics.
pub(crate) const SCOPE_NAME: &str = "rocewatch";
pub(crate) const SCOPE_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The namespace of a `service.instance.id` derived from a stable id (the semantic
/// conventions' note on `service.instance.id`).
const INSTANCE_NAMESPACE: [u8; 16] = 0x4d63_009a_8d0f_11ee_aad7_4c79_6ed8_e320_u128.to_be_bytes();

/// The UUID version 5 of `name` in `namespace` (RFC 9562 §5.5: SHA-1 of the namespace's
/// 16 bytes then the name, truncated to 16 bytes, version and variant bits set), in its
/// hyphenated lowercase form.
pub(crate) fn uuid_v5(namespace: [u8; 16], name: &[u8]) -> String {
    let digest = Sha1::new()
        .chain_update(namespace)
        .chain_update(name)
        .finalize();
    let mut b = [0u8; 16];
    b.copy_from_slice(&digest[..16]);
    b[6] = (b[6] & 0x0f) | 0x50;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// The machine id in `path`: 32 lowercase hexadecimal characters and a newline, as
/// machine-id(5) defines it. `uninitialized` (a first boot not yet committed), an empty
/// file (a container image's placeholder) or anything else is refused with why.
pub(crate) fn read_machine_id(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let id = text.trim();
    if id.len() == 32 && id.bytes().all(|c| c.is_ascii_hexdigit()) {
        Ok(id.to_ascii_lowercase())
    } else {
        Err(format!(
            "{} holds {id:?}, not a machine id (32 hexadecimal characters)",
            path.display()
        ))
    }
}

/// rocewatch's own resource attributes, in the order [`super::resource`] starts from.
pub(crate) fn own_attributes(cfg: &OtlpConfig, host: &str) -> Vec<(String, String)> {
    let mut attrs = vec![
        (keys::SERVICE_NAME.to_string(), "rocewatch".to_string()),
        (keys::SERVICE_VERSION.into(), SCOPE_VERSION.into()),
        (keys::HOST_NAME.into(), host.to_string()),
    ];
    let instance = match read_machine_id(&cfg.machine_id_file) {
        Ok(id) => {
            let instance = uuid_v5(INSTANCE_NAMESPACE, id.as_bytes());
            attrs.push((keys::HOST_ID.into(), id));
            instance
        }
        Err(e) => {
            tracing::warn!(
                "OTLP resource: no host.id, and service.instance.id made from the host name \
                 {host:?}: {e} (exporters.otlp.machine_id_file)"
            );
            uuid_v5(INSTANCE_NAMESPACE, host.as_bytes())
        }
    };
    attrs.push((keys::SERVICE_INSTANCE_ID.into(), instance));
    attrs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::otlp::config::OtlpProtocol;

    /// RFC 9562's own example (Appendix A.4: `www.example.com` in the DNS namespace), and
    /// the semantic conventions' namespace with a machine id, checked against Python's
    /// `uuid.uuid5`.
    #[test]
    fn uuid_v5_matches_the_rfc_and_python() {
        let dns = 0x6ba7_b810_9dad_11d1_80b4_00c0_4fd4_30c8_u128.to_be_bytes();
        assert_eq!(
            uuid_v5(dns, b"www.example.com"),
            "2ed6657d-e927-568b-95e1-2665a8aea6a2"
        );
        // python3 -c "import uuid; print(uuid.uuid5(uuid.UUID(
        //   '4d63009a-8d0f-11ee-aad7-4c796ed8e320'), '0123456789abcdef0123456789abcdef'))"
        assert_eq!(
            uuid_v5(INSTANCE_NAMESPACE, b"0123456789abcdef0123456789abcdef"),
            "2f1423a8-dc20-5c0e-839d-70474f2dc393"
        );
        assert_eq!(
            uuid_v5(INSTANCE_NAMESPACE, b"gpu-1"),
            "5e0028f5-bf49-5faf-89cb-445427c4aca3"
        );
    }

    #[test]
    fn a_machine_id_is_32_hex_characters() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("machine-id");
        std::fs::write(&p, "0123456789ABCDEF0123456789abcdef\n").unwrap();
        assert_eq!(
            read_machine_id(&p).unwrap(),
            "0123456789abcdef0123456789abcdef"
        );
        for bad in ["", "uninitialized\n", "0123456789abcdef\n"] {
            std::fs::write(&p, bad).unwrap();
            let e = read_machine_id(&p).unwrap_err();
            assert!(
                e.contains("machine-id") && e.contains("not a machine id"),
                "{e}"
            );
        }
        let e = read_machine_id(&dir.path().join("absent")).unwrap_err();
        assert!(e.contains("cannot read") && e.contains("absent"), "{e}");
    }

    fn cfg_with(machine_id_file: &Path) -> OtlpConfig {
        let mut c = OtlpConfig::new("http://127.0.0.1:1/v1/metrics", OtlpProtocol::HttpProtobuf);
        c.machine_id_file = machine_id_file.to_path_buf();
        c
    }

    fn get<'a>(attrs: &'a [(String, String)], k: &str) -> Option<&'a str> {
        // A later key wins, as the encoder merges them.
        attrs
            .iter()
            .rev()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    }

    /// Two hosts, two machine ids: two `service.instance.id`s, each stable across starts
    /// (the same id from the same file), and `host.id` the machine id.
    #[test]
    fn the_resource_names_the_instance_and_the_host() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&a, "0123456789abcdef0123456789abcdef\n").unwrap();
        std::fs::write(&b, "fedcba9876543210fedcba9876543210\n").unwrap();
        let ra = crate::otlp::resource(&cfg_with(&a), "gpu-1");
        let rb = crate::otlp::resource(&cfg_with(&b), "gpu-2");
        assert_eq!(
            get(&ra, "service.instance.id"),
            Some("2f1423a8-dc20-5c0e-839d-70474f2dc393")
        );
        assert_eq!(
            get(&ra, "host.id"),
            Some("0123456789abcdef0123456789abcdef")
        );
        assert_eq!(get(&ra, "host.name"), Some("gpu-1"));
        assert_eq!(get(&ra, "service.version"), Some(env!("CARGO_PKG_VERSION")));
        assert_ne!(
            get(&ra, "service.instance.id"),
            get(&rb, "service.instance.id")
        );
        assert_eq!(
            crate::otlp::resource(&cfg_with(&a), "gpu-1"),
            ra,
            "stable across starts"
        );
    }

    /// No machine id: no `host.id`, and the instance id made from the host name (still
    /// one per host, still stable); a user's `service.instance.id` wins over ours.
    #[test]
    fn without_a_machine_id_the_host_name_makes_the_instance() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = cfg_with(&dir.path().join("absent"));
        let r = crate::otlp::resource(&c, "gpu-1");
        assert_eq!(get(&r, "host.id"), None);
        assert_eq!(
            get(&r, "service.instance.id"),
            Some("5e0028f5-bf49-5faf-89cb-445427c4aca3")
        );
        c.resource
            .insert("service.instance.id".into(), "mine".into());
        let r = crate::otlp::resource(&c, "gpu-1");
        assert_eq!(get(&r, "service.instance.id"), Some("mine"));
    }
}
