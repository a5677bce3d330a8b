//! How an upstream response's body is framed, and which responses are
//! refused.
//!
//! A proxy that reads a response's length differently from the client, or
//! from the next response on the same connection, hands one user's bytes
//! to another. So the framing headers must say one thing only (RFC 9112
//! §6.3): `Content-Length` plain digits, repeated only with the same value;
//! `Transfer-Encoding` exactly `chunked`, once; never both. Anything else is
//! a 502 (or, once the reply has started, a closed connection). A `101`
//! that was not asked for is refused too: relaying it would turn the client
//! connection into a raw tunnel to the upstream that bypasses every check.

use super::name::Name;
use super::Field;

/// Where an upstream response's body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    /// No body: a response to HEAD, a 1xx, 204 or 304.
    Empty,
    /// Exactly this many bytes.
    Length(u64),
    /// Chunked (RFC 9112 §7.1): at the zero-size chunk and its trailers.
    Chunked,
    /// When the upstream closes the connection.
    UntilClose,
    /// After a 101 the connection is a tunnel, no longer HTTP.
    Tunnel,
}

/// A response head the rules accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// A 1xx other than 101: relayed, then the final response follows.
    pub interim: bool,
    pub body: Body,
    /// The upstream will not take another request on this connection.
    pub upstream_close: bool,
    /// `X-Waitgate-Release: true` on a final response: the backend is done
    /// with this user, whose active state ends and whose token is revoked
    /// (the header itself never reaches the client).
    pub release: bool,
}

/// Why a response head is refused (502).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The framing headers could be read more than one way.
    Ambiguous(&'static str),
    /// `101 Switching Protocols` to a request that did not ask to switch.
    UnaskedSwitch,
    /// A status code below 100 (`099`, `000`): three digits, but not a
    /// status any client can take.
    BadStatus,
}

impl Refusal {
    pub fn message(self) -> &'static str {
        match self {
            Refusal::Ambiguous(why) => why,
            Refusal::UnaskedSwitch => "the upstream switched protocols unasked",
            Refusal::BadStatus => "the status code is below 100",
        }
    }
}

/// How a reply's body is framed toward the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientBody {
    Empty,
    Length(u64),
    Chunked,
    /// Until waitgate closes the connection.
    UntilClose,
    Tunnel,
}

/// How the client gets a body the upstream framed as `upstream`:
/// a body that ends with the upstream's close goes chunked to an HTTP/1.1
/// client, so that its connection is kept (Pingora's proxy does so, and
/// the direct lane the same); to an HTTP/1.0 client, which cannot read
/// chunks (RFC 9112 §6.1) and behind a proxy of its age would read the
/// next response on the connection as part of this one, a body without a
/// length, chunked or not, goes until the close. The direct lane takes
/// HTTP/1.1 requests only; the Pingora proxy asks this of every response.
pub fn client_body(upstream: Body, client_http11: bool) -> ClientBody {
    match upstream {
        Body::Empty => ClientBody::Empty,
        Body::Length(n) => ClientBody::Length(n),
        Body::Tunnel => ClientBody::Tunnel,
        Body::Chunked | Body::UntilClose if client_http11 => ClientBody::Chunked,
        Body::Chunked | Body::UntilClose => ClientBody::UntilClose,
    }
}

