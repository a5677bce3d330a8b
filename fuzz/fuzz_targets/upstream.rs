//! Upstream bytes, as the direct lane reads them (a response head, then a
//! chunked body) and as the Pingora path's watched connections follow them
//! (`waitgate::proxy::watched::Exchange`). Upstreams are input too: whatever
//! they send, the lane must not panic, must never hand on a head with a
//! line break inside a field or a connection-scoped header, must find a
//! chunked body's end in the same place however the bytes are split across
//! reads, and must write the body on in well-formed chunks of its own. A
//! watched exchange must not panic, must reach the same verdict however
//! the response is split, and may refuse only a head the lane refuses too.
//! Whatever the head, an HTTP/1.0 client is never given a chunked body, and
//! an HTTP/1.1 one a body it can tell the end of without the close.
#![no_main]

use libfuzzer_sys::fuzz_target;
use waitgate::proxy::rules::chunked::ChunkedEnd;
use waitgate::proxy::rules::response::{client_body, Body, ClientBody};
use waitgate::proxy::lane::response::parse;
use waitgate::proxy::watched::Exchange;

/// Follows a GET or HEAD and then `response`, cut at `cut`: whether the
/// head was refused, and whether the socket could be kept.
fn watch(head_request: bool, response: &[u8], cut: usize) -> (bool, bool) {
    let mut exchange = Exchange::default();
    let method = if head_request { "HEAD" } else { "GET" };
    exchange.wrote(format!("{method} / HTTP/1.1\r\nHost: u\r\n\r\n").as_bytes());
    let refused = exchange.read(&response[..cut]).is_err() || exchange.read(&response[cut..]).is_err();
    (refused, !refused && exchange.ended_exactly())
}

/// Whether the lane refuses a head of `bytes`, reading heads as its relay
/// does: interim (1xx) ones, then the final one.
fn lane_refuses(mut bytes: &[u8], head_request: bool) -> bool {
    loop {
        match parse(bytes, head_request) {
            Err(_) => return true,
            Ok(Some(response)) if response.interim => bytes = &bytes[response.consumed..],
            Ok(_) => return false,
        }
    }
}

/// Scans `body` cut at `cut`: where it ends (if it does) and the re-framed
/// bytes written on; `None` if it is refused.
fn scan_split(body: &[u8], cut: usize) -> Option<(Option<usize>, Vec<u8>)> {
    let mut scanner = ChunkedEnd::default();
    let mut out = Vec::new();
    if let Some(end) = scanner.feed(&body[..cut], &mut out).ok()? {
        assert!(end <= cut);
        return Some((Some(end), out));
    }
    let rest = &body[cut..];
    let end = scanner.feed(rest, &mut out).ok()?;
    if let Some(end) = end {
        assert!(end <= rest.len());
    }
    Some((end.map(|e| cut + e), out))
}

/// The data of a re-framed body: it must be strictly well-formed.
fn decode(mut out: &[u8]) -> Vec<u8> {
    let mut data = Vec::new();
    while !out.is_empty() {
        let line = out
            .windows(2)
            .position(|w| w == b"\r\n")
            .expect("size line");
        let size_text = std::str::from_utf8(&out[..line]).expect("ASCII size");
        let size = usize::from_str_radix(size_text, 16).expect("hex size, no extension");
        out = &out[line + 2..];
        if size == 0 {
            assert_eq!(out, b"\r\n", "the body ends with one empty line");
            break;
        }
        data.extend_from_slice(&out[..size]);
        assert_eq!(&out[size..size + 2], b"\r\n");
        out = &out[size + 2..];
    }
    data
}

fuzz_target!(|data: &[u8]| {
    let Some((&control, bytes)) = data.split_first() else {
        return;
    };
    let head_request = control & 1 == 1;
    if let Ok(Some(response)) = parse(bytes, head_request) {
        assert!(response.consumed <= bytes.len());
        // The body toward each kind of client.
        let old = client_body(response.body, false);
        let new = client_body(response.body, true);
        assert_ne!(old, ClientBody::Chunked, "{:?} to HTTP/1.0", response.body);
        assert_ne!(new, ClientBody::UntilClose, "{:?} to HTTP/1.1", response.body);
        if let Body::Length(n) = response.body {
            assert_eq!((old, new), (ClientBody::Length(n), ClientBody::Length(n)));
        }
        let head = String::from_utf8_lossy(&response.head).into_owned();
        assert!(head.starts_with("HTTP/1.1 "), "{head:?}");
        assert!(head.ends_with("\r\n"), "{head:?}");
        for line in head.trim_end_matches("\r\n").split("\r\n").skip(1) {
            assert!(!line.contains('\r') && !line.contains('\n'), "{line:?}");
            let name = line
                .split(':')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase();
            assert!(
                ![
                    "connection",
                    "keep-alive",
                    "date",
                    "x-request-id",
                    "upgrade"
                ]
                .contains(&name.as_str()),
                "{line:?}"
            );
        }
    }
    // The watched exchange: one verdict whatever the split, and a refusal
    // only where the lane refuses the head too.
    let cut = usize::from(control >> 1) % (bytes.len() + 1);
    let whole = watch(head_request, bytes, bytes.len());
    assert_eq!(whole, watch(head_request, bytes, cut), "cut at {cut}");
    if whole.0 {
        assert!(lane_refuses(bytes, head_request), "the lane accepts a head the watcher refuses");
    }
    // The chunked scanner: the same verdict and the same data whatever the
    // split, and what it writes on is well-formed chunked encoding with no
    // byte of the upstream's framing in it.
    let body = bytes;
    let whole = scan_split(body, body.len());
    let cut = usize::from(control >> 1) % (body.len() + 1);
    let split = scan_split(body, cut);
    assert_eq!(whole.is_none(), split.is_none(), "cut at {cut}");
    if let (Some((end_a, out_a)), Some((end_b, out_b))) = (whole, split) {
        assert_eq!(end_a, end_b, "cut at {cut}");
        if end_a.is_some() {
            assert_eq!(decode(&out_a), decode(&out_b), "cut at {cut}");
        }
    }
});
