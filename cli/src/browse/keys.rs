//! The key map of the tree view: which key means which action.
//!
//! Kept apart from the app so the map is one table, and the help overlay is
//! drawn from the same list ([`HELP`]) so it cannot drift from what the keys do.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

/// What a key asks for while browsing (no dialog open).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Up,
    Down,
    PageUp,
    PageDown,
    First,
    Last,
    /// Expand the node, or move to its first child if already expanded.
    Expand,
    /// Collapse the node, or move to its parent if already collapsed.
    Collapse,
    Search,
    NextMatch,
    Delete,
    Edit,
    Refresh,
    Help,
    /// Clear the status line.
    Dismiss,
    Quit,
}

/// The action of `key` in the tree view, if any.
pub fn action(key: KeyEvent) -> Option<Action> {
    if is_interrupt(key) {
        return Some(Action::Quit);
    }
    if key
        .modifiers
        .intersects(KeyModifiers::CONTROL | KeyModifiers::ALT)
    {
        return None;
    }
    let action = match key.code {
        KeyCode::Up | KeyCode::Char('k') => Action::Up,
        KeyCode::Down | KeyCode::Char('j') => Action::Down,
        KeyCode::PageUp => Action::PageUp,
        KeyCode::PageDown => Action::PageDown,
        KeyCode::Home | KeyCode::Char('g') => Action::First,
        KeyCode::End | KeyCode::Char('G') => Action::Last,
        KeyCode::Right | KeyCode::Enter | KeyCode::Char('l') => Action::Expand,
        KeyCode::Left | KeyCode::Char('h') => Action::Collapse,
        KeyCode::Char('/') => Action::Search,
        KeyCode::Char('n') => Action::NextMatch,
        KeyCode::Char('d') => Action::Delete,
        KeyCode::Char('e') => Action::Edit,
        KeyCode::Char('r') => Action::Refresh,
        KeyCode::Char('?') => Action::Help,
        KeyCode::Esc => Action::Dismiss,
        KeyCode::Char('q') => Action::Quit,
        _ => return None,
    };
    Some(action)
}

/// Ctrl-C: quits from anywhere, whatever dialog is open.
pub fn is_interrupt(key: KeyEvent) -> bool {
    key.code == KeyCode::Char('c') && key.modifiers.contains(KeyModifiers::CONTROL)
}

/// The help overlay: (keys, what they do).
pub const HELP: &[(&str, &str)] = &[
    ("↑ ↓  k j", "move the selection"),
    ("PgUp PgDn", "move a page"),
    ("Home End  g G", "first / last row"),
    ("→ Enter l", "expand, or go to the first child"),
    ("← h", "collapse, or go to the parent"),
    ("/", "search the loaded nodes by name"),
    ("n", "next match"),
    ("e", "edit the data (one line, UTF-8)"),
    ("d", "delete the node (asks first)"),
    ("r", "reload the expanded nodes"),
    ("?", "this help"),
    ("q  Ctrl-C", "quit"),
];
