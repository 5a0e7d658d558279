//! The Protobuf wire format at its lowest level: varints, the fields of a
//! message walked in wire order without allocating ([`fields`]), and
//! fields written into a buffer ([`put_varint`], [`put_message`]). What a
//! field means is the declaration's business (`fields!`).

/// A body or frame that cannot be read at all.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("failed to decode protobuf: {0}")]
pub struct PbError(pub &'static str);

/// One field's value, borrowed from the buffer.
#[derive(Clone, Copy, Debug)]
pub enum Val<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    /// Fixed 32/64-bit values: no field podns reads has them.
    Fixed,
}

/// Wire types.
const VARINT: u32 = 0;
const LEN: u32 = 2;

pub fn varint(b: &[u8], i: &mut usize) -> Result<u64, PbError> {
    let mut v = 0u64;
    for shift in (0..70).step_by(7) {
        let byte = *b.get(*i).ok_or(PbError("truncated varint"))?;
        *i += 1;
        if shift == 63 && byte > 1 {
            return Err(PbError("varint overflows 64 bits"));
        }
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(PbError("varint too long"))
}

/// The fields of one message, in wire order. Stops at the first framing
/// error (yielded once).
pub struct Fields<'a> {
    b: &'a [u8],
    i: usize,
}

pub fn fields(b: &[u8]) -> Fields<'_> {
    Fields { b, i: 0 }
}

impl<'a> Fields<'a> {
    fn step(&mut self) -> Result<(u32, Val<'a>), PbError> {
        let key = varint(self.b, &mut self.i)?;
        let num = u32::try_from(key >> 3).map_err(|_| PbError("field number too large"))?;
        if num == 0 {
            return Err(PbError("field number 0"));
        }
        let skip = |i: &mut usize, n: usize, len: usize| {
            let end = i.checked_add(n).filter(|e| *e <= len);
            end.map(|e| *i = e).ok_or(PbError("truncated field"))
        };
        let val = match key & 7 {
            0 => Val::Varint(varint(self.b, &mut self.i)?),
            1 => {
                skip(&mut self.i, 8, self.b.len())?;
                Val::Fixed
            }
            5 => {
                skip(&mut self.i, 4, self.b.len())?;
                Val::Fixed
            }
            2 => {
                let n = usize::try_from(varint(self.b, &mut self.i)?)
                    .map_err(|_| PbError("length too large"))?;
                let start = self.i;
                skip(&mut self.i, n, self.b.len())?;
                Val::Bytes(&self.b[start..self.i])
            }
            _ => return Err(PbError("unsupported wire type")),
        };
        Ok((num, val))
    }

    /// Where the next field starts.
    pub fn at(&self) -> usize {
        self.i
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u32, Val<'a>), PbError>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.i >= self.b.len() {
            return None;
        }
        let r = self.step();
        if r.is_err() {
            self.i = self.b.len();
        }
        Some(r)
    }
}

/// A length-delimited value as text.
pub fn str_of(v: Val<'_>) -> Option<&str> {
    match v {
        Val::Bytes(b) => std::str::from_utf8(b).ok(),
        _ => None,
    }
}

/// A length-delimited value's bytes (a sub-message).
pub fn sub(v: Val<'_>) -> Option<&[u8]> {
    match v {
        Val::Bytes(b) => Some(b),
        _ => None,
    }
}

pub fn put_varint(w: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        w.push((v as u8) | 0x80);
        v >>= 7;
    }
    w.push(v as u8);
}

fn put_key(w: &mut Vec<u8>, num: u32, wire: u32) {
    put_varint(w, u64::from(num << 3 | wire));
}

/// A varint field (`bool`, `int32`, `int64`; a negative number is
/// sign-extended to ten bytes, as Protobuf writes an `int32`).
pub fn put_int(w: &mut Vec<u8>, num: u32, v: i64) {
    put_key(w, num, VARINT);
    put_varint(w, v as u64);
}

/// A length-delimited field of these bytes (a string).
pub fn put_bytes(w: &mut Vec<u8>, num: u32, b: &[u8]) {
    put_key(w, num, LEN);
    put_varint(w, b.len() as u64);
    w.extend_from_slice(b);
}

/// A sub-message `body` writes: its length is written once its bytes are
/// (one byte reserved, moved when the length needs more).
pub fn put_message<E>(
    w: &mut Vec<u8>,
    num: u32,
    body: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
) -> Result<(), E> {
    put_key(w, num, LEN);
    let at = w.len();
    w.push(0);
    body(w)?;
    let len = w.len() - at - 1;
    if len < 0x80 {
        w[at] = len as u8;
    } else {
        let mut prefix = Vec::with_capacity(4);
        put_varint(&mut prefix, len as u64);
        w.splice(at..=at, prefix);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_fields_read_back() {
        for len in [0usize, 1, 127, 128, 300, 16_384] {
            let mut w = Vec::new();
            put_int(&mut w, 1, -1);
            put_message::<()>(&mut w, 2, |w| {
                put_bytes(w, 3, &vec![b'x'; len]);
                Ok(())
            })
            .unwrap();
            put_int(&mut w, 4, 7);
            let f: Vec<_> = fields(&w).map(Result::unwrap).collect();
            assert_eq!(f.len(), 3, "{len}");
            assert!(matches!(f[0], (1, Val::Varint(v)) if v as i64 == -1));
            let inner: Vec<_> = fields(sub(f[1].1).unwrap()).map(Result::unwrap).collect();
            assert!(matches!(inner[0], (3, Val::Bytes(b)) if b.len() == len));
            assert!(matches!(f[2], (4, Val::Varint(7))));
        }
    }
}
