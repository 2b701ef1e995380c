//! Picks the backend for a [`Device`]: resolving the spec against what this build and machine
//! have, and opening the device loader and the bandwidth probe on the CPU twin or on CUDA. The
//! only module (besides the `cuda` module's declaration) that depends on the `cuda` feature.

use crate::cpu::CpuBackend;
#[cfg(feature = "cuda")]
use crate::cuda::{self, CudaBackend};
use crate::device::{Device, DeviceError, Target};
use crate::error::GpuError;
use crate::pipeline::{DeviceLoader, DeviceOptions, Engine, Pipeline};
use crate::ring::StagingRing;
use shardtool_reader::LoaderBuilder;

impl Device {
    /// Checks that the device is there. `cuda:N` fails with a typed error naming the missing
    /// driver or GPU; `auto` falls back to the CPU with the reason in [`Target::Cpu`]. Never
    /// panics for lack of a GPU: the driver library's presence is checked before any CUDA call.
    pub fn resolve(self) -> Result<Target, DeviceError> {
        match self {
            Device::Cpu => Ok(Target::Cpu { fallback: None }),
            Device::Cuda(n) => probe(self, n),
            Device::Auto => match probe(self, 0) {
                Ok(t) => Ok(t),
                Err(e) => Ok(Target::Cpu {
                    fallback: Some(format!("no usable GPU ({}); running on the CPU", short(&e))),
                }),
            },
        }
    }
}

/// The reason without the "how to fix" tail, for the one-line `auto` notice.
fn short(e: &DeviceError) -> String {
    match e {
        DeviceError::BuiltWithoutCuda { .. } => "built without the `cuda` feature".into(),
        DeviceError::DriverNotFound { .. } => "CUDA driver library not found".into(),
        DeviceError::NoSuchDevice { count, .. } => format!("the driver reports {count} GPUs"),
        other => other.to_string(),
    }
}

#[cfg(not(feature = "cuda"))]
fn probe(device: Device, _ordinal: usize) -> Result<Target, DeviceError> {
    Err(DeviceError::BuiltWithoutCuda { device })
}

#[cfg(feature = "cuda")]
fn probe(device: Device, ordinal: usize) -> Result<Target, DeviceError> {
    let count = cuda::device_count(device)?;
    if ordinal >= count {
        return Err(DeviceError::NoSuchDevice { ordinal, count });
    }
    let name = cuda::device_name(ordinal)?;
    Ok(Target::Cuda { ordinal, name })
}

/// The resolved target and a copy pipeline on its backend, with a ring sized for `readers`
/// concurrent readers unless the options fix it.
fn open(opts: &DeviceOptions, readers: usize) -> Result<DeviceLoader, GpuError> {
    let target = opts.device.resolve()?;
    let in_flight = opts.in_flight.max(1);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let ring = opts
        .ring
        .unwrap_or(readers * StagingRing::capacity_for(cores, 2, in_flight));
    let engine: Box<dyn Engine> = match &target {
        Target::Cpu { .. } => Box::new(Pipeline::new(CpuBackend::default(), ring, in_flight)),
        #[cfg(feature = "cuda")]
        Target::Cuda { ordinal, .. } => {
            let backend = CudaBackend::open(*ordinal, opts.normalize.is_some())?;
            Box::new(Pipeline::new(backend, ring, in_flight))
        }
        #[cfg(not(feature = "cuda"))]
        Target::Cuda { .. } => {
            return Err(GpuError::Options("CUDA target in a CPU-only build".into()))
        }
    };
    Ok(DeviceLoader::with_engine(target, engine, opts))
}

impl DeviceLoader {
    /// One epoch: `builder` is the reader's builder (its allocator is replaced by the ring).
    pub fn new(builder: LoaderBuilder, opts: &DeviceOptions) -> Result<Self, GpuError> {
        let mut me = open(opts, 1)?;
        me.start_one(builder)?;
        Ok(me)
    }

    /// Epochs `epochs` back to back, `make(epoch)` building each epoch's reader. The next
    /// epoch's reader starts when the current one does, so its first batches are ready at the
    /// boundary (the ring is sized for two readers).
    pub fn epochs(
        make: impl FnMut(u64) -> LoaderBuilder + Send + 'static,
        epochs: std::ops::Range<u64>,
        opts: &DeviceOptions,
    ) -> Result<Self, GpuError> {
        let mut me = open(opts, 2)?;
        me.start_epochs(Box::new(make), epochs)?;
        Ok(me)
    }
}

/// Pinned and pageable host-to-device bandwidth in GB/s on the resolved `target`.
pub(crate) fn h2d(target: &Target, bytes: usize, iters: usize) -> Result<(f64, f64), GpuError> {
    match target {
        Target::Cpu { fallback } => Err(GpuError::Options(format!(
            "host-to-device bandwidth needs a GPU{}",
            fallback
                .as_ref()
                .map(|f| format!(": {f}"))
                .unwrap_or_default()
        ))),
        #[cfg(feature = "cuda")]
        Target::Cuda { ordinal, .. } => cuda::h2d(*ordinal, bytes, iters),
        #[cfg(not(feature = "cuda"))]
        Target::Cuda { .. } => {
            let _ = (bytes, iters); // only used by the CUDA build
            Err(GpuError::Options("CUDA target in a CPU-only build".into()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_always_resolves_and_auto_never_fails() {
        assert_eq!(Device::Cpu.resolve(), Ok(Target::Cpu { fallback: None }));
        match Device::Auto.resolve() {
            Ok(Target::Cpu { fallback }) => assert!(fallback.unwrap().contains("CPU")),
            Ok(Target::Cuda { .. }) => {}
            Err(e) => panic!("auto must not fail: {e}"),
        }
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn without_the_feature_cuda_says_how_to_build() {
        let e = Device::Cuda(0).resolve().unwrap_err();
        assert!(matches!(e, DeviceError::BuiltWithoutCuda { .. }));
        assert!(e
            .to_string()
            .contains("cargo build --release -p shardtool --features cuda"));
    }

    #[cfg(feature = "cuda")]
    #[test]
    fn cuda_out_of_range_is_a_typed_error() {
        // On a machine without libcuda this is DriverNotFound; with one, cuda:9999 is missing.
        match Device::Cuda(9999).resolve() {
            Err(DeviceError::DriverNotFound { .. }) => {
                assert!(!cuda::driver_present());
            }
            Err(DeviceError::NoSuchDevice { ordinal, .. }) => assert_eq!(ordinal, 9999),
            Err(DeviceError::Driver { .. }) => {} // a driver without a working GPU
            other => panic!("unexpected {other:?}"),
        }
    }
}
