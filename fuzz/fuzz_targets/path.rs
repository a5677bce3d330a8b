//! The path classifier and the absolute-form cut: no panic on any bytes, and
//! whatever is accepted under a prefix needs no normalisation.
#![no_main]

use libfuzzer_sys::fuzz_target;
use waitgate::path::{classify, origin_form, under_prefix};

fuzz_target!(|data: &[u8]| {
    let Some(target) = origin_form(data) else {
        return;
    };
    if classify(&target).is_err() {
        return;
    }
    // Accepted: ASCII only, so it is a str, and no segment can be a dot
    // segment or empty once percent escapes are decoded.
    let text = std::str::from_utf8(&target).expect("accepted targets are ASCII");
    let path = text.split('?').next().unwrap_or(text);
    for segment in path.split('/').skip(1) {
        assert!(segment != "." && segment != "..", "{path}");
        let lower = segment.to_ascii_lowercase();
        assert!(
            !lower.contains("%2e") && !lower.contains("%2f") && !lower.contains("%25"),
            "{path}"
        );
    }
    assert!(
        !path.contains("//") && !path.contains('\\') && !path.contains(';'),
        "{path}"
    );
    let _ = under_prefix(path, "/api/v1/follow-up");
});
