//! `jwt`: the tokens waitgate issues.

use std::time::Duration;

use super::checks::*;

#[derive(Debug, Clone)]
pub struct JwtConfig {
    pub issuer: String,
    pub audience: String,
    pub ttl: Duration,
    pub leeway: Duration,
}

section! {
    RawJwt {
        issuer: String = "waitgate".into(),
        audience: String = "ticketing".into(),
        ttl_ms: u64 = 600_000,
        leeway_s: u64 = 5,
    }
}

impl RawJwt {
    pub(super) fn validate(self) -> Result<JwtConfig, ConfigError> {
        if self.issuer.trim().is_empty() {
            return Err(invalid("jwt.issuer", "must not be empty"));
        }
        if self.audience.trim().is_empty() {
            return Err(invalid("jwt.audience", "must not be empty"));
        }
        let ttl = ranged("jwt.ttl-ms", self.ttl_ms, 1_000, MAX_DURATION_MS)?;
        let leeway = ranged("jwt.leeway-s", self.leeway_s, 0, 300)?;
        Ok(JwtConfig {
            issuer: self.issuer,
            audience: self.audience,
            ttl: Duration::from_millis(ttl),
            leeway: Duration::from_secs(leeway),
        })
    }
}
