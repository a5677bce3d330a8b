//! The decision for a request, made from its head alone, as a plain value:
//! answered by the queue API, forwarded, refused at the edge, or answered
//! at once. The Pingora proxy ([`super::gate`]) and the direct lane
//! ([`super::lane`]) both call [`decide`], so both decide alike.

use std::borrow::Cow;

use super::routes::RouteTable;
use super::rules;
use super::rules::Field;
use crate::browser::cookie::{self, TOKEN_COOKIE_PREFIX};
use crate::browser::origin::Sent;
use crate::browser::{page_path, redirect, PagePath};
use crate::edge::jwt::{Identity, Reject, Tokens};
use crate::error::ApiError;
use crate::path::{self, is_queue_api_path, Endpoint};

/// A request head as both HTTP paths read it: Pingora's parsed header and
/// the lane's `httparse` fields both fit.
pub struct RequestHead<'a, F> {
    pub method: &'a str,
    /// HTTP/1.1 (an HTTP/1.0 request may omit `Host`).
    pub http11: bool,
    /// The request target exactly as received.
    pub target: &'a [u8],
    /// The target's authority, for HTTP/2 (which has no `Host` field).
    pub authority: Option<&'a str>,
    pub fields: F,
}

/// What to do with a request, decided from its head alone.
#[derive(Debug)]
pub enum Decision {
    /// Answered by the queue API.
    Queue(Endpoint),
    /// Forward to the route's upstream on behalf of `identity`. `origin` is
    /// set when the target was absolute-form and must be rewritten to the
    /// path that was checked; `upgrade` when the request asks to switch
    /// protocols (on a route that allows it).
    Forward {
        route: usize,
        identity: Identity,
        origin: Option<Vec<u8>>,
        upgrade: bool,
    },
    /// Refused at the edge (401/403) on this route.
    Deny { route: usize, reject: Reject },
    /// A browser without a valid token on a `waiting-room: true` route:
    /// `303` to the queue's waiting-room page, coming back to the target.
    WaitingRoom { route: usize, location: String },
    /// The waiting-room page or one of its files.
    Page(PagePath),
    /// Answered at once (a bad path, no such route, a cross-site call), on
    /// a route if one was found; the connection goes on.
    Respond {
        route: Option<usize>,
        error: ApiError,
    },
    /// Answered at once and the connection closed: a head the request rules
    /// refuse (`rules::request::check`), or an upgrade where none is taken.
    /// Where such a request ends is not something every reader of the
    /// connection agrees on (`crate::proxy::fenced` does not fence it), so
    /// nothing sent after it is read.
    Refuse {
        route: Option<usize>,
        error: ApiError,
    },
}

/// The decision for a request. Shared by the Pingora proxy and the direct
/// lane, so both decide alike. `now` is the proxy's clock in seconds, for
/// the token's `exp` and `iat`.
pub fn decide<'a, F>(
    routes: &RouteTable,
    tokens: &Tokens,
    head: &RequestHead<'a, F>,
    now: u64,
) -> Decision
where
    F: Iterator<Item = Field<'a>> + Clone,
{
    let respond = |error| Decision::Respond { route: None, error };
    let refuse = |error| Decision::Refuse { route: None, error };
    let shape = match rules::request::check(head.http11, head.fields.clone()) {
        Ok(shape) => shape,
        Err(error) => return refuse(error),
    };
    let Some(target) = path::origin_form(head.target) else {
        return respond(ApiError::BadPath(
            "The request target must be a path or an absolute http(s) URL.",
        ));
    };
    if let Err(why) = path::classify(&target) {
        return respond(ApiError::BadPath(why.message()));
    }
    // classify() accepted only ASCII, so this cannot fail.
    let target_str = std::str::from_utf8(&target).unwrap_or("/");
    let path = target_str.split('?').next().unwrap_or(target_str);

    if is_queue_api_path(path) || path == path::KEYS_PATH {
        return match Endpoint::from_path(path) {
            Some(_) if shape.upgrade => refuse(ApiError::UpgradeNotAllowed),
            Some(endpoint) => Decision::Queue(endpoint),
            None => respond(ApiError::NotFound),
        };
    }
    if let Some(page) = page_path(path) {
        return match page {
            _ if shape.upgrade => refuse(ApiError::UpgradeNotAllowed),
            PagePath::Unknown => respond(ApiError::NotFound),
            page => Decision::Page(page),
        };
    }
    let Some((index, route)) = routes.find(path).and_then(|i| Some((i, routes.get(i)?))) else {
        return respond(ApiError::NotFound);
    };
    if shape.upgrade && !route.websocket {
        return Decision::Refuse {
            route: Some(index),
            error: ApiError::UpgradeNotAllowed,
        };
    }
    let authorization = head
        .fields
        .clone()
        .filter(|(name, _)| rules::name::Name::of(name) == rules::name::Name::Authorization)
        .map(|(_, value)| value);
    // A browser holds its token in a cookie: `Authorization` first, then
    // the route's queue's token cookies, then any other queue's (whose
    // token then gets that queue's 403, not the page).
    let from_cookie = authorization.clone().next().is_none();
    let checked = if from_cookie {
        token_cookie(tokens, head.fields.clone(), &route.queue, now)
    } else {
        tokens.check(authorization, &route.queue, now)
    };
    // A cookie goes with every request to this site, whoever made the page
    // that sends it: one that may change something must show it comes from
    // this site (as the queue API's cookie calls must).
    if from_cookie && checked.is_ok() && !matches!(head.method, "GET" | "HEAD") {
        let sent = sent(head);
        if !routes.origins().same_site(sent) {
            return Decision::Respond {
                route: Some(index),
                error: ApiError::CrossSite,
            };
        }
    }
    match checked {
        Ok(identity) => Decision::Forward {
            route: index,
            identity,
            origin: match target {
                Cow::Owned(rewritten) => Some(rewritten),
                Cow::Borrowed(b) if b.len() != head.target.len() => Some(b.to_vec()),
                Cow::Borrowed(_) => None,
            },
            upgrade: shape.upgrade,
        },
        Err(reject)
            if reject.status() == 401
                && route.waiting_room
                && matches!(head.method, "GET" | "HEAD")
                && redirect::wants_html(
                    head.fields
                        .clone()
                        .filter(|(name, _)| name.eq_ignore_ascii_case(b"accept"))
                        .map(|(_, value)| value),
                )
                && redirect::navigates(
                    head.fields
                        .clone()
                        .filter(|(name, _)| name.eq_ignore_ascii_case(b"sec-fetch-mode"))
                        .map(|(_, value)| value),
                ) =>
        {
            Decision::WaitingRoom {
                route: index,
                location: redirect::location(&route.queue, target_str),
            }
        }
        Err(reject) => Decision::Deny {
            route: index,
            reject,
        },
    }
}

