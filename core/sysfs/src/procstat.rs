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

    proptest! {
        #[test]
        fn never_panics_on_any_text(text in "(cpu[0-9 ]{0,30}|procs_running [0-9a-z]{0,12}|[ -~]{0,30})(\n(cpu[0-9 ]{0,30}|procs_running [0-9a-z]{0,12}|[ -~]{0,30})){0,6}") {
            if let Ok(s) = parse_stat("stat", &text) {
                prop_assert!(s.cpus >= 1 && s.steal <= s.total);
            }
        }
    }
}
