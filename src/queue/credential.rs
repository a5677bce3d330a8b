//! The queueCredential: proof that a client is the one that registered.
//!
//! It is 192 bits from the operating system's CSPRNG, sent once (in the first
//! register reply) as URL-safe Base64. Redis holds only its SHA-256 digest, so
//! neither a copy of Redis nor a timing difference in comparing digests says
//! anything about a credential.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rand::TryRngCore;
use sha2::{Digest as _, Sha256};

use crate::store::Digest;

/// Random bytes in a credential (at least 128 bits are required).
const BYTES: usize = 24;

/// The longest credential header value worth hashing; anything longer cannot
/// be one of ours.
pub const MAX_LEN: usize = 256;

/// A fresh credential and the digest to store.
pub struct Fresh {
    pub credential: String,
    pub digest: Digest,
}

/// Why no credential could be made: the OS random source failed, which
/// should never happen on Linux once booted.
#[derive(Debug, thiserror::Error)]
#[error("the operating system's random source failed: {0}")]
pub struct RandomError(String);

pub fn generate() -> Result<Fresh, RandomError> {
    let mut raw = [0u8; BYTES];
    rand::rngs::OsRng
        .try_fill_bytes(&mut raw)
        .map_err(|e| RandomError(e.to_string()))?;
    let credential = URL_SAFE_NO_PAD.encode(raw);
    let digest = digest(&credential);
    Ok(Fresh { credential, digest })
}

/// The digest of a presented credential, as stored by `register`.
pub fn digest(credential: &str) -> Digest {
    Sha256::digest(credential.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_url_safe_and_distinct() {
        let a = generate().unwrap();
        let b = generate().unwrap();
        assert_ne!(a.credential, b.credential);
        assert_eq!(a.credential.len(), 32);
        assert!(a
            .credential
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_'));
        assert_eq!(a.digest, digest(&a.credential));
        assert_ne!(a.digest, b.digest);
    }
}
