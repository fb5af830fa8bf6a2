//! The live views' hold on the terminal (`top`, `congestion --watch`): the alternate
//! screen, `q` read at once, the height to fit a frame in; standard error's width for
//! the progress line (`progress`).

use std::io::{IsTerminal, Read, Write};

use tokio::sync::watch;

/// The terminal's height in rows (24 when it cannot be asked).
pub(crate) fn terminal_rows() -> usize {
    // SAFETY: TIOCGWINSZ writes a winsize into the zeroed struct it is given, or fails.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: as above; the pointer is to a live winsize.
    let r = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) };
    if r == 0 && ws.ws_row > 0 {
        ws.ws_row as usize
    } else {
        24
    }
}

/// Standard error's width in columns (80 when it cannot be asked): a progress line is cut
/// to it.
pub(crate) fn stderr_columns() -> usize {
    // SAFETY: TIOCGWINSZ writes a winsize into the zeroed struct it is given, or fails.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: as above; the pointer is to a live winsize.
    let r = unsafe { libc::ioctl(libc::STDERR_FILENO, libc::TIOCGWINSZ, &mut ws) };
    if r == 0 && ws.ws_col > 0 {
        ws.ws_col as usize
    } else {
        80
    }
}

/// A live view's hold on the terminal when `tty` is true (output to a terminal), and the
/// key that ends the view.
pub(crate) fn live_view(tty: bool) -> (Option<Terminal>, QuitKey) {
    let terminal = tty.then(Terminal::enter);
    let key = QuitKey(terminal.as_ref().and_then(Terminal::quit_key));
    (terminal, key)
}

/// What ends a live view from the keyboard: `q` typed on the terminal it holds. Without a
/// terminal to read `q` from, or once standard input has ended, it never fires.
pub(crate) struct QuitKey(Option<watch::Receiver<bool>>);

impl QuitKey {
    /// Returns when `q` is typed, never otherwise (a branch of the view's `select!`).
    pub(crate) async fn typed(&mut self) {
        if let Some(rx) = self.0.as_mut() {
            if rx.wait_for(|quit| *quit).await.is_ok() {
                return;
            }
        }
        std::future::pending::<()>().await;
    }
}

/// The live view's hold on the terminal: the alternate screen with the cursor hidden, and
/// standard input (when it is a terminal) without line editing and echo, so that `q` is
/// read at once. Dropping it puts everything back.
pub(crate) struct Terminal {
    saved: Option<libc::termios>,
}

impl Terminal {
    pub(crate) fn enter() -> Terminal {
        let mut out = std::io::stdout().lock();
        let _ = write!(out, "\x1b[?1049h\x1b[?25l");
        let _ = out.flush();
        let saved = std::io::stdin().is_terminal().then(|| {
            // SAFETY: tcgetattr fills the zeroed termios it is given, or fails (checked).
            let mut t: libc::termios = unsafe { std::mem::zeroed() };
            if unsafe { libc::tcgetattr(libc::STDIN_FILENO, &mut t) } != 0 {
                return None;
            }
            let saved = t;
            // ISIG stays: Ctrl-C is still SIGINT, which ends the view like `q`.
            t.c_lflag &= !(libc::ICANON | libc::ECHO);
            t.c_cc[libc::VMIN] = 1;
            t.c_cc[libc::VTIME] = 0;
            // SAFETY: a termios read from this terminal, changed in two flags.
            (unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &t) } == 0)
                .then_some(saved)
        });
        Terminal {
            saved: saved.flatten(),
        }
    }

    /// Turns true when `q` is typed (only when standard input is the terminal we hold). A
    /// plain thread, not tokio's blocking pool: the runtime does not wait for it at exit.
    fn quit_key(&self) -> Option<watch::Receiver<bool>> {
        self.saved?;
        let (tx, rx) = watch::channel(false);
        std::thread::spawn(move || {
            let mut stdin = std::io::stdin();
            let mut b = [0u8; 1];
            while let Ok(1) = stdin.read(&mut b) {
                if matches!(b[0], b'q' | b'Q') {
                    let _ = tx.send(true);
                    return;
                }
            }
        });
        Some(rx)
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        if let Some(t) = self.saved.take() {
            // SAFETY: restores the termios read in `enter`.
            unsafe {
                libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &t);
            }
        }
        let mut out = std::io::stdout().lock();
        let _ = write!(out, "\x1b[?25h\x1b[?1049l");
        let _ = out.flush();
    }
}
