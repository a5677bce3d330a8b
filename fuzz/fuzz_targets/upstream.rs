//! Upstream bytes, as the direct lane reads them: a response head, then a
//! chunked body. Upstreams are input too: whatever they send, the lane must
//! not panic, must never hand on a head with a line break inside a field or
//! a connection-scoped header, and must find a chunked body's end in the
//! same place however the bytes are split across reads.
#![no_main]

use libfuzzer_sys::fuzz_target;
use waitgate::proxy::lane::chunked::{ChunkedEnd, Scan};
use waitgate::proxy::lane::response::parse;

/// Scans `body` cut at `cut`; the end (if found) and the relayed bytes.
fn scan_split(body: &[u8], cut: usize) -> Option<(Option<usize>, Vec<u8>)> {
    let mut scanner = ChunkedEnd::default();
    let mut relayed = Vec::new();
    let first: Scan = scanner.feed(&body[..cut]).ok()?;
    assert!(first.relay <= cut);
    relayed.extend_from_slice(&body[..first.relay]);
    if let Some(end) = first.end {
        assert!(first.relay <= end && end <= cut);
        return Some((Some(end), relayed));
    }
    let rest = &body[cut..];
    let second = scanner.feed(rest).ok()?;
    assert!(second.relay <= rest.len());
    relayed.extend_from_slice(&rest[..second.relay]);
    if let Some(end) = second.end {
        assert!(second.relay <= end && end <= rest.len());
    }
    Some((second.end.map(|e| cut + e), relayed))
}

fuzz_target!(|data: &[u8]| {
    let Some((&control, bytes)) = data.split_first() else {
        return;
    };
    let head_request = control & 1 == 1;
    if let Ok(Some(response)) = parse(bytes, head_request) {
        assert!(response.consumed <= bytes.len());
        let head = String::from_utf8_lossy(&response.head).into_owned();
        assert!(head.starts_with("HTTP/1.1 "), "{head:?}");
        assert!(head.ends_with("\r\n"), "{head:?}");
        for line in head.trim_end_matches("\r\n").split("\r\n").skip(1) {
            assert!(!line.contains('\r') && !line.contains('\n'), "{line:?}");
            let name = line.split(':').next().unwrap_or("").trim().to_ascii_lowercase();
            assert!(
                !["connection", "keep-alive", "date", "x-request-id", "upgrade"]
                    .contains(&name.as_str()),
                "{line:?}"
            );
        }
    }
    // The chunked scanner: the same answer whatever the split.
    let body = bytes;
    let whole = scan_split(body, body.len());
    let cut = usize::from(control >> 1) % (body.len() + 1);
    let split = scan_split(body, cut);
    if let (Some(whole), Some(split)) = (&whole, &split) {
        assert_eq!(whole, split, "cut at {cut}");
    }
    // A body refused whole is refused however it is split.
    assert_eq!(whole.is_none(), split.is_none(), "cut at {cut}");
});
