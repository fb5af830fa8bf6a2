//! Which workload a process belongs to, from its cgroup (`/proc/<pid>/cgroup`, read
//! under the proc root the plugin is given): a Kubernetes pod and container (kubelet's
//! systemd and cgroupfs layouts; containerd, CRI-O and Docker scopes), a Slurm job and
//! step (cgroup v1 and v2), a systemd service, else the command (`/proc/<pid>/comm`).
//!
//! A name is trusted only where the one who makes it puts it, because anyone may name a
//! cgroup they own: a user's systemd (`user@UID.service`, delegated to the user), a service
//! with `Delegate=yes`, or a container that writes its own cgroup can all create a
//! `job_42/step_0` or a `pod<uid>` below themselves. So a path names a workload only when
//! it is one of these layouts from the root of the hierarchy (directories only root, the
//! kubelet, slurmstepd or systemd make), and never when it passes a `user@UID.service`:
//! - kubelet, systemd driver (`pkg/kubelet/cm/cgroup_manager_linux.go`, `ToSystemd`):
//!   nested slices, each named after its parent (`systemd.slice(5)`), down to
//!   `[<root>-]kubepods[-<qos>]-pod<uid, '-' as '_'>.slice`, then the runtime's
//!   `cri-containerd-<id>.scope`, `crio-<id>.scope` or `docker-<id>.scope`;
//! - kubelet, cgroupfs driver (`ToCgroupfs`): `/kubepods[/<burstable|besteffort>]/pod<uid>/<id>`;
//! - slurmstepd, cgroup v1 (`src/plugins/cgroup/v1`, `cgroup_prepend` "/slurm" or
//!   "/slurm_<node>"): `/slurm[_<node>]/uid_<uid>/job_<id>/step_<step>[/task_<n>]`;
//! - slurmstepd, cgroup v2 (`src/plugins/cgroup/v2/cgroup_v2.c`: the scope
//!   `system.slice/[<node>_]slurmstepd.scope`, then `/job_%u/step_<step>/user/task_<n>`):
//!   `/system.slice/[<node>_]slurmstepd.scope/job_<id>/step_<step>/...`;
//! - a systemd service: a `.service` right below nested slices (`/system.slice/x.service`);
//!   what its processes create below it (`Delegate=yes`) is still that service's.
//!
//! Seen from a cgroup namespace the agent is in (a container's: the kernel writes the
//! path relative to the reader's namespace root, `proc_cgroup_show()` in
//! `kernel/cgroup/cgroup.c`), a path starts with `..` up to the common ancestor; what
//! follows must fit a layout from the level it starts at (`/../../pod<uid>/<id>`:
//! cgroupfs, from the pod level). That common ancestor is an ancestor of the agent's own
//! cgroup, so run the agent where no user names cgroups (the DaemonSet, the systemd unit).
//!
//! The workload carries the path of its own cgroup (`rdma.workload.cgroup`, down to the
//! level that names it: the step, the container, the service), for the audit record:
//! one per workload, not per process.

use std::collections::BTreeMap;
use std::path::Path;

use rocewatch_metrics::{
    ATTR_CONTAINER_ID, ATTR_K8S_POD_UID, ATTR_PROCESS_COMMAND, ATTR_SLURM_JOB, ATTR_SLURM_STEP,
    ATTR_SYSTEMD_UNIT, ATTR_WORKLOAD, ATTR_WORKLOAD_CGROUP, ATTR_WORKLOAD_KIND, OTHER_WORKLOAD,
};

