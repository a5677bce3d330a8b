//! `limits`: how often one client may call the queue API's register, rank
//! and token exchange. Off unless set; a reload applies a change.

use super::checks::*;

/// The most clients an instance remembers, at most.
pub const MAX_REMEMBERED_CLIENTS: u64 = 10_000_000;

/// One rate: `per-second` on average, `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    pub per_second: f64,
    pub burst: u32,
}

/// The per-client limits.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitsConfig {
    /// Register calls and waiting-room page loads, per client.
    pub register: Option<Rate>,
    /// Rank polls, per client.
    pub rank: Option<Rate>,
    /// Token exchanges, per client.
    pub token: Option<Rate>,
    /// Clients remembered (least recently seen forgotten first).
    pub clients: usize,
}

impl LimitsConfig {
    pub fn any(&self) -> bool {
        self.register.is_some() || self.rank.is_some() || self.token.is_some()
    }
}

#[derive(serde::Deserialize, Debug, Clone, Copy)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawRate {
    per_second: f64,
    burst: u32,
}

section! {
    RawLimits {
        register_per_client: Option<RawRate> = None,
        rank_per_client: Option<RawRate> = None,
        token_per_client: Option<RawRate> = None,
        max_clients: u64 = 100_000,
    }
}

impl RawLimits {
    pub(super) fn validate(self) -> Result<LimitsConfig, ConfigError> {
        let rate = |key: &'static str, raw: Option<RawRate>| -> Result<Option<Rate>, ConfigError> {
            let Some(raw) = raw else { return Ok(None) };
            if !(raw.per_second.is_finite() && raw.per_second > 0.0 && raw.per_second <= 1e6) {
                return Err(invalid(
                    key,
                    format!(
                        "per-second must be above 0 and at most 1000000 (got {})",
                        raw.per_second
                    ),
                ));
            }
            if !(1..=1_000_000).contains(&raw.burst) {
                return Err(invalid(
                    key,
                    format!("burst must be 1 to 1000000 (got {})", raw.burst),
                ));
            }
            Ok(Some(Rate {
                per_second: raw.per_second,
                burst: raw.burst,
            }))
        };
        if !(1_000..=MAX_REMEMBERED_CLIENTS).contains(&self.max_clients) {
            return Err(invalid(
                "limits.max-clients",
                format!(
                    "must be 1000 to {MAX_REMEMBERED_CLIENTS} (got {})",
                    self.max_clients
                ),
            ));
        }
        Ok(LimitsConfig {
            register: rate("limits.register-per-client", self.register_per_client)?,
            rank: rate("limits.rank-per-client", self.rank_per_client)?,
            token: rate("limits.token-per-client", self.token_per_client)?,
            clients: self.max_clients as usize,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<LimitsConfig, String> {
        serde_yaml::from_str::<RawLimits>(yaml)
            .map_err(|e| e.to_string())?
            .validate()
            .map_err(|e| e.to_string())
    }

    #[test]
    fn limits_are_off_unless_set_and_checked() {
        let limits = parse("{}").unwrap();
        assert!(!limits.any());
        assert_eq!(limits.clients, 100_000);
        let limits =
            parse("{rank-per-client: {per-second: 2.5, burst: 10}, max-clients: 5000}").unwrap();
        let rank = limits.rank.unwrap();
        assert_eq!((rank.per_second, rank.burst), (2.5, 10));
        assert!(limits.register.is_none());
        for (bad, says) in [
            (
                "{register-per-client: {per-second: 0, burst: 1}}",
                "limits.register-per-client",
            ),
            (
                "{token-per-client: {per-second: 1, burst: 0}}",
                "limits.token-per-client",
            ),
            ("{rank-per-client: {per-second: 1}}", "burst"),
            ("{max-clients: 10}", "limits.max-clients"),
            ("{rank-per-second: 1}", "unknown field"),
        ] {
            let error = parse(bad)
                .err()
                .unwrap_or_else(|| panic!("{bad} was taken"));
            assert!(error.contains(says), "{bad}: {error}");
        }
    }
}
