//! `cookies`, `cors` and `identity`: what browsers and a site's login need.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::checks::*;
use super::defaults;

/// What browsers need: how cookies are written and which origins count.
#[derive(Debug, Clone)]
pub struct BrowserConfig {
    /// `Secure` on waitgate's cookies (off only for plain-HTTP demos).
    pub secure_cookies: bool,
    pub origins: crate::browser::origin::Origins,
}

/// The site's login token, from which register and rank take the userId
/// (its `sub`), so that nobody can queue as someone else.
#[derive(Debug, Clone)]
pub struct IdentityConfig {
    pub issuer: String,
    pub audience: String,
    pub key: IdentityKey,
    /// A cookie that holds the login token, read when `Authorization` does
    /// not carry one.
    pub cookie: Option<String>,
    pub leeway: Duration,
}

/// How the login token is verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdentityKey {
    /// HS256, with the secret in this environment variable.
    SecretEnv(String),
    /// RS256 or ES256, with the public keys of this JWKS file.
    JwksFile(PathBuf),
}

section! {
    RawCookies {
        secure: bool = true,
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub(super) struct RawCors {
    pub(super) allowed_origins: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawIdentity {
    pub(super) issuer: String,
    pub(super) audience: String,
    #[serde(default)]
    pub(super) secret_env: Option<String>,
    #[serde(default)]
    pub(super) jwks_file: Option<PathBuf>,
    #[serde(default)]
    pub(super) cookie: Option<String>,
    #[serde(default = "defaults::identity_leeway_s")]
    pub(super) leeway_s: u64,
}

impl RawIdentity {
    pub(super) fn validate(self) -> Result<IdentityConfig, ConfigError> {
        let issuer = non_empty("identity.issuer", self.issuer)?;
        let audience = non_empty("identity.audience", self.audience)?;
        let key = match (self.secret_env, self.jwks_file) {
            (Some(env), None) => {
                if env.is_empty() || !env.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                    return Err(invalid(
                        "identity.secret-env",
                        "must be the name of an environment variable",
                    ));
                }
                IdentityKey::SecretEnv(env)
            }
            (None, Some(path)) => {
                std::fs::metadata(&path).map_err(|e| {
                    invalid("identity.jwks-file", format!("{}: {e}", path.display()))
                })?;
                IdentityKey::JwksFile(path)
            }
            _ => {
                return Err(invalid(
                    "identity",
                    "give exactly one of secret-env (HS256) and jwks-file (RS256, ES256)",
                ))
            }
        };
        if let Some(cookie) = &self.cookie {
            if cookie.is_empty()
                || !cookie
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
            {
                return Err(invalid("identity.cookie", "must be a cookie name"));
            }
        }
        Ok(IdentityConfig {
            issuer,
            audience,
            key,
            cookie: self.cookie,
            leeway: Duration::from_secs(ranged("identity.leeway-s", self.leeway_s, 0, 300)?),
        })
    }
}
