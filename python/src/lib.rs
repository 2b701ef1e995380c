//! `shardtool._shardtool`, the compiled half of the `shardtool` Python package: the reader
//! (`Reader`, batches as DLPack `Tensor`s), `pack`, `verify`, `inspect`, partitioned packing
//! (`pack_part`, `merge`, `status`) and the exception types.
//! The public, documented API is the pure-Python `shardtool` package around it.

mod dlpack;
mod errors;
mod partition;
mod reader;
mod tools;

use pyo3::prelude::*;

#[pymodule]
fn _shardtool(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<reader::Reader>()?;
    m.add_class::<reader::BufferPool>()?;
    m.add_class::<dlpack::Tensor>()?;
    m.add_function(wrap_pyfunction!(reader::plan_info, m)?)?;
    m.add_function(wrap_pyfunction!(reader::check_fields, m)?)?;
    m.add_function(wrap_pyfunction!(tools::pack, m)?)?;
    m.add_function(wrap_pyfunction!(tools::verify, m)?)?;
    m.add_function(wrap_pyfunction!(tools::inspect, m)?)?;
    m.add_function(wrap_pyfunction!(tools::parse_byte_size, m)?)?;
    m.add_function(wrap_pyfunction!(tools::check_transform, m)?)?;
    m.add_function(wrap_pyfunction!(partition::pack_part, m)?)?;
    m.add_function(wrap_pyfunction!(partition::merge, m)?)?;
    m.add_function(wrap_pyfunction!(partition::status, m)?)?;
    errors::register(m)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
