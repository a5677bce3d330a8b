//! Invite-only queues (`queues.<q>.invite`): a register must carry an
//! enqueue token the site signed, good for one place.
//!
//! The token is a JWT, HS256 under the queue's invite secret (from the
//! environment, at least 32 bytes), with these claims:
//!
//! ```text
//! {"queue": "<q>", "jti": "<1 to 64 characters, unique per invite>",
//!  "exp": <NumericDate>, "sub": "<userId>"?}
//! ```
//!
//! It comes in `X-Waitgate-Invite`, or, for the waiting-room page, as the
//! page's `invite` query parameter. Checking it costs one HMAC and no Redis
//! call; `register.lua` spends it (records `jti` until `exp`, at most a
//! year away) when it buys a place, in the call it shares with the
//! register, as it spends a proof of work. With `sub`, only that user may
//! use it: a `userId` an API client names, or the login's with identity
//! binding (a page visitor without a login gets a new id, so `sub` suits
//! API clients and signed-in sites). The secret is used as written (its
//! bytes, not decoded).

use jsonwebtoken::{decode, Algorithm, DecodingKey, Validation};
use serde::Deserialize;

use super::challenge::Spent;

/// The longest invite token looked at.
pub const MAX_INVITE_BYTES: usize = 2048;

/// The longest `jti`.
const MAX_JTI: usize = 64;

/// The furthest an invitation's `exp` may be: 366 days.
pub const MAX_LIFETIME_MS: u64 = 366 * 24 * 3_600_000;

/// A queue's invite key.
#[derive(Clone)]
pub struct Invites {
    key: DecodingKey,
    validation: Validation,
}

impl std::fmt::Debug for Invites {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Invites")
    }
}

#[derive(Deserialize)]
struct Claims {
    queue: String,
    jti: String,
    /// A NumericDate may have a fraction (RFC 7519 §2).
    exp: f64,
    #[serde(default)]
    sub: Option<String>,
}

/// Why an invite was refused: each is a 403 `invite_invalid`, told apart in
/// the metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InviteRefused {
    /// Not a token of this key, malformed, or its claims are missing.
    Invalid,
    Expired,
    /// Signed for another queue.
    OtherQueue,
    /// Issued to another user (`sub`).
    OtherUser,
    /// Spent on a place already (found so by `register.lua`).
    Spent,
}

impl InviteRefused {
    pub fn reason(self) -> &'static str {
        match self {
            InviteRefused::Invalid => "invalid",
            InviteRefused::Expired => "expired",
            InviteRefused::OtherQueue => "other_queue",
            InviteRefused::OtherUser => "other_user",
            InviteRefused::Spent => "spent",
        }
    }
}

impl Invites {
    pub fn new(secret: &[u8]) -> Invites {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.set_required_spec_claims(&["exp"]);
        validation.validate_aud = false;
        validation.leeway = 0;
        Invites {
            key: DecodingKey::from_secret(secret),
            validation,
        }
    }

    /// Checks `token` for `queue` and `user`. What it is good for is a
    /// record `register.lua` keeps until it expires.
    pub fn check(&self, queue: &str, user: &str, token: &str) -> Result<Spent, InviteRefused> {
        if token.len() > MAX_INVITE_BYTES {
            return Err(InviteRefused::Invalid);
        }
        let claims = decode::<Claims>(token, &self.key, &self.validation)
            .map_err(|e| match e.kind() {
                jsonwebtoken::errors::ErrorKind::ExpiredSignature => InviteRefused::Expired,
                _ => InviteRefused::Invalid,
            })?
            .claims;
        if claims.jti.is_empty() || claims.jti.len() > MAX_JTI {
            return Err(InviteRefused::Invalid);
        }
        // An invitation good for more than a year is not one (an `exp`
        // written in milliseconds, say); it would also be kept as spent
        // that long.
        let expires_at_ms = (claims.exp * 1000.0) as u64;
        if expires_at_ms > crate::time::now_ms() + MAX_LIFETIME_MS {
            return Err(InviteRefused::Invalid);
        }
        if claims.queue != queue {
            return Err(InviteRefused::OtherQueue);
        }
        if claims.sub.as_deref().is_some_and(|sub| sub != user) {
            return Err(InviteRefused::OtherUser);
        }
        Ok(Spent {
            id: format!("invite:{}", claims.jti),
            expires_at_ms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{encode, EncodingKey, Header};

    const SECRET: &[u8] = b"an-invite-secret-of-at-least-32-bytes!!";

    fn token(claims: serde_json::Value, secret: &[u8]) -> String {
        encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(secret),
        )
        .unwrap()
    }

    fn in_an_hour() -> u64 {
        crate::time::now_ms() / 1000 + 3600
    }

    #[test]
    fn an_invite_names_its_queue_its_id_and_maybe_its_user() {
        let invites = Invites::new(SECRET);
        let exp = in_an_hour();
        let open = token(
            serde_json::json!({"queue": "baseball", "jti": "inv-1", "exp": exp}),
            SECRET,
        );
        let spent = invites.check("baseball", "anyone", &open).unwrap();
        assert_eq!(spent.id, "invite:inv-1");
        assert_eq!(spent.expires_at_ms, exp * 1000);
        assert_eq!(
            invites.check("football", "anyone", &open),
            Err(InviteRefused::OtherQueue)
        );
        let named = token(
            serde_json::json!({"queue": "baseball", "jti": "inv-2", "exp": exp, "sub": "fan"}),
            SECRET,
        );
        assert!(invites.check("baseball", "fan", &named).is_ok());
        assert_eq!(
            invites.check("baseball", "bot", &named),
            Err(InviteRefused::OtherUser)
        );
    }

    #[test]
    fn forged_expired_and_malformed_invites_are_refused() {
        let invites = Invites::new(SECRET);
        let exp = in_an_hour();
        let claims = serde_json::json!({"queue": "baseball", "jti": "inv-1", "exp": exp});
        let forged = token(claims.clone(), b"another-secret-of-at-least-32-bytes-long");
        assert_eq!(
            invites.check("baseball", "u", &forged),
            Err(InviteRefused::Invalid)
        );
        let expired = token(
            serde_json::json!({"queue": "baseball", "jti": "inv-1", "exp": 1_000}),
            SECRET,
        );
        assert_eq!(
            invites.check("baseball", "u", &expired),
            Err(InviteRefused::Expired)
        );
        for bad in [
            // `exp` in milliseconds, or "never".
            serde_json::json!({"queue": "baseball", "jti": "ms", "exp": exp * 1000}),
            serde_json::json!({"queue": "baseball", "jti": "far", "exp": 9_007_199_254_740_991u64}),
            serde_json::json!({"queue": "baseball", "exp": exp}),
            serde_json::json!({"queue": "baseball", "jti": "", "exp": exp}),
            serde_json::json!({"queue": "baseball", "jti": "x".repeat(65), "exp": exp}),
            serde_json::json!({"jti": "inv-1", "exp": exp}),
            serde_json::json!({"queue": "baseball", "jti": "inv-1"}),
        ] {
            assert_eq!(
                invites.check("baseball", "u", &token(bad.clone(), SECRET)),
                Err(InviteRefused::Invalid),
                "{bad}"
            );
        }
        for junk in ["", "a.b.c", &"x".repeat(MAX_INVITE_BYTES + 1)] {
            assert_eq!(
                invites.check("baseball", "u", junk),
                Err(InviteRefused::Invalid)
            );
        }
    }
}
