//! `queues`: each queue's admission, heartbeat and page settings, and
//! the bounds that keep one script call short.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::checks::*;

/// The most users one admission window may let in (`batch-size`): one
/// Lua call pops them all, and Redis runs scripts one at a time.
pub const MAX_BATCH_SIZE: u64 = 10_000;

/// A window past any queue: every rank exact (and places stay far below
/// the 2^53 a script's numbers hold exactly).
pub const MAX_EXACT_RANK_WINDOW: u64 = 1_000_000_000;

#[derive(Debug, Clone)]
pub struct QueueConfig {
    pub heartbeat: HeartbeatConfig,
    pub admission: AdmissionConfig,
    pub page: PageConfig,
    /// `rank` needs the queueCredential too, so that nobody can keep
    /// another user's place alive or read it.
    pub require_credential: bool,
    /// How many places from the head `rank` answers exactly; beyond, ranks
    /// may be derived from samples of the waiting set, within 0.1% (see
    /// `store::ranks`), and are from place 10,000 on if this is smaller.
    pub exact_rank_window: u64,
    /// The proof of work a register must carry; `None` when `challenge` is
    /// absent or asks 0 bits.
    pub challenge: Option<ChallengeConfig>,
    /// The invite key of an invite-only queue: every register carries an
    /// enqueue token the site signed with it.
    pub invite: Option<InviteConfig>,
}

/// An invite-only queue's key (`queues.<q>.invite`), read from the
/// environment when the config is loaded.
#[derive(Clone, PartialEq, Eq)]
pub struct InviteConfig {
    pub secret_env: String,
    pub secret: Vec<u8>,
}

impl std::fmt::Debug for InviteConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "InviteConfig({})", self.secret_env)
    }
}

/// The shortest invite secret taken, in bytes.
pub const MIN_INVITE_SECRET_BYTES: usize = 32;

/// A queue's proof of work (`queues.<q>.challenge`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChallengeConfig {
    /// How many leading zero bits SHA-256 of a proof must have: 2^bits
    /// hashes on average.
    pub difficulty_bits: u8,
    /// How long a challenge may be answered for.
    pub ttl: Duration,
}

/// The most difficulty a queue may ask (see `entry::challenge`).
pub const MAX_DIFFICULTY_BITS: u64 = 32;

/// The waiting-room page of a queue.
#[derive(Debug, Clone, Default)]
pub struct PageConfig {
    pub title: Option<String>,
    /// An operator's template, read and checked at load; the built-in page
    /// otherwise.
    pub template: Option<std::sync::Arc<crate::browser::template::Template>>,
}

#[derive(Debug, Clone)]
pub struct HeartbeatConfig {
    /// A waiting user is removed once this has passed since the last poll
    /// plus the poll advice that poll was given.
    pub timeout: Duration,
    /// The bounds of the poll advice (`pollAfterMs`): about a quarter of
    /// the expected wait, within these.
    pub poll_min: Duration,
    pub poll_max: Duration,
    pub cleanup_interval: Duration,
    pub cleanup_batch_size: u32,
    /// After Redis was out of reach, how long clients are given to come
    /// back before silence counts again (see `outage_cutoff` in
    /// `lua/lib.lua`).
    pub outage_grace: Duration,
    /// Whether registrations at the tail are numbered, so that a poll far
    /// back that sends the credential keeps its heartbeat in a mark (see
    /// `marks` in `lua/lib.lua`). Off while instances of a version without
    /// marks still run (docs/operations.md, upgrades).
    pub marks: bool,
}

