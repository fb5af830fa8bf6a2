//! The `rocewatch` binary: parse the command line, run it, map errors to exit status 2.

use clap::Parser;

#[tokio::main]
async fn main() {
    let cli = rocewatch::cli::Cli::parse();
    match rocewatch::cli::run(cli).await {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("rocewatch: {e:#}");
            std::process::exit(2);
        }
    }
}
