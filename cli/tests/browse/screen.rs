//! A minimal terminal screen: enough of VT100/xterm to replay what ratatui's
//! crossterm backend writes, so a test reads the screen as the user sees it.
//!
//! Searching the raw output would not do: ratatui redraws only the cells
//! that changed, so after an update "num_children     1" is a cursor move
//! and a "1", never the whole line. Replaying onto a grid gives the rendered
//! text. The grid is the bounded buffer: `rows` × `columns` cells, whatever
//! the program writes, plus at most [`PENDING_BYTES_MAX`] bytes of an escape
//! sequence or a character not yet complete.
//!
//! Handled: printable text (UTF-8, one cell per character, which holds for
//! the box drawing, markers and ASCII the browser draws), CR, LF, BS,
//! cursor positioning and moves (CSI H f A B C D G d), erasing (CSI J K).
//! Other sequences (colours, modes, OSC titles) are consumed and ignored.

/// Most bytes of one escape sequence (or character) held while incomplete;
/// a longer one is dropped, as no sequence ratatui writes comes near it.
const PENDING_BYTES_MAX: usize = 256;

/// Where the parser is between bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Ground,
    /// After ESC.
    Escape,
    /// After ESC [: parameters until a final byte.
    Csi,
    /// After ESC ]: until BEL or ESC \.
    Osc,
    /// ESC inside an OSC.
    OscEscape,
}

/// The emulated screen.
pub struct Screen {
    rows: usize,
    columns: usize,
    cells: Vec<Vec<char>>,
    row: usize,
    column: usize,
    state: State,
    /// The parameters of the CSI sequence, or the bytes of a character.
    pending: Vec<u8>,
}

impl Screen {
    pub fn new(rows: u16, columns: u16) -> Screen {
        let (rows, columns) = (usize::from(rows), usize::from(columns));
        Screen {
            rows,
            columns,
            cells: vec![vec![' '; columns]; rows],
            row: 0,
            column: 0,
            state: State::Ground,
            pending: Vec::new(),
        }
    }

