//! How reel prints sizes and times for people: `1.5 GiB`, `3 min ago`, `in 4 min`. One place,
//! for the CLI, the API's messages and the worker's explanations.

/// `b` bytes in binary units, one decimal (`512 B`, `1.5 GiB`).
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// How long ago a unix time in milliseconds was (`42 s ago`, `3 min ago`, `2 h ago`, `5 d
/// ago`); `never` for 0, the stores' "not recorded".
pub fn ago_ms(unix_ms: i64) -> String {
    if unix_ms == 0 {
        return "never".into();
    }
    let ago = (crate::db::now_ms() - unix_ms).max(0) as u64;
    format!("{} ago", span(std::time::Duration::from_millis(ago)))
}

/// A span of time, coarsely (`42 s`, `3 min`, `2 h`, `5 d`): for ages and waits.
pub fn span(d: std::time::Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min", s / 60),
        3600..86400 => format!("{} h", s / 3600),
        _ => format!("{} d", s / 86400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_ages() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(3 << 29), "1.5 GiB");
        assert_eq!(ago_ms(0), "never");
        let now = crate::db::now_ms();
        assert_eq!(ago_ms(now - 5_000), "5 s ago");
        assert_eq!(ago_ms(now - 180_000), "3 min ago");
        assert_eq!(ago_ms(now - 2 * 86_400_000), "2 d ago");
        assert_eq!(span(std::time::Duration::from_secs(7200)), "2 h");
    }
}
