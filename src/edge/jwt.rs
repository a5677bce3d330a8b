//! ACTIVE_USER tokens: issued by the token endpoint, checked at the edge.
//!
//! The check is local (signature and claims only) so protected routes need
//! no Redis call and keep working while Redis is down. It is deliberately
//! stricter than a generic JWT library's defaults:
//! - HS256 only, with the one configured key (`alg:none`, RS256 and friends
//!   are refused before any key is touched);
//! - `exp`, `iss`, `aud` and `sub` are required, numeric claims must be JSON
//!   numbers (a string `exp` is refused, not ignored);
//! - a token may not claim a lifetime longer than `jwt.ttl-ms`, nor be issued
//!   in the future beyond the leeway;
//! - the role must be `ACTIVE_USER` and the queue the route's queue (403).

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{decode, encode, Algorithm, DecodingKey, EncodingKey, Header, Validation};
use rand::TryRngCore;
use serde::{Deserialize, Serialize};

use crate::config::JwtConfig;
use crate::edge::cache::{Verified, VerifiedTokens};
use crate::edge::revoked::Revoked;
use crate::edge::secret::{Keys, Secret};
use crate::error::ApiError;
use crate::wire::authorization::bearer;

/// The role an admitted user's token carries.
pub const ACTIVE_USER: &str = "ACTIVE_USER";

/// The longest `Authorization` header considered.
pub const MAX_AUTHORIZATION_BYTES: usize = 4096;

/// The claims waitgate signs.
#[derive(Debug, Serialize)]
struct IssuedClaims<'a> {
    sub: &'a str,
    role: &'static str,
    queue: &'a str,
    iss: &'a str,
    aud: &'a str,
    iat: u64,
    exp: u64,
    jti: String,
}

/// The claims read back at the edge. Typed fields make a claim of the wrong
/// JSON type a parse failure rather than an absent claim. Every field is
/// optional here because jsonwebtoken parses them before it checks which are
/// required; its `required_spec_claims` then refuses an absent `exp` or `sub`.
#[derive(Debug, Deserialize)]
struct CheckedClaims {
    #[serde(default)]
    sub: Option<String>,
    #[serde(default)]
    role: Option<String>,
    #[serde(default)]
    queue: Option<String>,
    #[serde(default)]
    exp: Option<u64>,
    #[serde(default)]
    iat: Option<u64>,
}

/// A token just issued.
#[derive(Debug)]
pub struct Issued {
    pub token: String,
    /// Seconds until `exp`.
    pub expires_in: u64,
}

/// Who a valid token speaks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub user: Arc<str>,
    pub queue: Arc<str>,
}

/// Why a request was refused at the edge. Each has a stable label for the
/// `waitgate_jwt_rejected_total{reason}` counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reject {
    Missing,
    Duplicate,
    TooLarge,
    Malformed,
    Algorithm,
    Signature,
    Expired,
    NotYetValid,
    Issuer,
    Audience,
    MissingClaim,
    InvalidClaim,
    TooLong,
    IssuedInFuture,
    Role,
    Queue,
    Revoked,
}

/// 401 (`invalid_token`) for a token that proves nothing; 403
/// (`insufficient_scope`) for a valid one that does not grant the route.
impl From<Reject> for ApiError {
    fn from(reject: Reject) -> ApiError {
        match reject.status() {
            403 => ApiError::InsufficientScope(reject.message()),
            _ => ApiError::InvalidToken(reject.message()),
        }
    }
}

impl Reject {
    pub const ALL: [Reject; 17] = [
        Reject::Missing,
        Reject::Duplicate,
        Reject::TooLarge,
        Reject::Malformed,
        Reject::Algorithm,
        Reject::Signature,
        Reject::Expired,
        Reject::NotYetValid,
        Reject::Issuer,
        Reject::Audience,
        Reject::MissingClaim,
        Reject::InvalidClaim,
        Reject::TooLong,
        Reject::IssuedInFuture,
        Reject::Role,
        Reject::Queue,
        Reject::Revoked,
    ];

