//! The scripts of `lua/`, compiled into the binary so that what runs is
//! what was built, each with the keys it is called with and the codes it
//! answers, and the helpers every call shares.
//!
//! A script's header in `lua/` owns its KEYS order (`KEYS[n] <name>`) and
//! its reply codes (`Codes: <n> <name>, ...`); the lists here follow them,
//! and the tests below check each against its header.

use std::sync::LazyLock;

use redis::{Script, ScriptInvocation};

use super::error::{unexpected, StoreError};
use super::keys::{Key, QueueKeys};
use crate::config::{AdmissionConfig, HeartbeatConfig};

/// A script of `lua/` (loaded after `lua/lib.lua`, the helpers they share)
/// and the queue keys it takes, in its KEYS order.
pub(super) struct QueueScript {
    #[cfg(test)]
    file: &'static str,
    /// The script's own text, without `lib.lua`, for the header checks.
    #[cfg(test)]
    source: &'static str,
    keys: &'static [Key],
    script: LazyLock<Script>,
}

impl QueueScript {
    /// A call of the script on the queue of `keys`, its KEYS given.
    pub(super) fn invoke(&'static self, keys: &QueueKeys) -> ScriptInvocation<'static> {
        let mut invocation = self.script.prepare_invoke();
        for key in self.keys {
            invocation.key(keys.of(*key));
        }
        invocation
    }
}

macro_rules! queue_script {
    ($flags:literal, $file:literal, [$($key:ident),* $(,)?]) => {
        QueueScript {
            #[cfg(test)]
            file: $file,
            #[cfg(test)]
            source: include_str!(concat!("../../lua/", $file)),
            keys: &[$(Key::$key),*],
            script: LazyLock::new(|| {
                Script::new(concat!(
                    $flags,
                    include_str!("../../lua/lib.lua"),
                    include_str!(concat!("../../lua/", $file))
                ))
            }),
        }
    };
}

/// A script that writes.
macro_rules! writes {
    ($file:literal, $keys:tt) => {
        queue_script!("", $file, $keys)
    };
}

/// A read-only script: the `no-writes` flag lets Redis run it on a replica
/// and refuse it any write.
macro_rules! reads {
    ($file:literal, $keys:tt) => {
        queue_script!("#!lua flags=no-writes\n", $file, $keys)
    };
}

/// The codes a script answers, as its header's `Codes:` line names them:
/// `$name` is that name in CamelCase.
macro_rules! codes {
    ($(#[$doc:meta])* $code:ident of $file:literal { $($name:ident = $value:literal),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub(super) enum $code {
            $($name),*
        }

        impl $code {
            const ALL: &'static [($code, i64, &'static str)] =
                &[$(($code::$name, $value, stringify!($name))),*];

            /// The code `value`; an error for one the script does not answer.
            pub(super) fn of(value: i64) -> Result<$code, StoreError> {
                Self::ALL
                    .iter()
                    .find(|(_, v, _)| *v == value)
                    .map(|(code, _, _)| *code)
                    .ok_or_else(|| unexpected($file, value))
            }

            /// The script, and each code's value and name.
            #[cfg(test)]
            fn table() -> (&'static str, Vec<(i64, &'static str)>) {
                ($file, Self::ALL.iter().map(|(_, v, n)| (*v, *n)).collect())
            }
        }
    };
}

pub(super) static REGISTER: QueueScript = writes!(
    "register.lua",
    [
        Waiting, Heartbeat, Credential, Active, Admission, Control, Prequeue, Due, Dues, Proofs,
        Numbering, Marks, Arrivals
    ]
);

codes! {
    /// What `register.lua` did for a user.
    RegisterCode of "register.lua" {
        New = 1,
        AlreadyWaiting = 2,
        Active = 3,
        AlreadyPrequeued = 4,
        PrequeuedNow = 5,
        NotOpen = 6,
        Closed = 7,
        ProofSpent = 8,
        InviteSpent = 9,
    }
}

pub(super) static RANK: QueueScript = writes!(
    "rank.lua",
    [Waiting, Heartbeat, Active, Admission, Control, Prequeue, Due, Dues, Numbering, Marks]
);

codes! {
    /// Where `rank.lua` found a user.
    RankCode of "rank.lua" {
        NotQueued = 0,
        Waiting = 1,
        Active = 3,
        Prequeued = 4,
        FarBack = 5,
        Closed = 6,
    }
}

pub(super) static DROPOUT: QueueScript = writes!(
    "dropout.lua",
    [
        Waiting, Heartbeat, Credential, Active, Prequeue, Admission, Due, Spent, Control,
        Numbering, Marks, Arrivals
    ]
);

codes! {
    /// What `dropout.lua` did.
    DropoutCode of "dropout.lua" {
        Removed = 1,
        NotQueued = 0,
        Earlier = -1,
    }
}

