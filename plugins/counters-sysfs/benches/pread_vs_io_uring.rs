//! Whether batching a collection's reads through io_uring beats one `pread(2)` per kept
//! file, on this kernel: the same descriptors read at offset 0, one system call each
//! against all of them submitted together (registered files, one `io_uring_enter` per
//! batch of up to 256, a single-issuer ring with deferred task work). Two sets of files: the generated 16-port tree's counter files
//! (regular files on the test machine's file system, what the other benchmarks read), and
//! real sysfs attributes of this machine (its network devices' `statistics/` and other
//! kernfs files, opened as many times as the tree has files), since sysfs is what the
//! collector reads on a host. Reported: wall time and the process's CPU time (user and
//! system, the io_uring workers' included) per collection-sized round. (kernfs, under
//! sysfs, has no non-blocking read: io_uring hands each sysfs read to a worker of its
//! own, which is what a collector using it on a host would pay.)
//!
//! `cargo bench -p rocewatch-counters-sysfs --bench pread_vs_io_uring [-- ROOT]`
//! ROOT defaults to a 16-port mlx5 host generated with
//! `integration-tests/fixtures/generate.py --big`.
#![allow(clippy::too_many_lines)]

mod common;

use std::hint::black_box;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use io_uring::{opcode, types, IoUring};

/// The counter files of the tree (what a collection reads, files kept open).
fn tree_files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let ib = root.join("class/infiniband");
    for dev in std::fs::read_dir(&ib).expect("class/infiniband") {
        let dev = dev.expect("entry").path();
        for port in std::fs::read_dir(dev.join("ports")).expect("ports") {
            let port = port.expect("entry").path();
            for f in ["state", "phys_state", "rate"] {
                out.push(port.join(f));
            }
            for group in ["counters", "counters_ext", "hw_counters"] {
                if let Ok(rd) = std::fs::read_dir(port.join(group)) {
                    out.extend(rd.filter_map(Result::ok).map(|e| e.path()));
                }
            }
        }
    }
    out.sort();
    out
}

/// Real sysfs attributes of this machine, repeated up to `n` descriptors.
fn sysfs_files(n: usize) -> Vec<PathBuf> {
    let mut found = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/sys/class/net") {
        for nd in rd.filter_map(Result::ok) {
            let stats = nd.path().join("statistics");
            if let Ok(rd) = std::fs::read_dir(&stats) {
                found.extend(rd.filter_map(Result::ok).map(|e| e.path()));
            }
            for f in ["mtu", "operstate", "carrier", "speed", "tx_queue_len"] {
                found.push(nd.path().join(f));
            }
        }
    }
    found.retain(|p| {
        std::fs::File::open(p)
            .and_then(|f| f.read_at(&mut [0u8; 64], 0))
            .is_ok()
    });
    found.sort();
    if found.is_empty() {
        return found;
    }
    found.iter().cycle().take(n).cloned().collect()
}

fn by_pread(files: &[std::fs::File], buf: &mut [u8; 4096]) -> u64 {
    let mut sum = 0;
    for f in files {
        if let Ok(n) = f.read_at(buf, 0) {
            sum += n as u64;
        }
    }
    sum
}

/// Submit and wait for `want` completions, again when a signal interrupts the wait (the
/// reads stay in flight: giving up would free buffers the kernel still writes to).
fn submit_and_wait(ring: &IoUring, want: usize) {
    loop {
        match ring.submit_and_wait(want) {
            Ok(_) => return,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => panic!("io_uring_enter: {e}"),
        }
    }
}

