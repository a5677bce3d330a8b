//! What a request head must look like before it is routed.
//!
//! Pingora's HTTP/1 parser handles the classic smuggling shapes itself
//! before waitgate sees the request: it refuses two different
//! `Content-Length`s (a bare 400), and when both `Content-Length` and
//! `Transfer-Encoding` are sent it drops `Content-Length` and closes the
//! connection after the reply (RFC 9112 §6.1, §6.3). [`check`] refuses what
//! is left, whichever parser read the head: repeated `Content-Length`s, a
//! non-numeric one, any `Transfer-Encoding` other than a single `chunked`
//! (which some upstreams would read differently), an HTTP/1.1 request
//! without exactly one `Host` (RFC 9112 §3.2) or with userinfo in it, and a
//! `Connection` header that names ten or more options, a malformed one, or
//! one of the headers a proxy chain relies on (`Host`, `X-Forwarded-*`) or
//! that carries the token (`Authorization`, `Cookie`).
//! The last two are Pingora's own upstream-request rules; checking them here
//! gives both HTTP paths the same answer. A refused request is answered with
//! 400 and its connection closed, so nothing after it on that connection is
//! read.

use super::name::Name;
use super::Field;
use crate::error::ApiError;
use crate::path::PathReject;
use crate::wire::length::Length;

/// Checks the request line of a raw head: `method SP target SP version`,
/// single spaces, and a target of visible ASCII without `"`, `<` or `>`
/// (RFC 9112 §3). Pingora's parser does not refuse a line that is not: it
/// percent-encodes what lies between the method and the version and parses
/// again, so `GET /a/..  HTTP/1.1` (two spaces) was checked and forwarded
/// as `/a/..%20`, a `..` segment to a backend that trims what it decodes.
/// The connection loop applies this to every head before either HTTP path
/// reads it.
pub fn check_line(head: &[u8]) -> Result<(), PathReject> {
    let line = request_line(head);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut parts = line.split(|&b| b == b' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(PathReject::Unencoded);
    };
    if method.is_empty() || target.is_empty() || !version.starts_with(b"HTTP/") {
        return Err(PathReject::Unencoded);
    }
    match target
        .iter()
        .find(|&&b| !(0x21..0x7f).contains(&b) || b"\"<>".contains(&b))
    {
        None => Ok(()),
        Some(&b) if !(0x21..0x7f).contains(&b) => Err(PathReject::ControlByte),
        Some(_) => Err(PathReject::Unencoded),
    }
}

/// What the checks learned of a sound request head.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Shape {
    /// It asks to switch protocols (an `Upgrade` header): only routes with
    /// `websocket: true` take such requests.
    pub upgrade: bool,
    /// How its body is framed.
    pub body: Body,
}

/// How a sound request's body is framed (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Body {
    /// No body: the request ends with its head.
    #[default]
    None,
    /// `Content-Length` bytes; a length too large to count is `usize::MAX`
    /// (Pingora's parser refuses it before any rule sees it).
    Length(usize),
    /// A chunked body.
    Chunked,
}

/// The request line of a raw head, without its LF (a CR before it stays).
/// A parser skips empty lines before it (RFC 9112 §2.2).
pub fn request_line(head: &[u8]) -> &[u8] {
    let start = head
        .iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .unwrap_or(head.len());
    head[start..].split(|&b| b == b'\n').next().unwrap_or(&[])
}

/// Checks the heads Pingora's HTTP/1 reader refuses on its own, with a bare
/// 400 and before waitgate's code sees the request: a head the parser
/// cannot read (a space before a colon, a folded line, a NUL, `HTTP/1.2`),
/// more than one `Host`, `Content-Length`s that differ, and a
/// `Transfer-Encoding` on HTTP/1.0 or not exactly `chunked`. The connection
/// loop checks a request here before it lends it to Pingora, so that these
/// get waitgate's JSON 400 with a request id, as on the direct lane. The
/// parse is Pingora's (httparse's defaults, as many header slots).
pub fn check_readable(head: &[u8]) -> Result<(), ApiError> {
    let mut slots = vec![httparse::EMPTY_HEADER; 256];
    let mut request = httparse::Request::new(&mut slots);
    match request.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Ok(()),
        Err(_) => return Err(bad("The request head is malformed.")),
    }
    let http11 = request.version == Some(1);
    let fields = || request.headers.iter().map(|h| (h.name.as_bytes(), h.value));
    let named = |wanted: Name| fields().filter(move |(name, _)| Name::of(name) == wanted);
    let mut lengths = named(Name::ContentLength).map(|(_, v)| v.trim_ascii());
    let first = lengths.next();
    let differ = lengths.any(|l| Some(l) != first);
    let encoded = named(Name::TransferEncoding).next().is_some();
    if named(Name::Host).count() > 1 || differ || encoded {
        check(http11, fields())?;
    }
    if encoded && !http11 {
        return Err(bad("An HTTP/1.0 request may not carry Transfer-Encoding."));
    }
    Ok(())
}

