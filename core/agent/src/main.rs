//! The `rocewatch` binary: parse the command line, run it, map errors to exit status 2.

use clap::Parser;

#[tokio::main]
async fn main() {
    let cli = rocewatch::cli::Cli::parse();
    if cli.command.is_one_shot() {
        // Printing commands end quietly when their reader goes away (`| head`), like any
        // Unix filter. The long-running modes keep Rust's default (SIGPIPE ignored, EPIPE
        // returned) so a closed socket never kills the agent.
        // SAFETY: setting a signal disposition before any thread is started.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    match rocewatch::cli::run(cli).await {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("rocewatch: {e:#}");
            std::process::exit(2);
        }
    }
}
