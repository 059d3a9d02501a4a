#![no_main]

libfuzzer_sys::fuzz_target!(|ops: Vec<infergate_fuzz::shm_params::Op>| {
    infergate_fuzz::shm_params::run(&ops)
});