    /// The metric label.
    pub fn reason(self) -> &'static str {
        match self {
            Reject::Missing => "missing",
            Reject::Duplicate => "duplicate_header",
            Reject::TooLarge => "too_large",
            Reject::Malformed => "malformed",
            Reject::Algorithm => "algorithm",
            Reject::Signature => "signature",
            Reject::Expired => "expired",
            Reject::NotYetValid => "not_yet_valid",
            Reject::Issuer => "issuer",
            Reject::Audience => "audience",
            Reject::MissingClaim => "missing_claim",
            Reject::InvalidClaim => "invalid_claim",
            Reject::TooLong => "lifetime_too_long",
            Reject::IssuedInFuture => "issued_in_future",
            Reject::Role => "role",
            Reject::Queue => "queue",
            Reject::Revoked => "revoked",
        }
    }

    /// 401 for a token that proves nothing; 403 for a valid token that does
    /// not grant this route.
    pub fn status(self) -> u16 {
        match self {
            Reject::Role | Reject::Queue => 403,
            _ => 401,
        }
    }

    pub fn message(self) -> &'static str {
        match self {
            Reject::Missing => "An Authorization: Bearer token is required.",
            Reject::Duplicate => "Exactly one Authorization header is allowed.",
            Reject::TooLarge => "The Authorization header is larger than 4096 bytes.",
            Reject::Malformed => "The bearer token is malformed.",
            Reject::Algorithm => "The token must be signed with HS256.",
            Reject::Signature => "The token signature is invalid.",
            Reject::Expired => "The token has expired.",
            Reject::NotYetValid => "The token is not valid yet.",
            Reject::Issuer => "The token issuer is not accepted.",
            Reject::Audience => "The token audience is not accepted.",
            Reject::MissingClaim => "The token lacks a required claim (exp, iss, aud, sub).",
            Reject::InvalidClaim => "A token claim has the wrong type.",
            Reject::TooLong => "The token lifetime is longer than allowed.",
            Reject::IssuedInFuture => "The token is issued in the future.",
            Reject::Role => "The token does not carry the ACTIVE_USER role.",
            Reject::Queue => "The token is for another queue.",
            Reject::Revoked => "The token has been revoked.",
        }
    }
}

/// Signs tokens with the current key and checks them with the current or,
/// during a rotation, the previous one; one policy.
pub struct Tokens {
    encoding: EncodingKey,
    /// The current key's id, put in the `kid` header of every new token.
    kid: String,
    /// The keys that verify, current first, each with its id.
    decoding: Vec<(String, DecodingKey)>,
    validation: Validation,
    issuer: String,
    audience: String,
    ttl_s: u64,
    leeway_s: u64,
    verified: VerifiedTokens,
    /// Users whose tokens are refused until they are admitted again.
    revoked: Arc<Revoked>,
}

/// How many verified tokens are remembered (about 300 bytes each).
pub const VERIFIED_CACHE_ENTRIES: usize = 16_384;

