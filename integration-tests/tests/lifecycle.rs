//! The agent's life on a host: a steady "unsupported" is said once, a closed standard
//! output is said once and counted while the agent goes on, and a second signal during a
//! final export that hangs ends the agent at once; a reload never ends it (a ready file it
//! cannot write, neither configuration starting), and the ready file is written safely and
//! removed at exit. While neither configuration starts, SIGHUP tries the file again, and
//! a signal ends the agent as every stop does: running actions waited for, then killed
//! and audited.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::prometheus::get;
use crate::support::*;

#[test]
fn a_steady_unsupported_plugin_is_said_once() {
    // Ten collections at 200 ms on a host without RDMA devices: every collector answers
    // unsupported every time; each says so once.
    let o = rocewatch(
        &[
            "run",
            "--sysfs-root",
            fixture("no-devices").to_str().unwrap(),
            "--interval",
            "200ms",
            "--duration",
            "2500ms",
            "--log-level",
            "info",
        ],
        &[("ROCEWATCH_AGENT__JITTER", "0s")],
    );
    let log = stderr(&o);
    assert!(o.status.success(), "{log}");
    for plugin in ["counters-sysfs", "counters-ethtool"] {
        let n = log
            .lines()
            .filter(|l| l.contains(&format!("plugin {plugin} (built-in): unsupported")))
            .count();
        assert_eq!(n, 1, "{plugin} said unsupported {n} times:\n{log}");
    }
}

#[test]
fn a_closed_stdout_is_said_once_and_counted_and_the_agent_goes_on() {
    let mut agent = RunningAgent::start_with(
        &[
            "--stdout",
            "--interval",
            "200ms",
            "--sysfs-root",
            fixture("mlx5-roce-dual-port").to_str().unwrap(),
            "--prometheus-listen",
            "127.0.0.1:0",
        ],
        &[],
        Some(Stdio::piped()),
    );
    // `rocewatch run --stdout | head -c 10`
    let mut out = agent.proc.child.stdout.take().unwrap();
    let mut first = [0u8; 10];
    out.read_exact(&mut first).unwrap();
    drop(out);
    // The next collections (every 200 ms) meet the closed pipe; the counter says when.
    let url = format!("{}/metrics", agent.prometheus_url());
    let counted = "rocewatch_exporter_errors_total{exporter=\"stdout\"} 1";
    let deadline = Instant::now() + Duration::from_secs(20);
    let metrics = loop {
        let (_, metrics) = get(&url, None).unwrap();
        if metrics.lines().any(|l| l == counted) || Instant::now() > deadline {
            break metrics;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    // Collections go on after it: a second later the error is still counted once.
    std::thread::sleep(Duration::from_secs(1));
    let (_, later) = get(&url, None).unwrap();
    let text = agent.stderr();
    assert_eq!(
        text.matches("standard output is closed").count(),
        1,
        "said once:\n{text}"
    );
    assert!(
        metrics.lines().any(|l| l == counted) && later.lines().any(|l| l == counted),
        "counted:\n{metrics}\n{text}"
    );
}

#[test]
fn a_second_signal_during_a_hanging_final_export_exits_at_once() {
    // An OTLP endpoint that accepts connections and never answers.
    let blackhole = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = blackhole.local_addr().unwrap();
    let blackhole_conns = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = std::sync::Arc::clone(&blackhole_conns);
    let held = std::thread::spawn(move || {
        let mut conns = Vec::new();
        for c in blackhole.incoming().take(16) {
            conns.push(c);
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        conns.len()
    });
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("agent.toml");
    std::fs::write(
        &cfg,
        format!(
            "[agent]\nsysfs_root = {:?}\ninterval = \"500ms\"\n\n[exporters.otlp]\nendpoint = \"http://{addr}/v1/metrics\"\ninterval = \"1s\"\ntimeout = \"5m\"\n",
            fixture("mlx5-roce-dual-port")
        ),
    )
    .unwrap();
    let mut agent = RunningAgent::start(&["--config", cfg.to_str().unwrap()]);
    // The first export (1 s) is under way, waiting for the endpoint.
    let deadline = Instant::now() + Duration::from_secs(20);
    while blackhole_conns.load(std::sync::atomic::Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "no export reached the endpoint");
        std::thread::sleep(Duration::from_millis(50));
    }
    agent.proc.signal("TERM");
    // The final export waits for an endpoint that never answers.
    assert!(
        agent.proc.wait_exit(Duration::from_millis(1500)).is_none(),
        "the final export was expected to hang"
    );
    let second = Instant::now();
    agent.proc.signal("TERM");
    let st = agent
        .proc
        .wait_exit(Duration::from_secs(5))
        .expect("a second signal did not end the agent");
    assert!(second.elapsed() < Duration::from_secs(5));
    assert_eq!(st.code(), Some(130));
    assert!(agent.stderr().contains("exiting now"), "{}", agent.stderr());
    drop(held);
}

#[test]
fn sighup_reloads_a_valid_configuration_and_keeps_the_old_one_on_error() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("agent.toml");
    let base = format!(
        "[agent]\nsysfs_root = {:?}\ninterval = \"500ms\"\n\n[exporters.prometheus]\nlisten = \"127.0.0.1:0\"\n",
        fixture("mlx5-roce-dual-port")
    );
    let rule = |name: &str| {
        format!("\n[[rules]]\nname = \"{name}\"\nmetric = \"rdma.port.rate\"\nthreshold = 0.0\n")
    };
    std::fs::write(&cfg, format!("{base}{}", rule("before"))).unwrap();
    let mut agent = RunningAgent::start(&["--config", cfg.to_str().unwrap()]);
    let log_text = || agent.stderr();
    // Port 0: a reload binds again, elsewhere; the ready file says where.
    let url = || agent.prometheus_url();
    let rules = || {
        get(&format!("{}/rules", url()), None)
            .map(|(_, b)| b)
            .unwrap_or_default()
    };
    let metric = |line: &str| {
        get(&format!("{}/metrics", url()), None).is_some_and(|(_, b)| b.lines().any(|l| l == line))
    };
    let eventually = |what: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if what() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        false
    };
    assert!(
        eventually(&|| rules().contains("\"before\"")),
        "{}",
        log_text()
    );

    // A valid new file: the agent runs with it.
    std::fs::write(&cfg, format!("{base}{}", rule("after"))).unwrap();
    agent.proc.signal("HUP");
    assert!(
        eventually(&|| rules().contains("\"after\"") && !rules().contains("\"before\"")),
        "not reloaded: {}\n{}",
        rules(),
        log_text()
    );
    assert!(eventually(&|| metric(
        "rocewatch_config_reloads_total{result=\"ok\"} 1"
    )));

    // A broken one: refused, said why, and the agent runs on with what it had.
    std::fs::write(&cfg, format!("{base}[agent]\nintervall = \"1s\"\n")).unwrap();
    agent.proc.signal("HUP");
    assert!(
        eventually(&|| metric("rocewatch_config_reloads_total{result=\"error\"} 1")),
        "{}",
        log_text()
    );
    assert!(rules().contains("\"after\""), "{}", log_text());
    assert!(
        log_text().contains("running on with the previous configuration"),
        "{}",
        log_text()
    );
    assert!(agent.proc.alive(), "SIGHUP ended the agent");
}

