//! Durations on the command line (`500ms`, `5s`, `2m`, `1h`) and for people
//! (`850ms`, `12.4s`, `3m05s`, `2h10m`, `4d03h`).

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

/// `ms` milliseconds, short and with two significant units at most.
pub fn human(ms: u64) -> String {
    const SECOND: u64 = 1_000;
    const MINUTE: u64 = 60 * SECOND;
    const HOUR: u64 = 60 * MINUTE;
    const DAY: u64 = 24 * HOUR;
    match ms {
        0..SECOND => format!("{ms}ms"),
        SECOND..MINUTE => format!("{}.{}s", ms / SECOND, ms % SECOND / 100),
        MINUTE..HOUR => format!("{}m{:02}s", ms / MINUTE, ms % MINUTE / SECOND),
        HOUR..DAY => format!("{}h{:02}m", ms / HOUR, ms % HOUR / MINUTE),
        _ => format!("{}d{:02}h", ms / DAY, ms % DAY / HOUR),
    }
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

    // Proves durations for people pick the right units at each boundary.
    #[test]
    fn human_durations() {
        assert_eq!(human(0), "0ms");
        assert_eq!(human(999), "999ms");
        assert_eq!(human(1_000), "1.0s");
        assert_eq!(human(12_470), "12.4s");
        assert_eq!(human(185_000), "3m05s");
        assert_eq!(human(3_600_000), "1h00m");
        assert_eq!(human(7_860_000), "2h11m");
        assert_eq!(human(356_400_000), "4d03h");
    }
}
