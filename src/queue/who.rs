//! Who a queue API request speaks for, in one place for every endpoint.
//!
//! Three ways to say it, checked in this order:
//! - identity binding (`identity:`): the site's login token names the user,
//!   and a `userId` in the request may only repeat it;
//! - the request's own `userId` (an API client, or a page of the site's
//!   that keeps the id itself), with the credential in `X-Queue-Credential`
//!   or the body;
//! - the queue cookie `waitgate-queue-<queue>` that waitgate set for a
//!   browser: user and credential both.
//!
//! A request that a cookie authenticates (the queue cookie, or a login
//! token from a cookie) and that changes something (`POST`, `DELETE`) must
//! come from this site's own pages: see [`QueueApi::same_site`].

use std::borrow::Cow;

use super::{input, QueueApi};
use crate::browser::Caller;
use crate::error::ApiError;
use crate::queues::Queue;
use crate::user::UserId;

/// The user a request speaks for, and how it said so.
#[derive(Debug, Clone)]
pub struct Who {
    pub user: UserId,
    /// The queueCredential presented, if any.
    pub credential: Option<String>,
    /// The user or credential came from a cookie.
    pub by_cookie: bool,
}

impl QueueApi {
    /// The user a request speaks for: `explicit` is the request's own
    /// `userId` (query or body), `credential` its own credential.
    pub(super) fn who(
        &self,
        queue: &Queue,
        explicit: Option<String>,
        credential: Option<String>,
        caller: &Caller,
    ) -> Result<Who, ApiError> {
        let cookie = caller.queue_cookie(&queue.name);
        if let Some(logins) = self.logins() {
            let from_header = caller.authorization.is_some();
            let user = logins.user(caller.authorization.as_deref(), |name| {
                caller.cookie(name).map(str::to_string)
            })?;
            if explicit.is_some_and(|e| e != user.as_str()) {
                return Err(ApiError::IdentityMismatch);
            }
            // The queue cookie's credential serves only its own user.
            let cookie = cookie.filter(|c| c.user == user);
            let by_cookie = !from_header || (credential.is_none() && cookie.is_some());
            return Ok(Who {
                credential: credential.or_else(|| cookie.map(|c| c.credential)),
                user,
                by_cookie,
            });
        }
        match explicit {
            Some(text) => Ok(Who {
                user: input::user_id(text)?,
                credential,
                by_cookie: false,
            }),
            None => match cookie {
                Some(c) => Ok(Who {
                    user: c.user,
                    credential: Some(c.credential),
                    by_cookie: true,
                }),
                None => Err(ApiError::InvalidRequest(Cow::Borrowed(
                    "userId is required (or the waiting room's cookie).",
                ))),
            },
        }
    }

    /// The same-site rule for a cookie-authenticated change: 403 unless
    /// the browser shows it came from this site (or an allowed origin).
    pub(super) fn same_site(&self, caller: &Caller) -> Result<(), ApiError> {
        if self.origins().same_site(caller.sent()) {
            Ok(())
        } else {
            Err(ApiError::CrossSite)
        }
    }
}
