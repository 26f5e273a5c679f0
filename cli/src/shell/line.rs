//! Splitting a shell line into words, and resolving znode paths against the
//! working node.
//!
//! Words follow the POSIX shell rules people already know: blanks separate
//! words, `'...'` keeps everything literally, `"..."` keeps everything but
//! lets `\` escape `"` and `\`, and outside quotes `\` makes the next
//! character literal. [`scan`] is lenient (it reports an open quote instead of
//! failing) because the completer must cope with half-typed lines; [`split`]
//! is the strict form used to run a line.

use std::fmt;
use std::io::{BufRead, Read};

/// The longest line the shell runs, in bytes: room for any node's data typed
/// inline (the server's default data limit is 1 MiB) plus the command.
pub const LINE_BYTES_MAX: usize = 1024 * 1024 + 4096;

/// Why a line could not be split into words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitError {
    /// A `'` or `"` was opened and never closed.
    UnterminatedQuote(char),
    /// The line ends with a lone `\`.
    DanglingEscape,
}

impl fmt::Display for SplitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SplitError::UnterminatedQuote(quote) => write!(f, "unterminated {quote} quote"),
            SplitError::DanglingEscape => write!(f, "the line ends with a lone \\"),
        }
    }
}

impl std::error::Error for SplitError {}

/// One word of a line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Word {
    /// Byte offset in the line where the word (or its opening quote) starts.
    pub start: usize,
    /// The word with its quotes and escapes removed.
    pub text: String,
}

/// A line split as far as it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scan {
    pub words: Vec<Word>,
    /// The quote still open at the end of the line, if any.
    pub open_quote: Option<char>,
    /// Whether the line ends with a lone `\`.
    pub dangling_escape: bool,
    /// Whether the last word runs to the end of the line (no blank after it),
    /// so that it is the word being typed.
    pub ends_in_word: bool,
}

/// Quoting state while scanning.
#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Plain,
    Single,
    Double,
}

/// Splits `line` into words without failing on an unfinished line.
pub fn scan(line: &str) -> Scan {
    let mut words = Vec::new();
    // The word being built: its start and text.
    let mut current: Option<Word> = None;
    let mut state = State::Plain;
    let mut chars = line.char_indices().peekable();
    let mut dangling_escape = false;
    while let Some((at, c)) = chars.next() {
        match state {
            State::Plain if c.is_whitespace() => {
                if let Some(word) = current.take() {
                    words.push(word);
                }
            }
            State::Plain => {
                let word = current.get_or_insert_with(|| Word {
                    start: at,
                    text: String::new(),
                });
                match c {
                    '\'' => state = State::Single,
                    '"' => state = State::Double,
                    '\\' => match chars.next() {
                        Some((_, escaped)) => word.text.push(escaped),
                        None => dangling_escape = true,
                    },
                    _ => word.text.push(c),
                }
            }
            State::Single => {
                let word = current.get_or_insert_with(|| Word {
                    start: at,
                    text: String::new(),
                });
                if c == '\'' {
                    state = State::Plain;
                } else {
                    word.text.push(c);
                }
            }
            State::Double => {
                let word = current.get_or_insert_with(|| Word {
                    start: at,
                    text: String::new(),
                });
                match c {
                    '"' => state = State::Plain,
                    // Inside double quotes only `"` and `\` can be escaped,
                    // as in POSIX shells; any other `\` stays.
                    '\\' => match chars.peek() {
                        Some(&(_, next)) if next == '"' || next == '\\' => {
                            word.text.push(next);
                            chars.next();
                        }
                        Some(_) => word.text.push('\\'),
                        None => dangling_escape = true,
                    },
                    _ => word.text.push(c),
                }
            }
        }
    }
    let ends_in_word = current.is_some();
    if let Some(word) = current {
        words.push(word);
    }
    let open_quote = match state {
        State::Plain => None,
        State::Single => Some('\''),
        State::Double => Some('"'),
    };
    Scan {
        words,
        open_quote,
        dangling_escape,
        ends_in_word,
    }
}

/// Splits a complete `line` into words, failing on an open quote or a
/// dangling `\`.
pub fn split(line: &str) -> Result<Vec<String>, SplitError> {
    let scan = scan(line);
    if let Some(quote) = scan.open_quote {
        return Err(SplitError::UnterminatedQuote(quote));
    }
    if scan.dangling_escape {
        return Err(SplitError::DanglingEscape);
    }
    Ok(scan.words.into_iter().map(|word| word.text).collect())
}

