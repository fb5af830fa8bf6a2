//! The `rocewatch` binary: parse the command line, run it, map errors to exit status 2.

fn main() {
    let cli = rocewatch::cli::parse();
    if cli.command.is_one_shot() {
        // Printing commands end quietly when their reader goes away (`| head`), like any
        // Unix filter. The long-running modes keep Rust's default (SIGPIPE ignored, EPIPE
        // returned) so a closed socket never kills the agent.
        // SAFETY: setting a signal disposition before any thread is started.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    raise_fd_limit();
    // Two malloc arenas instead of glibc's 8 per core: the agent's threads allocate
    // little, and every arena keeps its own freed pages (resident memory). Allocations of
    // 1 MiB and more (the /metrics body of a large host) are mapped on their own and
    // unmapped when freed; glibc's default threshold rises to the largest block freed,
    // after which such buffers stay in the heap.
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc tuning calls before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    }
    // One async worker: the agent's async work (schedules, exporters, the HTTP endpoint)
    // is small, and plugin calls and blocking exporters run on the blocking pool; a
    // second worker costs wake-ups and cache misses, not throughput.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("build the tokio runtime");
    let code = rt.block_on(async {
        match rocewatch::cli::run(cli).await {
            Ok(code) => code,
            Err(e) => {
                eprintln!("rocewatch: {e:#}");
                2
            }
        }
    });
    std::process::exit(code);
}

/// Raise the soft limit on open files to the hard limit (as Go programs do at start): the
/// counter collector keeps sysfs files open, one per counter, within a share of it.
fn raise_fd_limit() {
    // SAFETY: an all-zero rlimit is a valid out-buffer; get/setrlimit have no other effect.
    unsafe {
        let mut rl: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) == 0 && rl.rlim_cur < rl.rlim_max {
            rl.rlim_cur = rl.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &rl);
        }
    }
}