#[test]
fn a_counter_the_agents_user_cannot_read_is_an_error_naming_the_file() {
    let Some(setpriv) = ["/usr/bin/setpriv", "/bin/setpriv"]
        .iter()
        .map(std::path::Path::new)
        .find(|p| p.exists())
    else {
        panic!("setpriv (util-linux) is needed to run the agent as an unprivileged user");
    };
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "this test runs the agent as user nobody through setpriv: it needs root (CI runs as root)"
    );
    // The fixture tree, copied where user nobody can read it, with one counter 0000.
    let dir = tempfile::Builder::new()
        .prefix("rocewatch-eacces-")
        .tempdir_in("/tmp")
        .unwrap();
    let copy = Command::new("cp")
        .arg("-a")
        .arg(fixture("mlx5-roce-dual-port"))
        .arg(dir.path().join("sys"))
        .status()
        .unwrap();
    assert!(copy.success());
    let _ = Command::new("chmod")
        .args(["-R", "a+rX"])
        .arg(dir.path())
        .status();
    let root = dir.path().join("sys");
    let locked = root.join("class/infiniband/mlx5_0/ports/1/counters/symbol_error");
    std::fs::set_permissions(&locked, std::os::unix::fs::PermissionsExt::from_mode(0o000)).unwrap();
    let o = Command::new(setpriv)
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&artifacts().rocewatch)
        .args(["collect", "--once", "--format", "json", "--sysfs-root"])
        .arg(&root)
        .output()
        .unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    );
    if err.contains("Permission denied") && !err.contains("symbol_error") {
        panic!("the binary is not reachable for user nobody here: {err}");
    }
    let doc: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
    let errors = doc["errors"].as_array().unwrap();
    assert!(
        errors.iter().any(|e| e["target"]
            .as_str()
            .is_some_and(|t| t.ends_with("mlx5_0/ports/1/counters/symbol_error"))
            && e["message"].as_str().is_some_and(|m| m.contains("denied"))),
        "an unreadable counter must be a partial error naming the file: {errors:?}\n{err}"
    );
    assert!(
        doc["samples"].as_array().is_some_and(|s| s.len() > 50),
        "the other counters still flow"
    );
}

