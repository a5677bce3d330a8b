//! The one reading of `Authorization: Bearer <credentials>` (RFC 9110
//! §11.4, RFC 6750 §2.1): the scheme in any case, then one or more spaces;
//! spaces around the credentials are not part of them. What the
//! credentials must look like is the caller's rule (a JWT, an admin token).

/// The credentials of a `Bearer` authorization, unchecked; `None` for
/// another scheme or none given.
pub fn bearer(value: &[u8]) -> Option<&[u8]> {
    let space = value.iter().position(|&b| b == b' ')?;
    let (scheme, rest) = value.split_at(space);
    if !scheme.eq_ignore_ascii_case(b"bearer") {
        return None;
    }
    let start = rest.iter().position(|&b| b != b' ')?;
    let end = rest.iter().rposition(|&b| b != b' ')? + 1;
    Some(&rest[start..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_credentials_after_the_scheme_in_any_case() {
        assert_eq!(bearer(b"Bearer abc"), Some(&b"abc"[..]));
        assert_eq!(bearer(b"bEaReR   abc  "), Some(&b"abc"[..]));
        assert_eq!(bearer(b"Bearer a b"), Some(&b"a b"[..]));
        for none in [
            &b""[..],
            b"Bearer",
            b"Bearer ",
            b"Bearer    ",
            b"Basic abc",
            b"Bearerabc",
            b"Bearer\tabc",
            b" Bearer abc",
        ] {
            assert_eq!(bearer(none), None, "{none:?}");
        }
    }
}
