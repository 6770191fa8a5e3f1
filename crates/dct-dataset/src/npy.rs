//! The `.npy` subset `gene_order.npy` uses: a one-dimensional little-endian int32 array.
//!
//! Parsing is strict and bounded: the magic, a version of 1, 2 or 3, a header of at most [`MAX_HEADER_LEN`]
//! bytes that is a Python dict literal with exactly the keys `descr` (`'<i4'`), `fortran_order` (`False`) and
//! `shape` (a 1-tuple), and exactly `4 * shape[0]` data bytes after it. Nothing is allocated from a size the file
//! merely claims: the data must already be in the buffer.

/// The `.npy` magic.
pub const MAGIC: &[u8; 6] = b"\x93NUMPY";
/// Largest header accepted (numpy itself writes at most a few hundred bytes for a 1-d array).
pub const MAX_HEADER_LEN: usize = 1 << 16;

/// Parses a `.npy` file holding a 1-d `<i4` array. Errors say what is wrong, for a message about the file.
pub fn parse_i32(bytes: &[u8]) -> Result<Vec<i32>, String> {
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return Err("not a .npy file (bad magic)".into());
    }
    let (major, minor) = (bytes[6], bytes[7]);
    let (header_len, start) = match major {
        1 => (usize::from(u16::from_le_bytes([bytes[8], bytes[9]])), 10),
        2 | 3 => {
            if bytes.len() < 12 {
                return Err("truncated .npy preamble".into());
            }
            let n = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
            (usize::try_from(n).unwrap_or(usize::MAX), 12)
        }
        _ => return Err(format!(".npy version {major}.{minor} is not supported (1.0, 2.0 and 3.0 are)")),
    };
    if header_len > MAX_HEADER_LEN {
        return Err(format!(".npy header claims {header_len} bytes; more than {MAX_HEADER_LEN} is not accepted"));
    }
    let end = start + header_len;
    let header = bytes.get(start..end).ok_or_else(|| {
        format!(".npy header claims {header_len} bytes but the file has {} after the preamble", bytes.len() - start)
    })?;
    let header = std::str::from_utf8(header).map_err(|_| ".npy header is not text".to_string())?;
    let n = parse_header(header)?;
    let data = &bytes[end..];
    let expected = n.checked_mul(4).ok_or_else(|| format!(".npy shape ({n},) is too large"))?;
    if data.len() as u64 != expected {
        return Err(format!(".npy shape ({n},) needs {expected} data bytes but the file has {}", data.len()));
    }
    Ok(data.chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().expect("4 bytes"))).collect())
}

