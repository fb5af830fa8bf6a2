//! Where the log lines go while a live screen is drawn on the terminal: held, and written
//! to standard error once the screen ends, so a WARN never lands in the middle of a frame
//! that the next redraw clears (the demo's screen, issue 49).
//!
//! Held rather than drawn in the screen (a frame is redrawn every tick: a line there lasts
//! a tick, and the screen has no room to spare) or written to a file (one more path to
//! find, and the lines belong where the command was run): every line is kept in order and
//! shown after the screen, with the count of those dropped past [`KEEP`]; the screen can
//! say how many are waiting ([`held`]).

use std::collections::VecDeque;
use std::io::Write;
use std::sync::Mutex;

/// The most lines held; older ones are dropped, and counted.
pub const KEEP: usize = 1000;

/// Where a log line goes: standard error, or held while a screen is live.
#[derive(Debug, Default)]
pub struct Router {
    held: Option<Held>,
}

#[derive(Debug, Default)]
struct Held {
    lines: VecDeque<Vec<u8>>,
    dropped: usize,
}

impl Router {
    /// From now on, lines are held (a screen went live).
    pub fn hold(&mut self) {
        self.held.get_or_insert_with(Held::default);
    }

    /// The line, when it goes to standard error now; `None` when it was held.
    pub fn route(&mut self, line: Vec<u8>) -> Option<Vec<u8>> {
        let Some(h) = &mut self.held else {
            return Some(line);
        };
        if h.lines.len() == KEEP {
            h.lines.pop_front();
            h.dropped += 1;
        }
        h.lines.push_back(line);
        None
    }

    /// Lines held now.
    pub fn held(&self) -> usize {
        self.held.as_ref().map_or(0, |h| h.lines.len() + h.dropped)
    }

    /// Stop holding (the screen ended): what was held, to write to standard error, led
    /// by how many were dropped.
    pub fn release(&mut self) -> Vec<u8> {
        let Some(h) = self.held.take() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        if h.dropped > 0 {
            out.extend(
                format!(
                    "rocewatch: {} earlier log lines of the live screen dropped (the last {KEEP} follow)\n",
                    h.dropped
                )
                .into_bytes(),
            );
        }
        for l in h.lines {
            out.extend(l);
        }
        out
    }
}

static ROUTER: Mutex<Router> = Mutex::new(Router { held: None });

/// Set while a command's progress line is drawn on standard error (`cli::progress`): a
/// log line wipes it first, so it starts on a clean line; the progress line is drawn
/// again under it at its next tick.
pub static PROGRESS_DRAWN: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

fn router() -> std::sync::MutexGuard<'static, Router> {
    ROUTER.lock().unwrap_or_else(|e| e.into_inner())
}

/// Lines held now (for the screen to say so).
pub fn held() -> usize {
    router().held()
}

/// Hold the log lines until the returned guard drops, then write them to standard error.
pub fn hold_while_live() -> HoldGuard {
    router().hold();
    HoldGuard
}

/// Held lines are written out when this drops (the screen ended).
#[must_use = "the lines are held only until this drops"]
pub struct HoldGuard;

impl Drop for HoldGuard {
    fn drop(&mut self) {
        let text = router().release();
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(&text);
        let _ = err.flush();
    }
}

/// The log layer's writer (tracing-subscriber's `MakeWriter`): one [`Line`] per event,
/// routed when it is complete.
#[derive(Debug, Clone, Copy, Default)]
pub struct LogWriter;

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogWriter {
    type Writer = Line;
    fn make_writer(&'a self) -> Line {
        Line(Vec::new())
    }
}

/// One event's text, routed when it drops.
pub struct Line(Vec<u8>);

impl Write for Line {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        let line = std::mem::take(&mut self.0);
        if line.is_empty() {
            return;
        }
        // Routed under the lock, written after it: stderr is never written while held.
        let now = router().route(line);
        if let Some(line) = now {
            let mut err = std::io::stderr().lock();
            if PROGRESS_DRAWN.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = err.write_all(b"\r\x1b[2K");
            }
            let _ = err.write_all(&line);
            let _ = err.flush();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_go_to_stderr_unless_a_screen_is_live_then_after_it_in_order() {
        let mut r = Router::default();
        assert_eq!(r.route(b"before\n".to_vec()), Some(b"before\n".to_vec()));
        assert_eq!(r.release(), b"");
        r.hold();
        assert_eq!(r.route(b"WARN one\n".to_vec()), None);
        assert_eq!(r.route(b"WARN two\n".to_vec()), None);
        assert_eq!(r.held(), 2);
        assert_eq!(r.release(), b"WARN one\nWARN two\n");
        assert_eq!(r.held(), 0);
        assert_eq!(r.route(b"after\n".to_vec()), Some(b"after\n".to_vec()));
    }

    #[test]
    fn past_the_bound_the_oldest_are_dropped_and_counted() {
        let mut r = Router::default();
        r.hold();
        for i in 0..KEEP + 3 {
            assert_eq!(r.route(format!("{i}\n").into_bytes()), None);
        }
        assert_eq!(r.held(), KEEP + 3);
        let text = String::from_utf8(r.release()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), KEEP + 1, "{}", &text[..200]);
        assert!(
            lines[0].contains("3 earlier log lines of the live screen dropped"),
            "{}",
            lines[0]
        );
        assert_eq!(lines[1], "3");
        assert_eq!(lines[KEEP], (KEEP + 2).to_string());
    }
}
