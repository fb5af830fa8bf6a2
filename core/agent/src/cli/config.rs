//! `rocewatch config check FILE`.

use std::path::Path;

use anyhow::Result;

use crate::config::Config;

pub fn check(file: &Path) -> Result<i32> {
    match Config::load(Some(file)) {
        Ok(_) => {
            println!("{}: ok", file.display());
            Ok(0)
        }
        Err(e) => {
            eprintln!("rocewatch: {e}");
            Ok(1)
        }
    }
}