/// Checks a request head's framing and `Host`. `http11`: the request says
/// HTTP/1.1 (an HTTP/1.0 request may omit `Host`).
pub fn check<'a>(http11: bool, fields: impl Iterator<Item = Field<'a>>) -> Result<Shape, ApiError> {
    let mut lengths = 0;
    let mut encodings = 0;
    let mut chunked = true;
    let mut hosts = 0;
    let mut options = 0;
    let mut shape = Shape::default();
    for (name, value) in fields {
        match Name::of(name) {
            Name::ContentLength => {
                lengths += 1;
                let length = match crate::wire::length::content_length(value) {
                    Length::Invalid => {
                        return Err(bad("The Content-Length header is not a number."))
                    }
                    length => length.bytes().and_then(|n| usize::try_from(n).ok()),
                };
                shape.body = Body::Length(length.unwrap_or(usize::MAX));
            }
            Name::TransferEncoding => {
                encodings += 1;
                chunked &= value.trim_ascii().eq_ignore_ascii_case(b"chunked");
            }
            Name::Host => {
                hosts += 1;
                if value.contains(&b'@') {
                    return Err(bad("The Host header must not carry userinfo."));
                }
                if !host_is_sound(value.trim_ascii()) {
                    return Err(bad("The Host header is not a host and port."));
                }
            }
            Name::Connection => {
                for option in super::elements(value) {
                    options += 1;
                    if options >= MAX_CONNECTION_OPTIONS {
                        return Err(bad("The Connection header names too many options."));
                    }
                    if !option.iter().all(|&b| is_tchar(b)) {
                        return Err(bad("The Connection header names a malformed option."));
                    }
                    if PROTECTED
                        .iter()
                        .any(|p| option.eq_ignore_ascii_case(p.as_bytes()))
                    {
                        return Err(bad("The Connection header may not name that header."));
                    }
                }
            }
            // A server ignores `Upgrade` on an HTTP/1.0 request (RFC 9110
            // §7.8): such a request is forwarded as a plain one, without it.
            Name::Upgrade => shape.upgrade = http11,
            _ => {}
        }
    }
    if lengths > 1 {
        return Err(bad("The request has more than one Content-Length header."));
    }
    if encodings > 0 {
        // Unreachable through Pingora 0.9, which drops Content-Length in
        // this case (see above); kept so that the rule does not depend on
        // the parser in front.
        if lengths > 0 {
            return Err(bad(
                "The request has both Content-Length and Transfer-Encoding.",
            ));
        }
        if !chunked || encodings > 1 {
            return Err(bad("Transfer-Encoding must be chunked, alone."));
        }
        shape.body = Body::Chunked;
    }
    if hosts > 1 || (http11 && hosts == 0) {
        return Err(bad(
            "An HTTP/1.1 request must carry exactly one Host header.",
        ));
    }
    Ok(shape)
}

