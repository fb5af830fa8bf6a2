//! The `webhook` action: an HTTP POST of the breach as JSON, retried with a doubling delay
//! on a server error or no answer, never on a client error (4xx).

use std::collections::BTreeMap;
use std::time::Duration;

use super::breach::Breach;

/// What `webhook` would do.
pub(super) fn describe(url: &str) -> String {
    format!("POST the breach to {url}")
}

/// POST `b` to `url` with `headers`, up to `retries` times again.
pub(super) async fn run(
    url: &str,
    headers: &BTreeMap<String, String>,
    retries: u32,
    b: &Breach,
    http: &reqwest::Client,
) -> Result<String, String> {
    let body = serde_json::to_vec(b).expect("plain data");
    let mut delay = Duration::from_millis(200);
    let mut last = String::new();
    for attempt in 0..=retries {
        let mut req = http
            .post(url)
            .header("content-type", "application/json")
            .body(body.clone());
        for (k, v) in headers {
            req = req.header(k, v);
        }
        match req.send().await {
            Ok(r) if r.status().is_success() => {
                return Ok(format!("{url}: {} (attempt {})", r.status(), attempt + 1))
            }
            Ok(r) if r.status().is_client_error() => {
                return Err(format!("{url}: {} (not retried)", r.status()))
            }
            Ok(r) => last = format!("{url}: {}", r.status()),
            Err(e) => last = format!("{url}: {e}"),
        }
        if attempt < retries {
            tokio::time::sleep(delay).await;
            delay *= 2;
        }
    }
    Err(format!("{last} (after {} attempts)", retries + 1))
}
