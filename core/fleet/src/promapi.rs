//! The fleet's map from the metrics backend: the NIC info series every host exports
//! (`rdma_fleet_nic_info{host, rail, address, tor, tor_port}`), as the Prometheus HTTP
//! API's instant query answers them (`GET /api/v1/query?query=...`), which VictoriaMetrics
//! serves too:
//!
//! ```text
//! {"status":"success","data":{"resultType":"vector","result":[
//!   {"metric":{"__name__":"rdma_fleet_nic_info","host":"a","rail":"0",
//!              "address":"10.0.0.1","tor":"tor-1","tor_port":"Ethernet1", ...},
//!    "value":[1733450000.123,"1"]}]}}
//! ```
//!
//! Other labels (`instance`, `job`) are ignored. A series that cannot be a NIC is left out
//! and named. Two series of one NIC (a host re-cabled within the backend's lookback, a
//! host scraped twice) keep the one with the highest value: ask for
//! `timestamp(rdma_fleet_nic_info)` (the default of `[fleet] query`), whose value is the
//! sample's time, and the newest wins (an instant query's own timestamp, `value[0]`, is
//! the evaluation time, the same for every series); ties keep the first in the answer.
//! An error answer is an error with its message.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::topology::{name, Nic, MAX_RAIL};

/// What the answer as a whole could not give.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the Prometheus API answer: {0}")]
pub struct ApiError(pub String);

/// The NICs of an instant-query answer, and the series left out (why, with their labels).
pub fn parse_nics(text: &str) -> Result<(Vec<Nic>, Vec<String>), ApiError> {
    let v: Value = serde_json::from_str(text).map_err(|e| ApiError(format!("not JSON: {e}")))?;
    match v.get("status").and_then(Value::as_str) {
        Some("success") => {}
        Some(s) => {
            let what = v
                .get("error")
                .and_then(Value::as_str)
                .unwrap_or("no message");
            return Err(ApiError(format!("status {s}: {what}")));
        }
        None => return Err(ApiError("no status".into())),
    }
    let data = v.get("data").ok_or_else(|| ApiError("no data".into()))?;
    match data.get("resultType").and_then(Value::as_str) {
        Some("vector") => {}
        other => {
            return Err(ApiError(format!(
                "resultType {other:?}, not \"vector\" (give an instant query of the info series)"
            )))
        }
    }
    let result = data
        .get("result")
        .and_then(Value::as_array)
        .ok_or_else(|| ApiError("data.result is not a list".into()))?;
    let mut best: BTreeMap<(String, u8), (f64, Nic)> = BTreeMap::new();
    let mut left = Vec::new();
    for (i, series) in result.iter().enumerate() {
        match nic_of(series) {
            Ok((at, nic)) => {
                let key = (nic.host.clone(), nic.rail);
                if best.get(&key).is_none_or(|(t, _)| at > *t) {
                    best.insert(key, (at, nic));
                }
            }
            Err(why) => left.push(format!("series {i}: {why}")),
        }
    }
    Ok((best.into_values().map(|(_, n)| n).collect(), left))
}