/// Every file's read submitted at once (in batches of the ring's size), waited for
/// together. Returns the bytes read and the reads that failed.
fn by_uring(ring: &mut IoUring, n: usize, bufs: &mut [[u8; 4096]]) -> (u64, usize) {
    let depth = ring.params().sq_entries() as usize;
    let (mut sum, mut failed) = (0, 0);
    let mut at = 0;
    while at < n {
        let batch = (n - at).min(depth);
        {
            let mut sq = ring.submission();
            for (i, buf) in bufs.iter_mut().enumerate().skip(at).take(batch) {
                let read = opcode::Read::new(types::Fixed(i as u32), buf.as_mut_ptr(), 4096)
                    .offset(0)
                    .build()
                    .user_data(i as u64);
                // SAFETY: the buffer outlives the read: it is waited for below, before
                // this function returns.
                unsafe { sq.push(&read).expect("the ring has room for its batch") };
            }
        }
        submit_and_wait(ring, batch);
        let mut done = 0;
        while done < batch {
            for cqe in ring.completion() {
                done += 1;
                match cqe.result() {
                    r if r >= 0 => sum += r as u64,
                    _ => failed += 1,
                }
            }
            if done < batch {
                submit_and_wait(ring, batch - done);
            }
        }
        at += batch;
    }
    (sum, failed)
}

fn cpu_now() -> Duration {
    // SAFETY: getrusage writes the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// (wall, CPU) per round, over `budget`.
fn measure(mut f: impl FnMut() -> u64, budget: Duration) -> (Duration, Duration, u32) {
    for _ in 0..20 {
        black_box(f());
    }
    let (start, cpu) = (Instant::now(), cpu_now());
    let mut n = 0;
    while n == 0 || start.elapsed() < budget {
        black_box(f());
        n += 1;
    }
    (start.elapsed() / n, (cpu_now() - cpu) / n, n)
}

fn compare(what: &str, paths: &[PathBuf]) {
    let files: Vec<std::fs::File> = paths
        .iter()
        .filter_map(|p| std::fs::File::open(p).ok())
        .collect();
    // The buffers before the ring: dropped after it, never under a read in flight.
    let mut bufs = vec![[0u8; 4096]; files.len()];
    // The setup that costs least per request for one thread submitting and reaping
    // (no interrupting task work, completions run when waited for).
    let mut ring = match IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .setup_coop_taskrun()
        .build(256)
    {
        Ok(r) => r,
        Err(e) => {
            println!("{what}: io_uring unavailable here ({e}): NOT MEASURED");
            return;
        }
    };
    let fds: Vec<i32> = files.iter().map(AsRawFd::as_raw_fd).collect();
    ring.submitter()
        .register_files(&fds)
        .expect("register the files");
    let mut buf = [0u8; 4096];
    let want = by_pread(&files, &mut buf);
    let (got, failed) = by_uring(&mut ring, files.len(), &mut bufs);
    assert_eq!(failed, 0, "{what}: io_uring reads failed");
    // Counters that move (the machine's own network statistics) may differ by a digit.
    assert!(
        got.abs_diff(want) <= files.len() as u64,
        "{what}: io_uring read {got} bytes, pread {want}"
    );
    let budget = Duration::from_secs(3);
    let (pw, pc, pn) = measure(|| by_pread(&files, &mut buf), budget);
    let (uw, uc, un) = measure(|| by_uring(&mut ring, files.len(), &mut bufs).0, budget);
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!("{what}: {} descriptors", files.len());
    println!(
        "  pread, one call per file:  {:>8.1} us wall, {:>8.1} us CPU per round ({pn} rounds)",
        us(pw),
        us(pc)
    );
    println!(
        "  io_uring, batched:         {:>8.1} us wall, {:>8.1} us CPU per round ({un} rounds)",
        us(uw),
        us(uc)
    );
    println!(
        "  io_uring / pread: {:.2} wall, {:.2} CPU",
        uw.as_secs_f64() / pw.as_secs_f64(),
        uc.as_secs_f64() / pc.as_secs_f64()
    );
}

fn main() {
    let root = common::root_from_args();
    let tree = tree_files(&root);
    println!(
        "kernel {}",
        std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
    );
    compare("generated tree (regular files)", &tree);
    let sys = sysfs_files(tree.len());
    if sys.is_empty() {
        println!("real sysfs: no readable /sys/class/net attributes here: NOT MEASURED");
    } else {
        compare("real sysfs (/sys/class/net attributes)", &sys);
    }
}
