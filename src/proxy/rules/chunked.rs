//! Reads a chunked body (RFC 9112 §7.1) as its bytes pass by, and writes it
//! on re-framed.
//!
//! The data is copied through; the framing is not. Each run of data the
//! scanner sees becomes a chunk of waitgate's own (`<size in hex>\r\n`), and
//! the body ends with `0\r\n\r\n`: no size line, extension or trailer field
//! of the upstream's reaches the client. That is what Pingora's proxy sends
//! too (it decodes and re-encodes), and it means that an upstream cannot
//! hand a client framing that some parser downstream reads differently
//! (a bare LF inside an extension, say).
//!
//! What is accepted is what Pingora's client accepts (`httparse`'s chunk
//! size rules and a CRLF after each chunk's data), so both paths end a
//! body in the same place, or both refuse it.

/// What the access log names as refused when a body is not chunked as it
/// says (its `reason`), on both paths.
pub const REFUSED: &str = "the chunked body's framing";

/// Not a chunked body: the relay stops and closes both connections. `at`:
/// the bytes of the input fed last that came before the refused one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed {
    pub at: usize,
}

/// The scanner's state between feeds.
#[derive(Debug, Default)]
pub struct ChunkedEnd {
    state: Chunk,
    /// The chunk size read so far, then the data left in the chunk.
    size: u64,
    digits: u8,
    /// Bytes of the current size line seen so far, before its LF.
    line: usize,
    /// Bytes of the trailer section seen so far, counted as Pingora's
    /// client counts them (see [`MAX_TRAILER`]).
    trailer: usize,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// Reading the hex size.
    #[default]
    Size,
    /// After the size and whitespace, before `;` or the line end.
    AfterSize,
    /// Inside an extension: anything up to CR.
    Extension,
    /// Expecting LF after CR at the end of the size line.
    SizeLf,
    /// Inside chunk data, `size` bytes left.
    Data,
    /// Expecting CR, then LF, after the data.
    DataCr,
    DataLf,
    /// At the start of a trailer line, or of the final empty line.
    TrailerStart,
    /// Inside a trailer line.
    Trailer,
    /// Expecting LF after a trailer line's CR.
    TrailerLf,
    /// Expecting the LF of the final empty line.
    EndLf,
}

/// Hex digits of a chunk size at most (as `httparse`): 16 fill a u64.
const MAX_DIGITS: u8 = 16;

/// A size line (size, extensions and CR) at most. Pingora's reader refuses
/// an unfinished size line once it holds more than this, and takes a longer
/// one that arrived whole; refusing every longer line gives one verdict
/// however the bytes are split, and since the watcher under Pingora's
/// client refuses it too, the same on both paths.
const MAX_SIZE_LINE: usize = 8 * 1024;

/// The trailer section at most, as Pingora's client counts it: each
/// trailer line's bytes before its CR, and two for the line end before it
/// (the first line's is the end of the `0` line), but not the final empty
/// line. Only a line's own bytes are checked against it.
const MAX_TRAILER: usize = 64 * 1024;

impl ChunkedEnd {
    /// Scans the next bytes of the body and appends the data they carry,
    /// re-framed, to `out`. `Ok(Some(n))`: the body ended after `n` bytes of
    /// `input` (and `out` has the last chunk); `Ok(None)`: it goes on.
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<Option<usize>, Malformed> {
        self.run(input, Some(out))
    }

    /// Scans the next bytes of the body only, as [`ChunkedEnd::feed`] but
    /// writing nothing: where the body ends, or that it is not chunked.
    pub fn scan(&mut self, input: &[u8]) -> Result<Option<usize>, Malformed> {
        self.run(input, None)
    }

