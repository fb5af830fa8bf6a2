//! Which workload a process belongs to, from its cgroup (`/proc/<pid>/cgroup`, read
//! under the proc root the plugin is given): a Kubernetes pod and container (kubelet's
//! systemd and cgroupfs layouts; containerd, CRI-O and Docker scopes), a Slurm job and
//! step (`job_<N>/step_<M>`, cgroup v1 and v2), a systemd service, else the command
//! (`/proc/<pid>/comm`).
//!
//! Layouts (kubelet's `pkg/kubelet/cm/cgroup_manager_linux.go`, Slurm's
//! `src/plugins/cgroup/v{1,2}`):
//! - `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid, '-' as '_'>.slice/cri-containerd-<id>.scope`
//! - `/kubepods/burstable/pod<uid>/<id>` (cgroupfs driver; also `crio-<id>`, `docker-<id>.scope`)
//! - `/slurm/uid_1000/job_42/step_0/task_0` (v1), `/system.slice/slurmstepd.scope/job_42/step_0/user/task_0` (v2)
//! - `/system.slice/nccl-tests.service`

use std::collections::BTreeMap;
use std::path::Path;

use rocewatch_metrics::{
    ATTR_CONTAINER_ID, ATTR_K8S_POD_UID, ATTR_PROCESS_COMMAND, ATTR_SLURM_JOB, ATTR_SLURM_STEP,
    ATTR_SYSTEMD_UNIT, ATTR_WORKLOAD, ATTR_WORKLOAD_KIND, OTHER_WORKLOAD,
};

/// What a workload is.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Workload {
    /// A Kubernetes pod, and its container when the cgroup names it.
    Pod {
        uid: String,
        container: Option<String>,
    },
    /// A Slurm job, and its step (`0`, `batch`, `extern`) when the cgroup names it.
    Slurm { job: String, step: Option<String> },
    /// A systemd service.
    Unit { name: String },
    /// Known only by its command.
    Process { command: String },
    /// The kernel consumer holding the resource (`ib_core`, `rdma_cm`, `nvme_rdma`).
    Kernel { consumer: String },
    /// The workloads beyond the bound, summed.
    Other,
}

impl Workload {
    /// The `rdma.workload` identifier.
    pub fn id(&self) -> String {
        match self {
            Workload::Pod {
                uid,
                container: Some(c),
            } => {
                format!("pod:{uid}/{}", &c[..c.len().min(12)])
            }
            Workload::Pod {
                uid,
                container: None,
            } => format!("pod:{uid}"),
            Workload::Slurm { job, step: Some(s) } => format!("slurm:{job}.{s}"),
            Workload::Slurm { job, step: None } => format!("slurm:{job}"),
            Workload::Unit { name } => format!("unit:{name}"),
            Workload::Process { command } => format!("process:{command}"),
            Workload::Kernel { consumer } => format!("kernel:{consumer}"),
            Workload::Other => OTHER_WORKLOAD.to_string(),
        }
    }

    /// `pod`, `slurm`, `unit`, `process`, `kernel`, `other`.
    pub fn kind(&self) -> &'static str {
        match self {
            Workload::Pod { .. } => "pod",
            Workload::Slurm { .. } => "slurm",
            Workload::Unit { .. } => "unit",
            Workload::Process { .. } => "process",
            Workload::Kernel { .. } => "kernel",
            Workload::Other => "other",
        }
    }

    /// Its attributes on a sample: `rdma.workload`, `rdma.workload.kind` and the
    /// identity's own (`k8s.pod.uid`...).
    pub fn attributes(&self, into: &mut BTreeMap<String, String>) {
        into.insert(ATTR_WORKLOAD.into(), self.id());
        into.insert(ATTR_WORKLOAD_KIND.into(), self.kind().into());
        match self {
            Workload::Pod { uid, container } => {
                into.insert(ATTR_K8S_POD_UID.into(), uid.clone());
                if let Some(c) = container {
                    into.insert(ATTR_CONTAINER_ID.into(), c.clone());
                }
            }
            Workload::Slurm { job, step } => {
                into.insert(ATTR_SLURM_JOB.into(), job.clone());
                if let Some(s) = step {
                    into.insert(ATTR_SLURM_STEP.into(), s.clone());
                }
            }
            Workload::Unit { name } => {
                into.insert(ATTR_SYSTEMD_UNIT.into(), name.clone());
            }
            Workload::Process { command } | Workload::Kernel { consumer: command } => {
                into.insert(ATTR_PROCESS_COMMAND.into(), command.clone());
            }
            Workload::Other => {}
        }
    }
}

