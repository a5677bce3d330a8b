//! The operators' API, under `/admin/v1/` on the admin listener: pause and
//! resume admission, close and reopen a queue (the end of a sale), change
//! the admission rate live, schedule an open with a pre-queue, and revoke a
//! user.
//!
//! Every change is one script (`lua/control.lua`, `lua/revoke.lua`) on the
//! queue's Redis keys, which every instance reads on its next admission,
//! register or rank call: a change holds everywhere within one admission
//! interval, whichever instance took it. Each change is counted
//! (`waitgate_admin_changes_total`) and logged as one audit line: who
//! (`actor`, the name of the token used), `action`, `queue`, and the state
//! it changed `before` and `after`.
//!
//! The API needs `Authorization: Bearer <token>`, one of the named tokens
//! of `WAITGATE_ADMIN_TOKENS` or `WAITGATE_ADMIN_TOKEN` (see [`token`]).
//! With neither set it does not exist (404), so an instance nobody set up
//! for it exposes nothing.

mod status;
pub use status::masked;
mod token;

use std::borrow::Cow;
use std::sync::Arc;

use arc_swap::ArcSwap;
use serde::{Deserialize, Serialize};

use crate::config::{MAX_BATCH_SIZE, MAX_DURATION_MS, MIN_INTERVAL_MS};
use crate::durability::Durability;
use crate::edge::jwt::Tokens;
use crate::error::ApiError;
use crate::metrics::{Metrics, REVOKED_BY_ADMIN};
use crate::queues::{Queue, Queues};
use crate::reply::Reply;
use crate::store::{Change, Refused, Setting, Store, StoreError, MAX_CLOSED_MESSAGE_BYTES};
use crate::user::UserId;
use crate::wire;

pub use token::{AdminAccess, AdminTokenError, AdminTokens, ENV as ADMIN_TOKEN_ENV};

/// Where the API lives on the admin listener.
pub const PREFIX: &str = "/admin/v1/";

/// A request body is a small JSON object.
pub const MAX_ADMIN_BODY_BYTES: usize = 4096;

/// The admin API: the store and queues it changes.
pub struct ControlApi {
    /// The admin tokens; without any source of them the admin API answers
    /// 404.
    pub access: Option<Arc<AdminAccess>>,
    pub store: Arc<Store>,
    pub queues: Arc<ArcSwap<Queues>>,
    pub tokens: Arc<Tokens>,
    pub metrics: Arc<Metrics>,
    /// Writes a queue's state back when Redis lost it, before a change.
    pub durability: Arc<Durability>,
}

/// One admin request, as the listener read it.
pub struct Request<'a> {
    /// The name of the token it carried ([`ControlApi::authorize`]).
    pub actor: &'a str,
    pub method: &'a str,
    pub path: &'a str,
    /// The `Content-Type` values sent: a body must be declared JSON.
    pub content_type: &'a [&'a [u8]],
    pub body: &'a [u8],
}

impl ControlApi {
    /// What the Redis that holds the queues cannot keep, in words (see
    /// `Store::durability_warnings`).
    pub async fn durability_warnings(&self) -> Result<Vec<String>, StoreError> {
        durability_warnings(&self.store, &self.queues.load()).await
    }

    /// Whether a request under [`PREFIX`] with these `Authorization`
    /// values may go on, checked before its body is read: the name of the
    /// token it carries.
    pub fn authorize(&self, authorization: &[&[u8]]) -> Result<String, Reply> {
        let Some(access) = &self.access else {
            return Err(Reply::from(ApiError::NotFound));
        };
        let tokens = access.tokens();
        match authorization {
            [one] => tokens.admits(one).map(String::from),
            _ => None,
        }
        .ok_or_else(|| Reply::from(ApiError::AdminUnauthorized))
    }

    /// Answers one request under [`PREFIX`] that [`Self::authorize`]
    /// let through.
    pub async fn serve(&self, request: Request<'_>) -> Reply {
        match self.route(&request).await {
            Ok(reply) | Err(reply) => reply,
        }
    }

