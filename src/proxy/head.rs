//! Where a client's request head ends, and how long one may be: read by the
//! connection loop (`super::connections`) before either HTTP path sees the
//! request, and by the fence that lends the Pingora proxy one request
//! (`super::fenced`).

/// The longest request head taken, on both HTTP paths; a longer one gets
/// 431 and the connection is closed. nginx's default is 32 KiB (four 8 KiB
/// buffers); a head with a JWT is under 2 KiB. Held per connection only
/// while a head is being read.
pub const MAX_REQUEST_HEAD_BYTES: usize = 64 * 1024;

/// Where a request head ends: the empty line after its last field, with
/// CRLF or bare LF line ends, after any empty lines before the request line
/// (which parsers skip). The length of the head, if it is all there.
pub fn head_end(buf: &[u8]) -> Option<usize> {
    head_end_from(buf, 0)
}

/// [`head_end`], looking only at what may have changed since `scanned`
/// bytes were looked at without finding the end: a head that arrives a
/// byte at a time is scanned once in all, not once per byte.
pub fn head_end_from(buf: &[u8], scanned: usize) -> Option<usize> {
    let start = buf.iter().position(|&b| b != b'\r' && b != b'\n')?;
    // An end seen from `scanned` on may begin up to 3 bytes before it
    // (`\n\r\n`), but never before the request line.
    let mut at = scanned.saturating_sub(3).max(start);
    while let Some(nl) = memchr::memchr(b'\n', &buf[at..]) {
        let line_end = at + nl + 1;
        match buf.get(line_end..) {
            Some([b'\n', ..]) => return Some(line_end + 1),
            Some([b'\r', b'\n', ..]) => return Some(line_end + 2),
            _ => at = line_end,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_ends_at_its_empty_line() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: a\r\n\r\nrest"), Some(27));
        assert_eq!(head_end(b"GET / HTTP/1.1\nHost: a\n\n"), Some(24));
        assert_eq!(head_end(b"\r\n\r\nGET / HTTP/1.0\r\n\r\n"), Some(22));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: a\r\n"), None);
        assert_eq!(head_end(b"\r\n\r\n"), None);
        assert_eq!(head_end(b""), None);
    }

    #[test]
    fn a_head_that_arrives_in_pieces_is_found_where_the_pieces_meet() {
        let head = b"\r\nGET / HTTP/1.1\r\nHost: a\r\nX: y\r\n\r\n";
        for split in 0..head.len() {
            // What was scanned before the last piece came found nothing.
            let scanned = split.min(head.len());
            if head_end(&head[..scanned]).is_some() {
                continue;
            }
            assert_eq!(
                head_end_from(head, scanned),
                Some(head.len()),
                "split at {split}"
            );
        }
        let bare = b"GET / HTTP/1.1\nHost: a\n\n";
        for split in 0..bare.len() {
            if head_end(&bare[..split]).is_none() {
                assert_eq!(
                    head_end_from(bare, split),
                    Some(bare.len()),
                    "split at {split}"
                );
            }
        }
    }
}
