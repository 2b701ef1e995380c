//! Where batches go: the `--device` spec (`cpu`, `auto`, `cuda:N`), the resolved [`Target`] and
//! the errors of both. Resolution itself ([`Device::resolve`]) lives in `select.rs`, the one
//! module that knows which backends this build has; this module imports nothing from the crate.

use std::fmt;
use std::str::FromStr;

/// A requested batch target, as written on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Device {
    /// Host memory; no CUDA is touched.
    #[default]
    Cpu,
    /// The first GPU when one is usable, otherwise the CPU (and [`Target::Cpu`] says why).
    Auto,
    /// GPU `N`; an error when it is not there.
    Cuda(usize),
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Auto => f.write_str("auto"),
            Device::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

/// Why a device spec could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid device {input:?}: expected cpu, auto, cuda or cuda:N (N a GPU index)")]
pub struct ParseDeviceError {
    /// The text given.
    pub input: String,
}

impl FromStr for Device {
    type Err = ParseDeviceError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || ParseDeviceError { input: s.into() };
        match s.trim().to_ascii_lowercase().as_str() {
            "cpu" => Ok(Device::Cpu),
            "auto" => Ok(Device::Auto),
            "cuda" | "gpu" => Ok(Device::Cuda(0)),
            t => {
                let n = t
                    .strip_prefix("cuda:")
                    .or_else(|| t.strip_prefix("gpu:"))
                    .ok_or_else(bad)?;
                // Digits only: "+1" and " 1" parse as usize but are not what anyone writes.
                if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(bad());
                }
                n.parse().map(Device::Cuda).map_err(|_| bad())
            }
        }
    }
}

/// Why a GPU was not available.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DeviceError {
    /// `cuda:N` asked of a binary built without the `cuda` feature.
    #[error(
        "{device} requested, but this shardtool was built without CUDA support; build a \
         GPU-capable binary with `cargo build --release -p shardtool --features cuda`"
    )]
    BuiltWithoutCuda {
        /// The device asked for.
        device: Device,
    },
    /// The CUDA driver library could not be loaded.
    #[error(
        "{device} requested, but the CUDA driver library (libcuda.so / nvcuda.dll) was not \
         found; install the NVIDIA driver or add its directory to LD_LIBRARY_PATH"
    )]
    DriverNotFound {
        /// The device asked for.
        device: Device,
    },
    /// The driver is there but the GPU index is not.
    #[error("cuda:{ordinal} requested, but {}", match count {
        0 => "the CUDA driver reports no GPU".to_string(),
        1 => "there is only 1 GPU (cuda:0)".to_string(),
        n => format!("there are only {n} GPUs (cuda:0 to cuda:{})", n - 1),
    })]
    NoSuchDevice {
        /// The index asked for.
        ordinal: usize,
        /// How many GPUs the driver reports.
        count: usize,
    },
    /// A driver call failed during detection or setup.
    #[error("CUDA {call} failed: {message}")]
    Driver {
        /// What was being done.
        call: String,
        /// The driver's error text.
        message: String,
    },
}

/// A resolved batch target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Host memory.
    Cpu {
        /// Why `auto` fell back to the CPU (printed once by callers); `None` when `cpu` was asked.
        fallback: Option<String>,
    },
    /// A usable GPU.
    Cuda {
        /// Its index.
        ordinal: usize,
        /// Its name as the driver reports it.
        name: String,
    },
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Cpu { .. } => f.write_str("cpu"),
            Target::Cuda { ordinal, name } => write!(f, "cuda:{ordinal} ({name})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_device_specs() {
        assert_eq!("cpu".parse(), Ok(Device::Cpu));
        assert_eq!("AUTO".parse(), Ok(Device::Auto));
        assert_eq!("cuda".parse(), Ok(Device::Cuda(0)));
        assert_eq!("cuda:3".parse(), Ok(Device::Cuda(3)));
        for bad in [
            "",
            "cuda:",
            "cuda:-1",
            "cuda:+1",
            "cuda:x",
            "tpu",
            "cuda:99999999999999999999",
        ] {
            let e = bad.parse::<Device>().unwrap_err();
            assert!(e.to_string().contains("cuda:N"), "{bad}: {e}");
        }
        for d in [Device::Cpu, Device::Auto, Device::Cuda(7)] {
            assert_eq!(d.to_string().parse(), Ok(d));
        }
    }

    #[test]
    fn no_such_device_lists_what_exists() {
        let e = DeviceError::NoSuchDevice {
            ordinal: 4,
            count: 2,
        };
        assert_eq!(
            e.to_string(),
            "cuda:4 requested, but there are only 2 GPUs (cuda:0 to cuda:1)"
        );
        let e = DeviceError::NoSuchDevice {
            ordinal: 0,
            count: 0,
        };
        assert!(e.to_string().contains("no GPU"));
    }
}
