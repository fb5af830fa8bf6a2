//! Files rocewatch writes, or reads and acts on, in its state directories (the audit log,
//! QoS snapshots, the QP counter-mode and capture restore records, the ready file).
//!
//! Root runs `qos apply --yes`, `capture` and sometimes the agent, and the state
//! directory may belong to another user (systemd's `StateDirectory=` gives
//! `/var/lib/rocewatch` to the unit's `User=`). So, here:
//! - a file is opened with `O_NOFOLLOW` (a symbolic link in its place is refused, never
//!   followed) and `O_CLOEXEC`, and `O_NONBLOCK` until it is known to be a regular file
//!   (a FIFO in its place must not hang the opener);
//! - a file is replaced whole through a temporary file of a random name created with
//!   `O_CREAT|O_EXCL|O_NOFOLLOW` in the target's own directory, written, flushed and
//!   renamed over the target ([`write_atomic`]): no fixed temporary name anyone can plant
//!   a link at;
//! - running as root ([`strict`]), a directory is trusted only when it and every directory
//!   and link on the way to it are owned by root (or the current user) and no other user
//!   can write them (a sticky directory such as `/tmp` may be on the way): otherwise
//!   another user could swap a directory for a link between a check and a write. A file
//!   root opens must be owned by root (or the current user) and have one link. The
//!   refusal names the path and its owner ([`FsError`]).
//!
//! Not root, nothing is refused for its owner: such a process can only write what its
//! user may write anyway. Links are still never followed.
//!
//! Root acting in a state directory another (non-root) user owns (the packages make
//! `/var/lib/rocewatch` the agent's user's, and Slurm runs `health --slurm` as root) acts
//! there as that user ([`as_owner_of`]): the calling thread's file-system uid and gid
//! become the owner's for the duration of the file operations, so nothing root does
//! there reaches further than that user could, and what root writes stays that user's
//! (the agent, running as that user, can still replace it). The checks above then accept
//! that user beside root; every other refusal stays.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Why a state file or directory was refused, or could not be used.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error("{path} is a symbolic link: refused (rocewatch never follows a link in place of a file it writes or trusts; remove the link)")]
    Link { path: String },
    #[error("{path}: the {kind} is owned by {owner}, not by root: refused (running as root, rocewatch writes in and trusts only files and directories root owns, which no other user can swap for a link; run the command as that user, or point root's commands at a directory root owns: STATE_DIRECTORY, or ROCEWATCH_REMEDIATION__AUDIT_LOG and ROCEWATCH_QOS__SNAPSHOT_DIR; see docs/OPERATIONS.md)")]
    Owner {
        path: String,
        kind: &'static str,
        owner: String,
    },
    #[error("{path}: the directory can be written by {who} (mode {mode:04o}): refused (running as root, rocewatch writes only where no other user can swap a file for a link; chmod go-w it)")]
    Writable {
        path: String,
        who: String,
        mode: u32,
    },
    #[error("{path} is not a regular file ({what}): refused")]
    NotRegular { path: String, what: &'static str },
    #[error("{path} has {links} hard links: refused (a state file root writes or trusts has one name; another may be a link to a file elsewhere)")]
    HardLinks { path: String, links: u64 },
    #[error("{path} is larger than {max} bytes: refused")]
    TooLarge { path: String, max: u64 },
    #[error("{path}: {op}: {source}")]
    Io {
        path: String,
        op: &'static str,
        source: std::io::Error,
    },
}

impl FsError {
    pub(crate) fn io(path: &Path, op: &'static str, source: std::io::Error) -> FsError {
        FsError::Io {
            path: path.display().to_string(),
            op,
            source,
        }
    }

    /// Whether the path does not exist (the rest are refusals or other errors).
    pub fn is_not_found(&self) -> bool {
        matches!(self, FsError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }
}

impl From<FsError> for std::io::Error {
    fn from(e: FsError) -> std::io::Error {
        let kind = match &e {
            FsError::Io { source, .. } => source.kind(),
            _ => std::io::ErrorKind::PermissionDenied,
        };
        std::io::Error::new(kind, e)
    }
}

/// Whether ownership is checked: the process runs as root.
pub fn strict() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

fn euid() -> u32 {
    // SAFETY: as above.
    unsafe { libc::geteuid() }
}

/// `user NAME (uid N)`, or `uid N` for a uid without a passwd entry.
pub fn owner_name(uid: u32) -> String {
    // SAFETY: passwd is plain C data; all zeroes is a valid (empty) value.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 4096];
    let mut out: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: getpwuid_r writes into `pw` and `buf` (of the length given) only, and sets
    // `out` to `&pw` or NULL; pw_name points into `buf`, read before `buf` goes.
    let name = unsafe {
        let r = libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut out);
        (r == 0 && !out.is_null() && !pw.pw_name.is_null()).then(|| {
            std::ffi::CStr::from_ptr(pw.pw_name)
                .to_string_lossy()
                .into_owned()
        })
    };
    match name {
        Some(n) => format!("user {n} (uid {uid})"),
        None => format!("uid {uid}"),
    }
}

