//! Dumps links, addresses, rules and routes of this network namespace over rtnetlink, as
//! `rocewatch-netlink` decodes them, one line each; with a folder argument, also writes
//! every request and reply there (`NNNN-request.bin`, `NNNN-reply-K.bin`). How the
//! recordings under `testdata/route-*` were made (see their README).
//!
//! `cargo run -p rocewatch-netlink --example route-dump [DIR]`

use rocewatch_netlink::route::RouteNetlink;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut nl = RouteNetlink::open()?;
    if let Some(dir) = std::env::args_os().nth(1) {
        nl.capture_to(dir.into());
    }
    for l in nl.links()? {
        println!("link {} {} flags {:#x}", l.index, l.name, l.flags);
    }
    for a in nl.addresses()? {
        println!(
            "addr {} {} flags {:#x} scope {}",
            a.index, a.local, a.flags, a.scope
        );
    }
    for r in nl.rules()? {
        println!("rule {r:?}");
    }
    for r in nl.routes()? {
        println!("route {r:?}");
    }
    Ok(())
}
