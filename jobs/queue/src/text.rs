//! How the commands print sizes and times for people: `1.5 GiB`, `3 min ago`.

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
    let ago = (reel_queue::db::now_ms() - unix_ms).max(0) / 1000;
    match ago {
        0..60 => format!("{ago} s ago"),
        60..3600 => format!("{} min ago", ago / 60),
        3600..86400 => format!("{} h ago", ago / 3600),
        _ => format!("{} d ago", ago / 86400),
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
        let now = reel_queue::db::now_ms();
        assert_eq!(ago_ms(now - 5_000), "5 s ago");
        assert_eq!(ago_ms(now - 180_000), "3 min ago");
        assert_eq!(ago_ms(now - 2 * 86_400_000), "2 d ago");
    }
}