    async fn route(&self, request: &Request<'_>) -> Result<Reply, Reply> {
        media_type(request)?;
        let rest = request.path.strip_prefix(PREFIX).unwrap_or("");
        let parts: Vec<&str> = rest.split('/').collect();
        let method = request.method;
        match parts[..] {
            ["queues"] => {
                allow_read(method)?;
                // Read side by side: while Redis hangs, the listing takes
                // one command timeout, not one per queue.
                let queues = self.queues.load();
                let all = futures::future::join_all(
                    queues.iter().map(|queue| status::read(&self.store, queue)),
                )
                .await;
                Ok(Reply::json(200, &Listing { queues: all }))
            }
            ["queues", name] => {
                allow_read(method)?;
                let queue = self.queue(name)?;
                Ok(Reply::json(200, &status::read(&self.store, &queue).await))
            }
            ["queues", name, "revoke"] => {
                allow(method, "POST")?;
                self.revoke(request.actor, name, request.body).await
            }
            ["queues", name, action] => {
                let queue = self.queue(name)?;
                let (action, change) = change_asked(&queue, action, method, request.body)?;
                self.change(request.actor, queue, action, change).await
            }
            _ => Err(Reply::from(ApiError::NotFound)),
        }
    }

    /// The queue a path segment names, percent-decoded as the queue API
    /// decodes its `queue` parameter (`q%32` is `q2` on both); a segment
    /// that does not decode to UTF-8 names none.
    fn queue(&self, name: &str) -> Result<Arc<Queue>, Reply> {
        let name = percent_encoding::percent_decode_str(name)
            .decode_utf8()
            .map_err(|_| Reply::from(ApiError::UnknownQueue))?;
        Ok(self.queues.load().find(Some(&name))?.clone())
    }

    /// Applies a change, logs and counts it, and answers with the queue's
    /// state after it.
    async fn change(
        &self,
        actor: &str,
        queue: Arc<Queue>,
        action: &'static str,
        change: Change,
    ) -> Result<Reply, Reply> {
        let before = status::read(&self.store, &queue).await;
        let mut made = self.store.control(&queue.keys, &change).await;
        if let Err(StoreError::Lost) = made {
            // Redis lost the queue's state: written back first.
            if let Err(e) = self.durability.look(&queue).await {
                return Err(self.unavailable(e));
            }
            made = self.store.control(&queue.keys, &change).await;
        }
        match made {
            Ok(Ok(())) => {}
            Ok(Err(refused)) => return Err(Reply::from(refusal(refused))),
            Err(e) => return Err(self.unavailable(e)),
        }
        // This instance remembers the change at once, should Redis lose it
        // before the next look (a failure here is the next look's to mend).
        let _ = self.durability.look(&queue).await;
        let after = status::read(&self.store, &queue).await;
        self.audit(
            actor,
            action,
            &queue.name,
            &before.audited(action),
            &after.audited(action),
        );
        Ok(Reply::json(200, &after))
    }

    async fn revoke(&self, actor: &str, name: &str, body: &[u8]) -> Result<Reply, Reply> {
        let queue = self.queue(name)?;
        let user = revoke_body(body)?;
        let (was_active, at_ms) = crate::revocation::revoke(
            &self.store,
            &self.tokens,
            &self.metrics,
            &queue,
            user.as_str(),
            REVOKED_BY_ADMIN,
        )
        .await
        .map_err(|e| self.unavailable(e))?;
        self.audit(
            actor,
            "revoke",
            &queue.name,
            &serde_json::json!({"userId": user.as_str(), "active": was_active}),
            &serde_json::json!({"userId": user.as_str(), "active": false, "revoked": true}),
        );
        Ok(Reply::json(
            200,
            &Revocation {
                user_id: user.as_str(),
                queue: &queue.name,
                was_active,
                revoked_at: crate::time::rfc3339(at_ms),
            },
        ))
    }

    /// The audit line of a change made, and its count. `before` and `after`
    /// are the state the action changes, as compact JSON (`null` where Redis
    /// could not be read); with `log.format: json` every field is one of
    /// the line's JSON fields.
    fn audit(
        &self,
        actor: &str,
        action: &str,
        queue: &str,
        before: &serde_json::Value,
        after: &serde_json::Value,
    ) {
        tracing::info!(
            target: "waitgate::audit",
            actor = %actor,
            action = %action,
            queue = %queue,
            before = %before,
            after = %after,
            "admin change"
        );
        self.metrics
            .admin_changes
            .with_label_values(&[queue, action])
            .inc();
    }

