//! Giving freed memory back to the system. glibc keeps the pages of freed allocations in
//! its heap for reuse; after a collection of a large host (2000 ports: some 100 000 samples
//! built, ingested and dropped every interval) that is tens of MB of resident memory that
//! nothing uses until the next collection.

/// Return the free pages of every malloc arena to the system (`malloc_trim`); a no-op
/// where the C library is not glibc.
pub fn release_freed() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}