thread_local! {
    /// The user this thread acts as in a directory of theirs ([`as_owner_of`]).
    static ACTING_AS: std::cell::Cell<Option<u32>> = const { std::cell::Cell::new(None) };
}

fn owner_ok(uid: u32) -> bool {
    uid == 0 || uid == euid() || ACTING_AS.with(std::cell::Cell::get) == Some(uid)
}

/// Runs `f` as the owner of `dir` where that is another user than root (or us) and this
/// process is root: the calling thread's file-system uid and gid (Linux's `setfsuid`
/// and `setfsgid`, per thread) become the owner's, and the owner counts as trusted beside
/// root, until `f` returns. With a file-system uid other than 0 the kernel drops the
/// capabilities that override file permissions, so `f` can read and write only what that
/// user could. Otherwise (not root, `dir` root's or missing) `f` runs as it is. `f` must
/// not move to another thread (the guard is not `Send`: it cannot live across an
/// `.await` of a future that is sent).
///
/// The group is the owner's primary group (the directory's group when the owner has no
/// passwd entry); the thread's supplementary groups are root's own (root's, normally
/// none but its own group).
pub fn as_owner_of<T, E: From<FsError>>(
    dir: &Path,
    f: impl FnOnce() -> Result<T, E>,
) -> Result<T, E> {
    if !strict() {
        return f();
    }
    let target = match std::fs::metadata(dir) {
        Ok(md) if md.is_dir() && md.uid() != 0 && md.uid() != euid() => {
            Some((md.uid(), primary_gid(md.uid()).unwrap_or(md.gid())))
        }
        _ => None,
    };
    if target.map(|(uid, _)| uid) == ACTING_AS.with(std::cell::Cell::get) {
        return f();
    }
    let _as = FsIds::switch(dir, target)?;
    f()
}

/// `uid`'s primary group, from its passwd entry.
fn primary_gid(uid: u32) -> Option<u32> {
    // SAFETY: as in owner_name: getpwuid_r writes into `pw` and `buf` only.
    unsafe {
        let mut pw: libc::passwd = std::mem::zeroed();
        let mut buf = vec![0 as libc::c_char; 4096];
        let mut out: *mut libc::passwd = std::ptr::null_mut();
        let r = libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut out);
        (r == 0 && !out.is_null()).then_some(pw.pw_gid)
    }
}

/// The thread's file-system ids while acting as a directory's owner; restored on drop.
struct FsIds {
    uid: u32,
    gid: u32,
    acting: Option<u32>,
    /// Not `Send`: the ids belong to this thread.
    _thread: std::marker::PhantomData<*const ()>,
}

impl FsIds {
    /// Act as `target` (uid, gid), or as this process again (`None`).
    fn switch(dir: &Path, target: Option<(u32, u32)>) -> Result<FsIds, FsError> {
        // SAFETY: getegid has no preconditions.
        let (uid, gid) = target.unwrap_or_else(|| (euid(), unsafe { libc::getegid() }));
        // SAFETY: setfsgid/setfsuid change only this thread's file-system ids; -1 (an
        // id no one has) changes nothing and returns the id in force.
        let (gid_before, uid_before, uid_now, gid_now) = unsafe {
            let g = libc::setfsgid(gid) as u32;
            let u = libc::setfsuid(uid) as u32;
            (
                g,
                u,
                libc::setfsuid(u32::MAX) as u32,
                libc::setfsgid(u32::MAX) as u32,
            )
        };
        let guard = FsIds {
            uid: uid_before,
            gid: gid_before,
            acting: ACTING_AS.with(|a| a.replace(target.map(|(uid, _)| uid))),
            _thread: std::marker::PhantomData,
        };
        if (uid_now, gid_now) != (uid, gid) {
            return Err(FsError::io(
                dir,
                "act as the directory's owner",
                std::io::Error::other(format!(
                    "setfsuid({uid})/setfsgid({gid}) did not take (uid {uid_now}, gid {gid_now})"
                )),
            ));
        }
        Ok(guard)
    }
}

