//! An upstream response head, read as Pingora's client reads one and judged
//! by the shared rules (`crate::proxy::rules::response`).

use crate::proxy::rules::forward::Hop;
use crate::proxy::rules::response::{self, Body, Unread};
use crate::proxy::rules::Field;

/// The largest response head accepted, as in Pingora's client (1 MiB - 1).
pub const MAX_RESPONSE_HEAD: usize = 1_048_575;

/// A sound upstream response head.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    /// Bytes of the upstream's head.
    pub consumed: usize,
    pub interim: bool,
    pub body: Body,
    /// The upstream will not take another request on this connection.
    pub upstream_close: bool,
    /// `X-Waitgate-Release: true` (not relayed).
    pub release: bool,
    /// Status line and relayed headers as the client gets them, without
    /// the headers waitgate adds and without the final empty line.
    pub head: Vec<u8>,
}

/// A head that was refused: the rule that refused it, or `None` when it is
/// not HTTP/1.x (which Pingora's parser refuses on its own, naming no rule
/// of waitgate's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused(pub Option<&'static str>);

/// Parses a response head, if a whole one is in `buf`, as the rules read
/// and judge it, and writes the head the client gets.
pub fn parse(buf: &[u8], head_request: bool) -> Result<Option<Response>, Refused> {
    // The lane never carries a request that asked to switch protocols.
    response::read_head(buf, head_request, false, |parsed, consumed, shape| {
        let status = parsed.code.unwrap_or_default();
        let fields = || parsed.headers.iter().map(|h| (h.name.as_bytes(), h.value));
        let hop = Hop::new(fields(), false, false);
        let mut head = Vec::with_capacity(consumed + 64);
        head.extend_from_slice(b"HTTP/1.1 ");
        head.extend_from_slice(itoa(status).as_bytes());
        head.push(b' ');
        head.extend_from_slice(parsed.reason.unwrap_or("").as_bytes());
        head.extend_from_slice(b"\r\n");
        for (name, value) in fields() {
            if hop.relays(name) {
                push_field(&mut head, (name, &response::field_value(value)));
            }
        }
        Response {
            status,
            consumed,
            interim: shape.interim,
            body: shape.body,
            upstream_close: shape.upstream_close,
            release: shape.release,
            head,
        }
    })
    .map_err(|unread| match unread {
        Unread::NotHttp => Refused(None),
        Unread::Refused(refusal) => Refused(Some(refusal.message())),
    })
}

fn itoa(status: u16) -> String {
    status.to_string()
}

/// Appends one `name: value` header line.
pub fn push_field(head: &mut Vec<u8>, (name, value): Field<'_>) {
    head.extend_from_slice(name);
    head.extend_from_slice(b": ");
    head.extend_from_slice(value);
    head.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(head: &str, head_request: bool) -> Response {
        parse(head.as_bytes(), head_request).unwrap().unwrap()
    }

    #[test]
    fn the_body_ends_where_the_rules_say() {
        let r = parsed("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi", false);
        assert_eq!((r.status, r.body, r.consumed), (200, Body::Length(2), 38));
        assert_eq!(
            parsed("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n", true).body,
            Body::Empty
        );
        assert_eq!(
            parsed("HTTP/1.1 200 OK\r\n\r\n", false).body,
            Body::UntilClose
        );
        assert!(parse(b"HTTP/1.1 200 OK\r\nContent-Length: 2", false)
            .unwrap()
            .is_none());
    }

    #[test]
    fn refused_heads() {
        for head in [
            &b"HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked,\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n",
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n",
        ] {
            let refused = parse(head, false).unwrap_err();
            assert!(refused.0.is_some(), "{}", String::from_utf8_lossy(head));
        }
        // Not HTTP: no rule of ours to name.
        assert_eq!(
            parse(b"SSH-2.0-OpenSSH\r\n\r\n", false).unwrap_err(),
            Refused(None)
        );
        assert_eq!(
            parse(
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n",
                false
            )
            .unwrap_err(),
            Refused(Some("two different Content-Lengths"))
        );
    }

    #[test]
    fn heads_lose_connection_scoped_headers_and_speak_http11() {
        let r = parsed(
            "HTTP/1.0 200 Fine\r\nConnection: keep-alive, X-Hop\r\nKeep-Alive: timeout=5\r\nX-Hop: 1\r\nX-A: 1\r\nDate: then\r\nX-Request-Id: theirs\r\nContent-Length: 3\r\n\r\n",
            false,
        );
        assert!(!r.upstream_close);
        assert_eq!(
            String::from_utf8(r.head).unwrap(),
            "HTTP/1.1 200 Fine\r\nX-A: 1\r\nContent-Length: 3\r\n"
        );
        assert!(parsed("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", false).upstream_close);
    }

    #[test]
    fn a_head_with_many_headers_is_read_as_pingora_reads_it() {
        let mut head = String::from("HTTP/1.1 200 OK\r\n");
        for i in 0..200 {
            head.push_str(&format!("X-{i}: v\r\n"));
        }
        head.push_str("Content-Length: 0\r\n\r\n");
        assert_eq!(parsed(&head, false).body, Body::Length(0));
        let mut too_many = String::from("HTTP/1.1 200 OK\r\n");
        for i in 0..300 {
            too_many.push_str(&format!("X-{i}: v\r\n"));
        }
        too_many.push_str("\r\n");
        assert!(parse(too_many.as_bytes(), false).is_err());
    }
}
