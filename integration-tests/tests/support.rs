//! Shared helpers: building the binary and plugin libraries once, locating fixtures and
//! receivers, golden files.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"))
}

/// `integration-tests/fixtures/<case>/sys`
pub fn fixture(case: &str) -> PathBuf {
    root()
        .join("integration-tests/fixtures")
        .join(case)
        .join("sys")
}

/// The value of counter `file` of port 1 of `device` in the fixture tree `case`, as the
/// kernel would print it (before the catalog's scale).
pub fn fixture_counter(case: &str, device: &str, file: &str) -> u64 {
    let p = fixture(case)
        .join("class/infiniband")
        .join(device)
        .join("ports/1")
        .join(file);
    std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// [`fixture_counter`] of the mlx5 dual-port tree.
pub fn mlx5_counter(device: &str, file: &str) -> u64 {
    fixture_counter("mlx5-roce-dual-port", device, file)
}

pub struct Artifacts {
    pub rocewatch: PathBuf,
    pub example_so: PathBuf,
    pub fault_so: PathBuf,
    pub probe_so: PathBuf,
    pub fake_probe_so: PathBuf,
    pub wrong_abi_so: PathBuf,
    pub no_symbol_so: PathBuf,
    pub null_fn_so: PathBuf,
}

/// Build the `rocewatch` binary and the plugin libraries (once per test run).
pub fn artifacts() -> &'static Artifacts {
    static A: OnceLock<Artifacts> = OnceLock::new();
    A.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let st = Command::new(cargo)
            .current_dir(root())
            .args([
                "build",
                "--quiet",
                "-p",
                "rocewatch",
                "-p",
                "example-plugin",
                "-p",
                "fault-plugin",
                "-p",
                "rocewatch-probe-verbs",
                "-p",
                "fake-probe",
            ])
            .status()
            .expect("run cargo build");
        assert!(st.success(), "cargo build of the binary and plugins failed");
        let debug = target_dir().join("debug");
        let cdir = target_dir().join("test-plugins");
        std::fs::create_dir_all(&cdir).unwrap();
        let cc = |name: &str| -> PathBuf {
            let out = cdir.join(format!("lib{name}.so"));
            let src = root()
                .join("integration-tests/plugins-c")
                .join(format!("{name}.c"));
            let st = Command::new("cc")
                .args(["-shared", "-fPIC", "-o"])
                .arg(&out)
                .arg(&src)
                .status()
                .expect("run cc (gcc is needed to build the C test plugins)");
            assert!(st.success(), "cc {} failed", src.display());
            out
        };
        Artifacts {
            rocewatch: debug.join("rocewatch"),
            example_so: debug.join("libexample_plugin.so"),
            fault_so: debug.join("libfault_plugin.so"),
            probe_so: debug.join("librocewatch_probe_verbs.so"),
            fake_probe_so: debug.join("libfake_probe.so"),
            wrong_abi_so: cc("wrong_abi"),
            no_symbol_so: cc("no_symbol"),
            null_fn_so: cc("null_fn"),
        }
    })
}

/// Run `rocewatch ARGS` with extra environment.
pub fn rocewatch(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(&artifacts().rocewatch);
    c.args(args).current_dir(root());
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run rocewatch")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Compare `actual` with `integration-tests/golden/<name>`; `SNAPSHOTS=overwrite` rewrites.
pub fn golden(name: &str, actual: &str) {
    let path = root().join("integration-tests/golden").join(name);
    if std::env::var("SNAPSHOTS").as_deref() == Ok("overwrite") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|_| {
        panic!(
            "missing golden file {}; create it with SNAPSHOTS=overwrite",
            path.display()
        )
    });
    assert!(
        want == actual,
        "output differs from {} (rerun with SNAPSHOTS=overwrite to accept):\n--- want\n{want}\n--- got\n{actual}",
        path.display()
    );
}

/// Replace the machine-specific repository path in outputs.
pub fn normalize(s: &str) -> String {
    s.replace(&root().display().to_string(), "<repo>")
}