#[test]
fn starts_and_reloads_run_one_discovery_at_a_time_and_count_no_busy_plugin() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("agent.toml");
    std::fs::write(
        &cfg,
        format!(
            "[agent]\nsysfs_root = {:?}\ninterval = \"500ms\"\n\n[exporters.prometheus]\nlisten = \"127.0.0.1:0\"\n",
            fixture("mlx5-roce-dual-port")
        ),
    )
    .unwrap();
    let agent = RunningAgent::start(&["--config", cfg.to_str().unwrap()]);
    let scrape = || {
        get(&format!("{}/metrics", agent.prometheus_url()), None)
            .map(|(_, b)| b)
            .unwrap_or_default()
    };
    // The QoS loop and the schedule both ask for the inventory at start: the counts are the
    // agent's own (a reload starts them again), so every start is looked at.
    let mut busy = Vec::new();
    for reload in 0..=20 {
        if reload > 0 {
            agent.proc.signal("HUP");
        }
        let want = format!("rocewatch_config_reloads_total{{result=\"ok\"}} {reload}");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let body = scrape();
            let reloaded = reload == 0 || body.lines().any(|l| l == want);
            if reloaded && body.contains("rocewatch_plugin_duration") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "reload {reload} not seen:\n{body}\n{}",
                agent.stderr()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        // The start's discoveries are over once the first collection was served.
        std::thread::sleep(Duration::from_millis(300));
        let body = scrape();
        busy.extend(
            body.lines()
                .filter(|l| l.starts_with("rocewatch_plugin_errors") && l.contains("busy"))
                .map(|l| format!("start {reload}: {l}")),
        );
    }
    assert!(busy.is_empty(), "{busy:#?}\n{}", agent.stderr());
}

/// `rocewatch run --config CFG --ready-file READY` with a Prometheus listener on port 0.
fn agent_with_ready_file(dir: &std::path::Path, ready: &std::path::Path) -> Spawned {
    let cfg = dir.join("agent.toml");
    std::fs::write(
        &cfg,
        format!(
            "[agent]\nsysfs_root = {:?}\ninterval = \"500ms\"\n\n[exporters.prometheus]\nlisten = \"127.0.0.1:0\"\n",
            fixture("mlx5-roce-dual-port")
        ),
    )
    .unwrap();
    run_with_ready_file(&cfg, ready)
}

/// `rocewatch run --config CFG --ready-file READY`, once the ready file is there.
fn run_with_ready_file(cfg: &std::path::Path, ready: &std::path::Path) -> Spawned {
    let mut proc = Spawned::start(
        "rocewatch run",
        Command::new(&artifacts().rocewatch)
            .args(["run", "--log-level", "info", "--config"])
            .arg(cfg)
            .arg("--ready-file")
            .arg(ready),
        None,
    );
    let r = ready.to_path_buf();
    proc.wait_log("its ready file", Duration::from_secs(30), |_| {
        r.exists().then_some(())
    });
    proc
}

#[test]
fn a_reload_that_cannot_write_the_ready_file_runs_on_and_the_ready_file_goes_at_exit() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("run");
    std::fs::create_dir(&sub).unwrap();
    let ready = sub.join("ready.json");
    let mut agent = agent_with_ready_file(dir.path(), &ready);
    // The ready file's directory goes (a tmpfs cleaned, a mistaken rm), then SIGHUP.
    std::fs::remove_dir_all(&sub).unwrap();
    agent.signal("HUP");
    agent.wait_log("the reload", Duration::from_secs(20), |l| {
        l.contains("--ready-file").then_some(())
    });
    std::thread::sleep(Duration::from_secs(1));
    assert!(agent.alive(), "a reload ended the agent:\n{}", agent.log());
    let log = agent.log();
    let line = log
        .lines()
        .find(|l| l.contains("--ready-file"))
        .unwrap_or_default();
    assert!(
        line.contains("ERROR") && line.contains(&ready.display().to_string()),
        "said at error, naming the file: {log}"
    );
    // It runs on, and stops as asked.
    let (st, log, _) = agent.stop();
    assert_eq!(st.code(), Some(0), "{log}");

    // The ready file is removed at exit: an agent that is gone is not ready.
    std::fs::create_dir(&sub).unwrap();
    let mut agent = agent_with_ready_file(dir.path(), &ready);
    let (st, log, _) = agent.stop();
    assert_eq!(st.code(), Some(0), "{log}");
    assert!(!ready.exists(), "the ready file outlived the agent: {log}");
}

