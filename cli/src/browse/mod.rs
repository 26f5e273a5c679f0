//! `arbor browse`: a full-screen browser of the znode tree, updated live.
//!
//! The pieces, each testable without a terminal:
//!
//! * `tree` — the lazily loaded model: only the root and the children of
//!   expanded nodes are ever fetched or held.
//! * `app` — the state machine: keys and loader messages in, requests for
//!   the loader out; selection, dialogs, status line.
//! * `sync` — the loader: runs requests against the server, follows the
//!   selected node's data, and reports everything back as messages.
//! * `watches` — the loader's persistent watches: one per expanded node and
//!   per collapsed row on screen.
//! * `view` — drawing, a pure function of the app.
//! * `keys`, `input` — the key map and the one-line editor.
//!
//! This file owns the terminal: raw mode and the alternate screen, always
//! restored (on return, on error and on panic), and the event loop, which
//! waits on keys and loader messages at once and redraws after each.

mod app;
mod input;
mod keys;
mod sync;
mod tree;
mod view;
mod watches;

#[cfg(test)]
mod tests;

use std::io::{IsTerminal, Stdout};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;

use anyhow::Context as _;
use crossterm::event::{Event, EventStream, KeyEventKind};
use crossterm::terminal::{EnterAlternateScreen, LeaveAlternateScreen};
use futures_util::StreamExt;
use ratatui::backend::{Backend, CrosstermBackend};
use ratatui::Terminal;
use tokio::sync::mpsc;

use self::app::{App, Message};
use self::sync::{Loader, MESSAGES_MAX};
use crate::Global;

/// How often the title's countdown is redrawn while the server is away.
const COUNTDOWN_REDRAW_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// Most queued loader messages applied before the screen is drawn again: a
/// burst of events costs one redraw, yet keys still get a turn.
const MESSAGES_PER_DRAW_MAX: usize = 64;

/// Runs the browser until the user quits.
pub async fn run(global: &Global) -> anyhow::Result<()> {
    if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        return Err(crate::error::Usage {
            message: "arbor browse needs a terminal (use `arbor ls` or `arbor tree` in scripts)"
                .to_owned(),
        }
        .into());
    }
    // Connect first, so a connection error is printed on the normal screen.
    let client = crate::commands::connect_lasting(global).await?;
    let (messages, inbox) = mpsc::channel(MESSAGES_MAX);
    let loader = Loader::start(client.clone(), messages);
    let mut app = App::new(global.server());
    app.set_session_timeout(client.session_timeout());

    let result = match Screen::enter() {
        Ok(mut screen) => {
            let result = event_loop(&mut screen.terminal, &mut app, &loader, inbox).await;
            drop(screen);
            result
        }
        Err(error) => Err(error),
    };
    drop(loader);
    // Ends the session now, so the server drops its watches at once.
    client.close().await.ok();
    result
}

/// Keys and loader messages in, redraws out, until quit.
async fn event_loop<B: Backend>(
    terminal: &mut Terminal<B>,
    app: &mut App,
    loader: &Loader,
    mut inbox: mpsc::Receiver<Message>,
) -> anyhow::Result<()> {
    let mut keys = EventStream::new();
    // Redraws the outage's countdown while the server is away.
    let mut countdown = tokio::time::interval(COUNTDOWN_REDRAW_INTERVAL);
    let requests = app.start();
    loader.dispatch(app, requests);
    loop {
        let size = terminal.size().context("cannot read the terminal size")?;
        let requests = app.set_page_rows(view::tree_rows(ratatui::layout::Rect::new(
            0,
            0,
            size.width,
            size.height,
        )));
        loader.dispatch(app, requests);
        terminal
            .draw(|frame| view::draw(frame, app))
            .context("cannot draw")?;
        if app.should_quit() {
            return Ok(());
        }
        tokio::select! {
            event = keys.next() => match event {
                Some(Ok(Event::Key(key))) if key.kind != KeyEventKind::Release => {
                    let requests = app.handle_key(key);
                    loader.dispatch(app, requests);
                }
                // Resizes and the rest: just redraw.
                Some(Ok(_)) => {}
                Some(Err(error)) => return Err(error).context("cannot read the terminal"),
                None => return Ok(()),
            },
            _ = countdown.tick(), if app.outage().is_some() => {}
            message = inbox.recv() => {
                let Some(message) = message else {
                    anyhow::bail!("the connection task ended");
                };
                let requests = app.apply(message);
                loader.dispatch(app, requests);
                for _ in 1..MESSAGES_PER_DRAW_MAX {
                    let Ok(message) = inbox.try_recv() else { break };
                    let requests = app.apply(message);
                    loader.dispatch(app, requests);
                }
            }
        }
    }
}

/// Whether the terminal is in raw mode on the alternate screen (read by the
/// panic hook).
static ACTIVE: AtomicBool = AtomicBool::new(false);

/// The terminal in full-screen mode; restores it when dropped.
struct Screen {
    terminal: Terminal<CrosstermBackend<Stdout>>,
}

impl Screen {
    fn enter() -> anyhow::Result<Screen> {
        install_panic_hook();
        crossterm::terminal::enable_raw_mode().context("cannot set up the terminal")?;
        ACTIVE.store(true, Ordering::SeqCst);
        let setup = crossterm::execute!(std::io::stdout(), EnterAlternateScreen)
            .map_err(anyhow::Error::from)
            .and_then(|()| Ok(Terminal::new(CrosstermBackend::new(std::io::stdout()))?));
        match setup {
            Ok(terminal) => Ok(Screen { terminal }),
            Err(error) => {
                restore();
                Err(error.context("cannot set up the terminal"))
            }
        }
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        restore();
    }
}

/// Leaves the alternate screen and raw mode, once.
fn restore() {
    if ACTIVE.swap(false, Ordering::SeqCst) {
        // Nothing better to do if the terminal is gone.
        crossterm::execute!(
            std::io::stdout(),
            LeaveAlternateScreen,
            crossterm::cursor::Show
        )
        .ok();
        crossterm::terminal::disable_raw_mode().ok();
    }
}

/// Restores the terminal before a panic message is printed, so it is
/// readable and the shell is usable afterwards.
fn install_panic_hook() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            previous(info);
        }));
    });
}