/// The framing of a response head. `http11`: the upstream spoke HTTP/1.1
/// (1.0 closes unless it says keep-alive); `head_request`: the request was
/// HEAD; `switch_asked`: the request asked to switch protocols on a route
/// that allows it.
pub fn shape<'a>(
    status: u16,
    http11: bool,
    head_request: bool,
    switch_asked: bool,
    fields: impl Iterator<Item = Field<'a>>,
) -> Result<Shape, Refusal> {
    // The status line's code is three digits (RFC 9112 §4), which the
    // parser reads as a number: `099` is 99, which Pingora's client refuses
    // (a status is 100 to 999) and which no client could take relayed.
    if !(100..=999).contains(&status) {
        return Err(Refusal::BadStatus);
    }
    let mut length: Option<u64> = None;
    let mut encodings = 0;
    let mut chunked = true;
    let mut upstream_close = !http11;
    let mut release = false;
    for (name, value) in fields {
        match Name::of(name) {
            Name::ContentLength => {
                let n = crate::wire::length::content_length(value)
                    .bytes()
                    .ok_or(Refusal::Ambiguous("Content-Length is not plain digits"))?;
                if length.is_some_and(|l| l != n) {
                    return Err(Refusal::Ambiguous("two different Content-Lengths"));
                }
                length = Some(n);
            }
            Name::TransferEncoding => {
                encodings += 1;
                chunked &= value.trim_ascii().eq_ignore_ascii_case(b"chunked");
            }
            Name::Release => release |= value.trim_ascii().eq_ignore_ascii_case(b"true"),
            Name::Connection => {
                for token in super::elements(value) {
                    if token.eq_ignore_ascii_case(b"close") {
                        upstream_close = true;
                    } else if token.eq_ignore_ascii_case(b"keep-alive") && !http11 {
                        upstream_close = false;
                    }
                }
            }
            _ => {}
        }
    }
    if encodings > 0 && (!chunked || encodings > 1) {
        return Err(Refusal::Ambiguous(
            "Transfer-Encoding is not exactly chunked",
        ));
    }
    if encodings > 0 && length.is_some() {
        return Err(Refusal::Ambiguous(
            "both Content-Length and Transfer-Encoding",
        ));
    }
    // An HTTP/1.0 message with Transfer-Encoding: the connection closes
    // after it, whatever it says (RFC 9112 §6.1).
    if encodings > 0 && !http11 {
        upstream_close = true;
    }
    if status == 101 {
        return match switch_asked {
            true => Ok(Shape {
                interim: false,
                body: Body::Tunnel,
                upstream_close: true,
                release,
            }),
            false => Err(Refusal::UnaskedSwitch),
        };
    }
    let interim = (100..200).contains(&status);
    let body = if interim || head_request || status == 204 || status == 304 {
        Body::Empty
    } else if encodings > 0 {
        Body::Chunked
    } else if let Some(n) = length {
        Body::Length(n)
    } else {
        Body::UntilClose
    };
    Ok(Shape {
        interim,
        body,
        upstream_close,
        release: release && !interim,
    })
}

/// Parses a response head into `parsed` with the same leniency as
/// Pingora's client (spaces after a field name, obsolete line folds), so
/// that every reader of upstream heads reads one alike. `Some(consumed)`:
/// the head is whole.
pub fn parse_head<'h, 'b>(
    parsed: &mut httparse::Response<'h, 'b>,
    head: &'b [u8],
) -> Result<Option<usize>, httparse::Error> {
    let mut config = httparse::ParserConfig::default();
    config.allow_spaces_after_header_name_in_responses(true);
    config.allow_obsolete_multiline_headers_in_responses(true);
    Ok(match config.parse_response(parsed, head)? {
        httparse::Status::Complete(n) => Some(n),
        httparse::Status::Partial => None,
    })
}

/// Header slots tried first when a response head is read; a head with more
/// is read again with [`MAX_HEADERS`].
const FEW_HEADERS: usize = 64;

/// The most headers a response head may have: Pingora's client's limit,
/// so that every reader takes the same heads.
pub const MAX_HEADERS: usize = 256;

/// Why a response head was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unread {
    /// Not an HTTP/1.x head, or more than [`MAX_HEADERS`] headers: what
    /// Pingora's client refuses on its own.
    NotHttp,
    /// A head the rules refuse ([`shape`]).
    Refused(Refusal),
}

/// Reads a response head at the start of `buf`, as Pingora's client reads
/// one ([`parse_head`]), and judges it ([`shape`]): `Ok(None)` while the
/// head is not whole. `then` gets the parsed head, its length and its
/// shape. The one reader of response heads: the direct lane's and the
/// upstream watcher's (`super::super::watched`) both call it.
pub fn read_head<R>(
    buf: &[u8],
    head_request: bool,
    switch_asked: bool,
    then: impl FnOnce(&httparse::Response<'_, '_>, usize, Shape) -> R,
) -> Result<Option<R>, Unread> {
    let judge = |parsed: &httparse::Response<'_, '_>, consumed: usize| {
        let status = parsed.code.ok_or(Unread::NotHttp)?;
        let fields = parsed.headers.iter().map(|h| (h.name.as_bytes(), h.value));
        let shape = shape(
            status,
            parsed.version == Some(1),
            head_request,
            switch_asked,
            fields,
        )
        .map_err(Unread::Refused)?;
        Ok(Some(then(parsed, consumed, shape)))
    };
    let mut few = [httparse::EMPTY_HEADER; FEW_HEADERS];
    let mut parsed = httparse::Response::new(&mut few);
    match parse_head(&mut parsed, buf) {
        Ok(Some(consumed)) => judge(&parsed, consumed),
        Ok(None) => Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            let mut many = vec![httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut parsed = httparse::Response::new(&mut many);
            match parse_head(&mut parsed, buf) {
                Ok(Some(consumed)) => judge(&parsed, consumed),
                Ok(None) => Ok(None),
                Err(_) => Err(Unread::NotHttp),
            }
        }
        Err(_) => Err(Unread::NotHttp),
    }
}