/// Whether a `Host` value is `host [":" port]` (RFC 9110 §7.2, RFC 3986
/// §3.2.2): an IP literal in brackets, or a name of unreserved characters,
/// percent escapes and sub-delimiters; a port of digits. Empty is allowed
/// (RFC 9112 §3.2). Anything else (a space, a `/`, an open bracket) names
/// no host, and a backend would read it its own way.
fn host_is_sound(value: &[u8]) -> bool {
    let (host, rest) = match value.strip_prefix(b"[") {
        Some(literal) => {
            let Some(end) = literal.iter().position(|&b| b == b']') else {
                return false;
            };
            let address = &literal[..end];
            if address.is_empty()
                || !address
                    .iter()
                    .all(|&b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
            {
                return false;
            }
            (&[][..], &literal[end + 1..])
        }
        None => match value.iter().position(|&b| b == b':') {
            Some(colon) => (&value[..colon], &value[colon..]),
            None => (value, &[][..]),
        },
    };
    let name_ok = host.iter().enumerate().all(|(i, &b)| {
        b.is_ascii_alphanumeric()
            || b"-._~!$&'()*+,;=".contains(&b)
            || (b == b'%'
                && host
                    .get(i + 1..i + 3)
                    .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)))
            || (i >= 1 && host[i - 1] == b'%' && b.is_ascii_hexdigit())
            || (i >= 2 && host[i - 2] == b'%' && b.is_ascii_hexdigit())
    });
    let port_ok = match rest.strip_prefix(b":") {
        Some(port) => port.iter().all(u8::is_ascii_digit),
        None => rest.is_empty(),
    };
    name_ok && port_ok
}

/// Options a `Connection` header may name, at most (less one), as Pingora.
const MAX_CONNECTION_OPTIONS: usize = 10;

/// Headers a client may not make a proxy drop by naming them in
/// `Connection`: those a proxy chain relies on (Pingora's own list), and
/// those that carry the token the edge checked, which the backend may
/// check again (a request that passed with its token must not reach the
/// backend without it).
const PROTECTED: [&str; 6] = [
    "host",
    "x-forwarded-for",
    "x-forwarded-host",
    "x-forwarded-proto",
    "authorization",
    "cookie",
];

