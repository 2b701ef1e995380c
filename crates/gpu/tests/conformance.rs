//! One conformance suite for every batch target: the CPU twin always, CUDA when built with the
//! `cuda` feature and `SHARDTOOL_GPU_TESTS=1` is set (on a machine with a GPU). Datasets are
//! real packed shards written to a temporary directory, and every delivered batch is compared
//! with what the plain CPU reader yields for the same options.

use shardtool_core::Checksum;
use shardtool_gpu::{
    bench, BenchOptions, Device, DeviceBatch, DeviceError, DeviceLoader, DeviceOptions, GpuError,
    Normalize, StagingRing, Target,
};
use shardtool_manifest::{Manifest, ShardEntry, ShardFormat};
use shardtool_packed::{Mode, PackedWriter};
use shardtool_reader::{Layout, Loader, LoaderBuilder};
use std::path::Path;
use std::time::Duration;

/// The targets under test.
fn targets() -> Vec<Device> {
    let mut t = vec![Device::Cpu];
    if cfg!(feature = "cuda") && std::env::var("SHARDTOOL_GPU_TESTS").as_deref() == Ok("1") {
        // Asked for GPU tests: a missing GPU is a failure, said plainly, not a silent skip.
        if let Err(e) = Device::Cuda(0).resolve() {
            panic!("SHARDTOOL_GPU_TESTS=1 but cuda:0 is not usable: {e}");
        }
        t.push(Device::Cuda(0));
    }
    t
}

/// Pixels of sample `i` with shape `h x w x 3`: bytes encode `i` and the position.
fn pixels(i: u32, h: u32, w: u32) -> Vec<u8> {
    (0..h * w * 3)
        .map(|j| (i.wrapping_mul(131).wrapping_add(j.wrapping_mul(7))) as u8)
        .collect()
}

fn write_manifest(dir: &Path, shards: Vec<ShardEntry>) {
    let classes = (0..10).map(|i| i.to_string()).collect();
    let m = Manifest::new("test", classes, vec![], shards);
    std::fs::write(dir.join("manifest.json"), m.to_json()).unwrap();
}

/// A packed dataset; `variable` gives records of three different shapes.
fn packed_dataset(dir: &Path, sizes: &[u32], variable: bool) {
    let mut entries = Vec::new();
    let mut next = 0u32;
    for (si, &n) in sizes.iter().enumerate() {
        let mut w = PackedWriter::new(if variable {
            Mode::Variable
        } else {
            Mode::Fixed
        });
        for _ in 0..n {
            let (h, wd) = if variable {
                (6 + next % 3, 5 + next % 2)
            } else {
                (12, 10)
            };
            w.add(
                &format!("s{next}"),
                i64::from(next % 10),
                h,
                wd,
                &pixels(next, h, wd),
                serde_json::json!({}),
            )
            .unwrap();
            next += 1;
        }
        let mut bytes = Vec::new();
        w.finish(&mut bytes).unwrap();
        let file = format!("shard-{si:06}.safetensors");
        std::fs::write(dir.join(&file), &bytes).unwrap();
        entries.push(ShardEntry {
            file,
            format: ShardFormat::Packed,
            compression: None,
            samples: u64::from(n),
            bytes: bytes.len() as u64,
            checksum: Checksum::of(&bytes).to_string(),
            uncompressed_bytes: None,
            uncompressed_checksum: None,
        });
    }
    write_manifest(dir, entries);
}

/// What a batch is, independent of where it lives.
#[derive(Debug, PartialEq)]
struct Seen {
    epoch: u64,
    index: u64,
    keys: Vec<String>,
    labels: Vec<i64>,
    layout: Layout,
    /// Batch length in bytes.
    len: usize,
    /// Each sample's bytes. The padding between 64-byte aligned variable-shape records is
    /// unspecified (reused buffers keep old bytes), so it is not compared.
    samples: Vec<Vec<u8>>,
    /// The whole batch, for the normalisation checks.
    bytes: Vec<u8>,
}

