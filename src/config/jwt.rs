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
        let issuer = non_empty("jwt.issuer", self.issuer)?;
        let audience = non_empty("jwt.audience", self.audience)?;
        let ttl = ranged("jwt.ttl-ms", self.ttl_ms, 1_000, MAX_DURATION_MS)?;
        let leeway = ranged("jwt.leeway-s", self.leeway_s, 0, 300)?;
        Ok(JwtConfig {
            issuer,
            audience,
            ttl: Duration::from_millis(ttl),
            leeway: Duration::from_secs(leeway),
        })
    }
}
