//! A pseudo-terminal for the tests that need `arbor` to see a terminal: the
//! shell's line editor, and the questions asked only of a person.
//!
//! The program gets the pty's slave end as stdin, stdout and stderr, and as
//! its controlling terminal (its own session, as a login shell would give
//! it); the test writes keys to the master end and reads the screen from it.

// Each test crate that includes this module uses its own part of it.
#![allow(dead_code)]

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Columns and rows of the terminal: room for any prompt and path.
const COLUMNS: u16 = 200;
const ROWS: u16 = 50;

/// How long a wait for the screen or for the program's exit may last.
pub const TERMINAL_WAIT: Duration = Duration::from_secs(15);

/// A program running on a pseudo-terminal.
pub struct Terminal {
    child: Child,
    /// The master end: what is written here is typed at the terminal.
    master: File,
    /// Everything the program wrote to the terminal so far.
    screen: Arc<Mutex<Vec<u8>>>,
}

/// Opens a pty pair of `rows` × `columns`, both ends closed on exec so no
/// other child spawned by a parallel test keeps them open.
fn open_pty(rows: u16, columns: u16) -> (OwnedFd, OwnedFd) {
    let mut master = -1;
    let mut slave = -1;
    let size = libc::winsize {
        ws_row: rows,
        ws_col: columns,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: the out-pointers are valid; a null name and termios are allowed.
    let opened = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            &size,
        )
    };
    assert_eq!(opened, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: openpty succeeded, so both are open descriptors we now own.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    for fd in [&master, &slave] {
        // SAFETY: fcntl on an open descriptor.
        let set = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) };
        assert_eq!(set, 0, "fcntl: {}", std::io::Error::last_os_error());
    }
    (master, slave)
}

/// Starts `command` on a new pty of `rows` × `columns`; returns the child
/// and the pty's master end (write keys to it, read the screen from it).
pub fn spawn_on_pty(command: &mut Command, rows: u16, columns: u16) -> (Child, File) {
    let (master, slave) = open_pty(rows, columns);
    let stdio = || Stdio::from(slave.try_clone().expect("the pty's slave end dups"));
    command
        .stdin(stdio())
        .stdout(stdio())
        .stderr(stdio())
        .env("TERM", "xterm");
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        command.pre_exec(|| {
            // A session of its own, with the pty (now its stdin) as its
            // controlling terminal.
            if libc::setsid() == -1 || libc::ioctl(0, libc::TIOCSCTTY, 0) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = command.spawn().expect("the program starts on the pty");
    // Only the child holds the slave end now, so reads of the master
    // end once it exits.
    drop(slave);
    (child, File::from(master))
}

impl Terminal {
    /// Starts `command` on a new pty.
    pub fn spawn(command: &mut Command) -> Terminal {
        let (child, master) = spawn_on_pty(command, ROWS, COLUMNS);
        let screen = Arc::new(Mutex::new(Vec::new()));
        let mut reader = master.try_clone().expect("the pty's master end dups");
        let sink = Arc::clone(&screen);
        std::thread::spawn(move || {
            let mut buffer = [0u8; 4096];
            // Ends with EIO once the slave end is closed by the child's exit.
            while let Ok(read) = reader.read(&mut buffer) {
                if read == 0 {
                    break;
                }
                sink.lock()
                    .expect("the screen lock is never poisoned")
                    .extend_from_slice(&buffer[..read]);
            }
        });
        Terminal {
            child,
            master,
            screen,
        }
    }

    /// Types `bytes` at the terminal, in one write.
    pub fn type_in(&mut self, bytes: &[u8]) {
        self.master
            .write_all(bytes)
            .expect("the pty takes the keys");
        self.master.flush().expect("the keys reach the pty");
    }

    /// Everything the program has written to the terminal so far.
    pub fn screen(&self) -> String {
        let screen = self
            .screen
            .lock()
            .expect("the screen lock is never poisoned");
        String::from_utf8_lossy(&screen).into_owned()
    }

    /// Waits until the screen shows `text` at least `times` times; panics
    /// with the screen after [`TERMINAL_WAIT`].
    pub fn wait_for(&self, text: &str, times: usize) {
        let deadline = Instant::now() + TERMINAL_WAIT;
        loop {
            let screen = self.screen();
            if screen.matches(text).count() >= times {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{text:?} not shown {times} times within {TERMINAL_WAIT:?}; screen: {screen:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for the program to exit; kills it and panics after
    /// [`TERMINAL_WAIT`].
    pub fn wait(&mut self) -> ExitStatus {
        let deadline = Instant::now() + TERMINAL_WAIT;
        loop {
            if let Some(status) = self.child.try_wait().expect("the child is waitable") {
                return status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "the program did not exit within {TERMINAL_WAIT:?}; screen: {:?}",
                    self.screen()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Terminal {
    /// A failed test must not leave the program running.
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
