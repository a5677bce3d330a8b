//! Receipts: what register signs for a user, so that they can prove when
//! they arrived. A compact JWS (EdDSA, Ed25519) with `queue`, `sub`,
//! `arrival` (µs), `iat` (s) and, in a pre-queue, the draw's `commitment`;
//! its public keys are served as a JWKS.
//!
//! The JWS is put together here from the Ed25519 signature rather than
//! by the JWT crate: its key loading takes only DER, and the receipt key
//! is also given as a bare 32-byte seed; the signing itself is the
//! `ed25519-dalek` crate's.

use base64::engine::general_purpose::{STANDARD, URL_SAFE, URL_SAFE_NO_PAD};
use base64::Engine;
use ed25519_dalek::pkcs8::DecodePrivateKey;
use ed25519_dalek::{Signer, SigningKey, VerifyingKey};
use serde::Serialize;
use sha2::{Digest, Sha256};

/// The receipt signing key: PKCS#8 PEM, or a 32-byte seed in base64.
pub const ENV: &str = "WAITGATE_RECEIPT_KEY";
/// The key it replaced, during a rotation: its public key is still served,
/// so that receipts it signed still verify.
pub const PREVIOUS_ENV: &str = "WAITGATE_RECEIPT_KEY_PREVIOUS";

/// Why a receipt key was refused.
#[derive(Debug, thiserror::Error)]
#[error("{0} must be an Ed25519 private key: PKCS#8 PEM, or a 32-byte seed in base64")]
pub struct BadReceiptKey(&'static str);

/// What a receipt states.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ReceiptClaims {
    pub queue: String,
    /// The userId.
    pub sub: String,
    /// The registration's arrival, µs since the epoch (Redis's clock).
    pub arrival: u64,
    /// When the receipt was signed, s since the epoch.
    pub iat: u64,
    /// The commitment of the draw the user joined, in a shuffled pre-queue.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub commitment: Option<String>,
}

/// One public key, with its id: the RFC 7638 thumbprint of its JWK.
#[derive(Debug, Clone)]
struct PublicKey {
    key: VerifyingKey,
    kid: String,
}

impl PublicKey {
    fn of(key: VerifyingKey) -> PublicKey {
        let x = URL_SAFE_NO_PAD.encode(key.as_bytes());
        // The JWK's required members, in lexical order, without spaces.
        let canonical = format!(r#"{{"crv":"Ed25519","kty":"OKP","x":"{x}"}}"#);
        let kid = URL_SAFE_NO_PAD.encode(Sha256::digest(canonical.as_bytes()));
        PublicKey { key, kid }
    }

    fn jwk(&self) -> serde_json::Value {
        serde_json::json!({
            "kty": "OKP",
            "crv": "Ed25519",
            "x": URL_SAFE_NO_PAD.encode(self.key.as_bytes()),
            "kid": self.kid,
            "alg": "EdDSA",
            "use": "sig",
        })
    }
}

/// The keys receipts are signed with and checked by.
pub struct ReceiptKeys {
    signing: SigningKey,
    current: PublicKey,
    previous: Option<PublicKey>,
    /// No key was given: this one was made at start, and receipts of other
    /// instances (or of before a restart) do not verify with it.
    pub generated: bool,
}

impl std::fmt::Debug for ReceiptKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReceiptKeys")
            .field("kid", &self.current.kid)
            .field("previous", &self.previous.as_ref().map(|p| &p.kid))
            .field("generated", &self.generated)
            .finish()
    }
}

impl ReceiptKeys {
    /// Reads [`ENV`] and [`PREVIOUS_ENV`]; without the first, a key is made.
    pub fn from_env() -> Result<ReceiptKeys, BadReceiptKey> {
        let read = |name: &'static str| match std::env::var(name) {
            Ok(v) if !v.trim().is_empty() => parse(&v).map(Some).ok_or(BadReceiptKey(name)),
            _ => Ok(None),
        };
        let previous = read(PREVIOUS_ENV)?;
        Ok(match read(ENV)? {
            Some(signing) => ReceiptKeys::new(signing, previous, false),
            None => ReceiptKeys {
                previous: previous.map(|p| PublicKey::of(p.verifying_key())),
                ..ReceiptKeys::generated()
            },
        })
    }

    /// A key made now, for an instance given none.
    pub fn generated() -> ReceiptKeys {
        ReceiptKeys::new(SigningKey::from_bytes(&rand::random()), None, true)
    }

    /// From a key's text (as [`ENV`] takes it).
    pub fn from_text(current: &str, previous: Option<&str>) -> Result<ReceiptKeys, BadReceiptKey> {
        let signing = parse(current).ok_or(BadReceiptKey(ENV))?;
        let previous = match previous {
            Some(p) => Some(parse(p).ok_or(BadReceiptKey(PREVIOUS_ENV))?),
            None => None,
        };
        Ok(ReceiptKeys::new(signing, previous, false))
    }

    fn new(signing: SigningKey, previous: Option<SigningKey>, generated: bool) -> ReceiptKeys {
        let current = PublicKey::of(signing.verifying_key());
        let previous = previous
            .map(|p| PublicKey::of(p.verifying_key()))
            .filter(|p| p.kid != current.kid);
        ReceiptKeys {
            signing,
            current,
            previous,
            generated,
        }
    }

    /// The id of the key receipts are signed with now.
    pub fn kid(&self) -> &str {
        &self.current.kid
    }

    /// A compact JWS of `claims`.
    pub fn sign(&self, claims: &ReceiptClaims) -> String {
        let header = serde_json::json!({"alg": "EdDSA", "typ": "JWT", "kid": self.current.kid});
        let mut jws = URL_SAFE_NO_PAD.encode(header.to_string());
        jws.push('.');
        jws.push_str(
            &URL_SAFE_NO_PAD.encode(serde_json::to_vec(claims).expect("claims serialise")),
        );
        let signature = self.signing.sign(jws.as_bytes());
        jws.push('.');
        jws.push_str(&URL_SAFE_NO_PAD.encode(signature.to_bytes()));
        jws
    }

    /// The public keys as a JWKS: the current key, then the previous one.
    pub fn jwks(&self) -> Vec<u8> {
        let keys: Vec<serde_json::Value> = std::iter::once(&self.current)
            .chain(&self.previous)
            .map(PublicKey::jwk)
            .collect();
        serde_json::to_vec(&serde_json::json!({ "keys": keys })).expect("a JWKS serialises")
    }
}

