//! The `ROCEWATCH_*` overrides, and the keys they set (an error about one names its
//! variable).

/// The key paths the `ROCEWATCH_*` overrides set, each with its variable: an error about
/// such a key names the variable, whose value won over the file's.
#[derive(Debug, Clone, Default)]
pub struct EnvKeys(Vec<(String, String)>);

impl EnvKeys {
    pub(super) fn new(overrides: &[(String, String)]) -> EnvKeys {
        EnvKeys(
            overrides
                .iter()
                .filter_map(|(var, _)| {
                    let rest = var.strip_prefix("ROCEWATCH_")?;
                    Some((rest.to_ascii_lowercase().replace("__", "."), var.clone()))
                })
                .collect(),
        )
    }

    /// The variable that set `path` (`agent.interval`) or the key above it
    /// (`devices.include` for `devices.include[1]`), the longest key first.
    pub(super) fn var(&self, path: &str) -> Option<&str> {
        self.0
            .iter()
            .filter(|(key, _)| {
                path.strip_prefix(key.as_str())
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
            })
            .max_by_key(|(key, _)| key.len())
            .map(|(_, var)| var.as_str())
    }
}

/// The `ROCEWATCH_*` variables that are config overrides (they contain `__`).
pub(super) fn env_overrides() -> Vec<(String, String)> {
    std::env::vars()
        .filter(|(k, _)| {
            k.strip_prefix("ROCEWATCH_")
                .is_some_and(|rest| rest.contains("__"))
        })
        .collect()
}

