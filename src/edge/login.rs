//! Identity binding: the userId of register and rank taken from the site's
//! own login token instead of from the request.
//!
//! Without it, `userId` is whatever a client sends, so whoever registers as
//! "bob" first holds bob's place. With `identity:` configured, the queue
//! API reads the login token (`Authorization: Bearer`, or the cookie
//! `identity.cookie`), checks it (signature, `iss`, `aud`, `exp`; HS256
//! with a secret from the environment, or RS256/ES256 with the public keys
//! of a JWKS file) and uses its `sub`.

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, JwkSet, KeyAlgorithm};
use jsonwebtoken::{decode, decode_header, Algorithm, DecodingKey, Validation};
use serde::Deserialize;

use crate::config::{IdentityConfig, IdentityKey};
use crate::error::ApiError;
use crate::user::UserId;

/// The shortest HS256 secret accepted, in bytes.
pub const MIN_LOGIN_SECRET_BYTES: usize = 32;

/// Why the login keys could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoginKeyError {
    #[error("{0} is not set (identity.secret-env names it)")]
    MissingSecret(String),
    #[error("{0} is shorter than {MIN_LOGIN_SECRET_BYTES} bytes")]
    ShortSecret(String),
    #[error("identity.jwks-file: {0}")]
    Jwks(String),
}

/// The verified login tokens' keys and rules.
pub struct Logins {
    keys: Vec<LoginKey>,
    cookie: Option<String>,
    issuer: String,
    audience: String,
    leeway: u64,
}

struct LoginKey {
    kid: Option<String>,
    algorithm: Algorithm,
    key: DecodingKey,
}

#[derive(Deserialize)]
struct Claims {
    sub: String,
    /// A NumericDate may have a fraction (RFC 7519 §2).
    exp: f64,
}

/// A verified login token: its user, and whether it has run out (its
/// signature and claims are good but `exp` has passed). A login that ran
/// out still says who signed in; what it is good for is the caller's to
/// say (see `crate::queue_api::who`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Login {
    pub user: UserId,
    pub expired: bool,
    /// Until when the login was good (`exp` and the leeway), in µs since
    /// the epoch: a registration made after it was not made with it.
    pub valid_until_us: u64,
}

impl Login {
    /// Whether a registration that arrived at `arrival_us` (µs since the
    /// epoch) was made while this login was good.
    pub fn covers(&self, arrival_us: u64) -> bool {
        arrival_us <= self.valid_until_us
    }
}

