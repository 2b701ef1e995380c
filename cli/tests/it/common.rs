//! Helpers shared by the end-to-end tests of the `shardtool` binary: running it, generating input
//! images (including hand-made malformed ones), and reading back the datasets it writes.

use image::{DynamicImage, ImageFormat, Rgb, RgbImage};
use serde_json::Value;
use shardtool_manifest::{Manifest, ShardEntry};
use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_shardtool");

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("cli/ has a parent")
        .to_path_buf()
}

/// `sample-data/imagefolder`: 45 real photos in 4 classes.
pub fn sample_data() -> PathBuf {
    repo_root().join("sample-data/imagefolder")
}

/// A committed fixture from `tests/fixtures/` (made by `tests/fixtures/make_fixtures.py`).
pub fn fixture(name: &str) -> PathBuf {
    repo_root().join("tests/fixtures").join(name)
}

/// A temporary directory for one test.
pub fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("shardtool-e2e-")
        .tempdir()
        .expect("create a temporary directory")
}

// ---------------------------------------------------------------------------------------------
// Running the binary
// ---------------------------------------------------------------------------------------------

/// The outcome of one run of the binary.
#[derive(Debug)]
pub struct Run {
    /// The exit code (`None` when killed by a signal).
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
    /// The command line, for messages.
    pub cmdline: String,
}

impl Run {
    /// Panics with the whole output unless the exit code is `code`.
    #[track_caller]
    pub fn assert_code(&self, code: i32) -> &Self {
        assert_eq!(
            self.code,
            Some(code),
            "`{}` exited with {:?}, expected {code}\n--- stdout\n{}\n--- stderr\n{}",
            self.cmdline,
            self.code,
            self.stdout,
            self.stderr
        );
        self
    }

    /// Panics unless the run succeeded.
    #[track_caller]
    pub fn assert_ok(&self) -> &Self {
        self.assert_code(0)
    }
}

/// A command line being built.
pub struct Cmd {
    cmd: Command,
    line: Vec<String>,
}

impl Cmd {
    /// `shardtool ARGS…`.
    pub fn new<I, S>(args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut c = Self {
            cmd: Command::new(BIN),
            line: vec!["shardtool".into()],
        };
        for a in args {
            c = c.arg(a);
        }
        c
    }

    /// Appends one argument.
    pub fn arg(mut self, a: impl AsRef<OsStr>) -> Self {
        self.line.push(a.as_ref().to_string_lossy().into_owned());
        self.cmd.arg(a);
        self
    }

    /// Appends arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        for a in args {
            self = self.arg(a);
        }
        self
    }

    /// Sets an environment variable.
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.cmd.env(key, value);
        self
    }

    /// Removes an environment variable.
    pub fn env_remove(mut self, key: impl AsRef<OsStr>) -> Self {
        self.cmd.env_remove(key);
        self
    }

    /// Sets each of `vars` (a test server's `env()`, say).
    pub fn envs<K: AsRef<OsStr>, V: AsRef<OsStr>>(
        mut self,
        vars: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        self.cmd.envs(vars);
        self
    }

    /// Runs in `dir`.
    pub fn current_dir(mut self, dir: impl AsRef<Path>) -> Self {
        self.cmd.current_dir(dir);
        self
    }

    /// Runs to completion.
    pub fn run(mut self) -> Run {
        let out = self
            .cmd
            .output()
            .unwrap_or_else(|e| panic!("cannot run {BIN}: {e}"));
        Run {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            cmdline: self.line.join(" "),
        }
    }

    /// Starts it in the background, its output discarded (for tests that kill it).
    pub fn spawn(mut self) -> std::process::Child {
        self.cmd
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {BIN}: {e}"))
    }

    /// Starts it in the background, its output kept for `wait_with_output`.
    pub fn spawn_piped(mut self) -> std::process::Child {
        self.cmd
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {BIN}: {e}"))
    }

    /// Runs and asserts success.
    #[track_caller]
    pub fn ok(self) -> Run {
        let r = self.run();
        r.assert_ok();
        r
    }
}

