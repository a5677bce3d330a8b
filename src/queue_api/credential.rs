//! The queueCredential: proof that a client is the one that registered.
//!
//! A credential is a message authentication code, not a stored secret:
//!
//! ```text
//! credential = base64url( arrival ‖ HMAC-SHA256(K, queue, userId, arrival)[..16] )
//! ```
//!
//! or, for a registration Redis numbered (see `marks` in `lua/lib.lua`),
//! `base64url( arrival ‖ number ‖ HMAC-SHA256(K, queue, userId, arrival,
//! number)[..16] )`: a poll far back that brings it reads and writes its
//! heartbeat as eight bytes at that number, with no lookup of the user.
//!
//! `arrival` is the user's score in the waiting set (8 bytes, big-endian), so
//! a credential names one registration: after a dropout or a cleanup the user
//! registers again at a new arrival, and the old credential matches nothing.
//! `K` is derived from `JWT_SECRET`, which every instance already shares, so
//! any instance checks any credential without asking Redis, and Redis holds no
//! credential material for waiting users at all. That is 98 bytes less per
//! waiting user than a stored digest (measured at 1,000,000 users, see the
//! README). Only an admitted user gets an entry (userId -> arrival, written by
//! `lua/admit.lua`), which the token exchange and a dropout of an active user
//! compare against.
//!
//! The 128-bit tag is checked in constant time; a client without `K` cannot do
//! better than guess it.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::edge::secret::{DerivedKeys, Keys, Secret};

type HmacSha256 = Hmac<Sha256>;

/// Bytes of the arrival, of the number and of the tag.
const ARRIVAL: usize = 8;
const NUMBER: usize = 8;
const TAG: usize = 16;
const BYTES: usize = ARRIVAL + TAG;
const NUMBERED: usize = ARRIVAL + NUMBER + TAG;

/// The longest credential header value worth looking at; anything longer
/// cannot be one of ours.
pub const MAX_CREDENTIAL_BYTES: usize = 256;

/// Separates the credential key from every other use of `JWT_SECRET`.
const KEY_LABEL: &[u8] = b"waitgate queue credential v1";

/// Makes credentials with the current key and checks them with the current
/// or, during a rotation, the previous one. Built once from the JWT keys.
#[derive(Clone, Debug)]
pub struct Credentials {
    keys: DerivedKeys,
}

impl Credentials {
    /// One key, no rotation.
    pub fn new(secret: &Secret) -> Credentials {
        Credentials::with_keys(&Keys::single(secret.clone()))
    }

    pub fn with_keys(keys: &Keys) -> Credentials {
        Credentials {
            keys: DerivedKeys::new(keys, KEY_LABEL),
        }
    }

    /// The credential of the registration of `user` in `queue` at
    /// `arrival`, numbered `number` if Redis gave it one.
    pub fn issue(&self, queue: &str, user: &str, arrival: u64, number: Option<u64>) -> String {
        let mut raw = [0u8; NUMBERED];
        raw[..ARRIVAL].copy_from_slice(&arrival.to_be_bytes());
        let mut at = ARRIVAL;
        if let Some(number) = number {
            raw[at..at + NUMBER].copy_from_slice(&number.to_be_bytes());
            at += NUMBER;
        }
        let tag = keyed(self.keys.current(), queue, user, arrival, number).finalize();
        raw[at..at + TAG].copy_from_slice(&tag.into_bytes()[..TAG]);
        URL_SAFE_NO_PAD.encode(&raw[..at + TAG])
    }

    /// The arrival a credential was issued for, if it was issued by this key
    /// for this queue and user. Whether that registration still exists is for
    /// Redis to say.
    pub fn check(&self, queue: &str, user: &str, presented: &str) -> Option<u64> {
        self.check_numbered(queue, user, presented)
            .map(|(arrival, _)| arrival)
    }

    /// The arrival and, if it has one, the number a credential was issued
    /// for, as [`Credentials::check`] checks it.
    pub fn check_numbered(
        &self,
        queue: &str,
        user: &str,
        presented: &str,
    ) -> Option<(u64, Option<u64>)> {
        if presented.len() > MAX_CREDENTIAL_BYTES {
            return None;
        }
        let mut raw = [0u8; NUMBERED];
        let len = URL_SAFE_NO_PAD.decode_slice(presented, &mut raw).ok()?;
        let number = match len {
            BYTES => None,
            NUMBERED => Some(u64::from_be_bytes(
                raw[ARRIVAL..ARRIVAL + NUMBER].try_into().expect("8 bytes"),
            )),
            _ => return None,
        };
        let arrival = u64::from_be_bytes(raw[..ARRIVAL].try_into().expect("8 bytes"));
        self.keys
            .any(|key| {
                keyed(key, queue, user, arrival, number)
                    .verify_truncated_left(&raw[len - TAG..len])
                    .is_ok()
            })
            .then_some((arrival, number))
    }
}

