//! The queue API's calls: register, dropout, the token exchange's check,
//! whether a credential names the current registration, and the queue
//! sizes for the gauges.

use super::answers::{place, Closed, Registration};
use super::connection::{Resend, Store};
use super::error::{count, StoreError};
use super::keys::QueueKeys;
use super::scripts::*;

/// The outcome of `dropout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dropout {
    Removed,
    NotQueued,
    CredentialMismatch,
}

/// The outcome of `current`: is a credential's registration the user's
/// current one?
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Current {
    Yes,
    NotQueued,
    /// The user registered again since.
    Earlier,
}

/// Queue sizes, for the gauges.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    pub waiting: u64,
    pub active: u64,
    /// Users admitted per window, as observed; `None` before any admission.
    pub rate_per_window: Option<f64>,
    /// The admission interval in effect (a live override, or the config's).
    pub interval_ms: Option<u64>,
    pub paused: bool,
    pub closed: bool,
    pub phase: &'static str,
}

/// A user a register call is for, with what buys their place where the
/// queue asks it: a proof of work, an invite, or both.
#[derive(Debug, Clone, Copy)]
pub struct Joining<'a> {
    pub user: &'a str,
    pub spends: &'a [SpentProof<'a>],
}

/// A proof of work or an invite that passed its checks: its id, recorded
/// once it bought a place so that it buys one only, until it expires (ms
/// since the epoch).
#[derive(Debug, Clone, Copy)]
pub struct SpentProof<'a> {
    pub id: &'a str,
    pub expires_at_ms: u64,
}