/// `shardtool pack INPUT OUTPUT`.
pub fn pack(input: impl AsRef<OsStr>, output: impl AsRef<OsStr>) -> Cmd {
    Cmd::new([OsStr::new("pack"), input.as_ref(), output.as_ref()])
}

/// `shardtool pack --list LIST OUTPUT`.
pub fn pack_list(list: impl AsRef<OsStr>, output: impl AsRef<OsStr>) -> Cmd {
    Cmd::new([
        OsStr::new("pack"),
        OsStr::new("--list"),
        list.as_ref(),
        output.as_ref(),
    ])
}

// ---------------------------------------------------------------------------------------------
// Making inputs
// ---------------------------------------------------------------------------------------------

/// Writes `bytes` to `path`, creating parent folders.
pub fn write_file(path: impl AsRef<Path>, bytes: impl AsRef<[u8]>) {
    let path = path.as_ref();
    if let Some(p) = path.parent() {
        std::fs::create_dir_all(p).unwrap();
    }
    std::fs::write(path, bytes).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

fn mix(mut z: u32) -> u32 {
    z = (z ^ (z >> 16)).wrapping_mul(0x7feb_352d);
    z = (z ^ (z >> 15)).wrapping_mul(0x846c_a68b);
    z ^ (z >> 16)
}

/// An ImageFolder of `n` small JPEGs (`root/c/<i>.jpg`, `w`x`h`, each a different picture).
pub fn jpeg_folder(root: &Path, n: u32, w: u32, h: u32) {
    for i in 0..n {
        write_file(root.join(format!("c/{i}.jpg")), jpeg(&pattern(w, h, i)));
    }
}

/// A deterministic picture with gradients and 8x8 blocks of pseudo-random colour, different for
/// every `seed`.
pub fn pattern(w: u32, h: u32, seed: u32) -> RgbImage {
    RgbImage::from_fn(w, h, |x, y| {
        let n = mix(seed.wrapping_mul(0x9e37_79b9) ^ mix((x / 8) << 16 | (y / 8)));
        Rgb([
            ((x * 255 / w.max(1)) as u8) ^ (n & 0x3f) as u8,
            ((y * 255 / h.max(1)) as u8) ^ ((n >> 8) & 0x3f) as u8,
            (n >> 16) as u8,
        ])
    })
}

/// A picture whose quadrants are red (top-left), green (top-right), blue (bottom-left) and white
/// (bottom-right), for checking orientation.
pub fn quadrants(w: u32, h: u32) -> RgbImage {
    RgbImage::from_fn(w, h, |x, y| {
        let (top, left) = (y < h / 2, x < w / 2);
        Rgb(match (top, left) {
            (true, true) => RED,
            (true, false) => GREEN,
            (false, true) => BLUE,
            (false, false) => WHITE,
        })
    })
}

/// Quadrant colours.
pub const RED: [u8; 3] = [255, 0, 0];
/// Quadrant colours.
pub const GREEN: [u8; 3] = [0, 255, 0];
/// Quadrant colours.
pub const BLUE: [u8; 3] = [0, 0, 255];
/// Quadrant colours.
pub const WHITE: [u8; 3] = [255, 255, 255];

/// Encodes `img` in `format` (JPEG at quality 95, WebP lossless).
pub fn encode(img: &DynamicImage, format: ImageFormat) -> Vec<u8> {
    let mut out = std::io::Cursor::new(Vec::new());
    if format == ImageFormat::Jpeg {
        let enc = image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 95);
        img.write_with_encoder(enc).unwrap();
    } else {
        img.write_to(&mut out, format)
            .unwrap_or_else(|e| panic!("encode {format:?}: {e}"));
    }
    out.into_inner()
}

/// JPEG bytes of `img` at quality 95.
pub fn jpeg(img: &RgbImage) -> Vec<u8> {
    encode(&DynamicImage::ImageRgb8(img.clone()), ImageFormat::Jpeg)
}

/// PNG bytes of `img`.
pub fn png(img: &DynamicImage) -> Vec<u8> {
    encode(img, ImageFormat::Png)
}

/// Writes `img` to `path`, choosing the format by extension.
pub fn save(path: impl AsRef<Path>, img: &DynamicImage) {
    let path = path.as_ref();
    let format = ImageFormat::from_path(path).expect("an image extension");
    write_file(path, encode(img, format));
}

