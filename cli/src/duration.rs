//! Parsing of durations given on the command line: `500ms`, `5s`, `2m`, `1h`.

use std::time::Duration;

/// Parses `<number><unit>` with unit `ms`, `s`, `m` or `h`; the number is a
/// whole number and the unit is required.
pub fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("{text:?} has no unit (use ms, s, m or h)"))?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} does not start with a whole number"))?;
    let unit_ms: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return Err(format!("unknown unit {unit:?} (use ms, s, m or h)")),
    };
    let total_ms = number
        .checked_mul(unit_ms)
        .ok_or_else(|| format!("{text:?} is too long"))?;
    Ok(Duration::from_millis(total_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves every unit is understood and malformed text is refused.
    #[test]
    fn parses_units_and_refuses_garbage() {
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        assert!(parse("5").is_err());
        assert!(parse("s").is_err());
        assert!(parse("5x").is_err());
        assert!(parse("1.5s").is_err());
        assert!(parse("99999999999999999999h").is_err());
    }
}
