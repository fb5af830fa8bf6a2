//! The closed sets of label values of the agent's self-metrics: one enum each, so the
//! catalog's description and every place that counts agree (a test checks the
//! description names every value).

macro_rules! label_set {
    ($(#[$m:meta])* $ty:ident { $($(#[$vm:meta])* $v:ident = $s:literal,)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum $ty { $($(#[$vm])* $v,)* }

        impl $ty {
            /// Every value, in the order the catalog lists them.
            pub const ALL: &'static [$ty] = &[$($ty::$v),*];

            /// The label value.
            pub fn as_str(self) -> &'static str {
                match self { $($ty::$v => $s,)* }
            }
        }

        impl serde::Serialize for $ty {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

label_set! {
    /// `reason` of `rocewatch.plugin.errors`.
    PluginErrorReason {
        /// The library could not be loaded, or a call found the plugin not loaded.
        Load = "load",
        /// The library's ABI version or function table does not match.
        Abi = "abi",
        /// The library's path is writable by someone other than root.
        Insecure = "insecure",
        /// A call returned an error.
        Error = "error",
        /// A call panicked (caught at the boundary).
        Panic = "panic",
        /// A call ran past its timeout.
        Timeout = "timeout",
        /// A collection returned samples and errors.
        Partial = "partial",
        /// A call found the previous one still running.
        Busy = "busy",
        /// A collector emitted a metric it did not declare.
        Undeclared = "undeclared",
    }
}

label_set! {
    /// `result` of `rocewatch.config.reloads`.
    ReloadResult {
        /// The new configuration runs.
        Ok = "ok",
        /// The new file was refused; the agent runs on with the old one.
        Error = "error",
    }
}

label_set! {
    /// `decision` of an audit record, and of `rocewatch.remediation.decisions` (which
    /// counts the records naming an action: fired and cleared are the transition's own).
    AuditKind {
        /// A rule or alert began firing.
        Fired = "fired",
        /// It cleared.
        Cleared = "cleared",
        /// An action did not run: the kill switch, a limit, the agent stopping.
        Suppressed = "suppressed",
        /// What the action would do.
        DryRun = "dry_run",
        /// The action starts (flushed to disk first).
        Executing = "executing",
        /// The action did not run: its `executing` could not be written.
        Refused = "refused",
        /// How the action ended.
        Result = "result",
    }
}

label_set! {
    /// `outcome` of an audit record of kind `result`.
    ActionOutcome {
        Ok = "ok",
        Error = "error",
        /// Not done within its timeout; abandoned.
        Timeout = "timeout",
        /// Ended by the agent's shutdown.
        Killed = "killed",
    }
}

label_set! {
    /// `reason` of `rocewatch.exporter.dropped`: why snapshots never reached the receiver.
    ExporterDropReason {
        /// The queue was full (the endpoint failed for longer than the queue holds).
        QueueFull = "queue_full",
        /// Given up at shutdown, the endpoint unreachable.
        Shutdown = "shutdown",
        /// The receiver answered with a failure the OTLP specification says not to retry
        /// (HTTP 400, 500...; gRPC UNKNOWN, INVALID_ARGUMENT, RESOURCE_EXHAUSTED without
        /// RetryInfo...).
        Rejected = "rejected",
        /// One request, split as far as it goes, still too large for the receiver.
        TooLarge = "too_large",
        /// The snapshot could not be encoded (or its queued bytes read back).
        Encode = "encode",
    }
}

label_set! {
    /// `transition` of `rocewatch.rule.transitions`.
    RuleTransition {
        Firing = "firing",
        Cleared = "cleared",
    }
}

/// Whether `description` names every value of a label set (as `` `a` `` or as a word in
/// a parenthesised list).
pub fn describes_all(description: &str, values: &[&str]) -> Vec<String> {
    values
        .iter()
        .filter(|v| {
            !description
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .any(|w| w == **v)
        })
        .map(|v| v.to_string())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::SELF_METRICS;
    use crate::names;

    fn description(name: &str) -> &'static str {
        SELF_METRICS
            .iter()
            .find(|e| e.name == name)
            .expect("a self-metric")
            .description
    }

    #[test]
    fn the_catalog_describes_every_value_of_each_label_set() {
        let sets: [(&str, Vec<&str>); 6] = [
            (
                names::ROCEWATCH_PLUGIN_ERRORS,
                PluginErrorReason::ALL.iter().map(|v| v.as_str()).collect(),
            ),
            (
                names::ROCEWATCH_CONFIG_RELOADS,
                ReloadResult::ALL.iter().map(|v| v.as_str()).collect(),
            ),
            (
                names::ROCEWATCH_REMEDIATION_DECISIONS,
                AuditKind::ALL.iter().map(|v| v.as_str()).collect(),
            ),
            (
                names::ROCEWATCH_RULE_TRANSITIONS,
                RuleTransition::ALL.iter().map(|v| v.as_str()).collect(),
            ),
            (
                names::ROCEWATCH_EXPORTER_DROPPED,
                ExporterDropReason::ALL.iter().map(|v| v.as_str()).collect(),
            ),
            (
                names::ROCEWATCH_EVENTS_DROPPED,
                ExporterDropReason::ALL.iter().map(|v| v.as_str()).collect(),
            ),
        ];
        for (metric, values) in sets {
            let missing = describes_all(description(metric), &values);
            assert!(
                missing.is_empty(),
                "{metric}'s description lacks {missing:?}"
            );
        }
    }

    #[test]
    fn a_value_missing_from_a_description_is_seen() {
        assert_eq!(
            describes_all("by `reason` (load, abi)", &["load", "abi", "busy"]),
            vec!["busy".to_string()]
        );
    }
}
