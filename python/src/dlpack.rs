//! DLPack export without a copy: a [`Tensor`] views bytes owned by a Rust value (a reader batch,
//! or a small copied array) and hands them to NumPy or PyTorch as a `dltensor` capsule (or a
//! `dltensor_versioned` one when the consumer passes `max_version`). The capsule owns a reference
//! to the owner; its deleter drops that reference without the GIL and without waiting, so a batch
//! buffer goes back to the reader's pool exactly when the last consumer lets go of it.

// The DLPack C structures and the capsule calls are FFI; each unsafe block says why it is sound.
#![allow(unsafe_code)]

use pyo3::exceptions::{PyBufferError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use std::any::Any;
use std::ffi::{c_void, CStr};
use std::sync::Arc;

/// Something that keeps a tensor's bytes alive.
pub type Keep = Arc<dyn Any + Send + Sync>;

#[repr(C)]
#[derive(Clone, Copy)]
struct DLDevice {
    device_type: i32,
    device_id: i32,
}

/// `kDLCPU`.
const DL_CPU: i32 = 1;

/// Element type: `code` 0 = signed int, 1 = unsigned int.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct DType {
    code: u8,
    bits: u8,
    lanes: u16,
}

impl DType {
    /// `uint8`.
    pub const U8: DType = DType {
        code: 1,
        bits: 8,
        lanes: 1,
    };
    /// `int64`.
    pub const I64: DType = DType {
        code: 0,
        bits: 64,
        lanes: 1,
    };

    fn name(self) -> &'static str {
        if self == Self::U8 {
            "uint8"
        } else {
            "int64"
        }
    }

    fn size(self) -> usize {
        usize::from(self.bits / 8)
    }
}

#[repr(C)]
struct DLTensor {
    data: *mut c_void,
    device: DLDevice,
    ndim: i32,
    dtype: DType,
    shape: *mut i64,
    strides: *mut i64,
    byte_offset: u64,
}

#[repr(C)]
struct DLManagedTensor {
    dl_tensor: DLTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

#[repr(C)]
struct DLPackVersion {
    major: u32,
    minor: u32,
}

#[repr(C)]
struct DLManagedTensorVersioned {
    version: DLPackVersion,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    flags: u64,
    dl_tensor: DLTensor,
}

/// One allocation per capsule: the DLPack struct first (so a pointer to it is a pointer to the
/// whole), then what its pointers point into.
#[repr(C)]
struct Managed<T> {
    tensor: T,
    shape: Vec<i64>,
    strides: Vec<i64>,
    _keep: Keep,
}

/// The two DLPack managed-tensor structs (legacy and versioned): their capsule name and how
/// `export` fills them, so that one code path builds and frees both.
trait ManagedTensor: Sized + 'static {
    /// The capsule name consumers look for.
    const NAME: &'static CStr;
    /// The struct around `dl_tensor`, its deleter set and its context still null.
    fn wrap(dl_tensor: DLTensor) -> Self;
    fn dl_tensor(&mut self) -> &mut DLTensor;
    fn set_manager_ctx(&mut self, ctx: *mut c_void);
}

impl ManagedTensor for DLManagedTensor {
    const NAME: &'static CStr = c"dltensor";
    fn wrap(dl_tensor: DLTensor) -> Self {
        DLManagedTensor {
            dl_tensor,
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(delete::<DLManagedTensor>),
        }
    }
    fn dl_tensor(&mut self) -> &mut DLTensor {
        &mut self.dl_tensor
    }
    fn set_manager_ctx(&mut self, ctx: *mut c_void) {
        self.manager_ctx = ctx;
    }
}

