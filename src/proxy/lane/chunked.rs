//! Finds where a chunked body ends (RFC 9112 §7.1), as the bytes pass by.
//!
//! Chunk sizes, extensions and data are only scanned; the bytes are relayed
//! as they came, so a body costs no copy into a decoded form. Trailer fields
//! are not relayed: Pingora's proxy drops them too, and both paths must
//! give a client the same message. The scanner says which of the bytes fed
//! to it are trailer (see [`Scan::relay`]); the relay ends the body with
//! the empty line itself.

/// What one [`ChunkedEnd::feed`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scan {
    /// The first `relay` bytes of the input go to the client; the rest of
    /// what belongs to the body is trailer section (including the final
    /// empty line).
    pub relay: usize,
    /// The body ends after this many bytes of the input.
    pub end: Option<usize>,
}

/// Not a chunked body: the relay stops and closes both connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed;

/// The scanner's state between feeds.
#[derive(Debug, Default)]
pub struct ChunkedEnd {
    state: Chunk,
    /// The chunk size read so far, then the data left in the chunk.
    size: u64,
    digits: u8,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// Reading the hex size.
    #[default]
    Size,
    /// After the size: an extension or whitespace, up to the line end.
    Extension,
    /// Expecting LF after CR at the end of the size line.
    SizeLf,
    /// Inside chunk data, `size` bytes left.
    Data,
    /// Expecting CR (or LF) after the data.
    DataCr,
    DataLf,
    /// At the start of a trailer line (or of the final empty line).
    TrailerStart,
    /// Inside a trailer line.
    Trailer,
    /// Expecting LF after a trailer line's CR.
    TrailerLf,
    /// Expecting the LF of the final empty line.
    EndLf,
}

impl Chunk {
    fn is_trailer(self) -> bool {
        matches!(
            self,
            Chunk::TrailerStart | Chunk::Trailer | Chunk::TrailerLf | Chunk::EndLf
        )
    }
}

/// The most hex digits of a chunk size: 15 keep it below 2^60.
const MAX_DIGITS: u8 = 15;

impl ChunkedEnd {
    /// Scans the next bytes of the body.
    pub fn feed(&mut self, data: &[u8]) -> Result<Scan, Malformed> {
        let mut relay = self.state.is_trailer().then_some(0);
        let mut i = 0;
        while i < data.len() {
            let byte = data[i];
            match self.state {
                Chunk::Size => match byte {
                    b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                        let digit = (byte as char).to_digit(16).unwrap_or(0) as u64;
                        self.digits += 1;
                        if self.digits > MAX_DIGITS {
                            return Err(Malformed);
                        }
                        self.size = self.size * 16 + digit;
                    }
                    b';' | b' ' | b'\t' if self.digits > 0 => self.state = Chunk::Extension,
                    b'\r' if self.digits > 0 => self.state = Chunk::SizeLf,
                    b'\n' if self.digits > 0 => self.end_of_size_line(&mut relay, i),
                    _ => return Err(Malformed),
                },
                Chunk::Extension => match byte {
                    b'\r' => self.state = Chunk::SizeLf,
                    b'\n' => self.end_of_size_line(&mut relay, i),
                    // Control bytes have no place in an extension.
                    b'\t' => {}
                    0..=0x1f | 0x7f => return Err(Malformed),
                    _ => {}
                },
                Chunk::SizeLf => match byte {
                    b'\n' => self.end_of_size_line(&mut relay, i),
                    _ => return Err(Malformed),
                },
                Chunk::Data => {
                    let take =
                        (data.len() - i).min(usize::try_from(self.size).unwrap_or(usize::MAX));
                    self.size -= take as u64;
                    i += take;
                    if self.size == 0 {
                        self.state = Chunk::DataCr;
                    }
                    continue;
                }
                Chunk::DataCr => match byte {
                    b'\r' => self.state = Chunk::DataLf,
                    b'\n' => self.next_chunk(),
                    _ => return Err(Malformed),
                },
                Chunk::DataLf => match byte {
                    b'\n' => self.next_chunk(),
                    _ => return Err(Malformed),
                },
                Chunk::TrailerStart => match byte {
                    b'\r' => self.state = Chunk::EndLf,
                    b'\n' => return Ok(done(relay, i + 1)),
                    _ => self.state = Chunk::Trailer,
                },
                Chunk::Trailer => match byte {
                    b'\r' => self.state = Chunk::TrailerLf,
                    b'\n' => self.state = Chunk::TrailerStart,
                    _ => {}
                },
                Chunk::TrailerLf => match byte {
                    b'\n' => self.state = Chunk::TrailerStart,
                    _ => return Err(Malformed),
                },
                Chunk::EndLf => match byte {
                    b'\n' => return Ok(done(relay, i + 1)),
                    _ => return Err(Malformed),
                },
            }
            i += 1;
        }
        Ok(Scan {
            relay: relay.unwrap_or(data.len()),
            end: None,
        })
    }

    /// The size line's LF is at `at`.
    fn end_of_size_line(&mut self, relay: &mut Option<usize>, at: usize) {
        if self.size == 0 {
            self.state = Chunk::TrailerStart;
            // The last-chunk line is relayed; what follows is trailer.
            *relay = Some(at + 1);
        } else {
            self.state = Chunk::Data;
        }
    }

    fn next_chunk(&mut self) {
        self.state = Chunk::Size;
        self.size = 0;
        self.digits = 0;
    }
}