pub(super) static CURRENT: QueueScript = reads!("current.lua", [Waiting, Prequeue, Credential]);

codes! {
    /// Whether a credential names the user's current registration.
    CurrentCode of "current.lua" {
        Current = 1,
        NotQueued = 0,
        Earlier = -1,
    }
}

pub(super) static ADMIT: QueueScript = writes!(
    "admit.lua",
    [Waiting, Heartbeat, Active, Admission, Credential, Control, Prequeue, Due, Dues, Spent]
);

codes! {
    /// Why `admit.lua` admitted whom it did (its `why`).
    AdmitCode of "admit.lua" {
        Decided = 0,
        AlreadyDecided = 1,
        Empty = 2,
        AtCapacity = 3,
        Paused = 4,
        NotOpen = 5,
        Placing = 6,
        Missing = 7,
        Behind = 8,
        Rebuilding = 9,
        Closed = 10,
    }
}

/// `cleanup.lua` and `sweep.lua` take the same keys.
pub(super) static CLEANUP: QueueScript = writes!(
    "cleanup.lua",
    [
        Waiting, Heartbeat, Credential, Active, Prequeue, Admission, Due, Dues, Numbering, Marks,
        Arrivals
    ]
);

pub(super) static SWEEP: QueueScript = writes!(
    "sweep.lua",
    [
        Waiting, Heartbeat, Credential, Active, Prequeue, Admission, Due, Dues, Numbering, Marks,
        Arrivals
    ]
);

pub(super) static LAPSE: QueueScript = writes!(
    "lapse.lua",
    [Waiting, Prequeue, Admission, Due, Numbering, Marks, Arrivals]
);

pub(super) static RECHECK: QueueScript =
    writes!("recheck.lua", [Waiting, Due, Numbering, Marks, Arrivals]);

pub(super) static CONTROL: QueueScript = writes!("control.lua", [Control, Admission, Prequeue]);

pub(super) static RELEASE: QueueScript = writes!("release.lua", [Sweeper]);

codes! {
    /// What `control.lua` made of an operator's change.
    ControlCode of "control.lua" {
        Done = 1,
        Placing = -1,
        OpenAtPast = -2,
        PrequeueAfterOpen = -3,
    }
}

pub(super) static SAMPLES: QueueScript = reads!("samples.lua", [Waiting, Admission]);

pub(super) static REVOKE: QueueScript = writes!("revoke.lua", [Active, Credential, Revoked]);

/// The channel revocations are pushed on (`lua/revoke.lua` publishes; every
/// instance subscribes, see `edge::revoked`).
pub const REVOKED_CHANNEL: &str = "waitgate:revoked";

pub(super) static TOKEN: QueueScript = reads!("token.lua", [Active, Credential]);

pub(super) static STATUS: QueueScript = reads!(
    "status.lua",
    [Control, Waiting, Active, Prequeue, Admission]
);

pub(super) static HEALTH: QueueScript = reads!("health.lua", [Control]);

pub(super) static WATCH: QueueScript =
    writes!("watch.lua", [Admission, Control, Active, Spent, Prequeue]);

pub(super) static RECOVER: QueueScript = writes!(
    "recover.lua",
    [Control, Admission, Revoked, Spent, Waiting, Active, Credential, Due, Prequeue]
);

pub(super) static RESEAT: QueueScript = writes!(
    "reseat.lua",
    [Waiting, Heartbeat, Active, Admission, Control, Prequeue, Due, Dues, Spent]
);

codes! {
    /// What `reseat.lua` did for a user whose place was lost.
    ReseatCode of "reseat.lua" {
        Refused = 0,
        Seated = 1,
        Prequeued = 4,
    }
}

/// Every script, for the checks against their headers.
#[cfg(test)]
static ALL: [&QueueScript; 19] = [
    &REGISTER, &RANK, &DROPOUT, &CURRENT, &ADMIT, &CLEANUP, &SWEEP, &RECHECK, &CONTROL, &SAMPLES,
    &REVOKE, &TOKEN, &STATUS, &HEALTH, &WATCH, &RECOVER, &RESEAT, &RELEASE, &LAPSE,
];

/// One queue as the store's calls take it: its keys, and the settings its
/// scripts read.
#[derive(Clone, Copy)]
pub struct QueueRef<'a> {
    pub keys: &'a QueueKeys,
    pub admission: &'a AdmissionConfig,
    pub heartbeat: &'a HeartbeatConfig,
}

/// The settings most scripts read after their own leading arguments: the
/// admission's interval (ms) and batch size, then the heartbeat's
/// ([`heartbeat_args`]).
pub(super) fn pace_args(invocation: &mut ScriptInvocation<'_>, queue: QueueRef<'_>) {
    invocation
        .arg(queue.admission.interval.as_millis() as u64)
        .arg(queue.admission.batch_size);
    heartbeat_args(invocation, queue.heartbeat);
}

