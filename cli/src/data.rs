//! Safe display of node data, which may be any bytes.
//!
//! Data is shown as text only when it is valid UTF-8 with no control
//! characters other than newline and tab; anything else is shown as escaped
//! hex (`\x00\x01`) for people, or a plain hex string for JSON, so that
//! printing a node can never send terminal escape sequences.

/// How data is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Utf8,
    Hex,
}

impl Encoding {
    /// The name used in JSON output.
    pub fn name(self) -> &'static str {
        match self {
            Encoding::Utf8 => "utf8",
            Encoding::Hex => "hex",
        }
    }
}

/// Which encoding `data` is shown in.
pub fn encoding_of(data: &[u8]) -> Encoding {
    match std::str::from_utf8(data) {
        Ok(text)
            if !text
                .chars()
                .any(|c| c.is_control() && c != '\n' && c != '\t') =>
        {
            Encoding::Utf8
        }
        _ => Encoding::Hex,
    }
}

/// `data` for people: the text itself, or every byte as `\xNN`.
pub fn human(data: &[u8]) -> String {
    match encoding_of(data) {
        Encoding::Utf8 => String::from_utf8_lossy(data).into_owned(),
        Encoding::Hex => data.iter().map(|byte| format!("\\x{byte:02x}")).collect(),
    }
}

/// `data` for JSON: the text itself, or plain lowercase hex; with its encoding.
pub fn for_json(data: &[u8]) -> (String, Encoding) {
    match encoding_of(data) {
        Encoding::Utf8 => (String::from_utf8_lossy(data).into_owned(), Encoding::Utf8),
        Encoding::Hex => (
            data.iter().map(|byte| format!("{byte:02x}")).collect(),
            Encoding::Hex,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves text stays text, and control characters or invalid UTF-8 turn to hex.
    #[test]
    fn text_or_hex() {
        assert_eq!(human(b"hello\n\tworld"), "hello\n\tworld");
        assert_eq!(human("žluť".as_bytes()), "žluť");
        assert_eq!(human(b""), "");
        assert_eq!(human(b"\x00\x01"), "\\x00\\x01");
        assert_eq!(human(b"a\x1b[31m"), "\\x61\\x1b\\x5b\\x33\\x31\\x6d");
        assert_eq!(human(&[0xff]), "\\xff");
        assert_eq!(for_json(b"ok"), ("ok".to_owned(), Encoding::Utf8));
        assert_eq!(for_json(b"\x00\xab"), ("00ab".to_owned(), Encoding::Hex));
        assert_eq!(for_json("\u{85}".as_bytes()).1, Encoding::Hex);
    }
}
