//! The Authorization header and JWT claim checks: no panic on any header
//! values, and nothing but a token signed with the key is ever accepted.
#![no_main]

use std::sync::LazyLock;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use waitgate::config::JwtConfig;
use waitgate::edge::jwt::Tokens;
use waitgate::edge::secret::Secret;

static TOKENS: LazyLock<Tokens> = LazyLock::new(|| {
    let secret =
        Secret::from_base64("ZnV6ei1zZWNyZXQtZm9yLXdhaXRnYXRlLWZ1enotdGFyZ2V0cw==").unwrap();
    Tokens::new(
        &secret,
        &JwtConfig {
            issuer: "waitgate".into(),
            audience: "ticketing".into(),
            ttl: Duration::from_secs(600),
            leeway: Duration::from_secs(5),
        },
    )
});

fuzz_target!(|data: &[u8]| {
    // Up to three header values, split on a byte that cannot be in a header.
    let values: Vec<&[u8]> = data.splitn(3, |&b| b == b'\n').collect();
    let now = 1_800_000_000;
    let accepted = TOKENS.check(values.iter().copied(), "baseball", now);
    // Random bytes never carry a valid HS256 signature under our key.
    assert!(
        accepted.is_err(),
        "accepted {:?}",
        String::from_utf8_lossy(data)
    );
});
