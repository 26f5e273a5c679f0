//! A progress line on stderr for long work (`delete -r` of many nodes).
//!
//! On a terminal it is one line rewritten in place, redrawn at most every
//! [`REDRAW_INTERVAL`]; otherwise (a log file, a pipe) a plain line at most
//! every [`LINE_INTERVAL`], so a log of a long run stays short. Never on
//! stdout, which stays what scripts read. Write errors are ignored: losing
//! a progress line is no reason to stop the work.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// How often a terminal's progress line is redrawn at most.
pub const REDRAW_INTERVAL: Duration = Duration::from_millis(100);

/// How often a progress line is written at most when stderr is no terminal.
pub const LINE_INTERVAL: Duration = Duration::from_secs(1);

/// The progress line of one piece of work.
pub struct Progress {
    terminal: bool,
    /// When the last line was shown; `None` before the first.
    shown_at: Option<Instant>,
    /// Whether a rewritten line is on the terminal now.
    drawn: bool,
}

impl Progress {
    /// A progress line on the real stderr.
    pub fn new() -> Progress {
        Progress {
            terminal: std::io::stderr().is_terminal(),
            shown_at: None,
            drawn: false,
        }
    }

    /// Shows the line `text` makes, if the last one is old enough (the
    /// first one waits an interval too, so quick work shows none).
    pub fn update(&mut self, text: impl FnOnce() -> String) {
        let now = Instant::now();
        let interval = if self.terminal {
            REDRAW_INTERVAL
        } else {
            LINE_INTERVAL
        };
        let since = *self.shown_at.get_or_insert(now);
        if now.duration_since(since) < interval {
            return;
        }
        self.shown_at = Some(now);
        self.show(&text(), false);
    }

    /// Shows `text` as the last line, whatever the time.
    pub fn finish(&mut self, text: &str) {
        self.show(text, true);
    }

    /// Removes a rewritten line from the terminal (before a question or an
    /// error is printed there).
    pub fn clear(&mut self) {
        if self.drawn {
            write!(std::io::stderr(), "\r\x1b[K").ok();
            self.drawn = false;
        }
    }

    fn show(&mut self, text: &str, last: bool) {
        let mut stderr = std::io::stderr().lock();
        if self.terminal {
            let end = if last { "\n" } else { "" };
            write!(stderr, "\r\x1b[Karbor: {text}{end}").ok();
            self.drawn = !last;
        } else {
            writeln!(stderr, "arbor: {text}").ok();
        }
        stderr.flush().ok();
    }
}