/// `word` written so that [`split`] reads it back as one word: characters the
/// splitter treats specially get a `\`.
pub fn escape(word: &str) -> String {
    let mut escaped = String::with_capacity(word.len());
    for c in word.chars() {
        if c.is_whitespace() || matches!(c, '\'' | '"' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

/// `path` as an absolute, normalised znode path: relative to `cwd` unless it
/// starts with `/`; `.` and empty components dropped, `..` going up one level
/// (and staying at `/` at the root). `cwd` must be absolute.
pub fn resolve(cwd: &str, path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    let base = if path.starts_with('/') { "" } else { cwd };
    for part in base.split('/').chain(path.split('/')) {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            name => parts.push(name),
        }
    }
    format!("/{}", parts.join("/"))
}

/// One line of a piped script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PipedLine {
    /// The line, without its `\n` or `\r\n`.
    Line(String),
    /// Longer than [`LINE_BYTES_MAX`]: read past and dropped.
    TooLong,
    /// Not valid UTF-8: dropped.
    NotUtf8,
    /// The input has ended.
    Eof,
}

/// Reads one line from `reader`, keeping at most [`LINE_BYTES_MAX`] bytes of
/// it in memory however long it is.
pub fn read_piped_line(reader: &mut impl BufRead) -> std::io::Result<PipedLine> {
    let mut bytes = Vec::new();
    // Room for the limit and a `\r\n`, so a line at the limit reads whole.
    let limit = LINE_BYTES_MAX as u64 + 2;
    if Read::by_ref(reader)
        .take(limit)
        .read_until(b'\n', &mut bytes)?
        == 0
    {
        return Ok(PipedLine::Eof);
    }
    if bytes.last() == Some(&b'\n') {
        bytes.pop();
        if bytes.last() == Some(&b'\r') {
            bytes.pop();
        }
    } else if bytes.len() as u64 == limit {
        // Skip the rest of the line a chunk at a time.
        loop {
            let mut rest = Vec::new();
            let read = Read::by_ref(reader)
                .take(LINE_BYTES_MAX as u64)
                .read_until(b'\n', &mut rest)?;
            if read == 0 || rest.last() == Some(&b'\n') {
                return Ok(PipedLine::TooLong);
            }
        }
    }
    if bytes.len() > LINE_BYTES_MAX {
        return Ok(PipedLine::TooLong);
    }
    Ok(match String::from_utf8(bytes) {
        Ok(line) => PipedLine::Line(line),
        Err(_) => PipedLine::NotUtf8,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves piped lines lose their line ending, an unterminated last line still counts, and EOF is reported.
    #[test]
    fn reads_piped_lines() {
        let mut input = std::io::Cursor::new(b"ls /\r\npwd\n\nlast".to_vec());
        let mut next = || read_piped_line(&mut input).expect("a cursor reads");
        assert_eq!(next(), PipedLine::Line("ls /".to_owned()));
        assert_eq!(next(), PipedLine::Line("pwd".to_owned()));
        assert_eq!(next(), PipedLine::Line(String::new()));
        assert_eq!(next(), PipedLine::Line("last".to_owned()));
        assert_eq!(next(), PipedLine::Eof);
    }

    // Proves over-long and non-UTF-8 lines are dropped alone and the next line still reads.
    #[test]
    fn drops_bad_piped_lines() {
        let mut data = vec![b'x'; LINE_BYTES_MAX];
        data.extend_from_slice(b"\n");
        data.extend(std::iter::repeat_n(b'y', 3 * LINE_BYTES_MAX + 7));
        data.extend_from_slice(b"\n\xff\xfe\nok\n");
        let mut input = std::io::Cursor::new(data);
        let mut next = || read_piped_line(&mut input).expect("a cursor reads");
        assert_eq!(next(), PipedLine::Line("x".repeat(LINE_BYTES_MAX)));
        assert_eq!(next(), PipedLine::TooLong);
        assert_eq!(next(), PipedLine::NotUtf8);
        assert_eq!(next(), PipedLine::Line("ok".to_owned()));
        assert_eq!(next(), PipedLine::Eof);
    }

    fn words(line: &str) -> Vec<String> {
        split(line).unwrap_or_else(|err| panic!("{line:?} splits: {err}"))
    }

    // Proves blanks separate words and runs of blanks make no empty words.
    #[test]
    fn splits_on_blanks() {
        assert_eq!(words("  ls   -l\t/app  "), ["ls", "-l", "/app"]);
        assert!(words("").is_empty());
        assert!(words("   ").is_empty());
    }

    // Proves single quotes keep everything literally, including `\` and `"`.
    #[test]
    fn single_quotes_are_literal() {
        assert_eq!(
            words(r#"set /a 'two  words \n "x"'"#),
            ["set", "/a", r#"two  words \n "x""#]
        );
        assert_eq!(words("create /a ''"), ["create", "/a", ""]);
    }

    // Proves double quotes keep blanks and let `\` escape only `"` and `\`.
    #[test]
    fn double_quotes_escape_quote_and_backslash() {
        assert_eq!(
            words(r#"set /a "say \"hi\" \\ \n""#),
            ["set", "/a", r#"say "hi" \ \n"#]
        );
    }

    // Proves a backslash outside quotes makes the next character literal, and quoted parts join one word.
    #[test]
    fn backslash_and_adjacent_quotes() {
        assert_eq!(words(r"get /my\ node"), ["get", "/my node"]);
        assert_eq!(words(r#"get /a'b c'"d e"f"#), ["get", "/ab cd ef"]);
        assert_eq!(words(r"x \'"), ["x", "'"]);
    }

    // Proves unfinished lines are errors for `split`, never panics.
    #[test]
    fn unfinished_lines_are_errors() {
        assert_eq!(split("get 'abc"), Err(SplitError::UnterminatedQuote('\'')));
        assert_eq!(split("get \"abc"), Err(SplitError::UnterminatedQuote('"')));
        assert_eq!(split("get abc\\"), Err(SplitError::DanglingEscape));
        assert_eq!(
            split("get \"abc\\"),
            Err(SplitError::UnterminatedQuote('"'))
        );
        assert_eq!(
            SplitError::UnterminatedQuote('\'').to_string(),
            "unterminated ' quote"
        );
    }

    // Proves `scan` reports where the word being typed starts, even inside an open quote.
    #[test]
    fn scan_finds_the_word_being_typed() {
        let scan = scan("ls /app/al");
        assert!(scan.ends_in_word);
        assert_eq!(
            scan.words[1],
            Word {
                start: 3,
                text: "/app/al".to_owned()
            }
        );
        let scan = super::scan("ls ");
        assert!(!scan.ends_in_word);
        assert_eq!(scan.words.len(), 1);
        let scan = super::scan("get \"/my no");
        assert_eq!(scan.open_quote, Some('"'));
        assert!(scan.ends_in_word);
        assert_eq!(
            scan.words[1],
            Word {
                start: 4,
                text: "/my no".to_owned()
            }
        );
    }

    // Proves escaped words split back to themselves.
    #[test]
    fn escape_round_trips() {
        for word in ["plain", "two words", r#"q'u"o\te"#, "tab\there", ""] {
            let line = format!("cmd {}", escape(word));
            let expected = if word.is_empty() {
                vec!["cmd"]
            } else {
                vec!["cmd", word]
            };
            assert_eq!(words(&line), expected, "{line}");
        }
    }

    // Proves relative paths resolve against the working node and `.`, `..` and `//` normalise.
    #[test]
    fn resolves_paths() {
        assert_eq!(resolve("/", "app"), "/app");
        assert_eq!(resolve("/app", "x"), "/app/x");
        assert_eq!(resolve("/app", "/abs//path/"), "/abs/path");
        assert_eq!(resolve("/app/sub", ".."), "/app");
        assert_eq!(resolve("/app/sub", "../.."), "/");
        assert_eq!(resolve("/", ".."), "/");
        assert_eq!(resolve("/", "../../a"), "/a");
        assert_eq!(resolve("/app", "."), "/app");
        assert_eq!(resolve("/app", ""), "/app");
        assert_eq!(resolve("/app", "./x/./y/../z"), "/app/x/z");
        assert_eq!(resolve("/app", "/"), "/");
    }
}