impl Drop for FsIds {
    fn drop(&mut self) {
        // SAFETY: as in `switch`.
        unsafe {
            libc::setfsuid(self.uid);
            libc::setfsgid(self.gid);
        }
        ACTING_AS.with(|a| a.set(self.acting));
    }
}

fn check_owner(path: &Path, md: &std::fs::Metadata, kind: &'static str) -> Result<(), FsError> {
    if owner_ok(md.uid()) {
        return Ok(());
    }
    Err(FsError::Owner {
        path: path.display().to_string(),
        kind,
        owner: owner_name(md.uid()),
    })
}

/// A directory on the way to (or holding) a state file: owned by root or us, and not
/// writable by others unless sticky (where others cannot rename or remove our entries).
fn check_dir(path: &Path, md: &std::fs::Metadata) -> Result<(), FsError> {
    check_owner(path, md, "directory")?;
    let mode = md.mode() & 0o7777;
    if mode & libc::S_ISVTX != 0 {
        return Ok(());
    }
    let who = if mode & 0o002 != 0 {
        Some("any user".to_string())
    } else if mode & 0o020 != 0 && md.gid() != 0 {
        Some(format!("group {}", md.gid()))
    } else {
        None
    };
    match who {
        Some(who) => Err(FsError::Writable {
            path: path.display().to_string(),
            who,
            mode,
        }),
        None => Ok(()),
    }
}

/// Linux's limit of links followed in one lookup (`MAXSYMLINKS`).
const MAX_LINKS: u32 = 40;

/// Resolves `path` component by component from `/`, checking every directory and link
/// met on the way; returns the resolved path.
fn walk(path: &Path, links: &mut u32) -> Result<PathBuf, FsError> {
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| FsError::io(path, "the current directory", e))?
            .join(path)
    };
    let mut at = PathBuf::from("/");
    let root = std::fs::symlink_metadata(&at).map_err(|e| FsError::io(&at, "stat", e))?;
    check_dir(&at, &root)?;
    for c in abs.components() {
        match c {
            std::path::Component::Normal(name) => {
                let next = at.join(name);
                let md =
                    std::fs::symlink_metadata(&next).map_err(|e| FsError::io(&next, "stat", e))?;
                if md.file_type().is_symlink() {
                    // A link in a checked directory, itself owned by root or us: stable.
                    check_owner(&next, &md, "symbolic link")?;
                    *links += 1;
                    if *links > MAX_LINKS {
                        return Err(FsError::io(
                            &next,
                            "resolve",
                            std::io::Error::from_raw_os_error(libc::ELOOP),
                        ));
                    }
                    let target =
                        std::fs::read_link(&next).map_err(|e| FsError::io(&next, "readlink", e))?;
                    at = walk(&at.join(target), links)?;
                } else if md.is_dir() {
                    check_dir(&next, &md)?;
                    at = next;
                } else {
                    return Err(FsError::io(
                        &next,
                        "resolve",
                        std::io::Error::from_raw_os_error(libc::ENOTDIR),
                    ));
                }
            }
            // `at` is resolved, so its parent was checked on the way to it.
            std::path::Component::ParentDir => {
                at.pop();
            }
            std::path::Component::RootDir
            | std::path::Component::CurDir
            | std::path::Component::Prefix(_) => {}
        }
    }
    Ok(at)
}

/// The directory a file of `path` lives in (`.` for a bare name).
pub fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Running as root: `dir` exists and it and everything on the way to it are owned by root
/// (or the current user) and writable by no one else (see the module doc). Not root: only
/// that it exists.
pub fn trusted_dir(dir: &Path) -> Result<(), FsError> {
    if !strict() {
        return match std::fs::metadata(dir) {
            Ok(m) if m.is_dir() => Ok(()),
            Ok(_) => Err(FsError::io(
                dir,
                "open",
                std::io::Error::from_raw_os_error(libc::ENOTDIR),
            )),
            Err(e) => Err(FsError::io(dir, "stat", e)),
        };
    }
    walk(dir, &mut 0).map(|_| ())
}