#[test]
fn the_ready_file_is_never_written_through_a_link_planted_at_a_temporary_name() {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    // The fixed name the ready file's temporary copy had.
    std::os::unix::fs::symlink(&victim, dir.path().join("ready.tmp")).unwrap();
    let ready = dir.path().join("ready.json");
    let mut agent = agent_with_ready_file(dir.path(), &ready);
    let text = std::fs::read_to_string(&ready).unwrap();
    assert!(
        text.contains("\"prometheus\":\"127.0.0.1:"),
        "{text}\n{}",
        agent.log()
    );
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "precious\n",
        "written through the link: {}",
        agent.log()
    );
    let (st, log, _) = agent.stop();
    assert_eq!(st.code(), Some(0), "{log}");
}

/// Writes `cfg`: the mlx5 fixture, a Prometheus listener on `127.0.0.1:PORT`, then `extra`.
fn write_config(cfg: &std::path::Path, port: u16, extra: &str) {
    std::fs::write(
        cfg,
        format!(
            "[agent]\nsysfs_root = {:?}\ninterval = \"300ms\"\n\n[exporters.prometheus]\nlisten = \"127.0.0.1:{port}\"\n{extra}",
            fixture("mlx5-roce-dual-port")
        ),
    )
    .unwrap();
}

/// A port that was free a moment ago.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// An agent in the retry loop: it ran `agent.toml` (the mlx5 fixture plus `extra`) on a
/// port of its own until `running` returned, then a SIGHUP brought a file whose port is
/// taken (`taken`), and the port of the configuration that ran was taken meanwhile
/// (`holder`, on `first`). Returns once it said that the previous configuration did not
/// start again.
struct Retrying {
    agent: Spawned,
    ready: std::path::PathBuf,
    first: u16,
    taken: std::net::TcpListener,
    holder: std::net::TcpListener,
}

