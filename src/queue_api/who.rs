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
//! With identity binding, register and rank need the login token; the token
//! exchange and the dropout, which the credential authenticates, take the
//! login's user when a login token is sent, and the request's `userId` or
//! the queue cookie otherwise. A login that ran out while its user waited
//! (signature and claims good, `exp` past) still names the user for rank,
//! the exchange and the dropout, when the credential of a registration
//! made while it was good comes with it: a wait can outlast the site's
//! login, and the place should not be lost for that. Joining needs a login
//! that has not run out.
//!
//! A request that a cookie authenticates (the queue cookie, or a login
//! token from a cookie) and that changes something (`POST`, `DELETE`) must
//! come from this site's own pages: see [`QueueApi::same_site`].

use std::borrow::Cow;

use super::{input, QueueApi};
use crate::browser::cookie::QueueCookie;
use crate::browser::Caller;
use crate::edge::login::Login as Signed;
use crate::error::ApiError;
use crate::queues::Queue;
use crate::user::UserId;

/// Whether a call needs the login token when identity binding is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Login {
    /// Register: the login names the user, and must not have run out.
    Join,
    /// Rank: the login names the user; one that ran out still does, with
    /// the registration's credential.
    Keep,
    /// The token exchange and the dropout: the credential authenticates
    /// the call, and a login token, when sent, names the user.
    IfSent,
}

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
    /// `userId` (query or body), `credential` its own credential, `login`
    /// whether identity binding needs the login token for this call.
    pub(super) fn who(
        &self,
        queue: &Queue,
        explicit: Option<String>,
        credential: Option<String>,
        caller: &Caller,
        login: Login,
    ) -> Result<Who, ApiError> {
        let signed_in = match self.login(caller) {
            Err(ApiError::LoginRequired) if login == Login::IfSent => None,
            other => other?,
        };
        if let Some(signed_in) = signed_in {
            let user = signed_in.user.clone();
            if explicit.is_some_and(|e| e != user.as_str()) {
                return Err(ApiError::IdentityMismatch);
            }
            // The queue cookie's credential serves only its own user.
            let cookie = self.visitor_cookie(queue, caller, Some(&user));
            let by_cookie =
                caller.authorization.is_none() || (credential.is_none() && cookie.is_some());
            let credential = credential.or_else(|| cookie.map(|c| c.credential));
            if signed_in.expired {
                let proven = login != Login::Join
                    && credential
                        .as_deref()
                        .is_some_and(|c| self.kept_by(queue, &signed_in, c));
                if !proven {
                    return Err(ApiError::InvalidLogin);
                }
            }
            return Ok(Who {
                credential,
                user,
                by_cookie,
            });
        }
        let cookie = self.visitor_cookie(queue, caller, None);
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

    /// The login, with identity binding (`None` without it), including one
    /// that ran out.
    pub(super) fn login(&self, caller: &Caller) -> Result<Option<Signed>, ApiError> {
        match self.logins() {
            None => Ok(None),
            Some(logins) => logins
                .login(caller.authorization.as_deref(), |name| caller.cookies(name))
                .map(Some),
        }
    }

    /// Whether a login that ran out still names its user with this
    /// credential: one of ours for the user, from a registration made
    /// while the login was good (a login that ran out long before cannot
    /// be paired with a later registration's credential).
    pub(super) fn kept_by(&self, queue: &Queue, signed_in: &Signed, credential: &str) -> bool {
        self.credentials()
            .check(&queue.name, signed_in.user.as_str(), credential)
            .is_some_and(|arrival| signed_in.covers(arrival))
    }

    /// The queue cookie a login that ran out keeps its place with, if the
    /// visitor sent one (see [`QueueApi::kept_by`]).
    pub(super) fn kept_cookie(
        &self,
        queue: &Queue,
        caller: &Caller,
        signed_in: &Signed,
    ) -> Option<QueueCookie> {
        self.first_cookie(queue, caller, Some(&signed_in.user), |arrival| {
            signed_in.covers(arrival)
        })
    }

    /// The visitor's queue cookie: the first sent whose credential is one
    /// of ours for its user (and, given `user`, names that user). A
    /// malformed or forged cookie of the same name, tossed in by another
    /// site of the domain, does not hide the real one.
    pub(super) fn visitor_cookie(
        &self,
        queue: &Queue,
        caller: &Caller,
        user: Option<&UserId>,
    ) -> Option<QueueCookie> {
        self.first_cookie(queue, caller, user, |_| true)
    }

    /// The first queue cookie sent whose credential is one of ours for its
    /// user (and, given `user`, names that user), for an arrival `wanted`.
    fn first_cookie(
        &self,
        queue: &Queue,
        caller: &Caller,
        user: Option<&UserId>,
        wanted: impl Fn(u64) -> bool,
    ) -> Option<QueueCookie> {
        caller.queue_cookies(&queue.name).into_iter().find(|c| {
            user.is_none_or(|u| *u == c.user)
                && self
                    .credentials()
                    .check(&queue.name, c.user.as_str(), &c.credential)
                    .is_some_and(&wanted)
        })
    }

    /// The same-site rule for a cookie-authenticated change: 403 unless
    /// the browser shows it came from this site (or an allowed origin).
    pub(super) fn same_site(&self, caller: &Caller) -> Result<(), ApiError> {
        if self.browsers().origins.same_site(caller.sent()) {
            Ok(())
        } else {
            Err(ApiError::CrossSite)
        }
    }
}
