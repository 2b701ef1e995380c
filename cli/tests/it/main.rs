//! End-to-end tests of the `shardtool` binary, one test binary with a module per area: one link
//! instead of one per file, and shared helpers in `common`.

mod common;

mod attempts;
mod cli;
mod colour;
mod determinism;
mod diskfull;
mod fields;
mod formats;
mod hardening;
mod image_field;
mod inputs;
mod inspect_preview;
mod interop;
mod list;
mod memory;
mod merge;
mod orientation;
mod pack_inputs;
mod partition;
mod plan_guards;
mod read;
mod remote;
mod remote_pack;
mod resize;
mod sharding;
mod stress;
mod tidy;
mod transform;
mod untrusted;
mod verify;