/// Seconds since the epoch by the proxy's clock (JWT NumericDate).
pub fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl Tokens {
    /// One key, no rotation.
    pub fn new(secret: &Secret, config: &JwtConfig) -> Tokens {
        Tokens::with_keys(&Keys::single(secret.clone()), config)
    }

    pub fn with_keys(keys: &Keys, config: &JwtConfig) -> Tokens {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.algorithms = vec![Algorithm::HS256];
        validation.leeway = config.leeway.as_secs();
        validation.validate_exp = true;
        validation.validate_nbf = true;
        validation.set_issuer(&[&config.issuer]);
        validation.set_audience(&[&config.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        Tokens {
            encoding: EncodingKey::from_secret(keys.current.as_bytes()),
            kid: keys.current.kid(),
            decoding: keys
                .all()
                .map(|key| (key.kid(), DecodingKey::from_secret(key.as_bytes())))
                .collect(),
            validation,
            issuer: config.issuer.clone(),
            audience: config.audience.clone(),
            ttl_s: (config.ttl.as_millis() / 1000) as u64,
            leeway_s: config.leeway.as_secs(),
            verified: VerifiedTokens::new(VERIFIED_CACHE_ENTRIES),
            revoked: Arc::default(),
        }
    }

    /// The revoked users this edge refuses, filled by the revocation sync.
    pub fn revoked(&self) -> &Arc<Revoked> {
        &self.revoked
    }

    /// The longest a token of ours lives, leeway included: how long a
    /// revocation must be remembered.
    pub fn longest_life(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.ttl_s + self.leeway_s)
    }

    /// Signs a token for `user`, expiring at the earlier of now + TTL and the
    /// end of the user's active state. `None` when the active state ends
    /// within the second: such a token would be dead on arrival.
    pub fn issue(&self, user: &str, queue: &str, active_until_ms: u64, now: u64) -> Option<Issued> {
        let exp = (now + self.ttl_s).min(active_until_ms / 1000);
        if exp <= now {
            return None;
        }
        let mut jti = [0u8; 16];
        rand::rngs::OsRng.try_fill_bytes(&mut jti).ok()?;
        let claims = IssuedClaims {
            sub: user,
            role: ACTIVE_USER,
            queue,
            iss: &self.issuer,
            aud: &self.audience,
            iat: now,
            exp,
            jti: URL_SAFE_NO_PAD.encode(jti),
        };
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some(self.kid.clone());
        let token = encode(&header, &claims, &self.encoding).ok()?;
        Some(Issued {
            token,
            expires_in: exp - now,
        })
    }

    /// Checks the `Authorization` header values of a request to a route of
    /// `queue`.
    pub fn check<'a>(
        &self,
        mut authorization: impl Iterator<Item = &'a [u8]>,
        queue: &str,
        now: u64,
    ) -> Result<Identity, Reject> {
        let value = authorization.next().ok_or(Reject::Missing)?;
        if authorization.next().is_some() {
            return Err(Reject::Duplicate);
        }
        if value.len() > MAX_AUTHORIZATION_BYTES {
            return Err(Reject::TooLarge);
        }
        // A token byte-for-byte equal to one verified before needs none of
        // the checks again, not even its characters' (the cache key is the
        // whole token, so a hit cannot be forged): look it up first, since
        // checking a few hundred bytes one by one was a measured share of
        // the direct lane's time per request.
        let cached = bearer(value).and_then(|candidate| {
            let token = std::str::from_utf8(candidate).ok()?;
            Some((token, self.verified.get(token)?))
        });
        let verified = match cached {
            Some((_, v)) => {
                // Verified before: only expiry can have changed.
                if v.exp + self.leeway_s < now {
                    return Err(Reject::Expired);
                }
                v
            }
            None => {
                let token = bearer_token(value)?;
                let v = self.verify(token, now)?;
                self.verified.insert(token, v.clone());
                v
            }
        };
        if &*verified.queue != queue {
            return Err(Reject::Queue);
        }
        if self.revoked.refuses(queue, &verified.user, verified.iat) {
            return Err(Reject::Revoked);
        }
        Ok(Identity {
            user: verified.user,
            queue: verified.queue,
        })
    }

    /// Every check but the route's queue, on a token not seen before.
    fn verify(&self, token: &str, now: u64) -> Result<Verified, Reject> {
        let kid = match jsonwebtoken::decode_header(token) {
            Ok(header) if header.alg == Algorithm::HS256 => header.kid,
            Ok(_) => return Err(Reject::Algorithm),
            Err(_) => return Err(header_reject(token)),
        };
        // A token names its key; one without a `kid` (made before keys had
        // ids) is tried with each. An id that names none of our keys cannot
        // have a signature we made.
        let mut keys = self
            .decoding
            .iter()
            .filter(|(id, _)| kid.as_deref().is_none_or(|kid| kid == id))
            .peekable();
        if keys.peek().is_none() {
            return Err(Reject::Signature);
        }
        let mut outcome = Err(Reject::Signature);
        for (_, key) in keys {
            outcome = decode::<CheckedClaims>(token, key, &self.validation)
                .map_err(|e| map_error(e.kind()));
            if !matches!(outcome, Err(Reject::Signature)) {
                break;
            }
        }
        let claims = outcome?.claims;

        let (Some(sub), Some(exp)) = (claims.sub, claims.exp) else {
            return Err(Reject::MissingClaim);
        };
        // jsonwebtoken checked exp against its own clock; the lifetime rules
        // are ours.
        match claims.iat {
            Some(iat) => {
                if iat > now + self.leeway_s {
                    return Err(Reject::IssuedInFuture);
                }
                if exp.saturating_sub(iat) > self.ttl_s {
                    return Err(Reject::TooLong);
                }
            }
            // Without iat the lifetime still may not reach past now + TTL.
            None => {
                if exp > now + self.ttl_s + self.leeway_s {
                    return Err(Reject::TooLong);
                }
            }
        }
        // `sub` becomes the X-Waitgate-User header: it must be a userId.
        if !crate::user::is_valid(&sub) {
            return Err(Reject::InvalidClaim);
        }
        if claims.role.as_deref() != Some(ACTIVE_USER) {
            return Err(Reject::Role);
        }
        let Some(token_queue) = claims.queue else {
            return Err(Reject::Queue);
        };
        Ok(Verified {
            exp,
            iat: claims.iat.unwrap_or(exp.saturating_sub(self.ttl_s)),
            user: sub.into(),
            queue: token_queue.into(),
        })
    }
}

