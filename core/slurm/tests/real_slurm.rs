//! rocewatch_slurm against a real Slurm (munged, slurmctld, slurmd on loopback, started
//! by `rocewatch_slurm::harness`): drain with rocewatch's reason, resume only what is
//! ours, a job runs after, and host lists expand as `scontrol show hostnames` does.
//!
//! Needs root, the Debian packages `slurmctld slurmd slurm-client munge`
//! (`scripts/install-test-deps.sh`) and the feature `harness` (`cargo test
//! --all-features`, as `scripts/test.sh` runs). Without them each test says SKIPPED; under
//! `ROCEWATCH_REQUIRE_ALL=1` it fails. On failure the daemons' logs are printed.

#[cfg(not(feature = "harness"))]
#[test]
fn real_slurm_tests_need_the_harness_feature() {
    let why = "the feature `harness` of rocewatch-slurm (cargo test --all-features)";
    if std::env::var("ROCEWATCH_REQUIRE_ALL").as_deref() == Ok("1") {
        panic!("{why} is off: the real-Slurm tests did not run");
    }
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr().lock(),
        "SKIPPED: {why} not enabled; the real-Slurm tests did not run (scripts/test.sh runs them)"
    );
}

#[cfg(feature = "harness")]
mod real {
    use std::sync::Mutex;
    use std::time::{Duration, Instant};

    use rocewatch_process::run_bounded;
    use rocewatch_slurm::harness::{HealthCheck, LocalCluster, Options};
    use rocewatch_slurm::{expand, ResumeOutcome, REASON_PREFIX};

    /// One cluster at a time: each picks its ports by binding and letting go.
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

    fn cluster() -> Option<(std::sync::MutexGuard<'static, ()>, LocalCluster)> {
        let guard = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        LocalCluster::start_or_skip(Options::default()).map(|c| (guard, c))
    }

    #[test]
    fn drain_and_resume_only_what_is_ours_on_a_real_slurm() {
        let Some((_guard, mut c)) = cluster() else {
            return;
        };
        let started = Instant::now();
        let node = c.node_name().to_string();
        let sc = c.scontrol();

        // A node Slurm does not know: the error names the command and Slurm's words.
        let e = sc.drain("no-such-node", "x").unwrap_err().to_string();
        assert!(e.contains("nodename=no-such-node"), "{e}");
        assert!(e.contains("Invalid node name specified"), "{e}");
        let e = sc.show_node("no-such-node").unwrap_err().to_string();
        assert!(e.contains("Node no-such-node not found"), "{e}");

        // Drain with rocewatch's reason: Slurm says DRAIN, with that reason.
        let set = sc.drain(&node, "mlx5_0 port 1 down\n(state DOWN)").unwrap();
        assert_eq!(set, "rocewatch: mlx5_0 port 1 down\\n(state DOWN)");
        let n = sc.show_node(&node).unwrap();
        assert!(n.state.is_drain() && n.state.is_drained(), "{}", n.state);
        let r = n.reason.expect("a drained node has a reason");
        assert_eq!(r.text, set);
        assert_eq!(r.user.as_deref(), Some("root"));

        // Ours: resumed, IDLE, and a job runs.
        let out = sc.resume_if_ours(&node, REASON_PREFIX).unwrap();
        assert_eq!(out, ResumeOutcome::Resumed { reason: set });
        c.wait_until(Duration::from_secs(10), "IDLE after resume", |n| {
            n.state.is_idle()
        })
        .unwrap();
        let mut srun = c.srun();
        srun.args(["-N1", "-w", &node, "hostname"]);
        let job = run_bounded(srun, Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("srun hostname: {e:?}"));
        assert!(
            job.status.success(),
            "srun hostname: {}: {}",
            job.status,
            job.stderr
        );
        assert!(
            !job.stdout.trim().is_empty(),
            "srun hostname printed nothing"
        );

        // Not drained: nothing to do.
        let out = sc.resume_if_ours(&node, REASON_PREFIX).unwrap();
        assert!(matches!(out, ResumeOutcome::NotDrained { .. }), "{out:?}");

        // An administrator's drain stays.
        sc.run(&[
            "update",
            &format!("nodename={node}"),
            "state=drain",
            "reason=maintenance",
        ])
        .unwrap();
        let out = sc.resume_if_ours(&node, REASON_PREFIX).unwrap();
        assert_eq!(
            out,
            ResumeOutcome::LeftAlone {
                reason: "maintenance".into()
            }
        );
        let n = sc.show_node(&node).unwrap();
        assert!(
            n.state.is_drain(),
            "maintenance drain was lifted: {}",
            n.state
        );
        assert_eq!(n.reason.unwrap().text, "maintenance");

        others_keep_their_state(&mut c, &sc, &node);
        eprintln!("real Slurm drain/resume: {:?}", started.elapsed());
    }

