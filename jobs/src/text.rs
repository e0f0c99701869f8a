//! How the `reel` commands print sizes and times for people. Sizes, ages and spans are
//! [`reel_queue::text`]'s (the worker's explanations use them too); clock times are local
//! here, in the zone of the machine running the command (`TZ`, else `/etc/localtime`).

pub use reel_queue::text::{ago_ms, human_bytes, span};

/// A unix time in milliseconds as a local clock time (`2026-12-05 19:03:12`), then how long
/// ago or how far ahead it is (`(3 min ago)`, `(in 4 min)`); `never` for 0.
pub fn when_ms(unix_ms: i64) -> String {
    if unix_ms == 0 {
        return "never".into();
    }
    let clock = jiff::Timestamp::from_millisecond(unix_ms)
        .map(|t| {
            t.to_zoned(jiff::tz::TimeZone::system())
                .strftime("%Y-%m-%d %H:%M:%S")
                .to_string()
        })
        .unwrap_or_else(|_| format!("{unix_ms} ms"));
    let now = reel_queue::db::now_ms();
    let rel = if unix_ms > now {
        format!(
            "in {}",
            span(std::time::Duration::from_millis((unix_ms - now) as u64))
        )
    } else {
        ago_ms(unix_ms)
    };
    format!("{clock} ({rel})")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_times_say_how_far() {
        let now = reel_queue::db::now_ms();
        assert!(
            when_ms(now - 180_000).ends_with("(3 min ago)"),
            "{}",
            when_ms(now - 180_000)
        );
        assert!(
            when_ms(now + 125_000).contains("(in 2 min)"),
            "{}",
            when_ms(now + 125_000)
        );
        assert_eq!(when_ms(0), "never");
        assert_eq!(when_ms(now).len(), "2026-12-05 19:03:12 (0 s ago)".len());
    }
}