/// What a workload is. Those found from a cgroup carry its path (`cgroup`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Workload {
    /// A Kubernetes pod, and its container when the cgroup names it.
    Pod {
        uid: String,
        container: Option<String>,
        cgroup: String,
    },
    /// A Slurm job, and its step (`0`, `batch`, `extern`) when the cgroup names it.
    Slurm {
        job: String,
        step: Option<String>,
        cgroup: String,
    },
    /// A systemd service.
    Unit { name: String, cgroup: String },
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
                ..
            } => {
                format!("pod:{uid}/{}", &c[..c.len().min(12)])
            }
            Workload::Pod {
                uid,
                container: None,
                ..
            } => format!("pod:{uid}"),
            Workload::Slurm {
                job, step: Some(s), ..
            } => format!("slurm:{job}.{s}"),
            Workload::Slurm {
                job, step: None, ..
            } => format!("slurm:{job}"),
            Workload::Unit { name, .. } => format!("unit:{name}"),
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

    /// The path of its cgroup, for those found from one.
    pub fn cgroup(&self) -> Option<&str> {
        match self {
            Workload::Pod { cgroup, .. }
            | Workload::Slurm { cgroup, .. }
            | Workload::Unit { cgroup, .. } => Some(cgroup),
            _ => None,
        }
    }

    /// Its attributes on a sample: `rdma.workload`, `rdma.workload.kind`, the identity's
    /// own (`k8s.pod.uid`...) and `rdma.workload.cgroup`.
    pub fn attributes(&self, into: &mut BTreeMap<String, String>) {
        into.insert(ATTR_WORKLOAD.into(), self.id());
        into.insert(ATTR_WORKLOAD_KIND.into(), self.kind().into());
        if let Some(c) = self.cgroup() {
            into.insert(ATTR_WORKLOAD_CGROUP.into(), c.to_string());
        }
        match self {
            Workload::Pod { uid, container, .. } => {
                into.insert(ATTR_K8S_POD_UID.into(), uid.clone());
                if let Some(c) = container {
                    into.insert(ATTR_CONTAINER_ID.into(), c.clone());
                }
            }
            Workload::Slurm { job, step, .. } => {
                into.insert(ATTR_SLURM_JOB.into(), job.clone());
                if let Some(s) = step {
                    into.insert(ATTR_SLURM_STEP.into(), s.clone());
                }
            }
            Workload::Unit { name, .. } => {
                into.insert(ATTR_SYSTEMD_UNIT.into(), name.clone());
            }
            Workload::Process { command } | Workload::Kernel { consumer: command } => {
                into.insert(ATTR_PROCESS_COMMAND.into(), command.clone());
            }
            Workload::Other => {}
        }
    }
}

/// A container id out of the segment right below a pod: `cri-containerd-<id>.scope`,
/// `crio-<id>.scope`, `crio-<id>`, `docker-<id>.scope`, or a bare hex id (12 to 128).
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

/// A pod UID: a UUID (8-4-4-4-12 hex), `-` or (systemd driver) `_` between the groups.
fn uuid(raw: &str) -> Option<String> {
    let uid = raw.replace('_', "-");
    let groups: Vec<&str> = uid.split('-').collect();
    let ok = groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
        && groups
            .iter()
            .all(|g| g.bytes().all(|b| b.is_ascii_hexdigit()));
    ok.then_some(uid)
}

/// The kubelet's QoS levels with a cgroup of their own (Guaranteed pods sit right in
/// kubepods).
fn qos(s: &str) -> bool {
    s == "burstable" || s == "besteffort"
}

/// A Slurm job id: `job_%u` (both cgroup plugins).
fn slurm_job(seg: &str) -> Option<&str> {
    let id = seg.strip_prefix("job_")?;
    (!id.is_empty() && id.len() <= 10 && id.bytes().all(|b| b.is_ascii_digit())).then_some(id)
}

