//! Sending a browser to the waiting room, and back to where it was going.
//!
//! A browser that opens a `waiting-room: true` route without a valid token
//! is sent (303) to `/waiting-room/<queue>?return=<path>`; once admitted,
//! the page sends it to `return`. That parameter comes from the URL, so
//! anyone can write one: it is followed only when it is a path of this
//! site under a configured route, so that the waiting room can never be
//! used to send a visitor to another site (an open redirect).

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use crate::path;

/// Where the waiting-room pages are served.
pub const PAGE_PREFIX: &str = "/waiting-room/";

/// The page's script and styles, under [`PAGE_PREFIX`].
pub const ASSETS_PREFIX: &str = "/waiting-room/assets/";

/// What is left unescaped in a `return` value: the characters of a path and
/// query that mean the same escaped or not.
const RETURN_KEEP: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'/')
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Whether a request for `target` asks for a page, from its `Accept`
/// headers: a browser navigating says `text/html`; an API client does not,
/// and `text/html;q=0` says it is not acceptable (RFC 9110 §12.4.2).
pub fn wants_html<'a>(accept: impl Iterator<Item = &'a [u8]>) -> bool {
    accept.flat_map(|v| v.split(|&b| b == b',')).any(|item| {
        let mut parts = item.split(|&b| b == b';');
        let media = parts.next().unwrap_or(item);
        media.trim_ascii().eq_ignore_ascii_case(b"text/html") && !parts.any(is_q_zero)
    })
}

/// Whether a request is a navigation, from its `Sec-Fetch-Mode`: a
/// browser's `fetch()` or `XMLHttpRequest` (`cors`, `same-origin`,
/// `no-cors`) that asks for HTML (Turbo, htmx) gets the 401 an API client
/// gets, not a redirect to a page it cannot show; a client that sends no
/// such header is taken at its `Accept`.
pub fn navigates<'a>(mut mode: impl Iterator<Item = &'a [u8]>) -> bool {
    mode.all(|m| m.trim_ascii().eq_ignore_ascii_case(b"navigate"))
}

/// Whether a media range's parameter is a weight of zero (`q=0`, `q=0.000`).
fn is_q_zero(parameter: &[u8]) -> bool {
    let Some((name, value)) = parameter
        .iter()
        .position(|&b| b == b'=')
        .map(|at| (&parameter[..at], &parameter[at + 1..]))
    else {
        return false;
    };
    let value = value.trim_ascii();
    name.trim_ascii().eq_ignore_ascii_case(b"q")
        && value.first() == Some(&b'0')
        && value[1..]
            .strip_prefix(b".")
            .unwrap_or(&value[1..])
            .iter()
            .all(|&b| b == b'0')
}

/// The waiting room's URL for `queue`, coming back to `target` (the
/// request's path and query, already checked by the path rules).
pub fn location(queue: &str, target: &str) -> String {
    format!(
        "{PAGE_PREFIX}{queue}?return={}",
        utf8_percent_encode(target, RETURN_KEEP)
    )
}

/// Where to go once admitted: `wanted` (decoded from the query) when it is
/// a path of this site, with nothing a browser would read as another host
/// (`//`, `/\`, a scheme), that passes the path rules and is under a
/// configured route (`is_route`); `None` otherwise.
pub fn safe_return(wanted: Option<&str>, is_route: impl Fn(&str) -> bool) -> Option<String> {
    let wanted = wanted?;
    let starts_well = wanted.starts_with('/')
        && !wanted.starts_with("//")
        && !wanted.starts_with("/\\")
        && wanted.is_ascii();
    if !starts_well || path::classify(wanted.as_bytes()).is_err() {
        return None;
    }
    let route_path = wanted.split('?').next().unwrap_or(wanted);
    is_route(route_path).then(|| wanted.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn browsers_are_told_from_api_clients_by_accept() {
        let accept = |v: &'static [u8]| wants_html(std::iter::once(v));
        assert!(accept(b"text/html,application/xhtml+xml,*/*;q=0.8"));
        assert!(accept(b"TEXT/HTML; q=0.9"));
        assert!(!accept(b"application/json"));
        assert!(!accept(b"*/*"));
        assert!(!wants_html(std::iter::empty()));
        // A weight of zero: not acceptable.
        for refused in [
            &b"text/html;q=0"[..],
            b"text/html; Q=0.0",
            b"text/html;q=0.000, application/json",
            b"application/json, text/html ; q = 0",
        ] {
            assert!(!accept(refused), "{}", String::from_utf8_lossy(refused));
        }
        for taken in [
            &b"text/html;q=0.001"[..],
            b"text/html;q=0.1",
            b"text/html;level=1;q=1",
            b"text/html;q=0, text/html;level=1",
        ] {
            assert!(accept(taken), "{}", String::from_utf8_lossy(taken));
        }
    }

    #[test]
    fn the_return_path_is_escaped_into_the_location() {
        assert_eq!(
            location("baseball", "/tickets/seat?a=1&b=%20"),
            "/waiting-room/baseball?return=/tickets/seat%3Fa%3D1%26b%3D%2520"
        );
    }

    #[test]
    fn only_a_path_under_a_route_is_followed() {
        let routes = |p: &str| p == "/tickets" || p.starts_with("/tickets/");
        assert_eq!(
            safe_return(Some("/tickets/seat?x=1"), routes).as_deref(),
            Some("/tickets/seat?x=1")
        );
        for evil in [
            None,
            Some(""),
            Some("https://evil.example/tickets"),
            Some("//evil.example/tickets"),
            Some("/\\evil.example"),
            Some("/tickets/../admin"),
            Some("/ticketsx"),
            Some("/other"),
            Some("javascript:alert(1)"),
            Some("/tickets/%2e%2e/admin"),
            Some("/tickets/é"),
            Some(" /tickets"),
        ] {
            assert_eq!(safe_return(evil, routes), None, "{evil:?}");
        }
    }
}
