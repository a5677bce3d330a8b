//! `Content-Length`, read one way everywhere.

/// The largest `Content-Length` taken: `i64::MAX`, the largest Pingora's
/// client accepts.
pub const MAX_LENGTH: u64 = i64::MAX as u64;

/// A `Content-Length` value, read by the one grammar every reader of a
/// length in waitgate uses (the request and response rules, the direct
/// lane's reader, the upstream watcher, the queue API's body limit): ASCII
/// digits only, around optional whitespace (RFC 9110 §8.6). A sign (`+5`),
/// a list (`5, 5`), hex or nothing is no length at all, whatever a
/// lenient number parser would make of it: a reader that took `+5` as 5
/// and one that refused it would frame the same message two ways. Digits
/// past [`MAX_LENGTH`] are `Length::TooLarge`: a length, too large to count.
pub fn content_length(value: &[u8]) -> Length {
    let digits = value.trim_ascii();
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Length::Invalid;
    }
    let mut n: u64 = 0;
    for &d in digits {
        n = match n
            .checked_mul(10)
            .and_then(|n| n.checked_add(u64::from(d - b'0')))
        {
            Some(n) if n <= MAX_LENGTH => n,
            _ => return Length::TooLarge,
        };
    }
    Length::Bytes(n)
}

/// What a `Content-Length` value says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Length {
    Bytes(u64),
    /// Digits past [`MAX_LENGTH`]: a length, too large to count.
    TooLarge,
    /// No length at all.
    Invalid,
}

impl Length {
    /// The length, when it is one that can be counted.
    pub fn bytes(self) -> Option<u64> {
        match self {
            Length::Bytes(n) => Some(n),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_length_is_digits_only() {
        for (value, length) in [
            ("0", Length::Bytes(0)),
            ("0012", Length::Bytes(12)),
            (" 5 ", Length::Bytes(5)),
            ("9223372036854775807", Length::Bytes(MAX_LENGTH)),
            ("9223372036854775808", Length::TooLarge),
            ("99999999999999999999999", Length::TooLarge),
            ("+5", Length::Invalid),
            ("-1", Length::Invalid),
            ("5, 5", Length::Invalid),
            ("0x10", Length::Invalid),
            ("5 5", Length::Invalid),
            ("", Length::Invalid),
            ("\u{0660}", Length::Invalid),
        ] {
            assert_eq!(content_length(value.as_bytes()), length, "{value:?}");
        }
    }
}