fn done(relay: Option<usize>, end: usize) -> Scan {
    Scan {
        relay: relay.unwrap_or(0),
        end: Some(end),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end_of(body: &[u8]) -> Result<Option<usize>, Malformed> {
        ChunkedEnd::default().feed(body).map(|s| s.end)
    }

    /// Feeds `body` in two parts cut at `cut`: the end found, and the bytes
    /// that would be relayed.
    fn split_feed(body: &[u8], cut: usize) -> (usize, Vec<u8>) {
        let mut scanner = ChunkedEnd::default();
        let mut relayed = Vec::new();
        let first = scanner.feed(&body[..cut]).unwrap();
        relayed.extend_from_slice(&body[..first.relay]);
        if let Some(end) = first.end {
            return (end, relayed);
        }
        let rest = &body[cut..];
        let second = scanner.feed(rest).unwrap();
        relayed.extend_from_slice(&rest[..second.relay]);
        (cut + second.end.unwrap(), relayed)
    }

    #[test]
    fn finds_the_end_of_a_chunked_body() {
        let body = b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\n\r\nNEXT";
        assert_eq!(end_of(body), Ok(Some(body.len() - 4)));
        let trailers = b"3\r\nabc\r\n0\r\nX-Sum: 1\r\nX-More: 2\r\n\r\n";
        assert_eq!(end_of(trailers), Ok(Some(trailers.len())));
        let bare_lf = b"3\nabc\n0\n\n";
        assert_eq!(end_of(bare_lf), Ok(Some(bare_lf.len())));
        assert_eq!(end_of(b"A\r\n0123456789\r\n0\r\n\r\n"), Ok(Some(20)));
    }

    #[test]
    fn trailers_are_found_and_left_out_across_any_split() {
        let body = b"5\r\nhello\r\n10\r\n0123456789abcdef\r\n0\r\nT: v\r\n\r\n";
        let relayed_part = b"5\r\nhello\r\n10\r\n0123456789abcdef\r\n0\r\n";
        for cut in 0..=body.len() {
            let (end, relayed) = split_feed(body, cut);
            assert_eq!(end, body.len(), "cut at {cut}");
            assert_eq!(relayed, relayed_part, "cut at {cut}");
        }
    }

    proptest::proptest! {
        /// Any chunked body, with extensions and trailers, cut anywhere, and
        /// followed by anything: the end is found exactly where it is, and
        /// everything up to the last chunk's line is relayed.
        #[test]
        fn the_end_is_found_exactly(
            chunks in proptest::collection::vec(proptest::collection::vec(proptest::num::u8::ANY, 1..300), 0..8),
            extension in proptest::bool::ANY,
            trailers in 0usize..3,
            cut in 0usize..4000,
            after in proptest::collection::vec(proptest::num::u8::ANY, 0..20),
        ) {
            let mut body = Vec::new();
            for chunk in &chunks {
                body.extend_from_slice(format!("{:X}", chunk.len()).as_bytes());
                if extension {
                    body.extend_from_slice(b";name=\"v\"");
                }
                body.extend_from_slice(b"\r\n");
                body.extend_from_slice(chunk);
                body.extend_from_slice(b"\r\n");
            }
            body.extend_from_slice(b"0\r\n");
            let relayed_part = body.clone();
            for i in 0..trailers {
                body.extend_from_slice(format!("X-T{i}: v\r\n").as_bytes());
            }
            body.extend_from_slice(b"\r\n");
            let end = body.len();
            body.extend_from_slice(&after);
            let cut = cut.min(body.len());
            let (found, relayed) = split_feed(&body, cut);
            proptest::prop_assert_eq!(found, end);
            proptest::prop_assert_eq!(relayed, relayed_part);
        }

        /// Whatever the bytes, the scanner answers without panicking, and
        /// never claims an end or a relay past what it was given.
        #[test]
        fn any_bytes_are_scanned_safely(data in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            if let Ok(scan) = ChunkedEnd::default().feed(&data) {
                proptest::prop_assert!(scan.relay <= data.len());
                proptest::prop_assert!(scan.end.is_none_or(|e| e <= data.len() && scan.relay <= e));
            }
        }
    }

    #[test]
    fn refuses_what_is_not_chunked() {
        for bad in [
            &b"x\r\n"[..],
            b"\r\n",
            b"5\r\nhelloXX",
            b"5\rX",
            b"10000000000000000\r\n",
            b"5;a\x00b\r\n",
        ] {
            assert_eq!(
                end_of(bad),
                Err(Malformed),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(end_of(b"5\r\nhel"), Ok(None));
    }
}