/// A tokio runtime whose shutdown does not wait for plugin threads that are still stuck
/// in a call (the hang tests leave one behind on purpose).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A receiver binary: `$ENV`, else the copy `scripts/install-test-deps.sh` unpacks under
/// `.cache/`, else `PATH`. `None` means the test must not run; see [`require`].
pub fn receiver(env: &str, cached: &str, name: &str) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(env) {
        return Some(PathBuf::from(p));
    }
    let c = root().join(cached);
    if c.is_file() {
        return Some(c);
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

/// Whether every component must be there (`ROCEWATCH_REQUIRE_ALL=1`, set by
/// `scripts/test.sh` and so by CI): a missing one fails its test instead of skipping it.
pub fn require_all() -> bool {
    std::env::var("ROCEWATCH_REQUIRE_ALL").as_deref() == Ok("1")
}

/// What a test needs and cannot find: under `scripts/test.sh` (and CI) a failure, with how
/// to get it; in a plain `cargo test` (a newcomer's, without the receivers or the lab
/// image) the test says SKIPPED, what is missing and which command installs it, and does
/// not run. `scripts/test.sh` also fails on any SKIPPED line in the output.
pub fn missing(what: &str, install: &str) {
    if require_all() {
        panic!("{what} not found: {install} (scripts/test.sh requires every component)");
    }
    skipped(&format!(
        "{what} not found; {install}; this test did not run (scripts/test.sh runs it)"
    ));
}

/// Say `SKIPPED: why` on standard error past the test harness's capture (written to the
/// descriptor, not through `eprintln!`): a skipped test passes, and its captured output
/// would never be shown.
pub fn skipped(why: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "SKIPPED: {why}");
}

/// `found`, or `None` after saying [`missing`] (see there).
pub fn require(what: &str, found: Option<PathBuf>) -> Option<PathBuf> {
    if found.is_none() {
        missing(
            what,
            "run scripts/install-test-deps.sh (it unpacks the receivers into .cache/)",
        );
    }
    found
}

/// A UDP port on loopback that was free a moment ago (bound, then let go): for receivers
/// that cannot listen on port 0 and say where they are (collectd). Whoever binds it must
/// try another one when it was taken in between ([`crate::collectd::start`] does).
pub fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A loopback TCP port held bound but not listening: a connection to it is refused, and
/// no other process can take it, until [`HeldPort::listen`] (a receiver that starts
/// late) or the drop. No race for the port, unlike binding one and letting it go.
pub struct HeldPort {
    fd: std::os::fd::OwnedFd,
    pub port: u16,
}

impl HeldPort {
    pub fn new() -> HeldPort {
        use std::os::fd::{AsRawFd, FromRawFd};
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        // SAFETY: a new socket is owned at once; bind and getsockname get a sockaddr_in of
        // the length they are told.
        unsafe {
            let raw = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
            assert!(raw >= 0, "socket: {}", std::io::Error::last_os_error());
            let fd = std::os::fd::OwnedFd::from_raw_fd(raw);
            let mut addr: libc::sockaddr_in = std::mem::zeroed();
            addr.sin_family = libc::AF_INET as libc::sa_family_t;
            addr.sin_addr.s_addr = u32::from_ne_bytes([127, 0, 0, 1]);
            let r = libc::bind(
                fd.as_raw_fd(),
                &addr as *const _ as *const libc::sockaddr,
                len,
            );
            assert_eq!(r, 0, "bind: {}", std::io::Error::last_os_error());
            let mut bound: libc::sockaddr_in = std::mem::zeroed();
            let mut blen = len;
            let r = libc::getsockname(
                fd.as_raw_fd(),
                &mut bound as *mut _ as *mut libc::sockaddr,
                &mut blen,
            );
            assert_eq!(r, 0, "getsockname: {}", std::io::Error::last_os_error());
            HeldPort {
                fd,
                port: u16::from_be(bound.sin_port),
            }
        }
    }

    /// Start listening on the held port.
    pub fn listen(self) -> std::net::TcpListener {
        use std::os::fd::AsRawFd;
        // SAFETY: listen on a socket we own.
        let r = unsafe { libc::listen(self.fd.as_raw_fd(), 128) };
        assert_eq!(r, 0, "listen: {}", std::io::Error::last_os_error());
        std::net::TcpListener::from(self.fd)
    }
}