    /// drain_unless_others (health --slurm and the slurm_drain action) against a node an
    /// administrator drained (its reason stays), one of ours (set once, replaced by a new
    /// finding) and one an administrator set DOWN (neither drained over nor resumed).
    fn others_keep_their_state(c: &mut LocalCluster, sc: &rocewatch_slurm::Scontrol, node: &str) {
        // drain_unless_others (health --slurm and the slurm_drain action): the
        // administrator's drain keeps its reason; once resumed, ours is set, a second
        // time with the same reason is no second update, and a new finding replaces it.
        use rocewatch_slurm::DrainOutcome;
        const T: Duration = Duration::from_secs(30);
        let out = sc
            .drain_unless_others(node, "mlx5_0 port 1 down", T)
            .unwrap();
        assert!(
            matches!(&out, DrainOutcome::Others { reason, .. } if reason == "maintenance"),
            "{out:?}"
        );
        assert_eq!(
            sc.show_node(node).unwrap().reason.unwrap().text,
            "maintenance"
        );
        sc.run(&["update", &format!("nodename={node}"), "state=resume"])
            .unwrap();
        let out = sc
            .drain_unless_others(node, "mlx5_0 port 1 down", T)
            .unwrap();
        let ours = "rocewatch: mlx5_0 port 1 down".to_string();
        assert_eq!(
            out,
            DrainOutcome::Drained {
                reason: ours.clone()
            }
        );
        let out = sc
            .drain_unless_others(node, "mlx5_0 port 1 down", T)
            .unwrap();
        assert_eq!(out, DrainOutcome::AlreadyDrained { reason: ours });
        let out = sc
            .drain_unless_others(node, "rule slow-link fired", T)
            .unwrap();
        assert_eq!(
            out,
            DrainOutcome::Drained {
                reason: "rocewatch: rule slow-link fired".into()
            }
        );
        assert_eq!(
            sc.show_node(node).unwrap().reason.unwrap().text,
            "rocewatch: rule slow-link fired"
        );
        sc.resume_if_ours(node, REASON_PREFIX).unwrap();

        // An administrator's DOWN (no DRAIN flag) keeps its state and reason: neither
        // drained over nor resumed.
        sc.run(&[
            "update",
            &format!("nodename={node}"),
            "state=down",
            "reason=RMA 123",
        ])
        .unwrap();
        let out = sc
            .drain_unless_others(node, "mlx5_0 port 1 down", T)
            .unwrap();
        assert!(
            matches!(&out, DrainOutcome::Others { state, reason } if state.starts_with("DOWN") && reason == "RMA 123"),
            "{out:?}"
        );
        let n = sc.show_node(node).unwrap();
        assert_eq!(n.reason.unwrap().text, "RMA 123");
        assert!(!n.state.is_drain(), "{}", n.state);
        sc.run(&["update", &format!("nodename={node}"), "state=resume"])
            .unwrap();
        c.wait_until(Duration::from_secs(10), "IDLE after the RMA", |n| {
            n.state.is_idle()
        })
        .unwrap();
    }

