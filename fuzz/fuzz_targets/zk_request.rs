#![no_main]

use arbor_fuzz as _;

libfuzzer_sys::fuzz_target!(|data: &[u8]| arbor_server::fuzzing::zk_request(data));