/// A `tchar` of RFC 9110 §5.6.2: what a header name (a token) is made of.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn bad(message: &'static str) -> ApiError {
    ApiError::BadRequest {
        status: 400,
        message: std::borrow::Cow::Borrowed(message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_line_reads_one_way_only() {
        for sound in [
            "GET /a HTTP/1.1\r\n",
            "\r\nGET /a?b=c%20d HTTP/1.0\r\nHost: x\r\n\r\n",
            "GET /a HTTP/1.1\nHost: x\n\n",
            "OPTIONS * HTTP/1.1\r\n",
        ] {
            assert_eq!(check_line(sound.as_bytes()), Ok(()), "{sound:?}");
        }
        for (line, why) in [
            ("GET /a/..  HTTP/1.1\r\n", PathReject::Unencoded),
            ("GET /a b HTTP/1.1\r\n", PathReject::Unencoded),
            ("GET  /a HTTP/1.1\r\n", PathReject::Unencoded),
            ("GET /a HTTP/1.1 \r\n", PathReject::Unencoded),
            ("GET /a\r\n", PathReject::Unencoded),
            ("GET /a x/1.1\r\n", PathReject::Unencoded),
            ("GET /a\"b HTTP/1.1\r\n", PathReject::Unencoded),
            ("GET /a<b HTTP/1.1\r\n", PathReject::Unencoded),
            ("GET /a>b HTTP/1.1\r\n", PathReject::Unencoded),
            ("GET /a\tb HTTP/1.1\r\n", PathReject::ControlByte),
            ("GET /a\x7fb HTTP/1.1\r\n", PathReject::ControlByte),
            ("GET /\u{ac00} HTTP/1.1\r\n", PathReject::ControlByte),
        ] {
            assert_eq!(check_line(line.as_bytes()), Err(why), "{line:?}");
        }
    }

    fn check_pairs(http11: bool, pairs: &[(&str, &str)]) -> Result<Shape, u16> {
        check(
            http11,
            pairs.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())),
        )
        .map_err(|r| r.status())
    }

    const HOST: (&str, &str) = ("Host", "tickets");

    #[test]
    fn plain_framing_passes() {
        assert!(check_pairs(true, &[HOST]).is_ok());
        assert!(check_pairs(true, &[HOST, ("content-length", "12")]).is_ok());
        assert!(check_pairs(true, &[HOST, ("transfer-encoding", "chunked")]).is_ok());
        assert!(check_pairs(true, &[HOST, ("Transfer-Encoding", "Chunked ")]).is_ok());
    }

    #[test]
    fn the_body_is_framed_as_the_head_says() {
        let body = |pairs: &[(&str, &str)]| {
            let mut fields = vec![HOST];
            fields.extend_from_slice(pairs);
            check_pairs(true, &fields).unwrap().body
        };
        assert_eq!(body(&[]), Body::None);
        assert_eq!(body(&[("Content-Length", "0012")]), Body::Length(12));
        assert_eq!(
            body(&[("Content-Length", "99999999999999999999")]),
            Body::Length(usize::MAX)
        );
        assert_eq!(body(&[("Transfer-Encoding", "chunked")]), Body::Chunked);
    }

    #[test]
    fn ambiguous_framing_is_refused() {
        for case in [
            &[("content-length", "5"), ("content-length", "5")][..],
            &[("content-length", "5"), ("content-length", "6")],
            &[("content-length", "5, 5")],
            &[("content-length", "-1")],
            &[("content-length", "+1")],
            &[("content-length", "5"), ("transfer-encoding", "chunked")],
            &[("transfer-encoding", "gzip, chunked")],
            &[("transfer-encoding", "chunked,")],
            &[
                ("transfer-encoding", "chunked"),
                ("transfer-encoding", "chunked"),
            ],
            &[("transfer-encoding", "xchunked")],
        ] {
            let mut fields = vec![HOST];
            fields.extend_from_slice(case);
            assert_eq!(check_pairs(true, &fields), Err(400), "{case:?}");
        }
    }

    #[test]
    fn http11_needs_exactly_one_host() {
        assert_eq!(check_pairs(true, &[]), Err(400));
        assert_eq!(check_pairs(true, &[HOST, ("HOST", "other")]), Err(400));
        assert_eq!(check_pairs(false, &[HOST, HOST]), Err(400));
        assert!(check_pairs(false, &[]).is_ok());
        assert!(check_pairs(false, &[HOST]).is_ok());
    }

    #[test]
    fn heads_pingora_refuses_alone_are_refused_here() {
        for head in [
            "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
            "GET / HTTP/1.1\r\nHost : a\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n c\r\n\r\n",
            "GET / HTTP/1.2\r\nHost: a\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
        ] {
            let refused = check_readable(head.as_bytes()).map_err(|e| e.status());
            assert_eq!(refused, Err(400), "{head:?}");
        }
        for head in [
            "GET / HTTP/1.1\r\nHost: a\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
            "GET / HTTP/1.0\r\n\r\n",
        ] {
            assert!(check_readable(head.as_bytes()).is_ok(), "{head:?}");
        }
    }

    #[test]
    fn a_host_is_a_host_and_a_port() {
        for sound in [
            "tickets",
            "tickets.example:8080",
            "127.0.0.1",
            "[::1]",
            "[::1]:443",
            "xn--9n2bp8q.example",
            "a%2Db",
            "",
        ] {
            assert!(check_pairs(true, &[("Host", sound)]).is_ok(), "{sound:?}");
        }
        for bad in [
            "a b", "t/x", "[::1", "[]", "[::1]x", "a:b:c", "a:8o", "a%zz", "t\\x",
        ] {
            assert_eq!(check_pairs(true, &[("Host", bad)]), Err(400), "{bad:?}");
        }
    }

    #[test]
    fn host_with_userinfo_is_refused() {
        assert_eq!(
            check_pairs(true, &[("Host", "victim@evil.example")]),
            Err(400)
        );
    }

    #[test]
    fn connection_options_follow_pingoras_rules() {
        let many = ["keep-alive"; 10].join(", ");
        assert_eq!(check_pairs(true, &[HOST, ("Connection", &many)]), Err(400));
        let nine = ["keep-alive"; 9].join(", ");
        assert!(check_pairs(true, &[HOST, ("Connection", &nine)]).is_ok());
        for bad in [
            "\"x-a\"",
            ":authority",
            "Host",
            "X-Forwarded-For",
            "x-forwarded-host",
            "Authorization",
            "close, cookie",
        ] {
            assert_eq!(
                check_pairs(true, &[HOST, ("Connection", bad)]),
                Err(400),
                "{bad}"
            );
        }
        assert!(check_pairs(true, &[HOST, ("Connection", "close, X-Secret")]).is_ok());
    }

    #[test]
    fn an_upgrade_header_is_noticed_in_any_case() {
        assert!(
            check_pairs(true, &[HOST, ("UPGRADE", "websocket")])
                .unwrap()
                .upgrade
        );
        assert!(
            !check_pairs(true, &[HOST, ("connection", "upgrade")])
                .unwrap()
                .upgrade
        );
    }
}
