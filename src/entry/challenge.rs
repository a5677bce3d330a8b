//! Proof of work: the challenge a register must answer when its queue has
//! `challenge` set, and `GET /api/v1/queue/challenge?queue=<q>`.
//!
//! A challenge is a message authentication code, not a stored record, so
//! issuing one costs waitgate one HMAC and Redis nothing:
//!
//! ```text
//! challenge = base64url( expiry_ms ‖ bits ‖ id ‖ HMAC-SHA256(K, queue, expiry_ms ‖ bits ‖ id)[..16] )
//! ```
//!
//! `expiry_ms` is 8 bytes big-endian, `bits` the difficulty (1 byte), `id`
//! 12 random bytes; 37 bytes, 50 characters. `K` is derived from
//! `JWT_SECRET` under a label of its own, so any instance checks any
//! challenge, during a rotation with the previous key too.
//!
//! A register answers it with `X-Waitgate-Proof: <challenge>:<nonce>`,
//! where SHA-256 of that whole value starts with `bits` zero bits. Checking
//! costs one SHA-256 and one HMAC, and no Redis call: only a proof that
//! passes reaches Redis, where `register.lua`, once the proof bought a
//! place, records its `id` until the challenge expires and refuses it the
//! second time (in the one call it shares with the register).

use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use rand::TryRngCore;
use sha2::{Digest, Sha256};

use crate::edge::secret::{DerivedKeys, Keys, Secret};

type HmacSha256 = Hmac<Sha256>;

/// Bytes of each part of a challenge.
const EXPIRY: usize = 8;
const BITS: usize = 1;
const ID: usize = 12;
const TAG: usize = 16;
const SIGNED: usize = EXPIRY + BITS + ID;
const BYTES: usize = SIGNED + TAG;

/// The longest nonce taken: a counter a browser could never run past, with
/// room for a solver's own prefix.
pub const MAX_NONCE_BYTES: usize = 64;

/// The most difficulty a queue may ask: 2^32 hashes is minutes in a
/// browser, already far past what a visitor would sit through.
pub const MAX_DIFFICULTY_BITS: u8 = 32;

/// Separates the challenge key from every other use of `JWT_SECRET`.
const KEY_LABEL: &[u8] = b"waitgate proof-of-work challenge v1";

/// A challenge just issued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issued {
    pub challenge: String,
    pub difficulty_bits: u8,
    pub expires_in_ms: u64,
}

/// A proof that passed every check short of Redis: what `register.lua`
/// records so that it is taken once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spent {
    /// The challenge's id, base64url (16 characters).
    pub id: String,
    /// When the challenge expires (ms since the epoch): the record is kept
    /// until then, and no longer, since an expired challenge is refused
    /// here.
    pub expires_at_ms: u64,
}

/// Why a proof was refused; each is a 403 `proof_invalid`, told apart only
/// in the metric and the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Not `<challenge>:<nonce>` as the grammar says.
    Malformed,
    /// A challenge no key of ours issued, or issued for another queue.
    Forged,
    Expired,
    /// Issued at less difficulty than the queue asks now (an operator
    /// raised it): the client fetches a new challenge.
    TooEasy,
    /// The hash does not start with enough zero bits.
    Wrong,
    /// The proof already bought a place, or its challenge expired by
    /// Redis's clock (found so by `register.lua`).
    Reused,
}

impl Refused {
    /// The metric label.
    pub fn reason(self) -> &'static str {
        match self {
            Refused::Malformed => "malformed",
            Refused::Forged => "forged",
            Refused::Expired => "expired",
            Refused::TooEasy => "stale_difficulty",
            Refused::Wrong => "wrong",
            Refused::Reused => "reused",
        }
    }
}

/// Issues challenges with the current key and checks them with the current
/// or, during a rotation, the previous one.
#[derive(Clone, Debug)]
pub struct Challenges {
    keys: DerivedKeys,
}

impl Challenges {
    pub fn new(secret: &Secret) -> Challenges {
        Challenges::with_keys(&Keys::single(secret.clone()))
    }

    pub fn with_keys(keys: &Keys) -> Challenges {
        Challenges {
            keys: DerivedKeys::new(keys, KEY_LABEL),
        }
    }

