//! Alertmanager's webhook payload (version 4), parsed strictly with the reason on error.

use std::collections::BTreeMap;

use serde::Deserialize;

/// One alert of the payload.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Alert {
    pub status: String,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    #[serde(default)]
    pub fingerprint: Option<String>,
}

/// The webhook payload (version 4).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Payload {
    pub version: String,
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub truncated_alerts: u64,
    pub alerts: Vec<Alert>,
}

/// Parse and check a payload; the error is the 400's reason.
pub fn parse(body: &[u8]) -> Result<Payload, String> {
    let p: Payload = serde_json::from_slice(body)
        .map_err(|e| format!("not an Alertmanager webhook payload: {e}"))?;
    if p.version != "4" {
        return Err(format!(
            "payload version {:?}; this receiver speaks version \"4\"",
            p.version
        ));
    }
    for (i, a) in p.alerts.iter().enumerate() {
        if a.status != "firing" && a.status != "resolved" {
            return Err(format!(
                "alerts[{i}].status: {:?} is neither \"firing\" nor \"resolved\"",
                a.status
            ));
        }
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads() {
        assert!(parse(b"{")
            .unwrap_err()
            .contains("not an Alertmanager webhook payload"));
        assert!(parse(br#"{"version":"3","alerts":[]}"#)
            .unwrap_err()
            .contains("version \"3\""));
        assert!(parse(br#"{"version":"4","alerts":[{"status":"odd"}]}"#)
            .unwrap_err()
            .contains("alerts[0].status"));
        let p = parse(br#"{"version":"4","status":"firing","truncatedAlerts":3,"alerts":[{"status":"firing","labels":{"alertname":"X"}}]}"#).unwrap();
        assert_eq!(p.truncated_alerts, 3);
    }
}
