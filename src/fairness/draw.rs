//! The draw of a shuffled pre-queue: its seed, that seed's commitment, and
//! the order a seed gives the pre-queued users. `lua/admit.lua` places users
//! by the same rule; docs/fairness.md writes it out for anyone to check,
//! and a test holds the two to one table of cases.

use std::fmt;
use std::str::FromStr;

use sha1::Sha1;
use sha2::{Digest, Sha256};

/// The name the fairness answer gives the rule below.
pub const ALGORITHM: &str = "sha1-32(seed:queue:userId), ties by userId";

/// A draw's seed: 32 random bytes, written as 64 hex digits.
#[derive(Clone, PartialEq, Eq)]
pub struct Seed([u8; 32]);

/// Why a seed was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a seed is 64 hex digits (32 bytes), as the fairness answer prints it")]
pub struct BadSeed;

impl Seed {
    /// A fresh seed from the operating system's generator.
    pub fn draw() -> Seed {
        Seed(rand::random())
    }

    /// This seed as the draw hashes it and the fairness answer shows it:
    /// 64 lowercase hex digits.
    pub fn hex(&self) -> String {
        hex(&self.0)
    }

    /// The commitment published before the pre-queue opens: the lowercase
    /// hex SHA-256 of this seed's 32 bytes.
    pub fn commitment(&self) -> String {
        hex(&Sha256::digest(self.0))
    }
}

impl FromStr for Seed {
    type Err = BadSeed;

    /// 64 hex digits, in either case.
    fn from_str(s: &str) -> Result<Seed, BadSeed> {
        if s.len() != 64 {
            return Err(BadSeed);
        }
        let mut bytes = [0u8; 32];
        for (i, pair) in s.as_bytes().chunks_exact(2).enumerate() {
            let digit = |b: u8| (b as char).to_digit(16).ok_or(BadSeed);
            bytes[i] = (digit(pair[0])? * 16 + digit(pair[1])?) as u8;
        }
        Ok(Seed(bytes))
    }
}

/// A seed stays out of logs and debug output: before the open it is the
/// one secret of the draw.
impl fmt::Debug for Seed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Seed(..)")
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A user's draw number: the first 8 hex digits (32 bits) of
/// SHA-1(seed ":" queue ":" userId), with its seed in lowercase hex. The user's
/// place in the waiting queue is the placement's base plus this number
/// (`draw_offset` in `lua/lib.lua`), so that a place can be worked out
/// again from its seed alone after Redis loses it.
pub fn draw_number(seed: &Seed, queue: &str, user: &str) -> u64 {
    let digest = Sha1::new()
        .chain_update(seed.hex())
        .chain_update(b":")
        .chain_update(queue)
        .chain_update(b":")
        .chain_update(user)
        .finalize();
    u64::from(u32::from_be_bytes(
        digest[..4].try_into().expect("a SHA-1 has 20 bytes"),
    ))
}

/// The users in draw order: by draw number, then (on the rare tie) by
/// userId, byte by byte, as a Redis sorted set orders equal scores. A user
/// named twice is drawn once.
pub fn draw_order<'a>(seed: &Seed, queue: &str, users: &[&'a str]) -> Vec<&'a str> {
    let mut keyed: Vec<(u64, &str)> = users
        .iter()
        .map(|u| (draw_number(seed, queue, u), *u))
        .collect();
    keyed.sort_by(|a, b| {
        a.0.cmp(&b.0)
            .then_with(|| a.1.as_bytes().cmp(b.1.as_bytes()))
    });
    keyed.dedup_by(|a, b| a.1 == b.1);
    keyed.into_iter().map(|(_, u)| u).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEED: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

    #[test]
    fn a_seed_is_64_hex_digits_and_prints_in_lowercase() {
        let seed: Seed = SEED.to_uppercase().parse().unwrap();
        assert_eq!(seed.hex(), SEED);
        for bad in [
            "",
            "00",
            &SEED[1..],
            &format!("{SEED}0"),
            &SEED.replace('a', "g"),
        ] {
            assert_eq!(bad.parse::<Seed>(), Err(BadSeed), "{bad}");
        }
        assert_eq!(format!("{seed:?}"), "Seed(..)");
    }

    #[test]
    fn the_commitment_is_the_sha256_of_the_seed_bytes() {
        let zero: Seed = "0".repeat(64).parse().unwrap();
        // SHA-256 of 32 zero bytes.
        assert_eq!(
            zero.commitment(),
            "66687aadf862bd776c8fc18b8e9f8e20089714856ee233b3902a591d0d5f2925"
        );
        assert_ne!(Seed::draw(), Seed::draw());
    }

    #[test]
    fn the_draw_number_is_the_first_32_bits_of_the_hash() {
        let seed: Seed = SEED.parse().unwrap();
        let digest = Sha1::digest(format!("{SEED}:baseball:alice"));
        let hex = hex(&digest);
        assert_eq!(
            draw_number(&seed, "baseball", "alice"),
            u64::from_str_radix(&hex[..8], 16).unwrap()
        );
        assert_ne!(
            draw_number(&seed, "baseball", "alice"),
            draw_number(&seed, "concert", "alice")
        );
    }

    #[test]
    fn the_order_is_by_number_and_names_each_user_once() {
        let seed: Seed = SEED.parse().unwrap();
        let users = ["u1", "u2", "u3", "u4", "u5", "u2"];
        let order = draw_order(&seed, "q", &users);
        assert_eq!(order.len(), 5);
        let numbers: Vec<u64> = order.iter().map(|u| draw_number(&seed, "q", u)).collect();
        assert!(numbers.windows(2).all(|w| w[0] <= w[1]), "{numbers:?}");
        let other: Seed = "f".repeat(64).parse().unwrap();
        assert_ne!(draw_order(&other, "q", &users), order);
    }
}
