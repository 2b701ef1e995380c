//! A small bitmap font (5×8 glyphs for printable ASCII, drawn for this project) and text drawing
//! into RGB8 buffers, so the preview sheet needs no system fonts. Characters outside printable
//! ASCII are drawn as `?`.

use shardtool_core::Rgb8Image;

/// Glyph width in font pixels.
pub(crate) const GLYPH_W: u32 = 5;
/// Glyph height in font pixels (rows 0–6 above the baseline, row 7 for descenders).
pub(crate) const GLYPH_H: u32 = 8;
/// Horizontal advance per character: the glyph plus one blank column.
pub(crate) const ADVANCE: u32 = GLYPH_W + 1;

/// One row per byte, top to bottom; bit 4 is the leftmost pixel. Index `c - 32` for `c` in
/// `' '..='~'`.
#[rustfmt::skip]
const GLYPHS: [[u8; 8]; 95] = [
    [0b00000, 0b00000, 0b00000, 0b00000, 0b00000, 0b00000, 0b00000, 0b00000], // ' '
    [0b00100, 0b00100, 0b00100, 0b00100, 0b00100, 0b00000, 0b00100, 0b00000], // '!'
    [0b01010, 0b01010, 0b01010, 0b00000, 0b00000, 0b00000, 0b00000, 0b00000], // '"'
    [0b01010, 0b01010, 0b11111, 0b01010, 0b11111, 0b01010, 0b01010, 0b00000], // '#'
    [0b00100, 0b01111, 0b10100, 0b01110, 0b00101, 0b11110, 0b00100, 0b00000], // '$'
    [0b11000, 0b11001, 0b00010, 0b00100, 0b01000, 0b10011, 0b00011, 0b00000], // '%'
    [0b01100, 0b10010, 0b10100, 0b01000, 0b10101, 0b10010, 0b01101, 0b00000], // '&'
    [0b00100, 0b00100, 0b01000, 0b00000, 0b00000, 0b00000, 0b00000, 0b00000], // '\''
    [0b00010, 0b00100, 0b01000, 0b01000, 0b01000, 0b00100, 0b00010, 0b00000], // '('
    [0b01000, 0b00100, 0b00010, 0b00010, 0b00010, 0b00100, 0b01000, 0b00000], // ')'
    [0b00000, 0b00100, 0b10101, 0b01110, 0b10101, 0b00100, 0b00000, 0b00000], // '*'
    [0b00000, 0b00100, 0b00100, 0b11111, 0b00100, 0b00100, 0b00000, 0b00000], // '+'
    [0b00000, 0b00000, 0b00000, 0b00000, 0b00000, 0b01100, 0b00100, 0b01000], // ','
    [0b00000, 0b00000, 0b00000, 0b11111, 0b00000, 0b00000, 0b00000, 0b00000], // '-'
    [0b00000, 0b00000, 0b00000, 0b00000, 0b00000, 0b01100, 0b01100, 0b00000], // '.'
    [0b00000, 0b00001, 0b00010, 0b00100, 0b01000, 0b10000, 0b00000, 0b00000], // '/'
    [0b01110, 0b10001, 0b10011, 0b10101, 0b11001, 0b10001, 0b01110, 0b00000], // '0'
    [0b00100, 0b01100, 0b00100, 0b00100, 0b00100, 0b00100, 0b01110, 0b00000], // '1'
    [0b01110, 0b10001, 0b00001, 0b00010, 0b00100, 0b01000, 0b11111, 0b00000], // '2'
    [0b11111, 0b00010, 0b00100, 0b00010, 0b00001, 0b10001, 0b01110, 0b00000], // '3'
    [0b00010, 0b00110, 0b01010, 0b10010, 0b11111, 0b00010, 0b00010, 0b00000], // '4'
    [0b11111, 0b10000, 0b11110, 0b00001, 0b00001, 0b10001, 0b01110, 0b00000], // '5'
    [0b00110, 0b01000, 0b10000, 0b11110, 0b10001, 0b10001, 0b01110, 0b00000], // '6'
    [0b11111, 0b00001, 0b00010, 0b00100, 0b01000, 0b01000, 0b01000, 0b00000], // '7'
    [0b01110, 0b10001, 0b10001, 0b01110, 0b10001, 0b10001, 0b01110, 0b00000], // '8'
    [0b01110, 0b10001, 0b10001, 0b01111, 0b00001, 0b00010, 0b01100, 0b00000], // '9'
    [0b00000, 0b01100, 0b01100, 0b00000, 0b01100, 0b01100, 0b00000, 0b00000], // ':'
    [0b00000, 0b01100, 0b01100, 0b00000, 0b01100, 0b00100, 0b01000, 0b00000], // ';'
    [0b00010, 0b00100, 0b01000, 0b10000, 0b01000, 0b00100, 0b00010, 0b00000], // '<'
    [0b00000, 0b00000, 0b11111, 0b00000, 0b11111, 0b00000, 0b00000, 0b00000], // '='
    [0b01000, 0b00100, 0b00010, 0b00001, 0b00010, 0b00100, 0b01000, 0b00000], // '>'
    [0b01110, 0b10001, 0b00001, 0b00010, 0b00100, 0b00000, 0b00100, 0b00000], // '?'
    [0b01110, 0b10001, 0b10111, 0b10101, 0b10111, 0b10000, 0b01110, 0b00000], // '@'
    [0b01110, 0b10001, 0b10001, 0b11111, 0b10001, 0b10001, 0b10001, 0b00000], // 'A'
    [0b11110, 0b10001, 0b10001, 0b11110, 0b10001, 0b10001, 0b11110, 0b00000], // 'B'
    [0b01110, 0b10001, 0b10000, 0b10000, 0b10000, 0b10001, 0b01110, 0b00000], // 'C'
    [0b11100, 0b10010, 0b10001, 0b10001, 0b10001, 0b10010, 0b11100, 0b00000], // 'D'
    [0b11111, 0b10000, 0b10000, 0b11110, 0b10000, 0b10000, 0b11111, 0b00000], // 'E'
    [0b11111, 0b10000, 0b10000, 0b11110, 0b10000, 0b10000, 0b10000, 0b00000], // 'F'
    [0b01110, 0b10001, 0b10000, 0b10111, 0b10001, 0b10001, 0b01111, 0b00000], // 'G'
    [0b10001, 0b10001, 0b10001, 0b11111, 0b10001, 0b10001, 0b10001, 0b00000], // 'H'
    [0b01110, 0b00100, 0b00100, 0b00100, 0b00100, 0b00100, 0b01110, 0b00000], // 'I'
    [0b00111, 0b00010, 0b00010, 0b00010, 0b00010, 0b10010, 0b01100, 0b00000], // 'J'
    [0b10001, 0b10010, 0b10100, 0b11000, 0b10100, 0b10010, 0b10001, 0b00000], // 'K'
    [0b10000, 0b10000, 0b10000, 0b10000, 0b10000, 0b10000, 0b11111, 0b00000], // 'L'
    [0b10001, 0b11011, 0b10101, 0b10101, 0b10001, 0b10001, 0b10001, 0b00000], // 'M'
    [0b10001, 0b10001, 0b11001, 0b10101, 0b10011, 0b10001, 0b10001, 0b00000], // 'N'
    [0b01110, 0b10001, 0b10001, 0b10001, 0b10001, 0b10001, 0b01110, 0b00000], // 'O'
    [0b11110, 0b10001, 0b10001, 0b11110, 0b10000, 0b10000, 0b10000, 0b00000], // 'P'
    [0b01110, 0b10001, 0b10001, 0b10001, 0b10101, 0b10010, 0b01101, 0b00000], // 'Q'
    [0b11110, 0b10001, 0b10001, 0b11110, 0b10100, 0b10010, 0b10001, 0b00000], // 'R'
    [0b01111, 0b10000, 0b10000, 0b01110, 0b00001, 0b00001, 0b11110, 0b00000], // 'S'
    [0b11111, 0b00100, 0b00100, 0b00100, 0b00100, 0b00100, 0b00100, 0b00000], // 'T'
    [0b10001, 0b10001, 0b10001, 0b10001, 0b10001, 0b10001, 0b01110, 0b00000], // 'U'
    [0b10001, 0b10001, 0b10001, 0b10001, 0b10001, 0b01010, 0b00100, 0b00000], // 'V'
    [0b10001, 0b10001, 0b10001, 0b10101, 0b10101, 0b10101, 0b01010, 0b00000], // 'W'
    [0b10001, 0b10001, 0b01010, 0b00100, 0b01010, 0b10001, 0b10001, 0b00000], // 'X'
    [0b10001, 0b10001, 0b01010, 0b00100, 0b00100, 0b00100, 0b00100, 0b00000], // 'Y'
    [0b11111, 0b00001, 0b00010, 0b00100, 0b01000, 0b10000, 0b11111, 0b00000], // 'Z'
    [0b01110, 0b01000, 0b01000, 0b01000, 0b01000, 0b01000, 0b01110, 0b00000], // '['
    [0b00000, 0b10000, 0b01000, 0b00100, 0b00010, 0b00001, 0b00000, 0b00000], // '\\'
    [0b01110, 0b00010, 0b00010, 0b00010, 0b00010, 0b00010, 0b01110, 0b00000], // ']'
    [0b00100, 0b01010, 0b10001, 0b00000, 0b00000, 0b00000, 0b00000, 0b00000], // '^'
    [0b00000, 0b00000, 0b00000, 0b00000, 0b00000, 0b00000, 0b11111, 0b00000], // '_'
    [0b01000, 0b00100, 0b00010, 0b00000, 0b00000, 0b00000, 0b00000, 0b00000], // '`'
    [0b00000, 0b00000, 0b01110, 0b00001, 0b01111, 0b10001, 0b01111, 0b00000], // 'a'
    [0b10000, 0b10000, 0b10110, 0b11001, 0b10001, 0b10001, 0b11110, 0b00000], // 'b'
    [0b00000, 0b00000, 0b01110, 0b10000, 0b10000, 0b10001, 0b01110, 0b00000], // 'c'
    [0b00001, 0b00001, 0b01101, 0b10011, 0b10001, 0b10001, 0b01111, 0b00000], // 'd'
    [0b00000, 0b00000, 0b01110, 0b10001, 0b11111, 0b10000, 0b01110, 0b00000], // 'e'
    [0b00110, 0b01001, 0b01000, 0b11100, 0b01000, 0b01000, 0b01000, 0b00000], // 'f'
    [0b00000, 0b00000, 0b01111, 0b10001, 0b10001, 0b01111, 0b00001, 0b01110], // 'g'
    [0b10000, 0b10000, 0b10110, 0b11001, 0b10001, 0b10001, 0b10001, 0b00000], // 'h'
    [0b00100, 0b00000, 0b01100, 0b00100, 0b00100, 0b00100, 0b01110, 0b00000], // 'i'
    [0b00010, 0b00000, 0b00110, 0b00010, 0b00010, 0b00010, 0b10010, 0b01100], // 'j'
    [0b10000, 0b10000, 0b10010, 0b10100, 0b11000, 0b10100, 0b10010, 0b00000], // 'k'
    [0b01100, 0b00100, 0b00100, 0b00100, 0b00100, 0b00100, 0b01110, 0b00000], // 'l'
    [0b00000, 0b00000, 0b11010, 0b10101, 0b10101, 0b10001, 0b10001, 0b00000], // 'm'
    [0b00000, 0b00000, 0b10110, 0b11001, 0b10001, 0b10001, 0b10001, 0b00000], // 'n'
    [0b00000, 0b00000, 0b01110, 0b10001, 0b10001, 0b10001, 0b01110, 0b00000], // 'o'
    [0b00000, 0b00000, 0b11110, 0b10001, 0b10001, 0b11110, 0b10000, 0b10000], // 'p'
    [0b00000, 0b00000, 0b01111, 0b10001, 0b10001, 0b01111, 0b00001, 0b00001], // 'q'
    [0b00000, 0b00000, 0b10110, 0b11001, 0b10000, 0b10000, 0b10000, 0b00000], // 'r'
    [0b00000, 0b00000, 0b01111, 0b10000, 0b01110, 0b00001, 0b11110, 0b00000], // 's'
    [0b01000, 0b01000, 0b11100, 0b01000, 0b01000, 0b01001, 0b00110, 0b00000], // 't'
    [0b00000, 0b00000, 0b10001, 0b10001, 0b10001, 0b10011, 0b01101, 0b00000], // 'u'
    [0b00000, 0b00000, 0b10001, 0b10001, 0b10001, 0b01010, 0b00100, 0b00000], // 'v'
    [0b00000, 0b00000, 0b10001, 0b10001, 0b10101, 0b10101, 0b01010, 0b00000], // 'w'
    [0b00000, 0b00000, 0b10001, 0b01010, 0b00100, 0b01010, 0b10001, 0b00000], // 'x'
    [0b00000, 0b00000, 0b10001, 0b10001, 0b10001, 0b01111, 0b00001, 0b01110], // 'y'
    [0b00000, 0b00000, 0b11111, 0b00010, 0b00100, 0b01000, 0b11111, 0b00000], // 'z'
    [0b00011, 0b00100, 0b00100, 0b01000, 0b00100, 0b00100, 0b00011, 0b00000], // '{'
    [0b00100, 0b00100, 0b00100, 0b00100, 0b00100, 0b00100, 0b00100, 0b00000], // '|'
    [0b11000, 0b00100, 0b00100, 0b00010, 0b00100, 0b00100, 0b11000, 0b00000], // '}'
    [0b00000, 0b00000, 0b01000, 0b10101, 0b00010, 0b00000, 0b00000, 0b00000], // '~'
];

