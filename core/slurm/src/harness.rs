//! A real Slurm on this host, for tests: munged, slurmctld and slurmd, each started in
//! the foreground by [`LocalCluster::start`] with everything in a temporary directory of
//! its own (its `slurm.conf`, a fresh munge key and munged's socket, state, spool, PID and
//! log files), on loopback ports that were free a moment before, and stopped on drop
//! (SIGTERM, then SIGKILL after a few seconds; each one waited for).
//!
//! It needs root (the daemons run as root: `SlurmUser=root`) and the Debian 12 packages
//! `slurmctld slurmd slurm-client munge` (`scripts/install-test-deps.sh`).
//! [`LocalCluster::start_or_skip`] says SKIPPED when either is missing, as the
//! workspace's other tests do, and fails instead under `ROCEWATCH_REQUIRE_ALL=1`
//! (`scripts/test.sh`, CI).
//!
//! The `slurm.conf` keys are those of `slurm.conf(5)` of Slurm 22.05: `AuthInfo=socket=`
//! points auth/munge and cred/munge at this munged; `ProctrackType=proctrack/linuxproc`
//! and `TaskPlugin=task/none` need no cgroup setup; `ReturnToService=2` lets a node that
//! was DOWN for not responding come back when it registers with a valid configuration.
//! A `HealthCheckProgram` can be set ([`HealthCheck`]) so a test can run rocewatch as
//! slurmd's health program. slurmd runs it with an environment of its own that holds only
//! `SLURMD_NODENAME` (`run_script_health_check` in `src/slurmd/slurmd/slurmd.c` builds it
//! with `env_array_create`; no `SLURM_CONF`): on a real host its `scontrol`
//! reads the default `/etc/slurm/slurm.conf`, so here the program runs through a wrapper
//! (`health-check.sh` in the cluster's directory) that sets `SLURM_CONF` to this
//! cluster's configuration and nothing else.

use std::fmt::Write as _;
use std::fs;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::node::Node;
use crate::scontrol::Scontrol;

/// Slurm's HealthCheckProgram for the cluster (run through a wrapper that sets
/// `SLURM_CONF`; see the module doc).
#[derive(Debug, Clone)]
pub struct HealthCheck {
    /// The program: an absolute path.
    pub program: PathBuf,
    /// `HealthCheckInterval`, seconds.
    pub interval_s: u32,
    /// `HealthCheckNodeState` (e.g. `ANY`), Slurm's default when `None`.
    pub node_state: Option<String>,
}

/// How to start the cluster.
#[derive(Debug, Clone)]
pub struct Options {
    /// The node's name; this host's short name ([`crate::this_node_name`]) when `None`.
    pub node_name: Option<String>,
    pub health_check: Option<HealthCheck>,
    /// More `slurm.conf` lines, appended.
    pub extra_conf: Vec<String>,
    /// How long to wait for the node to be IDLE.
    pub start_timeout: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            node_name: None,
            health_check: None,
            extra_conf: Vec::new(),
            start_timeout: Duration::from_secs(30),
        }
    }
}

/// The cluster could not start; every daemon's log is in the message.
#[derive(Debug, thiserror::Error)]
#[error("local Slurm: {what}\n{logs}")]
pub struct HarnessError {
    pub what: String,
    pub logs: String,
}

/// The programs the cluster runs.
#[derive(Debug, Clone)]
pub struct Programs {
    pub munged: PathBuf,
    pub mungekey: PathBuf,
    pub slurmctld: PathBuf,
    pub slurmd: PathBuf,
    pub scontrol: PathBuf,
    pub srun: PathBuf,
}

impl Programs {
    /// Find them in `PATH`, `/usr/sbin` and `/sbin`; `Err` names the first one missing.
    pub fn find() -> Result<Self, String> {
        let find = |name: &str| -> Result<PathBuf, String> {
            let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
                .map(|p| std::env::split_paths(&p).collect())
                .unwrap_or_default();
            dirs.push("/usr/sbin".into());
            dirs.push("/sbin".into());
            dirs.into_iter()
                .map(|d| d.join(name))
                .find(|p| p.is_file())
                .ok_or_else(|| {
                    format!("{name} (Debian packages slurmctld slurmd slurm-client munge)")
                })
        };
        Ok(Self {
            munged: find("munged")?,
            mungekey: find("mungekey")?,
            slurmctld: find("slurmctld")?,
            slurmd: find("slurmd")?,
            scontrol: find("scontrol")?,
            srun: find("srun")?,
        })
    }
}

