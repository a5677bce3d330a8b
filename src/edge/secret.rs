//! The HS256 signing keys: `JWT_SECRET`, and during a rotation the key it
//! replaced, `JWT_SECRET_PREVIOUS`.
//!
//! New tokens and credentials are made with the current key only; the
//! previous key is still accepted, so that a rotation invalidates nothing
//! that is in use. Tokens name their key in the `kid` header, so checking
//! one costs one signature check whichever key made it.

use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// The environment variable that holds the current key.
pub const ENV: &str = "JWT_SECRET";

/// The environment variable that holds the key being rotated out.
pub const PREVIOUS_ENV: &str = "JWT_SECRET_PREVIOUS";

/// HS256 wants a key at least as long as its output (RFC 7518 §3.2).
pub const MIN_BYTES: usize = 32;

/// Why a key was refused. Messages name the variable and never echo it.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SecretError {
    #[error("{0} is not set; export the Base64 of at least 32 random bytes, e.g. {0}=$(openssl rand -base64 32)")]
    Missing(&'static str),
    #[error("{0} is not valid Base64")]
    NotBase64(&'static str),
    #[error("{0} decodes to {1} bytes; at least 32 are required")]
    TooShort(&'static str, usize),
    #[error("{0} could not sign and verify a test token")]
    Unusable(&'static str),
    #[error("JWT_SECRET_PREVIOUS is the same key as JWT_SECRET; unset it once a rotation is over")]
    SameAsCurrent,
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
        Secret::from_var(ENV)?.ok_or(SecretError::Missing(ENV))
    }

    /// Reads the key in the environment variable `var`, if it is set.
    fn from_var(var: &'static str) -> Result<Option<Secret>, SecretError> {
        match std::env::var(var) {
            Ok(value) if value.trim().is_empty() => Ok(None),
            Ok(value) => Secret::decode(var, &value).map(Some),
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => Err(SecretError::NotBase64(var)),
        }
    }

    /// Decodes a Base64 key. Both alphabets are accepted, padded or not, since
    /// `openssl rand -base64` and URL-safe generators are both common.
    pub fn from_base64(value: &str) -> Result<Secret, SecretError> {
        Secret::decode(ENV, value)
    }

    fn decode(var: &'static str, value: &str) -> Result<Secret, SecretError> {
        let value = value.trim();
        if value.is_empty() {
            return Err(SecretError::Missing(var));
        }
        let bytes = [STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD]
            .iter()
            .find_map(|engine| engine.decode(value).ok())
            .ok_or(SecretError::NotBase64(var))?;
        if bytes.len() < MIN_BYTES {
            return Err(SecretError::TooShort(var, bytes.len()));
        }
        Ok(Secret(bytes))
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// A MAC key of its own for one use of this secret: HMAC-SHA256 keyed
    /// with HMAC(secret, `label`), so that no MAC made for one use (a queue
    /// credential, a challenge) is ever valid for another, nor an HS256
    /// signature.
    pub fn derived_mac(&self, label: &[u8]) -> Hmac<Sha256> {
        let mut derive =
            Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        derive.update(label);
        let key = derive.finalize().into_bytes();
        Hmac::<Sha256>::new_from_slice(&key).expect("HMAC takes keys of any length")
    }

    /// The key's id for the `kid` header: the first 64 bits of a labelled
    /// SHA-256 of the key, which names the key without revealing it.
    pub fn kid(&self) -> String {
        let mut hash = Sha256::new();
        hash.update(b"waitgate key id v1");
        hash.update(&self.0);
        URL_SAFE_NO_PAD.encode(&hash.finalize()[..8])
    }
}

/// The keys in use: the current one, and during a rotation the previous.
#[derive(Debug, Clone)]
pub struct Keys {
    pub current: Secret,
    pub previous: Option<Secret>,
}

impl Keys {
    /// Reads `JWT_SECRET` (required) and `JWT_SECRET_PREVIOUS` (optional).
    pub fn from_env() -> Result<Keys, SecretError> {
        let current = Secret::from_env()?;
        let previous = Secret::from_var(PREVIOUS_ENV)?;
        if previous.as_ref().is_some_and(|p| p.0 == current.0) {
            return Err(SecretError::SameAsCurrent);
        }
        Ok(Keys { current, previous })
    }

    /// One key, no rotation under way.
    pub fn single(current: Secret) -> Keys {
        Keys {
            current,
            previous: None,
        }
    }

    /// The current key first, then the previous one.
    pub fn all(&self) -> impl Iterator<Item = &Secret> {
        std::iter::once(&self.current).chain(self.previous.as_ref())
    }
}

/// The MAC keys of one use (see [`Secret::derived_mac`]), derived from the
/// JWT keys: the current one makes, and during a rotation the previous one
/// still checks. Its `Debug` shows no key.
#[derive(Clone)]
pub struct DerivedKeys {
    /// The current key first.
    keys: Vec<Hmac<Sha256>>,
}

impl DerivedKeys {
    pub fn new(keys: &Keys, label: &[u8]) -> DerivedKeys {
        DerivedKeys {
            keys: keys.all().map(|secret| secret.derived_mac(label)).collect(),
        }
    }

    /// The key that makes.
    pub fn current(&self) -> &Hmac<Sha256> {
        &self.keys[0]
    }

    /// Whether any key, each checked in constant time, passes `verifies`:
    /// which key matched, or that none did, is all a timing could tell.
    pub fn any(&self, verifies: impl Fn(&Hmac<Sha256>) -> bool) -> bool {
        self.keys
            .iter()
            .fold(false, |found, key| verifies(key) | found)
    }
}

impl std::fmt::Debug for DerivedKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DerivedKeys({} keys)", self.keys.len())
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
            SecretError::TooShort(ENV, 31)
        );
        assert_eq!(
            Secret::from_base64("  ").unwrap_err(),
            SecretError::Missing(ENV)
        );
        assert_eq!(
            Secret::from_base64("not base64 at all!").unwrap_err(),
            SecretError::NotBase64(ENV)
        );
    }

    #[test]
    fn never_prints_the_key() {
        let s = Secret::from_base64(&STANDARD.encode([b'k'; 40])).unwrap();
        assert_eq!(format!("{s:?}"), "Secret(40 bytes)");
        for e in [
            SecretError::Missing(ENV),
            SecretError::NotBase64(ENV),
            SecretError::TooShort(ENV, 3),
        ] {
            assert!(e.to_string().contains("JWT_SECRET"));
        }
        assert!(SecretError::NotBase64(PREVIOUS_ENV)
            .to_string()
            .starts_with("JWT_SECRET_PREVIOUS "));
    }

    #[test]
    fn key_ids_tell_keys_apart_and_reveal_nothing() {
        let a = Secret::from_base64(&STANDARD.encode([1u8; 32])).unwrap();
        let b = Secret::from_base64(&STANDARD.encode([2u8; 32])).unwrap();
        assert_eq!(a.kid(), a.clone().kid());
        assert_ne!(a.kid(), b.kid());
        assert_eq!(a.kid().len(), 11);
        assert!(!a.kid().contains(&STANDARD.encode([1u8; 8])[..8]));
        let keys = Keys {
            current: a.clone(),
            previous: Some(b.clone()),
        };
        let kids: Vec<_> = keys.all().map(Secret::kid).collect();
        assert_eq!(kids, [a.kid(), b.kid()]);
    }
}