impl Store {
    pub async fn register(
        &self,
        queue: QueueRef<'_>,
        joining: Joining<'_>,
    ) -> Result<Registration, StoreError> {
        one("register", self.register_many(queue, &[joining]).await?)
    }
    /// Registers each of `users` (at most [`MAX_USERS_PER_SCRIPT`]), in this order, in
    /// one script call; a user whose proof of work or invite was spent
    /// already is answered [`Registration::ProofSpent`] and nothing else.
    pub async fn register_many(
        &self,
        queue: QueueRef<'_>,
        users: &[Joining<'_>],
    ) -> Result<Vec<Registration>, StoreError> {
        let keys = queue.keys;
        let mut invocation = REGISTER.invoke(keys);
        pace_args(&mut invocation, queue);
        invocation.arg(u8::from(queue.heartbeat.marks));
        // The proofs and invites, as (user's place in the batch from 1, id,
        // expiry), then the users.
        invocation.arg(users.iter().map(|u| u.spends.len()).sum::<usize>());
        for (i, joining) in users.iter().enumerate() {
            for proof in joining.spends {
                invocation.arg(i + 1).arg(proof.id).arg(proof.expires_at_ms);
            }
        }
        for joining in users {
            invocation.arg(joining.user);
        }
        let flat: Vec<i64> = self.run_write(invocation, &keys.waiting).await?;
        let mut registrations = answers("register", &flat, 6, users.len())?
            .map(|a| {
                let (code, value, wait, arrival, advice) = (a[0], a[1], a[2], a[3], a[4]);
                let number = (a[5] > 0).then(|| count(a[5])).transpose()?;
                match RegisterCode::of(code)? {
                    RegisterCode::New => Ok(Registration::New {
                        place: place(value, wait, advice)?,
                        arrival: count(arrival)?,
                        number,
                    }),
                    RegisterCode::AlreadyWaiting => Ok(Registration::AlreadyWaiting {
                        place: place(value, wait, advice)?,
                        arrival: count(arrival)?,
                        number,
                    }),
                    RegisterCode::Active => Ok(Registration::Active {
                        expires_at_ms: count(value)?,
                        arrival: count(arrival)?,
                    }),
                    RegisterCode::AlreadyPrequeued | RegisterCode::PrequeuedNow => {
                        Ok(Registration::Prequeued {
                            opens_in_ms: count(value)?,
                            arrival: count(arrival)?,
                            new: RegisterCode::of(code)? == RegisterCode::PrequeuedNow,
                            committed_at_ms: count(wait)?,
                            poll_after_ms: count(advice)?,
                        })
                    }
                    RegisterCode::NotOpen => Ok(Registration::NotOpen {
                        opens_at_ms: count(value)?,
                    }),
                    RegisterCode::Closed => Ok(Registration::Closed(Closed::default())),
                    RegisterCode::ProofSpent => Ok(Registration::ProofSpent),
                    RegisterCode::InviteSpent => Ok(Registration::InviteSpent),
                }
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        if registrations
            .iter()
            .any(|r| matches!(r, Registration::Closed(_)))
        {
            let closed = self.closed_message(keys).await?;
            for registration in &mut registrations {
                if let Registration::Closed(c) = registration {
                    *c = closed.clone();
                }
            }
        }
        Ok(registrations)
    }
    /// The operator's message of a closed queue, read once for a batch
    /// that a script found closed (after the script: a reopen in between
    /// leaves it empty).
    pub(super) async fn closed_message(&self, keys: &QueueKeys) -> Result<Closed, StoreError> {
        let mut hget = redis::cmd("HGET");
        hget.arg(&keys.control).arg("closed_message");
        let hget = &hget;
        let message: Option<String> = self
            .call(Resend::Safe, |mut c| async move {
                hget.query_async::<Option<String>>(&mut c).await
            })
            .await?;
        Ok(Closed {
            message: message.unwrap_or_default().into(),
        })
    }
    /// The draw in force for a shuffled pre-queue: when it was committed
    /// (ms) and its commitment; `None` when there is none.
    pub async fn commitment(&self, keys: &QueueKeys) -> Result<Option<(u64, String)>, StoreError> {
        let mut hmget = redis::cmd("HMGET");
        hmget
            .arg(&keys.control)
            .arg("committed_at")
            .arg("commitment");
        let hmget = &hmget;
        let (at, commitment): (Option<u64>, Option<String>) = self
            .call(Resend::Safe, |mut c| async move {
                hmget.query_async(&mut c).await
            })
            .await?;
        Ok(at.zip(commitment))
    }
    /// The sizes and settings of a queue for the gauges: the admin API's
    /// read, in one round-trip.
    pub async fn sample(&self, keys: &QueueKeys) -> Result<Sample, StoreError> {
        let status = self.status(keys).await?;
        Ok(Sample {
            waiting: status.waiting,
            active: status.active,
            rate_per_window: status.rate_per_window,
            interval_ms: status.number("interval"),
            paused: status.paused(),
            closed: status.closed().is_some(),
            phase: status.phase(),
        })
    }
    /// Takes out the registration at `arrival`, the one a checked
    /// credential names.
    pub async fn dropout(
        &self,
        keys: &QueueKeys,
        user: &str,
        arrival: u64,
    ) -> Result<Dropout, StoreError> {
        let mut invocation = DROPOUT.invoke(keys);
        invocation.arg(user).arg(arrival);
        let code: i64 = self.run_write(invocation, &keys.waiting).await?;
        Ok(match DropoutCode::of(code)? {
            DropoutCode::Removed => Dropout::Removed,
            DropoutCode::NotQueued => Dropout::NotQueued,
            DropoutCode::Earlier => Dropout::CredentialMismatch,
        })
    }
    /// Whether the registration at `arrival` (a credential's) is `user`'s
    /// current one (`lua/current.lua`).
    pub async fn current(
        &self,
        keys: &QueueKeys,
        user: &str,
        arrival: u64,
    ) -> Result<Current, StoreError> {
        let mut invocation = CURRENT.invoke(keys);
        invocation.arg(user).arg(arrival);
        let code: i64 = self.run(invocation, Resend::Safe).await?;
        Ok(match CurrentCode::of(code)? {
            CurrentCode::Current => Current::Yes,
            CurrentCode::NotQueued => Current::NotQueued,
            CurrentCode::Earlier => Current::Earlier,
        })
    }
    /// The active-state expiry (Redis clock, ms) when the user is active and
    /// was admitted from the registration at `arrival`; `None` for either
    /// failure, alike.
    pub async fn token(
        &self,
        keys: &QueueKeys,
        user: &str,
        arrival: u64,
    ) -> Result<Option<u64>, StoreError> {
        one("token", self.token_many(keys, &[(user, arrival)]).await?)
    }
    /// For each (user, arrival the credential names), at most
    /// [`MAX_USERS_PER_SCRIPT`] / 2 of them, the active-state expiry when the user is
    /// active from that registration: one script call.
    pub async fn token_many(
        &self,
        keys: &QueueKeys,
        users: &[(&str, u64)],
    ) -> Result<Vec<Option<u64>>, StoreError> {
        let mut invocation = TOKEN.invoke(keys);
        for (user, arrival) in users {
            invocation.arg(*user).arg(*arrival);
        }
        let flat: Vec<i64> = self.run(invocation, Resend::Safe).await?;
        Ok(answers("token", &flat, 1, users.len())?
            .map(|a| u64::try_from(a[0]).ok().filter(|&ms| ms > 0))
            .collect())
    }
}