    fn unavailable(&self, error: StoreError) -> Reply {
        self.metrics.redis_error("control");
        match &error {
            // Automation retrying a change in a loop during an outage
            // would otherwise write a line per try.
            // A change sent to a Redis that stalls is applied when it
            // wakes: unknown, not "not made" (the client is told so too).
            StoreError::Unavailable(_) | StoreError::Lost => crate::logging::warn_limited_noting(
                "admin",
                "the admin change was not confirmed in time (it may still be made)",
                &error,
            ),
            StoreError::Failed(_) => tracing::error!(%error, "admin change failed: redis"),
        }
        Reply::from(ApiError::AdminUnconfirmed)
    }
}

/// The change a `<method> /admin/v1/queues/<q>/<action>` asks for, and the
/// action's name in the audit line and the metric.
fn change_asked(
    queue: &Queue,
    action: &str,
    method: &str,
    body: &[u8],
) -> Result<(&'static str, Change), Reply> {
    let configured_interval_ms = queue.config.admission.interval.as_millis() as u64;
    match action {
        "pause" => {
            allow(method, "POST")?;
            no_body(body)?;
            Ok(("pause", Change::Pause))
        }
        "resume" => {
            allow(method, "POST")?;
            no_body(body)?;
            Ok(("resume", Change::Resume))
        }
        "close" => {
            allow(method, "POST")?;
            Ok(("close", close_change(body)?))
        }
        "reopen" => {
            allow(method, "POST")?;
            no_body(body)?;
            let grace_ms = queue.config.heartbeat.outage_grace.as_millis() as u64;
            Ok(("reopen", Change::Reopen { grace_ms }))
        }
        "admission" => match method {
            "PATCH" => Ok(("admission", admission_change(body, configured_interval_ms)?)),
            "DELETE" => {
                no_body(body)?;
                let configured = Some(Setting::Configured);
                Ok((
                    "admission",
                    Change::Admission {
                        batch_size: configured,
                        interval_ms: configured,
                        max_active: configured,
                        configured_interval_ms,
                    },
                ))
            }
            _ => Err(Reply::from(ApiError::MethodNotAllowed {
                path: "/admin/v1/queues/<queue>/admission",
                allow: "PATCH, DELETE",
            })),
        },
        "event" => match method {
            "PUT" => Ok(("event", event_change(body)?)),
            "DELETE" => {
                no_body(body)?;
                Ok(("end_event", Change::EndEvent))
            }
            _ => Err(Reply::from(ApiError::MethodNotAllowed {
                path: "/admin/v1/queues/<queue>/event",
                allow: "PUT, DELETE",
            })),
        },
        _ => Err(Reply::from(ApiError::NotFound)),
    }
}

/// What the Redis that holds `queues` cannot keep, in words.
pub async fn durability_warnings(
    store: &Store,
    queues: &Queues,
) -> Result<Vec<String>, StoreError> {
    let named: Vec<(&str, &crate::store::QueueKeys)> =
        queues.iter().map(|q| (q.name.as_str(), &q.keys)).collect();
    store.durability_warnings(&named).await
}

#[derive(Serialize)]
struct Listing {
    queues: Vec<status::QueueStatus>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Revocation<'a> {
    user_id: &'a str,
    queue: &'a str,
    was_active: bool,
    revoked_at: String,
}

fn allow(method: &str, allowed: &'static str) -> Result<(), Reply> {
    if method == allowed {
        return Ok(());
    }
    Err(Reply::from(ApiError::MethodNotAllowed {
        path: "This admin endpoint",
        allow: allowed,
    }))
}

/// A read: `GET`, or `HEAD`, answered as `GET` (the listener sends no body
/// for it), as the rest of the admin listener is.
fn allow_read(method: &str) -> Result<(), Reply> {
    if matches!(method, "GET" | "HEAD") {
        return Ok(());
    }
    Err(Reply::from(ApiError::MethodNotAllowed {
        path: "This admin endpoint",
        allow: "GET, HEAD",
    }))
}