/// Creates `dir` (and its missing parents, mode 0755 less the umask) where it is missing,
/// after checking that the directory it is created in is trusted; then checks `dir`.
pub fn create_trusted_dir(dir: &Path) -> Result<(), FsError> {
    let mut existing = dir;
    while std::fs::symlink_metadata(existing).is_err() {
        match existing.parent() {
            Some(p) if !p.as_os_str().is_empty() => existing = p,
            _ => {
                existing = Path::new(".");
                break;
            }
        }
    }
    trusted_dir(existing)?;
    if existing == dir {
        return Ok(());
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)
        .map_err(|e| FsError::io(dir, "create the directory", e))?;
    trusted_dir(dir)
}

/// Opens `path` with `opts` (whatever access and creation they ask for), in a trusted
/// directory, never through a link; the file must be a regular file, and, running as
/// root, owned by root (or us) with one link.
pub fn open_nofollow(path: &Path, opts: &mut OpenOptions) -> Result<File, FsError> {
    trusted_dir(parent_of(path))?;
    let f = opts
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => FsError::Link {
                path: path.display().to_string(),
            },
            // A FIFO without a reader opened for writing without blocking, or a socket.
            Some(libc::ENXIO) | Some(libc::EISDIR) => match std::fs::symlink_metadata(path) {
                Ok(md) => FsError::NotRegular {
                    path: path.display().to_string(),
                    what: file_kind(&md),
                },
                Err(_) => FsError::io(path, "open", e),
            },
            _ => FsError::io(path, "open", e),
        })?;
    let md = f.metadata().map_err(|e| FsError::io(path, "fstat", e))?;
    if !md.file_type().is_file() {
        return Err(FsError::NotRegular {
            path: path.display().to_string(),
            what: file_kind(&md),
        });
    }
    if strict() {
        check_owner(path, &md, "file")?;
        if md.nlink() > 1 {
            return Err(FsError::HardLinks {
                path: path.display().to_string(),
                links: md.nlink(),
            });
        }
    }
    clear_nonblock(&f);
    Ok(f)
}

/// What a file that is not a regular file is, for an error.
fn file_kind(md: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = md.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_symlink() {
        "a symbolic link"
    } else if t.is_file() {
        "a regular file"
    } else {
        "a device"
    }
}

/// `O_NONBLOCK` off again (it means nothing for a regular file; cleared for clarity).
fn clear_nonblock(f: &File) {
    use std::os::fd::AsRawFd;
    // SAFETY: fcntl on a descriptor we own; F_GETFL/F_SETFL touch only its status flags.
    unsafe {
        let fl = libc::fcntl(f.as_raw_fd(), libc::F_GETFL);
        if fl >= 0 {
            libc::fcntl(f.as_raw_fd(), libc::F_SETFL, fl & !libc::O_NONBLOCK);
        }
    }
}

/// Opens `path` for appending, creating it with `mode` (less the umask) when missing.
pub fn open_append(path: &Path, mode: u32) -> Result<File, FsError> {
    open_nofollow(
        path,
        OpenOptions::new().append(true).create(true).mode(mode),
    )
}

/// The largest record file [`read_trusted`] reads.
pub const MAX_RECORD_BYTES: u64 = 16 << 20;

/// Reads a file root acts on (a restore record, a snapshot): see [`open_nofollow`].
pub fn read_trusted(path: &Path) -> Result<Vec<u8>, FsError> {
    let f = open_nofollow(path, OpenOptions::new().read(true))?;
    let mut out = Vec::new();
    f.take(MAX_RECORD_BYTES + 1)
        .read_to_end(&mut out)
        .map_err(|e| FsError::io(path, "read", e))?;
    if out.len() as u64 > MAX_RECORD_BYTES {
        return Err(FsError::TooLarge {
            path: path.display().to_string(),
            max: MAX_RECORD_BYTES,
        });
    }
    Ok(out)
}

