//! `rocewatch capture --read FILE`: the RoCE v2 traffic of a capture, summed up.

use anyhow::{Context, Result};

use super::args::CaptureArgs;
use super::output::print_json;
use crate::doctor::roce_decode::summarize;

pub fn run(a: CaptureArgs) -> Result<i32> {
    let bytes = std::fs::read(&a.read).with_context(|| format!("--read {}", a.read.display()))?;
    let s = summarize(&bytes).with_context(|| a.read.display().to_string())?;
    if a.json {
        print_json(&serde_json::to_value(&s)?)?;
    } else {
        print!("{}", s.text());
    }
    Ok(0)
}