    /// A new challenge for `queue` at `bits` of difficulty, good for `ttl`.
    pub fn issue(&self, queue: &str, bits: u8, ttl: Duration, now_ms: u64) -> Issued {
        let expires_in_ms = ttl.as_millis() as u64;
        let mut raw = [0u8; BYTES];
        raw[..EXPIRY].copy_from_slice(&(now_ms + expires_in_ms).to_be_bytes());
        raw[EXPIRY] = bits;
        rand::rngs::OsRng
            .try_fill_bytes(&mut raw[EXPIRY + BITS..SIGNED])
            .expect("the OS random source works");
        let tag = keyed(self.keys.current(), queue, &raw[..SIGNED]).finalize();
        raw[SIGNED..].copy_from_slice(&tag.into_bytes()[..TAG]);
        Issued {
            challenge: URL_SAFE_NO_PAD.encode(raw),
            difficulty_bits: bits,
            expires_in_ms,
        }
    }

    /// Checks a proof (the `X-Waitgate-Proof` value) for `queue`, which
    /// asks `bits` of difficulty now. Whether it was used already is for
    /// Redis to say.
    pub fn check(&self, queue: &str, bits: u8, proof: &str, now_ms: u64) -> Result<Spent, Refused> {
        let (challenge, nonce) = proof.rsplit_once(':').ok_or(Refused::Malformed)?;
        if nonce.is_empty()
            || nonce.len() > MAX_NONCE_BYTES
            || !nonce.bytes().all(is_nonce_byte)
            || challenge.len() != encoded_len()
        {
            return Err(Refused::Malformed);
        }
        let mut raw = [0u8; BYTES];
        match URL_SAFE_NO_PAD.decode_slice(challenge, &mut raw) {
            Ok(BYTES) => {}
            _ => return Err(Refused::Malformed),
        }
        let issued_here = self.keys.any(|key| {
            keyed(key, queue, &raw[..SIGNED])
                .verify_truncated_left(&raw[SIGNED..])
                .is_ok()
        });
        if !issued_here {
            return Err(Refused::Forged);
        }
        let expires_at_ms = u64::from_be_bytes(raw[..EXPIRY].try_into().expect("8 bytes"));
        if expires_at_ms <= now_ms {
            return Err(Refused::Expired);
        }
        let asked = raw[EXPIRY];
        if asked < bits {
            return Err(Refused::TooEasy);
        }
        if leading_zero_bits(&Sha256::digest(proof.as_bytes())) < u32::from(asked) {
            return Err(Refused::Wrong);
        }
        Ok(Spent {
            id: URL_SAFE_NO_PAD.encode(&raw[EXPIRY + BITS..SIGNED]),
            expires_at_ms,
        })
    }
}

/// The characters of a nonce: URL-safe ones, as a counter or a random
/// string is written.
fn is_nonce_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~')
}

/// The length of an encoded challenge.
const fn encoded_len() -> usize {
    (BYTES * 4).div_ceil(3)
}

/// How many zero bits `digest` starts with.
pub fn leading_zero_bits(digest: &[u8]) -> u32 {
    let mut bits = 0;
    for byte in digest {
        if *byte == 0 {
            bits += 8;
        } else {
            return bits + byte.leading_zeros();
        }
    }
    bits
}

