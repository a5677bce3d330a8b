//! The queue API's input parsing: JSON bodies (register, token) and query
//! strings. No panic, and whatever is accepted satisfies the userId rule.
#![no_main]

use libfuzzer_sys::fuzz_target;
use waitgate::queue::input::{is_valid_user_id, parse_query, user_query};
use waitgate::queue::{register, token};

fuzz_target!(|data: &[u8]| {
    if let Ok(body) = register::parse(data) {
        assert!(is_valid_user_id(&body.user_id));
    }
    if let Ok(body) = token::parse(data) {
        assert!(is_valid_user_id(&body.user_id));
        assert!(!body.queue_credential.is_empty());
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = parse_query(Some(text));
        if let Ok((user, _)) = user_query(Some(text)) {
            assert!(is_valid_user_id(&user));
        }
    }
});
