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

#[cfg(test)]
mod tests {
    use super::EnvKeys;

    #[test]
    fn a_key_or_one_under_it_names_its_variable() {
        let o = |k: &str| (k.to_string(), "x".to_string());
        let keys = EnvKeys::new(&[
            o("ROCEWATCH_AGENT__INTERVAL"),
            o("ROCEWATCH_DEVICES__INCLUDE"),
        ]);
        assert_eq!(
            keys.var("agent.interval"),
            Some("ROCEWATCH_AGENT__INTERVAL")
        );
        assert_eq!(
            keys.var("devices.include[1]"),
            Some("ROCEWATCH_DEVICES__INCLUDE")
        );
        // Another key that only begins the same is not it.
        assert_eq!(keys.var("agent.interval_max"), None);
        assert_eq!(keys.var("agent.jitter"), None);
    }
}