/// Writes an RGB picture as JPEG or PNG (by extension).
pub fn save_rgb(path: impl AsRef<Path>, img: &RgbImage) {
    save(path, &DynamicImage::ImageRgb8(img.clone()));
}

/// The JPEG `jpeg` with an EXIF APP1 segment holding only `Orientation = o`, inserted right after
/// SOI (a minimal little-endian TIFF structure with one IFD entry).
pub fn with_exif_orientation(jpeg: &[u8], o: u16) -> Vec<u8> {
    assert_eq!(&jpeg[..2], &[0xFF, 0xD8], "not a JPEG");
    let mut tiff = Vec::new();
    tiff.extend_from_slice(b"II");
    tiff.extend_from_slice(&42u16.to_le_bytes());
    tiff.extend_from_slice(&8u32.to_le_bytes());
    tiff.extend_from_slice(&1u16.to_le_bytes());
    tiff.extend_from_slice(&0x0112u16.to_le_bytes()); // Orientation
    tiff.extend_from_slice(&3u16.to_le_bytes()); // SHORT
    tiff.extend_from_slice(&1u32.to_le_bytes());
    tiff.extend_from_slice(&o.to_le_bytes());
    tiff.extend_from_slice(&[0, 0]);
    tiff.extend_from_slice(&0u32.to_le_bytes());
    let mut out = jpeg[..2].to_vec();
    out.extend_from_slice(&[0xFF, 0xE1]);
    out.extend_from_slice(&((2 + 6 + tiff.len()) as u16).to_be_bytes());
    out.extend_from_slice(b"Exif\0\0");
    out.extend_from_slice(&tiff);
    out.extend_from_slice(&jpeg[2..]);
    out
}

/// The PNG `png` with an `eXIf` chunk holding only `Orientation = o`, right after IHDR.
pub fn png_with_exif_orientation(png: &[u8], o: u16) -> Vec<u8> {
    assert_eq!(&png[12..16], b"IHDR", "not a PNG");
    let app1 = with_exif_orientation(&[0xFF, 0xD8], o);
    // Skip SOI, the APP1 marker and length, and "Exif\0\0": what is left is the TIFF structure.
    let tiff = &app1[2 + 4 + 6..];
    let mut out = png[..33].to_vec();
    png_chunk(&mut out, b"eXIf", tiff);
    out.extend_from_slice(&png[33..]);
    out
}

/// CRC-32 (ISO-HDLC), as PNG chunks use.
pub fn crc32(parts: &[&[u8]]) -> u32 {
    let mut crc = 0xFFFF_FFFFu32;
    for part in parts {
        for &b in *part {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ 0xEDB8_8320
                } else {
                    crc >> 1
                };
            }
        }
    }
    !crc
}

fn png_chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    out.extend_from_slice(&crc32(&[kind, data]).to_be_bytes());
}

/// LSB-first bit writer for deflate.
struct Bits {
    out: Vec<u8>,
    acc: u64,
    n: u32,
}

impl Bits {
    fn put(&mut self, value: u64, count: u32) {
        self.acc |= value << self.n;
        self.n += count;
        while self.n >= 8 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.n -= 8;
        }
    }

    /// A Huffman code, which deflate stores most significant bit first.
    fn code(&mut self, code: u32, len: u32) {
        let rev = code.reverse_bits() >> (32 - len);
        self.put(u64::from(rev), len);
    }
}

/// A complete, valid 1-bit greyscale PNG of `w`x`h` black pixels: a real decompression bomb.
/// Its zlib stream is one fixed-Huffman block of back-references (258 zero bytes per 13 bits), so
/// a 30000x30000 image (112 MB of scanlines, 900 MB as 8-bit pixels) takes about 700 KB.
pub fn png_bomb(w: u32, h: u32) -> Vec<u8> {
    let row = 1 + u64::from(w).div_ceil(8);
    let z = zlib_zeros(row * u64::from(h));
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&w.to_be_bytes());
    ihdr.extend_from_slice(&h.to_be_bytes());
    ihdr.extend_from_slice(&[1, 0, 0, 0, 0]); // 1-bit greyscale
    png_chunk(&mut out, b"IHDR", &ihdr);
    png_chunk(&mut out, b"IDAT", &z);
    png_chunk(&mut out, b"IEND", &[]);
    out
}

