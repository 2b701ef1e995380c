//! Link settings for the `shardtool` binary.

fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return;
    }
    // A position-dependent executable: the loader then has no relative relocations to apply at
    // start-up (about 23,000 here, copying some 90 pages), which took about a millisecond off
    // every run. That matters for short commands such as `verify` of a small dataset, measured
    // against `cat`. The libraries stay position-independent; only this binary loses address
    // randomisation of its own image.
    println!("cargo:rustc-link-arg-bins=-no-pie");
    if std::env::var("CARGO_CFG_TARGET_ENV").as_deref() == Ok("gnu") {
        // The unwinder from libgcc's static archive (what `gcc -static-libgcc` links), so the
        // binary does not load libgcc_s.so at start-up: one library less to map and relocate,
        // and no run of its constructor, which asks the CPU for its features with a dozen CPUID
        // instructions (each a trap to the hypervisor in a VM). `--version` went from 1.26 to
        // 1.15 ms on the benchmark VM. Listed before std's `-lgcc_s`, the archive defines the
        // `_Unwind_*` symbols first, and `--as-needed` then drops libgcc_s.
        println!("cargo:rustc-link-lib=static=gcc_eh");
    }
}
