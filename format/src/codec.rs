//! Byte-level encoding shared by the writer and the reader: LEB128 varints,
//! zigzag signed deltas and length-prefixed byte strings.
//!
//! The decoding half never trusts a length: every read is checked against
//! what is left of the chunk, and a failure names what was being read.

/// Appends `v` as an unsigned LEB128 varint.
pub(crate) fn put_u64(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// `v` zigzag-encoded: small negative numbers become small too.
pub(crate) fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// The inverse of [`zigzag`].
pub(crate) fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Appends `v` zigzag-encoded, so small negative deltas stay small.
pub(crate) fn put_i64(out: &mut Vec<u8>, v: i64) {
    put_u64(out, zigzag(v));
}

/// Appends a length-prefixed byte string.
pub(crate) fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_u64(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// A bounds-checked cursor over one decompressed chunk.
pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

/// Why a chunk payload could not be decoded: the field being read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DecodeFail(pub &'static str);

impl<'a> Cursor<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    pub(crate) fn u8(&mut self, what: &'static str) -> Result<u8, DecodeFail> {
        let b = *self.buf.get(self.pos).ok_or(DecodeFail(what))?;
        self.pos += 1;
        Ok(b)
    }

    pub(crate) fn u64(&mut self, what: &'static str) -> Result<u64, DecodeFail> {
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = self.u8(what)?;
            if shift == 63 && b > 1 {
                return Err(DecodeFail(what));
            }
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(DecodeFail(what))
    }

    pub(crate) fn u32(&mut self, what: &'static str) -> Result<u32, DecodeFail> {
        u32::try_from(self.u64(what)?).map_err(|_| DecodeFail(what))
    }

    pub(crate) fn i64(&mut self, what: &'static str) -> Result<i64, DecodeFail> {
        Ok(unzigzag(self.u64(what)?))
    }

    /// A count of items each at least `min_item_bytes` long: refused when
    /// the rest of the chunk could not hold them, so no allocation sized by
    /// a corrupt count can exceed the input.
    pub(crate) fn count(
        &mut self,
        min_item_bytes: usize,
        what: &'static str,
    ) -> Result<usize, DecodeFail> {
        let n = self.u64(what)?;
        let n = usize::try_from(n).map_err(|_| DecodeFail(what))?;
        if n.saturating_mul(min_item_bytes.max(1)) > self.remaining() {
            return Err(DecodeFail(what));
        }
        Ok(n)
    }

    pub(crate) fn bytes(&mut self, what: &'static str) -> Result<&'a [u8], DecodeFail> {
        let n = self.count(1, what)?;
        self.take(n, what)
    }

    /// The next `n` bytes.
    pub(crate) fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], DecodeFail> {
        let end = self.pos.checked_add(n).ok_or(DecodeFail(what))?;
        let s = self.buf.get(self.pos..end).ok_or(DecodeFail(what))?;
        self.pos = end;
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_at_the_edges() {
        let values = [0u64, 1, 127, 128, 16383, 16384, u32::MAX as u64, u64::MAX];
        let signed = [0i64, 1, -1, 63, -64, i64::MAX, i64::MIN];
        let mut buf = Vec::new();
        for v in values {
            put_u64(&mut buf, v);
        }
        for v in signed {
            put_i64(&mut buf, v);
        }
        let mut c = Cursor::new(&buf);
        for v in values {
            assert_eq!(c.u64("v").unwrap(), v);
        }
        for v in signed {
            assert_eq!(c.i64("v").unwrap(), v);
        }
        assert!(c.is_empty());
    }

    #[test]
    fn overlong_varint_is_refused() {
        let buf = [0xffu8; 11];
        assert!(Cursor::new(&buf).u64("v").is_err());
    }

    #[test]
    fn count_larger_than_input_is_refused() {
        let mut buf = Vec::new();
        put_u64(&mut buf, 1 << 40);
        assert!(Cursor::new(&buf).count(1, "n").is_err());
    }
}
