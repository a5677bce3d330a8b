//! The admin API's bearer token, from `WAITGATE_ADMIN_TOKEN`.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

pub const ENV: &str = "WAITGATE_ADMIN_TOKEN";

/// Shorter tokens are refused at start: the admin API can pause an event.
const MIN_ADMIN_TOKEN_BYTES: usize = 16;

/// The token, kept as its SHA-256: comparing two digests of equal length
/// in constant time tells an attacker nothing about the token's length or
/// its first differing byte.
pub struct AdminToken {
    digest: [u8; 32],
}

#[derive(Debug, thiserror::Error)]
pub enum AdminTokenError {
    #[error("{ENV} must be at least {MIN_ADMIN_TOKEN_BYTES} characters (it is {0})")]
    TooShort(usize),
    #[error("{ENV} must be printable ASCII without spaces")]
    NotPrintable,
}

impl AdminToken {
    /// The token from the environment: `None` when unset (the admin API is
    /// then off).
    pub fn from_env() -> Result<Option<AdminToken>, AdminTokenError> {
        match std::env::var(ENV) {
            Ok(value) => AdminToken::new(&value).map(Some),
            Err(_) => Ok(None),
        }
    }

    pub fn new(value: &str) -> Result<AdminToken, AdminTokenError> {
        if !value.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(AdminTokenError::NotPrintable);
        }
        if value.len() < MIN_ADMIN_TOKEN_BYTES {
            return Err(AdminTokenError::TooShort(value.len()));
        }
        Ok(AdminToken {
            digest: Sha256::digest(value.as_bytes()).into(),
        })
    }

    /// Whether an `Authorization` header value is `Bearer <the token>`.
    pub fn admits(&self, authorization: &[u8]) -> bool {
        let Some(given) = crate::wire::authorization::bearer(authorization) else {
            return false;
        };
        let digest: [u8; 32] = Sha256::digest(given).into();
        bool::from(digest.ct_eq(&self.digest))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_only_the_bearer_token() {
        let token = AdminToken::new("0123456789abcdef-admin").unwrap();
        assert!(token.admits(b"Bearer 0123456789abcdef-admin"));
        assert!(token.admits(b"bearer  0123456789abcdef-admin "));
        for wrong in [
            &b""[..],
            b"Bearer",
            b"Bearer ",
            b"Bearer 0123456789abcdef-admiN",
            b"Bearer 0123456789abcdef-admin2",
            b"Basic 0123456789abcdef-admin",
            b"0123456789abcdef-admin",
        ] {
            assert!(!token.admits(wrong), "{wrong:?}");
        }
        assert!(AdminToken::new("short").is_err());
        assert!(AdminToken::new("has a space in it, long").is_err());
    }
}
