//! What a command is waiting on, said on standard error while it waits: one line redrawn
//! in place (a spinner, the command, what it waits on, how long remains), only when
//! standard error is a terminal. On a pipe or a file nothing at all is written, so
//! scripts and logs see only the command's output.
//!
//! The line is drawn at once and then four times a second by a plain thread (a command
//! busy in a blocking call still shows it), and it is wiped before anything else is
//! printed: [`Progress::finish`], or dropping it (an error returned early).
//!
//! ```text
//! let progress = Progress::start("doctor");
//! progress.waiting("reading the host", None);
//! // ...
//! progress.waiting(
//!     format!("reading counters over a {} window", humantime::format_duration(window)),
//!     Some(Instant::now() + window),
//! );
//! tokio::time::sleep(window).await; // "doctor: reading counters over a 5s window (3s left)"
//! progress.finish(); // the line is gone; the command's output follows
//! print!("{report}");
//! ```
//!
//! [`Progress::note`] prints a line that explains a wait (a tool that does not answer)
//! above the progress line, whether or not standard error is a terminal;
//! [`Progress::notes`] is a handle for the same from another task.

use std::io::{IsTerminal, Write};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::terminal::stderr_columns;

/// How often the line is redrawn (the spinner turns and the seconds count down).
const EVERY: Duration = Duration::from_millis(250);

const SPINNER: [char; 4] = ['|', '/', '-', '\\'];

/// Wipes the line the cursor is on and returns to its start.
const WIPE: &str = "\r\x1b[2K";

/// A command's progress line; inert (writes nothing) unless standard error is a terminal.
pub(crate) struct Progress {
    live: Option<Live>,
}

