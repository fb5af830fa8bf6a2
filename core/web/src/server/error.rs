//! What is wrong with a web configuration.

use std::path::{Path, PathBuf};

/// What is wrong with a web configuration; always names the file, and the key when known.
#[derive(Debug, Clone, thiserror::Error)]
pub enum WebError {
    #[error("{file}: {}{message}", key_prefix(key))]
    Invalid {
        file: PathBuf,
        key: String,
        message: String,
    },
}

fn key_prefix(key: &str) -> String {
    if key.is_empty() || key == "." {
        String::new()
    } else {
        format!("{key}: ")
    }
}

impl WebError {
    pub fn invalid(file: &Path, key: impl Into<String>, message: impl Into<String>) -> Self {
        WebError::Invalid {
            file: file.to_path_buf(),
            key: key.into(),
            message: message.into(),
        }
    }

    pub(super) fn file(file: &Path, key: &str, e: impl std::fmt::Display) -> Self {
        WebError::invalid(file, key, e.to_string())
    }
}