impl Seen {
    fn new(b: (u64, u64, &[String], &[i64], &Layout), bytes: Vec<u8>) -> Self {
        let (epoch, index, keys, labels, layout) = b;
        let samples = (0..keys.len())
            .map(|i| match layout {
                Layout::Fixed { height, width } => {
                    let n = *height as usize * *width as usize * 3;
                    bytes[i * n..(i + 1) * n].to_vec()
                }
                Layout::Variable { offsets, shapes } => {
                    let [h, w, c] = shapes[i];
                    let at = offsets[i] as usize;
                    bytes[at..at + (h * w * c) as usize].to_vec()
                }
                Layout::Encoded { offsets } => {
                    bytes[offsets[i] as usize..offsets[i + 1] as usize].to_vec()
                }
            })
            .collect();
        Self {
            epoch,
            index,
            keys: keys.to_vec(),
            labels: labels.to_vec(),
            layout: layout.clone(),
            len: bytes.len(),
            samples,
            bytes: if matches!(layout, Layout::Fixed { .. }) {
                bytes
            } else {
                Vec::new()
            },
        }
    }
}

fn builder(dir: &Path, epoch: u64) -> LoaderBuilder {
    Loader::builder(dir)
        .seed(7)
        .epoch(epoch)
        .batch_size(5)
        .workers(3)
        .prefetch(1)
}

/// The plain CPU reader's batches for the same options.
fn reference(dir: &Path, epoch: u64) -> Vec<Seen> {
    builder(dir, epoch)
        .build()
        .unwrap()
        .map(|b| {
            let b = b.unwrap();
            Seen::new(
                (b.epoch, b.index, &b.keys, &b.labels, &b.layout),
                b.data().to_vec(),
            )
        })
        .collect()
}

fn seen(b: &DeviceBatch) -> Seen {
    Seen::new(
        (b.epoch, b.index, &b.keys, &b.labels, &b.layout),
        b.to_host_bytes().unwrap(),
    )
}

fn opts(device: Device) -> DeviceOptions {
    DeviceOptions {
        device,
        ..Default::default()
    }
}

#[test]
fn batches_arrive_complete_in_order_and_byte_equal() {
    for variable in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        packed_dataset(dir.path(), &[17, 9, 23], variable);
        let want = reference(dir.path(), 0);
        assert_eq!(want.len(), 10, "nine full batches and a partial one");
        for device in targets() {
            for in_flight in [1, 3] {
                let o = DeviceOptions {
                    in_flight,
                    ..opts(device)
                };
                let got: Vec<Seen> = DeviceLoader::new(builder(dir.path(), 0), &o)
                    .unwrap()
                    .map(|b| seen(&b.unwrap()))
                    .collect();
                assert_eq!(
                    got, want,
                    "{device} variable={variable} in_flight={in_flight}"
                );
            }
        }
    }
}

#[test]
fn batches_held_by_the_consumer_are_not_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    packed_dataset(dir.path(), &[40, 40], false);
    let want = reference(dir.path(), 0);
    for device in targets() {
        let mut loader = DeviceLoader::new(builder(dir.path(), 0), &opts(device)).unwrap();
        // Keep every batch alive, then read them all: a reused destination would show up as
        // a later batch's bytes in an earlier batch.
        let held: Vec<DeviceBatch> = (&mut loader).map(|b| b.unwrap()).collect();
        let got: Vec<Seen> = held.iter().map(seen).collect();
        assert_eq!(got, want, "{device}");
        assert_eq!(
            loader.stats().target_allocations,
            want.len() as u64,
            "{device}: one destination per held batch"
        );
    }
}

