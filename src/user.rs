//! The user id rule, in one place: what register, rank, dropout and token
//! exchange accept, and what the edge accepts as a token's `sub`.

/// The longest user id.
pub const MAX_USER_ID_BYTES: usize = 128;

/// A user id that passed the rule: 1 to 128 characters of
/// `A-Z a-z 0-9 . _ : @ -`. Parsed once, where it enters; what holds one
/// need not check it again.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UserId(String);

impl UserId {
    /// `Some` when `text` follows the rule.
    pub fn parse(text: impl Into<String>) -> Option<UserId> {
        let text = text.into();
        is_valid(&text).then_some(UserId(text))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

impl std::fmt::Display for UserId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for UserId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// The rule itself, for callers that only need the answer.
pub fn is_valid(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= MAX_USER_ID_BYTES
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'@' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_ids_follow_the_rule() {
        for ok in ["user_10", "a", "x.y:z@w-v", &"u".repeat(128)] {
            assert_eq!(
                UserId::parse(ok).map(|u| u.into_string()).as_deref(),
                Some(ok)
            );
        }
        for bad in [
            "",
            " ",
            "a b",
            "a/b",
            "ü",
            "a\0",
            "{q}",
            "%41",
            &"u".repeat(129),
        ] {
            assert!(UserId::parse(bad).is_none(), "{bad:?}");
        }
    }
}