struct Daemon {
    name: &'static str,
    child: Child,
}

/// A running local Slurm cluster of one node; stopped on drop.
pub struct LocalCluster {
    dir: tempfile::TempDir,
    node: String,
    conf: PathBuf,
    programs: Programs,
    daemons: Vec<Daemon>,
}

/// Whether every component must be there (`ROCEWATCH_REQUIRE_ALL=1`, set by
/// `scripts/test.sh` and CI): then a missing one fails the test instead of skipping it.
pub fn require_all() -> bool {
    std::env::var("ROCEWATCH_REQUIRE_ALL").as_deref() == Ok("1")
}

/// Say `SKIPPED: why` past the test harness's capture (as `integration-tests`'
/// `support::skipped` does), or fail under `ROCEWATCH_REQUIRE_ALL=1`.
pub fn missing(what: &str, install: &str) {
    if require_all() {
        panic!("{what} not found: {install} (scripts/test.sh requires every component)");
    }
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr().lock(),
        "SKIPPED: {what} not found; {install}; this test did not run (scripts/test.sh runs it)"
    );
}

impl LocalCluster {
    /// Start the cluster when this process is root and the programs are installed; else
    /// say SKIPPED (or fail under `ROCEWATCH_REQUIRE_ALL=1`) and return `None`. A
    /// cluster that is there but does not start is a failure, with its logs.
    pub fn start_or_skip(options: Options) -> Option<Self> {
        let programs = Self::available()?;
        Some(Self::start(programs, options).unwrap_or_else(|e| panic!("{e}")))
    }

