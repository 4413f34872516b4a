//! Chunked transfer coding (RFC 9112 7.1) tracked byte by byte as it streams through, so the
//! proxy knows where a chunked body ends without buffering it, and can hand out the payload
//! alone when the receiver cannot take chunked (an HTTP/1.0 client).

/// Where the decoder is within the coding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Hex digits of a chunk size (`digits` read so far).
    Size { size: u64, digits: u8 },
    /// Chunk extensions or whitespace up to the end of the size line.
    Extension { size: u64 },
    /// The LF ending the size line after a CR.
    SizeLf { size: u64 },
    /// Payload bytes still to come in this chunk.
    Data(u64),
    /// The CR after a chunk's payload.
    DataCr,
    /// The LF after a chunk's payload.
    DataLf,
    /// Start of a trailer line (or of the empty line ending the body).
    TrailerStart,
    /// Inside a trailer field line.
    TrailerLine,
    /// The LF of the final empty line.
    EndLf,
    /// The body is complete.
    Done,
}

/// A chunked coding the proxy refuses to pass on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid chunked encoding")]
pub(crate) struct ChunkError;

/// Tracks one chunked body.
#[derive(Debug)]
pub(crate) struct Chunked {
    state: State,
}

impl Default for Chunked {
    fn default() -> Self {
        Chunked {
            state: State::Size { size: 0, digits: 0 },
        }
    }
}

impl Chunked {
    /// True once the last chunk and the trailer section have gone by.
    pub(crate) fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Consumes the coded bytes at the start of `input` that belong to this body, calling
    /// `payload` with each run of payload bytes. Returns how many bytes belong to the body
    /// (all of `input` unless the body ends inside it).
    pub(crate) fn feed(
        &mut self,
        input: &[u8],
        payload: &mut dyn FnMut(&[u8]),
    ) -> Result<usize, ChunkError> {
        let mut i = 0;
        while i < input.len() {
            let b = input[i];
            self.state = match self.state {
                State::Done => return Ok(i),
                State::Data(left) => {
                    let take = usize::try_from(left)
                        .unwrap_or(usize::MAX)
                        .min(input.len() - i);
                    payload(&input[i..i + take]);
                    i += take;
                    let left = left - take as u64;
                    self.state = if left == 0 {
                        State::DataCr
                    } else {
                        State::Data(left)
                    };
                    continue;
                }
                State::Size { size, digits } => match hex(b) {
                    Some(d) if digits < 15 => State::Size {
                        size: size << 4 | u64::from(d),
                        digits: digits + 1,
                    },
                    Some(_) => return Err(ChunkError),
                    None if digits == 0 => return Err(ChunkError),
                    None => match b {
                        b';' | b' ' | b'\t' => State::Extension { size },
                        b'\r' => State::SizeLf { size },
                        b'\n' => after_size(size),
                        _ => return Err(ChunkError),
                    },
                },
                State::Extension { size } => match b {
                    b'\r' => State::SizeLf { size },
                    b'\n' => after_size(size),
                    _ => State::Extension { size },
                },
                State::SizeLf { size } => match b {
                    b'\n' => after_size(size),
                    _ => return Err(ChunkError),
                },
                State::DataCr => match b {
                    b'\r' => State::DataLf,
                    b'\n' => State::Size { size: 0, digits: 0 },
                    _ => return Err(ChunkError),
                },
                State::DataLf => match b {
                    b'\n' => State::Size { size: 0, digits: 0 },
                    _ => return Err(ChunkError),
                },
                State::TrailerStart => match b {
                    b'\r' => State::EndLf,
                    b'\n' => State::Done,
                    _ => State::TrailerLine,
                },
                State::TrailerLine => match b {
                    b'\n' => State::TrailerStart,
                    _ => State::TrailerLine,
                },
                State::EndLf => match b {
                    b'\n' => State::Done,
                    _ => return Err(ChunkError),
                },
            };
            i += 1;
        }
        Ok(i)
    }
}

fn after_size(size: u64) -> State {
    if size == 0 {
        State::TrailerStart
    } else {
        State::Data(size)
    }
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `coded` in pieces of `step` bytes; returns (payload, bytes consumed, done).
    fn run(coded: &[u8], step: usize) -> Result<(Vec<u8>, usize, bool), ChunkError> {
        let mut c = Chunked::default();
        let mut out = Vec::new();
        let mut used = 0;
        for piece in coded.chunks(step) {
            let n = c.feed(piece, &mut |p| out.extend_from_slice(p))?;
            used += n;
            if n < piece.len() {
                break;
            }
        }
        Ok((out, used, c.is_done()))
    }

    #[test]
    fn decodes_in_any_split_and_stops_at_the_end() {
        let coded = b"5\r\nhello\r\nA;ext=1\r\n0123456789\r\n0\r\nX-T: 1\r\n\r\nNEXT";
        for step in [1, 2, 3, 7, 64] {
            let (payload, used, done) = run(coded, step).expect("valid");
            assert_eq!(payload, b"hello0123456789", "step {step}");
            assert_eq!(used, coded.len() - 4, "step {step}");
            assert!(done);
        }
    }

    #[test]
    fn an_unfinished_body_is_not_done() {
        let (payload, used, done) = run(b"5\r\nhel", 64).expect("valid");
        assert_eq!((payload.as_slice(), used, done), (&b"hel"[..], 6, false));
    }

    #[test]
    fn bad_codings_are_refused() {
        for bad in [
            &b"x\r\n"[..],
            b"5\r\nhelloX",
            b"\r\n",
            b"ffffffffffffffffff\r\n",
        ] {
            assert_eq!(run(bad, 64).err(), Some(ChunkError), "{bad:?}");
        }
    }
}
