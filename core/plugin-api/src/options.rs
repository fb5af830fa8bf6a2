//! A plugin's options, decoded strictly: a plugin's `Options` struct says
//! `#[serde(deny_unknown_fields)]`, and [`decode`] turns a mistake into an
//! [`PluginError::InvalidOptions`] naming the key path (`keep_files_open`,
//! `patterns.cmd_timeout`), so a typo is refused, never silently ignored. `rocewatch
//! config check` prefixes the path with where the options are
//! (`plugins.builtin.counters-sysfs.options`).

use serde::de::DeserializeOwned;

use crate::PluginError;

/// Decode `options` (a JSON object; `null` reads as `{}`) into `T`.
pub fn decode<T: DeserializeOwned>(options: &serde_json::Value) -> Result<T, PluginError> {
    let empty = serde_json::Value::Object(Default::default());
    let v = if options.is_null() { &empty } else { options };
    serde_path_to_error::deserialize(v).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        PluginError::InvalidOptions(if path == "." {
            inner.to_string()
        } else {
            format!("{path}: {inner}")
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Opts {
        #[serde(default)]
        keep: bool,
        #[serde(default)]
        inner: Inner,
    }

    #[derive(Debug, Default, serde::Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Inner {
        #[serde(default)]
        n: u32,
    }

    #[test]
    fn a_typo_is_named_with_its_path() {
        let e = decode::<Opts>(&serde_json::json!({"kepe": true})).unwrap_err();
        assert!(e.to_string().contains("kepe: unknown field `kepe`"), "{e}");
        let e = decode::<Opts>(&serde_json::json!({"inner": {"m": 1}})).unwrap_err();
        assert!(e.to_string().contains("inner.m: unknown field `m`"), "{e}");
        let e = decode::<Opts>(&serde_json::json!({"inner": {"n": "x"}})).unwrap_err();
        assert!(e.to_string().contains("inner.n: invalid type"), "{e}");
        assert_eq!(
            decode::<Opts>(&serde_json::Value::Null).unwrap(),
            Opts {
                keep: false,
                inner: Inner::default()
            }
        );
    }
}