/// The rows of `c`'s glyph (`?` for anything but printable ASCII).
pub(crate) fn glyph(c: char) -> &'static [u8; 8] {
    let i = match c {
        ' '..='~' => c as usize - 32,
        _ => '?' as usize - 32,
    };
    &GLYPHS[i]
}

/// Width in pixels of `text` drawn at `scale`, without the trailing blank column.
pub(crate) fn text_width(text: &str, scale: u32) -> u32 {
    let n = text.chars().count() as u32;
    if n == 0 {
        0
    } else {
        (n * ADVANCE - 1) * scale
    }
}

/// Cuts `text` to at most `max_px` pixels at `scale`, ending in `..` when cut.
pub(crate) fn fit_text(text: &str, scale: u32, max_px: u32) -> String {
    if text_width(text, scale) <= max_px {
        return text.to_string();
    }
    let fits = ((max_px / scale + 1) / ADVANCE) as usize;
    let keep = fits.saturating_sub(2);
    let mut s: String = text.chars().take(keep).collect();
    s.push_str(&"..."[..fits.min(2)]);
    s
}

/// Draws `text` with its top-left corner at `(x, y)`, each font pixel a `scale`×`scale` square.
/// Pixels outside the image are skipped.
pub(crate) fn draw_text(
    img: &mut Rgb8Image,
    x: u32,
    y: u32,
    text: &str,
    scale: u32,
    color: [u8; 3],
) {
    let mut cx = x;
    for c in text.chars() {
        let rows = glyph(c);
        for (gy, bits) in rows.iter().enumerate() {
            for gx in 0..GLYPH_W {
                if bits & (1 << (GLYPH_W - 1 - gx)) == 0 {
                    continue;
                }
                let px = cx + gx * scale;
                let py = y + gy as u32 * scale;
                fill_rect(img, px, py, scale, scale, color);
            }
        }
        cx += ADVANCE * scale;
    }
}

