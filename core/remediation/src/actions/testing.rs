//! What the actions' tests share: a breach, and a wrapper script whose child hangs.

use std::collections::BTreeMap;
use std::time::Duration;

use super::breach::Breach;
use crate::config::Event;

pub(crate) fn breach() -> Breach {
    Breach {
        rule: "storm".into(),
        metric: rocewatch_metrics::names::PFC_PAUSE_RATIO.into(),
        event: Event::Firing,
        action: "hang".into(),
        severity: "warning".into(),
        labels: BTreeMap::new(),
        value: Some(0.5),
        recent: Vec::new(),
        dry_run: false,
        workloads: None,
        workloads_truncated: 0,
    }
}

/// A site's wrapper at `dir/NAME` that does not `exec` what it wraps: its child writes
/// its pid to `dir/child.pid` and hangs.
pub(crate) fn hanging_wrapper(dir: &std::path::Path, name: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\nsh -c 'echo $$ > {}; exec sleep 30'\necho never\n",
            dir.join("child.pid").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// The wrapper's child, once it said its pid: gone (or dead, left to its reaper)
/// within 3 s.
pub(crate) async fn child_gone(dir: &std::path::Path) -> Result<(), String> {
    let file = dir.join("child.pid");
    for _ in 0..300 {
        let Some(pid) = std::fs::read_to_string(&file)
            .ok()
            .filter(|t| t.ends_with('\n'))
        else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let pid = pid.trim().to_string();
        for _ in 0..300 {
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|l| l.rsplit_once(')').map(|(_, r)| r.trim().to_string()));
            match state {
                None => return Ok(()),
                Some(s) if s.starts_with('Z') || s.starts_with('X') => return Ok(()),
                Some(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
        return Err(format!("the wrapper's child {pid} lives on"));
    }
    Err(format!("{} never written", file.display()))
}
