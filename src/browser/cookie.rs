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

/// Every `name=value` pair of one `Cookie` header value, in order.
///
/// Split on the raw bytes rather than with the `cookie` crate's parser,
/// which takes the whole header as one `&str`: a single byte that is not
/// UTF-8 in any cookie of the header (another application's on this host)
/// would lose every cookie, and with them the visitor's place. Here a pair
/// that is not UTF-8 is skipped alone.
pub fn pairs(value: &[u8]) -> impl Iterator<Item = (&str, &str)> {
    value.split(|&b| b == b';').filter_map(|pair| {
        let pair = pair.trim_ascii();
        let eq = pair.iter().position(|&b| b == b'=')?;
        let name = std::str::from_utf8(&pair[..eq]).ok()?.trim();
        let value = std::str::from_utf8(&pair[eq + 1..]).ok()?.trim();
        let value = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or(value);
        (!name.is_empty()).then_some((name, value))
    })
}

/// The values of every cookie called `name` in the request's `Cookie`
/// headers (a browser sends one header; HTTP/2 may split it into several),
/// in order. A site can hold two cookies of one name (set for another path
/// or a parent domain): callers take the first that checks out, not merely
/// the first.
pub fn find_all<'a, 'n>(
    cookie_headers: impl Iterator<Item = &'a [u8]> + 'n,
    name: &'n str,
) -> impl Iterator<Item = &'a str> + 'n
where
    'a: 'n,
{
    cookie_headers
        .flat_map(pairs)
        .filter(move |(n, _)| *n == name)
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
        // Only the digits waitgate writes: `u64::from_str` would also take
        // `+5` and `007`, which no cookie of ours holds.
        let canonical = !start.is_empty()
            && start.bytes().all(|b| b.is_ascii_digit())
            && (start == "0" || !start.starts_with('0'));
        if !canonical {
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

    fn find<'a>(headers: &[&'a [u8]], name: &str) -> Vec<&'a str> {
        find_all(headers.iter().copied(), name).collect()
    }

    #[test]
    fn cookies_are_found_across_headers_and_pairs() {
        let headers: Vec<&[u8]> = vec![b"a=1; waitgate-queue-q=x.0.bob", b"b=2;c=\"3\""];
        assert_eq!(find(&headers, "waitgate-queue-q"), ["x.0.bob"]);
        assert_eq!(find(&headers, "c"), ["3"]);
        assert!(find(&headers, "d").is_empty());
        // A pair that is not UTF-8 is skipped alone, in the same header.
        let odd: Vec<&[u8]> = vec![b"pref=M\xfcller; e=5; \xff=1; f"];
        assert_eq!(find(&odd, "e"), ["5"]);
        assert!(find(&odd, "pref").is_empty());
        // Every cookie of a name, in order.
        let two: Vec<&[u8]> = vec![b"n=bad; m=1", b"n=good"];
        assert_eq!(find(&two, "n"), ["bad", "good"]);
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
        assert_eq!(QueueCookie::parse("a.0.u").unwrap().start_rank, 0);
        for bad in [
            "",
            "abc",
            "abc.1",
            ".1.u",
            "a+b.1.u",
            "abc.x.u",
            "abc.-1.u",
            "abc.+1.u",
            "abc.01.u",
            "abc..u",
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
