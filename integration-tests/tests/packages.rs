//! The packages (`scripts/package.sh`), built from this build's binaries and installed on
//! this machine with dpkg: the user and directories, the unit verified, `--version`, the
//! manual page, bash completion, the plugin found where the package puts it; the packaged
//! Slurm health check drains and resumes a real local Slurm's node in the packaged state
//! directory (`rocewatch_slurm::harness`; SKIPPED without Slurm); an upgrade
//! keeps a locally edited configuration and restarts a running agent; removal stops it;
//! purge leaves nothing behind. The .rpm is inspected with rpm.
//!
//! No systemd runs here (no PID 1 of its own): dpkg runs in a mount namespace where
//! `/run/systemd/system` exists and `systemctl` is a script that records its arguments.
//! The maintainer scripts are tested at systemd's contract (`try-restart` restarts a unit
//! only if it runs, `stop` stops it), not against a running systemd.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support::*;

fn sh(script: &str) -> Output {
    Command::new("sh").arg("-c").arg(script).output().unwrap()
}

fn ok(what: &str, o: &Output) -> String {
    assert!(
        o.status.success(),
        "{what}: {}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `dpkg ARGS` in a mount namespace where systemd seems to run, `systemctl` appends its
/// arguments to `log`, and a `policy-rc.d` the machine has (a container image's, which
/// forbids every action: `deb-systemd-invoke` then calls nothing) allows them.
fn dpkg(fake: &Path, log: &Path, args: &str) -> Output {
    let script = format!(
        "set -e; mount -t tmpfs rw-run /run; mkdir -p /run/systemd/system; \
         mount --bind {fake} /usr/bin/systemctl; \
         if [ -e /usr/sbin/policy-rc.d ]; then printf '#!/bin/sh\\nexit 0\\n' > /run/policy-rc.d; \
         chmod 0755 /run/policy-rc.d; mount --bind /run/policy-rc.d /usr/sbin/policy-rc.d; fi; \
         DEBIAN_FRONTEND=noninteractive ROCEWATCH_SYSTEMCTL_LOG={log} dpkg {args} </dev/null",
        fake = fake.display(),
        log = log.display(),
    );
    Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .output()
        .unwrap()
}

fn owner_mode(p: &str) -> String {
    ok(p, &sh(&format!("stat -c '%U:%G %a' {p}")))
        .trim()
        .to_string()
}

fn calls(log: &Path) -> String {
    std::fs::read_to_string(log).unwrap_or_default()
}

/// Builds the packages (twice: the second a revision up, for the upgrade), installs,
/// upgrades, removes and purges them. Runs as root on a Debian machine without
/// rocewatch installed (CI's), and refuses otherwise.
#[test]
fn packages_install_upgrade_remove_and_purge_cleanly() {
    if !sh("id -u").stdout.starts_with(b"0\n") {
        return missing("root (dpkg -i)", "run scripts/test.sh as root");
    }
    for tool in ["dpkg-deb", "dpkg-shlibdeps", "rpmbuild", "unshare", "man"] {
        if !sh(&format!("command -v {tool}")).status.success() {
            return missing(tool, "run scripts/install-test-deps.sh");
        }
    }
    assert!(
        !sh("dpkg -s rocewatch 2>/dev/null | grep -q '^Status: install ok'")
            .status
            .success(),
        "rocewatch is installed on this machine: this test installs and purges its own; remove it first"
    );
    // What an interrupted run of this test leaves (configuration files, the user) goes
    // first; a rocewatch user without the package is someone else's: refuse.
    let _ = sh("dpkg -s rocewatch >/dev/null 2>&1 && dpkg --purge rocewatch-probe-verbs rocewatch");
    assert!(
        !sh("getent passwd rocewatch").status.success(),
        "a rocewatch user exists on this machine without the package: this test creates and removes its own"
    );
    let a = artifacts();
    let bins = tempfile::tempdir().unwrap();
    for f in [&a.rocewatch, &a.probe_so] {
        std::fs::copy(f, bins.path().join(f.file_name().unwrap())).unwrap();
    }
    let out = tempfile::tempdir().unwrap();
    let build = |release: &str, dir: &Path| {
        let o = Command::new(root().join("scripts/package.sh"))
            .args(["--fast", "--release", release, "--bin-dir"])
            .arg(bins.path())
            .arg("--out")
            .arg(dir)
            .output()
            .unwrap();
        ok("scripts/package.sh", &o)
    };
    let built = build("1", out.path());
    let version = env!("CARGO_PKG_VERSION");
    let deb = |dir: &Path, pkg: &str, rel: &str| -> PathBuf {
        let arch = ok("arch", &sh("dpkg --print-architecture"));
        dir.join(format!("{pkg}_{version}-{rel}_{}.deb", arch.trim()))
    };
    let (agent1, probe1) = (
        deb(out.path(), "rocewatch", "1"),
        deb(out.path(), "rocewatch-probe-verbs", "1"),
    );
    assert!(agent1.is_file() && probe1.is_file(), "{built}");

    // deploy/Containerfile (not built here: no base image can be pulled) installs these
    // packages by name and runs what the DaemonSet asks.
    let cf = std::fs::read_to_string(root().join("deploy/Containerfile")).unwrap();
    for want in [
        "COPY rocewatch_*.deb rocewatch-probe-verbs_*.deb /tmp/pkgs/",
        r#"ENTRYPOINT ["/usr/bin/rocewatch"]"#,
        r#"CMD ["run", "--config", "/etc/rocewatch/rocewatch.toml"]"#,
    ] {
        assert!(cf.contains(want), "{want} not in deploy/Containerfile");
    }
    let ds =
        std::fs::read_to_string(root().join("deploy/kubernetes/rocewatch-daemonset.yaml")).unwrap();
    assert!(ds.contains(r#"args: ["run", "--config", "/etc/rocewatch/rocewatch.toml"]"#));

    // The .rpm: its files were checked against packaging/contents.txt by package.sh;
    // here its dependencies and scriptlets.
    let machine = ok("uname", &sh("uname -m"));
    let rpm = |pkg: &str| {
        out.path()
            .join(format!("{pkg}-{version}-1.{}.rpm", machine.trim()))
    };
    let req = ok(
        "rpm -qpR",
        &sh(&format!(
            "rpm -qpR {}",
            rpm("rocewatch-probe-verbs").display()
        )),
    );
    for want in [
        "libibverbs.so.1()(64bit)",
        "librdmacm.so.1()(64bit)",
        &format!("rocewatch = {version}-1"),
    ] {
        assert!(
            req.lines().any(|l| l.trim() == want),
            "{want} not in:\n{req}"
        );
    }
    let req = ok(
        "rpm -qpR",
        &sh(&format!("rpm -qpR {}", rpm("rocewatch").display())),
    );
    assert!(
        !req.contains("libibverbs"),
        "the agent links no libibverbs:\n{req}"
    );
    let scripts = ok(
        "rpm --scripts",
        &sh(&format!("rpm -qp --scripts {}", rpm("rocewatch").display())),
    );
    for want in [
        "useradd -r -g rocewatch -d /var/lib/rocewatch",
        "systemctl --no-reload disable --now rocewatch.service",
        "systemctl try-restart rocewatch.service",
    ] {
        assert!(
            scripts.contains(want),
            "{want} not in the scriptlets:\n{scripts}"
        );
    }
    let commands: Vec<&str> = scripts
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .collect();
    assert!(
        !commands
            .iter()
            .any(|l| l.contains("enable") || l.contains("preset") || l.contains("systemctl start")),
        "nothing enabled or started by surprise:\n{scripts}"
    );
    for tag in ["PREIN", "POSTIN", "PREUN", "POSTUN"] {
        let body = ok(
            tag,
            &sh(&format!(
                "rpm -qp --qf '%{{{tag}}}' {}",
                rpm("rocewatch").display()
            )),
        );
        let check = Command::new("sh")
            .args(["-n", "-c", &body])
            .output()
            .unwrap();
        ok(&format!("sh -n on the {tag} scriptlet:\n{body}"), &check);
    }
    let files = ok(
        "rpm -qpl",
        &sh(&format!(
            "rpm -qp --qf '[%{{FILEFLAGS:fflags}} %{{FILENAMES}}\\n]' {}",
            rpm("rocewatch").display()
        )),
    );
    assert!(
        files
            .lines()
            .any(|l| l.starts_with("cn") && l.ends_with(" /etc/rocewatch/rocewatch.toml")),
        "the configuration is %config(noreplace):\n{files}"
    );

    // Install, in a namespace where systemd seems to run.
    let t = tempfile::tempdir().unwrap();
    let log = t.path().join("systemctl.log");
    let fake = t.path().join("systemctl");
    std::fs::write(
        &fake,
        "#!/bin/sh\necho \"$*\" >> \"$ROCEWATCH_SYSTEMCTL_LOG\"\n",
    )
    .unwrap();
    ok("chmod", &sh(&format!("chmod 0755 {}", fake.display())));
    let before = ok(
        "dpkg-deb -c",
        &sh(&format!(
            "dpkg-deb -c {} && dpkg-deb -c {}",
            agent1.display(),
            probe1.display()
        )),
    );
    let installed = dpkg(
        &fake,
        &log,
        &format!("-i {} {}", agent1.display(), probe1.display()),
    );
    let purge_anyway = scopeguard(|| {
        let _ = sh("dpkg --purge rocewatch-probe-verbs rocewatch >/dev/null 2>&1");
    });
    ok("dpkg -i", &installed);
    let c = calls(&log);
    assert!(c.contains("daemon-reload"), "{c}");
    for never in ["enable", "start", "restart"] {
        assert!(
            !c.contains(never),
            "a first install ran systemctl {never}: {c}"
        );
    }
    let user = ok("getent", &sh("getent passwd rocewatch"));
    assert!(
        user.contains(":/var/lib/rocewatch:") && user.trim_end().ends_with("nologin"),
        "{user}"
    );
    assert_eq!(owner_mode("/var/lib/rocewatch"), "rocewatch:rocewatch 750");
    assert_eq!(
        owner_mode("/etc/rocewatch/rocewatch.toml"),
        "root:rocewatch 640"
    );
    ok(
        "systemd-analyze verify",
        &sh("systemd-analyze verify /usr/lib/systemd/system/rocewatch.service"),
    );
    let v = ok("--version", &sh("/usr/bin/rocewatch --version"));
    assert!(
        v.starts_with(&format!("rocewatch {version} (git ")) && v.contains(", plugin ABI 1."),
        "{v}"
    );
    ok(
        "config check",
        &sh("/usr/bin/rocewatch config check /etc/rocewatch/rocewatch.toml"),
    );
    let page = ok("man", &sh("MANWIDTH=100 man -P cat rocewatch 2>&1"));
    assert!(
        page.contains("SYNOPSIS") && page.contains("rocewatch-probe(1)"),
        "{page}"
    );
    let page = ok(
        "man",
        &sh("MANWIDTH=100 man -P cat rocewatch-qos-apply 2>&1"),
    );
    assert!(page.contains("--yes"), "{page}");
    let completed = ok(
        "bash completion",
        &sh("bash -c '. /usr/share/bash-completion/completions/rocewatch && COMP_WORDS=(rocewatch pro) COMP_CWORD=1 && _rocewatch rocewatch pro rocewatch && echo \"${COMPREPLY[@]}\"'"),
    );
    assert!(
        completed.split_whitespace().any(|w| w == "probe"),
        "{completed}"
    );
    // The plugin is found where the package puts it, with no ROCEWATCH_PLUGIN_DIR.
    let p = sh("env -u ROCEWATCH_PLUGIN_DIR /usr/bin/rocewatch probe 127.0.0.1 --count 1 --timeout 1s 2>&1");
    let said = String::from_utf8_lossy(&p.stdout);
    assert!(!said.contains("was not found"), "{said}");

    // The packaged Slurm health check, as slurmd runs it, in the packaged state directory.
    packaged_slurm_health_check();

    // Upgrade: a revision up, with a local edit and state; the agent (if it runs) is
    // restarted, the edit kept.
    std::fs::write(
        "/etc/rocewatch/rocewatch.toml",
        std::fs::read_to_string("/etc/rocewatch/rocewatch.toml").unwrap() + "\n# edited here\n",
    )
    .unwrap();
    ok(
        "state",
        &sh("install -o rocewatch -g rocewatch -m 0640 /dev/null /var/lib/rocewatch/audit.jsonl"),
    );
    let out2 = tempfile::tempdir().unwrap();
    build("2", out2.path());
    std::fs::remove_file(&log).unwrap();
    let upgraded = dpkg(
        &fake,
        &log,
        &format!(
            "-i {} {}",
            deb(out2.path(), "rocewatch", "2").display(),
            deb(out2.path(), "rocewatch-probe-verbs", "2").display()
        ),
    );
    ok("dpkg -i (upgrade)", &upgraded);
    let c = calls(&log);
    assert!(
        c.lines().any(|l| l == "try-restart rocewatch.service"),
        "{c}"
    );
    assert!(
        !c.contains("enable") && !c.lines().any(|l| l.starts_with("stop")),
        "{c}"
    );
    let conf = std::fs::read_to_string("/etc/rocewatch/rocewatch.toml").unwrap();
    assert!(
        conf.ends_with("# edited here\n"),
        "the local edit was lost:\n{conf}"
    );
    assert_eq!(
        owner_mode("/etc/rocewatch/rocewatch.toml"),
        "root:rocewatch 640"
    );
    let status = ok("dpkg -s", &sh("dpkg -s rocewatch"));
    assert!(
        status.contains(&format!("Version: {version}-2")),
        "{status}"
    );

    // Removal stops the agent and keeps the state, the configuration and the user.
    std::fs::remove_file(&log).unwrap();
    ok(
        "dpkg -r",
        &dpkg(&fake, &log, "-r rocewatch-probe-verbs rocewatch"),
    );
    let c = calls(&log);
    assert!(c.lines().any(|l| l == "stop rocewatch.service"), "{c}");
    assert!(Path::new("/var/lib/rocewatch/audit.jsonl").exists());
    assert!(Path::new("/etc/rocewatch/rocewatch.toml").exists());
    assert!(sh("getent passwd rocewatch").status.success());
    assert!(!Path::new("/usr/bin/rocewatch").exists());

    // Purge removes everything the packages put or made.
    ok(
        "dpkg --purge",
        &dpkg(&fake, &log, "--purge rocewatch-probe-verbs rocewatch"),
    );
    drop(purge_anyway);
    for gone in ["/var/lib/rocewatch", "/etc/rocewatch"] {
        assert!(!Path::new(gone).exists(), "{gone} left after purge");
    }
    assert!(
        !sh("getent passwd rocewatch").status.success(),
        "the user is left"
    );
    assert!(
        !sh("getent group rocewatch").status.success(),
        "the group is left"
    );
    let left: Vec<&str> = before
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .map(|p| p.trim_start_matches('.'))
        .filter(|p| !p.ends_with('/') && Path::new(p).exists())
        .collect();
    assert!(left.is_empty(), "left after purge: {left:?}");
}

/// The installed `/usr/share/rocewatch/slurm/rocewatch-healthcheck.sh` run as slurmd runs
/// its HealthCheckProgram (root, an environment of `SLURMD_NODENAME` alone, plus
/// `SLURM_CONF` for the test's cluster) against a real local Slurm, with the installed
/// configuration pointed at a fixture tree and the state directory the package made (the
/// `rocewatch` user's, mode 0750): a port DOWN drains the node with rocewatch's reason
/// (the quarantine and its audit stay that user's); fixed, the node is resumed; a
/// quarantine file root cannot parse drains it and keeps it drained. The configuration
/// is put back as installed after.
fn packaged_slurm_health_check() {
    use rocewatch_slurm::harness::{LocalCluster, Options};
    use std::os::unix::fs::MetadataExt;
    let _one = crate::slurm::ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let Some(c) = LocalCluster::start_or_skip(Options::default()) else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let tree = t.path().join("sys");
    ok(
        "cp",
        &sh(&format!(
            "cp -a {} {}",
            fixture("mlx5-roce-dual-port").display(),
            tree.display()
        )),
    );
    let conf_path = "/etc/rocewatch/rocewatch.toml";
    let installed = std::fs::read_to_string(conf_path).unwrap();
    let pointed = installed.replacen(
        "[agent]\n",
        &format!("[agent]\nsysfs_root = {:?}\n", tree.display().to_string()),
        1,
    );
    assert_ne!(pointed, installed, "no [agent] table in {conf_path}");
    std::fs::write(conf_path, pointed).unwrap();
    let put_back = scopeguard(|| std::fs::write(conf_path, &installed).unwrap());
    let port = |state: &str, phys: &str| {
        let p = tree.join("class/infiniband/mlx5_1/ports/1");
        std::fs::write(p.join("state"), state).unwrap();
        std::fs::write(p.join("phys_state"), phys).unwrap();
    };
    let check = || {
        let o = Command::new("env")
            .arg("-i")
            .arg(format!("SLURMD_NODENAME={}", c.node_name()))
            .arg(format!("SLURM_CONF={}", c.conf().display()))
            .arg("/usr/share/rocewatch/slurm/rocewatch-healthcheck.sh")
            .output()
            .unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        (o.status.code().unwrap_or(-1), said)
    };
    let drained = || {
        let n = c.scontrol().show_node(c.node_name()).unwrap();
        n.state
            .is_drain()
            .then(|| n.reason.map(|r| r.text).unwrap_or_default())
    };
    let state = Path::new("/var/lib/rocewatch");
    let quarantine = state.join("quarantine.json");

    port("1: DOWN\n", "3: Disabled\n");
    let (rc, said) = check();
    assert_eq!(rc, 1, "{said}");
    let reason = drained().unwrap_or_else(|| panic!("not drained: {said}\n{}", c.logs()));
    assert!(
        reason.starts_with("rocewatch: mlx5_1/1 ens1f1np1: port DOWN"),
        "{reason}\n{said}"
    );
    let rocewatch_uid: u32 = ok("id", &sh("id -u rocewatch")).trim().parse().unwrap();
    for f in [quarantine.clone(), state.join("audit.jsonl")] {
        let md = std::fs::metadata(&f).unwrap_or_else(|e| panic!("{}: {e}: {said}", f.display()));
        assert_eq!(
            md.uid(),
            rocewatch_uid,
            "{} is not rocewatch's: {said}",
            f.display()
        );
    }

    port("4: ACTIVE\n", "5: LinkUp\n");
    let (rc, said) = check();
    assert_eq!(rc, 0, "{said}");
    assert_eq!(drained(), None, "{said}\n{}", c.logs());
    assert!(!quarantine.exists(), "{said}");

    // A quarantine file root cannot parse: drained, and kept drained.
    std::fs::write(&quarantine, "{").unwrap();
    ok(
        "chown",
        &sh(&format!(
            "chown rocewatch:rocewatch {}",
            quarantine.display()
        )),
    );
    for _ in 0..2 {
        let (rc, said) = check();
        assert_eq!(rc, 1, "{said}");
        let reason = drained().unwrap_or_else(|| panic!("not drained: {said}\n{}", c.logs()));
        assert!(
            reason.starts_with("rocewatch: quarantine"),
            "{reason}\n{said}"
        );
    }
    std::fs::remove_file(&quarantine).unwrap();
    drop(put_back);
}

/// Runs `f` when dropped: the purge that leaves the machine as it was when a check in
/// between fails.
fn scopeguard(f: impl FnOnce()) -> impl Drop {
    struct Guard<F: FnOnce()>(Option<F>);
    impl<F: FnOnce()> Drop for Guard<F> {
        fn drop(&mut self) {
            if let Some(f) = self.0.take() {
                f();
            }
        }
    }
    Guard(Some(f))
}