/// A valid 8x8 black RGB PNG whose ICC profile (`iCCP`) inflates to `inflated` zero bytes.
pub fn png_icc_bomb(inflated: u64) -> Vec<u8> {
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&8u32.to_be_bytes());
    ihdr.extend_from_slice(&8u32.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]); // 8-bit RGB
    png_chunk(&mut out, b"IHDR", &ihdr);
    let mut icc = b"icc\0\0".to_vec(); // its name, then compression method 0
    icc.extend(zlib_zeros(inflated));
    png_chunk(&mut out, b"iCCP", &icc);
    png_chunk(&mut out, b"IDAT", &zlib_zeros(8 * (1 + 8 * 3)));
    png_chunk(&mut out, b"IEND", &[]);
    out
}

/// A zlib stream of `total` zero bytes (at least 1): one fixed-Huffman block of
/// back-references, 258 zero bytes per 13 bits.
fn zlib_zeros(total: u64) -> Vec<u8> {
    let mut bits = Bits {
        out: vec![0x78, 0x01],
        acc: 0,
        n: 0,
    };
    bits.put(1, 1); // BFINAL
    bits.put(1, 2); // BTYPE = fixed Huffman
    bits.code(0b0011_0000, 8); // literal 0
    let mut left = total - 1;
    while left >= 258 {
        bits.code(0b1100_0101, 8); // length code 285: 258 bytes
        bits.code(0, 5); // distance code 0: distance 1
        left -= 258;
    }
    for _ in 0..left {
        bits.code(0b0011_0000, 8);
    }
    bits.code(0, 7); // end of block
    if bits.n > 0 {
        bits.put(0, 8 - bits.n);
    }
    // Adler-32 of `total` zero bytes: a stays 1, b adds 1 per byte.
    let adler = ((total % 65_521) << 16) as u32 | 1;
    let mut z = bits.out;
    z.extend_from_slice(&adler.to_be_bytes());
    z
}

/// Deterministic pseudo-random bytes that start with no image signature.
pub fn random_bytes(len: usize, seed: u32) -> Vec<u8> {
    let mut v: Vec<u8> = (0..len as u32)
        .map(|i| mix(i ^ seed.wrapping_mul(0x9e37_79b9)) as u8)
        .collect();
    v[..4].copy_from_slice(b"\x7fRND");
    v
}

// ---------------------------------------------------------------------------------------------
// Reading outputs
// ---------------------------------------------------------------------------------------------

/// `xxh3:<16 hex>` of `bytes`, the manifest's checksum format.
pub fn xxh3(bytes: &[u8]) -> String {
    format!("xxh3:{:016x}", xxhash_rust::xxh3::xxh3_64(bytes))
}

/// Reads and validates `DIR/manifest.json`.
#[track_caller]
pub fn manifest(dir: &Path) -> Manifest {
    let bytes = std::fs::read(dir.join("manifest.json"))
        .unwrap_or_else(|e| panic!("read {}/manifest.json: {e}", dir.display()));
    Manifest::from_slice(&bytes, 1 << 24)
        .unwrap_or_else(|e| panic!("{}/manifest.json is invalid: {e}", dir.display()))
}

/// One line of `errors.jsonl`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorLine {
    /// The input path.
    pub path: String,
    /// The failure class.
    pub kind: String,
    /// The reason.
    pub message: String,
}

/// Reads `DIR/errors.jsonl`, checking that every line is an object with exactly the string fields
/// `path`, `kind` and `message`, none empty.
#[track_caller]
pub fn errors(dir: &Path) -> Vec<ErrorLine> {
    let text = std::fs::read_to_string(dir.join("errors.jsonl"))
        .unwrap_or_else(|e| panic!("read {}/errors.jsonl: {e}", dir.display()));
    text.lines()
        .map(|line| {
            let v: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("errors.jsonl line {line:?}: {e}"));
            let obj = v.as_object().expect("an errors.jsonl line is an object");
            assert_eq!(obj.len(), 3, "unexpected fields in {line}");
            let field = |k: &str| {
                let s = obj
                    .get(k)
                    .and_then(Value::as_str)
                    .unwrap_or_else(|| panic!("{k} missing in {line}"));
                assert!(!s.is_empty(), "{k} is empty in {line}");
                s.to_string()
            };
            ErrorLine {
                path: field("path"),
                kind: field("kind"),
                message: field("message"),
            }
        })
        .collect()
}

