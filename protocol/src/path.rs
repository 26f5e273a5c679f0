//! Znode path rules, as ZooKeeper's.
//!
//! A path is absolute (`/` or `/a/b`), has no trailing slash, no empty, `.` or
//! `..` segment, and no control characters (U+0000–U+001F, U+007F–U+009F) or
//! the characters ZooKeeper also refuses: the private-use area U+E000–U+F8FF
//! and U+FFF0–U+FFFF. (ZooKeeper's U+D800–U+DFFF surrogates cannot occur in a
//! Rust string at all.)

/// The longest path accepted, in bytes. ZooKeeper has no such limit and so a
/// client can make the server hold arbitrarily long keys; we name one.
pub const PATH_BYTES_MAX: usize = 4096;

/// Why a path is not valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("path is empty")]
    Empty,
    #[error("path must start with '/'")]
    NotAbsolute,
    #[error("path must not end with '/'")]
    TrailingSlash,
    #[error("path has an empty segment at byte {0}")]
    EmptySegment(usize),
    #[error("path has a relative segment ('.' or '..')")]
    RelativeSegment,
    #[error("path has a forbidden character U+{0:04X}")]
    ForbiddenCharacter(u32),
    #[error("path is {0} bytes long; the limit is {PATH_BYTES_MAX}")]
    TooLong(usize),
}

/// Checks that `path` names a znode.
pub fn validate(path: &str) -> Result<(), PathError> {
    if path.is_empty() {
        return Err(PathError::Empty);
    }
    if path.len() > PATH_BYTES_MAX {
        return Err(PathError::TooLong(path.len()));
    }
    if !path.starts_with('/') {
        return Err(PathError::NotAbsolute);
    }
    if path == "/" {
        return Ok(());
    }
    if path.ends_with('/') {
        return Err(PathError::TrailingSlash);
    }
    let mut offset = 1;
    for segment in path[1..].split('/') {
        if segment.is_empty() {
            return Err(PathError::EmptySegment(offset));
        }
        if segment == "." || segment == ".." {
            return Err(PathError::RelativeSegment);
        }
        offset += segment.len() + 1;
    }
    if let Some(c) = path.chars().find(|&c| is_forbidden(c)) {
        return Err(PathError::ForbiddenCharacter(c as u32));
    }
    Ok(())
}

/// Checks the path a sequential create will extend with a 10-digit suffix:
/// it may end in `/` (the name is then only the suffix), as in ZooKeeper.
pub fn validate_sequential_prefix(path: &str) -> Result<(), PathError> {
    if path.len() > 1 && path.ends_with('/') {
        validate(&format!("{path}0"))
    } else {
        validate(path)
    }
}

fn is_forbidden(c: char) -> bool {
    matches!(c, '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' | '\u{e000}'..='\u{f8ff}' | '\u{fff0}'..='\u{ffff}')
}

/// The parent of a valid path other than `/`; `None` for `/`.
pub fn parent(path: &str) -> Option<&str> {
    if path == "/" {
        return None;
    }
    match path.rfind('/') {
        Some(0) => Some("/"),
        Some(i) => Some(&path[..i]),
        None => None,
    }
}

/// The last segment of a valid path (`""` for `/`).
pub fn name(path: &str) -> &str {
    match path.rfind('/') {
        Some(i) => &path[i + 1..],
        None => path,
    }
}

/// Joins a parent path and a child name.
pub fn join(parent: &str, name: &str) -> String {
    if parent == "/" {
        format!("/{name}")
    } else {
        format!("{parent}/{name}")
    }
}

/// The suffix a sequential create appends: the counter, zero-padded to 10
/// digits (wider only past 9 999 999 999; it never wraps).
pub fn sequence_suffix(counter: u64) -> String {
    format!("{counter:010}")
}

/// Parses the sequence number at the end of a sequential node's name.
pub fn parse_sequence(name: &str) -> Option<u64> {
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    if digits < 10 {
        return None;
    }
    name[name.len() - digits..].parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_zookeeper_paths() {
        for ok in ["/", "/a", "/a/b", "/a.b/..c", "/zk-é/ü", "/x/.hidden"] {
            assert_eq!(validate(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn refuses_what_zookeeper_refuses() {
        let cases = [
            ("", PathError::Empty),
            ("a", PathError::NotAbsolute),
            ("/a/", PathError::TrailingSlash),
            ("//a", PathError::EmptySegment(1)),
            ("/a//b", PathError::EmptySegment(3)),
            ("/a/./b", PathError::RelativeSegment),
            ("/..", PathError::RelativeSegment),
            ("/a\u{0}", PathError::ForbiddenCharacter(0)),
            ("/a\nb", PathError::ForbiddenCharacter(10)),
            ("/\u{fff5}", PathError::ForbiddenCharacter(0xfff5)),
            ("/\u{e000}", PathError::ForbiddenCharacter(0xe000)),
        ];
        for (path, want) in cases {
            assert_eq!(validate(path), Err(want), "{path:?}");
        }
        assert!(matches!(
            validate(&"/a".repeat(3000)),
            Err(PathError::TooLong(6000))
        ));
    }

    #[test]
    fn sequential_prefix_may_end_in_slash() {
        assert_eq!(validate_sequential_prefix("/locks/"), Ok(()));
        assert_eq!(validate_sequential_prefix("/"), Ok(()));
        assert!(validate_sequential_prefix("/locks//").is_err());
    }

    #[test]
    fn parent_name_join() {
        assert_eq!(parent("/"), None);
        assert_eq!(parent("/a"), Some("/"));
        assert_eq!(parent("/a/b/c"), Some("/a/b"));
        assert_eq!(name("/a/b"), "b");
        assert_eq!(join("/", "a"), "/a");
        assert_eq!(join("/a", "b"), "/a/b");
    }

    #[test]
    fn sequence_suffix_is_ten_digits_and_never_wraps() {
        assert_eq!(sequence_suffix(7), "0000000007");
        assert_eq!(sequence_suffix(12_345_678_901), "12345678901");
        assert_eq!(parse_sequence("lock-0000000042"), Some(42));
        assert_eq!(parse_sequence("x12345678901"), Some(12_345_678_901));
        assert_eq!(parse_sequence("lock-42"), None);
    }
}
