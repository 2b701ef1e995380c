//! One module per subcommand, each a thin layer over library calls.

pub mod bench;
pub mod cache;
pub mod inspect;
pub mod pack;
pub mod preview;
pub mod read;
pub mod verify;