#[test]
fn buffers_are_reused_and_allocations_bounded() {
    let dir = tempfile::tempdir().unwrap();
    packed_dataset(dir.path(), &[100, 100, 100], false);
    let want = reference(dir.path(), 0);
    assert_eq!(want.len(), 60);
    for device in targets() {
        let in_flight = 2;
        let k = StagingRing::capacity_for(3, 1, in_flight);
        let o = DeviceOptions {
            ring: Some(k),
            in_flight,
            ..opts(device)
        };
        let mut loader = DeviceLoader::new(builder(dir.path(), 0), &o).unwrap();
        let mut got = Vec::new();
        for b in &mut loader {
            got.push(seen(&b.unwrap())); // dropped right away, as a training loop does
        }
        assert_eq!(got, want, "{device}");
        let s = loader.stats();
        assert_eq!(s.batches, 60);
        assert_eq!(s.waits.len(), 60);
        assert_eq!(s.bytes, 60 * 5 * 12 * 10 * 3);
        assert_eq!(s.ring.capacity, k);
        assert!(
            s.ring.allocations <= k as u64,
            "{device}: {} ring allocations for a ring of {k}",
            s.ring.allocations
        );
        assert!(s.ring.reuses >= 60 - k as u64, "{device}: {:?}", s.ring);
        assert_eq!(s.ring.overflows, 0, "{device}");
        assert_eq!(s.ring.busy_skipped, 0, "{device}");
        assert!(
            s.target_allocations <= in_flight as u64 + 1,
            "{device}: {} target buffers for {in_flight} in flight",
            s.target_allocations
        );
        assert_eq!(s.pinned, device != Device::Cpu);
        assert_eq!(s.ring.pageable_fallbacks, 0);
    }
}

#[test]
fn a_tiny_ring_overflows_but_never_hands_out_a_buffer_being_copied() {
    let dir = tempfile::tempdir().unwrap();
    packed_dataset(dir.path(), &[60, 60], false);
    let want = reference(dir.path(), 0);
    for device in targets() {
        let o = DeviceOptions {
            ring: Some(1),
            in_flight: 4,
            ..opts(device)
        };
        let mut loader = DeviceLoader::new(builder(dir.path(), 0), &o).unwrap();
        let got: Vec<Seen> = (&mut loader).map(|b| seen(&b.unwrap())).collect();
        assert_eq!(got, want, "{device}");
        let s = loader.stats().ring;
        assert!(
            s.overflows > 0,
            "{device}: a ring of 1 cannot serve 3 workers: {s:?}"
        );
        assert_eq!(s.busy_skipped, 0, "{device}");
    }
}

#[test]
fn normalisation_matches_the_cpu_reference() {
    let dir = tempfile::tempdir().unwrap();
    packed_dataset(dir.path(), &[30, 20], false);
    let want = reference(dir.path(), 0);
    let n = Normalize::new([0.5, 0.25, 0.75], [0.2, 0.3, 0.4]).unwrap();
    for device in targets() {
        let o = DeviceOptions {
            normalize: Some(n),
            ..opts(device)
        };
        let mut count = 0;
        for (b, w) in DeviceLoader::new(builder(dir.path(), 0), &o)
            .unwrap()
            .zip(&want)
        {
            let b = b.unwrap();
            let floats = b.to_host_floats().unwrap().expect("normalised floats");
            assert_eq!(floats.len(), w.bytes.len());
            // Independent reference in f64: (x / 255 - mean) / std.
            for (i, (&f, &x)) in floats.iter().zip(&w.bytes).enumerate() {
                let c = i % 3;
                let exact = (f64::from(x) / 255.0 - f64::from(n.mean[c])) / f64::from(n.std[c]);
                assert!(
                    (f64::from(f) - exact).abs() <= 1e-5 * exact.abs().max(1.0),
                    "{device} batch {} element {i}: {f} vs {exact}",
                    b.index
                );
            }
            // And the crate's own f32 reference, which the kernel matches bit for bit.
            let mut cpu = Vec::new();
            n.apply(&w.bytes, &mut cpu);
            assert_eq!(floats, cpu, "{device} batch {}", b.index);
            assert_eq!(b.to_host_bytes().unwrap(), w.bytes);
            count += 1;
        }
        assert_eq!(count, want.len());
    }
}

#[test]
fn normalising_a_variable_layout_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    packed_dataset(dir.path(), &[20], true);
    for device in targets() {
        let o = DeviceOptions {
            normalize: Some(Normalize::IMAGENET),
            ..opts(device)
        };
        let results: Vec<_> = DeviceLoader::new(builder(dir.path(), 0), &o)
            .unwrap()
            .collect();
        assert_eq!(results.len(), 1, "{device}: stops at the first error");
        let e = results.into_iter().next().unwrap().err().unwrap();
        assert!(
            matches!(e, GpuError::Options(ref m) if m.contains("variable-shape")),
            "{device}: {e}"
        );
    }
    assert!(Normalize::new([0.5; 3], [0.0, 1.0, 1.0]).is_err());
    assert!(Normalize::new([f32::NAN, 0.0, 0.0], [1.0; 3]).is_err());
}