/// `Bearer <token>` (see [`bearer`]), the token a JWT's characters.
fn bearer_token(value: &[u8]) -> Result<&str, Reject> {
    let token = bearer(value).ok_or(Reject::Malformed)?;
    let token = std::str::from_utf8(token).map_err(|_| Reject::Malformed)?;
    // token68 (RFC 9110 §11.2); a JWT uses only its URL-safe subset and dots.
    let ok = !token.is_empty()
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(token)
    } else {
        Err(Reject::Malformed)
    }
}

/// A header jsonwebtoken cannot read: an algorithm it does not know (`none`,
/// `HS1024`) is still an algorithm refusal; anything else is malformed.
fn header_reject(token: &str) -> Reject {
    let alg = token
        .split('.')
        .next()
        .and_then(|h| URL_SAFE_NO_PAD.decode(h).ok())
        .and_then(|h| serde_json::from_slice::<serde_json::Value>(&h).ok())
        .and_then(|h| h.get("alg").cloned());
    match alg {
        Some(serde_json::Value::String(_)) => Reject::Algorithm,
        _ => Reject::Malformed,
    }
}

fn map_error(kind: &ErrorKind) -> Reject {
    match kind {
        ErrorKind::InvalidSignature => Reject::Signature,
        ErrorKind::InvalidAlgorithm
        | ErrorKind::InvalidAlgorithmName
        | ErrorKind::MissingAlgorithm => Reject::Algorithm,
        ErrorKind::ExpiredSignature => Reject::Expired,
        ErrorKind::ImmatureSignature => Reject::NotYetValid,
        ErrorKind::InvalidIssuer => Reject::Issuer,
        ErrorKind::InvalidAudience => Reject::Audience,
        ErrorKind::MissingRequiredClaim(_) => Reject::MissingClaim,
        ErrorKind::InvalidClaimFormat(_) | ErrorKind::Json(_) => Reject::InvalidClaim,
        _ => Reject::Malformed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::Duration;

    fn config() -> JwtConfig {
        JwtConfig {
            issuer: "waitgate".into(),
            audience: "ticketing".into(),
            ttl: Duration::from_secs(600),
            leeway: Duration::from_secs(5),
        }
    }

    fn secret() -> Secret {
        Secret::from_base64("dGVzdC1zZWNyZXQtZm9yLXdhaXRnYXRlLXRlc3RzLTAx").unwrap()
    }

    fn other_secret() -> Secret {
        Secret::from_base64(&URL_SAFE_NO_PAD.encode([7u8; 32])).unwrap()
    }

    #[test]
    fn a_rotation_keeps_old_tokens_until_the_previous_key_goes() {
        let now = now_s();
        let until = (now + 60) * 1000;
        let old = Tokens::new(&secret(), &config());
        let old_token = old.issue("u1", "baseball", until, now).unwrap().token;
        let header = jsonwebtoken::decode_header(&old_token).unwrap();
        assert_eq!(header.kid.as_deref(), Some(secret().kid().as_str()));

        let rotating = Tokens::with_keys(
            &Keys {
                current: other_secret(),
                previous: Some(secret()),
            },
            &config(),
        );
        let bearer = |t: &str| format!("Bearer {t}");
        let check = |tokens: &Tokens, t: &str| {
            tokens.check(std::iter::once(bearer(t).as_bytes()), "baseball", now)
        };
        assert!(check(&rotating, &old_token).is_ok());
        let new_token = rotating.issue("u1", "baseball", until, now).unwrap().token;
        let header = jsonwebtoken::decode_header(&new_token).unwrap();
        assert_eq!(header.kid.as_deref(), Some(other_secret().kid().as_str()));
        assert!(check(&rotating, &new_token).is_ok());

        let rotated = Tokens::new(&other_secret(), &config());
        assert_eq!(check(&rotated, &old_token).unwrap_err(), Reject::Signature);
        assert!(check(&rotated, &new_token).is_ok());
        assert_eq!(check(&old, &new_token).unwrap_err(), Reject::Signature);

        // A token without a kid (made before keys had ids) is tried with
        // each key.
        let claims = json!({"sub": "u1", "role": ACTIVE_USER, "queue": "baseball",
            "iss": "waitgate", "aud": "ticketing", "iat": now, "exp": now + 60});
        let no_kid = encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(secret().as_bytes()),
        )
        .unwrap();
        assert!(check(&rotating, &no_kid).is_ok());
        assert_eq!(check(&rotated, &no_kid).unwrap_err(), Reject::Signature);
    }

    fn tokens() -> Tokens {
        Tokens::new(&secret(), &config())
    }

    fn sign(claims: serde_json::Value) -> String {
        encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(secret().as_bytes()),
        )
        .unwrap()
    }

    fn good(now: u64) -> serde_json::Value {
        json!({"sub":"u1","role":"ACTIVE_USER","queue":"baseball","iss":"waitgate",
               "aud":"ticketing","iat":now,"exp":now+60,"jti":"x"})
    }

    fn check(header: &str, now: u64) -> Result<Identity, Reject> {
        tokens().check(std::iter::once(header.as_bytes()), "baseball", now)
    }

    /// A signed bearer header for `good(now)` with `changes` made: each
    /// claim named is set to its value, or removed where the value is null.
    fn with(now: u64, changes: &[(&str, serde_json::Value)]) -> String {
        let mut v = good(now);
        let claims = v.as_object_mut().unwrap();
        for (name, value) in changes {
            match value {
                serde_json::Value::Null => claims.remove(*name),
                value => claims.insert((*name).into(), value.clone()),
            };
        }
        format!("Bearer {}", sign(v))
    }

    #[test]
    fn issued_tokens_pass_the_check() {
        let now = now_s();
        let t = tokens();
        let issued = t.issue("u1", "baseball", (now + 3600) * 1000, now).unwrap();
        assert_eq!(issued.expires_in, 600);
        let id = check(&format!("Bearer {}", issued.token), now).unwrap();
        assert_eq!(&*id.user, "u1");
        assert_eq!(&*id.queue, "baseball");
    }

    #[test]
    fn a_token_never_outlives_the_active_state() {
        let now = now_s();
        let issued = tokens()
            .issue("u1", "baseball", (now + 42) * 1000 + 999, now)
            .unwrap();
        assert_eq!(issued.expires_in, 42);
        assert!(tokens()
            .issue("u1", "baseball", now * 1000 + 500, now)
            .is_none());
    }

    #[test]
    fn scheme_is_case_insensitive_and_one_header_only() {
        let now = now_s();
        let token = sign(good(now));
        for scheme in ["Bearer", "bearer", "BEARER"] {
            assert!(check(&format!("{scheme} {token}"), now).is_ok(), "{scheme}");
        }
        assert_eq!(
            check(&format!("Basic {token}"), now),
            Err(Reject::Malformed)
        );
        assert_eq!(check(&token, now), Err(Reject::Malformed));
        assert_eq!(check("Bearer ", now), Err(Reject::Malformed));
        let two = [format!("Bearer {token}"), format!("Bearer {token}")];
        assert_eq!(
            tokens().check(two.iter().map(|s| s.as_bytes()), "baseball", now),
            Err(Reject::Duplicate)
        );
        assert_eq!(
            tokens().check(std::iter::empty(), "baseball", now),
            Err(Reject::Missing)
        );
        let huge = format!("Bearer {}", "a".repeat(MAX_AUTHORIZATION_BYTES));
        assert_eq!(check(&huge, now), Err(Reject::TooLarge));
    }

    #[test]
    fn claim_rules() {
        let now = now_s();
        let null = serde_json::Value::Null;
        let cases = [
            (vec![("exp", json!(now - 60))], Reject::Expired),
            (
                vec![("exp", json!((now + 60).to_string()))],
                Reject::InvalidClaim,
            ),
            (vec![("iat", json!("soon"))], Reject::InvalidClaim),
            (vec![("exp", null.clone())], Reject::MissingClaim),
            (vec![("sub", null.clone())], Reject::MissingClaim),
            (vec![("iss", null.clone())], Reject::MissingClaim),
            (vec![("aud", null.clone())], Reject::MissingClaim),
            (vec![("iss", json!("someone"))], Reject::Issuer),
            (vec![("aud", json!("other"))], Reject::Audience),
            (vec![("exp", json!(now + 601))], Reject::TooLong),
            (
                vec![("iat", null.clone()), ("exp", json!(now + 700))],
                Reject::TooLong,
            ),
            (
                vec![("iat", json!(now + 30)), ("exp", json!(now + 90))],
                Reject::IssuedInFuture,
            ),
            (vec![("role", json!("ADMIN"))], Reject::Role),
            (vec![("role", null)], Reject::Role),
            (vec![("queue", json!("soccer"))], Reject::Queue),
        ];
        for (changes, want) in cases {
            assert_eq!(check(&with(now, &changes), now), Err(want), "{want:?}");
        }
        // Within the leeway is fine both ways.
        assert!(check(
            &with(now, &[("exp", json!(now - 2)), ("iat", json!(now - 30))]),
            now
        )
        .is_ok());
        assert!(check(&with(now, &[("iat", json!(now + 3))]), now).is_ok());
    }

    #[test]
    fn only_hs256_with_our_key() {
        let now = now_s();
        let token = sign(good(now));
        let (head, rest) = token.split_once('.').unwrap();
        let (payload, _) = rest.split_once('.').unwrap();
        let none_header = URL_SAFE_NO_PAD.encode(br#"{"alg":"none","typ":"JWT"}"#);
        assert_eq!(
            check(&format!("Bearer {none_header}.{payload}."), now),
            Err(Reject::Algorithm)
        );
        let rs_header = URL_SAFE_NO_PAD.encode(br#"{"alg":"RS256","typ":"JWT"}"#);
        let sig = rest.split_once('.').unwrap().1;
        assert_eq!(
            check(&format!("Bearer {rs_header}.{payload}.{sig}"), now),
            Err(Reject::Algorithm)
        );
        let other = encode(
            &Header::new(Algorithm::HS256),
            &good(now),
            &EncodingKey::from_secret(&[7u8; 32]),
        )
        .unwrap();
        assert_eq!(
            check(&format!("Bearer {other}"), now),
            Err(Reject::Signature)
        );
        let tampered = good(now).to_string().replace("u1", "u2");
        let tampered = URL_SAFE_NO_PAD.encode(tampered);
        let sig = rest.split_once('.').unwrap().1;
        assert_eq!(
            check(&format!("Bearer {head}.{tampered}.{sig}"), now),
            Err(Reject::Signature)
        );
        assert_eq!(check("Bearer a.b.c", now), Err(Reject::Malformed));
    }

    #[test]
    fn cached_tokens_still_expire_and_keep_their_queue() {
        let t = tokens();
        let now = now_s();
        let token = sign(good(now)); // exp = now + 60
        let header = format!("Bearer {token}");
        let check = |queue: &str, at: u64| t.check(std::iter::once(header.as_bytes()), queue, at);
        assert!(check("baseball", now).is_ok()); // verified, now cached
        assert!(check("baseball", now + 30).is_ok()); // from the cache
        assert_eq!(check("soccer", now), Err(Reject::Queue));
        assert!(check("baseball", now + 60 + 5).is_ok()); // within the leeway
        assert_eq!(check("baseball", now + 60 + 6), Err(Reject::Expired));
        // A changed byte is another token: verified afresh, and refused.
        let mut tampered = header.clone().into_bytes();
        let last = tampered.len() - 2;
        tampered[last] = if tampered[last] == b'A' { b'B' } else { b'A' };
        assert!(t
            .check(std::iter::once(&tampered[..]), "baseball", now)
            .is_err());
    }

    #[test]
    fn every_reject_has_a_label_and_status() {
        for r in Reject::ALL {
            assert!(!r.reason().is_empty());
            assert!(matches!(r.status(), 401 | 403));
        }
    }
}
