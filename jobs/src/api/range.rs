//! The `Range` header of a download (RFC 9110 §14): one byte range, `bytes=A-B`, `bytes=A-` or
//! `bytes=-N`. Several ranges in one header are answered with the whole object, as the RFC
//! allows; a range that starts past the end is unsatisfiable (416).

use std::ops::Range;

/// What a `Range` header asks of an object of some size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wanted {
    /// The whole object (no header, another unit, several ranges, or one that cannot be read).
    Whole,
    /// These bytes.
    Part(Range<u64>),
    /// A range that lies past the end.
    Unsatisfiable,
}

/// Read `header` for an object of `size` bytes.
pub fn wanted(header: Option<&str>, size: u64) -> Wanted {
    let Some(spec) = header.and_then(|h| h.trim().strip_prefix("bytes=")) else {
        return Wanted::Whole;
    };
    if spec.contains(',') {
        return Wanted::Whole;
    }
    let Some((first, last)) = spec.trim().split_once('-') else {
        return Wanted::Whole;
    };
    // Digits only; a number too large for 64 bits is as good as the largest.
    let number = |s: &str| -> Option<Option<u64>> {
        let s = s.trim();
        if s.is_empty() {
            return Some(None);
        }
        s.bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| Some(s.parse().unwrap_or(u64::MAX)))
    };
    let (Some(first), Some(last)) = (number(first), number(last)) else {
        return Wanted::Whole;
    };
    match (first, last) {
        // bytes=-N: the last N bytes.
        (None, Some(n)) => {
            if n == 0 || size == 0 {
                return Wanted::Unsatisfiable;
            }
            Wanted::Part(size - n.min(size)..size)
        }
        (Some(a), Some(b)) if b < a => Wanted::Whole,
        (Some(a), _) if a >= size => Wanted::Unsatisfiable,
        (Some(a), Some(b)) => Wanted::Part(a..b.saturating_add(1).min(size)),
        (Some(a), None) => Wanted::Part(a..size),
        (None, None) => Wanted::Whole,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_of_a_hundred_bytes() {
        let w = |h: &str| wanted(Some(h), 100);
        assert_eq!(wanted(None, 100), Wanted::Whole);
        assert_eq!(w("bytes=0-9"), Wanted::Part(0..10));
        assert_eq!(w("bytes=90-"), Wanted::Part(90..100));
        assert_eq!(w("bytes=90-500"), Wanted::Part(90..100));
        assert_eq!(w("bytes=-10"), Wanted::Part(90..100));
        assert_eq!(w("bytes=-500"), Wanted::Part(0..100));
        assert_eq!(w("bytes=100-"), Wanted::Unsatisfiable);
        assert_eq!(w("bytes=-0"), Wanted::Unsatisfiable);
        assert_eq!(w("bytes=5-1"), Wanted::Whole);
        assert_eq!(w("bytes=0-1,5-6"), Wanted::Whole);
        assert_eq!(w("items=0-1"), Wanted::Whole);
        assert_eq!(w("bytes=x-1"), Wanted::Whole);
        assert_eq!(w("bytes=1-x"), Wanted::Whole);
        assert_eq!(w("bytes=99999999999999999999999-"), Wanted::Unsatisfiable);
        assert_eq!(w("bytes=0-99999999999999999999999"), Wanted::Part(0..100));
        assert_eq!(w("bytes=-99999999999999999999999"), Wanted::Part(0..100));
        assert_eq!(wanted(Some("bytes=0-"), 0), Wanted::Unsatisfiable);
        assert_eq!(wanted(Some("bytes=-1"), 0), Wanted::Unsatisfiable);
        assert_eq!(wanted(Some("bytes=5-2"), 1), Wanted::Whole);
        assert_eq!(wanted(Some("bytes=0-0"), 1), Wanted::Part(0..1));
    }
}
