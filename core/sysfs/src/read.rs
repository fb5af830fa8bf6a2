//! Reading sysfs attribute files.
//!
//! sysfs files report a size of 4096 whatever they hold, so nothing here trusts `stat`:
//! a file is read until EOF into a small buffer.

use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// Why a read failed for real (as opposed to the value being absent).
#[derive(Debug, thiserror::Error)]
pub enum SysfsError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl SysfsError {
    pub fn path(&self) -> &Path {
        match self {
            SysfsError::Io { path, .. } => path,
        }
    }

    /// The error without the path (for reports that name the path separately).
    pub fn cause(&self) -> String {
        match self {
            SysfsError::Io { source, .. } => source.to_string(),
        }
    }
}

/// What reading an attribute gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attr {
    /// The trimmed contents.
    Value(String),
    /// The kernel says the value does not exist here (see [`classify_io_error`]).
    Absent,
}

impl Attr {
    /// The value, or `None` when absent or empty (rxe's `fw_ver` reads as an empty line
    /// on a 6.1 kernel: nothing to report is absent, not an empty string).
    pub fn into_option(self) -> Option<String> {
        match self {
            Attr::Value(v) if !v.is_empty() => Some(v),
            _ => None,
        }
    }
}

/// Whether an I/O error on a sysfs file means "this value does not exist" rather than a
/// failure:
/// - ENOENT: the file (or the whole device, when it vanished mid-scrape) is not there;
/// - EINVAL: empty GID slots' `types`/`ndevs`, counters a port type lacks;
/// - EOPNOTSUPP: the driver does not implement the query.
///
/// EACCES and EPERM are errors, not absences: an agent without the right to read a
/// counter (an unprivileged user, a restricted PF on DGX/HGX systems) must say so, naming
/// the file, instead of exporting fewer series without a word. EIO likewise.
pub fn classify_io_error(e: &io::Error) -> bool {
    const ENOENT: i32 = 2;
    const EINVAL: i32 = 22;
    const ENODEV: i32 = 19;
    const ENXIO: i32 = 6;
    const EOPNOTSUPP: i32 = 95;
    if e.kind() == io::ErrorKind::NotFound {
        return true;
    }
    matches!(
        e.raw_os_error(),
        Some(ENOENT | EINVAL | ENODEV | ENXIO | EOPNOTSUPP)
    )
}

/// Open an attribute file for reading without ever blocking: `O_NONBLOCK` (a FIFO put in
/// place of a counter would otherwise hold the open, and every counter after it, until a
/// writer appears), and only regular files (what sysfs attributes are): a FIFO, socket or
/// device node there is an error naming the file, costing only its own value.
pub fn open_attr(path: &Path) -> io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let t = f.metadata()?.file_type();
    if !t.is_file() {
        return Err(io::Error::other(format!(
            "not a regular file ({}): refused, an attribute never is one",
            if std::os::unix::fs::FileTypeExt::is_fifo(&t) {
                "a FIFO"
            } else if t.is_dir() {
                "a directory"
            } else {
                "a device or socket"
            }
        )));
    }
    Ok(f)
}

/// Read a whole attribute file and trim it. Absent values are `Ok(Attr::Absent)`.
pub fn read_attr(path: &Path) -> Result<Attr, SysfsError> {
    Ok(match read_attr_with(path, str::to_string)? {
        Some(v) => Attr::Value(v),
        None => Attr::Absent,
    })
}

