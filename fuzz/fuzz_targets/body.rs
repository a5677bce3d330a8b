//! The queue API's input parsing: JSON bodies (register, token), query
//! strings and queueCredentials. No panic, whatever is accepted satisfies the
//! userId rule, and the only credential accepted for a registration is the
//! one waitgate issued for it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use waitgate::queue::input::{parse_query, user_query};
use waitgate::user::is_valid as is_valid_user_id;
use waitgate::edge::secret::Secret;
use waitgate::queue::credential::Credentials;
use waitgate::queue::{register, token};

static CREDENTIALS: std::sync::LazyLock<Credentials> = std::sync::LazyLock::new(|| {
    Credentials::new(&Secret::from_base64("dGVzdC1zZWNyZXQtZm9yLXdhaXRnYXRlLXRlc3RzLTAx").unwrap())
});

fuzz_target!(|data: &[u8]| {
    if let Ok(request) = register::parse(data) {
        assert!(is_valid_user_id(request.user.as_str()));
    }
    if let Ok(request) = token::parse(data) {
        let user = request.user.as_str();
        assert!(is_valid_user_id(user));
        assert!(!request.credential.is_empty());
        let queue = request.queue.as_deref().unwrap_or("baseball");
        if let Some(arrival) = CREDENTIALS.check(queue, user, &request.credential) {
            assert_eq!(CREDENTIALS.issue(queue, user, arrival), request.credential);
        }
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = parse_query(Some(text));
        if let Ok((user, _)) = user_query(Some(text)) {
            assert!(is_valid_user_id(user.as_str()));
        }
    }
});