    /// The programs, when this process is root and they are installed; else say SKIPPED
    /// (or fail under `ROCEWATCH_REQUIRE_ALL=1`) and return `None`.
    pub fn available() -> Option<Programs> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            missing(
                "root (the local Slurm's daemons run as root)",
                "run the Slurm tests as root (CI does)",
            );
            return None;
        }
        match Programs::find() {
            Ok(p) => Some(p),
            Err(what) => {
                missing(&what, "run scripts/install-test-deps.sh");
                None
            }
        }
    }

    /// Write the configuration, start munged, slurmctld and slurmd, and wait until the
    /// node is IDLE.
    pub fn start(programs: Programs, options: Options) -> Result<Self, HarnessError> {
        let plain = |what: String| HarnessError {
            what,
            logs: String::new(),
        };
        let node = crate::this_node_name(options.node_name.as_deref())
            .map_err(|e| plain(format!("this host's name: {e}")))?;
        let dir = tempfile::Builder::new()
            .prefix("rocewatch-slurm-")
            .tempdir()
            .map_err(|e| plain(format!("temporary directory: {e}")))?;
        // munged wants every directory above its socket searchable by all.
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o711))
            .map_err(|e| plain(format!("chmod {}: {e}", dir.path().display())))?;
        for sub in ["munge", "state", "spool"] {
            fs::create_dir(dir.path().join(sub)).map_err(|e| plain(format!("mkdir {sub}: {e}")))?;
        }
        fs::set_permissions(dir.path().join("munge"), fs::Permissions::from_mode(0o711))
            .map_err(|e| plain(format!("chmod munge: {e}")))?;
        let conf = dir.path().join("slurm.conf");
        if let Some(h) = &options.health_check {
            let wrapper = dir.path().join("health-check.sh");
            let text = format!(
                "#!/bin/sh\n# slurmd gives its health program no SLURM_CONF: this cluster's.\nSLURM_CONF={}\nexport SLURM_CONF\nexec {} \"$@\"\n",
                sh_quote(&conf.display().to_string()),
                sh_quote(&h.program.display().to_string()),
            );
            fs::write(&wrapper, text)
                .and_then(|()| fs::set_permissions(&wrapper, fs::Permissions::from_mode(0o755)))
                .map_err(|e| plain(format!("{}: {e}", wrapper.display())))?;
        }
        // Two different ports: the first is let go before the second is asked for, and the
        // kernel may hand out the same one again (a CI run got 45561 twice: slurmd could not
        // bind beside slurmctld).
        let ctld_port = free_port()?;
        let mut slurmd_port = free_port()?;
        while slurmd_port == ctld_port {
            slurmd_port = free_port()?;
        }
        let text = slurm_conf(dir.path(), &node, ctld_port, slurmd_port, &options);
        fs::write(&conf, text).map_err(|e| plain(format!("{}: {e}", conf.display())))?;
        let mut cluster = Self {
            dir,
            node,
            conf,
            programs,
            daemons: Vec::new(),
        };
        cluster.start_daemons()?;
        cluster.wait_until(options.start_timeout, "the node to be IDLE", |n| {
            n.state.is_idle()
        })?;
        Ok(cluster)
    }

    fn start_daemons(&mut self) -> Result<(), HarnessError> {
        let d = self.dir.path().to_path_buf();
        let key = d.join("munge/munge.key");
        let out = Command::new(&self.programs.mungekey)
            .arg("--create")
            .arg(format!("--keyfile={}", key.display()))
            .output()
            .map_err(|e| self.error(format!("{}: {e}", self.programs.mungekey.display())))?;
        if !out.status.success() {
            return Err(self.error(format!(
                "mungekey: {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        let munged = self.programs.munged.clone();
        self.spawn(
            "munged",
            Command::new(munged)
                .arg("--foreground")
                .arg(format!("--socket={}", d.join("munge/munge.sock").display()))
                .arg(format!("--key-file={}", key.display()))
                .arg(format!("--pid-file={}", d.join("munged.pid").display()))
                .arg(format!("--seed-file={}", d.join("munged.seed").display()))
                .arg(format!("--log-file={}", d.join("munged.log").display())),
        )?;
        self.wait_for_file(&d.join("munge/munge.sock"), "munged's socket")?;
        let ctld = self.programs.slurmctld.clone();
        self.spawn("slurmctld", Command::new(ctld).arg("-D").arg("-i"))?;
        let slurmd = self.programs.slurmd.clone();
        let node = self.node.clone();
        self.spawn("slurmd", Command::new(slurmd).arg("-D").arg("-N").arg(node))?;
        Ok(())
    }

    fn spawn(&mut self, name: &'static str, cmd: &mut Command) -> Result<(), HarnessError> {
        let out_path = self.dir.path().join(format!("{name}.out"));
        let out = fs::File::create(&out_path)
            .map_err(|e| self.error(format!("{}: {e}", out_path.display())))?;
        let err = out
            .try_clone()
            .map_err(|e| self.error(format!("{}: {e}", out_path.display())))?;
        let child = cmd
            .env("SLURM_CONF", &self.conf)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| self.error(format!("start {name}: {e}")))?;
        self.daemons.push(Daemon { name, child });
        Ok(())
    }

    fn wait_for_file(&mut self, path: &Path, what: &str) -> Result<(), HarnessError> {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !path.exists() {
            self.check_alive()?;
            if Instant::now() > deadline {
                return Err(self.error(format!(
                    "{what} ({}) did not appear in 10 s",
                    path.display()
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    fn check_alive(&mut self) -> Result<(), HarnessError> {
        for i in 0..self.daemons.len() {
            if let Ok(Some(status)) = self.daemons[i].child.try_wait() {
                let name = self.daemons[i].name;
                return Err(self.error(format!("{name} exited: {status}")));
            }
        }
        Ok(())
    }

    /// Poll `scontrol show node` until `done` holds for the node, or fail after `timeout`
    /// with the last state seen and every daemon's log.
    pub fn wait_until(
        &mut self,
        timeout: Duration,
        what: &str,
        done: impl Fn(&Node) -> bool,
    ) -> Result<Node, HarnessError> {
        let deadline = Instant::now() + timeout;
        let scontrol = self.scontrol().timeout(Duration::from_secs(10));
        loop {
            self.check_alive()?;
            let last = match scontrol.show_node(&self.node) {
                Ok(n) if done(&n) => return Ok(n),
                Ok(n) => format!("state {}, reason {:?}", n.state, n.reason),
                Err(e) => e.to_string(),
            };
            if Instant::now() > deadline {
                return Err(self.error(format!("waited {timeout:?} for {what}; last: {last}")));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn error(&self, what: String) -> HarnessError {
        HarnessError {
            what,
            logs: self.logs(),
        }
    }

    /// The node's name.
    pub fn node_name(&self) -> &str {
        &self.node
    }

    /// The cluster's `slurm.conf`.
    pub fn conf(&self) -> &Path {
        &self.conf
    }

    /// The cluster's directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// An [`Scontrol`] for this cluster (`SLURM_CONF` set).
    pub fn scontrol(&self) -> Scontrol {
        Scontrol::new(&self.programs.scontrol).env("SLURM_CONF", &self.conf)
    }

    /// A `Command` for `program` with `SLURM_CONF` set (for `srun`, `sinfo`, ...).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new(program);
        c.env("SLURM_CONF", &self.conf);
        c
    }

    /// `srun` with `SLURM_CONF` set.
    pub fn srun(&self) -> Command {
        self.command(&self.programs.srun)
    }

    /// Every daemon's log and captured output (the last 80 lines of each), and the
    /// configuration.
    pub fn logs(&self) -> String {
        let mut s = String::new();
        let d = self.dir.path();
        for name in [
            "slurm.conf",
            "munged.out",
            "munged.log",
            "slurmctld.out",
            "slurmctld.log",
            "slurmd.out",
            "slurmd.log",
        ] {
            let p = d.join(name);
            let _ = writeln!(s, "--- {}", p.display());
            match fs::read_to_string(&p) {
                Ok(t) => {
                    let lines: Vec<&str> = t.lines().collect();
                    for l in &lines[lines.len().saturating_sub(80)..] {
                        let _ = writeln!(s, "{l}");
                    }
                }
                Err(e) => {
                    let _ = writeln!(s, "({e})");
                }
            }
        }
        s
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("local Slurm logs:\n{}", self.logs());
        }
        // slurmd first, munged last: each one's peers are still there while it stops.
        for d in self.daemons.iter().rev() {
            if let Ok(pid) = libc::pid_t::try_from(d.child.id()) {
                // SAFETY: kill has no memory preconditions; the pid is our own child,
                // not yet waited for, so it cannot have been reused.
                unsafe { libc::kill(pid, libc::SIGTERM) };
            }
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        for d in self.daemons.iter_mut().rev() {
            loop {
                match d.child.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if Instant::now() > deadline => {
                        eprintln!("local Slurm: {} did not stop on SIGTERM; killed", d.name);
                        let _ = d.child.kill();
                        let _ = d.child.wait();
                        break;
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        }
    }
}

/// `text` in single quotes for sh (a `'` as `'\''`).
fn sh_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// A TCP port on loopback that was free a moment ago (bound, then let go).
fn free_port() -> Result<u16, HarnessError> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| HarnessError {
            what: format!("a free port on 127.0.0.1: {e}"),
            logs: String::new(),
        })
}

/// The cluster's `slurm.conf`.
fn slurm_conf(dir: &Path, node: &str, ctld_port: u16, slurmd_port: u16, o: &Options) -> String {
    let d = dir.display();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut s = format!(
        "# Written by rocewatch_slurm::harness for one test run.
ClusterName=rocewatch-test
SlurmctldHost=localhost
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={d}/munge/munge.sock
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
ReturnToService=2
MpiDefault=none
SwitchType=switch/none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
SlurmctldTimeout=30
SlurmdTimeout=30
"
    );
    if let Some(h) = &o.health_check {
        let _ = writeln!(s, "HealthCheckProgram={d}/health-check.sh");
        let _ = writeln!(s, "HealthCheckInterval={}", h.interval_s);
        if let Some(state) = &h.node_state {
            let _ = writeln!(s, "HealthCheckNodeState={state}");
        }
    }
    for l in &o.extra_conf {
        let _ = writeln!(s, "{l}");
    }
    let _ = writeln!(
        s,
        "NodeName={node} NodeHostname={node} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN"
    );
    let _ = writeln!(
        s,
        "PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP"
    );
    s
}