fn invalid(message: impl Into<Cow<'static, str>>) -> Reply {
    Reply::from(ApiError::InvalidRequest(message.into()))
}

/// A body is JSON and says so, as on the queue API: 415 for a body sent
/// under another type, or none (curl's `-d` alone sends a form type).
fn media_type(request: &Request<'_>) -> Result<(), Reply> {
    if request.body.is_empty() {
        return Ok(());
    }
    match request.content_type {
        [one] if wire::body::is_json_value(one) => Ok(()),
        _ => Err(Reply::from(ApiError::UnsupportedMediaType)),
    }
}

/// No body, or an empty JSON object (what many HTTP clients send).
fn no_body(body: &[u8]) -> Result<(), Reply> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct NoFields {}
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(());
    }
    match wire::body::parse_json::<NoFields>(body) {
        Ok(NoFields {}) => Ok(()),
        Err(ApiError::InvalidRequest(_)) => Err(invalid("This endpoint takes no fields.")),
        Err(error) => Err(Reply::from(error)),
    }
}

/// A field that may be left out, given, or `null`: `None` when left out,
/// else the value as sent, `null` included (serde reads a `null` into an
/// `Option` as `None`, which would mean "left out").
fn present<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<serde_json::Value>, D::Error> {
    serde_json::Value::deserialize(deserializer).map(Some)
}

/// A body of fields that may each be left out, given or `null` (see
/// [`present`]); unknown fields are refused.
macro_rules! body_of_present_fields {
    ($(#[$doc:meta])* $name:ident { $($field:ident),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields, rename_all = "camelCase")]
        struct $name {
            $(
                #[serde(default, deserialize_with = "present")]
                $field: Option<serde_json::Value>,
            )*
        }
    };
}

body_of_present_fields! {
    /// PATCH `.../admission`. Parsed by the queue API's reader, so that
    /// unknown and repeated fields are refused alike.
    AdmissionBody { batch_size, interval_ms, max_active }
}

body_of_present_fields! {
    /// PUT `.../event`.
    EventBody { prequeue_from, open_at, shuffle }
}

body_of_present_fields! {
    /// POST `.../revoke`.
    RevokeBody { user_id }
}

body_of_present_fields! {
    /// POST `.../close`.
    CloseBody { message }
}

/// `{"message"}`: the words the visitors are shown, 1 to
/// [`MAX_CLOSED_MESSAGE_BYTES`] bytes of text with no control characters
/// (a line break included: the page shows one paragraph) and no invisible
/// or direction-changing format characters (see [`is_format`]).
fn close_change(body: &[u8]) -> Result<Change, Reply> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(invalid("message is required."));
    }
    let fields: CloseBody = wire::body::parse_json(body)?;
    let message = match fields.message {
        Some(serde_json::Value::String(message)) => message,
        None => return Err(invalid("message is required.")),
        Some(_) => return Err(invalid("message must be a string.")),
    };
    if message.trim().is_empty() {
        return Err(invalid("message must not be empty."));
    }
    if message.len() > MAX_CLOSED_MESSAGE_BYTES {
        return Err(invalid(format!(
            "message must be at most {MAX_CLOSED_MESSAGE_BYTES} bytes."
        )));
    }
    if message.chars().any(|c| c.is_control() || is_format(c)) {
        return Err(invalid(
            "message must not hold control characters, line separators, or invisible or direction-changing format characters.",
        ));
    }
    Ok(Change::Close { message })
}

/// The format characters a message could hide or reorder text with, on
/// the page and in the audit line: the bidirectional controls (which make
/// "sold out" read as something else), the zero-width ones, and the line
/// and paragraph separators. Written out because the standard library has
/// no Unicode categories and no crate of ours reads them.
fn is_format(c: char) -> bool {
    matches!(
        c,
        '\u{061C}'
            | '\u{200B}'..='\u{200F}'
            | '\u{2028}'..='\u{202E}'
            | '\u{2060}'..='\u{2069}'
            | '\u{FEFF}'
    )
}

