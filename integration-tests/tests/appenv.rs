//! `rocewatch env` and `rocewatch doctor --env` on the fixture trees: the mlx5 dual port
//! (RoCE v2 GID at index 3, ToS 106 on mlx5_0), the IB HCA (IB form, a DOWN port), and a
//! copy of the mlx5 tree whose second port holds its RoCE v2 IPv4 GID at index 5.

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::support::*;

fn env(root: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["env", "--sysfs-root", root.to_str().unwrap()];
    args.extend_from_slice(extra);
    rocewatch(&args, &[])
}

fn mlx5() -> std::path::PathBuf {
    fixture("mlx5-roce-dual-port")
}

#[test]
fn env_prints_what_nccl_ucx_and_open_mpi_need_on_the_mlx5_host() {
    let o = env(&mlx5(), &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "export NCCL_IB_HCA==mlx5_0:1,mlx5_1:1\n\
         export NCCL_IB_GID_INDEX=3\n\
         export NCCL_IB_TC=106\n\
         export NCCL_SOCKET_IFNAME==ens1f0np0,ens1f1np1\n\
         export UCX_NET_DEVICES=mlx5_0:1,mlx5_1:1\n\
         export UCX_IB_GID_INDEX=3\n\
         export UCX_IB_TRAFFIC_CLASS=106\n\
         export OMPI_MCA_pml=ucx\n\
         export OMPI_MCA_btl=^openib\n"
    );
    assert_eq!(stderr(&o), "", "nothing to warn about");
    // The GID index is the one of the netdev's IPv4 address, as discover shows it.
    let d: Value = serde_json::from_str(&stdout(&rocewatch(
        &[
            "discover",
            "--sysfs-root",
            mlx5().to_str().unwrap(),
            "--json",
        ],
        &[],
    )))
    .unwrap();
    for dev in d["devices"].as_array().unwrap() {
        let g = dev["ports"][0]["gids"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["type"] == "RoCE v2" && g["gid"].as_str().unwrap().contains("ffff"))
            .unwrap();
        assert_eq!(g["index"], 3, "{}", dev["name"]);
    }
    // --for and --device narrow it; JSON says the ports.
    let o = env(
        &mlx5(),
        &["--for", "nccl", "--device", "mlx5_1", "--format", "json"],
    );
    let j: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(j["variables"]["NCCL_IB_HCA"], "=mlx5_1:1");
    assert!(j["variables"].get("UCX_NET_DEVICES").is_none(), "{j}");
    assert_eq!(j["ports"][0]["gid_index"], 3);
    assert_eq!(j["ports"][0]["ipv4"], "10.0.1.1");
    // mlx5_1 has no RDMA CM directory: the traffic class comes from the desired state.
    assert!(j["variables"].get("NCCL_IB_TC").is_none(), "{j}");
    assert!(
        j["warnings"][0]
            .as_str()
            .unwrap()
            .contains("no RoCE traffic class"),
        "{j}"
    );
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("qos.toml");
    std::fs::write(
        &cfg,
        "[[qos.desired]]\ndevices = \"mlx5_*\"\nsettings = { roce_tos = \"106\" }\n",
    )
    .unwrap();
    let o = env(
        &mlx5(),
        &[
            "--for",
            "nccl",
            "--device",
            "mlx5_1",
            "--config",
            cfg.to_str().unwrap(),
        ],
    );
    assert!(
        stdout(&o).contains("export NCCL_IB_TC=106\n"),
        "{}",
        stdout(&o)
    );
    // A glob that matches nothing: nothing to print, said, exit 1.
    let o = env(&mlx5(), &["--device", "bnxt_*"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("no RDMA device matching --device"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn env_for_slurm_is_a_task_prolog_that_prints_the_same_exports() {
    let o = env(&mlx5(), &["--format", "slurm"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("rdma-env.sh");
    std::fs::write(&script, stdout(&o)).unwrap();
    let run = Command::new("sh")
        .arg(&script)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&run.stdout),
        stdout(&env(&mlx5(), &[]))
    );
    assert!(stdout(&o).starts_with("#!/bin/sh\n# Slurm TaskProlog"));
}

#[test]
fn env_on_an_infiniband_hca_has_no_gid_index_and_names_the_down_port() {
    let o = env(&fixture("ib-hca"), &["--for", "nccl"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "export NCCL_IB_HCA==mlx4_0:1\nexport NCCL_SOCKET_IFNAME==ib0\n"
    );
    assert!(
        stderr(&o).contains("mlx4_0:2: port is DOWN"),
        "{}",
        stderr(&o)
    );
}

/// A copy of the mlx5 tree whose mlx5_1 holds its RoCE v2 IPv4 GID at index 5 (a host
/// where an address was added in another order).
fn shifted_gid_tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let st = Command::new("cp")
        .args(["-a", mlx5().to_str().unwrap(), dir.path().to_str().unwrap()])
        .status()
        .unwrap();
    assert!(st.success());
    let port = dir
        .path()
        .join("sys/devices/pci0000:00/0000:3b:00.1/infiniband/mlx5_1/ports/1");
    for sub in ["gids", "gid_attrs/types", "gid_attrs/ndevs"] {
        std::fs::rename(port.join(sub).join("3"), port.join(sub).join("5")).unwrap();
        // Index 3 keeps a RoCE v1 copy of the address, as a kernel lists both types.
        std::fs::copy(port.join(sub).join("2"), port.join(sub).join("3")).unwrap();
    }
    dir
}

#[test]
fn ports_whose_gid_index_differs_are_named() {
    let tree = shifted_gid_tree();
    let o = env(&tree.path().join("sys"), &["--for", "nccl"]);
    let e = stderr(&o);
    assert!(
        e.contains("mlx5_1:1: its RoCE v2 IPv4 GID is at index 5, not 3 like the other ports")
            || e.contains(
                "mlx5_0:1: its RoCE v2 IPv4 GID is at index 3, not 5 like the other ports"
            ),
        "{e}"
    );
    assert!(e.contains("NCCL_IB_ROCE_VERSION_NUM=2"), "{e}");
    // doctor --env: index 3 is RoCE v1 on mlx5_1 now.
    let (_, checks) = env_checks(&tree.path().join("sys"), "NCCL_IB_GID_INDEX=3\n");
    let c = checks
        .iter()
        .find(|c| c["subject"] == "NCCL_IB_GID_INDEX")
        .unwrap_or_else(|| panic!("{checks:#?}"));
    assert_eq!(c["status"], "fail", "{c}");
    assert!(
        c["evidence"]
            .as_str()
            .unwrap()
            .starts_with("mlx5_1:1: GID 3 is"),
        "{c}"
    );
    assert!(
        c["evidence"]
            .as_str()
            .unwrap()
            .contains("skips the lossless priority"),
        "{c}"
    );
}

fn env_checks(root: &Path, job: &str) -> (Option<i32>, Vec<Value>) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("job.env");
    std::fs::write(&file, job).unwrap();
    let o = rocewatch(
        &[
            "doctor",
            "--sysfs-root",
            root.to_str().unwrap(),
            "--window",
            "100ms",
            "--json",
            "--env",
            file.to_str().unwrap(),
        ],
        &[],
    );
    let v: Value =
        serde_json::from_str(&stdout(&o)).unwrap_or_else(|e| panic!("{e}: {}", stderr(&o)));
    let env: Vec<Value> = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["check"] == "env")
        .cloned()
        .collect();
    (o.status.code(), env)
}

#[test]
fn doctor_env_checks_each_variable_with_the_fix() {
    // What `rocewatch env` prints passes.
    let good = stdout(&env(&mlx5(), &[]));
    let (_, checks) = env_checks(&mlx5(), &good);
    assert!(checks.len() >= 7, "{checks:#?}");
    for c in &checks {
        assert!(c["status"] == "pass" || c["status"] == "skip", "{c}");
    }
    // A job that would miss the RDMA path, variable by variable.
    let (code, checks) = env_checks(
        &mlx5(),
        "export NCCL_IB_HCA=mlx5_0:1,mlx5_9\nNCCL_IB_GID_INDEX=0\nNCCL_SOCKET_IFNAME=ens1f1np1\nUCX_TLS=tcp,sm,self\nNCCL_IB_DISABLE=1\n",
    );
    assert_eq!(code, Some(1), "a failed check fails doctor");
    let by = |subject: &str| -> &Value {
        checks
            .iter()
            .find(|c| c["subject"] == subject)
            .unwrap_or_else(|| panic!("no check of {subject}: {checks:#?}"))
    };
    let c = by("NCCL_IB_GID_INDEX");
    assert_eq!(c["status"], "fail");
    assert!(
        c["evidence"].as_str().unwrap().contains("GID 0 is fe80"),
        "{c}"
    );
    assert!(c["evidence"].as_str().unwrap().contains("RoCE v1"), "{c}");
    assert_eq!(c["fix"], "set NCCL_IB_GID_INDEX=3");
    let c = by("NCCL_IB_HCA");
    assert_eq!(c["status"], "fail");
    assert!(
        c["evidence"]
            .as_str()
            .unwrap()
            .contains("no RDMA port named mlx5_9"),
        "{c}"
    );
    assert_eq!(
        by("NCCL_SOCKET_IFNAME")["status"],
        "pass",
        "ens1f1np1 has 10.0.1.1"
    );
    assert_eq!(by("UCX_TLS")["status"], "fail");
    assert_eq!(by("NCCL_IB_DISABLE")["status"], "fail");
    let c = by("NCCL_IB_TC");
    assert_eq!(c["status"], "warn", "unset but configured: {c}");
    assert_eq!(c["fix"], "set NCCL_IB_TC=106");
    // UCX names ports exactly (dev:port) and takes `all`; NCCL_SOCKET_IFNAME entries are
    // prefixes unless the list starts with `=`.
    let (_, checks) = env_checks(
        &mlx5(),
        "UCX_NET_DEVICES=mlx5_0\nNCCL_SOCKET_IFNAME=ens1f\n",
    );
    let c = &checks
        .iter()
        .find(|c| c["subject"] == "UCX_NET_DEVICES")
        .unwrap();
    assert_eq!(
        c["status"], "fail",
        "UCX matches no port by a bare device name: {c}"
    );
    let c = &checks
        .iter()
        .find(|c| c["subject"] == "NCCL_SOCKET_IFNAME")
        .unwrap();
    assert_eq!(c["status"], "pass", "{c}");
    let (_, checks) = env_checks(&mlx5(), "UCX_NET_DEVICES=all\nNCCL_SOCKET_IFNAME==ens1f\n");
    assert_eq!(
        checks
            .iter()
            .find(|c| c["subject"] == "UCX_NET_DEVICES")
            .unwrap()["status"],
        "pass"
    );
    assert_eq!(
        checks
            .iter()
            .find(|c| c["subject"] == "NCCL_SOCKET_IFNAME")
            .unwrap()["status"],
        "skip",
        "exact: no interface is named ens1f here (a tree cannot tell others)"
    );
    // A DOWN port picked up by a prefix: NCCL skips it, a warning.
    let (_, checks) = env_checks(&fixture("ib-hca"), "NCCL_IB_HCA=mlx4_0\n");
    assert_eq!(checks[0]["status"], "warn", "{}", checks[0]);
    // A DOWN port named, on the IB HCA.
    let (_, checks) = env_checks(&fixture("ib-hca"), "NCCL_IB_HCA=mlx4_0:2\n");
    let c = &checks[0];
    assert_eq!(c["status"], "fail", "{c}");
    assert!(
        c["evidence"].as_str().unwrap().contains("mlx4_0:2 is DOWN"),
        "{c}"
    );
    assert_eq!(c["fix"], "set NCCL_IB_HCA==mlx4_0:1");
}

/// A copy of the mlx5 tree whose first netdev is called `$(touch${IFS}P)`: a valid Linux
/// name (net/core/dev.c `dev_valid_name` forbids only '/', ':' and white space).
pub fn hostile_netdev_tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let st = Command::new("cp")
        .args(["-a", mlx5().to_str().unwrap(), dir.path().to_str().unwrap()])
        .status()
        .unwrap();
    assert!(st.success());
    let sys = dir.path().join("sys");
    let name = "$(touch${IFS}P)";
    let fun = sys.join("devices/pci0000:00/0000:3b:00.0");
    std::fs::rename(fun.join("net/ens1f0np0"), fun.join("net").join(name)).unwrap();
    std::fs::remove_file(sys.join("class/net/ens1f0np0")).unwrap();
    std::os::unix::fs::symlink(
        format!("../../devices/pci0000:00/0000:3b:00.0/net/{name}"),
        sys.join("class/net").join(name),
    )
    .unwrap();
    let ndevs = fun.join("infiniband/mlx5_0/ports/1/gid_attrs/ndevs");
    for e in std::fs::read_dir(&ndevs).unwrap() {
        std::fs::write(e.unwrap().path(), format!("{name}\n")).unwrap();
    }
    dir
}

/// Runs `script` with `sh` in an empty directory: its standard output and the files it
/// left there (a name that ran a command would leave one).
fn run_in_empty_dir(script: &str) -> (String, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let file = dir.path().join("out.sh");
    std::fs::write(&file, script).unwrap();
    let syntax = Command::new("sh").arg("-n").arg(&file).output().unwrap();
    assert!(
        syntax.status.success(),
        "sh -n: {}\n{script}",
        String::from_utf8_lossy(&syntax.stderr)
    );
    let run = Command::new("sh")
        .arg(&file)
        .current_dir(cwd.path())
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "sh: {}\n{script}",
        String::from_utf8_lossy(&run.stderr)
    );
    let left = std::fs::read_dir(cwd.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    (String::from_utf8_lossy(&run.stdout).into_owned(), left)
}

#[test]
fn env_output_runs_nothing_a_netdev_or_host_name_holds() {
    let tree = hostile_netdev_tree();
    let sys = tree.path().join("sys");
    let cfg = tree.path().join("host.toml");
    std::fs::write(&cfg, "[agent]\nhost_name = \"n1\\ntouch H\"\n").unwrap();
    let cfg = cfg.to_str().unwrap();
    // The shell form: the value is the name, exactly.
    let o = env(&sys, &["--for", "nccl", "--config", cfg]);
    assert!(o.status.success(), "{}", stderr(&o));
    let (out, left) = run_in_empty_dir(&format!(
        "{}printf '%s' \"$NCCL_SOCKET_IFNAME\"\n",
        stdout(&o)
    ));
    assert!(left.is_empty(), "the shell output ran a command: {left:?}");
    assert_eq!(out, "=$(touch${IFS}P),ens1f1np1");
    // The TaskProlog prints the line slurmstepd reads, and runs nothing.
    let o = env(
        &sys,
        &["--for", "nccl", "--format", "slurm", "--config", cfg],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let (out, left) = run_in_empty_dir(&stdout(&o));
    assert!(left.is_empty(), "the prolog ran a command: {left:?}");
    assert!(
        stdout(&o).contains("# Values of n1\\ntouch H,"),
        "{}",
        stdout(&o)
    );
    assert!(
        out.lines()
            .any(|l| l == "export NCCL_SOCKET_IFNAME==$(touch${IFS}P),ens1f1np1"),
        "{out}"
    );
    assert!(out.lines().all(|l| l.starts_with("export ")), "{out}");
}
