//! TLS and basic authentication on the listeners (a web configuration file in the format
//! of Prometheus's exporter-toolkit): a real Prometheus scrapes over TLS with a client
//! certificate and basic auth; curl is refused without a client certificate, with a wrong
//! password and over TLS 1.1; the Alertmanager receiver takes the same file; a renewed
//! file is served without a restart.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::*;

fn curl(args: &[&str]) -> Output {
    Command::new("curl")
        .args(["-sS", "--max-time", "20"])
        .args(args)
        .output()
        .expect("curl (installed by scripts/install-test-deps.sh)")
}

/// curl failed because the server sent a TLS alert (OpenSSL says "... alert ..." for an
/// alert it received; a refusal of its own reads otherwise).
fn refused_by_server(o: &Output) -> bool {
    !o.status.success() && String::from_utf8_lossy(&o.stderr).contains(" alert ")
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `echo PASSWORD | rocewatch config hash-password --cost 4`
fn hash(password: &str) -> String {
    use std::io::Write;
    let mut child = Command::new(&artifacts().rocewatch)
        .args(["config", "hash-password", "--cost", "4"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(child.stdin.take().unwrap(), "{password}").unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let h = String::from_utf8(o.stdout).unwrap().trim().to_string();
    assert!(h.starts_with("$2") && h.len() == 60, "{h}");
    h
}

#[test]
fn tls_and_basic_auth_for_prometheus_and_alertmanager() {
    let Some(prom) = prometheus_binary() else {
        return;
    };
    let pki = pki();
    let dir = tempfile::tempdir().unwrap();
    let web = dir.path().join("web.yml");
    // One hash: a changed one is a changed password, which only a SIGHUP applies.
    let password = hash("s3cret");
    let web_yml = |min: &str| {
        format!(
            "# node_exporter's web configuration, as it is\ntls_server_config:\n  cert_file: {}\n  key_file: {}\n  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {}\n  min_version: {min}\nhttp_server_config:\n  headers:\n    Strict-Transport-Security: max-age=31536000\nbasic_auth_users:\n  prometheus: {}\n",
            pki.server_cert.display(),
            pki.server_key.display(),
            pki.ca.display(),
            password
        )
    };
    std::fs::write(&web, web_yml("TLS12")).unwrap();
    let cfg = dir.path().join("rocewatch.toml");
    std::fs::write(
        &cfg,
        format!(
            r#"[agent]
interval = "500ms"

[exporters.prometheus]
listen = "127.0.0.1:0"
web_config_file = "{web}"

[remediation.actions.page]
type = "log"

[alertmanager]
listen = "127.0.0.1:0"
web_config_file = "{web}"

[[alertmanager.routes]]
match = {{ alertname = "RoCE*" }}
actions = ["page"]
"#,
            web = web.display()
        ),
    )
    .unwrap();
    let check = rocewatch(&["config", "check", cfg.to_str().unwrap()], &[]);
    assert!(check.status.success(), "{}", stderr(&check));
    let root = fixture("mlx5-roce-dual-port");
    let agent = RunningAgent::start(&[
        "--config",
        cfg.to_str().unwrap(),
        "--sysfs-root",
        root.to_str().unwrap(),
    ]);
    let metrics = format!("https://{}/metrics", agent.addr("prometheus"));
    let (ca, cert, key) = (
        pki.ca.to_str().unwrap(),
        pki.client_cert.to_str().unwrap(),
        pki.client_key.to_str().unwrap(),
    );
    let tls = ["--cacert", ca, "--cert", cert, "--key", key];
    let code = |o: &Output| {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .last()
            .unwrap_or("")
            .to_string()
    };

    // The right certificate and password: served, with the configured header (after the
    // first collection).
    let deadline = Instant::now() + Duration::from_secs(20);
    let ok = loop {
        let o = curl(&[&tls[..], &["-D", "-", "-u", "prometheus:s3cret", &metrics]].concat());
        if text(&o).contains("rdma_port_io_bytes_total") || Instant::now() > deadline {
            break o;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let body = text(&ok);
    assert!(ok.status.success(), "{body}");
    assert!(body.contains("rdma_port_io_bytes_total"), "{body}");
    assert!(
        body.to_ascii_lowercase()
            .contains("strict-transport-security: max-age=31536000"),
        "{body}"
    );

    // Wrong or missing password: 401 with a Basic challenge, nothing of the metrics.
    for auth in [
        &["-u", "prometheus:wrong"][..],
        &["-u", "mallory:s3cret"],
        &[],
    ] {
        let o = curl(
            &[
                &tls[..],
                auth,
                &[
                    "-D",
                    "-",
                    "-o",
                    "/dev/null",
                    "-w",
                    "%{http_code}\n",
                    &metrics,
                ],
            ]
            .concat(),
        );
        assert_eq!(code(&o), "401", "{auth:?}: {}", text(&o));
        assert!(
            text(&o)
                .to_ascii_lowercase()
                .contains("www-authenticate: basic"),
            "{}",
            text(&o)
        );
    }

    // No client certificate: the handshake fails (the server asks for one and gets none).
    let o = curl(&["--cacert", ca, "-u", "prometheus:s3cret", &metrics]);
    assert!(refused_by_server(&o), "{}", text(&o));
    assert!(!text(&o).contains("rdma_port"), "{}", text(&o));
    // Plain HTTP to the TLS port: nothing served.
    let o = curl(&["-u", "prometheus:s3cret", &metrics.replace("https", "http")]);
    assert!(!text(&o).contains("rdma_port"), "{}", text(&o));

    // TLS 1.1 offered by a client willing to use it: the server answers with an alert
    // (not a client-side refusal: SECLEVEL=0 lets curl's OpenSSL offer it).
    let o = curl(
        &[
            &tls[..],
            &[
                "--tlsv1.1",
                "--tls-max",
                "1.1",
                "--ciphers",
                "DEFAULT@SECLEVEL=0",
                "-u",
                "prometheus:s3cret",
                &metrics,
            ],
        ]
        .concat(),
    );
    assert!(
        refused_by_server(&o),
        "the agent refuses TLS 1.1: {}",
        text(&o)
    );

    // The Alertmanager receiver: the same file; basic auth replaces the bearer token.
    let am = format!("https://{}/alertmanager", agent.addr("alertmanager"));
    let payload = r#"{"version":"4","status":"firing","receiver":"rocewatch","groupKey":"g","truncatedAlerts":0,"alerts":[]}"#;
    let post = |auth: &str| {
        curl(
            &[
                &tls[..],
                &[
                    "-u",
                    auth,
                    "-H",
                    "content-type: application/json",
                    "--data",
                    payload,
                    "-w",
                    "\n%{http_code}\n",
                    &am,
                ],
            ]
            .concat(),
        )
    };
    let o = post("prometheus:s3cret");
    assert_eq!(code(&o), "200", "{}", text(&o));
    let o = post("prometheus:wrong");
    assert_eq!(code(&o), "401", "{}", text(&o));

    // A real Prometheus 2.42 scrapes over TLS with its client certificate and basic auth;
    // a job with the wrong password is down.
    let data = tempfile::tempdir().unwrap();
    let target = agent.addr("prometheus");
    let job = |name: &str, password: &str| {
        format!("  - job_name: {name}\n    scheme: https\n    tls_config:\n      ca_file: {ca}\n      cert_file: {cert}\n      key_file: {key}\n    basic_auth:\n      username: prometheus\n      password: {password}\n    static_configs:\n      - targets: ['{target}']\n")
    };
    let prom_proc = Prometheus::start(
        &prom,
        data.path(),
        &format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n{}{}",
            job("rocewatch", "s3cret"),
            job("wrong", "nope")
        ),
    );
    let q = |promql: &str| prom_proc.query(promql);
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut up, mut down, mut io) = (vec![], vec![], vec![]);
    while Instant::now() < deadline {
        up = q("up{job=\"rocewatch\"}");
        down = q("up{job=\"wrong\"}");
        io = q("rdma_port_io_bytes_total{job=\"rocewatch\"}");
        if up.first().is_some_and(|u| u.1 == 1.0) && io.len() == 4 && !down.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let prom_stderr = prom_proc.proc.log();
    assert_eq!(
        io.len(),
        4,
        "scraped over TLS with basic auth: {io:?}; up {up:?}\nprometheus:\n{prom_stderr}"
    );
    assert_eq!(up[0].1, 1.0, "{up:?}");
    assert_eq!(
        down.first().map(|d| d.1),
        Some(0.0),
        "the wrong password is refused: {down:?}"
    );

    // `rocewatch rules` asks the agent over the same TLS and basic auth.
    let base = format!("https://{}", agent.addr("prometheus"));
    let rules = |user: &str| {
        rocewatch(
            &[
                "rules",
                "--url",
                &base,
                "--ca-file",
                ca,
                "--cert-file",
                cert,
                "--key-file",
                key,
                "--json",
            ],
            &[("ROCEWATCH_BASIC_AUTH", user)],
        )
    };
    let o = rules("prometheus:s3cret");
    assert!(
        o.status.success() && stdout(&o).contains("\"rules\""),
        "{}",
        stderr(&o)
    );
    let o = rules("prometheus:wrong");
    assert!(
        !o.status.success() && stderr(&o).contains("401"),
        "{}",
        stderr(&o)
    );

    // A renewed web configuration is served without a restart: TLS 1.3 only now.
    std::fs::write(&web, web_yml("TLS13")).unwrap();
    // The files are looked at again at most once a second.
    std::thread::sleep(Duration::from_millis(1100));
    let o = curl(
        &[
            &tls[..],
            &["--tls-max", "1.2", "-u", "prometheus:s3cret", &metrics],
        ]
        .concat(),
    );
    assert!(
        refused_by_server(&o),
        "TLS 1.2 refused after the change: {}",
        text(&o)
    );
    let o = curl(
        &[
            &tls[..],
            &["--tlsv1.3", "-u", "prometheus:s3cret", &metrics],
        ]
        .concat(),
    );
    assert!(
        o.status.success() && text(&o).contains("rdma_port_io_bytes_total"),
        "{}",
        text(&o)
    );
    let log = agent.stderr();
    assert!(log.contains("web.yml changed; now serving TLS"), "{log}");
    assert!(
        log.contains("TLS handshake"),
        "refused handshakes are said: {log}"
    );
}

#[test]
fn web_configuration_errors_are_refused_by_config_check_and_run() {
    let dir = tempfile::tempdir().unwrap();
    let web = dir.path().join("web.yml");
    std::fs::write(
        &web,
        "tls_server_config:\n  cert_file: missing.pem\n  key_file: missing.key\n",
    )
    .unwrap();
    let cfg = dir.path().join("rocewatch.toml");
    std::fs::write(
        &cfg,
        format!(
            "[exporters.prometheus]\nlisten = \"127.0.0.1:0\"\nweb_config_file = \"{}\"\n",
            web.display()
        ),
    )
    .unwrap();
    let check = rocewatch(&["config", "check", cfg.to_str().unwrap()], &[]);
    assert_eq!(check.status.code(), Some(1));
    let e = stderr(&check);
    assert!(
        e.contains("exporters.prometheus.web_config_file")
            && e.contains("web.yml: tls_server_config.cert_file:")
            && e.contains("missing.pem"),
        "{e}"
    );
    let root = fixture("mlx5-roce-dual-port");
    let run = rocewatch(
        &[
            "run",
            "--config",
            cfg.to_str().unwrap(),
            "--sysfs-root",
            root.to_str().unwrap(),
        ],
        &[],
    );
    assert!(!run.status.success());
    assert!(stderr(&run).contains("missing.pem"), "{}", stderr(&run));

    // A bearer token and basic_auth_users cannot both be required of Alertmanager.
    std::fs::write(&web, format!("basic_auth_users:\n  am: {}\n", hash("pw"))).unwrap();
    std::fs::write(
        &cfg,
        format!("[remediation.actions.page]\ntype = \"log\"\n\n[alertmanager]\nlisten = \"127.0.0.1:0\"\nbearer_token = \"t\"\nweb_config_file = \"{}\"\n", web.display()),
    )
    .unwrap();
    let check = rocewatch(&["config", "check", cfg.to_str().unwrap()], &[]);
    assert_eq!(check.status.code(), Some(1), "{}", stdout(&check));
    assert!(
        stderr(&check).contains("cannot both be required"),
        "{}",
        stderr(&check)
    );
}

#[test]
fn a_change_that_would_weaken_the_web_configuration_waits_for_sighup() {
    let pki = pki();
    let dir = tempfile::tempdir().unwrap();
    let web = dir.path().join("web.yml");
    let whole = format!(
        "tls_server_config:\n  cert_file: {}\n  key_file: {}\n  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {}\n  client_allowed_sans:\n    - rocewatch-agent\n",
        pki.server_cert.display(),
        pki.server_key.display(),
        pki.ca.display(),
    );
    std::fs::write(&web, &whole).unwrap();
    let cfg = dir.path().join("rocewatch.toml");
    std::fs::write(
        &cfg,
        format!(
            "[agent]\ninterval = \"500ms\"\n\n[exporters.prometheus]\nlisten = \"127.0.0.1:0\"\nweb_config_file = \"{web}\"\n\n\
             [remediation]\naudit_log = {audit:?}\nkill_switch = {stop:?}\n\n[remediation.actions.page]\ntype = \"log\"\n\n\
             [alertmanager]\nlisten = \"127.0.0.1:0\"\nweb_config_file = \"{web}\"\n\n[[alertmanager.routes]]\nmatch = {{ alertname = \"RoCE*\" }}\nactions = [\"page\"]\n",
            web = web.display(),
            audit = dir.path().join("audit.jsonl"),
            stop = dir.path().join("STOP"),
        ),
    )
    .unwrap();
    let root = fixture("mlx5-roce-dual-port");
    let agent = RunningAgent::start(&[
        "--config",
        cfg.to_str().unwrap(),
        "--sysfs-root",
        root.to_str().unwrap(),
    ]);
    let ca = pki.ca.to_str().unwrap();
    let payload = r#"{"version":"4","status":"firing","receiver":"rocewatch","groupKey":"g","truncatedAlerts":0,"alerts":[]}"#;
    // Each listener with a client certificate: (/metrics, POST /alertmanager).
    let ask = |cert: &std::path::Path, key: &std::path::Path| {
        let tls = [
            "--cacert",
            ca,
            "--cert",
            cert.to_str().unwrap(),
            "--key",
            key.to_str().unwrap(),
        ];
        let metrics = curl(
            &[
                &tls[..],
                &[
                    "-o",
                    "/dev/null",
                    "-w",
                    "%{http_code}",
                    &format!("https://{}/metrics", agent.addr("prometheus")),
                ],
            ]
            .concat(),
        );
        let am = curl(
            &[
                &tls[..],
                &[
                    "-H",
                    "content-type: application/json",
                    "--data",
                    payload,
                    "-o",
                    "/dev/null",
                    "-w",
                    "%{http_code}",
                    &format!("https://{}/alertmanager", agent.addr("alertmanager")),
                ],
            ]
            .concat(),
        );
        (metrics, am)
    };
    let (agent_cert, agent_key) = (&pki.client_cert, &pki.client_key);
    let (other_cert, other_key) = (&pki.other_client_cert, &pki.other_client_key);
    let served = |o: &Output| o.status.success() && stdout_of(o) == "200";
    let (m, a) = ask(agent_cert, agent_key);
    assert!(served(&m) && served(&a), "{}\n{}", text(&m), text(&a));
    let (m, a) = ask(other_cert, other_key);
    assert!(
        refused_by_server(&m) && refused_by_server(&a),
        "another SAN of the same CA is refused: {}\n{}",
        text(&m),
        text(&a)
    );

    // The file rewritten in place and caught half-way: client_allowed_sans is not there
    // yet. The listeners keep the names they had, and say why at error level.
    let half = whole.split("  client_allowed_sans").next().unwrap();
    std::fs::write(&web, half).unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    for _ in 0..2 {
        let (m, a) = ask(other_cert, other_key);
        assert!(
            refused_by_server(&m) && refused_by_server(&a),
            "a half-written file let another SAN in: {}\n{}\n{}",
            text(&m),
            text(&a),
            agent.stderr()
        );
        let (m, a) = ask(agent_cert, agent_key);
        assert!(served(&m) && served(&a), "{}\n{}", text(&m), text(&a));
    }
    let log = agent.stderr();
    let refusal = log
        .lines()
        .find(|l| l.contains("ERROR") && l.contains("client_allowed_sans"))
        .unwrap_or_else(|| panic!("the refusal is an error naming what it weakens: {log}"));
    assert!(refusal.contains(web.to_str().unwrap()), "{refusal}");
    assert!(refusal.contains("SIGHUP"), "{refusal}");
    assert!(!log.contains("changed; now serving"), "{log}");

    // SIGHUP is the operator's act: the file is taken as it is.
    agent.proc.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (m, a) = ask(other_cert, other_key);
        if served(&m) && served(&a) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "SIGHUP did not apply the file: {}\n{}\n{}",
            text(&m),
            text(&a),
            agent.stderr()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    // ... and says, for each listener, what it weakened.
    let log = agent.stderr();
    for key in [
        "exporters.prometheus.web_config_file",
        "alertmanager.web_config_file",
    ] {
        assert!(
            log.lines().any(|l| l.contains("WARN")
                && l.contains("SIGHUP")
                && l.contains(key)
                && l.contains("client_allowed_sans: removed")),
            "a SIGHUP that weakens {key} says so at warn level: {log}"
        );
    }
}

fn stdout_of(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}