/// Serializes `values` as a version-1.0 `.npy` file (`'<i4'`, C order, shape `(len,)`), padded as numpy pads.
pub fn write_i32(values: &[i32]) -> Vec<u8> {
    let mut header = format!("{{'descr': '<i4', 'fortran_order': False, 'shape': ({},), }}", values.len());
    // Preamble (10 bytes) + header + newline is a multiple of 64.
    let total = (10 + header.len() + 1).div_ceil(64) * 64;
    while 10 + header.len() + 1 < total {
        header.push(' ');
    }
    header.push('\n');
    let mut out = Vec::with_capacity(total + 4 * values.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    for v in values {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

/// Parses the dict literal; returns `shape[0]`.
fn parse_header(h: &str) -> Result<u64, String> {
    let mut p = Parser { s: h.as_bytes(), i: 0 };
    p.ws();
    p.expect(b'{')?;
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    loop {
        p.ws();
        if p.eat(b'}') {
            break;
        }
        let key = p.string()?;
        p.ws();
        p.expect(b':')?;
        p.ws();
        match key.as_str() {
            "descr" => descr = Some(p.string()?),
            "fortran_order" => fortran = Some(p.boolean()?),
            "shape" => shape = Some(p.tuple()?),
            other => return Err(format!(".npy header has an unexpected key {other:?}")),
        }
        p.ws();
        if !p.eat(b',') {
            p.ws();
            p.expect(b'}')?;
            break;
        }
    }
    p.ws();
    if p.i != p.s.len() {
        return Err(".npy header has text after the dict".into());
    }
    let descr = descr.ok_or(".npy header has no 'descr'")?;
    if descr != "<i4" {
        return Err(format!(".npy dtype is {descr:?}; gene_order.npy must be little-endian int32 ('<i4')"));
    }
    if fortran.ok_or(".npy header has no 'fortran_order'")? {
        return Err(".npy array is in Fortran order; expected fortran_order False".into());
    }
    match shape.ok_or(".npy header has no 'shape'")?.as_slice() {
        [n] => Ok(*n),
        other => Err(format!(".npy shape has {} dimensions; expected a 1-d array", other.len())),
    }
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        if self.s.get(self.i) == Some(&c) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, c: u8) -> Result<(), String> {
        if self.eat(c) { Ok(()) } else { Err(format!(".npy header: expected '{}' at offset {}", c as char, self.i)) }
    }

    fn string(&mut self) -> Result<String, String> {
        let q = *self.s.get(self.i).ok_or(".npy header ends early")?;
        if q != b'\'' && q != b'"' {
            return Err(format!(".npy header: expected a string at offset {}", self.i));
        }
        self.i += 1;
        let start = self.i;
        while self.i < self.s.len() && self.s[self.i] != q {
            if self.s[self.i] == b'\\' {
                return Err(".npy header: escapes in strings are not supported".into());
            }
            self.i += 1;
        }
        if self.i >= self.s.len() {
            return Err(".npy header: unterminated string".into());
        }
        let out = String::from_utf8_lossy(&self.s[start..self.i]).into_owned();
        self.i += 1;
        Ok(out)
    }

    fn boolean(&mut self) -> Result<bool, String> {
        let rest = &self.s[self.i..];
        if rest.starts_with(b"True") {
            self.i += 4;
            Ok(true)
        } else if rest.starts_with(b"False") {
            self.i += 5;
            Ok(false)
        } else {
            Err(format!(".npy header: expected True or False at offset {}", self.i))
        }
    }

    fn tuple(&mut self) -> Result<Vec<u64>, String> {
        self.expect(b'(')?;
        let mut out = Vec::new();
        loop {
            self.ws();
            if self.eat(b')') {
                return Ok(out);
            }
            let start = self.i;
            while self.i < self.s.len() && self.s[self.i].is_ascii_digit() {
                self.i += 1;
            }
            let digits = std::str::from_utf8(&self.s[start..self.i]).expect("ascii digits");
            let n: u64 = digits.parse().map_err(|_| format!(".npy header: expected a dimension at offset {start}"))?;
            if out.len() >= 32 {
                return Err(".npy header: too many dimensions".into());
            }
            out.push(n);
            self.ws();
            if !self.eat(b',') {
                self.ws();
                self.expect(b')')?;
                return Ok(out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_padding() {
        for n in [0usize, 1, 5, 300, 100_000] {
            let v: Vec<i32> = (0..n as i32).rev().collect();
            let b = write_i32(&v);
            assert_eq!((b.len() - 4 * n) % 64, 0);
            assert_eq!(parse_i32(&b).unwrap(), v);
        }
    }

    #[test]
    fn reads_numpy_layouts() {
        let mk = |major: u8, header: &str, data: &[u8]| {
            let mut b = MAGIC.to_vec();
            b.extend_from_slice(&[major, 0]);
            if major == 1 {
                b.extend_from_slice(&(header.len() as u16).to_le_bytes());
            } else {
                b.extend_from_slice(&(header.len() as u32).to_le_bytes());
            }
            b.extend_from_slice(header.as_bytes());
            b.extend_from_slice(data);
            b
        };
        let data = [1u8, 0, 0, 0, 0, 0, 0, 0];
        for major in [1, 2, 3] {
            let b = mk(major, "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }   \n", &data);
            assert_eq!(parse_i32(&b).unwrap(), vec![1, 0]);
        }
        let b = mk(1, "{\"shape\":(2,),\"descr\":\"<i4\",\"fortran_order\":False}", &data);
        assert_eq!(parse_i32(&b).unwrap(), vec![1, 0]);
        for (header, data) in [
            ("{'descr': '<i8', 'fortran_order': False, 'shape': (1,), }", &data[..]),
            ("{'descr': '>i4', 'fortran_order': False, 'shape': (2,), }", &data[..]),
            ("{'descr': '<i4', 'fortran_order': True, 'shape': (2,), }", &data[..]),
            ("{'descr': '<i4', 'fortran_order': False, 'shape': (1, 2), }", &data[..]),
            ("{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }", &data[..]),
            ("{'descr': '<i4', 'fortran_order': False, 'shape': (99999999999999999999,), }", &data[..]),
            ("{'descr': '<i4', 'fortran_order': False, 'shape': (1,), }", &data[..]),
            ("{'descr': '<i4', 'shape': (2,), }", &data[..]),
            ("{'descr': '<i4', 'fortran_order': False, 'shape': (2,), 'x': 1}", &data[..]),
            ("{'descr': '<i4', 'fortran_order': False, 'shape': (2,)", &data[..]),
            ("", &data[..]),
        ] {
            assert!(parse_i32(&mk(1, header, data)).is_err(), "{header}");
        }
        assert!(parse_i32(b"\x93NUMPY\x04\x00\x00\x00").is_err());
        assert!(parse_i32(b"\x93NUMPY\x02\x00\xff\xff\xff\xff").is_err());
        assert!(parse_i32(b"\x93NUMPY\x01\x00\xff\xff{").is_err());
        assert!(parse_i32(b"short").is_err());
    }
}