impl ManagedTensor for DLManagedTensorVersioned {
    const NAME: &'static CStr = c"dltensor_versioned";
    fn wrap(dl_tensor: DLTensor) -> Self {
        DLManagedTensorVersioned {
            version: DLPackVersion { major: 1, minor: 0 },
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(delete::<DLManagedTensorVersioned>),
            flags: 0,
            dl_tensor,
        }
    }
    fn dl_tensor(&mut self) -> &mut DLTensor {
        &mut self.dl_tensor
    }
    fn set_manager_ctx(&mut self, ctx: *mut c_void) {
        self.manager_ctx = ctx;
    }
}

/// Frees a capsule's allocation; dropping `_keep` may return a batch buffer to its pool (a short
/// mutex section, never a wait on Python).
unsafe extern "C" fn delete<T: ManagedTensor>(p: *mut T) {
    if !p.is_null() {
        // SAFETY: `p` came from `Box::into_raw` of a `Managed<T>` (see `export`), whose first
        // field it is; DLPack calls the deleter once.
        drop(unsafe { Box::from_raw(p.cast::<Managed<T>>()) });
    }
}

/// Capsule destructor: frees the tensor only if no consumer took it (a consumer renames the
/// capsule to `used_dltensor` and calls the deleter itself).
unsafe extern "C" fn capsule_destructor<T: ManagedTensor>(cap: *mut ffi::PyObject) {
    // SAFETY: `cap` is a live capsule (its destructor is running); IsValid only reads its name.
    unsafe {
        if ffi::PyCapsule_IsValid(cap, T::NAME.as_ptr()) == 1 {
            delete(ffi::PyCapsule_GetPointer(cap, T::NAME.as_ptr()).cast::<T>());
        }
    }
}

/// A capsule owning one `Managed<T>` of `tensor`, whose shape and strides point into it.
fn capsule<'py, T: ManagedTensor>(
    py: Python<'py>,
    tensor: DLTensor,
    shape: Vec<i64>,
    strides: Vec<i64>,
    keep: Keep,
) -> PyResult<Bound<'py, PyAny>> {
    let mut m = Box::new(Managed {
        tensor: T::wrap(tensor),
        shape,
        strides,
        _keep: keep,
    });
    // The Vecs' heap storage does not move when the Box is built, so these pointers stay valid
    // for the allocation's life.
    let (shape, strides) = (m.shape.as_mut_ptr(), m.strides.as_mut_ptr());
    let t = m.tensor.dl_tensor();
    t.shape = shape;
    t.strides = strides;
    let raw = Box::into_raw(m);
    // SAFETY: `raw` is a valid, uniquely owned allocation.
    unsafe { (*raw).tensor.set_manager_ctx(raw.cast()) };
    // SAFETY: the GIL is held; the name is 'static, as the capsule requires; on failure the
    // allocation is freed here, since no capsule owns it.
    unsafe {
        let cap = ffi::PyCapsule_New(raw.cast(), T::NAME.as_ptr(), Some(capsule_destructor::<T>));
        if cap.is_null() {
            delete(raw.cast::<T>());
        }
        Bound::from_owned_ptr_or_err(py, cap)
    }
}

/// A C-contiguous CPU array viewing bytes that a Rust owner keeps alive; pass it to
/// `torch.from_dlpack` or `numpy.from_dlpack`.
#[pyclass(frozen, module = "shardtool", name = "Tensor")]
pub struct Tensor {
    keep: Keep,
    /// Address of the first element (an address, so the type is `Send`).
    data: usize,
    shape: Vec<i64>,
    dtype: DType,
    /// Start and length of the whole buffer the owner holds (the batch buffer for images).
    buffer: (usize, usize),
}

impl Tensor {
    /// A view of `shape` elements of `dtype` at `data`, which `keep` keeps alive and unchanged
    /// for as long as it lives.
    pub fn new(keep: Keep, data: *const u8, shape: Vec<i64>, dtype: DType) -> Self {
        let mut t = Self {
            keep,
            data: data as usize,
            shape,
            dtype,
            buffer: (data as usize, 0),
        };
        t.buffer.1 = t.nbytes();
        t
    }

