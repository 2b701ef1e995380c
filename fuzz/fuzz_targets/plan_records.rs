//! a partitioned pack's `plan.json`, `inputs.jsonl` and done records: see `shardtool_fuzz_checks::plan_records` for what is checked.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shardtool_fuzz_checks::plan_records(data));