/// The MAC over the queue (length-prefixed) and the signed bytes.
fn keyed(key: &HmacSha256, queue: &str, signed: &[u8]) -> HmacSha256 {
    let mut mac = key.clone();
    mac.update(&(queue.len() as u32).to_be_bytes());
    mac.update(queue.as_bytes());
    mac.update(signed);
    mac
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn challenges(byte: u8) -> Challenges {
        Challenges::new(&Secret::from_base64(&URL_SAFE_NO_PAD.encode([byte; 32])).unwrap())
    }

    /// The first nonce that answers `challenge` (what a client does).
    pub fn solve(challenge: &str) -> String {
        let mut raw = [0u8; BYTES];
        URL_SAFE_NO_PAD.decode_slice(challenge, &mut raw).unwrap();
        let bits = u32::from(raw[EXPIRY]);
        (0u64..)
            .map(|n| format!("{challenge}:{n}"))
            .find(|proof| leading_zero_bits(&Sha256::digest(proof.as_bytes())) >= bits)
            .unwrap()
    }

    #[test]
    fn a_solved_challenge_passes_once_per_id_and_names_its_expiry() {
        let c = challenges(1);
        let issued = c.issue("baseball", 8, Duration::from_secs(60), 1_000);
        assert_eq!(issued.challenge.len(), encoded_len());
        assert_eq!((issued.difficulty_bits, issued.expires_in_ms), (8, 60_000));
        let proof = solve(&issued.challenge);
        let spent = c.check("baseball", 8, &proof, 2_000).unwrap();
        assert_eq!(spent.expires_at_ms, 61_000);
        assert_eq!(spent.id.len(), 16);
        // Each challenge has an id of its own.
        let other = c.issue("baseball", 8, Duration::from_secs(60), 1_000);
        assert_ne!(
            c.check("baseball", 8, &solve(&other.challenge), 2_000)
                .unwrap()
                .id,
            spent.id
        );
    }

    #[test]
    fn every_wrong_proof_is_refused_for_its_reason() {
        let c = challenges(1);
        let issued = c.issue("baseball", 8, Duration::from_secs(60), 1_000);
        let proof = solve(&issued.challenge);
        // Another queue, another key, expired, a difficulty raised since.
        assert_eq!(c.check("football", 8, &proof, 2_000), Err(Refused::Forged));
        assert_eq!(
            challenges(2).check("baseball", 8, &proof, 2_000),
            Err(Refused::Forged)
        );
        assert_eq!(
            c.check("baseball", 8, &proof, 61_000),
            Err(Refused::Expired)
        );
        assert_eq!(c.check("baseball", 9, &proof, 2_000), Err(Refused::TooEasy));
        // A lowered difficulty takes what was asked before.
        assert!(c.check("baseball", 4, &proof, 2_000).is_ok());
        // A nonce that does not answer it: some nonce under 16 does not
        // start with 8 zero bits (each does with a chance of 1 in 256).
        let wrong = (0..16)
            .map(|n| format!("{}:x{n}", issued.challenge))
            .find(|p| leading_zero_bits(&Sha256::digest(p.as_bytes())) < 8)
            .unwrap();
        assert_eq!(c.check("baseball", 8, &wrong, 2_000), Err(Refused::Wrong));
        // A flipped bit of the challenge is not ours.
        let mut bytes = issued.challenge.clone().into_bytes();
        bytes[3] = if bytes[3] == b'A' { b'B' } else { b'A' };
        let flipped = String::from_utf8(bytes).unwrap();
        let nonce = proof.rsplit_once(':').unwrap().1;
        assert_eq!(
            c.check("baseball", 8, &format!("{flipped}:{nonce}"), 2_000),
            Err(Refused::Forged)
        );
        for malformed in [
            "",
            ":",
            "abc",
            &format!("{}:", issued.challenge),
            &format!("{}:a b", issued.challenge),
            &format!("{}:{}", issued.challenge, "1".repeat(MAX_NONCE_BYTES + 1)),
            &format!("{}x:1", issued.challenge),
            &format!("{}:1", &issued.challenge[1..]),
            &format!("{}:1", "!".repeat(encoded_len())),
            "\u{e9}\u{e9}:1",
        ] {
            assert_eq!(
                c.check("baseball", 8, malformed, 2_000),
                Err(Refused::Malformed),
                "{malformed:?}"
            );
        }
    }

    #[test]
    fn a_rotation_keeps_the_previous_keys_challenges() {
        let old = challenges(1);
        let issued = old.issue("baseball", 4, Duration::from_secs(60), 1_000);
        let rotating = Challenges::with_keys(&Keys {
            current: Secret::from_base64(&URL_SAFE_NO_PAD.encode([2u8; 32])).unwrap(),
            previous: Some(Secret::from_base64(&URL_SAFE_NO_PAD.encode([1u8; 32])).unwrap()),
        });
        assert!(rotating
            .check("baseball", 4, &solve(&issued.challenge), 2_000)
            .is_ok());
    }

    #[test]
    fn zero_bits_are_counted_across_bytes() {
        assert_eq!(leading_zero_bits(&[0xff]), 0);
        assert_eq!(leading_zero_bits(&[0x00, 0x01]), 15);
        assert_eq!(leading_zero_bits(&[0x00, 0x00, 0x80]), 16);
        assert_eq!(leading_zero_bits(&[0x00, 0x00]), 16);
    }
}