/// `{"batchSize","intervalMs","maxActive"}`: each a number, or `null` for
/// the configured value; a field left out stays as it is.
fn admission_change(body: &[u8], configured_interval_ms: u64) -> Result<Change, Reply> {
    let fields: AdmissionBody = wire::body::parse_json(body)?;
    let setting = |key: &str, value: &Option<serde_json::Value>, min: u64, max: u64| match value {
        None => Ok(None),
        Some(serde_json::Value::Null) => Ok(Some(Setting::Configured)),
        Some(v) => match v.as_u64() {
            Some(n) if (min..=max).contains(&n) => Ok(Some(Setting::Value(n))),
            _ => Err(invalid(format!(
                "{key} must be an integer from {min} to {max}, or null for the configured value."
            ))),
        },
    };
    if fields.batch_size.is_none() && fields.interval_ms.is_none() && fields.max_active.is_none() {
        return Err(invalid(
            "Give at least one of batchSize, intervalMs, maxActive.",
        ));
    }
    Ok(Change::Admission {
        batch_size: setting("batchSize", &fields.batch_size, 1, MAX_BATCH_SIZE)?,
        interval_ms: setting(
            "intervalMs",
            &fields.interval_ms,
            MIN_INTERVAL_MS,
            MAX_DURATION_MS,
        )?,
        max_active: setting("maxActive", &fields.max_active, 0, 1_000_000_000)?,
        configured_interval_ms,
    })
}

/// `{"prequeueFrom"?, "openAt", "shuffle"?}`: RFC 3339 times; the
/// pre-queue opens now when `prequeueFrom` is left out; `shuffle` defaults
/// to true.
fn event_change(body: &[u8]) -> Result<Change, Reply> {
    let fields: EventBody = wire::body::parse_json(body)?;
    let time = |key: &str, value: &Option<serde_json::Value>| -> Result<Option<u64>, Reply> {
        match value {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(serde_json::Value::String(text)) => crate::time::parse_rfc3339(text)
                .map(Some)
                .ok_or_else(|| invalid(format!("{key} must be an RFC 3339 time."))),
            Some(_) => Err(invalid(format!("{key} must be an RFC 3339 time."))),
        }
    };
    let open_at_ms =
        time("openAt", &fields.open_at)?.ok_or_else(|| invalid("openAt is required."))?;
    let prequeue_from_ms = time("prequeueFrom", &fields.prequeue_from)?;
    if prequeue_from_ms.is_some_and(|from| from > open_at_ms) {
        return Err(Reply::from(refusal(Refused::PrequeueAfterOpen)));
    }
    let shuffle = match &fields.shuffle {
        None => true,
        Some(serde_json::Value::Bool(b)) => *b,
        Some(_) => return Err(invalid("shuffle must be true or false.")),
    };
    Ok(Change::Event {
        prequeue_from_ms,
        open_at_ms,
        shuffle,
    })
}

fn revoke_body(body: &[u8]) -> Result<UserId, Reply> {
    let fields: RevokeBody = wire::body::parse_json(body)?;
    match fields.user_id {
        Some(serde_json::Value::String(user)) => {
            Ok(UserId::parse(user).ok_or(ApiError::InvalidUserId)?)
        }
        _ => Err(invalid("userId is required.")),
    }
}