/// A header value as relayed to the client. An obsolete line fold (RFC
/// 9112 §5.2) becomes one space, and a stray CR or NUL a space, before the
/// value goes on: clients would read a folded line in different ways. This
/// is Pingora's own normalisation (its client applies it to every response
/// header it parses), called here so that the lane relays the same bytes.
pub fn field_value(value: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    if value.iter().any(|&b| matches!(b, b'\r' | b'\n' | b'\0')) {
        let normal = pingora::http::header_value_from_raw(bytes::Bytes::copy_from_slice(value));
        std::borrow::Cow::Owned(normal.as_bytes().to_vec())
    } else {
        std::borrow::Cow::Borrowed(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(status: u16, head_request: bool, pairs: &[(&str, &str)]) -> Result<Shape, Refusal> {
        shape(
            status,
            true,
            head_request,
            false,
            pairs.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())),
        )
    }

    fn body(status: u16, head_request: bool, pairs: &[(&str, &str)]) -> Body {
        of(status, head_request, pairs).unwrap().body
    }

    #[test]
    fn bodies_end_where_the_headers_say() {
        assert_eq!(
            body(200, false, &[("Content-Length", "2")]),
            Body::Length(2)
        );
        assert_eq!(
            body(
                200,
                false,
                &[("content-length", "2"), ("Content-Length", "2")]
            ),
            Body::Length(2)
        );
        assert_eq!(
            body(200, false, &[("Transfer-Encoding", "Chunked")]),
            Body::Chunked
        );
        assert_eq!(body(200, false, &[]), Body::UntilClose);
        assert_eq!(body(200, true, &[("Content-Length", "9")]), Body::Empty);
        assert_eq!(body(204, false, &[]), Body::Empty);
        assert_eq!(body(304, false, &[("Content-Length", "9")]), Body::Empty);
        let early = of(103, false, &[("Link", "</a>")]).unwrap();
        assert!(early.interim);
        assert_eq!(early.body, Body::Empty);
    }

    #[test]
    fn ambiguous_framing_is_refused_even_where_no_body_may_be() {
        for (status, pairs) in [
            (200, &[("Content-Length", "+5")][..]),
            (200, &[("Content-Length", "-1")]),
            (200, &[("Content-Length", "5, 5")]),
            (200, &[("Content-Length", "0x10")]),
            (200, &[("Content-Length", "")]),
            (200, &[("Content-Length", "99999999999999999999")]),
            (200, &[("Content-Length", "9999999999999999999")]),
            (200, &[("Content-Length", "2"), ("Content-Length", "3")]),
            (200, &[("Transfer-Encoding", "chunked,")]),
            (200, &[("Transfer-Encoding", "gzip, chunked")]),
            (200, &[("Transfer-Encoding", "gzip")]),
            (
                200,
                &[
                    ("Transfer-Encoding", "chunked"),
                    ("Transfer-Encoding", "chunked"),
                ],
            ),
            (
                200,
                &[("Transfer-Encoding", "chunked"), ("Content-Length", "3")],
            ),
            (204, &[("Content-Length", "x")]),
        ] {
            assert!(
                matches!(of(status, false, pairs), Err(Refusal::Ambiguous(_))),
                "{status} {pairs:?}"
            );
        }
    }

    #[test]
    fn a_switch_is_relayed_only_when_asked_for() {
        assert_eq!(of(101, false, &[]), Err(Refusal::UnaskedSwitch));
        for status in [0, 1, 99] {
            assert_eq!(of(status, false, &[]), Err(Refusal::BadStatus), "{status}");
        }
        let asked = shape(101, true, false, true, std::iter::empty()).unwrap();
        assert_eq!(asked.body, Body::Tunnel);
    }

    #[test]
    fn a_folded_value_is_relayed_on_one_line() {
        assert_eq!(&*field_value(b"one\r\n two"), b"one two");
        assert_eq!(&*field_value(b"a\rb\0c"), b"a b c");
        assert!(matches!(
            field_value(b"plain"),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    #[test]
    fn who_closes() {
        let close = |http11, pairs: &[(&str, &str)]| {
            shape(
                200,
                http11,
                false,
                false,
                pairs.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())),
            )
            .unwrap()
            .upstream_close
        };
        assert!(!close(true, &[]));
        assert!(close(true, &[("Connection", "Close")]));
        assert!(close(false, &[]));
        assert!(!close(false, &[("Connection", "keep-alive")]));
    }
}
