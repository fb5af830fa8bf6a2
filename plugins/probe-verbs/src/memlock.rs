//! Why a memory registration or a queue's creation failed, when the locked-memory limit
//! is the likely cause: the kernel charges every pinned page (`ib_umem_get`) to the soft
//! `RLIMIT_MEMLOCK` (EPERM at 0, ENOMEM over it) unless the process has `CAP_IPC_LOCK`.

/// This process's soft `RLIMIT_MEMLOCK`, bytes; `None` unlimited.
pub(crate) fn memlock_limit() -> Option<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut r) } != 0
        || r.rlim_cur == libc::RLIM_INFINITY
    {
        return None;
    }
    Some(r.rlim_cur)
}

/// Why a registration or a queue's creation failed, when the locked-memory limit is the
/// likely cause: the kernel charges every pinned page (`ib_umem_get`) to the soft
/// `RLIMIT_MEMLOCK` (EPERM at 0, ENOMEM over it) unless the process has `CAP_IPC_LOCK`.
pub(crate) fn memlock_cause(errno: i32, limit: Option<u64>) -> String {
    match (errno, limit) {
        (libc::ENOMEM, Some(l)) | (libc::EPERM, Some(l @ 0)) => format!(
            " (the locked-memory limit, RLIMIT_MEMLOCK, is {l} bytes here and every registered page counts against it: LimitMEMLOCK=infinity in the unit, ulimit -l unlimited, docker run --ulimit memlock=-1, or CAP_IPC_LOCK)"
        ),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memlock_failure_names_the_limit() {
        let c = memlock_cause(libc::ENOMEM, Some(65536));
        assert!(c.contains("RLIMIT_MEMLOCK, is 65536 bytes"), "{c}");
        assert!(memlock_cause(libc::EPERM, Some(0)).contains("is 0 bytes"));
        assert!(memlock_cause(libc::ENOMEM, None).is_empty());
        assert!(memlock_cause(libc::EINVAL, Some(65536)).is_empty());
    }
}
