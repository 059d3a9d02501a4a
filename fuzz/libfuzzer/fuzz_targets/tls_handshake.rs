#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| infergate_fuzz::tls_handshake::run(data));
