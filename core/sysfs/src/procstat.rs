//! The host's CPU times in `<procfs>/stat` (fs/proc/stat.c): the aggregate `cpu` line's
//! times in user hertz (steal is the 8th), the `cpuN` lines, `procs_running`. One reader
//! for everything that asks how much CPU the hypervisor took: the fleet prober's
//! overload test (`rocewatch_probes::fleet::noise`) and doctor.

/// What `/proc/stat` said: the aggregate CPU times (user hertz), the CPUs, the runnable
/// tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuSample {
    pub total: u64,
    pub steal: u64,
    pub cpus: u32,
    pub running: u32,
}

/// A malformed `/proc/stat`: which line and why.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{file}: {why}")]
pub struct StatError {
    pub file: String,
    pub why: String,
}

/// Parse `/proc/stat` (`cpu  user nice system idle iowait irq softirq steal ...`,
/// `cpuN ...`, `procs_running N`); `file` names it in errors.
pub fn parse_stat(file: &str, text: &str) -> Result<CpuSample, StatError> {
    let err = |why: String| StatError {
        file: file.to_string(),
        why,
    };
    let mut total = None;
    let mut cpus = 0u32;
    let mut running = None;
    for (n, line) in text.lines().enumerate() {
        let mut f = line.split_ascii_whitespace();
        match f.next() {
            Some("cpu") => {
                let v: Vec<u64> = f
                    .map(str::parse)
                    .collect::<Result<_, _>>()
                    .map_err(|e| err(format!("line {}: cpu times: {e}", n + 1)))?;
                if v.len() < 8 {
                    return Err(err(format!(
                        "line {}: {} cpu times, steal is the 8th",
                        n + 1,
                        v.len()
                    )));
                }
                // guest and guest_nice (9th, 10th) are already in user and nice.
                let sum = v[..8].iter().fold(0u64, |a, x| a.saturating_add(*x));
                total = Some((sum, v[7]));
            }
            Some(c) if c.starts_with("cpu") && c[3..].bytes().all(|b| b.is_ascii_digit()) => {
                cpus += 1;
            }
            Some("procs_running") => {
                let v = f.next().unwrap_or_default();
                running = Some(
                    v.parse::<u32>()
                        .map_err(|e| err(format!("line {}: procs_running {v:?}: {e}", n + 1)))?,
                );
            }
            _ => {}
        }
    }
    let (total, steal) = total.ok_or_else(|| err("no aggregate cpu line".into()))?;
    Ok(CpuSample {
        total,
        steal,
        cpus: cpus.max(1),
        running: running.ok_or_else(|| err("no procs_running line".into()))?,
    })
}

/// Read and parse `<procfs>/stat`; errors name the file.
pub fn read_stat(procfs: &std::path::Path) -> Result<CpuSample, StatError> {
    let file = procfs.join("stat");
    let name = file.display().to_string();
    let text = std::fs::read_to_string(&file).map_err(|e| StatError {
        file: name.clone(),
        why: e.to_string(),
    })?;
    parse_stat(&name, &text)
}

/// The share of CPU time stolen between two readings; `None` when no time passed (or
/// the counters went back: another boot).
pub fn steal_share(before: &CpuSample, after: &CpuSample) -> Option<f64> {
    (after.total > before.total && after.steal >= before.steal)
        .then(|| (after.steal - before.steal) as f64 / (after.total - before.total) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const STAT: &str = "cpu  100 0 50 800 10 0 5 35 0 0\ncpu0 50 0 25 400 5 0 2 18 0 0\ncpu1 50 0 25 400 5 0 3 17 0 0\nintr 1 2 3\nctxt 99\nprocs_running 3\nprocs_blocked 0\n";

    #[test]
    fn cpu_times_from_proc_stat() {
        let s = parse_stat("stat", STAT).unwrap();
        assert_eq!(
            s,
            CpuSample {
                total: 1000,
                steal: 35,
                cpus: 2,
                running: 3
            }
        );
    }

    #[test]
    fn errors_name_the_file_and_line() {
        let e = parse_stat("/proc/stat", "cpu 1 2 x\n").unwrap_err();
        assert_eq!(e.file, "/proc/stat");
        assert!(e.why.starts_with("line 1: cpu times"), "{e}");
        let e = parse_stat("/proc/stat", "cpu 1 2 3\n").unwrap_err();
        assert!(e.why.contains("steal is the 8th"), "{e}");
        let e = parse_stat("/proc/stat", "cpu 1 2 3 4 5 6 7 8\n").unwrap_err();
        assert!(e.why.contains("procs_running"), "{e}");
    }

    #[test]
    fn steal_between_two_readings() {
        let a = parse_stat("stat", STAT).unwrap();
        let b = parse_stat(
            "stat",
            &STAT.replace("cpu  100 0 50 800 10 0 5 35", "cpu  150 0 60 880 10 0 5 95"),
        )
        .unwrap();
        let share = steal_share(&a, &b).unwrap();
        assert!((share - 0.3).abs() < 1e-9, "{share}");
        assert_eq!(steal_share(&b, &a), None);
        assert_eq!(steal_share(&a, &a), None);
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("stat"), STAT).unwrap();
        assert_eq!(read_stat(dir.path()).unwrap(), a);
        let e = read_stat(&dir.path().join("none")).unwrap_err();
        assert!(e.file.ends_with("none/stat"), "{e}");
    }

    proptest! {
        #[test]
        fn never_panics_on_any_text(text in "(cpu[0-9 ]{0,30}|procs_running [0-9a-z]{0,12}|[ -~]{0,30})(\n(cpu[0-9 ]{0,30}|procs_running [0-9a-z]{0,12}|[ -~]{0,30})){0,6}") {
            if let Ok(s) = parse_stat("stat", &text) {
                prop_assert!(s.cpus >= 1 && s.steal <= s.total);
                let share = steal_share(&CpuSample { total: 0, steal: 0, cpus: 1, running: 0 }, &s);
                prop_assert!(share.is_none_or(|x| (0.0..=1.0).contains(&x)));
            }
        }
    }
}
