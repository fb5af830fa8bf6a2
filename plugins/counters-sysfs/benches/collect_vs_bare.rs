//! The cost of one collection by the sysfs counter plugin against the bare cost of reading
//! the same files in a tight loop, on the same tree, in the same run.
//!
//! `cargo bench -p rocewatch-counters-sysfs --bench collect_vs_bare [-- ROOT]`
//! ROOT defaults to a 16-port mlx5 host generated with
//! `integration-tests/fixtures/generate.py --big`.
// Functions over 120 lines are refused outside tests; this is a benchmark.
#![allow(clippy::too_many_lines)]

mod common;

use std::hint::black_box;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rocewatch_counters_sysfs::SysfsCounters;
use rocewatch_plugin_api::{CollectorPlugin, Plugin, PluginContext};

/// Every file the plugin reads per scrape: the counter directories plus state, phys_state,
/// rate and the netdev MTU of each port.
fn files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let ib = root.join("class/infiniband");
    for dev in std::fs::read_dir(&ib).unwrap() {
        let dev = dev.unwrap().path();
        for port in std::fs::read_dir(dev.join("ports")).unwrap() {
            let port = port.unwrap().path();
            for f in ["state", "phys_state", "rate"] {
                out.push(port.join(f));
            }
            for group in ["counters", "counters_ext", "hw_counters"] {
                if let Ok(rd) = std::fs::read_dir(port.join(group)) {
                    for f in rd {
                        let f = f.unwrap();
                        if f.file_name() != "lifespan" {
                            out.push(f.path());
                        }
                    }
                }
            }
            if let Ok(rd) = std::fs::read_dir(port.join("gid_attrs/ndevs")) {
                if let Some(nd) = rd
                    .filter_map(|e| e.ok())
                    .find_map(|e| std::fs::read_to_string(e.path()).ok())
                {
                    out.push(root.join("class/net").join(nd.trim()).join("mtu"));
                }
            }
        }
    }
    out
}

/// The least a reader can do per file: open, read until EOF into a stack buffer, close
/// (no stat, no seek, no allocation).
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

/// The least a reader keeping the files open can do: one `pread` at offset 0 per file.
fn bare_pread(files: &[std::fs::File]) -> u64 {
    use std::os::unix::fs::FileExt;
    let mut buf = [0u8; 4096];
    let mut sum = 0u64;
    for f in files {
        if let Ok(n) = f.read_at(&mut buf, 0) {
            sum += n as u64;
        }
    }
    sum
}

fn per_iter(mut f: impl FnMut(), budget: Duration) -> (Duration, u32) {
    for _ in 0..20 {
        f(); // warm the page cache and the plan
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
    let root = common::root_from_args();
    let files = files(&root);
    let open: Vec<std::fs::File> = files
        .iter()
        .filter_map(|f| std::fs::File::open(f).ok())
        .collect();
    let plugin_with = |keep: &str| {
        let mut p = SysfsCounters::new();
        let mut ctx = PluginContext::new(&root);
        ctx.options = serde_json::json!({ "keep_files_open": keep });
        p.start(&ctx).unwrap();
        p
    };
    // As on sysfs (files kept open), and as on a tree where they cannot be.
    let mut plugin = plugin_with("always");
    let mut reopening = plugin_with("never");
    let samples = plugin.collect().unwrap().samples.len();
    let budget = Duration::from_secs(3);
    let (b, nb) = per_iter(
        || {
            black_box(bare(black_box(&files)));
        },
        budget,
    );
    let (bp, nbp) = per_iter(
        || {
            black_box(bare_pread(black_box(&open)));
        },
        budget,
    );
    let (c, nc) = per_iter(
        || {
            black_box(plugin.collect().unwrap());
        },
        budget,
    );
    let (cr, ncr) = per_iter(
        || {
            black_box(reopening.collect().unwrap());
        },
        budget,
    );
    println!("tree: {}", root.display());
    println!(
        "files per scrape: {}, samples per scrape: {samples}",
        files.len()
    );
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "bare pread of open files:      {:>8.1} us per scrape ({nbp} iterations)",
        us(bp)
    );
    println!(
        "collection, files kept open:   {:>8.1} us per scrape ({nc} iterations)",
        us(c)
    );
    println!(
        "bare open+read+close:          {:>8.1} us per scrape ({nb} iterations)",
        us(b)
    );
    println!(
        "collection, files reopened:    {:>8.1} us per scrape ({ncr} iterations)",
        us(cr)
    );
    println!(
        "ratio collection / bare read: {:.2} (files kept open, as on sysfs), {:.2} (reopened)",
        c.as_secs_f64() / bp.as_secs_f64(),
        cr.as_secs_f64() / b.as_secs_f64()
    );
}
