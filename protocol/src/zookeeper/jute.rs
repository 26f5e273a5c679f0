//! Jute, ZooKeeper's serialization, as far as its client protocol uses it:
//! big-endian `int` (i32) and `long` (i64), `boolean` as one byte, `buffer`
//! and `ustring` as an i32 length (−1: null) and the bytes, `vector` as an
//! i32 count (−1: null) and the elements.
//!
//! The reader works on one frame, already bounded by the frame limit. A
//! length or count is checked against the bytes left before anything is
//! allocated for it, so a forged one costs nothing; every shortfall is an
//! error naming the field, never a panic.

/// The smallest encoding of a vector element the client protocol sends (a
/// `ustring`'s length, an `int`): a count larger than the bytes left allow
/// is refused before the vector is made.
pub const ELEMENT_BYTES_MIN: usize = 4;

/// Why a frame could not be read as jute.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JuteError {
    #[error("{what}: the frame ends early")]
    Truncated { what: &'static str },
    #[error("{what}: length {length} is negative")]
    NegativeLength { what: &'static str, length: i32 },
    #[error("{what}: length {length} is past the {left} bytes left")]
    TooLong {
        what: &'static str,
        length: usize,
        left: usize,
    },
    #[error("{what}: not UTF-8")]
    NotUtf8 { what: &'static str },
    #[error("{what}: boolean byte {byte}")]
    NotBoolean { what: &'static str, byte: u8 },
}

/// Reads jute values off the front of a frame.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes }
    }

    /// The bytes not read yet.
    pub fn remaining(&self) -> &'a [u8] {
        self.bytes
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    fn take(&mut self, count: usize, what: &'static str) -> Result<&'a [u8], JuteError> {
        if self.bytes.len() < count {
            return Err(JuteError::Truncated { what });
        }
        let (taken, rest) = self.bytes.split_at(count);
        self.bytes = rest;
        Ok(taken)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], JuteError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    pub fn int(&mut self, what: &'static str) -> Result<i32, JuteError> {
        self.array(what).map(i32::from_be_bytes)
    }

    pub fn long(&mut self, what: &'static str) -> Result<i64, JuteError> {
        self.array(what).map(i64::from_be_bytes)
    }

    /// A `boolean`: ZooKeeper writes 0 or 1; anything else is refused, as
    /// a sign the frame is not what its type claims.
    pub fn bool(&mut self, what: &'static str) -> Result<bool, JuteError> {
        match self.array::<1>(what)?[0] {
            0 => Ok(false),
            1 => Ok(true),
            byte => Err(JuteError::NotBoolean { what, byte }),
        }
    }

    /// A length or count: `None` for −1 (null); at most `left / unit`.
    fn length(&mut self, what: &'static str, unit: usize) -> Result<Option<usize>, JuteError> {
        let length = self.int(what)?;
        if length == -1 {
            return Ok(None);
        }
        let length =
            usize::try_from(length).map_err(|_| JuteError::NegativeLength { what, length })?;
        let left = self.bytes.len();
        if length > left / unit {
            return Err(JuteError::TooLong { what, length, left });
        }
        Ok(Some(length))
    }

    /// A `buffer`, `None` if null.
    pub fn buffer(&mut self, what: &'static str) -> Result<Option<&'a [u8]>, JuteError> {
        match self.length(what, 1)? {
            None => Ok(None),
            Some(length) => self.take(length, what).map(Some),
        }
    }

    /// A `buffer`, null read as empty (as ZooKeeper stores it).
    pub fn data(&mut self, what: &'static str) -> Result<Vec<u8>, JuteError> {
        Ok(self.buffer(what)?.unwrap_or_default().to_vec())
    }

    /// A `ustring`, null read as empty: kazoo writes an empty string as
    /// null (an `auth` ACL's id), and no field the client protocol reads
    /// means anything else by null.
    pub fn string(&mut self, what: &'static str) -> Result<String, JuteError> {
        let bytes = self.buffer(what)?.unwrap_or_default();
        std::str::from_utf8(bytes)
            .map(str::to_owned)
            .map_err(|_| JuteError::NotUtf8 { what })
    }

    /// A `vector`'s count, null read as empty; elements follow.
    pub fn count(&mut self, what: &'static str) -> Result<usize, JuteError> {
        Ok(self.length(what, ELEMENT_BYTES_MIN)?.unwrap_or(0))
    }

    /// A `vector<ustring>`, null read as empty.
    pub fn strings(&mut self, what: &'static str) -> Result<Vec<String>, JuteError> {
        let count = self.count(what)?;
        (0..count).map(|_| self.string(what)).collect()
    }
}

/// Appends jute values to a buffer.
pub trait Write {
    fn put_int(&mut self, value: i32);
    fn put_long(&mut self, value: i64);
    fn put_bool(&mut self, value: bool);
    /// A `buffer` or `ustring`: its length, then its bytes.
    fn put_bytes(&mut self, bytes: &[u8]);
    /// A `vector`'s count (the elements follow).
    fn put_count(&mut self, count: usize);

    fn put_string(&mut self, text: &str) {
        self.put_bytes(text.as_bytes());
    }
}

/// Lengths are bounded by the frame limit (far below 2³¹) before anything is
/// encoded; one past `i32::MAX` would be a bug, written as the maximum so a
/// peer's decoder refuses it rather than misreads it.
fn length_field(length: usize) -> i32 {
    i32::try_from(length).unwrap_or(i32::MAX)
}

impl Write for Vec<u8> {
    fn put_int(&mut self, value: i32) {
        self.extend_from_slice(&value.to_be_bytes());
    }

    fn put_long(&mut self, value: i64) {
        self.extend_from_slice(&value.to_be_bytes());
    }

    fn put_bool(&mut self, value: bool) {
        self.push(u8::from(value));
    }

    fn put_bytes(&mut self, bytes: &[u8]) {
        self.put_int(length_field(bytes.len()));
        self.extend_from_slice(bytes);
    }

    fn put_count(&mut self, count: usize) {
        self.put_int(length_field(count));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_read_back_as_written() {
        let mut out = Vec::new();
        out.put_int(-8);
        out.put_long(0x0102_0304_0506_0708);
        out.put_bool(true);
        out.put_string("/ünïcode");
        out.put_bytes(&[]);
        out.put_count(2);
        out.put_string("a");
        out.put_string("bc");
        out.put_int(-1); // a null buffer
        let mut reader = Reader::new(&out);
        assert_eq!(reader.int("xid"), Ok(-8));
        assert_eq!(reader.long("zxid"), Ok(0x0102_0304_0506_0708));
        assert_eq!(reader.bool("watch"), Ok(true));
        assert_eq!(reader.string("path").as_deref(), Ok("/ünïcode"));
        assert_eq!(reader.data("data"), Ok(Vec::new()));
        assert_eq!(
            reader.strings("children"),
            Ok(vec!["a".into(), "bc".into()])
        );
        assert_eq!(reader.buffer("data"), Ok(None));
        assert!(reader.is_empty());
    }

    #[test]
    fn forged_lengths_and_short_frames_are_errors() {
        let frame = |length: i32, tail: &[u8]| {
            let mut out = Vec::new();
            out.put_int(length);
            out.extend_from_slice(tail);
            out
        };
        let long = frame(i32::MAX, b"abc");
        assert_eq!(
            Reader::new(&long).buffer("data"),
            Err(JuteError::TooLong {
                what: "data",
                length: i32::MAX as usize,
                left: 3
            })
        );
        let negative = frame(-2, b"");
        assert!(matches!(
            Reader::new(&negative).string("path"),
            Err(JuteError::NegativeLength { length: -2, .. })
        ));
        let null = frame(-1, b"");
        assert_eq!(Reader::new(&null).string("id").as_deref(), Ok(""));
        // A count is checked against the smallest element: 3 strings need
        // at least 12 bytes.
        let count = frame(3, &[0; 11]);
        assert!(matches!(
            Reader::new(&count).strings("children"),
            Err(JuteError::TooLong { length: 3, .. })
        ));
        let bad_utf8 = frame(2, &[0xc3, 0x28]);
        assert_eq!(
            Reader::new(&bad_utf8).string("path"),
            Err(JuteError::NotUtf8 { what: "path" })
        );
        assert_eq!(
            Reader::new(&[7]).bool("watch"),
            Err(JuteError::NotBoolean {
                what: "watch",
                byte: 7
            })
        );
        assert_eq!(
            Reader::new(&[0, 0, 1]).int("xid"),
            Err(JuteError::Truncated { what: "xid" })
        );
        // Every prefix of a valid record is an error, none a panic.
        let mut record = Vec::new();
        record.put_string("/a/b");
        record.put_bytes(b"data");
        record.put_int(3);
        for len in 0..record.len() {
            let mut reader = Reader::new(&record[..len]);
            let read = reader
                .string("path")
                .and_then(|_| reader.data("data"))
                .and_then(|_| reader.int("version"));
            assert!(read.is_err(), "a {len}-byte prefix read whole");
        }
    }
}