    fn run(
        &mut self,
        input: &[u8],
        mut out: Option<&mut Vec<u8>>,
    ) -> Result<Option<usize>, Malformed> {
        let mut i = 0;
        while i < input.len() {
            let byte = input[i];
            if matches!(
                self.state,
                Chunk::Size | Chunk::AfterSize | Chunk::Extension
            ) {
                self.line += 1;
                if self.line > MAX_SIZE_LINE {
                    return Err(Malformed { at: i });
                }
            }
            match self.state {
                Chunk::Size => match byte {
                    b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                        if self.digits >= MAX_DIGITS {
                            return Err(Malformed { at: i });
                        }
                        self.digits += 1;
                        let digit = (byte as char).to_digit(16).unwrap_or(0) as u64;
                        self.size = self.size << 4 | digit;
                    }
                    b' ' | b'\t' => self.state = Chunk::AfterSize,
                    b';' => self.state = Chunk::Extension,
                    b'\r' => self.state = Chunk::SizeLf,
                    _ => return Err(Malformed { at: i }),
                },
                Chunk::AfterSize => match byte {
                    b' ' | b'\t' => {}
                    b';' => self.state = Chunk::Extension,
                    b'\r' => self.state = Chunk::SizeLf,
                    _ => return Err(Malformed { at: i }),
                },
                Chunk::Extension => {
                    if byte == b'\r' {
                        self.state = Chunk::SizeLf;
                    }
                }
                Chunk::SizeLf => match byte {
                    b'\n' if self.size == 0 => self.state = Chunk::TrailerStart,
                    b'\n' => self.state = Chunk::Data,
                    _ => return Err(Malformed { at: i }),
                },
                Chunk::Data => {
                    let take =
                        (input.len() - i).min(usize::try_from(self.size).unwrap_or(usize::MAX));
                    if let Some(out) = out.as_deref_mut() {
                        out.extend_from_slice(format!("{take:X}\r\n").as_bytes());
                        out.extend_from_slice(&input[i..i + take]);
                        out.extend_from_slice(b"\r\n");
                    }
                    self.size -= take as u64;
                    i += take;
                    if self.size == 0 {
                        self.state = Chunk::DataCr;
                    }
                    continue;
                }
                Chunk::DataCr => match byte {
                    b'\r' => self.state = Chunk::DataLf,
                    _ => return Err(Malformed { at: i }),
                },
                Chunk::DataLf => match byte {
                    b'\n' => {
                        self.state = Chunk::Size;
                        self.digits = 0;
                        self.line = 0;
                    }
                    _ => return Err(Malformed { at: i }),
                },
                // In the trailer section every line ends with CRLF: a bare LF,
                // or a CR before anything but LF, is refused, as Pingora's
                // client refuses it (its trailer-end check).
                Chunk::TrailerStart => match byte {
                    b'\r' => self.state = Chunk::EndLf,
                    b'\n' => return Err(Malformed { at: i }),
                    _ => {
                        self.state = Chunk::Trailer;
                        self.trailer += 2;
                        self.count_trailer(i)?;
                    }
                },
                Chunk::Trailer => match byte {
                    b'\r' => self.state = Chunk::TrailerLf,
                    b'\n' => return Err(Malformed { at: i }),
                    _ => self.count_trailer(i)?,
                },
                Chunk::TrailerLf => match byte {
                    b'\n' => self.state = Chunk::TrailerStart,
                    _ => return Err(Malformed { at: i }),
                },
                Chunk::EndLf => match byte {
                    b'\n' => {
                        if let Some(out) = out {
                            out.extend_from_slice(b"0\r\n\r\n");
                        }
                        return Ok(Some(i + 1));
                    }
                    _ => return Err(Malformed { at: i }),
                },
            }
            i += 1;
        }
        Ok(None)
    }

    /// One more byte of a trailer line.
    fn count_trailer(&mut self, at: usize) -> Result<(), Malformed> {
        self.trailer += 1;
        if self.trailer > MAX_TRAILER {
            return Err(Malformed { at });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `body` cut at `cut`: where it ends and what was written on.
    fn split_feed(body: &[u8], cut: usize) -> Result<(Option<usize>, Vec<u8>), Malformed> {
        let mut scanner = ChunkedEnd::default();
        let mut out = Vec::new();
        if let Some(end) = scanner.feed(&body[..cut], &mut out)? {
            return Ok((Some(end), out));
        }
        let end = scanner.feed(&body[cut..], &mut out)?;
        Ok((end.map(|e| cut + e), out))
    }

    /// The data of a chunked body, decoded strictly: the oracle.
    fn decode(mut body: &[u8]) -> Vec<u8> {
        let mut data = Vec::new();
        loop {
            let line = body.windows(2).position(|w| w == b"\r\n").unwrap();
            let size =
                usize::from_str_radix(std::str::from_utf8(&body[..line]).unwrap(), 16).unwrap();
            body = &body[line + 2..];
            if size == 0 {
                assert_eq!(body, b"\r\n");
                return data;
            }
            data.extend_from_slice(&body[..size]);
            assert_eq!(&body[size..size + 2], b"\r\n");
            body = &body[size + 2..];
        }
    }

    #[test]
    fn finds_the_end_and_writes_the_data_on_re_framed() {
        let body = b"5;ext=1\r\nhello\r\n6 ; e\r\n world\r\n0\r\nX-Sum: 1\r\n\r\nNEXT";
        let (end, out) = split_feed(body, body.len()).unwrap();
        assert_eq!(end, Some(body.len() - 4));
        assert_eq!(out, b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n");
        let (end, out) = split_feed(b"A\r\n0123456789\r\n0\r\n\r\n", 20).unwrap();
        assert_eq!(end, Some(20));
        assert_eq!(decode(&out), b"0123456789");
    }

    #[test]
    fn the_end_is_the_same_across_any_split() {
        let body = b"5\r\nhello\r\n10\r\n0123456789abcdef\r\n0\r\nT: v\r\n\r\n";
        for cut in 0..=body.len() {
            let (end, out) = split_feed(body, cut).unwrap();
            assert_eq!(end, Some(body.len()), "cut at {cut}");
            assert_eq!(decode(&out), b"hello0123456789abcdef", "cut at {cut}");
        }
    }

    proptest::proptest! {
        /// Any chunked body, with extensions and trailers, cut anywhere and
        /// followed by anything: the end is found exactly where it is, and
        /// the data written on is the data sent.
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
                body.extend_from_slice(format!("{:x}", chunk.len()).as_bytes());
                if extension {
                    body.extend_from_slice(b";name=\"v\"");
                }
                body.extend_from_slice(b"\r\n");
                body.extend_from_slice(chunk);
                body.extend_from_slice(b"\r\n");
            }
            body.extend_from_slice(b"0\r\n");
            for i in 0..trailers {
                body.extend_from_slice(format!("X-T{i}: v\r\n").as_bytes());
            }
            body.extend_from_slice(b"\r\n");
            let end = body.len();
            body.extend_from_slice(&after);
            let cut = cut.min(body.len());
            let (found, out) = split_feed(&body, cut).unwrap();
            proptest::prop_assert_eq!(found, Some(end));
            proptest::prop_assert_eq!(decode(&out), chunks.concat());
        }

        /// Whatever the bytes, no panic, and the same verdict however they
        /// are split.
        #[test]
        fn any_bytes_get_one_verdict(
            data in proptest::collection::vec(proptest::num::u8::ANY, 0..200),
            cut in 0usize..200,
        ) {
            let cut = cut.min(data.len());
            let whole = split_feed(&data, data.len());
            let split = split_feed(&data, cut);
            proptest::prop_assert_eq!(whole.is_ok(), split.is_ok());
            if let (Ok((a, out_a)), Ok((b, out_b))) = (whole, split) {
                proptest::prop_assert_eq!(a, b);
                if a.is_some() {
                    proptest::prop_assert_eq!(decode(&out_a), decode(&out_b));
                }
            }
        }
    }

    #[test]
    fn refuses_what_pingora_refuses() {
        for (bad, why) in [
            (&b"x\r\n"[..], "a size that is not hex"),
            (b"5\r\nhelloXX", "no CRLF after the data"),
            (b"5\rX", "a bare CR after the size"),
            (b"5\nhello\r\n", "a bare LF after the size"),
            (b"3\r\nabc\n0\r\n\r\n", "a bare LF after the data"),
            (b"5 6\r\n", "two sizes"),
            (b"10000000000000000\r\n", "a size past 64 bits"),
            // Trailer lines end with CRLF, nothing else.
            (b"0\r\nX: a\nY: b\r\n\r\n", "a trailer ended by LF"),
            (b"0\r\n\n", "the last line a bare LF"),
            (b"0\r\nX: a\rY\r\n\r\n", "a bare CR in a trailer"),
            (b"0\r\n\rX", "a bare CR where the last line starts"),
        ] {
            assert!(split_feed(bad, bad.len()).is_err(), "{why}");
        }
        assert_eq!(split_feed(b"5\r\nhel", 6).unwrap().0, None);
        // A size line longer than Pingora ever takes whatever the split.
        let long = |ext: usize| {
            let mut body = b"2;".to_vec();
            body.resize(2 + ext, b'e');
            body.extend_from_slice(b"\r\nhi\r\n0\r\n\r\n");
            body
        };
        // size, `;`, extension and CR: 8,192 bytes at most.
        let fits = long(MAX_SIZE_LINE - 3);
        for cut in [1, 100, MAX_SIZE_LINE - 1, MAX_SIZE_LINE, fits.len()] {
            assert_eq!(
                split_feed(&fits, cut).unwrap().0,
                Some(fits.len()),
                "cut {cut}"
            );
        }
        let over = long(MAX_SIZE_LINE - 2);
        for cut in [1, 100, MAX_SIZE_LINE, over.len()] {
            assert!(split_feed(&over, cut).is_err(), "cut {cut}");
        }
        // Where: the byte after the 8,192 the line may have.
        let mut scanner = ChunkedEnd::default();
        assert_eq!(scanner.scan(&over), Err(Malformed { at: MAX_SIZE_LINE }));
        // The trailer section, counted as Pingora counts it: two for the end
        // of the `0` line, then each line's bytes before its CR, and two for
        // each line end before another line.
        let trailer = |lines: &[usize]| {
            let mut body = b"0\r\n".to_vec();
            for &n in lines {
                body.resize(body.len() + n, b't');
                body.extend_from_slice(b"\r\n");
            }
            body.extend_from_slice(b"\r\n");
            body
        };
        for lines in [vec![MAX_TRAILER - 2], vec![100, MAX_TRAILER - 104]] {
            let body = trailer(&lines);
            assert_eq!(
                split_feed(&body, 7).unwrap().0,
                Some(body.len()),
                "{lines:?}"
            );
            let mut over = lines.clone();
            *over.last_mut().unwrap() += 1;
            assert!(split_feed(&trailer(&over), 7).is_err(), "{over:?}");
        }
        // The second chunk's size line is counted afresh.
        let mut two = b"1\r\na\r\n".to_vec();
        two.extend_from_slice(&fits);
        assert!(split_feed(&two, two.len()).unwrap().0.is_some());
        // A bare LF inside an extension is extension text, as in httparse,
        // and never reaches the client.
        let body = b"2;e\nx\r\nhi\r\n0\r\n\r\n";
        let (end, out) = split_feed(body, body.len()).unwrap();
        assert_eq!(end, Some(body.len()));
        assert_eq!(out, b"2\r\nhi\r\n0\r\n\r\n");
    }
}
