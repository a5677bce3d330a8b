//! The HS256 signing key, read from `JWT_SECRET`.

use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use base64::Engine;

/// The environment variable that holds the key.
pub const ENV: &str = "JWT_SECRET";

/// HS256 wants a key at least as long as its output (RFC 7518 §3.2).
pub const MIN_BYTES: usize = 32;

/// Why the secret was refused. Messages name `JWT_SECRET` and never echo it.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SecretError {
    #[error("JWT_SECRET is not set; export the Base64 of at least 32 random bytes, e.g. JWT_SECRET=$(openssl rand -base64 32)")]
    Missing,
    #[error("JWT_SECRET is not valid Base64")]
    NotBase64,
    #[error("JWT_SECRET decodes to {0} bytes; at least 32 are required")]
    TooShort(usize),
    #[error("JWT_SECRET could not sign and verify a test token")]
    Unusable,
}

/// The decoded key. `Debug` is implemented by hand so the key can never end
/// up in a log line.
#[derive(Clone)]
pub struct Secret(Vec<u8>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret({} bytes)", self.0.len())
    }
}

impl Secret {
    /// Reads `JWT_SECRET` from the process environment.
    pub fn from_env() -> Result<Secret, SecretError> {
        match std::env::var(ENV) {
            Ok(value) => Secret::from_base64(&value),
            Err(std::env::VarError::NotPresent) => Err(SecretError::Missing),
            Err(std::env::VarError::NotUnicode(_)) => Err(SecretError::NotBase64),
        }
    }

    /// Decodes a Base64 key. Both alphabets are accepted, padded or not, since
    /// `openssl rand -base64` and URL-safe generators are both common.
    pub fn from_base64(value: &str) -> Result<Secret, SecretError> {
        let value = value.trim();
        if value.is_empty() {
            return Err(SecretError::Missing);
        }
        let bytes = [STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD]
            .iter()
            .find_map(|engine| engine.decode(value).ok())
            .ok_or(SecretError::NotBase64)?;
        if bytes.len() < MIN_BYTES {
            return Err(SecretError::TooShort(bytes.len()));
        }
        Ok(Secret(bytes))
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_32_bytes_in_either_alphabet() {
        let raw = [0xfbu8; 32];
        for engine in [STANDARD, URL_SAFE_NO_PAD] {
            let s = Secret::from_base64(&engine.encode(raw)).unwrap();
            assert_eq!(s.as_bytes(), raw);
        }
    }

    #[test]
    fn refuses_short_empty_and_garbage() {
        assert_eq!(
            Secret::from_base64(&STANDARD.encode([1u8; 31])).unwrap_err(),
            SecretError::TooShort(31)
        );
        assert_eq!(Secret::from_base64("  ").unwrap_err(), SecretError::Missing);
        assert_eq!(
            Secret::from_base64("not base64 at all!").unwrap_err(),
            SecretError::NotBase64
        );
    }

    #[test]
    fn never_prints_the_key() {
        let s = Secret::from_base64(&STANDARD.encode([b'k'; 40])).unwrap();
        assert_eq!(format!("{s:?}"), "Secret(40 bytes)");
        for e in [
            SecretError::Missing,
            SecretError::NotBase64,
            SecretError::TooShort(3),
        ] {
            assert!(e.to_string().contains("JWT_SECRET"));
        }
    }
}