struct Live {
    shared: Arc<(Mutex<State>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

/// What the line says now.
struct State {
    what: String,
    /// When the wait ends, if known: the line says how long remains.
    until: Option<Instant>,
    /// When this wait began: without an end, the line says how long it has lasted.
    since: Instant,
    /// Set to draw the line at once (what changed), or to end.
    changed: bool,
    stop: bool,
}

impl Progress {
    /// A progress line for `command` (its name as typed, e.g. `doctor`), shown only when
    /// standard error is a terminal that understands cursor movement (not `TERM=dumb`).
    pub(crate) fn start(command: &'static str) -> Progress {
        let tty =
            std::io::stderr().is_terminal() && std::env::var_os("TERM").is_none_or(|t| t != "dumb");
        Progress::new(command, tty)
    }

    /// A progress line that draws only when `shown` (tests and callers that know better
    /// than the terminal check).
    pub(crate) fn new(command: &'static str, shown: bool) -> Progress {
        let live = shown.then(|| {
            let shared = Arc::new((
                Mutex::new(State {
                    what: "starting".into(),
                    until: None,
                    since: Instant::now(),
                    changed: true,
                    stop: false,
                }),
                Condvar::new(),
            ));
            let theirs = Arc::clone(&shared);
            // A plain thread: it draws while the runtime's worker is busy, and tokio does
            // not wait for it at exit (`finish` or drop joins it).
            let thread = std::thread::Builder::new()
                .name("progress".into())
                .spawn(move || draw_until_stopped(command, &theirs))
                .ok();
            crate::demo::screen_logs::PROGRESS_DRAWN.store(true, Ordering::Relaxed);
            Live { shared, thread }
        });
        Progress { live }
    }

    /// Now waiting on `what` (a phrase: "reading counters over a 5s window"), until
    /// `until` when that is known.
    pub(crate) fn waiting(&self, what: impl Into<String>, until: Option<Instant>) {
        if let Some(live) = &self.live {
            let (lock, wake) = &*live.shared;
            let mut s = lock.lock().unwrap_or_else(PoisonError::into_inner);
            // Names from the system (a peer, a netdev) as one printable line.
            s.what = rocewatch_doctor::shell::one_line(&what.into());
            s.until = until;
            s.since = Instant::now();
            s.changed = true;
            wake.notify_one();
        }
    }

    /// A line that explains a wait (said as it is, e.g. `rocewatch: ...`), printed on
    /// standard error on its own line: above the progress line on a terminal, alone on a
    /// pipe or file.
    pub(crate) fn note(&self, line: &str) {
        self.notes().say(line);
    }

    /// A handle that says such lines from elsewhere (a task forwarding a child's
    /// standard error), also after the line is finished.
    pub(crate) fn notes(&self) -> Notes {
        Notes(self.live.as_ref().map(|l| Arc::clone(&l.shared)))
    }

    /// Wipes the line for good: what the command prints next starts on a clean line.
    pub(crate) fn finish(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        let Some(mut live) = self.live.take() else {
            return;
        };
        {
            let (lock, wake) = &*live.shared;
            lock.lock().unwrap_or_else(PoisonError::into_inner).stop = true;
            wake.notify_one();
        }
        if let Some(t) = live.thread.take() {
            let _ = t.join();
        }
        crate::demo::screen_logs::PROGRESS_DRAWN.store(false, Ordering::Relaxed);
    }
}

/// Says lines above a progress line ([`Progress::notes`]).
#[derive(Clone)]
pub(crate) struct Notes(Option<Arc<(Mutex<State>, Condvar)>>);

impl Notes {
    /// `line` on standard error, on a line of its own.
    pub(crate) fn say(&self, line: &str) {
        let line = line.trim_end_matches('\n');
        let mut err = std::io::stderr().lock();
        match &self.0 {
            Some(shared) => {
                // Under the state's lock the drawing thread cannot draw between the wipe
                // and the line; it redraws right after (unless it has stopped).
                let (lock, wake) = &**shared;
                let mut s = lock.lock().unwrap_or_else(PoisonError::into_inner);
                let _ = writeln!(err, "{WIPE}{line}");
                let _ = err.flush();
                s.changed = true;
                wake.notify_one();
            }
            None => {
                let _ = writeln!(err, "{line}");
            }
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The drawing thread: the line at once, then every [`EVERY`] or when it changes; wiped
/// when told to stop.
fn draw_until_stopped(command: &str, shared: &(Mutex<State>, Condvar)) {
    let (lock, wake) = shared;
    let mut turn = 0usize;
    let mut s = lock.lock().unwrap_or_else(PoisonError::into_inner);
    loop {
        if s.stop {
            let mut err = std::io::stderr().lock();
            let _ = err.write_all(WIPE.as_bytes());
            let _ = err.flush();
            return;
        }
        s.changed = false;
        let line = render(
            SPINNER[turn % SPINNER.len()],
            command,
            &s,
            Instant::now(),
            stderr_columns(),
        );
        turn += 1;
        {
            // One write: a line written by someone else never lands inside it.
            let mut err = std::io::stderr().lock();
            let _ = err.write_all(format!("{WIPE}{line}").as_bytes());
            let _ = err.flush();
        }
        s = wake
            .wait_timeout_while(s, EVERY, |s| !s.changed && !s.stop)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
}

/// The line: `| doctor: reading counters over a 5s window (3s left)`, cut to `columns`
/// (a line longer than the terminal would wrap, and the wipe would clear only its end).
fn render(spin: char, command: &str, s: &State, now: Instant, columns: usize) -> String {
    let time = match s.until {
        Some(until) if until > now => {
            // Whole seconds, rounded up: "0s left" would be said while still waiting.
            let left = until - now;
            let secs = left.as_secs() + u64::from(left.subsec_nanos() > 0);
            format!(" ({secs}s left)")
        }
        Some(_) => " (finishing)".to_string(),
        None => {
            let secs = now.saturating_duration_since(s.since).as_secs();
            if secs == 0 {
                String::new()
            } else {
                format!(" ({secs}s)")
            }
        }
    };
    let line = format!("{spin} {command}: {}{time}", s.what);
    // One column short of the width: a line that fills it leaves the cursor past it on
    // some terminals.
    line.chars()
        .take(columns.saturating_sub(1).max(1))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(what: &str, until: Option<Instant>, since: Instant) -> State {
        State {
            what: what.into(),
            until,
            since,
            changed: false,
            stop: false,
        }
    }

    #[test]
    fn the_line_says_what_and_how_long() {
        let now = Instant::now();
        let s = state(
            "reading counters over a 5s window",
            Some(now + Duration::from_millis(2_100)),
            now,
        );
        assert_eq!(
            render('|', "doctor", &s, now, 80),
            "| doctor: reading counters over a 5s window (3s left)"
        );
        let s = state("reading counters", Some(now), now);
        assert_eq!(
            render('/', "doctor", &s, now + Duration::from_millis(5), 80),
            "/ doctor: reading counters (finishing)"
        );
        // No end known: how long it has lasted, nothing in the first second.
        let s = state("probing 10.0.0.2", None, now);
        assert_eq!(
            render('-', "doctor", &s, now + Duration::from_millis(900), 80),
            "- doctor: probing 10.0.0.2"
        );
        assert_eq!(
            render('-', "doctor", &s, now + Duration::from_secs(4), 80),
            "- doctor: probing 10.0.0.2 (4s)"
        );
        // Cut to the terminal's width, one column spare.
        assert_eq!(render('|', "doctor", &s, now, 10), "| doctor:");
    }

    #[test]
    fn inert_when_not_shown() {
        let p = Progress::new("doctor", false);
        assert!(p.live.is_none());
        p.waiting("x", None);
        p.finish();
    }
}
