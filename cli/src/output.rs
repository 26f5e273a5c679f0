//! Rendering: one JSON document per command with `--json`, plain aligned
//! text otherwise. JSON keys are stable; times are milliseconds since the
//! Unix epoch in JSON and UTC date-times for people.
//!
//! Colour is for people at a terminal only: `--color auto` (the default)
//! paints when stdout is a terminal and `NO_COLOR` is unset or empty, never
//! in JSON. Painting happens after columns are measured, so escapes never
//! break alignment.

use std::io::{IsTerminal, Write};

use arbor_client::Stat;
use clap::ValueEnum;
use serde_json::{json, Value};

/// When to colour human output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ColorChoice {
    /// When stdout is a terminal and `NO_COLOR` is unset or empty.
    Auto,
    Always,
    Never,
}

impl ColorChoice {
    /// Whether to paint text written to a stream that `is_terminal` or not.
    pub fn enabled(self, is_terminal: bool) -> bool {
        match self {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => {
                is_terminal && std::env::var_os("NO_COLOR").is_none_or(|value| value.is_empty())
            }
        }
    }
}

/// What a piece of text is, which decides its colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Paint {
    /// Column headings and field names.
    Heading,
    /// A node that has children (as a directory in `ls`).
    Branch,
    /// An ephemeral node.
    Ephemeral,
    /// A lock holder or election leader.
    Holder,
    /// A lock waiter.
    Waiter,
    /// Errors on stderr.
    Error,
}

impl Paint {
    /// The SGR parameters of the paint.
    fn sgr(self) -> &'static str {
        match self {
            Paint::Heading => "2",
            Paint::Branch => "1;34",
            Paint::Ephemeral => "36",
            Paint::Holder => "1;32",
            Paint::Waiter => "33",
            Paint::Error => "1;31",
        }
    }
}

/// Where and how a command prints its result.
#[derive(Debug, Clone, Copy)]
pub struct Output {
    json: bool,
    /// Whether stdout is painted.
    colour: bool,
    /// Whether error lines on stderr are painted.
    colour_stderr: bool,
}

impl Output {
    /// Output as `--json` and `--color` ask, for the real stdout.
    pub fn new(json: bool, colour: ColorChoice) -> Output {
        Output {
            json,
            colour: !json && colour.enabled(std::io::stdout().is_terminal()),
            colour_stderr: colour.enabled(std::io::stderr().is_terminal()),
        }
    }

    /// The line that reports a failure on stderr: `arbor: <message>`.
    pub fn error_line(&self, message: &str) -> String {
        if self.colour_stderr {
            format!("\x1b[{}marbor:\x1b[0m {message}", Paint::Error.sgr())
        } else {
            format!("arbor: {message}")
        }
    }

    pub fn is_json(&self) -> bool {
        self.json
    }

    /// `text` in the colour of `paint`, or unchanged without colour.
    pub fn paint(&self, text: &str, paint: Paint) -> String {
        if self.colour && !text.is_empty() {
            format!("\x1b[{}m{text}\x1b[0m", paint.sgr())
        } else {
            text.to_owned()
        }
    }

    /// Prints `document` with `--json`, else `human` (and a newline unless
    /// `human` is empty or already ends with one).
    pub fn print(&self, document: &Value, human: &str) -> std::io::Result<()> {
        if self.json {
            self.print_json_line(document)
        } else if human.is_empty() {
            Ok(())
        } else {
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(human.as_bytes())?;
            if !human.ends_with('\n') {
                stdout.write_all(b"\n")?;
            }
            stdout.flush()
        }
    }

    /// Prints `document` on one line of stdout and flushes it.
    pub fn print_json_line(&self, document: &Value) -> std::io::Result<()> {
        let mut stdout = std::io::stdout().lock();
        serde_json::to_writer(&mut stdout, document)?;
        stdout.write_all(b"\n")?;
        stdout.flush()
    }
}

/// A stat as a JSON object (times in milliseconds). Session ids are hex
/// strings: they use all 64 bits, and JSON readers that hold numbers as
/// doubles (jq, JavaScript) would round them past 2^53.
pub fn stat_json(stat: &Stat) -> Value {
    json!({
        "czxid": stat.czxid,
        "mzxid": stat.mzxid,
        "pzxid": stat.pzxid,
        "ctime": stat.ctime_ms,
        "mtime": stat.mtime_ms,
        "version": stat.version,
        "cversion": stat.cversion,
        "aversion": stat.aversion,
        "ephemeral_owner": hex_id(stat.ephemeral_owner),
        "data_length": stat.data_length,
        "num_children": stat.num_children,
    })
}

