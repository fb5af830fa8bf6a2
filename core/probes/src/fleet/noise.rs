//! Is this host too busy for its own probes to mean anything? A prober whose CPU is
//! stolen by the hypervisor or whose run queue is long answers late and times out
//! without the network being at fault (R-Pingmesh names host-side noise its main source
//! of false alarms). From `<procfs>/stat`: the steal share of the CPU time since the last
//! look, and `procs_running` per CPU.

use std::path::{Path, PathBuf};

use rocewatch_sysfs::procstat::{read_stat, steal_share};
pub use rocewatch_sysfs::procstat::{CpuSample, StatError};

/// How the host stood over the last round.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Load {
    /// Share of CPU time stolen since the previous look (0 at the first).
    pub steal: f64,
    /// Runnable tasks per CPU now (the prober itself is one).
    pub run_queue: f64,
}

/// Reads `<procfs>/stat` each round and says whether the host is overloaded.
pub struct HostNoise {
    procfs: PathBuf,
    last: Option<CpuSample>,
    steal_limit: f64,
    run_queue_limit: f64,
}

impl HostNoise {
    pub fn new(procfs: &Path, steal_limit: f64, run_queue_limit: f64) -> Self {
        HostNoise {
            procfs: procfs.to_path_buf(),
            last: None,
            steal_limit,
            run_queue_limit,
        }
    }

    /// The load now, or why it could not be read.
    pub fn sample(&mut self) -> Result<Load, StatError> {
        let now = read_stat(&self.procfs)?;
        let steal = self.last.and_then(|l| steal_share(&l, &now)).unwrap_or(0.0);
        self.last = Some(now);
        Ok(Load {
            steal,
            run_queue: f64::from(now.running) / f64::from(now.cpus),
        })
    }

    /// Whether `load` is beyond either limit.
    pub fn overloaded(&self, load: &Load) -> bool {
        load.steal > self.steal_limit || load.run_queue > self.run_queue_limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  100 0 50 800 10 0 5 35 0 0\ncpu0 50 0 25 400 5 0 2 18 0 0\ncpu1 50 0 25 400 5 0 3 17 0 0\nintr 1 2 3\nctxt 99\nprocs_running 3\nprocs_blocked 0\n";

    #[test]
    fn steal_share_and_run_queue_over_rounds() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("stat"), STAT).unwrap();
        let mut n = HostNoise::new(dir.path(), 0.1, 2.0);
        let first = n.sample().unwrap();
        assert_eq!((first.steal, first.run_queue), (0.0, 1.5));
        assert!(!n.overloaded(&first));
        // 200 more ticks, 60 of them stolen: 30 %.
        std::fs::write(
            dir.path().join("stat"),
            STAT.replace("cpu  100 0 50 800 10 0 5 35", "cpu  150 0 60 880 10 0 5 95"),
        )
        .unwrap();
        let l = n.sample().unwrap();
        assert!((l.steal - 0.3).abs() < 1e-9, "{l:?}");
        assert!(n.overloaded(&l));
        assert!(n.overloaded(&Load {
            steal: 0.0,
            run_queue: 2.5
        }));
    }

    #[test]
    fn a_file_it_cannot_read_is_named() {
        let e = HostNoise::new(Path::new("/nonexistent-proc"), 0.1, 2.0)
            .sample()
            .unwrap_err();
        assert!(e.to_string().starts_with("/nonexistent-proc/stat: "), "{e}");
    }
}
