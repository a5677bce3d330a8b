//! The edge guard: the signing key and (with the routes) the JWT checks made
//! before anything is forwarded.

pub mod cache;
pub mod jwt;
pub mod login;
pub mod revoked;
pub mod secret;

use jsonwebtoken::{decode, encode, Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

use secret::{Keys, Secret, SecretError};

/// Signs and verifies one throwaway token with each key.
///
/// jsonwebtoken needs exactly one crypto backend compiled in, or its first
/// sign or verify panics; doing one at start turns a build mistake into a
/// start-up error instead of a failed request.
pub fn self_test(keys: &Keys) -> Result<(), SecretError> {
    self_test_one(&keys.current, secret::ENV)?;
    match &keys.previous {
        Some(previous) => self_test_one(previous, secret::PREVIOUS_ENV),
        None => Ok(()),
    }
}

fn self_test_one(secret: &Secret, var: &'static str) -> Result<(), SecretError> {
    #[derive(Serialize, Deserialize)]
    struct Probe {
        sub: String,
        exp: u64,
    }
    let probe = Probe {
        sub: "self-test".into(),
        exp: u64::MAX / 2,
    };
    let token = encode(
        &Header::new(Algorithm::HS256),
        &probe,
        &EncodingKey::from_secret(secret.as_bytes()),
    )
    .map_err(|_| SecretError::Unusable(var))?;
    let mut validation = Validation::new(Algorithm::HS256);
    validation.validate_aud = false;
    decode::<Probe>(
        &token,
        &DecodingKey::from_secret(secret.as_bytes()),
        &validation,
    )
    .map(drop)
    .map_err(|_| SecretError::Unusable(var))
}
