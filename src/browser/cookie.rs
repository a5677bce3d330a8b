//! The two cookies a browser carries, and reading them from a request.
//!
//! - `waitgate-queue-<queue>`: who the visitor is in that queue (the userId
//!   waitgate minted, or the login's, and the queueCredential), so that a
//!   reload or a second tab keeps the place without registering again;
//! - `waitgate-token-<queue>`: the bare `ACTIVE_USER` JWT, which protected
//!   routes accept as they accept `Authorization`.
//!
//! Both are HttpOnly (no script on the page can read them), `SameSite=Lax`
//! (a cross-site POST does not carry them), `Path=/`, and `Secure` unless
//! `cookies.secure: false`. Parsing and writing go through the `cookie`
//! crate.

use std::time::Duration;

use cookie::{Cookie, SameSite};

use crate::user::UserId;

/// The queue cookie's name for `queue`.
pub fn queue_cookie_name(queue: &str) -> String {
    format!("waitgate-queue-{queue}")
}

/// The token cookie's name for `queue`.
pub fn token_cookie_name(queue: &str) -> String {
    format!("waitgate-token-{queue}")
}

/// The prefix of every token cookie's name.
pub const TOKEN_COOKIE_PREFIX: &str = "waitgate-token-";

/// Every `name=value` pair of one `Cookie` header value, in order. Pairs
/// that do not parse are skipped.
pub fn pairs(value: &[u8]) -> impl Iterator<Item = (&str, &str)> {
    std::str::from_utf8(value)
        .into_iter()
        .flat_map(Cookie::split_parse)
        .filter_map(|c| c.ok())
        .filter_map(|c| Some((c.name_raw()?, c.value_raw()?)))
}

/// The value of the first cookie called `name` in the request's `Cookie`
/// headers (a browser sends one; HTTP/2 may split it into several).
pub fn find<'a>(cookie_headers: impl Iterator<Item = &'a [u8]>, name: &str) -> Option<&'a str> {
    cookie_headers
        .flat_map(pairs)
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v)
}

/// What the queue cookie holds: `<credential>.<startRank>.<userId>`. The
/// credential is base64url and the rank digits, so neither holds a `.`; the
/// userId, which may, comes last. `start_rank` is the place the visitor
/// joined at, for the page's progress bar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueCookie {
    pub credential: String,
    pub start_rank: u64,
    pub user: UserId,
}

impl QueueCookie {
    pub fn parse(value: &str) -> Option<QueueCookie> {
        let (credential, rest) = value.split_once('.')?;
        let (start, user) = rest.split_once('.')?;
        if credential.is_empty()
            || !credential
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return None;
        }
        Some(QueueCookie {
            credential: credential.to_string(),
            start_rank: start.parse().ok()?,
            user: UserId::parse(user)?,
        })
    }

    pub fn value(&self) -> String {
        format!("{}.{}.{}", self.credential, self.start_rank, self.user)
    }
}

/// How waitgate writes its cookies.
#[derive(Debug, Clone, Copy)]
pub struct CookieJar {
    pub secure: bool,
}

impl CookieJar {
    /// The `Set-Cookie` value for a cookie of waitgate's: HttpOnly,
    /// `SameSite=Lax`, `Path=/`, `Secure` unless turned off; kept for
    /// `max_age`, or for the browser session without one.
    pub fn set(&self, name: String, value: String, max_age: Option<Duration>) -> String {
        let mut c = Cookie::build((name, value))
            .http_only(true)
            .same_site(SameSite::Lax)
            .path("/")
            .secure(self.secure);
        if let Some(age) = max_age {
            c = c.max_age(cookie::time::Duration::seconds(age.as_secs() as i64));
        }
        c.build().to_string()
    }

    /// The `Set-Cookie` value that removes a cookie of waitgate's.
    pub fn remove(&self, name: String) -> String {
        self.set(name, String::new(), Some(Duration::ZERO))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_are_found_across_headers_and_pairs() {
        let headers: Vec<&[u8]> = vec![b"a=1; waitgate-queue-q=x.0.bob", b"b=2;c=3"];
        assert_eq!(
            find(headers.iter().copied(), "waitgate-queue-q"),
            Some("x.0.bob")
        );
        assert_eq!(find(headers.iter().copied(), "c"), Some("3"));
        assert_eq!(find(headers.iter().copied(), "d"), None);
        // Not UTF-8: skipped, not a failure.
        let odd: Vec<&[u8]> = vec![b"\xff\xfe=1", b"e=5"];
        assert_eq!(find(odd.iter().copied(), "e"), Some("5"));
    }

    #[test]
    fn the_queue_cookie_round_trips_and_refuses_anything_else() {
        let c = QueueCookie {
            credential: "AbC-_9".into(),
            start_rank: 41,
            user: UserId::parse("u.a:b@c").unwrap(),
        };
        assert_eq!(c.value(), "AbC-_9.41.u.a:b@c");
        assert_eq!(QueueCookie::parse(&c.value()), Some(c));
        for bad in [
            "",
            "abc",
            "abc.1",
            ".1.u",
            "a+b.1.u",
            "abc.x.u",
            "abc.-1.u",
            "abc.1.",
            "abc.1.a b",
        ] {
            assert_eq!(QueueCookie::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn set_cookie_carries_the_attributes() {
        let jar = CookieJar { secure: true };
        let v = jar.set("n".into(), "v".into(), Some(Duration::from_secs(60)));
        for part in [
            "n=v",
            "HttpOnly",
            "SameSite=Lax",
            "Path=/",
            "Secure",
            "Max-Age=60",
        ] {
            assert!(v.contains(part), "{v}");
        }
        let plain = CookieJar { secure: false }.set("n".into(), "v".into(), None);
        assert!(
            !plain.contains("Secure") && !plain.contains("Max-Age"),
            "{plain}"
        );
        assert!(jar.remove("n".into()).contains("Max-Age=0"));
    }
}