    /// Records the whole buffer this view lies in.
    pub fn in_buffer(mut self, buffer: (usize, usize)) -> Self {
        self.buffer = buffer;
        self
    }

    fn nbytes(&self) -> usize {
        self.shape.iter().product::<i64>().max(0) as usize * self.dtype.size()
    }

    fn strides(&self) -> Vec<i64> {
        let mut strides = vec![1i64; self.shape.len()];
        for i in (0..self.shape.len().saturating_sub(1)).rev() {
            strides[i] = strides[i + 1] * self.shape[i + 1];
        }
        strides
    }

    /// A capsule of the tensor, viewing `data` kept alive by `keep`.
    fn export<'py>(
        &self,
        py: Python<'py>,
        keep: Keep,
        data: usize,
        versioned: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let shape = self.shape.clone();
        let strides = self.strides();
        let tensor = DLTensor {
            data: data as *mut c_void,
            device: DLDevice {
                device_type: DL_CPU,
                device_id: 0,
            },
            ndim: shape.len() as i32,
            dtype: self.dtype,
            shape: std::ptr::null_mut(),
            strides: std::ptr::null_mut(),
            byte_offset: 0,
        };
        if versioned {
            capsule::<DLManagedTensorVersioned>(py, tensor, shape, strides, keep)
        } else {
            capsule::<DLManagedTensor>(py, tensor, shape, strides, keep)
        }
    }
}

#[pymethods]
impl Tensor {
    /// Exports the tensor as a DLPack capsule (the array API's `__dlpack__`): versioned when the
    /// consumer passes `max_version` with a major version of at least 1, else the legacy kind.
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<Bound<'py, PyAny>>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        // A CPU array has no stream: the consumer may pass None (the array API), or -1 (no
        // synchronisation), as torch does for CPU tensors.
        if let Some(s) = &stream {
            if !s.is_none() && s.extract::<i64>().ok() != Some(-1) {
                return Err(PyValueError::new_err(
                    "stream must be None for a CPU tensor",
                ));
            }
        }
        if let Some((kind, id)) = dl_device {
            if (kind, id) != (DL_CPU, 0) {
                return Err(PyBufferError::new_err(format!(
                    "this tensor is on the CPU; cannot export it to device ({kind}, {id})"
                )));
            }
        }
        let versioned = max_version.is_some_and(|(major, _)| major >= 1);
        if copy == Some(true) {
            // SAFETY: `data` points at `nbytes` bytes that `keep` keeps alive and unchanged.
            let bytes =
                unsafe { std::slice::from_raw_parts(self.data as *const u8, self.nbytes()) };
            let owned: Arc<Vec<u8>> = Arc::new(bytes.to_vec());
            let data = owned.as_ptr() as usize;
            return self.export(py, owned, data, versioned);
        }
        self.export(py, self.keep.clone(), self.data, versioned)
    }

    /// `(device_type, device_id)`: `(1, 0)`, the CPU.
    fn __dlpack_device__(&self) -> (i32, i32) {
        (DL_CPU, 0)
    }

    /// The shape.
    #[getter]
    fn shape(&self) -> Vec<i64> {
        self.shape.clone()
    }

    /// `"uint8"` or `"int64"`.
    #[getter]
    fn dtype(&self) -> &'static str {
        self.dtype.name()
    }

    /// Address of the first element (to check that consumers view, not copy).
    #[getter]
    fn data_ptr(&self) -> usize {
        self.data
    }

    /// `(address, length)` of the whole Rust buffer the tensor lies in (for images: the batch
    /// buffer, shared by every image of the batch).
    #[getter]
    fn buffer(&self) -> (usize, usize) {
        self.buffer
    }

    /// Size in bytes.
    #[getter(nbytes)]
    fn py_nbytes(&self) -> usize {
        self.nbytes()
    }

    fn __repr__(&self) -> String {
        format!(
            "shardtool.Tensor(shape={:?}, dtype={})",
            self.shape,
            self.dtype.name()
        )
    }
}