impl Logins {
    /// Loads the key the config names: the secret from the environment, or
    /// the JWKS file's RS256 and ES256 keys.
    pub fn load(config: &IdentityConfig) -> Result<Logins, LoginKeyError> {
        let keys = match &config.key {
            IdentityKey::SecretEnv(name) => {
                let secret =
                    std::env::var(name).map_err(|_| LoginKeyError::MissingSecret(name.clone()))?;
                if secret.len() < MIN_LOGIN_SECRET_BYTES {
                    return Err(LoginKeyError::ShortSecret(name.clone()));
                }
                vec![LoginKey {
                    kid: None,
                    algorithm: Algorithm::HS256,
                    key: DecodingKey::from_secret(secret.as_bytes()),
                }]
            }
            IdentityKey::JwksFile(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| LoginKeyError::Jwks(format!("{}: {e}", path.display())))?;
                let set: JwkSet = serde_json::from_str(&text)
                    .map_err(|e| LoginKeyError::Jwks(format!("{}: {e}", path.display())))?;
                let keys = jwks_keys(&set)?;
                if keys.is_empty() {
                    return Err(LoginKeyError::Jwks(format!(
                        "{}: no RS256 or ES256 key",
                        path.display()
                    )));
                }
                keys
            }
        };
        Ok(Logins {
            keys,
            cookie: config.cookie.clone(),
            issuer: config.issuer.clone(),
            audience: config.audience.clone(),
            leeway: config.leeway.as_secs(),
        })
    }

    /// The login a request's token shows: from `Authorization: Bearer`,
    /// else from the configured cookie (the first of that name that
    /// verifies, one that has not run out before one that has: another of
    /// the same name, set for a parent domain, may be stale). No token is
    /// 401 `login_required`; a token that proves nothing is 401
    /// `invalid_login`. A token that has only run out is returned as such:
    /// the callers say what it is good for.
    pub fn login<'a>(
        &self,
        authorization: Option<&str>,
        cookies: impl Fn(&str) -> Vec<&'a str>,
    ) -> Result<Login, ApiError> {
        if let Some(value) = authorization {
            let token = crate::wire::authorization::bearer(value.as_bytes())
                .and_then(|t| std::str::from_utf8(t).ok())
                .ok_or(ApiError::InvalidLogin)?;
            return self.verify(token);
        }
        let candidates = self.cookie.as_deref().map(cookies).unwrap_or_default();
        if candidates.is_empty() {
            return Err(ApiError::LoginRequired);
        }
        // Of logins that ran out, the one good the longest.
        let mut lapsed: Option<Login> = None;
        for token in candidates {
            match self.verify(token) {
                Ok(login) if !login.expired => return Ok(login),
                Ok(login) => {
                    if lapsed
                        .as_ref()
                        .is_none_or(|l| l.valid_until_us < login.valid_until_us)
                    {
                        lapsed = Some(login);
                    }
                }
                Err(_) => {}
            }
        }
        lapsed.ok_or(ApiError::InvalidLogin)
    }

    fn verify(&self, token: &str) -> Result<Login, ApiError> {
        let header = decode_header(token).map_err(|_| ApiError::InvalidLogin)?;
        let key = self
            .keys
            .iter()
            .find(|k| {
                k.algorithm == header.alg
                    && (header.kid.is_none() || k.kid.is_none() || k.kid == header.kid)
            })
            .ok_or(ApiError::InvalidLogin)?;
        let mut validation = Validation::new(key.algorithm);
        validation.set_issuer(&[&self.issuer]);
        validation.set_audience(&[&self.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        validation.validate_nbf = true;
        validation.leeway = self.leeway;
        let (data, expired) = match decode::<Claims>(token, &key.key, &validation) {
            Ok(data) => (data, false),
            Err(e) if *e.kind() == jsonwebtoken::errors::ErrorKind::ExpiredSignature => {
                // Every other check again, `exp` aside.
                validation.validate_exp = false;
                let data = decode::<Claims>(token, &key.key, &validation)
                    .map_err(|_| ApiError::InvalidLogin)?;
                (data, true)
            }
            Err(_) => return Err(ApiError::InvalidLogin),
        };
        let user = UserId::parse(data.claims.sub).ok_or(ApiError::InvalidUserId)?;
        // `as` saturates: a negative or huge `exp` stays in range.
        let valid_until_us = (data.claims.exp as u64)
            .saturating_add(self.leeway)
            .saturating_mul(1_000_000);
        Ok(Login {
            user,
            expired,
            valid_until_us,
        })
    }
}

/// The RS256 and ES256 (P-256) keys of a JWKS; others are skipped, since
/// nothing else would be accepted.
fn jwks_keys(set: &JwkSet) -> Result<Vec<LoginKey>, LoginKeyError> {
    let mut keys = Vec::new();
    for jwk in &set.keys {
        let algorithm = match (&jwk.algorithm, &jwk.common.key_algorithm) {
            (AlgorithmParameters::RSA(_), None | Some(KeyAlgorithm::RS256)) => Algorithm::RS256,
            (AlgorithmParameters::EllipticCurve(ec), None | Some(KeyAlgorithm::ES256))
                if ec.curve == EllipticCurve::P256 =>
            {
                Algorithm::ES256
            }
            _ => continue,
        };
        let key = DecodingKey::from_jwk(jwk)
            .map_err(|e| LoginKeyError::Jwks(format!("key {:?}: {e}", jwk.common.key_id)))?;
        keys.push(LoginKey {
            kid: jwk.common.key_id.clone(),
            algorithm,
            key,
        });
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{encode, EncodingKey, Header};
    use std::time::Duration;

    const SECRET: &str = "a-login-secret-of-the-site-at-least-32-bytes";

    fn logins() -> Logins {
        Logins {
            keys: vec![LoginKey {
                kid: None,
                algorithm: Algorithm::HS256,
                key: DecodingKey::from_secret(SECRET.as_bytes()),
            }],
            cookie: Some("session".into()),
            issuer: "shop".into(),
            audience: "waitgate".into(),
            leeway: 0,
        }
    }

    fn login(claims: serde_json::Value, secret: &str) -> String {
        encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(secret.as_bytes()),
        )
        .unwrap()
    }

    /// The user of a login that has not run out.
    impl Logins {
        fn user<'a>(
            &self,
            authorization: Option<&str>,
            cookies: impl Fn(&str) -> Vec<&'a str>,
        ) -> Result<UserId, ApiError> {
            match self.login(authorization, cookies)? {
                Login { expired: true, .. } => Err(ApiError::InvalidLogin),
                login => Ok(login.user),
            }
        }
    }

    fn exp() -> u64 {
        (std::time::SystemTime::now() + Duration::from_secs(600))
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    }

    #[test]
    fn the_user_is_the_login_tokens_sub() {
        let l = logins();
        let good = login(
            serde_json::json!({"sub":"bob","iss":"shop","aud":"waitgate","exp":exp()}),
            SECRET,
        );
        let none = |_: &str| Vec::new();
        assert_eq!(
            l.user(Some(&format!("Bearer {good}")), none)
                .unwrap()
                .as_str(),
            "bob"
        );
        let stale = "stale.token.value";
        let from_cookie = |name: &str| {
            if name == "session" {
                vec![stale, good.as_str()]
            } else {
                vec![]
            }
        };
        assert_eq!(l.user(None, from_cookie).unwrap().as_str(), "bob");
        let only_stale = |_: &str| vec![stale];
        assert_eq!(
            l.user(None, only_stale).unwrap_err(),
            ApiError::InvalidLogin
        );
        assert_eq!(l.user(None, none).unwrap_err(), ApiError::LoginRequired);
        for bad in [
            login(
                serde_json::json!({"sub":"bob","iss":"shop","aud":"waitgate","exp":exp()}),
                "another-secret-of-at-least-thirty-two-bytes",
            ),
            login(
                serde_json::json!({"sub":"bob","iss":"other","aud":"waitgate","exp":exp()}),
                SECRET,
            ),
            login(
                serde_json::json!({"sub":"bob","iss":"shop","aud":"waitgate","exp":1}),
                SECRET,
            ),
            login(
                serde_json::json!({"iss":"shop","aud":"waitgate","exp":exp()}),
                SECRET,
            ),
            login(
                serde_json::json!({"sub":"bob","iss":"shop","aud":"waitgate","exp":exp(),"nbf":exp()}),
                SECRET,
            ),
            "not.a.token".into(),
        ] {
            assert_eq!(
                l.user(Some(&format!("Bearer {bad}")), none).unwrap_err(),
                ApiError::InvalidLogin
            );
        }
        let odd = login(
            serde_json::json!({"sub":"bob smith","iss":"shop","aud":"waitgate","exp":exp()}),
            SECRET,
        );
        assert_eq!(
            l.user(Some(&format!("Bearer {odd}")), none).unwrap_err(),
            ApiError::InvalidUserId
        );
    }

    #[test]
    fn a_login_that_ran_out_still_names_its_user_and_nothing_else_does() {
        let l = logins();
        let none = |_: &str| Vec::new();
        let claims = |sub: &str, iss: &str, exp: u64| serde_json::json!({"sub": sub, "iss": iss, "aud": "waitgate", "exp": exp});
        let lapsed = login(claims("bob", "shop", 1), SECRET);
        let bearer = format!("Bearer {lapsed}");
        assert_eq!(
            l.login(Some(&bearer), none).unwrap(),
            Login {
                user: UserId::parse("bob".to_string()).unwrap(),
                expired: true,
                valid_until_us: 1_000_000,
            }
        );
        assert_eq!(
            l.user(Some(&bearer), none).unwrap_err(),
            ApiError::InvalidLogin
        );
        // Run out and forged, or run out and for another issuer: nothing.
        for bad in [
            login(
                claims("bob", "shop", 1),
                "another-secret-of-at-least-thirty-two-bytes",
            ),
            login(claims("bob", "other", 1), SECRET),
        ] {
            let bearer = format!("Bearer {bad}");
            assert_eq!(
                l.login(Some(&bearer), none).unwrap_err(),
                ApiError::InvalidLogin
            );
        }
        // A NumericDate with a fraction is one.
        let decimal = login(
            serde_json::json!({"sub": "bob", "iss": "shop", "aud": "waitgate", "exp": exp() as f64 + 0.5}),
            SECRET,
        );
        let got = l.login(Some(&format!("Bearer {decimal}")), none).unwrap();
        assert_eq!((got.user.as_str(), got.expired), ("bob", false));
        // Of two cookies, the one that has not run out names the user.
        let fresh = login(claims("carol", "shop", exp()), SECRET);
        let both = |_: &str| vec![lapsed.as_str(), fresh.as_str()];
        let got = l.login(None, both).unwrap();
        assert_eq!((got.user.as_str(), got.expired), ("carol", false));
    }
}