/// A container id out of a cgroup path segment: `cri-containerd-<id>.scope`,
/// `crio-<id>.scope`, `crio-<id>`, `docker-<id>.scope`, or a bare 64-hex id.
fn container_id(seg: &str) -> Option<String> {
    let s = seg.strip_suffix(".scope").unwrap_or(seg);
    let id = [
        "cri-containerd-",
        "crio-",
        "docker-",
        "containerd-",
        "libpod-",
    ]
    .iter()
    .find_map(|p| s.strip_prefix(p))
    .unwrap_or(s);
    (id.len() >= 12 && id.len() <= 128 && id.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| id.to_ascii_lowercase())
}

/// A pod UID out of a segment: `pod<uid>` (cgroupfs) or
/// `kubepods[-<qos>]-pod<uid with _>.slice` (systemd). A UID is a UUID (8-4-4-4-12 hex).
fn pod_uid(seg: &str) -> Option<String> {
    let s = seg.strip_suffix(".slice").unwrap_or(seg);
    let raw = match s.strip_prefix("pod") {
        Some(r) => r,
        None if s.starts_with("kubepods") => &s[s.rfind("-pod")? + 4..],
        None => return None,
    };
    let uid = raw.replace('_', "-");
    let groups: Vec<&str> = uid.split('-').collect();
    let uuid = groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
        && groups
            .iter()
            .all(|g| g.bytes().all(|b| b.is_ascii_hexdigit()));
    uuid.then_some(uid)
}

/// A Slurm job id: digits, or `<array job>_<task>` as arrays name them.
fn slurm_job(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 24
        && s.bytes().all(|b| b.is_ascii_digit() || b == b'_')
        && s.as_bytes()[0].is_ascii_digit()
}