/// A test PKI: a CA, a server certificate for 127.0.0.1/localhost, a client certificate.
pub struct Pki {
    _dir: tempfile::TempDir,
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    /// A client certificate of the same CA with another name (`someone-else`).
    pub other_client_cert: PathBuf,
    pub other_client_key: PathBuf,
}

pub fn pki() -> Pki {
    use rcgen::{
        BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    };
    let dir = tempfile::tempdir().unwrap();
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "rocewatch test CA");
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let leaf = |names: Vec<String>, usage: ExtendedKeyUsagePurpose| {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(names).unwrap();
        p.extended_key_usages = vec![usage];
        let cert = p.signed_by(&key, &issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let (server_pem, server_key) = leaf(
        vec!["127.0.0.1".into(), "localhost".into()],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    let (client_pem, client_key) = leaf(
        vec!["rocewatch-agent".into()],
        ExtendedKeyUsagePurpose::ClientAuth,
    );
    let (other_pem, other_key) = leaf(
        vec!["someone-else".into()],
        ExtendedKeyUsagePurpose::ClientAuth,
    );
    let w = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    Pki {
        ca: w("ca.pem", &ca_cert.pem()),
        server_cert: w("server.pem", &server_pem),
        server_key: w("server.key", &server_key),
        client_cert: w("client.pem", &client_pem),
        client_key: w("client.key", &client_key),
        other_client_cert: w("other-client.pem", &other_pem),
        other_client_key: w("other-client.key", &other_key),
        _dir: dir,
    }
}

pub mod grpc_receiver {
    //! An OTLP/gRPC receiver built from the OTLP proto definitions (no real gRPC receiver
    //! is installable here). It records every request with its `authorization` metadata.

    use std::sync::{Arc, Mutex};

    use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
        MetricsService, MetricsServiceServer,
    };
    use opentelemetry_proto::tonic::collector::metrics::v1::{
        ExportMetricsServiceRequest, ExportMetricsServiceResponse,
    };

    pub type Received = Arc<Mutex<Vec<(Option<String>, ExportMetricsServiceRequest)>>>;

    #[derive(Clone, Default)]
    struct Receiver(Received);

    #[tonic::async_trait]
    impl MetricsService for Receiver {
        async fn export(
            &self,
            request: tonic::Request<ExportMetricsServiceRequest>,
        ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
            let auth = request
                .metadata()
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            self.0.lock().unwrap().push((auth, request.into_inner()));
            Ok(tonic::Response::new(ExportMetricsServiceResponse {
                partial_success: None,
            }))
        }
    }

    /// Serve on 127.0.0.1:`port` (0: any) in `rt`; with `tls` = (ca, cert, key) it requires
    /// TLS and a client certificate signed by `ca`. Accepts gzip.
    pub fn start(
        rt: &tokio::runtime::Runtime,
        port: u16,
        tls: Option<(&std::path::Path, &std::path::Path, &std::path::Path)>,
    ) -> (u16, Received) {
        start_on(
            rt,
            std::net::TcpListener::bind(("127.0.0.1", port)).unwrap(),
            tls,
        )
    }

    /// [`start`] on a listener the test holds (a port held for a receiver that starts
    /// late, see [`super::HeldPort`]).
    pub fn start_on(
        rt: &tokio::runtime::Runtime,
        listener: std::net::TcpListener,
        tls: Option<(&std::path::Path, &std::path::Path, &std::path::Path)>,
    ) -> (u16, Received) {
        let received = Received::default();
        listener.set_nonblocking(true).unwrap();
        let listener = {
            let _guard = rt.enter();
            tokio::net::TcpListener::from_std(listener).unwrap()
        };
        let port = listener.local_addr().unwrap().port();
        let svc = MetricsServiceServer::new(Receiver(received.clone()))
            .accept_compressed(tonic::codec::CompressionEncoding::Gzip);
        let mut builder = tonic::transport::Server::builder();
        if let Some((ca, cert, key)) = tls {
            let identity = tonic::transport::Identity::from_pem(
                std::fs::read(cert).unwrap(),
                std::fs::read(key).unwrap(),
            );
            let tls = tonic::transport::ServerTlsConfig::new()
                .identity(identity)
                .client_ca_root(tonic::transport::Certificate::from_pem(
                    std::fs::read(ca).unwrap(),
                ));
            builder = builder.tls_config(tls).unwrap();
        }
        rt.spawn(async move {
            builder
                .add_service(svc)
                .serve_with_incoming(
                    tonic::codegen::tokio_stream::wrappers::TcpListenerStream::new(listener),
                )
                .await
                .unwrap();
        });
        (port, received)
    }
}

/// A process a test started. Its standard error (and output, unless the caller takes it)
/// goes to a file, never to a pipe nobody reads (a full pipe stalls the process); the file
/// is printed when the test fails while the process is in its hands (a panic, an assertion
/// or a timeout); it is killed and reaped when dropped.
pub struct Spawned {
    pub child: std::process::Child,
    name: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Spawned {
    /// Spawn `cmd` as `name` (said when its log is printed); `stdout` is where its standard
    /// output goes (`None`: the log file too).
    pub fn start(name: &str, cmd: &mut Command, stdout: Option<std::process::Stdio>) -> Spawned {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("output.log");
        let file = std::fs::File::create(&log).unwrap();
        let out = match stdout {
            Some(s) => s,
            None => file.try_clone().unwrap().into(),
        };
        let child = cmd
            .stdout(out)
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("start {name}: {e}"));
        Spawned {
            child,
            name: name.to_string(),
            log,
            _dir: dir,
        }
    }

    /// What it wrote so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it still runs.
    pub fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// Wait until `find` finds what it looks for in the log; fails (with the log) when the
    /// process exits first or `within` passes.
    pub fn wait_log<T>(
        &mut self,
        what: &str,
        within: std::time::Duration,
        find: impl Fn(&str) -> Option<T>,
    ) -> T {
        let deadline = std::time::Instant::now() + within;
        loop {
            if let Some(t) = find(&self.log()) {
                return t;
            }
            if let Some(st) = self.child.try_wait().unwrap() {
                panic!("{} exited ({st}) before {what}", self.name);
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{}: no {what} within {within:?}",
                self.name
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// Send `signal` (`TERM`, `HUP`, ...).
    pub fn signal(&self, signal: &str) {
        let st = Command::new("kill")
            .args([&format!("-{signal}"), &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(st.success(), "kill -{signal} {}", self.pid());
    }

    /// Its exit status once it exits within `within`.
    pub fn wait_exit(&mut self, within: std::time::Duration) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + within;
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return Some(st);
            }
            if std::time::Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// SIGTERM, then its exit status (within 20 s, or the test fails), its log and how long
    /// it took to exit.
    pub fn stop(&mut self) -> (std::process::ExitStatus, String, std::time::Duration) {
        let started = std::time::Instant::now();
        self.signal("TERM");
        let st = self
            .wait_exit(std::time::Duration::from_secs(20))
            .unwrap_or_else(|| panic!("{} did not stop within 20 s of SIGTERM", self.name));
        (st, self.log(), started.elapsed())
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- {}'s standard error:\n{}--- end", self.name, self.log());
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `rocewatch run ARGS --ready-file ...`: listeners may use port 0 (no race for ports);
/// [`RunningAgent::addr`] says where they are. Its standard error is printed when the test
/// fails while the agent runs; the agent is killed when dropped.
pub struct RunningAgent {
    pub proc: Spawned,
    ready: PathBuf,
    _dir: tempfile::TempDir,
}

impl RunningAgent {
    pub fn start(args: &[&str]) -> RunningAgent {
        Self::start_with(args, &[], None)
    }

    /// With extra environment; `stdout` where the agent's standard output goes (`None`:
    /// its log).
    pub fn start_with(
        args: &[&str],
        env: &[(&str, &str)],
        stdout: Option<std::process::Stdio>,
    ) -> RunningAgent {
        let dir = tempfile::tempdir().unwrap();
        let ready = dir.path().join("ready.json");
        let mut cmd = Command::new(&artifacts().rocewatch);
        cmd.arg("run").args(args).arg("--ready-file").arg(&ready);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut proc = Spawned::start("rocewatch run", &mut cmd, stdout);
        let ready_file = ready.clone();
        proc.wait_log("its ready file", std::time::Duration::from_secs(30), |_| {
            ready_file.exists().then_some(())
        });
        RunningAgent {
            proc,
            ready,
            _dir: dir,
        }
    }

    /// `HOST:PORT` of a listener (`prometheus`, `alertmanager`), as the ready file says
    /// now (a reload binds again, and rewrites it).
    pub fn addr(&self, listener: &str) -> String {
        let text = std::fs::read_to_string(&self.ready).unwrap();
        let addresses: serde_json::Value = serde_json::from_str(&text).unwrap();
        addresses[listener]
            .as_str()
            .unwrap_or_else(|| panic!("no {listener} listener: {addresses}"))
            .to_string()
    }

    /// `http://HOST:PORT` of the Prometheus listener.
    pub fn prometheus_url(&self) -> String {
        format!("http://{}", self.addr("prometheus"))
    }

    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    pub fn stderr(&self) -> String {
        self.proc.log()
    }
}

/// The prometheus binary the receiver tests use (`None`: skipped knowingly, see
/// [`require`]).
pub fn prometheus_binary() -> Option<PathBuf> {
    require(
        "prometheus",
        receiver(
            "ROCEWATCH_PROMETHEUS",
            ".cache/prometheus/usr/bin/prometheus",
            "prometheus",
        ),
    )
}

/// A real Prometheus (`prom`, the binary) with `config` (prometheus.yml text) in `dir`,
/// listening on port 0; its stderr is printed if the test fails while it runs.
pub struct Prometheus {
    pub proc: Spawned,
    pub addr: String,
}

impl Prometheus {
    pub fn start(prom: &std::path::Path, dir: &std::path::Path, config: &str) -> Prometheus {
        Prometheus::start_with(prom, dir, config, &[])
    }

    /// [`Prometheus::start`] with `extra` arguments (`--enable-feature=...`).
    pub fn start_with(
        prom: &std::path::Path,
        dir: &std::path::Path,
        config: &str,
        extra: &[&str],
    ) -> Prometheus {
        let cfg = dir.join("prometheus.yml");
        std::fs::write(&cfg, config).unwrap();
        let mut proc = Spawned::start(
            "prometheus",
            Command::new(prom)
                .arg(format!("--config.file={}", cfg.display()))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.join("tsdb").display()
                ))
                .arg("--web.listen-address=127.0.0.1:0")
                .args(extra),
            None,
        );
        // msg="Listening on" address=127.0.0.1:33655
        let addr = proc.wait_log("its listener", std::time::Duration::from_secs(30), |log| {
            let line = log.lines().find(|l| l.contains("msg=\"Listening on\""))?;
            Some(
                line.split("address=")
                    .nth(1)?
                    .split(' ')
                    .next()?
                    .to_string(),
            )
        });
        Prometheus { proc, addr }
    }

    /// An instant query: each result's labels and value (empty while nothing matches).
    pub fn query(&self, promql: &str) -> Vec<(serde_json::Value, f64)> {
        let body = reqwest::blocking::Client::new()
            .get(format!("http://{}/api/v1/query", self.addr))
            .query(&[("query", promql)])
            .send()
            .ok()
            .and_then(|r| r.text().ok())
            .unwrap_or_default();
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        v["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .filter_map(|r| Some((r["metric"].clone(), r["value"][1].as_str()?.parse().ok()?)))
            .collect()
    }
}

/// The YAML documents of a file of the repository (`deploy/...`).
pub fn yaml_docs(rel: &str) -> Vec<serde_yaml::Value> {
    use serde::Deserialize;
    let text = std::fs::read_to_string(root().join(rel)).unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde_yaml::Value::deserialize(d).unwrap_or_else(|e| panic!("{rel}: {e}")))
        .collect()
}

/// A state directory of this call's own that does not exist yet (no quarantine, no link
/// history): `health` keeps its `link` readings in the state directory, so a made-up
/// path would be created on this machine (a `/nonexistent` at the root). All of them
/// under one temporary directory of this test process.
pub fn fresh_state_dir() -> PathBuf {
    static PARENT: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    let parent = PARENT.get_or_init(|| tempfile::tempdir().expect("a temporary directory"));
    tempfile::tempdir_in(parent.path())
        .expect("a temporary directory")
        .keep()
        .join("state")
}
