//! Reading fuzz input: bytes, small integers and length-prefixed frames, each read
//! answering something (zeroes, an empty slice) once the input is used up, so that every
//! input, however short, is a valid program for a target.

/// A cursor over one fuzz input.
pub struct Input<'a> {
    rest: &'a [u8],
}

impl<'a> Input<'a> {
    /// A cursor at the start of `data`.
    pub fn new(data: &'a [u8]) -> Input<'a> {
        Input { rest: data }
    }

    /// True once every byte was read.
    pub fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    /// The next byte (0 past the end).
    pub fn u8(&mut self) -> u8 {
        match self.rest.split_first() {
            Some((&b, r)) => {
                self.rest = r;
                b
            }
            None => 0,
        }
    }

    /// The next two bytes, big-endian.
    pub fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.u8(), self.u8()])
    }

    /// The next four bytes, big-endian.
    pub fn u32(&mut self) -> u32 {
        u32::from_be_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    /// Up to `n` bytes.
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (a, b) = self.rest.split_at(n.min(self.rest.len()));
        self.rest = b;
        a
    }

    /// Everything not read yet.
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.rest)
    }

    /// A frame: a 2-byte big-endian length (mod 2 048), then that many bytes (fewer at the
    /// end of the input); None once fewer than 2 bytes are left.
    pub fn frame(&mut self) -> Option<&'a [u8]> {
        if self.rest.len() < 2 {
            self.rest = &[];
            return None;
        }
        let n = self.u16() as usize % 2048;
        Some(self.bytes(n))
    }
}

/// Splits `data` into frames as [`Input::frame`] reads them (at most 256).
pub fn frames(data: &[u8]) -> Vec<Vec<u8>> {
    let mut i = Input::new(data);
    let mut out = Vec::new();
    while out.len() < 256 {
        let Some(f) = i.frame() else { break };
        out.push(f.to_vec());
    }
    out
}

/// Splits `data` into tagged frames: a tag byte, then a frame as [`Input::frame`] reads it
/// (at most 256).
pub fn tagged_frames(data: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut i = Input::new(data);
    let mut out = Vec::new();
    while out.len() < 256 && !i.is_empty() {
        let tag = i.u8();
        let Some(f) = i.frame() else { break };
        out.push((tag, f.to_vec()));
    }
    out
}
