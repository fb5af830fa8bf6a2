//! Running a tool the doctor asks of the host (`nft`, `iptables-save`, `ping`,
//! `systemctl`): within a bound, as a process group killed at the bound with whatever
//! it started.

pub(crate) fn run_tool(cmd: &str, args: &[&str]) -> Option<Result<String, String>> {
    run_tool_within(cmd, args, TOOL_TIMEOUT)
}

/// How long a tool the doctor asks (`nft`, `iptables-save`, `ping`, `systemctl`) may run.
pub(crate) const TOOL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// `cmd ARGS` within `timeout`, as a process group killed at the bound with whatever it
/// started ([`rocewatch_process`]); none when the tool is not installed.
pub(crate) fn run_tool_within(
    cmd: &str,
    args: &[&str],
    timeout: std::time::Duration,
) -> Option<Result<String, String>> {
    use rocewatch_process::{run_bounded, RunError};
    let mut c = std::process::Command::new(cmd);
    c.args(args);
    match run_bounded(c, timeout) {
        Err(RunError::Spawn(e)) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(RunError::Spawn(e)) => Some(Err(format!("{cmd}: {e}"))),
        Err(RunError::Timeout { stderr }) => Some(Err(format!(
            "{cmd} {}: still running after {timeout:?}; killed ({stderr})",
            args.join(" ")
        ))),
        Ok(o) if o.status.success() => Some(Ok(o.stdout)),
        Ok(o) => Some(Err(format!(
            "{cmd} {}: {}",
            args.join(" "),
            o.stderr.trim()
        ))),
    }
}

/// Process `pid` is gone, or dead and left to its reaper, within 2 s (a killed process
/// may still run for a moment).
#[cfg(test)]
pub(crate) fn gone(pid: &str) -> bool {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"));
        let dead = stat.as_deref().map_or(true, |l| {
            l.rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with(['Z', 'X']))
        });
        if dead {
            return true;
        }
        if std::time::Instant::now() >= until {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tool that is a wrapper whose child hangs (an `nft` waiting on a lock, a
    /// `systemctl` on a bus that does not answer) is killed at the bound with its child,
    /// and the check says so.
    #[test]
    fn a_hanging_tool_is_killed_with_its_children_at_the_bound() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("child.pid");
        let tool = dir.path().join("nft");
        std::fs::write(
            &tool,
            format!(
                "#!/bin/sh\nsh -c 'echo $$ > {}; exec sleep 20'\necho never\n",
                pidfile.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        let started = std::time::Instant::now();
        let r = run_tool_within(
            tool.to_str().unwrap(),
            &["-j", "list", "ruleset"],
            std::time::Duration::from_secs(1),
        );
        let took = started.elapsed();
        let e = r.expect("the tool is there").unwrap_err();
        assert!(took < std::time::Duration::from_secs(3), "{took:?}: {e}");
        assert!(e.contains("-j list ruleset") && e.contains("killed"), "{e}");
        let pid = std::fs::read_to_string(&pidfile).unwrap();
        assert!(gone(pid.trim()), "the tool's child {} lives on", pid.trim());
        // One that is not installed is no finding.
        assert!(run_tool_within("/nonexistent/nft", &[], TOOL_TIMEOUT).is_none());
    }
}
