//! What the tests of the default rules share: a rule of configs/rules.toml by name.

use rocewatch_runtime::rules::RuleConfig;

/// The rule `name` of configs/rules.toml (the default set the project ships).
pub fn default_rule(name: &str) -> RuleConfig {
    #[derive(serde::Deserialize)]
    struct File {
        rules: Vec<RuleConfig>,
    }
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/rules.toml");
    let f: File = toml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    f.rules
        .into_iter()
        .find(|r| r.name == name)
        .unwrap_or_else(|| panic!("no rule {name} in configs/rules.toml"))
}
