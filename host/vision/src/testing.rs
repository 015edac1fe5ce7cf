//! Inputs for tests of image limits: PNGs written by hand, so that a test can claim any size
//! without an encoder allocating the pixels.

/// A PNG whose header claims `w` x `h` 8-bit RGB pixels, with empty pixel data: what an attacker
/// sends to make a decoder allocate.
pub fn png_header(w: u32, h: u32) -> Vec<u8> {
    png(w, h, 2, 8, &[])
}

/// A valid PNG of `w` x `h` black pixels, PNG colour type `color` (0 gray, 2 RGB, 4 gray and
/// alpha, 6 RGBA) at `depth` 8 or 16 bits per sample, about 160 bytes of pixel data per byte of
/// file: the decompression bomb of issue 52 (50 megapixels of 16-bit RGB, 300 MB decoded, is a
/// 2 MB file).
pub fn blank_png(w: u32, h: u32, color: u8, depth: u8) -> Vec<u8> {
    let channels = match color {
        0 => 1,
        2 => 3,
        4 => 2,
        6 => 4,
        _ => panic!("PNG colour type {color}: 0, 2, 4 or 6"),
    };
    assert!(depth == 8 || depth == 16, "depth {depth}: 8 or 16");
    // Each row: filter type 0 (none), then zero samples.
    let row = 1 + w as usize * channels * usize::from(depth / 8);
    png(w, h, color, depth, &zlib_zeros(row * h as usize))
}

/// A PNG file: the signature, `IHDR`, one `IDAT` of `idat`, `IEND`.
fn png(w: u32, h: u32, color: u8, depth: u8, idat: &[u8]) -> Vec<u8> {
    let mut ihdr = Vec::with_capacity(13);
    ihdr.extend(w.to_be_bytes());
    ihdr.extend(h.to_be_bytes());
    // Bit depth, colour type, compression, filter, interlace.
    ihdr.extend([depth, color, 0, 0, 0]);
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    chunk(&mut out, b"IHDR", &ihdr);
    chunk(&mut out, b"IDAT", idat);
    chunk(&mut out, b"IEND", &[]);
    out
}

/// Append a chunk: length, type, data, CRC-32 of type and data.
fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend((data.len() as u32).to_be_bytes());
    let start = out.len();
    out.extend(kind);
    out.extend(data);
    let crc = crc32(&out[start..]);
    out.extend(crc.to_be_bytes());
}

/// CRC-32 (ISO-HDLC, as PNG uses it).
fn crc32(bytes: &[u8]) -> u32 {
    let mut table = [0u32; 256];
    for (n, t) in table.iter_mut().enumerate() {
        let mut c = n as u32;
        for _ in 0..8 {
            c = if c & 1 == 1 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
        }
        *t = c;
    }
    !bytes.iter().fold(!0u32, |c, &b| {
        table[((c ^ u32::from(b)) & 0xff) as usize] ^ (c >> 8)
    })
}

/// A zlib stream (RFC 1950) of `n` zero bytes: one deflate block with the fixed Huffman codes
/// (RFC 1951 3.2.6), a literal zero, then copies of 258 bytes at distance 1 (13 bits each), the
/// remainder as literals.
fn zlib_zeros(n: usize) -> Vec<u8> {
    let mut bits = Bits::default();
    bits.put(1, 1); // BFINAL
    bits.put(1, 2); // BTYPE 01: fixed codes
    let mut left = n;
    if left > 0 {
        bits.code(0x30, 8); // literal 0
        left -= 1;
    }
    while left >= 258 {
        bits.code(0xc5, 8); // length 258 (code 285)
        bits.code(0, 5); // distance 1 (code 0)
        left -= 258;
    }
    for _ in 0..left {
        bits.code(0x30, 8);
    }
    bits.code(0, 7); // end of block (256)
    let mut out = vec![0x78, 0x01];
    out.extend(bits.finish());
    // Adler-32 of zeros: A stays 1, B adds 1 per byte.
    let adler = (((n % 65_521) as u32) << 16) | 1;
    out.extend(adler.to_be_bytes());
    out
}

/// Deflate's bit order: fields least significant bit first, Huffman codes most significant
/// first.
#[derive(Default)]
struct Bits {
    out: Vec<u8>,
    acc: u64,
    len: u32,
}

impl Bits {
    fn put(&mut self, v: u32, n: u32) {
        self.acc |= u64::from(v) << self.len;
        self.len += n;
        while self.len >= 8 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.len -= 8;
        }
    }

    fn code(&mut self, code: u32, n: u32) {
        self.put(code.reverse_bits() >> (32 - n), n);
    }

    fn finish(mut self) -> Vec<u8> {
        if self.len > 0 {
            self.out.push(self.acc as u8);
        }
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blank_pngs_decode_with_the_image_crate() {
        assert_eq!(crc32(b"IEND"), 0xae42_6082);
        for (color, depth) in [(0, 8), (2, 8), (4, 16), (6, 16), (2, 16)] {
            let png = blank_png(301, 7, color, depth);
            let img = image::load_from_memory(&png).expect("a valid PNG");
            assert_eq!((img.width(), img.height()), (301, 7));
            assert!(img.to_rgb8().into_raw().iter().all(|&b| b == 0));
        }
    }
}
