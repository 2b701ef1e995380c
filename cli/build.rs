//! Link settings for the `shardtool` binary.

fn main() {
    // A position-dependent executable: the loader then has no relative relocations to apply at
    // start-up (about 23,000 here, copying some 90 pages), which took about a millisecond off
    // every run. That matters for short commands such as `verify` of a small dataset, measured
    // against `cat`. The libraries stay position-independent; only this binary loses address
    // randomisation of its own image.
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
}