#[test]
fn epochs_run_back_to_back_in_order() {
    let dir = tempfile::tempdir().unwrap();
    packed_dataset(dir.path(), &[25, 25], false);
    let want: Vec<Seen> = (2..5).flat_map(|e| reference(dir.path(), e)).collect();
    for device in targets() {
        let path = dir.path().to_path_buf();
        let loader = DeviceLoader::epochs(move |e| builder(&path, e), 2..5, &opts(device)).unwrap();
        let got: Vec<Seen> = loader.map(|b| seen(&b.unwrap())).collect();
        assert_eq!(got.len(), 30);
        assert_eq!(got, want, "{device}");
    }
}

#[test]
fn a_reader_error_arrives_after_the_batches_before_it() {
    let dir = tempfile::tempdir().unwrap();
    packed_dataset(dir.path(), &[20, 20], false);
    // Truncate the second shard: its first batch fails when the reader opens it.
    let shard = dir.path().join("shard-000001.safetensors");
    let bytes = std::fs::read(&shard).unwrap();
    std::fs::write(&shard, &bytes[..bytes.len() / 2]).unwrap();
    for device in targets() {
        let loader = DeviceLoader::new(
            Loader::builder(dir.path())
                .shuffle(false)
                .batch_size(5)
                .workers(1),
            &DeviceOptions {
                in_flight: 3,
                ..opts(device)
            },
        )
        .unwrap();
        let results: Vec<_> = loader.collect();
        let ok = results.iter().take_while(|r| r.is_ok()).count();
        assert_eq!(ok, 4, "{device}: the first shard's four batches come first");
        assert!(matches!(results[ok], Err(GpuError::Read(_))), "{device}");
        assert_eq!(results.len(), ok + 1, "{device}: nothing after the error");
    }
}

#[test]
fn unusable_devices_are_typed_errors_and_auto_falls_back() {
    let dir = tempfile::tempdir().unwrap();
    packed_dataset(dir.path(), &[10], false);
    match DeviceLoader::new(builder(dir.path(), 0), &opts(Device::Cuda(9999))) {
        Err(GpuError::Device(
            DeviceError::BuiltWithoutCuda { .. }
            | DeviceError::DriverNotFound { .. }
            | DeviceError::NoSuchDevice { .. },
        )) => {}
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("cuda:9999 cannot exist"),
    }
    let loader = DeviceLoader::new(builder(dir.path(), 0), &opts(Device::Auto)).unwrap();
    match loader.target() {
        Target::Cpu { fallback } => {
            let note = fallback.as_deref().unwrap();
            assert!(note.contains("running on the CPU"), "{note}");
            assert_eq!(loader.fallback(), Some(note));
        }
        Target::Cuda { .. } => assert_eq!(loader.fallback(), None),
    }
    assert_eq!(loader.count(), 2);
}

#[test]
fn bench_reports_waits_and_throughput() {
    let dir = tempfile::tempdir().unwrap();
    packed_dataset(dir.path(), &[40, 40], false);
    for device in targets() {
        let path = dir.path().to_path_buf();
        let r = bench(
            move |e| builder(&path, e),
            &BenchOptions {
                device,
                step: Duration::from_millis(2),
                epochs: 2,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(r.batches, 32, "{device}");
        assert_eq!(r.samples, 160);
        assert_eq!(r.bytes, 160 * 12 * 10 * 3);
        assert!(r.seconds >= 32.0 * 0.002);
        assert!(r.delivered_gb_s > 0.0);
        assert!(r.wait_p50 <= r.wait_p99 && r.wait_p99 <= r.wait_max);
        assert_eq!(r.ring.overflows, 0);
        let line = r.to_line();
        for key in ["delivered_gb_s=", "wait_p50_ms=", "wait_p99_ms=", "pinned="] {
            assert!(line.contains(key), "{line}");
        }
    }
}