fn agent_retrying(dir: &std::path::Path, extra: &str, running: impl Fn(&mut Spawned)) -> Retrying {
    let cfg = dir.join("agent.toml");
    let ready = dir.join("ready.json");
    let first = free_port();
    write_config(&cfg, first, extra);
    let mut agent = run_with_ready_file(&cfg, &ready);
    running(&mut agent);
    // The new configuration's port is taken: it does not start, the previous one comes
    // back; and its port is taken too, meanwhile.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    write_config(&cfg, taken.local_addr().unwrap().port(), extra);
    agent.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(20);
    let holder = loop {
        if let Ok(l) = std::net::TcpListener::bind(("127.0.0.1", first)) {
            break l;
        }
        assert!(
            Instant::now() < deadline,
            "the agent never let go of port {first}: {}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    agent.wait_log(
        "the previous configuration failing",
        Duration::from_secs(30),
        |l| {
            l.contains("the previous configuration did not start again")
                .then_some(())
        },
    );
    assert!(agent.alive(), "{}", agent.log());
    Retrying {
        agent,
        ready,
        first,
        taken,
        holder,
    }
}

#[test]
fn a_reload_runs_on_when_neither_the_new_nor_the_previous_configuration_starts() {
    let dir = tempfile::tempdir().unwrap();
    let Retrying {
        mut agent,
        ready,
        first,
        taken,
        holder,
    } = agent_retrying(dir.path(), "", |_| {});
    // Nothing is served while it retries: an agent that serves nothing is not ready (the
    // file would name a port someone else holds now).
    assert!(
        !ready.exists(),
        "the ready file outlived the agent it described: {}",
        agent.log()
    );
    // The port free again: the previous configuration runs again.
    drop(holder);
    agent.wait_log(
        "the previous configuration running",
        Duration::from_secs(30),
        |l| {
            l.contains("the previous configuration runs again")
                .then_some(())
        },
    );
    let url = format!("http://127.0.0.1:{first}/metrics");
    let deadline = Instant::now() + Duration::from_secs(20);
    while get(&url, None).is_none() {
        assert!(Instant::now() < deadline, "{}", agent.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        ready.exists(),
        "the ready file is written again: {}",
        agent.log()
    );
    let (st, log, _) = agent.stop();
    assert_eq!(st.code(), Some(0), "{log}");
    assert_eq!(
        log.matches("the previous configuration did not start again")
            .count(),
        1,
        "said once: {log}"
    );
    drop(taken);
}

#[test]
fn sighup_while_neither_configuration_starts_loads_and_tries_the_new_file() {
    let dir = tempfile::tempdir().unwrap();
    let Retrying {
        mut agent,
        ready,
        taken,
        holder,
        ..
    } = agent_retrying(dir.path(), "", |_| {});
    // A corrected file (a port of its own), and SIGHUP: both ports stay taken, so only the
    // new file can make the agent serve again.
    write_config(&dir.path().join("agent.toml"), 0, "");
    agent.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(20);
    let body = loop {
        let addr = std::fs::read_to_string(&ready)
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|v| v["prometheus"].as_str().map(str::to_string));
        if let Some((_, body)) = addr.and_then(|a| get(&format!("http://{a}/metrics"), None)) {
            break body;
        }
        assert!(
            Instant::now() < deadline,
            "SIGHUP while retrying did not apply the corrected file: {}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    for line in [
        "rocewatch_config_reloads_total{result=\"ok\"} 1",
        "rocewatch_config_reloads_total{result=\"error\"} 1",
    ] {
        assert!(body.lines().any(|l| l == line), "{line}:\n{body}");
    }
    let (st, log, _) = agent.stop();
    assert_eq!(st.code(), Some(0), "{log}");
    assert!(!ready.exists(), "the ready file outlived the agent: {log}");
    drop((taken, holder));
}

#[test]
fn a_signal_while_neither_configuration_starts_waits_for_the_running_actions() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let _guard = crate::rules::KillPids(pids.clone());
    // A rule that fires at once, and an exec action that hangs (its pid and its child's
    // in `pids`), with a timeout the test outlasts.
    let extra = format!(
        "\n[[rules]]\nname = \"slow-link\"\nmetric = \"rdma.port.rate\"\nmatch = {{ \"rdma.device\" = \"mlx5_0\" }}\nop = \"<\"\nthreshold = 200e9\nactions = [\"hang\"]\n\n\
         [remediation]\naudit_log = {audit:?}\nkill_switch = {stop:?}\n\n\
         [remediation.actions.hang]\ntype = \"exec\"\ncommand = [\"sh\", \"-c\", \"echo $$ > {pids}; sleep 300 & echo $! >> {pids}; wait\"]\ndry_run = false\ntimeout = \"20s\"\n",
        audit = dir.path().join("audit.jsonl"),
        stop = dir.path().join("STOP"),
        pids = pids.display(),
    );
    let Retrying {
        mut agent,
        taken,
        holder,
        ..
    } = agent_retrying(dir.path(), &extra, |agent| {
        agent.wait_log("the action's pids", Duration::from_secs(20), |_| {
            (std::fs::read_to_string(&pids)
                .unwrap_or_default()
                .lines()
                .count()
                == 2)
                .then_some(())
        });
    });
    // The reload handed the running action over; no agent runs now. SIGTERM: the agent
    // waits for the action up to its timeout, kills its group and audits the outcome.
    agent.signal("TERM");
    let st = agent
        .wait_exit(Duration::from_secs(40))
        .unwrap_or_else(|| panic!("no exit within 40 s of SIGTERM: {}", agent.log()));
    let log = agent.log();
    assert_eq!(st.code(), Some(0), "{log}");
    for pid in std::fs::read_to_string(&pids).unwrap().lines() {
        assert!(
            !crate::rules::process_alive(pid),
            "process {pid} of the action outlived the agent\n{log}"
        );
    }
    let results: Vec<serde_json::Value> = std::fs::read_to_string(dir.path().join("audit.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|r| r["decision"] == "result" && r["action"] == "hang")
        .collect();
    assert_eq!(
        results.len(),
        1,
        "one result for the action: {results:#?}\n{log}"
    );
    assert_eq!(results[0]["outcome"], "killed", "{results:#?}");
    assert!(
        results[0]["detail"]
            .as_str()
            .is_some_and(|d| d.starts_with("killed at shutdown")),
        "{results:#?}"
    );
    assert!(log.contains("waiting for 1 remediation action"), "{log}");
    drop((taken, holder));
}
