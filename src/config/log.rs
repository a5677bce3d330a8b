//! `log`: the access log, the format and the filter.

use super::checks::*;

/// The filter when neither `log.filter` nor `RUST_LOG` says otherwise:
/// waitgate's own events, and only warnings from its dependencies (Pingora
/// is chatty at info).
pub const DEFAULT_LOG_FILTER: &str = "warn,waitgate=info";

/// The logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// One line per request at `info` (target `waitgate::access`).
    pub access: bool,
    pub format: LogFormat,
    /// The `tracing` filter (`RUST_LOG` syntax); `RUST_LOG`, when set, wins.
    pub filter: String,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

section! {
    RawLog {
        access: bool = true,
        format: String = "text".into(),
        filter: String = DEFAULT_LOG_FILTER.into(),
    }
}

impl RawLog {
    pub(super) fn validate(self) -> Result<LogConfig, ConfigError> {
        let format = match self.format.as_str() {
            "text" => LogFormat::Text,
            "json" => LogFormat::Json,
            other => {
                return Err(invalid(
                    "log.format",
                    format!("must be text or json (got `{other}`)"),
                ))
            }
        };
        if let Err(e) = tracing_subscriber::EnvFilter::builder().parse(&self.filter) {
            return Err(invalid("log.filter", format!("not a valid filter: {e}")));
        }
        Ok(LogConfig {
            access: self.access,
            format,
            filter: self.filter,
        })
    }
}