/// `zstd -d -c FILE`.
#[track_caller]
pub fn zstd_decompress(path: &Path) -> Vec<u8> {
    let out = Command::new("zstd")
        .args(["-d", "-c", "-q"])
        .arg(path)
        .output()
        .unwrap_or_else(|e| panic!("cannot run zstd (needed to check .zst shards): {e}"));
    assert!(
        out.status.success(),
        "zstd -d {} failed: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The uncompressed bytes of a shard, checking its stored size and checksum on the way.
#[track_caller]
pub fn shard_bytes(dir: &Path, entry: &ShardEntry) -> Vec<u8> {
    let path = dir.join(&entry.file);
    let stored = std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    assert_eq!(stored.len() as u64, entry.bytes, "{} size", entry.file);
    assert_eq!(xxh3(&stored), entry.checksum, "{} checksum", entry.file);
    if entry.compression.is_some() {
        let plain = zstd_decompress(&path);
        assert_eq!(
            Some(plain.len() as u64),
            entry.uncompressed_bytes,
            "{} uncompressed size",
            entry.file
        );
        assert_eq!(
            Some(xxh3(&plain)),
            entry.uncompressed_checksum,
            "{} uncompressed checksum",
            entry.file
        );
        plain
    } else {
        stored
    }
}

/// One sample of a WebDataset shard.
#[derive(Debug, Clone)]
pub struct WdsSample {
    /// The key.
    pub key: String,
    /// The `cls` field, parsed.
    pub cls: i64,
    /// The `json` field, parsed.
    pub json: Value,
    /// `jpg` or `png`.
    pub field: String,
    /// The image bytes.
    pub image: Vec<u8>,
    /// Index of the shard in the manifest.
    pub shard: usize,
    /// Bytes the sample's three members take in the tar stream.
    pub tar_bytes: u64,
}

impl WdsSample {
    /// The `source` of the json.
    pub fn source(&self) -> &str {
        self.json["source"].as_str().expect("json.source")
    }

    /// `(width, height)` of the json.
    pub fn size(&self) -> (u32, u32) {
        (
            json_u32(&self.json, "width"),
            json_u32(&self.json, "height"),
        )
    }

    /// `(orig_width, orig_height)` of the json.
    pub fn orig_size(&self) -> (u32, u32) {
        (
            json_u32(&self.json, "orig_width"),
            json_u32(&self.json, "orig_height"),
        )
    }

    /// The decoded image.
    pub fn decode(&self) -> RgbImage {
        decode(&self.image)
    }
}

/// A `u32` field of a json object.
#[track_caller]
pub fn json_u32(v: &Value, k: &str) -> u32 {
    v[k].as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .unwrap_or_else(|| panic!("{k} missing in {v}"))
}

/// Decodes an image into RGB8.
#[track_caller]
pub fn decode(bytes: &[u8]) -> RgbImage {
    image::load_from_memory(bytes)
        .unwrap_or_else(|e| panic!("cannot decode output image: {e}"))
        .into_rgb8()
}

fn tar_member_size(len: usize) -> u64 {
    512 + (len as u64).div_ceil(512) * 512
}

/// Every sample of a WebDataset dataset, in shard order, checking the manifest on the way: shard
/// sizes and checksums, per-shard sample counts, the fields of every sample, and that `cls` and
/// the json's key and label agree with the tar.
#[track_caller]
pub fn wds_samples(dir: &Path) -> Vec<WdsSample> {
    let m = manifest(dir);
    let mut all = Vec::new();
    for (i, entry) in m.shards.iter().enumerate() {
        assert_eq!(entry.format, shardtool_manifest::ShardFormat::Wds);
        let bytes = shard_bytes(dir, entry);
        let (samples, err) = shardtool_wds::group_samples(&bytes);
        assert!(err.is_none(), "{}: {err:?}", entry.file);
        assert_eq!(
            samples.len() as u64,
            entry.samples,
            "{} sample count",
            entry.file
        );
        for s in samples {
            let mut names: Vec<&str> = s.fields.iter().map(|(f, _)| f.as_str()).collect();
            names.sort_unstable();
            // An unlabelled sample (label -1) has no `.cls`, and its json no label.
            let labelled = names.first() == Some(&"cls");
            let image_fields = &names[usize::from(labelled)..];
            assert!(
                image_fields == ["jpg", "json"] || image_fields == ["json", "png"],
                "sample {} has fields {names:?}",
                s.key
            );
            let field = if names.contains(&"png") { "png" } else { "jpg" };
            let cls: i64 = s.get("cls").map_or(-1, |c| {
                std::str::from_utf8(c)
                    .unwrap()
                    .parse()
                    .expect("cls is an integer")
            });
            let json: Value = serde_json::from_slice(s.get("json").unwrap()).unwrap();
            assert_eq!(json["key"].as_str(), Some(s.key.as_str()), "json.key");
            assert_eq!(
                json["label"].as_i64(),
                labelled.then_some(cls),
                "json.label vs cls"
            );
            let tar_bytes = s.fields.iter().map(|(_, d)| tar_member_size(d.len())).sum();
            all.push(WdsSample {
                key: s.key.clone(),
                cls,
                json,
                field: field.to_string(),
                image: s.get(field).unwrap().to_vec(),
                shard: i,
                tar_bytes,
            });
        }
    }
    assert_eq!(all.len() as u64, m.totals.samples, "totals.samples");
    all
}

/// Samples by their json `source`.
pub fn by_source(samples: &[WdsSample]) -> BTreeMap<String, WdsSample> {
    let mut map = BTreeMap::new();
    for s in samples {
        assert!(
            map.insert(s.source().to_string(), s.clone()).is_none(),
            "source {} packed twice",
            s.source()
        );
    }
    map
}

/// One record of a packed dataset.
#[derive(Debug, Clone)]
pub struct PackedSample {
    /// The key.
    pub key: String,
    /// The label.
    pub label: i64,
    /// Width.
    pub width: u32,
    /// Height.
    pub height: u32,
    /// RGB8 pixels.
    pub pixels: Vec<u8>,
    /// The per-record metadata object.
    pub meta: Value,
    /// Index of the shard in the manifest.
    pub shard: usize,
}

impl PackedSample {
    /// The pixels as an image.
    pub fn image(&self) -> RgbImage {
        RgbImage::from_raw(self.width, self.height, self.pixels.clone()).unwrap()
    }
}

/// Every record of a packed dataset, checking sizes, checksums and counts against the manifest and
/// every record's checksum; also returns each shard's mode.
#[track_caller]
pub fn packed_samples(dir: &Path) -> (Vec<PackedSample>, Vec<shardtool_packed::ShardMode>) {
    let m = manifest(dir);
    let mut all = Vec::new();
    let mut modes = Vec::new();
    for (i, entry) in m.shards.iter().enumerate() {
        assert_eq!(entry.format, shardtool_manifest::ShardFormat::Packed);
        let bytes = shard_bytes(dir, entry);
        let shard = shardtool_packed::PackedShard::open(bytes)
            .unwrap_or_else(|e| panic!("{} does not open: {e}", entry.file));
        assert_eq!(shard.len() as u64, entry.samples, "{} samples", entry.file);
        assert!(shard.verify_all().is_empty(), "{} checksums", entry.file);
        modes.push(shard.mode());
        for (j, r) in shard.records().enumerate() {
            assert_eq!(r.shape[2], 3);
            let meta = shard.sample_meta(j).clone();
            assert_eq!(meta["key"].as_str(), Some(r.key), "meta.key");
            all.push(PackedSample {
                key: r.key.to_string(),
                label: r.label,
                width: r.width(),
                height: r.height(),
                pixels: r.pixels.to_vec(),
                meta,
                shard: i,
            });
        }
    }
    assert_eq!(all.len() as u64, m.totals.samples, "totals.samples");
    (all, modes)
}

/// Checks the bookkeeping of a finished pack: found = packed + failed, one errors.jsonl line per
/// failure, no input both packed and failed, no input reported twice; returns the errors by path.
#[track_caller]
pub fn check_accounting(dir: &Path, packed_sources: &[String]) -> HashMap<String, ErrorLine> {
    let m = manifest(dir);
    let errs = errors(dir);
    let i = &m.inputs;
    assert_eq!(i.packed, m.totals.samples, "inputs.packed");
    assert_eq!(i.failed, errs.len() as u64, "inputs.failed vs errors.jsonl");
    assert_eq!(i.found, i.packed + i.failed, "found = packed + failed");
    let mut by_path = HashMap::new();
    for e in errs {
        assert!(
            !packed_sources.contains(&e.path),
            "{} is both packed and failed",
            e.path
        );
        let path = e.path.clone();
        assert!(
            by_path.insert(path.clone(), e).is_none(),
            "{path} is reported more than once in errors.jsonl"
        );
    }
    by_path
}

/// Sorted file names in `dir`.
pub fn file_names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// All files of a dataset directory with their bytes.
pub fn dir_contents(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    file_names(dir)
        .into_iter()
        .map(|n| {
            let bytes = std::fs::read(dir.join(&n)).unwrap();
            (n, bytes)
        })
        .collect()
}

/// The output size that the documented rules give: a scaled side is
/// `round(side × target / reference)`, halves up, never below 1.
pub fn scaled(side: u32, target: u32, reference: u32) -> u32 {
    let (a, n, d) = (u64::from(side), u64::from(target), u64::from(reference));
    ((2 * a * n + d) / (2 * d)).max(1) as u32
}

/// Mean absolute per-channel difference.
#[track_caller]
pub fn mean_diff(a: &RgbImage, b: &RgbImage) -> f64 {
    assert_eq!(a.dimensions(), b.dimensions(), "image sizes differ");
    let sum: u64 = a
        .as_raw()
        .iter()
        .zip(b.as_raw())
        .map(|(x, y)| u64::from(x.abs_diff(*y)))
        .sum();
    sum as f64 / a.as_raw().len().max(1) as f64
}

/// True when every channel of `p` is within `tol` of `c`.
pub fn near(p: [u8; 3], c: [u8; 3], tol: u8) -> bool {
    p.iter().zip(c).all(|(a, b)| a.abs_diff(b) <= tol)
}

/// Copies `src` to `dst`, creating parents.
pub fn copy(src: impl AsRef<Path>, dst: impl AsRef<Path>) {
    let dst = dst.as_ref();
    if let Some(p) = dst.parent() {
        std::fs::create_dir_all(p).unwrap();
    }
    std::fs::copy(src.as_ref(), dst).unwrap();
}

/// An `OsString` from raw bytes (Unix).
pub fn os(bytes: &[u8]) -> OsString {
    use std::os::unix::ffi::OsStrExt;
    OsStr::from_bytes(bytes).to_os_string()
}

// ---------------------------------------------------------------------------------------------
// Killing processes at random moments
// ---------------------------------------------------------------------------------------------

/// A small seeded generator for kill moments; the seed is printed so a failure can be replayed
/// with SHARDTOOL_TEST_SEED.
pub struct KillRng(u64);

impl KillRng {
    /// Seeded from SHARDTOOL_TEST_SEED, or the clock (printed).
    pub fn new() -> Self {
        let seed = std::env::var("SHARDTOOL_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .subsec_nanos() as u64
            });
        eprintln!("kill schedule seed: SHARDTOOL_TEST_SEED={seed}");
        Self(seed)
    }
    /// A number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % n
    }
}

/// Starts `cmd`, kills it with SIGKILL after `after` (if still running); whether it was killed.
pub fn kill_after(cmd: Cmd, after: std::time::Duration) -> bool {
    let mut child = cmd.spawn();
    let deadline = std::time::Instant::now() + after;
    while std::time::Instant::now() < deadline {
        if child.try_wait().unwrap().is_some() {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let killed = child.try_wait().unwrap().is_none();
    let _ = child.kill();
    let _ = child.wait();
    killed
}