/// The token a browser's cookies hold for `queue`: the first of the
/// queue's token cookies that checks out (another of the name, set for a
/// parent domain, may be stale), else any other queue's, else none.
fn token_cookie<'a, F>(
    tokens: &Tokens,
    fields: F,
    queue: &str,
    now: u64,
) -> Result<Identity, Reject>
where
    F: Iterator<Item = Field<'a>>,
{
    let own = cookie::token_cookie_name(queue);
    let mut first_error = None;
    let mut other = None;
    for (_, value) in fields.filter(|(name, _)| name.eq_ignore_ascii_case(b"cookie")) {
        for (name, token) in cookie::pairs(value) {
            if name == own {
                match check_bare(tokens, token, queue, now) {
                    Ok(identity) => return Ok(identity),
                    Err(reject) => {
                        first_error.get_or_insert(reject);
                    }
                }
            } else if other.is_none() && name.starts_with(TOKEN_COOKIE_PREFIX) {
                other = Some(token);
            }
        }
    }
    match (first_error, other) {
        (Some(reject), _) => Err(reject),
        (None, Some(token)) => check_bare(tokens, token, queue, now),
        (None, None) => Err(Reject::Missing),
    }
}

/// Checks a bare token (a cookie's) as the `Authorization` check does.
fn check_bare(tokens: &Tokens, token: &str, queue: &str, now: u64) -> Result<Identity, Reject> {
    let value = format!("Bearer {token}");
    tokens.check(std::iter::once(value.as_bytes()), queue, now)
}

/// Where a request says it comes from, for the same-site rule.
fn sent<'a, F>(head: &RequestHead<'a, F>) -> Sent<'a>
where
    F: Iterator<Item = Field<'a>> + Clone,
{
    let field = |wanted: &[u8]| {
        head.fields
            .clone()
            .find(|(name, _)| name.eq_ignore_ascii_case(wanted))
            .and_then(|(_, value)| std::str::from_utf8(value).ok())
            .map(str::trim)
    };
    Sent {
        origin: field(b"origin"),
        fetch_site: field(b"sec-fetch-site"),
        host: field(b"host").or(head.authority),
    }
}

/// The request target as the client sent it, from the raw request line.
///
/// Pingora's parsed header keeps the target as the `http` crate read it,
/// which cuts a `#fragment` off; the lane reads the raw line. Both decide
/// on the raw bytes, so both refuse what one parser would cut and another
/// forward.
pub fn request_target(raw_head: &[u8]) -> Option<&[u8]> {
    let mut parts = rules::request::request_line(raw_head)
        .trim_ascii_end()
        .split(|&b| b == b' ')
        .filter(|p| !p.is_empty());
    let _method = parts.next()?;
    parts.next()
}