fn refusal(refused: Refused) -> ApiError {
    match refused {
        Refused::Placing => ApiError::Conflict(
            "The pre-queue is being placed right now; try again in a few seconds.",
        ),
        Refused::OpenAtPast => {
            ApiError::InvalidRequest(Cow::Borrowed("openAt must be in the future."))
        }
        Refused::PrequeueAfterOpen => {
            ApiError::InvalidRequest(Cow::Borrowed("prequeueFrom must not be after openAt."))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admission_bodies_are_checked() {
        assert_eq!(
            admission_change(br#"{"batchSize":5,"intervalMs":null}"#, 3000).unwrap(),
            Change::Admission {
                batch_size: Some(Setting::Value(5)),
                interval_ms: Some(Setting::Configured),
                max_active: None,
                configured_interval_ms: 3000,
            }
        );
        for bad in [
            &br#"{}"#[..],
            br#"{"batchSize":0}"#,
            br#"{"batchSize":-1}"#,
            br#"{"batchSize":1.5}"#,
            br#"{"batchSize":"5"}"#,
            br#"{"intervalMs":1}"#,
            br#"{"rate":5}"#,
            br#"[1]"#,
            br#"{"#,
            br#"{"batchSize":3,"batchSize":4}"#,
            br#"{"batchSize":null,"batchSize":4}"#,
        ] {
            assert!(admission_change(bad, 3000).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn event_bodies_are_checked() {
        assert_eq!(
            event_change(br#"{"openAt":"2026-12-01T10:00:00Z"}"#).unwrap(),
            Change::Event {
                prequeue_from_ms: None,
                open_at_ms: 1_796_119_200_000,
                shuffle: true,
            }
        );
        for bad in [
            &br#"{}"#[..],
            br#"{"openAt":"tomorrow"}"#,
            br#"{"openAt":1796119200000}"#,
            br#"{"openAt":"2026-12-01T10:00:00Z","shuffle":"yes"}"#,
            br#"{"openAt":"2026-12-01T10:00:00Z","prequeueFrom":"2026-12-01T11:00:00Z"}"#,
            br#"{"openAt":"2026-12-01T10:00:00Z","extra":1}"#,
            br#"{"openAt":"2026-12-01T10:00:00Z","openAt":"2026-12-02T10:00:00Z"}"#,
            br#"{"openAt":"2026-12-01T10:00:00Z","shuffle":null}"#,
        ] {
            assert!(event_change(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_body_must_be_declared_json() {
        let checked = |content_type: &[&[u8]], body: &[u8]| {
            media_type(&Request {
                actor: "test",
                method: "POST",
                path: "/admin/v1/queues/q/pause",
                content_type,
                body,
            })
            .map_err(|refused| refused.status)
        };
        assert_eq!(checked(&[], b""), Ok(()));
        assert_eq!(
            checked(&[b"application/json; charset=utf-8"], b"{}"),
            Ok(())
        );
        let (json, text): (&[u8], &[u8]) = (b"application/json", b"text/plain");
        for types in [&[][..], &[text], &[json, json]] {
            assert_eq!(checked(types, b"{}"), Err(415));
        }
        assert!(no_body(b" {} ").is_ok());
        assert_eq!(no_body(br#"{"a":1}"#).unwrap_err().status, 400);
        assert_eq!(no_body(b"{").unwrap_err().status, 400);
    }

    #[test]
    fn close_bodies_carry_a_message_of_text() {
        assert_eq!(
            close_change(br#"{"message":"Sold out. Thank you!"}"#).unwrap(),
            Change::Close {
                message: "Sold out. Thank you!".into()
            }
        );
        let longest = format!(r#"{{"message":"{}"}}"#, "매".repeat(166));
        assert!(close_change(longest.as_bytes()).is_ok(), "498 bytes");
        let over = format!(
            r#"{{"message":"{}a"}}"#,
            "x".repeat(MAX_CLOSED_MESSAGE_BYTES)
        );
        for bad in [
            &br#"{}"#[..],
            br#"{"message":null}"#,
            br#"{"message":5}"#,
            br#"{"message":["a"]}"#,
            br#"{"message":""}"#,
            br#"{"message":"  "}"#,
            br#"{"message":"a\nb"}"#,
            br#"{"message":"a\u0007b"}"#,
            // Right-to-left override, zero-width space, line separator.
            br#"{"message":"a\u202Eb"}"#,
            br#"{"message":"a\u200Bb"}"#,
            br#"{"message":"a\u2028b"}"#,
            br#"{"message":"a\u2066b"}"#,
            br#"{"message":"a","extra":1}"#,
            br#"{"message":"a","message":"b"}"#,
            over.as_bytes(),
            b"",
            b"[",
        ] {
            assert!(
                close_change(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn revoke_bodies_name_a_valid_user() {
        assert_eq!(revoke_body(br#"{"userId":"u1"}"#).unwrap().as_str(), "u1");
        for bad in [
            &br#"{}"#[..],
            br#"{"userId":"a b"}"#,
            br#"{"userId":1}"#,
            br#"{"userId":"u1","userId":"u2"}"#,
        ] {
            assert!(revoke_body(bad).is_err(), "{bad:?}");
        }
    }
}
