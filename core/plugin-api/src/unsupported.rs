//! "Cannot run here" as a collector's state: a collector that finds nothing to read at
//! start (no RDMA netlink, a fixture tree, no permission for the kernel log) starts anyway
//! and answers every collection with the same [`PluginError::Unsupported`], which the host
//! says once; a restart (a reload) looks again.

use crate::PluginError;

/// Why a started collector cannot run here, if it cannot.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct UnsupportedHere(Option<String>);

impl UnsupportedHere {
    /// Take the result of a collector's opening at start: an `Unsupported` error is kept
    /// (and start succeeds), any other result is returned as it is.
    pub fn start(&mut self, opened: Result<(), PluginError>) -> Result<(), PluginError> {
        self.0 = None;
        match opened {
            Err(PluginError::Unsupported(why)) => {
                self.0 = Some(why);
                Ok(())
            }
            r => r,
        }
    }

    /// At a collection: the kept `Unsupported`, if any.
    pub fn check(&self) -> Result<(), PluginError> {
        match &self.0 {
            Some(why) => Err(PluginError::Unsupported(why.clone())),
            None => Ok(()),
        }
    }

    /// At stop: forget it.
    pub fn clear(&mut self) {
        self.0 = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsupported_at_start_is_kept_for_every_collection_other_errors_are_not() {
        let mut u = UnsupportedHere::default();
        assert_eq!(
            u.start(Err(PluginError::Unsupported("no netlink".into()))),
            Ok(())
        );
        assert_eq!(
            u.check(),
            Err(PluginError::Unsupported("no netlink".into()))
        );
        assert_eq!(
            u.check(),
            Err(PluginError::Unsupported("no netlink".into()))
        );
        assert_eq!(
            u.start(Err(PluginError::failed("bad"))),
            Err(PluginError::failed("bad"))
        );
        assert_eq!(u.check(), Ok(()));
        u.start(Err(PluginError::Unsupported("x".into()))).unwrap();
        u.clear();
        assert_eq!(u.check(), Ok(()));
    }
}
