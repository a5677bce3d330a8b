//! Every error waitgate answers with itself, as one type.
//!
//! Each variant knows its status, its `error` code and its one-sentence
//! `message`; [`crate::reply::Reply`] turns it into the JSON reply (and adds
//! the headers a status calls for) in one place. `docs/api.md` lists every
//! `(status, code)` pair, and a test keeps that table and [`ApiError::all`]
//! the same.

use std::borrow::Cow;

/// An error answered to a client: `{"error": code, "message": message}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiError {
    /// 400: a query parameter, header or body field is missing, repeated or
    /// of the wrong type. The message says which.
    InvalidRequest(Cow<'static, str>),
    /// 400: the body is not JSON at all.
    InvalidJson(String),
    /// 400: `userId` breaks the user-id rule.
    InvalidUserId,
    /// 415: a body not declared `application/json`.
    UnsupportedMediaType,
    /// 413: a body over the queue API's limit.
    BodyTooLarge,
    /// 431: a request head over the limit.
    HeadersTooLarge,
    /// 408: the body did not arrive in time.
    RequestTimeout,
    /// 405: the endpoint at `path` only takes `allow`.
    MethodNotAllowed {
        path: &'static str,
        allow: &'static str,
    },
    /// 404: no queue has the name given.
    UnknownQueue,
    /// 404: the user is not in the queue. `hint` ends the message.
    UserNotQueued { hint: &'static str },
    /// 403: the queue credential does not match the registration.
    CredentialMismatch,
    /// 403: not active, or a wrong credential (one answer for both).
    NotActive,
    /// 503: Redis did not answer.
    RedisUnavailable,
    /// 503: Redis did not confirm an admin change in time; it may still
    /// be applied (a write sent is not taken back).
    AdminUnconfirmed,
    /// 503: a reply could not be encoded (never expected).
    InternalError,
    /// 503: the connection cap is reached.
    TooManyConnections,
    /// 400: the path breaks a path-safety rule.
    BadPath(&'static str),
    /// A 4xx for a request that is not sound HTTP (framing, `Host`, the
    /// target); `status` is 400 unless the HTTP layer chose another 4xx.
    BadRequest {
        status: u16,
        message: Cow<'static, str>,
    },
    /// 400: `Upgrade` on a route that does not allow it.
    UpgradeNotAllowed,
    /// 404: no route serves the path.
    NotFound,
    /// 401: no token, or one that proves nothing.
    InvalidToken(&'static str),
    /// 403: a valid token that does not grant this route.
    InsufficientScope(&'static str),
    /// 502: the upstream refused, reset, closed early or answered with
    /// something the edge rules refuse.
    UpstreamUnavailable,
    /// 504: the upstream did not connect or answer in time.
    UpstreamTimeout,
    /// 403: a scheduled open has not opened registration yet; the reply
    /// carries `opensAt` (RFC 3339).
    QueueNotOpen { opens_at: String },
    /// 410: an operator closed the queue; the message is the operator's.
    QueueClosed(std::sync::Arc<str>),
    /// 401: the admin API's bearer token is missing or wrong.
    AdminUnauthorized,
    /// 409: the change conflicts with the queue's state (the message says
    /// how).
    Conflict(&'static str),
    /// 403: a cookie-authenticated `POST`/`DELETE` that does not come from
    /// this site's own pages (or an allowed origin).
    CrossSite,
    /// 403: a browser's prefetch or prerender of the waiting-room page,
    /// which would register whoever it guessed might come.
    Prefetch,
    /// 403: a CORS preflight from an origin not in `cors.allowed-origins`.
    OriginNotAllowed,
    /// 401: identity binding is on and the request carries no login token.
    LoginRequired,
    /// 401: the login token proves nothing (signature, issuer, audience,
    /// expiry).
    InvalidLogin,
    /// 403: identity binding is on and the request names another user.
    IdentityMismatch,
    /// 429: the client is over a per-client limit (`limits.*`); it may ask
    /// again after this many seconds.
    RateLimited { retry_after_s: u64 },
    /// 403: the queue asks a proof of work (`challenge`) and the register
    /// carries none.
    ProofRequired,
    /// 403: the proof of work is malformed, wrong, expired, for another
    /// queue, or already used.
    ProofInvalid,
    /// 403: the queue is invite-only and the register carries no invite.
    InviteRequired,
    /// 403: the invite is not the site's, expired, for another queue or
    /// user, or spent already.
    InviteInvalid,
}

impl ApiError {
    pub fn status(&self) -> u16 {
        match self {
            ApiError::InvalidRequest(_)
            | ApiError::InvalidJson(_)
            | ApiError::InvalidUserId
            | ApiError::BadPath(_)
            | ApiError::UpgradeNotAllowed => 400,
            ApiError::BadRequest { status, .. } => *status,
            ApiError::InvalidToken(_) => 401,
            ApiError::CredentialMismatch
            | ApiError::NotActive
            | ApiError::InsufficientScope(_)
            | ApiError::QueueNotOpen { .. }
            | ApiError::CrossSite
            | ApiError::Prefetch
            | ApiError::OriginNotAllowed
            | ApiError::IdentityMismatch
            | ApiError::ProofRequired
            | ApiError::ProofInvalid
            | ApiError::InviteRequired
            | ApiError::InviteInvalid => 403,
            ApiError::AdminUnauthorized | ApiError::LoginRequired | ApiError::InvalidLogin => 401,
            ApiError::Conflict(_) => 409,
            ApiError::QueueClosed(_) => 410,
            ApiError::UnknownQueue | ApiError::UserNotQueued { .. } | ApiError::NotFound => 404,
            ApiError::MethodNotAllowed { .. } => 405,
            ApiError::RequestTimeout => 408,
            ApiError::RateLimited { .. } => 429,
            ApiError::BodyTooLarge => 413,
            ApiError::HeadersTooLarge => 431,
            ApiError::UnsupportedMediaType => 415,
            ApiError::UpstreamUnavailable => 502,
            ApiError::RedisUnavailable
            | ApiError::AdminUnconfirmed
            | ApiError::InternalError
            | ApiError::TooManyConnections => 503,
            ApiError::UpstreamTimeout => 504,
        }
    }

    /// The `error` field: a stable snake_case code clients can match on.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::InvalidRequest(_) => "invalid_request",
            ApiError::InvalidJson(_) => "invalid_json",
            ApiError::InvalidUserId => "invalid_user_id",
            ApiError::UnsupportedMediaType => "unsupported_media_type",
            ApiError::BodyTooLarge => "body_too_large",
            ApiError::HeadersTooLarge => "headers_too_large",
            ApiError::RequestTimeout => "request_timeout",
            ApiError::MethodNotAllowed { .. } => "method_not_allowed",
            ApiError::UnknownQueue => "unknown_queue",
            ApiError::UserNotQueued { .. } => "user_not_queued",
            ApiError::CredentialMismatch => "credential_mismatch",
            ApiError::NotActive => "not_active",
            ApiError::RedisUnavailable | ApiError::AdminUnconfirmed => "redis_unavailable",
            ApiError::InternalError => "internal_error",
            ApiError::TooManyConnections => "too_many_connections",
            ApiError::BadPath(_) => "bad_path",
            ApiError::BadRequest { .. } => "bad_request",
            ApiError::UpgradeNotAllowed => "upgrade_not_allowed",
            ApiError::NotFound => "not_found",
            ApiError::InvalidToken(_) => "invalid_token",
            ApiError::InsufficientScope(_) => "insufficient_scope",
            ApiError::UpstreamUnavailable => "upstream_unavailable",
            ApiError::UpstreamTimeout => "upstream_timeout",
            ApiError::QueueNotOpen { .. } => "queue_not_open",
            ApiError::QueueClosed(_) => "queue_closed",
            ApiError::AdminUnauthorized => "unauthorized",
            ApiError::Conflict(_) => "conflict",
            ApiError::CrossSite => "cross_site_request",
            ApiError::Prefetch => "prefetch_declined",
            ApiError::OriginNotAllowed => "origin_not_allowed",
            ApiError::LoginRequired => "login_required",
            ApiError::InvalidLogin => "invalid_login",
            ApiError::IdentityMismatch => "identity_mismatch",
            ApiError::RateLimited { .. } => "rate_limited",
            ApiError::ProofRequired => "proof_required",
            ApiError::ProofInvalid => "proof_invalid",
            ApiError::InviteRequired => "invite_required",
            ApiError::InviteInvalid => "invite_invalid",
        }
    }

    /// The `message` field: one sentence for a person.
    pub fn message(&self) -> Cow<'static, str> {
        let text: &'static str = match self {
            ApiError::InvalidRequest(message) | ApiError::BadRequest { message, .. } => {
                return message.clone()
            }
            ApiError::InvalidJson(detail) => return Cow::Owned(detail.clone()),
            ApiError::MethodNotAllowed { path, allow } => {
                return Cow::Owned(format!("{path} only accepts {allow}."))
            }
            ApiError::UserNotQueued { hint } => {
                return if hint.is_empty() {
                    Cow::Borrowed("The user is not in this queue.")
                } else {
                    Cow::Owned(format!("The user is not in this queue; {hint}."))
                }
            }
            ApiError::QueueNotOpen { opens_at } => {
                return Cow::Owned(format!("Registration opens at {opens_at}."))
            }
            ApiError::RateLimited { retry_after_s } => {
                return Cow::Owned(format!(
                    "Too many requests from this address; try again in {retry_after_s} s."
                ))
            }
            // (Empty only when the queue reopened as its answer was made.)
            ApiError::QueueClosed(message) if message.is_empty() => "The queue is closed.",
            ApiError::QueueClosed(message) => return Cow::Owned(message.to_string()),
            ApiError::BadPath(why)
            | ApiError::Conflict(why)
            | ApiError::InvalidToken(why)
            | ApiError::InsufficientScope(why) => why,
            ApiError::InvalidUserId => {
                "userId must be 1 to 128 characters of A-Z a-z 0-9 . _ : @ -."
            }
            ApiError::UnsupportedMediaType => {
                "The body must be sent as Content-Type: application/json."
            }
            ApiError::BodyTooLarge => "The request body is larger than 4096 bytes.",
            ApiError::HeadersTooLarge => "The request head is larger than 64 KiB.",
            ApiError::RequestTimeout => "The request body did not arrive in time.",
            ApiError::UnknownQueue => "No queue has that name.",
            ApiError::CredentialMismatch => "The queue credential does not match.",
            ApiError::NotActive => {
                "The user is not active, or the queue credential does not match."
            }
            ApiError::RedisUnavailable => "The queue store is unavailable; retry shortly.",
            ApiError::AdminUnconfirmed => {
                "The queue store did not confirm the change in time: it may still be made. Read the queue's state, or send the change again (every admin change is safe to repeat)."
            }
            ApiError::InternalError => "The reply could not be encoded.",
            ApiError::TooManyConnections => "The server has too many open connections.",
            ApiError::UpgradeNotAllowed => "This route does not switch protocols.",
            ApiError::NotFound => "No route serves this path.",
            ApiError::UpstreamUnavailable => "The upstream failed.",
            ApiError::UpstreamTimeout => "The upstream did not answer in time.",
            ApiError::AdminUnauthorized => "A valid admin bearer token is required.",
            ApiError::CrossSite => {
                "A request that a cookie authenticates must come from this site's own pages."
            }
            ApiError::Prefetch => {
                "The waiting room is not prefetched or prerendered: loading it joins the queue."
            }
            ApiError::OriginNotAllowed => "This origin may not call the queue API.",
            ApiError::LoginRequired => {
                "Sign in first: this queue takes the user from the site's login token."
            }
            ApiError::InvalidLogin => "The login token is not valid.",
            ApiError::IdentityMismatch => "The userId must be the signed-in user's.",
            ApiError::ProofRequired => {
                "This queue asks a proof of work: get a challenge from /api/v1/queue/challenge and send its answer in X-Waitgate-Proof."
            }
            ApiError::ProofInvalid => {
                "The proof of work is wrong, expired or already used: get a new challenge."
            }
            ApiError::InviteRequired => {
                "This queue is by invitation: open the link of your invitation, or send its token in X-Waitgate-Invite."
            }
            ApiError::InviteInvalid => {
                "The invitation is not valid, has expired, is for someone else, or was used already."
            }
        };
        Cow::Borrowed(text)
    }

    /// One error of every kind, for the tests that keep the docs and the
    /// type in step. The match below does not compile when a variant is
    /// added without an example here.
    pub fn all() -> Vec<ApiError> {
        let all = vec![
            ApiError::InvalidRequest(Cow::Borrowed("")),
            ApiError::InvalidJson(String::new()),
            ApiError::InvalidUserId,
            ApiError::UnsupportedMediaType,
            ApiError::BodyTooLarge,
            ApiError::HeadersTooLarge,
            ApiError::RequestTimeout,
            ApiError::MethodNotAllowed {
                path: "",
                allow: "",
            },
            ApiError::UnknownQueue,
            ApiError::UserNotQueued { hint: "" },
            ApiError::CredentialMismatch,
            ApiError::NotActive,
            ApiError::RedisUnavailable,
            ApiError::AdminUnconfirmed,
            ApiError::InternalError,
            ApiError::TooManyConnections,
            ApiError::BadPath(""),
            ApiError::BadRequest {
                status: 400,
                message: Cow::Borrowed(""),
            },
            ApiError::UpgradeNotAllowed,
            ApiError::NotFound,
            ApiError::InvalidToken(""),
            ApiError::InsufficientScope(""),
            ApiError::UpstreamUnavailable,
            ApiError::UpstreamTimeout,
            ApiError::QueueNotOpen {
                opens_at: String::new(),
            },
            ApiError::QueueClosed("".into()),
            ApiError::AdminUnauthorized,
            ApiError::Conflict(""),
            ApiError::CrossSite,
            ApiError::Prefetch,
            ApiError::OriginNotAllowed,
            ApiError::LoginRequired,
            ApiError::InvalidLogin,
            ApiError::IdentityMismatch,
            ApiError::RateLimited { retry_after_s: 1 },
            ApiError::ProofRequired,
            ApiError::ProofInvalid,
            ApiError::InviteRequired,
            ApiError::InviteInvalid,
        ];
        for error in &all {
            match error {
                ApiError::InvalidRequest(_)
                | ApiError::InvalidJson(_)
                | ApiError::InvalidUserId
                | ApiError::UnsupportedMediaType
                | ApiError::BodyTooLarge
                | ApiError::HeadersTooLarge
                | ApiError::RequestTimeout
                | ApiError::MethodNotAllowed { .. }
                | ApiError::UnknownQueue
                | ApiError::UserNotQueued { .. }
                | ApiError::CredentialMismatch
                | ApiError::NotActive
                | ApiError::RedisUnavailable
                | ApiError::AdminUnconfirmed
                | ApiError::InternalError
                | ApiError::TooManyConnections
                | ApiError::BadPath(_)
                | ApiError::BadRequest { .. }
                | ApiError::UpgradeNotAllowed
                | ApiError::NotFound
                | ApiError::InvalidToken(_)
                | ApiError::InsufficientScope(_)
                | ApiError::UpstreamUnavailable
                | ApiError::UpstreamTimeout
                | ApiError::QueueNotOpen { .. }
                | ApiError::QueueClosed(_)
                | ApiError::AdminUnauthorized
                | ApiError::Conflict(_)
                | ApiError::CrossSite
                | ApiError::Prefetch
                | ApiError::OriginNotAllowed
                | ApiError::LoginRequired
                | ApiError::InvalidLogin
                | ApiError::IdentityMismatch
                | ApiError::RateLimited { .. }
                | ApiError::ProofRequired
                | ApiError::ProofInvalid
                | ApiError::InviteRequired
                | ApiError::InviteInvalid => {}
            }
        }
        all
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.status(), self.code(), self.message())
    }
}

impl std::error::Error for ApiError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_its_own_code() {
        let all = ApiError::all();
        let mut codes: Vec<_> = all.iter().map(ApiError::code).collect();
        codes.sort();
        codes.dedup();
        // But one: an unconfirmed admin change is a Redis outage to the
        // client, with a message of its own.
        assert_eq!(codes.len(), all.len() - 1);
        assert_eq!(
            ApiError::AdminUnconfirmed.code(),
            ApiError::RedisUnavailable.code()
        );
        for error in &all {
            assert!((400..600).contains(&error.status()), "{error:?}");
            assert!(error
                .code()
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b == b'_'));
        }
    }

    #[test]
    fn messages_are_sentences() {
        let user = ApiError::UserNotQueued {
            hint: "register first",
        };
        assert_eq!(
            user.message(),
            "The user is not in this queue; register first."
        );
        let method = ApiError::MethodNotAllowed {
            path: "/api/v1/queue/rank",
            allow: "GET",
        };
        assert_eq!(method.message(), "/api/v1/queue/rank only accepts GET.");
        assert_eq!(ApiError::NotActive.status(), 403);
        assert_eq!(
            ApiError::UpstreamTimeout.to_string(),
            "504 upstream_timeout: The upstream did not answer in time."
        );
    }
}