    /// Through a site's wrapper that breaks `show` and loses scontrol's exit status (it
    /// does not `exec`, and exits 0): the node is drained anyway, with our reason, and the
    /// outcome says its reason could not be read; an update Slurm refuses ("Invalid node
    /// name specified" on standard error, exit 0 from the wrapper) is an error, not a
    /// drain.
    #[test]
    fn a_wrapper_that_breaks_show_still_drains_on_a_real_slurm() {
        let Some((_guard, c)) = cluster() else {
            return;
        };
        let node = c.node_name().to_string();
        let real = c.scontrol();
        let dir = tempfile::tempdir().unwrap();
        let wrapper = dir.path().join("scontrol");
        std::fs::write(
            &wrapper,
            format!(
                "#!/bin/sh\nif [ \"$1\" = show ]; then echo 'slurm_load_node error: Unable to contact slurm controller' >&2; exit 0; fi\n'{}' \"$@\"\nexit 0\n",
                real.program().display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(
            &wrapper,
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let sc = rocewatch_slurm::Scontrol::new(&wrapper).env("SLURM_CONF", c.conf());
        let out = sc
            .drain_unless_others(&node, "mlx5_0 port 1 down", Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("{e}\n{}", c.logs()));
        let said = out.describe(&node);
        assert!(
            matches!(&out, rocewatch_slurm::DrainOutcome::DrainedUnread { reason, .. } if reason == "rocewatch: mlx5_0 port 1 down"),
            "{said}"
        );
        assert!(
            said.contains("Unable to contact slurm controller"),
            "{said}"
        );
        let n = real.show_node(&node).unwrap();
        assert!(n.state.is_drain(), "{}", n.state);
        assert_eq!(n.reason.unwrap().text, "rocewatch: mlx5_0 port 1 down");
        // Slurm refuses the update; the wrapper exits 0: an error naming Slurm's words.
        let e = sc
            .drain_unless_others("no-such-node", "x", Duration::from_secs(30))
            .unwrap_err()
            .to_string();
        assert!(e.contains("Invalid node name specified"), "{e}");
        // A resume never acts on a show that failed.
        assert!(sc.resume_if_ours(&node, REASON_PREFIX).is_err());
        assert!(real.show_node(&node).unwrap().state.is_drain());
        real.resume_if_ours(&node, REASON_PREFIX).unwrap();
    }

    /// slurmd runs `HealthCheckProgram` with `SLURMD_NODENAME` set (and nothing else: the
    /// harness's wrapper adds `SLURM_CONF`), and its `scontrol` drains the node.
    #[test]
    fn the_health_program_drains_through_scontrol_with_slurm_conf() {
        let _guard = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let Some(programs) = LocalCluster::available() else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let flag = dir.path().join("broken");
        let script = dir.path().join("health.sh");
        let node = rocewatch_slurm::this_node_name(None).unwrap();
        // Drains only once the test says the host is broken: the cluster starts IDLE.
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\nif [ -e '{}' ]; then exec '{}' update nodename='{node}' state=drain \"reason=rocewatch: health SLURM_CONF=$SLURM_CONF node=$SLURMD_NODENAME\"; fi\n",
                flag.display(),
                programs.scontrol.display(),
            ),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let options = Options {
            health_check: Some(HealthCheck {
                program: script,
                interval_s: 1,
                node_state: Some("ANY".into()),
            }),
            ..Options::default()
        };
        let mut c = LocalCluster::start(programs, options).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(&flag, "").unwrap();
        let n = c
            .wait_until(
                Duration::from_secs(15),
                "the health program to drain",
                |n| n.state.is_drain(),
            )
            .unwrap_or_else(|e| panic!("{e}"));
        let want = format!(
            "rocewatch: health SLURM_CONF={} node={node}",
            c.conf().display()
        );
        assert_eq!(n.reason.unwrap().text, want);
    }

    #[test]
    fn a_cluster_that_cannot_start_says_why_with_every_log() {
        let _guard = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let Some(programs) = LocalCluster::available() else {
            return;
        };
        let options = Options {
            extra_conf: vec!["NoSuchSlurmKey=1".into()],
            start_timeout: Duration::from_secs(10),
            ..Options::default()
        };
        let e = match LocalCluster::start(programs, options) {
            Ok(_) => panic!("a slurm.conf with an unknown key started"),
            Err(e) => e.to_string(),
        };
        assert!(
            e.contains("slurmctld exited") || e.contains("slurmd exited"),
            "{e}"
        );
        assert!(e.contains("NoSuchSlurmKey"), "{e}");
        for log in ["slurm.conf", "munged.out", "slurmctld.out", "slurmd.out"] {
            assert!(e.contains(&format!("{log}\n")), "{log} missing from: {e}");
        }
    }

    #[test]
    fn hostlist_agrees_with_scontrol() {
        let Some((_guard, c)) = cluster() else {
            return;
        };
        let sc = c.scontrol();
        let cases = [
            "node[01-04,07]",
            "a[1-2]-b[3-4]",
            "a[1-2]b[3-4]c[5-6]",
            "x[8-11],y[008-11],z[9-010]",
            "a,b c\td",
            "a[1,2],c,,d",
            "[1-2]",
            "a[1-2][3-4]",
            "a[01-2],a[1-02],a[00-01]",
            "a1,a1,node1[1-2]",
            "b[3,1-2],a[1-2]",
            "a[1-]",
            "gpu-[0001-0100]",
            "n[1-65536]",
        ];
        for list in cases {
            let ours = expand(list).unwrap_or_else(|e| panic!("{e}"));
            let slurm = sc.show_hostnames(list).unwrap();
            assert_eq!(ours, slurm, "{list}");
        }
        // What Slurm refuses, we refuse.
        for list in [
            "z[010-9]",
            "a[]",
            "a[x-y]",
            "a[1-2,]",
            "a[-2]",
            "a[1-3]b",
            "a[1-65537]",
        ] {
            assert!(sc.show_hostnames(list).is_err(), "scontrol took {list}");
            let e = expand(list).expect_err(list);
            assert!(e.to_string().contains(list), "{e}");
        }
    }
}