fn valid_token(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

/// The workload of one cgroup path, or `None` when the path names none (the command
/// decides then).
pub fn from_cgroup_path(path: &str) -> Option<Workload> {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    // Under kubepods, or (seen from a container's own cgroup namespace: `/../../pod<uid>/
    // <id>`) a `pod` segment whose UID is a UUID.
    if let Some(uid) = segs.iter().find_map(|s| pod_uid(s)) {
        let container = segs.iter().rev().find_map(|s| container_id(s));
        return Some(Workload::Pod { uid, container });
    }
    // `job_<digits>` (not any `job_…`: a `job_runner.service` is a unit).
    if let Some(i) = segs
        .iter()
        .position(|s| s.strip_prefix("job_").is_some_and(slurm_job))
    {
        let job = &segs[i][4..];
        {
            let step = segs
                .get(i + 1)
                .and_then(|s| s.strip_prefix("step_"))
                .filter(|s| valid_token(s))
                .map(str::to_string);
            return Some(Workload::Slurm {
                job: job.to_string(),
                step,
            });
        }
    }
    let last = segs.last()?;
    (last.ends_with(".service") && valid_token(last)).then(|| Workload::Unit {
        name: last.to_string(),
    })
}

/// The workload of a process from its `/proc/<pid>/cgroup` text (cgroup v1 lines
/// `N:controllers:/path`, v2 `0::/path`): the first path naming a pod or a job wins, then
/// a service; `command` when none does.
pub fn from_cgroup_file(text: &str, command: &str) -> Workload {
    let paths: Vec<&str> = text
        .lines()
        .filter_map(|l| l.splitn(3, ':').nth(2))
        .collect();
    let found: Vec<Workload> = paths.iter().filter_map(|p| from_cgroup_path(p)).collect();
    found
        .iter()
        .find(|w| matches!(w, Workload::Pod { .. } | Workload::Slurm { .. }))
        .or_else(|| found.first())
        .cloned()
        .unwrap_or_else(|| Workload::Process {
            command: command.to_string(),
        })
}

/// The process (thread group) of task `tid`: the kernel's resource tracking names the
/// thread that created a resource, which may be a helper thread of the process.
fn tgid(proc_root: &Path, tid: u32) -> Option<u32> {
    read_small(&proc_root.join(tid.to_string()).join("status"))?
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
}

/// The workload of task `pid` (a process, or a thread of one: its process decides) under
/// `proc_root`; `None` when it is gone.
pub fn of_pid(proc_root: &Path, pid: u32) -> Option<Workload> {
    let pid = tgid(proc_root, pid).unwrap_or(pid);
    let dir = proc_root.join(pid.to_string());
    let cgroup = read_small(&dir.join("cgroup"))?;
    let comm = read_small(&dir.join("comm")).unwrap_or_default();
    let comm = comm.trim();
    Some(from_cgroup_file(
        &cgroup,
        if comm.is_empty() { "unknown" } else { comm },
    ))
}

/// When task `pid` started (`/proc/<pid>/stat` field 22, clock ticks after boot): a pid
/// reused by a new process has another, so a cached workload is not given to it.
pub fn start_time(proc_root: &Path, pid: u32) -> Option<u64> {
    parse_start_time(&read_small(&proc_root.join(pid.to_string()).join("stat"))?)
}

/// Field 22 of a `stat` line; the command (field 2) is in parentheses and may hold
/// spaces and parentheses itself, so fields are counted from the last `)`.
pub fn parse_start_time(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_ascii_whitespace().nth(19)?.parse().ok()
}

/// A proc file of at most 64 KiB (a cgroup file is a few lines).
fn read_small(path: &Path) -> Option<String> {
    use std::io::Read;
    let f = std::fs::File::open(path).ok()?;
    let mut s = String::new();
    f.take(64 * 1024).read_to_string(&mut s).ok()?;
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "7f3e2d1c-0b9a-4c8d-9e7f-6a5b4c3d2e1f";
    const CID: &str = "4f9d0c2b7a1e3f5d6c8b9a0e1f2d3c4b5a6978e0d1c2b3a4f5e6d7c8b9a0f1e2";

    #[test]
    fn kubernetes_pods_in_every_layout() {
        let u = UID.replace('-', "_");
        for path in [
            format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice/cri-containerd-{CID}.scope"),
            format!("/kubepods.slice/kubepods-pod{u}.slice/crio-{CID}.scope"),
            format!("/kubepods/burstable/pod{UID}/{CID}"),
            format!("/kubepods/pod{UID}/crio-{CID}"),
            format!("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{u}.slice/docker-{CID}.scope"),
        ] {
            assert_eq!(
                from_cgroup_path(&path),
                Some(Workload::Pod { uid: UID.into(), container: Some(CID.into()) }),
                "{path}"
            );
        }
        // The pod's own cgroup (the pause container's sandbox is not named): no container.
        let w = from_cgroup_path(&format!("/kubepods/besteffort/pod{UID}")).unwrap();
        assert_eq!(w.id(), format!("pod:{UID}"));
        let mut a = BTreeMap::new();
        from_cgroup_path(&format!("/kubepods/pod{UID}/{CID}"))
            .unwrap()
            .attributes(&mut a);
        assert_eq!(a[ATTR_WORKLOAD], format!("pod:{UID}/{}", &CID[..12]));
        assert_eq!(a[ATTR_K8S_POD_UID], UID);
        assert_eq!(a[ATTR_CONTAINER_ID], CID);
        assert_eq!(a[ATTR_WORKLOAD_KIND], "pod");
    }

    #[test]
    fn slurm_jobs_and_steps_v1_and_v2() {
        for (path, id) in [
            ("/slurm/uid_1000/job_42/step_0/task_0", "slurm:42.0"),
            (
                "/system.slice/slurmstepd.scope/job_42/step_0/user/task_0",
                "slurm:42.0",
            ),
            ("/slurm/uid_0/job_7/step_batch", "slurm:7.batch"),
            ("/system.slice/slurmstepd.scope/job_42", "slurm:42"),
        ] {
            assert_eq!(
                from_cgroup_path(path).map(|w| w.id()).as_deref(),
                Some(id),
                "{path}"
            );
        }
    }

    #[test]
    fn services_then_the_command() {
        assert_eq!(
            from_cgroup_file("0::/system.slice/nccl-tests.service\n", "all_reduce_perf").id(),
            "unit:nccl-tests.service"
        );
        // A login session is not a workload: the command is.
        assert_eq!(
            from_cgroup_file(
                "0::/user.slice/user-0.slice/session-3.scope\n",
                "ib_write_bw"
            )
            .id(),
            "process:ib_write_bw"
        );
        // cgroup v1: the memory controller's job wins over systemd's session.
        let v1 = "12:memory:/slurm/uid_1000/job_9/step_1\n1:name=systemd:/user.slice/user-1000.slice/session-2.scope\n";
        assert_eq!(from_cgroup_file(v1, "x").id(), "slurm:9.1");
        assert_eq!(from_cgroup_file("", "x").id(), "process:x");
    }

    #[test]
    fn odd_paths_name_no_workload() {
        for p in [
            "/",
            "",
            "/kubepods/burstable/podXYZ",
            "/job_/step_0",
            "/system.slice/job_runner.service/x",
            "/kubepods/burstable/pod1234567890/x",
            "/system.slice/a b.service",
            "/mypod123/x",
        ] {
            assert_eq!(from_cgroup_path(p), None, "{p:?}");
        }
    }

    #[test]
    fn a_pod_seen_from_a_containers_own_cgroup_namespace() {
        // cgroupfs driver, private cgroup namespace: relative, without `kubepods`.
        let p = format!("/../../pod{UID}/{CID}");
        assert_eq!(
            from_cgroup_path(&p),
            Some(Workload::Pod {
                uid: UID.into(),
                container: Some(CID.into())
            })
        );
        // A service named like a job is a service.
        assert_eq!(
            from_cgroup_path("/system.slice/job_runner.service").map(|w| w.id()),
            Some("unit:job_runner.service".into())
        );
        assert_eq!(
            from_cgroup_path("/slurm/uid_0/job_100_7/step_0").map(|w| w.id()),
            Some("slurm:100_7.0".into())
        );
    }

    #[test]
    fn a_thread_is_attributed_to_its_process() {
        let t = tempfile::tempdir().unwrap();
        let (p, th) = (t.path().join("500"), t.path().join("501"));
        std::fs::create_dir_all(&p).unwrap();
        std::fs::create_dir_all(&th).unwrap();
        std::fs::write(p.join("cgroup"), "0::/system.slice/trainer.service\n").unwrap();
        std::fs::write(p.join("comm"), "python3\n").unwrap();
        std::fs::write(
            th.join("status"),
            "Name:\tnccl-worker\nTgid:\t500\nPid:\t501\n",
        )
        .unwrap();
        std::fs::write(th.join("cgroup"), "0::/system.slice/trainer.service\n").unwrap();
        std::fs::write(th.join("comm"), "nccl-worker\n").unwrap();
        std::fs::write(p.join("status"), "Name:\tpython3\nTgid:\t500\nPid:\t500\n").unwrap();
        assert_eq!(of_pid(t.path(), 501).unwrap().id(), "unit:trainer.service");
        std::fs::write(
            p.join("cgroup"),
            "0::/user.slice/user-0.slice/session-1.scope\n",
        )
        .unwrap();
        assert_eq!(of_pid(t.path(), 501).unwrap().id(), "process:python3");
    }

    #[test]
    fn read_from_a_proc_tree() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("4242");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(
            d.join("cgroup"),
            "0::/system.slice/slurmstepd.scope/job_42/step_0/user/task_0\n",
        )
        .unwrap();
        std::fs::write(d.join("comm"), "ib_write_bw\n").unwrap();
        assert_eq!(of_pid(t.path(), 4242).unwrap().id(), "slurm:42.0");
        assert_eq!(of_pid(t.path(), 4243), None);
    }

    #[test]
    fn the_start_time_of_a_stat_line() {
        let stat = "4242 (ib_write_bw (x) y) S 1 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 987654 12345 67 18446744073709551615";
        assert_eq!(parse_start_time(stat), Some(987654));
        assert_eq!(parse_start_time("4242 (x) S 1"), None);
        assert_eq!(parse_start_time("no parenthesis"), None);
    }

    proptest::proptest! {
        #[test]
        fn any_stat_text_never_panics(text in "\\PC{0,200}") {
            let _ = parse_start_time(&text);
        }

        #[test]
        fn any_cgroup_text_gives_a_workload_without_panicking(text in "\\PC{0,300}", comm in "[a-z_]{0,16}") {
            let w = from_cgroup_file(&text, &comm);
            proptest::prop_assert!(!w.id().is_empty());
        }

        #[test]
        fn any_path_of_known_segments_never_panics(segs in proptest::collection::vec(
            proptest::prop_oneof![
                proptest::strategy::Just("kubepods".to_string()),
                "pod[0-9a-f_-]{0,40}",
                "job_[0-9a-z]{0,5}",
                "step_[0-9a-z]{0,5}",
                "[a-z-]{0,12}\\.(slice|scope|service)",
                "cri-containerd-[0-9a-f]{0,70}\\.scope",
            ], 0..8)) {
            let path = format!("/{}", segs.join("/"));
            let _ = from_cgroup_path(&path).map(|w| w.id());
        }
    }
}
