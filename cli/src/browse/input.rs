//! A single-line text editor, for the search box and the data editor.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

/// Most characters a line may hold: bounds what a held-down key (or a paste)
/// can make the browser allocate and draw.
pub const INPUT_CHARS_MAX: usize = 16 * 1024;

/// What a key did to the line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Edit {
    /// The text or the cursor changed (or the key was ignored).
    Changed,
    /// Enter: the user is done.
    Submit,
    /// Esc: the user gave up.
    Cancel,
}

/// The text and a cursor, in characters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LineInput {
    chars: Vec<char>,
    cursor: usize,
}

impl LineInput {
    /// A line holding `text` (cut at [`INPUT_CHARS_MAX`]), cursor at the end.
    pub fn new(text: &str) -> LineInput {
        let chars: Vec<char> = text.chars().take(INPUT_CHARS_MAX).collect();
        let cursor = chars.len();
        LineInput { chars, cursor }
    }

    pub fn text(&self) -> String {
        self.chars.iter().collect()
    }

    /// Applies one key.
    pub fn handle(&mut self, key: KeyEvent) -> Edit {
        match key.code {
            KeyCode::Enter => return Edit::Submit,
            KeyCode::Esc => return Edit::Cancel,
            KeyCode::Char('u') if key.modifiers.contains(KeyModifiers::CONTROL) => {
                self.chars.drain(..self.cursor);
                self.cursor = 0;
            }
            KeyCode::Char('a') if key.modifiers.contains(KeyModifiers::CONTROL) => self.cursor = 0,
            KeyCode::Char('e') if key.modifiers.contains(KeyModifiers::CONTROL) => {
                self.cursor = self.chars.len();
            }
            KeyCode::Char(c)
                if !key.modifiers.contains(KeyModifiers::CONTROL)
                    && !c.is_control()
                    && self.chars.len() < INPUT_CHARS_MAX =>
            {
                self.chars.insert(self.cursor, c);
                self.cursor += 1;
            }
            KeyCode::Backspace if self.cursor > 0 => {
                self.cursor -= 1;
                self.chars.remove(self.cursor);
            }
            KeyCode::Delete if self.cursor < self.chars.len() => {
                self.chars.remove(self.cursor);
            }
            KeyCode::Left => self.cursor = self.cursor.saturating_sub(1),
            KeyCode::Right => self.cursor = (self.cursor + 1).min(self.chars.len()),
            KeyCode::Home => self.cursor = 0,
            KeyCode::End => self.cursor = self.chars.len(),
            _ => {}
        }
        Edit::Changed
    }

    /// The part of the line to show in `width` cells, and where the cursor
    /// falls in it: scrolls so the cursor stays visible.
    pub fn window(&self, width: usize) -> (String, usize) {
        if width == 0 {
            return (String::new(), 0);
        }
        // Keep one cell for the cursor past the end.
        let start = (self.cursor + 1).saturating_sub(width);
        let shown: String = self.chars.iter().skip(start).take(width).collect();
        (shown, self.cursor - start)
    }
}
