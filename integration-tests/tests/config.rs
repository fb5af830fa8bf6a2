//! Configuration files: every example parses; bad ones name the key path; environment
//! overrides apply.

use crate::support::*;

#[test]
fn every_file_in_configs_parses() {
    let dir = root().join("configs");
    let tmp = tempfile::tempdir().unwrap();
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().and_then(|x| x.to_str()) != Some("toml") {
            continue;
        }
        n += 1;
        // The token file the example names lives on the host: without it `config check`
        // refuses the file as `run` would, naming the key; with one it passes.
        let text = std::fs::read_to_string(&p).unwrap();
        const TOKEN: &str = "/etc/rocewatch/alertmanager.token";
        let p = if text.contains(TOKEN) {
            let o = rocewatch(&["config", "check", p.to_str().unwrap()], &[]);
            assert!(
                !o.status.success() && stderr(&o).contains("alertmanager.bearer_token_file"),
                "{}: {}",
                p.display(),
                stderr(&o)
            );
            let token = tmp.path().join("alertmanager.token");
            std::fs::write(&token, "s3cret\n").unwrap();
            let copy = tmp.path().join(p.file_name().unwrap());
            std::fs::write(&copy, text.replace(TOKEN, token.to_str().unwrap())).unwrap();
            copy
        } else {
            p
        };
        // Through the library (strict decoding) and through the command line.
        rocewatch::config::Config::load(Some(&p)).unwrap_or_else(|e| panic!("{e}"));
        let o = rocewatch(&["config", "check", p.to_str().unwrap()], &[]);
        assert!(o.status.success(), "{}: {}", p.display(), stderr(&o));
        assert!(stdout(&o).contains(": ok"));
    }
    assert!(
        n >= 2,
        "configs/ should hold the sidecar and minimal examples, found {n}"
    );
}

#[test]
fn config_check_names_file_and_key_path() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("[agent]\nintervall = \"10s\"\n", "agent"),
        ("[agent]\ninterval = \"ten seconds\"\n", "agent.interval"),
        (
            "[exporters.otlp]\nendpoint = \"http://x:4318/v1/metrics\"\nprotocol = \"udp\"\n",
            "exporters.otlp.protocol",
        ),
        ("[exporters.otlp]\nprotocol = \"grpc\"\n", "exporters.otlp"),
        (
            "[[plugins.external]]\npath = \"/x.so\"\nbogus = 1\n",
            "plugins.external[0]",
        ),
        ("[devices]\ninclude = \"mlx5_*\"\n", "devices.include"),
    ];
    for (i, (text, key)) in cases.iter().enumerate() {
        let f = dir.path().join(format!("bad{i}.toml"));
        std::fs::write(&f, text).unwrap();
        let o = rocewatch(&["config", "check", f.to_str().unwrap()], &[]);
        assert_eq!(o.status.code(), Some(1), "{text}");
        let err = stderr(&o);
        assert!(
            err.contains(&format!("bad{i}.toml")),
            "names the file: {err}"
        );
        assert!(err.contains(key), "names {key}: {err}");
    }
    let o = rocewatch(&["config", "check", "/nonexistent.toml"], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("/nonexistent.toml"));
}

#[test]
fn environment_overrides_the_file() {
    let o = rocewatch(
        &["collect", "--once"],
        &[(
            "ROCEWATCH_AGENT__SYSFS_ROOT",
            fixture("rxe-soft-roce").to_str().unwrap(),
        )],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("\"rxe0\""), "{}", stdout(&o));
    // An unknown key through the environment is an error naming it.
    let o = rocewatch(
        &["collect", "--once"],
        &[("ROCEWATCH_AGENT__NO_SUCH_KEY", "1")],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("no_such_key"), "{}", stderr(&o));
    // Variables that are not config keys (no double underscore) are left alone.
    let o = rocewatch(
        &[
            "collect",
            "--once",
            "--sysfs-root",
            fixture("rxe-soft-roce").to_str().unwrap(),
        ],
        &[("ROCEWATCH_PLUGIN_DIR", "/tmp")],
    );
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn duration_flags_and_keys_share_their_bounds_and_errors() {
    let root = fixture("mlx5-roce-dual-port");
    // 0 refused by the flag as by the key (it ran the collectors back to back), with the
    // same bound; a value past the most allowed refused with exit 2, never a panic (101).
    let flag = rocewatch(
        &[
            "run",
            "--sysfs-root",
            root.to_str().unwrap(),
            "--interval",
            "0s",
            "--duration",
            "3s",
        ],
        &[],
    );
    let key = rocewatch(
        &[
            "run",
            "--sysfs-root",
            root.to_str().unwrap(),
            "--duration",
            "3s",
        ],
        &[("ROCEWATCH_AGENT__INTERVAL", "0s")],
    );
    for (o, names) in [(&flag, "--interval"), (&key, "agent.interval")] {
        assert_eq!(o.status.code(), Some(2), "{names}: {}", stderr(o));
        assert!(
            stderr(o).contains(names) && stderr(o).contains("at least 100ms"),
            "{names}: {}",
            stderr(o)
        );
    }
    for args in [
        &["run", "--interval", "18446744073709551615s"][..],
        &[
            "bandwidth",
            "10.0.0.1",
            "--duration",
            "18446744073709551615s",
        ],
        &["probe", "10.0.0.1", "--timeout", "18446744073709551615s"],
    ] {
        let o = rocewatch(args, &[]);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains(args[args.len() - 2]) && stderr(&o).contains("at most"),
            "{args:?}: {}",
            stderr(&o)
        );
    }
}

/// An action whose `timeout` exceeds the stop grace a supervisor commonly gives (30 s:
/// Kubernetes' default `terminationGracePeriodSeconds`) is killed at shutdown before its
/// result is written: `config check` says so, naming the key, and still accepts the file.
#[test]
fn config_check_warns_of_an_action_timeout_past_the_supervisors_stop_grace() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("agent.toml");
    std::fs::write(
        &f,
        "[remediation.actions.drain]\ntype = \"exec\"\ncommand = [\"/bin/true\"]\ntimeout = \"45s\"\n\n\
         [remediation.actions.note]\ntype = \"log\"\n",
    )
    .unwrap();
    let o = rocewatch(&["config", "check", f.to_str().unwrap()], &[]);
    let err = stderr(&o);
    assert!(o.status.success(), "a warning, not a refusal: {err}");
    assert!(stdout(&o).contains(": ok"), "{}", stdout(&o));
    assert!(
        err.contains("warning") && err.contains("remediation.actions.drain.timeout"),
        "names the key: {err}"
    );
    assert!(err.contains("30s"), "names the grace: {err}");
    assert!(
        !err.contains("remediation.actions.note"),
        "the default 30s is within the grace: {err}"
    );
}