/// The MAC over the fields, queue and user each length-prefixed so that no
/// two different (queue, user) pairs feed it the same bytes; a numbered
/// credential's number after the arrival (the length of what is presented
/// says which form it is, so neither can pass for the other).
fn keyed(
    key: &HmacSha256,
    queue: &str,
    user: &str,
    arrival: u64,
    number: Option<u64>,
) -> HmacSha256 {
    let mut mac = key.clone();
    for field in [queue.as_bytes(), user.as_bytes()] {
        mac.update(&(field.len() as u32).to_be_bytes());
        mac.update(field);
    }
    mac.update(&arrival.to_be_bytes());
    if let Some(number) = number {
        mac.update(&number.to_be_bytes());
    }
    mac
}

#[cfg(test)]
mod tests {
    use super::*;

    fn credentials(byte: u8) -> Credentials {
        Credentials::new(&Secret::from_base64(&URL_SAFE_NO_PAD.encode([byte; 32])).unwrap())
    }

    #[test]
    fn a_credential_is_url_safe_and_names_its_arrival() {
        let c = credentials(1);
        let issued = c.issue("baseball", "user_10", 1_795_000_000_123_456, None);
        assert_eq!(issued.len(), 32);
        assert!(issued
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        assert_eq!(
            c.check("baseball", "user_10", &issued),
            Some(1_795_000_000_123_456)
        );
    }

    #[test]
    fn a_numbered_credential_names_its_number_and_is_bound_to_it() {
        let c = credentials(1);
        let issued = c.issue("baseball", "user_10", 42, Some(7));
        assert_eq!(issued.len(), 43);
        assert_eq!(
            c.check_numbered("baseball", "user_10", &issued),
            Some((42, Some(7)))
        );
        assert_eq!(c.check("baseball", "user_10", &issued), Some(42));
        assert_eq!(c.check("baseball", "user_1", &issued), None);
        // Another number, or the same credential without it, fails.
        let mut raw = URL_SAFE_NO_PAD.decode(&issued).unwrap();
        raw[15] ^= 1;
        assert_eq!(
            c.check_numbered("baseball", "user_10", &URL_SAFE_NO_PAD.encode(&raw)),
            None
        );
        raw[15] ^= 1;
        let without: Vec<u8> = raw[..8].iter().chain(&raw[16..]).copied().collect();
        assert_eq!(
            c.check_numbered("baseball", "user_10", &URL_SAFE_NO_PAD.encode(&without)),
            None
        );
        // A plain credential is not numbered.
        let plain = c.issue("baseball", "user_10", 42, None);
        assert_eq!(
            c.check_numbered("baseball", "user_10", &plain),
            Some((42, None))
        );
    }

    #[test]
    fn a_rotation_keeps_old_credentials_until_the_previous_key_goes() {
        let key = |byte: u8| Secret::from_base64(&URL_SAFE_NO_PAD.encode([byte; 32])).unwrap();
        let old = credentials(1).issue("baseball", "user_10", 42, None);
        let rotating = Credentials::with_keys(&Keys {
            current: key(2),
            previous: Some(key(1)),
        });
        assert_eq!(rotating.check("baseball", "user_10", &old), Some(42));
        let new = rotating.issue("baseball", "user_10", 43, None);
        assert_eq!(credentials(2).check("baseball", "user_10", &new), Some(43));
        assert_eq!(credentials(1).check("baseball", "user_10", &new), None);
        assert_eq!(credentials(2).check("baseball", "user_10", &old), None);
    }

    #[test]
    fn it_is_bound_to_queue_user_arrival_and_key() {
        let c = credentials(1);
        let issued = c.issue("baseball", "user_10", 42, None);
        assert_eq!(c.check("soccer", "user_10", &issued), None);
        assert_eq!(c.check("baseball", "user_1", &issued), None);
        assert_eq!(credentials(2).check("baseball", "user_10", &issued), None);
        // Length prefixes keep ("ab", "c") apart from ("a", "bc").
        assert_eq!(
            c.check("a", "bc", &c.issue("ab", "c", 42, None)),
            None,
            "field boundaries must count"
        );
        // Another arrival with this tag does not verify.
        let mut raw = URL_SAFE_NO_PAD.decode(&issued).unwrap();
        raw[7] ^= 1;
        assert_eq!(
            c.check("baseball", "user_10", &URL_SAFE_NO_PAD.encode(&raw)),
            None
        );
    }

    #[test]
    fn anything_else_is_refused_without_panicking() {
        let c = credentials(1);
        let issued = c.issue("q", "u", 7, None);
        for bad in [
            "",
            "not-the-credential",
            &issued[..31],
            &format!("{issued}A"),
            &format!("{issued}===="),
            "********************************",
            &"A".repeat(MAX_CREDENTIAL_BYTES + 1),
        ] {
            assert_eq!(c.check("q", "u", bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_key_is_not_the_jwt_secret_itself() {
        let secret = [1u8; 32];
        let c = credentials(1);
        let mut direct = HmacSha256::new_from_slice(&secret).unwrap();
        for field in [&b"q"[..], b"u"] {
            direct.update(&(field.len() as u32).to_be_bytes());
            direct.update(field);
        }
        direct.update(&7u64.to_be_bytes());
        let direct: [u8; 32] = direct.finalize().into_bytes().into();
        let tag: [u8; 32] = keyed(c.keys.current(), "q", "u", 7, None)
            .finalize()
            .into_bytes()
            .into();
        assert_ne!(direct, tag);
    }
}