fn nic_of(series: &Value) -> Result<(f64, Nic), String> {
    let labels = series
        .get("metric")
        .and_then(Value::as_object)
        .ok_or("no metric labels")?;
    let label = |k: &str| -> Result<&str, String> {
        labels
            .get(k)
            .and_then(Value::as_str)
            .ok_or_else(|| format!("no {k} label in {}", Value::Object(labels.clone())))
    };
    let host = name(label("host")?, "host", false)?;
    let rail_text = label("rail")?;
    let rail = rail_text
        .parse::<u8>()
        .ok()
        .filter(|r| *r <= MAX_RAIL)
        .ok_or_else(|| format!("{host}: rail {rail_text:?} is not 0..={MAX_RAIL}"))?;
    let addr_text = label("address")?;
    let addr = addr_text
        .parse()
        .map_err(|_| format!("{host} rail {rail}: address {addr_text:?} is not an IP address"))?;
    let tor = name(label("tor")?, "tor", true).map_err(|e| format!("{host} rail {rail}: {e}"))?;
    let tor_port = match labels.get("tor_port").and_then(Value::as_str) {
        None | Some("") => None,
        Some(p) => Some(name(p, "tor_port", true).map_err(|e| format!("{host} rail {rail}: {e}"))?),
    };
    let at = series
        .get("value")
        .and_then(Value::as_array)
        .and_then(|v| v.get(1))
        .and_then(Value::as_str)
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|v| v.is_finite())
        .unwrap_or(0.0);
    Ok((
        at,
        Nic {
            host,
            rail,
            addr,
            tor,
            tor_port,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const ANSWER: &str = r#"{"status":"success","data":{"resultType":"vector","result":[
      {"metric":{"__name__":"rdma_fleet_nic_info","host":"b","rail":"0","address":"192.168.100.2","tor":"guest-a","tor_port":"eth0","instance":"b:9464"},"value":[1733450000.5,"1"]},
      {"metric":{"__name__":"rdma_fleet_nic_info","host":"a","rail":"0","address":"192.168.100.1","tor":"guest-b"},"value":[1733450000.5,"1733449990.25"]},
      {"metric":{"__name__":"rdma_fleet_nic_info","host":"a","rail":"0","address":"192.168.100.9","tor":"old"},"value":[1733450000.5,"1733440000"]},
      {"metric":{"host":"c","rail":"64","address":"10.0.0.3","tor":"t"},"value":[1,"1"]},
      {"metric":{"host":"d","rail":"1","address":"10.0.0.x","tor":"t"},"value":[1,"1"]},
      {"metric":{"rail":"1"},"value":[1,"1"]}
    ]}}"#;

    #[test]
    fn nics_from_an_instant_query_answer() {
        let (nics, left) = parse_nics(ANSWER).unwrap();
        let got: Vec<_> = nics
            .iter()
            .map(|n| {
                (
                    n.host.as_str(),
                    n.rail,
                    n.addr.to_string(),
                    n.tor.as_str(),
                    n.tor_port.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("a", 0, "192.168.100.1".to_string(), "guest-b", None),
                ("b", 0, "192.168.100.2".to_string(), "guest-a", Some("eth0")),
            ]
        );
        assert_eq!(left.len(), 3, "{left:?}");
        assert!(left[0].contains("c: rail \"64\" is not 0..=63"), "{left:?}");
        assert!(
            left[1].contains("address \"10.0.0.x\" is not an IP address"),
            "{left:?}"
        );
        assert!(left[2].starts_with("series 5: no host label"), "{left:?}");
    }

    #[test]
    fn error_answers_name_what_the_server_said() {
        let e = parse_nics(
            r#"{"status":"error","errorType":"bad_data","error":"parse error at char 5"}"#,
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "the Prometheus API answer: status error: parse error at char 5"
        );
        let e = parse_nics(r#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#)
            .unwrap_err();
        assert!(e.0.contains("not \"vector\""), "{e}");
        assert!(parse_nics("<html>").unwrap_err().0.starts_with("not JSON"));
        assert_eq!(
            parse_nics(r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#)
                .unwrap()
                .0,
            []
        );
    }

    proptest! {
        #[test]
        fn never_panics(host in "[ -~]{0,8}", rail in "[ -~]{0,4}", addr in "[0-9.:a-f]{0,16}", t in proptest::num::f64::ANY, junk in "[ -~]{0,40}") {
            let series = serde_json::json!({"metric": {"host": host, "rail": rail, "address": addr, "tor": "t"}, "value": [t, "1"]});
            let text = serde_json::json!({"status": "success", "data": {"resultType": "vector", "result": [series, junk]}}).to_string();
            let (nics, left) = parse_nics(&text).unwrap();
            prop_assert_eq!(nics.len() + left.len(), 2);
            let _ = parse_nics(&junk);
        }
    }
}
