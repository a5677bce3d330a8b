//! Request framing that two HTTP parsers could read differently.
//!
//! Pingora's HTTP/1 parser handles the classic smuggling shapes itself
//! before waitgate sees the request: it refuses two different
//! `Content-Length`s (a bare 400), and when both `Content-Length` and
//! `Transfer-Encoding` are sent it drops `Content-Length` and closes the
//! connection after the reply (RFC 9112 §6.1, §6.3); the edge tests show no
//! second request reaches the upstream either way. This check refuses what
//! is left: repeated equal `Content-Length`s, a non-numeric one, and any
//! `Transfer-Encoding` other than a single `chunked`, which some upstreams
//! would read differently. A refused request is answered with 400 and its
//! connection closed, so nothing after it on that connection is read.

use http::header::{CONTENT_LENGTH, TRANSFER_ENCODING};
use http::HeaderMap;

pub fn check(headers: &HeaderMap) -> Result<(), &'static str> {
    let mut lengths = headers.get_all(CONTENT_LENGTH).iter();
    let length = lengths.next();
    if lengths.next().is_some() {
        return Err("The request has more than one Content-Length header.");
    }
    if let Some(length) = length {
        let digits = length.as_bytes();
        if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
            return Err("The Content-Length header is not a number.");
        }
    }
    let mut encodings = headers.get_all(TRANSFER_ENCODING).iter();
    if let Some(encoding) = encodings.next() {
        // Unreachable through Pingora 0.9, which drops Content-Length in
        // this case (see above); kept so that the rule does not depend on
        // the parser in front.
        if length.is_some() {
            return Err("The request has both Content-Length and Transfer-Encoding.");
        }
        let chunked_alone = encoding
            .to_str()
            .is_ok_and(|v| v.trim().eq_ignore_ascii_case("chunked"));
        if !chunked_alone || encodings.next().is_some() {
            return Err("Transfer-Encoding must be chunked, alone.");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (n, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(n.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    #[test]
    fn plain_framing_passes() {
        assert!(check(&headers(&[])).is_ok());
        assert!(check(&headers(&[("content-length", "12")])).is_ok());
        assert!(check(&headers(&[("transfer-encoding", "chunked")])).is_ok());
        assert!(check(&headers(&[("transfer-encoding", "Chunked ")])).is_ok());
    }

    #[test]
    fn ambiguous_framing_is_refused() {
        for case in [
            &[("content-length", "5"), ("content-length", "5")][..],
            &[("content-length", "5"), ("content-length", "6")],
            &[("content-length", "5, 5")],
            &[("content-length", "-1")],
            &[("content-length", "5"), ("transfer-encoding", "chunked")],
            &[("transfer-encoding", "gzip, chunked")],
            &[
                ("transfer-encoding", "chunked"),
                ("transfer-encoding", "chunked"),
            ],
            &[("transfer-encoding", "xchunked")],
        ] {
            assert!(check(&headers(case)).is_err(), "{case:?}");
        }
    }
}
