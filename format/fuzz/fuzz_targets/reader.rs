//! Any byte sequence must give a recording, a damage report or an error:
//! never a panic, never an allocation beyond the input's size.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(rec) = flamerec_format::Recording::read(data) {
        // Walk every stack: ids handed out must resolve.
        for s in &rec.samples {
            let _ = rec.tables.stack_frames(s.stack).count();
        }
    }
    let _ = flamerec_format::Summary::read(data);
});