fn valid_token(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

/// `name`, or `<node>_<name>` (with several slurmd on a host).
fn node_prefixed(seg: &str, name: &str) -> bool {
    seg == name
        || seg
            .strip_suffix(name)
            .and_then(|n| n.strip_suffix('_'))
            .is_some_and(valid_token)
}

/// A segment of one level of a layout.
type Level = fn(&str) -> bool;

/// Where `segs` fits `levels` so that level `key` is among them: the level `segs[0]` is
/// at. An absolute path fits from the top level only; one seen from a cgroup namespace
/// (`relative`) from any level down to `key`.
fn fit(segs: &[&str], levels: &[Level], key: usize, relative: bool) -> Option<usize> {
    let starts = if relative { 0..=key } else { 0..=0 };
    starts.into_iter().find(|&start| {
        let need = key - start + 1;
        segs.len() >= need && (0..need).all(|i| levels[start + i](segs[i]))
    })
}

/// A Slurm job (and step) where slurmstepd puts it: the workload and how many segments
/// its path takes.
fn slurm(segs: &[&str], relative: bool) -> Option<(Workload, usize)> {
    const V1: [Level; 3] = [
        |s| s == "slurm" || s.strip_prefix("slurm_").is_some_and(valid_token),
        |s| {
            s.strip_prefix("uid_")
                .is_some_and(|u| !u.is_empty() && u.bytes().all(|b| b.is_ascii_digit()))
        },
        |s| slurm_job(s).is_some(),
    ];
    const V2: [Level; 3] = [
        |s| s == "system.slice",
        |s| node_prefixed(s, "slurmstepd.scope"),
        |s| slurm_job(s).is_some(),
    ];
    let (levels, start) = [V1, V2]
        .iter()
        .find_map(|l| Some((l, fit(segs, l, 2, relative)?)))?;
    let at = levels.len() - 1 - start;
    let job = slurm_job(segs[at]).expect("fitted").to_string();
    let step = segs
        .get(at + 1)
        .and_then(|s| s.strip_prefix("step_"))
        .filter(|s| valid_token(s))
        .map(str::to_string);
    let used = at + 1 + usize::from(step.is_some());
    Some((
        Workload::Slurm {
            job,
            step,
            cgroup: String::new(),
        },
        used,
    ))
}

/// A pod (and container) where the kubelet's cgroupfs driver puts it.
fn pod_cgroupfs(segs: &[&str], relative: bool) -> Option<(Workload, usize)> {
    const WITH_QOS: [Level; 3] = [|s| s == "kubepods", qos, |s| pod_segment(s).is_some()];
    const GUARANTEED: [Level; 2] = [|s| s == "kubepods", |s| pod_segment(s).is_some()];
    let at = if let Some(start) = fit(segs, &WITH_QOS, 2, relative) {
        2 - start
    } else {
        1 - fit(segs, &GUARANTEED, 1, relative)?
    };
    let uid = pod_segment(segs[at])?;
    Some(pod_with_container(uid, segs, at))
}

fn pod_segment(s: &str) -> Option<String> {
    uuid(s.strip_prefix("pod")?)
}

/// The pod at `segs[at]` and its container, the segment right below it when there is one.
fn pod_with_container(uid: String, segs: &[&str], at: usize) -> (Workload, usize) {
    let container = segs.get(at + 1).and_then(|s| container_id(s));
    let used = at + 1 + usize::from(container.is_some());
    (
        Workload::Pod {
            uid,
            container,
            cgroup: String::new(),
        },
        used,
    )
}

/// The name of a slice without its suffix, split at `-` (systemd's nesting: `a-b.slice`
/// sits in `a.slice`).
fn slice_parts(seg: &str) -> Option<Vec<&str>> {
    let stem = seg.strip_suffix(".slice")?;
    let parts: Vec<&str> = stem.split('-').collect();
    parts.iter().all(|p| valid_token(p)).then_some(parts)
}

/// How many leading segments are slices nested as systemd names them: each one's name
/// is its parent's and one more part. From the root, the first has one part.
fn slice_chain(segs: &[&str], relative: bool) -> usize {
    let mut parent: Option<Vec<&str>> = None;
    for (i, seg) in segs.iter().enumerate() {
        let Some(parts) = slice_parts(seg) else {
            return i;
        };
        let nested = match &parent {
            Some(p) => parts.len() == p.len() + 1 && parts[..p.len()] == p[..],
            None => relative || parts.len() == 1,
        };
        if !nested {
            return i;
        }
        parent = Some(parts);
    }
    segs.len()
}

/// A pod (and container) where the kubelet's systemd driver puts it: the first slice of
/// the chain whose parts end `kubepods[-<qos>]-pod<uid>`.
fn pod_systemd(segs: &[&str], relative: bool) -> Option<(Workload, usize)> {
    let chain = slice_chain(segs, relative);
    segs[..chain].iter().enumerate().find_map(|(at, seg)| {
        let parts = slice_parts(seg)?;
        let (last, before) = parts.split_last()?;
        let uid = pod_segment(last)?;
        let kube = match before {
            [.., k, q] if qos(q) => k,
            [.., k] => k,
            [] => return None,
        };
        (*kube == "kubepods").then(|| pod_with_container(uid, segs, at))
    })
}

/// A service right below the chain of slices.
fn unit(segs: &[&str], relative: bool) -> Option<(Workload, usize)> {
    let at = slice_chain(segs, relative);
    let seg = segs.get(at)?;
    (seg.ends_with(".service") && valid_token(seg)).then(|| {
        (
            Workload::Unit {
                name: seg.to_string(),
                cgroup: String::new(),
            },
            at + 1,
        )
    })
}

/// At most this many leading `..` (a cgroup namespace that deep is not a deployment).
const MAX_UP: usize = 64;

/// The workload of one cgroup path, or `None` when the path names none (the command
/// decides then).
pub fn from_cgroup_path(path: &str) -> Option<Workload> {
    // A removed cgroup still shows, marked (`proc_cgroup_show()`).
    let path = path.strip_suffix(" (deleted)").unwrap_or(path);
    let all: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let up = all.iter().take_while(|s| **s == "..").count();
    let segs = &all[up..];
    if up > MAX_UP || segs.iter().any(|s| *s == ".." || *s == ".") {
        return None;
    }
    // Below a user's own systemd, every name is the user's.
    if segs
        .iter()
        .any(|s| s.starts_with("user@") && s.ends_with(".service"))
    {
        return None;
    }
    let relative = up > 0;
    let (mut w, used) = pod_systemd(segs, relative)
        .or_else(|| pod_cgroupfs(segs, relative))
        .or_else(|| slurm(segs, relative))
        .or_else(|| unit(segs, relative))?;
    let own = std::iter::repeat_n("..", up)
        .chain(segs[..used].iter().copied())
        .collect::<Vec<_>>()
        .join("/");
    if let Workload::Pod { cgroup, .. }
    | Workload::Slurm { cgroup, .. }
    | Workload::Unit { cgroup, .. } = &mut w
    {
        *cgroup = format!("/{own}");
    }
    Some(w)
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
                Some(Workload::Pod { uid: UID.into(), container: Some(CID.into()), cgroup: path.clone() }),
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
            "/slurm/uid_0/job_100_7/step_0",
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
                container: Some(CID.into()),
                cgroup: p.clone(),
            })
        );
        // A service named like a job is a service, and so is what it makes below it.
        for p in [
            "/system.slice/job_runner.service",
            "/system.slice/job_runner.service/x",
        ] {
            assert_eq!(
                from_cgroup_path(p).map(|w| w.id()),
                Some("unit:job_runner.service".into())
            );
        }
    }

    /// What a path is attributed to (`None`: no workload, the command decides).
    fn id(path: &str) -> Option<String> {
        from_cgroup_path(path).map(|w| w.id())
    }

    #[test]
    fn never_below_a_users_own_systemd() {
        // user@UID.service is delegated to the user (systemd's user@.service has
        // Delegate=yes): every name below it is theirs to choose.
        let u = UID.replace('-', "_");
        let home = "/user.slice/user-1000.slice/user@1000.service";
        for p in [
            format!("{home}/job_42/step_0"),
            format!("{home}/app.slice/slurm/uid_0/job_42/step_0"),
            format!("{home}/system.slice/slurmstepd.scope/job_42/step_0/user/task_0"),
            format!("{home}/kubepods/burstable/pod{UID}/{CID}"),
            format!("{home}/kubepods.slice/kubepods-pod{u}.slice/cri-containerd-{CID}.scope"),
            format!("{home}/app.slice/nccl-tests.service"),
            format!("/../../user.slice/user-1000.slice/user@1000.service/kubepods/pod{UID}/{CID}"),
        ] {
            assert_eq!(id(&p), None, "{p}");
            assert_eq!(
                from_cgroup_file(&format!("0::{p}\n"), "ib_write_bw").id(),
                "process:ib_write_bw",
                "{p}"
            );
        }
    }

    #[test]
    fn only_where_slurmstepd_and_the_kubelet_create_them() {
        let u = UID.replace('-', "_");
        const OTHER: &str = "0000000000000000000000000000000000000000000000000000000000000bad";
        for (p, want) in [
            // A service whose cgroup is delegated to its user (Delegate=yes, User=alice):
            // what it makes below is the service's.
            ("/system.slice/alice.service/job_42/step_0".to_string(), Some("unit:alice.service".to_string())),
            (format!("/system.slice/alice.service/kubepods/pod{UID}/{CID}"), Some("unit:alice.service".into())),
            (format!("/system.slice/alice.service/kubepods.slice/kubepods-pod{u}.slice"), Some("unit:alice.service".into())),
            // Not at the root of the hierarchy, or not in slurmstepd's layout.
            ("/job_42/step_0".into(), None),
            ("/slurm/job_42/step_0".into(), None),
            ("/slurm/uid_1000/extra/job_42/step_0".into(), None),
            ("/system.slice/job_42/step_0".into(), None),
            ("/system.slice/slurmstepd.scope/extra/job_42/step_0".into(), None),
            ("/system.slice/slurmstepd.scope/system".into(), None),
            (format!("/docker/abc/kubepods/pod{UID}/{CID}"), None),
            (format!("/machine/kubepods-pod{u}.slice/x"), None),
            // Slurm's own layouts, with several slurmd on a node too (MULTIPLE_SLURMD).
            ("/system.slice/node1_slurmstepd.scope/job_42/step_0/user/task_0".into(), Some("slurm:42.0".into())),
            ("/slurm_node1/uid_1000/job_42/step_extern".into(), Some("slurm:42.extern".into())),
            // A pod's container that writes its own cgroup stays that pod's container,
            // whatever it names below.
            (
                format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice/cri-containerd-{CID}.scope/job_42/step_0"),
                Some(format!("pod:{UID}/{}", &CID[..12])),
            ),
            (format!("/kubepods/burstable/pod{UID}/{CID}/{OTHER}"), Some(format!("pod:{UID}/{}", &CID[..12]))),
            (
                format!("/kubepods/burstable/pod{UID}/{CID}/kubepods/pod7f3e2d1c-0b9a-4c8d-9e7f-000000000000/x"),
                Some(format!("pod:{UID}/{}", &CID[..12])),
            ),
            // A kubelet with a cgroup root of its own (kind: --cgroup-root=/kubelet),
            // systemd driver: the slices say where they are.
            (
                format!("/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod{u}.slice/cri-containerd-{CID}.scope"),
                Some(format!("pod:{UID}/{}", &CID[..12])),
            ),
            // Slices that do not nest as systemd names them are not systemd's.
            (format!("/kubepods.slice/other-burstable.slice/kubepods-burstable-pod{u}.slice"), None),
            // A deleted cgroup still names its workload.
            ("/system.slice/slurmstepd.scope/job_42/step_0/user/task_0 (deleted)".into(), Some("slurm:42.0".into())),
        ] {
            assert_eq!(id(&p), want, "{p}");
        }
    }

    #[test]
    fn seen_from_a_cgroup_namespace_the_path_must_fit_the_layout_from_where_it_starts() {
        let u = UID.replace('-', "_");
        for (p, want) in [
            (format!("/../../pod{UID}/{CID}"), Some(format!("pod:{UID}/{}", &CID[..12]))),
            (format!("/../../../besteffort/pod{UID}"), Some(format!("pod:{UID}"))),
            (
                format!("/../../../kubepods-besteffort.slice/kubepods-besteffort-pod{u}.slice/cri-containerd-{CID}.scope"),
                Some(format!("pod:{UID}/{}", &CID[..12])),
            ),
            ("/../../../system.slice/slurmstepd.scope/job_42/step_0/user/task_0".into(), Some("slurm:42.0".into())),
            ("/../../system.slice/nccl-tests.service".into(), Some("unit:nccl-tests.service".into())),
            // Names that fit no layout from where they start.
            (format!("/../../alice/pod{UID}/{CID}"), None),
            ("/../../home/job_42/step_0".into(), None),
            (format!("/../x/../pod{UID}/{CID}"), None),
        ] {
            assert_eq!(id(&p), want, "{p}");
        }
    }

    #[test]
    fn the_workload_carries_its_own_cgroup_path() {
        let u = UID.replace('-', "_");
        let pod_scope = format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice/cri-containerd-{CID}.scope");
        for (file, path) in [
            (
                "0::/system.slice/slurmstepd.scope/job_42/step_0/user/task_0\n".to_string(),
                "/system.slice/slurmstepd.scope/job_42/step_0".to_string(),
            ),
            (
                "12:memory:/slurm/uid_1000/job_9/step_batch/task_0\n1:name=systemd:/user.slice\n"
                    .into(),
                "/slurm/uid_1000/job_9/step_batch".into(),
            ),
            (format!("0::{pod_scope}/sub\n"), pod_scope.clone()),
            (
                format!("0::/kubepods/besteffort/pod{UID}\n"),
                format!("/kubepods/besteffort/pod{UID}"),
            ),
            (
                "0::/system.slice/nccl-tests.service/worker\n".into(),
                "/system.slice/nccl-tests.service".into(),
            ),
            (
                format!("0::/../../pod{UID}/{CID}\n"),
                format!("/../../pod{UID}/{CID}"),
            ),
        ] {
            let mut a = BTreeMap::new();
            from_cgroup_file(&file, "x").attributes(&mut a);
            assert_eq!(
                a.get("rdma.workload.cgroup").map(String::as_str),
                Some(path.as_str()),
                "{file}"
            );
        }
        // Known by its command only: no path (a login session's cgroup is one per login,
        // not a workload's).
        let mut a = BTreeMap::new();
        from_cgroup_file(
            "0::/user.slice/user-0.slice/session-3.scope\n",
            "ib_write_bw",
        )
        .attributes(&mut a);
        assert!(!a.contains_key("rdma.workload.cgroup"), "{a:?}");
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
        fn a_match_only_in_the_allowed_layouts(up in 0usize..3, segs in proptest::collection::vec(
            proptest::prop_oneof![
                proptest::strategy::Just("kubepods".to_string()),
                proptest::strategy::Just("burstable".to_string()),
                proptest::strategy::Just("kubepods.slice".to_string()),
                proptest::strategy::Just("kubepods-burstable.slice".to_string()),
                proptest::strategy::Just(format!("kubepods-burstable-pod{}.slice", UID.replace('-', "_"))),
                proptest::strategy::Just(format!("pod{UID}")),
                proptest::strategy::Just(CID.to_string()),
                proptest::strategy::Just(format!("cri-containerd-{CID}.scope")),
                proptest::strategy::Just("system.slice".to_string()),
                proptest::strategy::Just("slurmstepd.scope".to_string()),
                proptest::strategy::Just("slurm".to_string()),
                proptest::strategy::Just("user.slice".to_string()),
                proptest::strategy::Just("user-1000.slice".to_string()),
                proptest::strategy::Just("user@1000.service".to_string()),
                "uid_[0-9]{1,4}",
                "job_[0-9]{1,4}",
                "step_[0-9a-z]{1,5}",
                "[a-z]{1,6}\\.(slice|scope|service)",
                "[a-z_.]{1,8}",
            ], 0..8)) {
            let path = format!(
                "/{}",
                std::iter::repeat_n("..", up)
                    .chain(segs.iter().map(String::as_str))
                    .collect::<Vec<_>>()
                    .join("/")
            );
            if let Some(w) = from_cgroup_path(&path) {
                // Every workload a path names carries the path that names it, a prefix of
                // the process's own.
                let c = w.cgroup().expect("a workload from a path has its path");
                proptest::prop_assert!(path == c || path.starts_with(&format!("{c}/")), "{c} of {path}");
                proptest::prop_assert!(
                    !segs.iter().any(|s| s.starts_with("user@")),
                    "matched below user@: {path} -> {w:?}"
                );
                if up == 0 {
                    // From the root: only where the kubelet, slurmstepd or systemd start.
                    let top = segs[0].as_str();
                    let top_slice = top.ends_with(".slice") && !top.contains('-');
                    let ok = match &w {
                        Workload::Pod { .. } => top == "kubepods" || top_slice,
                        Workload::Slurm { .. } => {
                            (top == "system.slice" && segs[1].ends_with("slurmstepd.scope"))
                                || ((top == "slurm" || top.starts_with("slurm_"))
                                    && segs[1].starts_with("uid_"))
                        }
                        Workload::Unit { .. } => top_slice || top.ends_with(".service"),
                        _ => false,
                    };
                    proptest::prop_assert!(ok, "{path} -> {w:?}");
                }
            }
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