    /// Applies bytes written by the program (any split of its output).
    pub fn feed(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.byte(byte);
        }
    }

    /// The screen, one line per row, trailing blanks removed.
    pub fn text(&self) -> String {
        let mut text = String::new();
        for line in &self.cells {
            let line: String = line.iter().collect();
            text.push_str(line.trim_end());
            text.push('\n');
        }
        text
    }

    fn byte(&mut self, byte: u8) {
        match self.state {
            State::Ground => self.ground(byte),
            State::Escape => {
                self.state = match byte {
                    b'[' => State::Csi,
                    b']' => State::Osc,
                    // Two-byte sequences (ESC 7, ESC =, ...): nothing drawn.
                    _ => State::Ground,
                };
                self.pending.clear();
            }
            State::Csi => {
                if (0x40..=0x7e).contains(&byte) {
                    self.csi(byte);
                    self.pending.clear();
                    self.state = State::Ground;
                } else if self.pending.len() < PENDING_BYTES_MAX {
                    self.pending.push(byte);
                } else {
                    self.pending.clear();
                    self.state = State::Ground;
                }
            }
            State::Osc => match byte {
                0x07 => self.state = State::Ground,
                0x1b => self.state = State::OscEscape,
                _ => {}
            },
            State::OscEscape => self.state = State::Ground,
        }
    }

    fn ground(&mut self, byte: u8) {
        match byte {
            0x1b => {
                self.pending.clear();
                self.state = State::Escape;
            }
            b'\r' => self.column = 0,
            b'\n' => self.row = (self.row + 1).min(self.rows.saturating_sub(1)),
            0x08 => self.column = self.column.saturating_sub(1),
            0x00..=0x1f | 0x7f => {}
            _ => {
                self.pending.push(byte);
                match std::str::from_utf8(&self.pending) {
                    Ok(text) => {
                        let chars: Vec<char> = text.chars().collect();
                        self.pending.clear();
                        for c in chars {
                            self.print(c);
                        }
                    }
                    // Incomplete: wait for the rest of the character.
                    Err(error) if error.error_len().is_none() && self.pending.len() < 4 => {}
                    Err(_) => {
                        self.pending.clear();
                        self.print(char::REPLACEMENT_CHARACTER);
                    }
                }
            }
        }
    }

    fn print(&mut self, c: char) {
        if self.rows == 0 || self.columns == 0 {
            return;
        }
        // Autowrap: a character past the last column goes to the next row.
        if self.column >= self.columns {
            self.column = 0;
            self.row = (self.row + 1).min(self.rows - 1);
        }
        self.cells[self.row][self.column] = c;
        self.column += 1;
    }

    /// The `index`th parameter of the CSI sequence, `default` if absent or 0.
    fn parameter(&self, index: usize, default: usize) -> usize {
        let text = String::from_utf8_lossy(&self.pending);
        text.trim_start_matches('?')
            .split(';')
            .nth(index)
            .and_then(|value| value.parse::<usize>().ok())
            .filter(|&value| value > 0)
            .unwrap_or(default)
    }

    fn csi(&mut self, command: u8) {
        // Private modes (ESC [ ? ...) only switch things (cursor, screen).
        if self.pending.first() == Some(&b'?') {
            return;
        }
        let last_row = self.rows.saturating_sub(1);
        let last_column = self.columns.saturating_sub(1);
        match command {
            b'H' | b'f' => {
                self.row = (self.parameter(0, 1) - 1).min(last_row);
                self.column = (self.parameter(1, 1) - 1).min(last_column);
            }
            b'A' => self.row = self.row.saturating_sub(self.parameter(0, 1)),
            b'B' => self.row = (self.row + self.parameter(0, 1)).min(last_row),
            b'C' => self.column = (self.column + self.parameter(0, 1)).min(last_column),
            b'D' => self.column = self.column.saturating_sub(self.parameter(0, 1)),
            b'G' => self.column = (self.parameter(0, 1) - 1).min(last_column),
            b'd' => self.row = (self.parameter(0, 1) - 1).min(last_row),
            b'J' => {
                // 0 (the default): from the cursor on; 1: up to it; 2, 3: all.
                let mode = self.parameter(0, 0);
                let here = self.row * self.columns + self.column;
                for (index, cell) in self.cells.iter_mut().flatten().enumerate() {
                    let erase = match mode {
                        0 => index >= here,
                        1 => index <= here,
                        _ => true,
                    };
                    if erase {
                        *cell = ' ';
                    }
                }
            }
            b'K' => {
                let mode = self.parameter(0, 0);
                let column = self.column;
                if let Some(line) = self.cells.get_mut(self.row) {
                    for (index, cell) in line.iter_mut().enumerate() {
                        let erase = match mode {
                            0 => index >= column,
                            1 => index <= column,
                            _ => true,
                        };
                        if erase {
                            *cell = ' ';
                        }
                    }
                }
            }
            // Colours and attributes (m), and the rest: nothing to place.
            _ => {}
        }
    }
}

#[test]
fn screen_replays_moves_updates_and_erases() {
    let mut screen = Screen::new(3, 10);
    screen.feed("\x1b[?1049h\x1b[2J\x1b[1;1Hab\x1b[38;5;2mc\x1b[0m".as_bytes());
    // A character split across two reads.
    let dot = "·".as_bytes();
    screen.feed(&[b'\x1b', b'[', b'2', b';', b'3', b'H', dot[0]]);
    screen.feed(&dot[1..]);
    screen.feed(b"\x1b]0;title\x07\x1b[1;2HX");
    assert_eq!(screen.text(), "aXc\n  \u{b7}\n\n");
    screen.feed(b"\x1b[1;2H\x1b[K\x1b[3;1Hend");
    assert_eq!(screen.text(), "a\n  \u{b7}\nend\n");
    screen.feed(b"\x1b[2J");
    assert_eq!(screen.text(), "\n\n\n");
}