/// Fills a rectangle, clipped to the image.
pub(crate) fn fill_rect(img: &mut Rgb8Image, x: u32, y: u32, w: u32, h: u32, color: [u8; 3]) {
    let x1 = x.saturating_add(w).min(img.width);
    let y1 = y.saturating_add(h).min(img.height);
    for yy in y.min(y1)..y1 {
        let row = yy as usize * img.width as usize;
        for xx in x.min(x1)..x1 {
            let i = (row + xx as usize) * 3;
            img.pixels[i..i + 3].copy_from_slice(&color);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canvas(w: u32, h: u32) -> Rgb8Image {
        Rgb8Image::new(w, h, vec![0; (w * h * 3) as usize]).unwrap()
    }

    #[test]
    fn every_printable_glyph_but_space_has_ink_and_fits_five_columns() {
        for c in '!'..='~' {
            let g = glyph(c);
            assert!(g.iter().any(|&r| r != 0), "{c:?} is blank");
            assert!(g.iter().all(|&r| r < 32), "{c:?} is wider than 5");
        }
        assert!(glyph(' ').iter().all(|&r| r == 0));
        assert_eq!(glyph('é'), glyph('?'));
        assert_eq!(glyph('\n'), glyph('?'));
    }

    #[test]
    fn glyphs_are_distinct() {
        let mut seen = std::collections::HashMap::new();
        for c in ' '..='~' {
            if let Some(other) = seen.insert(*glyph(c), c) {
                panic!("{c:?} looks like {other:?}");
            }
        }
    }

    #[test]
    fn drawing_is_clipped_and_scaled() {
        let mut img = canvas(20, 20);
        draw_text(&mut img, 15, 15, "WW", 2, [255, 0, 0]);
        let lit = img.pixels.chunks(3).filter(|p| p[0] == 255).count();
        assert!(lit > 0);
        let mut img = canvas(40, 20);
        draw_text(&mut img, 0, 0, "I", 2, [255, 255, 255]);
        // 'I' has a 3-pixel top bar at columns 1..4, so x = 2..8 is lit on rows 0..2 at scale 2.
        let at = |x: usize, y: usize| img.pixels[(y * 40 + x) * 3];
        assert_eq!((at(1, 0), at(2, 0), at(7, 1), at(8, 0)), (0, 255, 255, 0));
        assert_eq!(text_width("abc", 2), (3 * 6 - 1) * 2);
    }

    /// Writes every glyph at 1x, 2x and 4x to `$FONT_CHART` (default: the temp dir) for a person
    /// to look at: `cargo test -p shardtool-verify font_chart -- --ignored`.
    #[test]
    #[ignore]
    fn font_chart() {
        let mut img = canvas(620, 150);
        let all: String = (' '..='~').collect();
        for (row, chunk) in all.as_bytes().chunks(48).enumerate() {
            let text = std::str::from_utf8(chunk).unwrap();
            draw_text(&mut img, 4, 4 + row as u32 * 10, text, 1, [255, 255, 255]);
            draw_text(&mut img, 4, 40 + row as u32 * 20, text, 2, [255, 255, 255]);
        }
        draw_text(&mut img, 4, 104, "Flower leaf_01 gjpqy", 4, [255, 255, 0]);
        let path = std::env::var_os("FONT_CHART")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| std::env::temp_dir().join("font_chart.png"));
        std::fs::write(&path, crate::encode_png(&img).unwrap()).unwrap();
    }

    #[test]
    fn long_text_is_cut_with_dots() {
        let s = fit_text("a-very-long-class-name", 2, 100);
        assert!(text_width(&s, 2) <= 100, "{s}");
        assert!(s.ends_with(".."), "{s}");
        assert_eq!(fit_text("short", 2, 100), "short");
    }
}