/// Read from `file` until EOF or `buf` is full; how many bytes were read.
fn read_full(file: &mut std::fs::File, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Read an attribute file into a page-sized stack buffer and hand the trimmed text to `f`
/// without allocating. `Ok(None)` when the value is absent.
///
/// Plain `read(2)` calls until EOF: no `stat` (sysfs sizes are always 4096) and no seek,
/// so a counter costs open, two reads and close. sysfs attributes are at most a page.
pub fn read_attr_with<T>(path: &Path, f: impl FnOnce(&str) -> T) -> Result<Option<T>, SysfsError> {
    let mut buf = [0u8; 4096];
    let r = open_attr(path).and_then(|mut file| read_full(&mut file, &mut buf));
    finish(r, &buf, path, f)
}

/// Read up to `max` bytes of a binary attribute (a PCI function's `config`). A file
/// shorter than asked for is not an error: the kernel gives users other than root only
/// the first 64 bytes of config space. `Ok(None)` when the value is absent.
pub fn read_bytes(path: &Path, max: usize) -> Result<Option<Vec<u8>>, SysfsError> {
    let mut buf = vec![0u8; max];
    let r = open_attr(path).and_then(|mut file| read_full(&mut file, &mut buf));
    match r {
        Ok(n) => {
            buf.truncate(n);
            Ok(Some(buf))
        }
        Err(e) if classify_io_error(&e) => Ok(None),
        Err(source) => Err(SysfsError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// The trimmed text of a read of `n` bytes into `buf`, or what its error means.
fn finish<T>(
    r: io::Result<usize>,
    buf: &[u8],
    path: &Path,
    f: impl FnOnce(&str) -> T,
) -> Result<Option<T>, SysfsError> {
    match r {
        Ok(n) => Ok(Some(f(String::from_utf8_lossy(&buf[..n]).trim()))),
        Err(e) if classify_io_error(&e) => Ok(None),
        Err(source) => Err(SysfsError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Like [`read_attr_with`] on a file kept open: `pread(2)` at offset 0, one system call
/// per attribute instead of open, read, read, close. sysfs regenerates an attribute's
/// text on every read at offset 0 and hands all of it (at most a page, ending in a
/// newline) to a read of a page, so a read that ends in a newline is the whole value: no
/// second read to see the end (it was half of the collector's system calls). A read that
/// does not end in one (a regular file written without it, a file system that returns
/// short reads) is followed to the end of the file as before. An open descriptor always
/// sees the current value. (A regular file replaced by a rename would not be seen: keep
/// descriptors open on sysfs only, see [`is_sysfs`].)
pub fn pread_attr_with<T>(
    file: &std::fs::File,
    path: &Path,
    f: impl FnOnce(&str) -> T,
) -> Result<Option<T>, SysfsError> {
    use std::os::unix::fs::FileExt;
    let mut buf = [0u8; 4096];
    let mut n = 0;
    let r = loop {
        match file.read_at(&mut buf[n..], n as u64) {
            Ok(0) => break Ok(n),
            Ok(k) => {
                n += k;
                if n == buf.len() || buf[n - 1] == b'\n' {
                    break Ok(n);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => break Err(e),
        }
    };
    finish(r, &buf, path, f)
}

/// Whether `path` is on a sysfs mount (`statfs` type `SYSFS_MAGIC`).
pub fn is_sysfs(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    const SYSFS_MAGIC: i64 = 0x6265_6572;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: an all-zero statfs is a valid out-buffer; c is NUL-terminated.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: c and st are valid for the call.
    let r = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    r == 0 && st.f_type as i64 == SYSFS_MAGIC
}

/// The entry names of a directory, sorted. A missing directory is empty, not an error.
pub fn list_dir(path: &Path) -> Result<Vec<String>, SysfsError> {
    let rd = match std::fs::read_dir(path) {
        Ok(rd) => rd,
        Err(e) if classify_io_error(&e) => return Ok(Vec::new()),
        Err(source) => {
            return Err(SysfsError::Io {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let mut names: Vec<String> = rd
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    Ok(names)
}

#[cfg(test)]
mod tests {
    #[test]
    fn pread_on_an_open_file_sees_in_place_rewrites() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c");
        std::fs::write(&p, "12\n").unwrap();
        let f = std::fs::File::open(&p).unwrap();
        let get = || pread_attr_with(&f, &p, |t| t.to_string()).unwrap();
        assert_eq!(get(), Some("12".to_string()));
        std::fs::write(&p, "345678\n").unwrap();
        assert_eq!(get(), Some("345678".to_string()));
        assert!(!is_sysfs(dir.path()), "a temporary directory is not sysfs");
        if std::path::Path::new("/sys/kernel").is_dir() {
            assert!(is_sysfs(std::path::Path::new("/sys")));
        }
    }

    use super::*;

    /// One `pread` of a kept descriptor reads the whole attribute on real sysfs, as the
    /// open-read-until-EOF path does (this machine's loopback device, which every Linux
    /// host has), and a regular file's whole text too, with or without a final newline.
    #[test]
    fn one_pread_reads_a_whole_sysfs_attribute() {
        let dir = std::path::Path::new("/sys/class/net/lo");
        if !is_sysfs(std::path::Path::new("/sys")) || !dir.is_dir() {
            eprintln!(
                "SKIPPED: no sysfs with /sys/class/net/lo here; checked only on a regular file"
            );
        } else {
            for name in [
                "mtu",
                "address",
                "uevent",
                "statistics/rx_bytes",
                "operstate",
            ] {
                let p = dir.join(name);
                let f = open_attr(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                let whole = read_attr_with(&p, str::to_string).unwrap();
                let one = pread_attr_with(&f, &p, str::to_string).unwrap();
                assert!(
                    whole.as_deref().is_some_and(|w| !w.is_empty()),
                    "{name}: {whole:?}"
                );
                if name != "statistics/rx_bytes" {
                    assert_eq!(one, whole, "{name}");
                } else {
                    assert!(one.is_some_and(|v| v.parse::<u64>().is_ok()), "{name}");
                }
            }
        }
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("long");
        let text: String = (0..2000).map(|i| format!("{i} ")).collect();
        std::fs::write(&p, &text).unwrap();
        let f = open_attr(&p).unwrap();
        let got = pread_attr_with(&f, &p, str::to_string).unwrap().unwrap();
        assert_eq!(got, text[..4096].trim(), "a page at most, as before");
        std::fs::write(&p, "123 456").unwrap();
        let f = open_attr(&p).unwrap();
        assert_eq!(
            pread_attr_with(&f, &p, str::to_string).unwrap().unwrap(),
            "123 456"
        );
    }

    #[test]
    fn errno_classification() {
        for (errno, absent) in [
            (2, true),   // ENOENT
            (13, false), // EACCES: said, naming the file
            (1, false),  // EPERM
            (22, true),  // EINVAL
            (95, true),  // EOPNOTSUPP
            (5, false),  // EIO
            (21, false), // EISDIR
        ] {
            assert_eq!(
                classify_io_error(&io::Error::from_raw_os_error(errno)),
                absent,
                "errno {errno}"
            );
        }
    }

    #[test]
    fn reads_and_trims_and_treats_missing_as_absent() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("state");
        std::fs::write(&f, "4: ACTIVE\n").unwrap();
        assert_eq!(read_attr(&f).unwrap(), Attr::Value("4: ACTIVE".into()));
        assert_eq!(read_attr(&dir.path().join("nope")).unwrap(), Attr::Absent);
        // A directory where a file is expected is a real failure, named by path.
        let err = read_attr(dir.path()).unwrap_err();
        assert_eq!(err.path(), dir.path());
        assert!(list_dir(&dir.path().join("missing")).unwrap().is_empty());
    }
}