/// A key from PKCS#8 PEM, or from a 32-byte seed in base64 (standard or
/// URL-safe alphabet, padded or not).
fn parse(text: &str) -> Option<SigningKey> {
    let text = text.trim();
    if text.starts_with("-----BEGIN") {
        return SigningKey::from_pkcs8_pem(text).ok();
    }
    let bytes = [&STANDARD, &URL_SAFE, &URL_SAFE_NO_PAD]
        .iter()
        .find_map(|engine| engine.decode(text).ok())
        .or_else(|| {
            base64::engine::general_purpose::STANDARD_NO_PAD
                .decode(text)
                .ok()
        })?;
    Some(SigningKey::from_bytes(&<[u8; 32]>::try_from(bytes).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::pkcs8::EncodePrivateKey;

    fn seed_text(byte: u8) -> String {
        STANDARD.encode([byte; 32])
    }

    #[test]
    fn a_key_is_pem_or_a_base64_seed_and_nothing_else() {
        let from_seed = ReceiptKeys::from_text(&seed_text(7), None).unwrap();
        let pem = SigningKey::from_bytes(&[7; 32])
            .to_pkcs8_pem(Default::default())
            .unwrap();
        let from_pem = ReceiptKeys::from_text(&pem, None).unwrap();
        assert_eq!(from_seed.kid(), from_pem.kid());
        let url_safe = URL_SAFE_NO_PAD.encode([7u8; 32]);
        assert_eq!(
            ReceiptKeys::from_text(&url_safe, None).unwrap().kid(),
            from_seed.kid()
        );
        for bad in [
            "",
            "not a key",
            &STANDARD.encode([7u8; 31]),
            "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----",
        ] {
            let e = ReceiptKeys::from_text(bad, None).unwrap_err();
            assert!(e.to_string().starts_with(ENV), "{e}");
        }
        let e = ReceiptKeys::from_text(&seed_text(7), Some("x")).unwrap_err();
        assert!(e.to_string().starts_with(PREVIOUS_ENV), "{e}");
    }

    #[test]
    fn the_kid_is_the_rfc_7638_thumbprint() {
        // RFC 8037, appendix A.3: the thumbprint of its example key.
        let seed = hex_bytes("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60");
        let keys = ReceiptKeys::from_text(&STANDARD.encode(seed), None).unwrap();
        assert_eq!(keys.kid(), "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k");
    }

    #[test]
    fn a_receipt_verifies_with_the_published_key_and_a_rotation_keeps_both() {
        let keys = ReceiptKeys::from_text(&seed_text(1), Some(&seed_text(2))).unwrap();
        let claims = ReceiptClaims {
            queue: "baseball".into(),
            sub: "alice".into(),
            arrival: 1_700_000_000_123_456,
            iat: 1_700_000_000,
            commitment: Some("ab".repeat(32)),
        };
        let jws = keys.sign(&claims);
        let jwks: jsonwebtoken::jwk::JwkSet = serde_json::from_slice(&keys.jwks()).unwrap();
        assert_eq!(jwks.keys.len(), 2);
        let header = jsonwebtoken::decode_header(&jws).unwrap();
        let jwk = jwks.find(header.kid.as_deref().unwrap()).unwrap();
        let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::EdDSA);
        validation.required_spec_claims.clear();
        validation.validate_exp = false;
        let decoded = jsonwebtoken::decode::<ReceiptClaims>(
            &jws,
            &jsonwebtoken::DecodingKey::from_jwk(jwk).unwrap(),
            &validation,
        )
        .unwrap();
        assert_eq!(decoded.claims, claims);
        // Another key's signature does not verify with this one.
        let other = ReceiptKeys::from_text(&seed_text(3), None).unwrap();
        let forged = other.sign(&claims);
        let body = &forged[..forged.rfind('.').unwrap()];
        let tampered = format!("{body}{}", &jws[jws.rfind('.').unwrap()..]);
        assert!(jsonwebtoken::decode::<ReceiptClaims>(
            &tampered,
            &jsonwebtoken::DecodingKey::from_jwk(jwk).unwrap(),
            &validation,
        )
        .is_err());
    }

    fn hex_bytes(hex: &str) -> Vec<u8> {
        (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect()
    }
}