/// A stat for people: one aligned `name  value` line per field, ids in hex.
pub fn stat_human(stat: &Stat, out: &Output) -> String {
    let rows = [
        ("czxid", hex_id(stat.czxid)),
        ("mzxid", hex_id(stat.mzxid)),
        ("pzxid", hex_id(stat.pzxid)),
        ("ctime", utc_datetime(stat.ctime_ms)),
        ("mtime", utc_datetime(stat.mtime_ms)),
        ("version", stat.version.to_string()),
        ("cversion", stat.cversion.to_string()),
        ("aversion", stat.aversion.to_string()),
        ("ephemeral_owner", hex_id(stat.ephemeral_owner)),
        ("data_length", stat.data_length.to_string()),
        ("num_children", stat.num_children.to_string()),
    ];
    let rows: Vec<Vec<String>> = rows
        .into_iter()
        .map(|(name, value)| vec![out.paint(name, Paint::Heading), value])
        .collect();
    table(&rows)
}

/// A zxid or session id as `0x...`.
pub fn hex_id(id: u64) -> String {
    arbor_client::Hex(id).to_string()
}

/// Rows as left-aligned columns separated by two spaces, without trailing
/// blanks. Cells may be painted: widths count only visible characters.
pub fn table(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|column| {
            rows.iter()
                .filter_map(|row| row.get(column))
                .map(|cell| visible_width(cell))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut text = String::new();
    for row in rows {
        let mut line = String::new();
        for (column, cell) in row.iter().enumerate() {
            if column > 0 {
                line.push_str("  ");
            }
            line.push_str(cell);
            let pad = widths[column].saturating_sub(visible_width(cell));
            line.extend(std::iter::repeat_n(' ', pad));
        }
        text.push_str(line.trim_end());
        text.push('\n');
    }
    text
}

/// The characters of `text` a terminal shows: SGR escapes (`ESC [ ... m`)
/// take no room.
fn visible_width(text: &str) -> usize {
    let mut width = 0;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            // Skip to the end of the escape sequence.
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            width += 1;
        }
    }
    width
}

/// Milliseconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SS.mmmZ` (UTC).
pub fn utc_datetime(epoch_ms: u64) -> String {
    let millis = epoch_ms % 1000;
    let seconds = epoch_ms / 1000;
    let days = seconds / 86_400;
    let second_of_day = seconds % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        second_of_day / 3600,
        second_of_day % 3600 / 60,
        second_of_day % 60
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01 (Howard Hinnant's
/// `civil_from_days`, for non-negative days).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves epoch milliseconds become the right UTC date-time, leap days included.
    #[test]
    fn utc_datetimes() {
        assert_eq!(utc_datetime(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(utc_datetime(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(utc_datetime(1_709_251_199_999), "2024-02-29T23:59:59.999Z");
        assert_eq!(utc_datetime(1_796_000_523_456), "2026-11-30T01:02:03.456Z");
        assert_eq!(utc_datetime(4_102_444_800_000), "2100-01-01T00:00:00.000Z");
    }

    // Proves table columns line up and lines carry no trailing blanks.
    #[test]
    fn table_aligns() {
        let rows = vec![
            vec!["a".to_owned(), "1".to_owned(), "x".to_owned()],
            vec!["long".to_owned(), "22".to_owned(), String::new()],
        ];
        assert_eq!(table(&rows), "a     1   x\nlong  22\n");
    }

    // Proves painted cells are padded by their visible width, so colour keeps columns aligned.
    #[test]
    fn painted_table_aligns() {
        let out = Output {
            json: false,
            colour: true,
            colour_stderr: false,
        };
        let rows = vec![
            vec![out.paint("a", Paint::Branch), "1".to_owned()],
            vec!["long".to_owned(), "2".to_owned()],
        ];
        assert_eq!(table(&rows), "\x1b[1;34ma\x1b[0m     1\nlong  2\n");
        let plain = Output {
            json: false,
            colour: false,
            colour_stderr: false,
        };
        assert_eq!(plain.paint("a", Paint::Branch), "a");
    }
}
