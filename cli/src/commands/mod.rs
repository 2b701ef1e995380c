//! One module per subcommand, each a thin layer over library calls.

pub mod pack;