#[derive(Debug, Clone)]
pub struct AdmissionConfig {
    pub interval: Duration,
    pub batch_size: u32,
    /// How long an admitted user stays active (and the latest any token of
    /// theirs may expire).
    pub active_ttl: Duration,
    /// 0 = no cap.
    pub max_active: u64,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub(super) struct RawQueue {
    pub(super) heartbeat: RawHeartbeat,
    pub(super) admission: RawAdmission,
    pub(super) page: RawPage,
    pub(super) require_credential: bool,
    pub(super) exact_rank_window: Option<u64>,
    pub(super) challenge: Option<RawChallenge>,
    pub(super) invite: Option<RawInvite>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawInvite {
    pub(super) secret_env: String,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub(super) struct RawPage {
    pub(super) title: Option<String>,
    pub(super) template: Option<PathBuf>,
}

section! {
    RawHeartbeat {
        timeout_ms: u64 = 30_000,
        cleanup_interval_ms: u64 = 10_000,
        cleanup_batch_size: u64 = 500,
        poll_min_ms: u64 = 1_000,
        poll_max_ms: u64 = 30_000,
        // The page and the JS client wait at most 8 s between tries.
        outage_grace_ms: u64 = 10_000,
        marks: bool = true,
    }
}

section! {
    RawChallenge {
        // About 65,000 hashes: under a second in a browser (docs/security.md).
        difficulty_bits: u64 = 16,
        ttl_ms: u64 = 60_000,
    }
}

section! {
    RawAdmission {
        interval_ms: u64 = 3_000,
        batch_size: u64 = 100,
        active_ttl_ms: u64 = 600_000,
        max_active: u64 = 0,
    }
}

impl RawQueue {
    pub(super) fn validate(self, key: &str) -> Result<QueueConfig, ConfigError> {
        let h = self.heartbeat;
        let a = self.admission;
        let heartbeat = HeartbeatConfig {
            timeout: millis(&format!("{key}.heartbeat.timeout-ms"), h.timeout_ms)?,
            cleanup_interval: millis(
                &format!("{key}.heartbeat.cleanup-interval-ms"),
                h.cleanup_interval_ms,
            )?,
            cleanup_batch_size: ranged(
                &format!("{key}.heartbeat.cleanup-batch-size"),
                h.cleanup_batch_size,
                1,
                MAX_BATCH_SIZE,
            )? as u32,
            poll_min: millis(&format!("{key}.heartbeat.poll-min-ms"), h.poll_min_ms)?,
            poll_max: millis(&format!("{key}.heartbeat.poll-max-ms"), h.poll_max_ms)?,
            outage_grace: Duration::from_millis(ranged(
                &format!("{key}.heartbeat.outage-grace-ms"),
                h.outage_grace_ms,
                0,
                3_600_000,
            )?),
            marks: h.marks,
        };
        if heartbeat.poll_max < heartbeat.poll_min {
            return Err(invalid(
                format!("{key}.heartbeat.poll-max-ms"),
                "must be at least poll-min-ms",
            ));
        }
        let admission = AdmissionConfig {
            interval: millis(&format!("{key}.admission.interval-ms"), a.interval_ms)?,
            batch_size: ranged(
                &format!("{key}.admission.batch-size"),
                a.batch_size,
                1,
                MAX_BATCH_SIZE,
            )? as u32,
            active_ttl: millis(&format!("{key}.admission.active-ttl-ms"), a.active_ttl_ms)?,
            max_active: a.max_active,
        };
        let template = match &self.page.template {
            None => None,
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    invalid(
                        format!("{key}.page.template"),
                        format!("{}: {e}", path.display()),
                    )
                })?;
                let template = crate::browser::template::Template::parse(&text).map_err(|e| {
                    invalid(
                        format!("{key}.page.template"),
                        format!("{}: {e}", path.display()),
                    )
                })?;
                Some(std::sync::Arc::new(template))
            }
        };
        if let Some(title) = &self.page.title {
            if title.trim().is_empty() || title.chars().count() > 200 {
                return Err(invalid(
                    format!("{key}.page.title"),
                    "must be 1 to 200 characters",
                ));
            }
        }
        let challenge = match self.challenge {
            None => None,
            Some(c) => {
                let bits = ranged(
                    &format!("{key}.challenge.difficulty-bits"),
                    c.difficulty_bits,
                    0,
                    MAX_DIFFICULTY_BITS,
                )? as u8;
                // Long enough to solve and register on a slow phone.
                let ttl = Duration::from_millis(ranged(
                    &format!("{key}.challenge.ttl-ms"),
                    c.ttl_ms,
                    10_000,
                    3_600_000,
                )?);
                (bits > 0).then_some(ChallengeConfig {
                    difficulty_bits: bits,
                    ttl,
                })
            }
        };
        let invite = match self.invite {
            None => None,
            Some(raw) => {
                let field = format!("{key}.invite.secret-env");
                let secret = std::env::var(&raw.secret_env).map_err(|_| {
                    invalid(field.clone(), format!("{} is not set", raw.secret_env))
                })?;
                if secret.len() < MIN_INVITE_SECRET_BYTES {
                    return Err(invalid(
                        field,
                        format!(
                            "{} is shorter than {MIN_INVITE_SECRET_BYTES} bytes",
                            raw.secret_env
                        ),
                    ));
                }
                Some(InviteConfig {
                    secret_env: raw.secret_env,
                    secret: secret.into_bytes(),
                })
            }
        };
        Ok(QueueConfig {
            challenge,
            invite,
            heartbeat,
            admission,
            page: PageConfig {
                title: self.page.title,
                template,
            },
            require_credential: self.require_credential,
            exact_rank_window: ranged(
                &format!("{key}.exact-rank-window"),
                self.exact_rank_window.unwrap_or(1_000),
                0,
                MAX_EXACT_RANK_WINDOW,
            )?,
        })
    }
}