/// Replaces `path` whole with `contents` (a reader sees the old file or the new one, never
/// half of one): a temporary file `.NAME.RANDOM.tmp` in `path`'s trusted directory, made by
/// `tempfile` with `O_CREAT|O_EXCL` (a link planted at that name is refused, not followed)
/// and `mode` (less the umask), written, flushed, renamed over `path` (a link at `path` is
/// replaced, not followed); the directory is flushed after.
pub fn write_atomic(path: &Path, contents: &[u8], mode: u32) -> Result<(), FsError> {
    use std::os::unix::fs::PermissionsExt;
    let dir = parent_of(path);
    trusted_dir(dir)?;
    let name = path.file_name().ok_or_else(|| {
        FsError::io(
            path,
            "write",
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "no file name"),
        )
    })?;
    let mut prefix = OsString::from(".");
    prefix.push(name);
    prefix.push(".");
    let mut tmp = tempfile::Builder::new()
        .prefix(&prefix)
        .suffix(".tmp")
        .permissions(std::fs::Permissions::from_mode(mode))
        .tempfile_in(dir)
        .map_err(|e| FsError::io(dir, "create a temporary file", e))?;
    tmp.write_all(contents)
        .and_then(|()| tmp.as_file().sync_all())
        .map_err(|e| FsError::io(tmp.path(), "write", e))?;
    tmp.persist(path)
        .map_err(|e| FsError::io(path, "rename", e.error))?;
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tests of what root refuses run as root (CI does); anywhere else they fail saying so.
    fn need_root() {
        assert!(
            strict(),
            "this test checks what rocewatch refuses when it runs as root: it needs root (CI runs as root)"
        );
    }

    fn chown(path: &Path, uid: u32) {
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: lchown on a path we made; the result is checked.
        let r = unsafe { libc::lchown(c.as_ptr(), uid, uid) };
        assert_eq!(
            r,
            0,
            "lchown {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        );
    }

    const NOBODY: u32 = 65534;

    #[test]
    fn a_link_in_place_of_the_file_appended_to_is_refused_and_its_target_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious\n").unwrap();
        let state = dir.path().join("state");
        std::fs::create_dir(&state).unwrap();
        let log = state.join("audit.jsonl");
        std::os::unix::fs::symlink(&victim, &log).unwrap();
        let e = open_append(&log, 0o644).unwrap_err();
        assert!(matches!(e, FsError::Link { .. }), "{e}");
        assert!(e.to_string().contains(&log.display().to_string()), "{e}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
        // A dangling link too: nothing is created where it points.
        let gone = dir.path().join("gone");
        std::fs::remove_file(&log).unwrap();
        std::os::unix::fs::symlink(&gone, &log).unwrap();
        assert!(matches!(
            open_append(&log, 0o644),
            Err(FsError::Link { .. })
        ));
        assert!(!gone.exists());
    }

    #[test]
    fn a_whole_file_is_written_through_a_random_temporary_name_never_through_a_planted_link() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious\n").unwrap();
        let state = dir.path().join("state");
        std::fs::create_dir(&state).unwrap();
        let target = state.join("qp-counter-modes.json");
        // The fixed temporary names rocewatch used to write through.
        for planted in ["qp-counter-modes.tmp", "qp-counter-modes.json.tmp"] {
            std::os::unix::fs::symlink(&victim, state.join(planted)).unwrap();
        }
        write_atomic(&target, b"[1]", 0o600).unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"[1]");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
        // A link at the target itself is replaced, not written through.
        std::fs::remove_file(&target).unwrap();
        std::os::unix::fs::symlink(&victim, &target).unwrap();
        write_atomic(&target, b"[2]", 0o600).unwrap();
        assert!(std::fs::symlink_metadata(&target).unwrap().is_file());
        assert_eq!(std::fs::read(&target).unwrap(), b"[2]");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
        // Nothing left behind: the target and the two planted links.
        let mut names: Vec<String> = std::fs::read_dir(&state)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "qp-counter-modes.json",
                "qp-counter-modes.json.tmp",
                "qp-counter-modes.tmp"
            ]
        );
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&target).unwrap().permissions().mode() & 0o077,
            0
        );
    }

    #[test]
    fn a_fifo_or_a_directory_in_place_of_a_record_is_refused_without_hanging() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("audit.jsonl");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo on a path in our temporary directory; the result is checked.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = open_append(&fifo, 0o644).unwrap_err();
        assert!(
            matches!(e, FsError::NotRegular { what: "a FIFO", .. }),
            "{e}"
        );
        let e = read_trusted(&fifo).unwrap_err();
        assert!(e.to_string().contains("not a regular file (a FIFO)"), "{e}");
        let d = dir.path().join("d");
        std::fs::create_dir(&d).unwrap();
        assert!(read_trusted(&d).is_err());
    }

    #[test]
    fn as_root_a_directory_or_file_another_user_owns_is_refused_naming_the_owner() {
        need_root();
        let dir = tempfile::tempdir().unwrap();
        let theirs = dir.path().join("state");
        std::fs::create_dir(&theirs).unwrap();
        let record = theirs.join("qp-counter-modes.json");
        std::fs::write(&record, "[]").unwrap();
        chown(&theirs, NOBODY);
        for e in [
            trusted_dir(&theirs).unwrap_err(),
            write_atomic(&record, b"[]", 0o600).unwrap_err(),
            open_append(&theirs.join("audit.jsonl"), 0o644).unwrap_err(),
            read_trusted(&record).unwrap_err(),
        ] {
            let text = e.to_string();
            assert!(
                text.contains(&format!("{}: the directory is owned by", theirs.display()))
                    && text.contains("(uid 65534)"),
                "{text}"
            );
        }
        assert!(!theirs.join("audit.jsonl").exists());
        // A directory root owns below it is refused too: its owner can swap it.
        let below = theirs.join("qos");
        std::fs::create_dir(&below).unwrap();
        assert!(matches!(
            trusted_dir(&below),
            Err(FsError::Owner {
                kind: "directory",
                ..
            })
        ));
        // A file they own in a directory root owns.
        let ours = dir.path().join("ours");
        std::fs::create_dir(&ours).unwrap();
        let planted = ours.join("capture-offload-eth0.json");
        std::fs::write(&planted, "{}").unwrap();
        chown(&planted, NOBODY);
        let e = read_trusted(&planted).unwrap_err();
        assert!(
            e.to_string().contains("the file is owned by") && e.to_string().contains("65534"),
            "{e}"
        );
        // A link of theirs on the way, pointing at a directory root owns.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&ours, &link).unwrap();
        assert!(trusted_dir(&link).is_ok(), "root's own link is followed");
        chown(&link, NOBODY);
        assert!(matches!(
            trusted_dir(&link.join(".")),
            Err(FsError::Owner {
                kind: "symbolic link",
                ..
            })
        ));
    }

    #[test]
    fn as_root_a_directory_others_can_write_is_refused_unless_sticky() {
        need_root();
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let open = dir.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = write_atomic(&open.join("x.json"), b"{}", 0o600).unwrap_err();
        assert!(
            matches!(e, FsError::Writable { mode: 0o777, .. })
                && e.to_string().contains("any user"),
            "{e}"
        );
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        write_atomic(&open.join("x.json"), b"{}", 0o600).unwrap();
        // A file with a second name may be a link to a file elsewhere.
        let f = dir.path().join("f");
        std::fs::write(&f, "x").unwrap();
        std::fs::hard_link(&f, dir.path().join("g")).unwrap();
        assert!(matches!(
            read_trusted(&f),
            Err(FsError::HardLinks { links: 2, .. })
        ));
    }

    #[test]
    fn as_the_owner_of_a_directory_root_writes_as_that_user_and_is_root_again_in_its_own() {
        need_root();
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let theirs = dir.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o750)).unwrap();
        chown(&theirs, NOBODY);
        let ours = dir.path().join("ours");
        std::fs::create_dir(&ours).unwrap();
        let uid = |p: &Path| std::fs::metadata(p).unwrap().uid();
        as_owner_of(&theirs, || {
            write_atomic(&theirs.join("q.json"), b"{}", 0o644)?;
            // Acting as nobody: root's own directory is out of reach...
            assert!(write_atomic(&ours.join("no.json"), b"{}", 0o644).is_err());
            // ...until an inner call acts as its owner, root, again.
            as_owner_of(&ours, || write_atomic(&ours.join("yes.json"), b"{}", 0o644))?;
            write_atomic(&theirs.join("after.json"), b"{}", 0o644)
        })
        .unwrap();
        assert_eq!(uid(&theirs.join("q.json")), NOBODY);
        assert_eq!(uid(&theirs.join("after.json")), NOBODY);
        assert_eq!(uid(&ours.join("yes.json")), 0);
        assert!(!ours.join("no.json").exists());
        // Outside, root again, and the other user's directory refused as before.
        assert!(write_atomic(&theirs.join("root.json"), b"{}", 0o644).is_err());
        std::fs::write(ours.join("mine"), "x").unwrap();
        assert_eq!(uid(&ours.join("mine")), 0);
    }

    #[test]
    fn a_missing_state_directory_is_created_only_below_a_trusted_one() {
        need_root();
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("a/b");
        create_trusted_dir(&state).unwrap();
        assert!(state.is_dir());
        let theirs = dir.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        chown(&theirs, NOBODY);
        assert!(create_trusted_dir(&theirs.join("state")).is_err());
        assert!(!theirs.join("state").exists(), "created below theirs");
    }
}
