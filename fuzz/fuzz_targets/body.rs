//! The queue API's input parsing: JSON bodies (register, token), query
//! strings and queueCredentials. No panic, whatever is accepted satisfies the
//! userId rule, and the only credential accepted for a registration is the
//! one waitgate issued for it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use waitgate::edge::secret::Secret;
use waitgate::queue_api::credential::Credentials;
use waitgate::queue_api::input::{parse_query, user_query};
use waitgate::queue_api::{register, token};
use waitgate::user::is_valid as is_valid_user_id;

static CREDENTIALS: std::sync::LazyLock<Credentials> = std::sync::LazyLock::new(|| {
    Credentials::new(&Secret::from_base64("dGVzdC1zZWNyZXQtZm9yLXdhaXRnYXRlLXRlc3RzLTAx").unwrap())
});

fuzz_target!(|data: &[u8]| {
    if let Ok(request) = register::parse(data) {
        if let Some(user) = &request.user {
            assert!(is_valid_user_id(user.as_str()));
        }
    }
    if let Ok(request) = token::parse(data) {
        // Both or neither (a browser's cookie holds them).
        assert_eq!(request.user.is_some(), request.credential.is_some());
        if let (Some(user), Some(credential)) = (&request.user, &request.credential) {
            let user = user.as_str();
            assert!(is_valid_user_id(user));
            assert!(!credential.is_empty());
            let queue = request.queue.as_deref().unwrap_or("baseball");
            if let Some((arrival, number)) = CREDENTIALS.check_numbered(queue, user, credential) {
                assert_eq!(&CREDENTIALS.issue(queue, user, arrival, number), credential);
            }
        }
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = parse_query(Some(text));
        if let Ok((user, _)) = user_query(Some(text)) {
            assert!(is_valid_user_id(user.as_str()));
        }
    }
});
