//! The cost of one `rocewatch health` run (every check a tree allows) against the bare
//! cost of reading the files it needs in a tight loop, on the same tree, in the same run;
//! and its absolute time, against the 2 s a scheduler's health program is given.
//!
//! `cargo bench -p rocewatch-health --bench health_vs_bare [-- ROOT]`
//! ROOT defaults to a 16-port mlx5 host generated with
//! `integration-tests/fixtures/generate.py --big`.

use std::hint::black_box;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rocewatch_health::{run, HealthConfig, Options};

/// The files health's checks read per port: state, phys_state, rate, the GID table and
/// types, the netdev's flags and MTU, the PCIe link attributes.
fn files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for dev in std::fs::read_dir(root.join("class/infiniband")).unwrap() {
        let dev = dev.unwrap().path();
        for f in [
            "current_link_speed",
            "current_link_width",
            "max_link_speed",
            "max_link_width",
        ] {
            out.push(dev.join("device").join(f));
        }
        for port in std::fs::read_dir(dev.join("ports")).unwrap() {
            let port = port.unwrap().path();
            for f in ["state", "phys_state", "rate", "link_layer"] {
                out.push(port.join(f));
            }
            for g in ["gids", "gid_attrs/types", "gid_attrs/ndevs"] {
                if let Ok(rd) = std::fs::read_dir(port.join(g)) {
                    out.extend(rd.filter_map(|e| e.ok()).map(|e| e.path()));
                }
            }
        }
    }
    for nd in std::fs::read_dir(root.join("class/net")).unwrap() {
        let nd = nd.unwrap().path();
        out.push(nd.join("flags"));
        out.push(nd.join("mtu"));
    }
    out
}

fn bare(files: &[PathBuf]) -> u64 {
    let mut buf = [0u8; 4096];
    let mut sum = 0u64;
    for f in files {
        if let Ok(mut h) = std::fs::File::open(f) {
            while let Ok(n) = h.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sum += n as u64;
            }
        }
    }
    sum
}

fn per_iter(mut f: impl FnMut(), budget: Duration) -> (Duration, u32) {
    for _ in 0..20 {
        f();
    }
    let start = Instant::now();
    let mut n = 0;
    while start.elapsed() < budget {
        f();
        n += 1;
    }
    (start.elapsed() / n, n)
}

fn main() {
    let root = match std::env::args().skip(1).find(|a| !a.starts_with('-')) {
        Some(r) => PathBuf::from(r),
        None => {
            let dest = std::env::temp_dir().join("rocewatch-bench-host");
            let script = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../integration-tests/fixtures/generate.py");
            let out = std::process::Command::new("python3")
                .arg(&script)
                .arg("--big")
                .arg(&dest)
                .output()
                .expect("python3");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            dest.join("sys")
        }
    };
    let files = files(&root);
    // The link check keeps its readings in the state directory: one of the bench's own,
    // never inside the tree it reads.
    let state = tempfile::tempdir().expect("a temporary directory");
    let opts = Options {
        sysfs_root: root.clone(),
        live: false,
        kernel_log: serde_json::json!({}),
        devices: Default::default(),
        state_dir: state.path().join("state"),
        procfs_root: "/proc".into(),
        rail_rows: Ok(None),
    };
    let cfg = HealthConfig::default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let report = rt.block_on(run(&opts, &cfg));
    let ports = report
        .findings
        .iter()
        .filter(|f| f.check == "ports")
        .count();
    let budget = Duration::from_secs(3);
    let (b, nb) = per_iter(
        || {
            black_box(bare(black_box(&files)));
        },
        budget,
    );
    let (h, nh) = per_iter(
        || {
            black_box(rt.block_on(run(&opts, &cfg)));
        },
        budget,
    );
    println!(
        "tree: {} ({ports} ports, {} files)",
        root.display(),
        files.len()
    );
    println!(
        "bare reads of the files:   {:>10.1?} per run ({nb} runs)",
        b
    );
    println!(
        "rocewatch health (all):    {:>10.1?} per run ({nh} runs)",
        h
    );
    println!(
        "ratio health / bare:       {:>10.2}",
        h.as_secs_f64() / b.as_secs_f64()
    );
    println!("share of the 2 s bound:    {:>10.4}", h.as_secs_f64() / 2.0);
}