/// The heartbeat settings a script reads (`heartbeat_args` in
/// `lua/lib.lua`): the timeout and the bounds of the poll advice, in ms.
pub(super) fn heartbeat_args(invocation: &mut ScriptInvocation<'_>, heartbeat: &HeartbeatConfig) {
    invocation
        .arg(heartbeat.timeout.as_millis() as u64)
        .arg(heartbeat.poll_min.as_millis() as u64)
        .arg(heartbeat.poll_max.as_millis() as u64);
}

/// The one answer of a batch of one.
pub(super) fn one<T>(script: &'static str, mut answers: Vec<T>) -> Result<T, StoreError> {
    match (answers.pop(), answers.is_empty()) {
        (Some(answer), true) => Ok(answer),
        _ => Err(StoreError::Failed(format!("{script}: not one answer"))),
    }
}

/// A batched script's flat answer, `width` numbers per user, checked to be
/// one answer per user asked.
pub(super) fn answers<'a>(
    script: &'static str,
    flat: &'a [i64],
    width: usize,
    asked: usize,
) -> Result<std::slice::ChunksExact<'a, i64>, StoreError> {
    if flat.len() != width * asked {
        return Err(StoreError::Failed(format!(
            "{script}: {} numbers for {asked} users",
            flat.len()
        )));
    }
    Ok(flat.chunks_exact(width))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The leading comment of a script: its header.
    fn header(source: &str) -> String {
        source
            .lines()
            .take_while(|l| l.starts_with("--"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn every_script_in_lua_is_listed() {
        let mut files: Vec<String> = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/lua"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|f| f != "lib.lua")
            .collect();
        files.sort();
        let mut listed: Vec<&str> = ALL.iter().map(|s| s.file).collect();
        listed.sort();
        assert_eq!(files, listed);
    }

    #[test]
    fn each_key_list_is_its_headers_keys_order() {
        for script in ALL {
            let header = header(script.source);
            let mut named = Vec::new();
            for (at, _) in header.match_indices("KEYS[") {
                let rest = &header[at + 5..];
                let close = rest.find(']').unwrap();
                let n: usize = rest[..close].parse().unwrap();
                // `KEYS[n] <name> <type>`; other mentions of a key
                // (`KEYS[2] and these`) are not its naming.
                let mut words = rest[close + 1..]
                    .split(|c: char| !c.is_ascii_alphanumeric())
                    .filter(|w| !w.is_empty());
                if let (Some(name), Some("ZSET" | "HASH" | "STRING" | "LIST")) =
                    (words.next(), words.next())
                {
                    named.push((n, name.to_string()));
                }
            }
            let listed: Vec<(usize, String)> = script
                .keys
                .iter()
                .enumerate()
                .map(|(i, k)| (i + 1, k.name().to_string()))
                .collect();
            assert_eq!(named, listed, "{}", script.file);
        }
    }

    /// `AlreadyWaiting` as a header writes it: `already-waiting`.
    fn kebab(name: &str) -> String {
        let mut out = String::new();
        for (i, c) in name.chars().enumerate() {
            if c.is_ascii_uppercase() && i > 0 {
                out.push('-');
            }
            out.push(c.to_ascii_lowercase());
        }
        out
    }

    #[test]
    fn each_code_enum_is_its_headers_codes() {
        let tables = [
            RegisterCode::table(),
            RankCode::table(),
            DropoutCode::table(),
            CurrentCode::table(),
            AdmitCode::table(),
            ControlCode::table(),
            ReseatCode::table(),
        ];
        for (file, codes) in tables {
            let script = ALL.iter().find(|s| s.file == file).unwrap();
            let header = header(script.source);
            let named: Vec<(i64, String)> = header
                .lines()
                .filter_map(|l| l.strip_prefix("-- Codes:"))
                .flat_map(|l| l.split(','))
                .filter(|item| !item.trim().is_empty())
                .map(|item| {
                    let (value, name) = item.trim().split_once(' ').unwrap();
                    (value.parse().unwrap(), name.trim().to_string())
                })
                .collect();
            let listed: Vec<(i64, String)> = codes.iter().map(|(v, n)| (*v, kebab(n))).collect();
            assert!(!named.is_empty(), "{file} names no codes");
            assert_eq!(named, listed, "{file}");
        }
    }

    #[test]
    fn an_unknown_code_is_an_error_naming_the_script() {
        assert_eq!(RegisterCode::of(2).unwrap(), RegisterCode::AlreadyWaiting);
        let e = RegisterCode::of(10).unwrap_err();
        assert!(e.to_string().contains("register.lua"), "{e}");
    }
}
