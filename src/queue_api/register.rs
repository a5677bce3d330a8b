//! `POST /api/v1/queue/register` with `{"userId"?,"queue"?}`.
//!
//! `userId` is the client's, or the login's with identity binding. A
//! browser sends none: waitgate mints an unguessable one (or reuses the one
//! in its queue cookie) and keeps it, with the credential, in that cookie.

use std::borrow::Cow;
use std::sync::Arc;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use pingora::proxy::Session;
use rand::TryRngCore;
use serde::Deserialize;

use super::body::Signed;
use super::who::Login;
use super::{body, input, Endpoint, QueueApi};
use crate::browser::cookie::{self, QueueCookie};
use crate::browser::Caller;
use crate::entry::challenge::{Refused, Spent};
use crate::entry::invite::InviteRefused;
use crate::error::ApiError;
use crate::metrics::{
    REGISTERED_ACTIVE, REGISTERED_AGAIN, REGISTERED_CLOSED, REGISTERED_NEW, REGISTERED_NOT_OPEN,
};
use crate::queues::Queue;
use crate::reply::Reply;
use crate::store::Registration;
use crate::user::UserId;

/// The request body as sent.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Body {
    #[serde(default)]
    user_id: Option<String>,
    #[serde(default)]
    queue: Option<String>,
}

/// A register request that passed every check short of Redis. `user` is
/// `None` when the client left it to waitgate.
#[derive(Debug)]
pub struct Request {
    pub user: Option<UserId>,
    pub queue: Option<String>,
}

/// Parses and checks a register body.
pub fn parse(body: &[u8]) -> Result<Request, ApiError> {
    let body: Body = input::parse_json(body)?;
    Ok(Request {
        user: body.user_id.map(input::user_id).transpose()?,
        queue: body.queue,
    })
}

/// Who registers, and whether the answer sets the queue cookie.
struct Registrant {
    user: UserId,
    /// A browser: the place is kept in the queue cookie.
    browser: bool,
    /// A login proves the user is who it says (identity binding): an
    /// admitted user is given its credential again.
    proven: bool,
    /// The login or the queue cookie names the user (not a body's
    /// `userId`, which anyone may send): a registration made again is
    /// answered with its receipt too.
    owned: bool,
}

pub async fn handle(api: &QueueApi, session: &mut Session, caller: &Caller) -> Reply {
    match register(api, session, caller).await {
        Ok(reply) | Err(reply) => reply,
    }
}

async fn register(api: &QueueApi, session: &mut Session, caller: &Caller) -> Result<Reply, Reply> {
    let body = api.read_body(session).await?;
    registered(api, &body, caller).await
}

/// The answer to a register request whose body has been read (by the
/// proxy, or by the direct lane).
pub(super) async fn registered(
    api: &QueueApi,
    body: &[u8],
    caller: &Caller,
) -> Result<Reply, Reply> {
    let request = parse(body)?;
    let queue = api.queue(request.queue.as_deref())?;
    let registrant = registrant(api, &queue, request.user, caller)?;
    let invite = api.invite(&queue, registrant.user.as_str(), caller.invite.as_deref())?;
    let proof = api.proof(&queue, caller)?;
    let spends: Vec<Spent> = invite.into_iter().chain(proof).collect();
    let (registration, credential, reply) = api
        .register_user(&queue, &registrant.user, (&registrant).into(), &spends)
        .await?;
    let reply = reply.about(&queue.name, registrant.user.as_str());
    Ok(match (credential, registrant.browser) {
        (Some(credential), true) => reply.header(
            "Set-Cookie",
            api.set_queue_cookie(
                &queue,
                &credential,
                start_rank(&registration),
                &registrant.user,
            ),
        ),
        _ => reply,
    })
}

/// Who a register request is for: the login's user with identity binding;
/// else the body's `userId`; else, for a browser of this site (one that
/// says where it comes from, as browsers do), the queue cookie's user or a
/// new one. A request that sends no `userId` gets 400, or, with a queue
/// cookie, the same-site rule's 403 unless it shows it came from the site.
fn registrant(
    api: &QueueApi,
    queue: &Queue,
    given: Option<UserId>,
    caller: &Caller,
) -> Result<Registrant, ApiError> {
    let is_browser = caller.is_browser();
    if api.logins().is_some() {
        let who = api.who(
            queue,
            given.map(UserId::into_string),
            None,
            caller,
            Login::Join,
        )?;
        if who.by_cookie {
            api.same_site(caller)?;
        }
        return Ok(Registrant {
            user: who.user,
            browser: is_browser,
            proven: true,
            owned: true,
        });
    }
    if let Some(user) = given {
        return Ok(Registrant {
            user,
            browser: false,
            proven: false,
            owned: false,
        });
    }
    let cookie = api.visitor_cookie(queue, caller, None);
    if !is_browser && cookie.is_none() {
        return Err(ApiError::InvalidRequest(Cow::Borrowed(
            "The body field userId is required.",
        )));
    }
    // It sets a cookie, or the queue cookie names the user: only this
    // site's pages may ask.
    api.same_site(caller)?;
    let user = match cookie {
        Some(c) => c.user,
        None => mint(),
    };
    Ok(Registrant {
        user,
        browser: true,
        proven: false,
        owned: true,
    })
}

/// The place a registration starts at, for the page's progress bar.
pub(super) fn start_rank(registration: &Registration) -> u64 {
    match registration {
        Registration::New { place, .. } | Registration::AlreadyWaiting { place, .. } => place.rank,
        _ => 0,
    }
}

/// A new user id for a browser: 128 random bits from the OS, base64url (22
/// characters, all within the user-id rule).
pub fn mint() -> UserId {
    let mut bytes = [0u8; 16];
    rand::rngs::OsRng
        .try_fill_bytes(&mut bytes)
        .expect("the OS random source works");
    UserId::parse(URL_SAFE_NO_PAD.encode(bytes)).expect("base64url is within the user-id rule")
}

impl QueueApi {
    /// Registers `user` in `queue`: the one Redis call, the metric, and the
    /// reply, with the store's answer and the credential it issued (to a
    /// new registration only, or again to an admitted user a login proves:
    /// `proven`). `spends` are the user's checked invite and proof of
    /// work, where the queue asks them; if Redis found one spent already,
    /// the register is refused for it. Shared by the API and the
    /// waiting-room page.
    pub(super) async fn register_user(
        &self,
        queue: &Arc<Queue>,
        user: &UserId,
        by: By,
        spends: &[Spent],
    ) -> Result<(Registration, Option<String>, Reply), ApiError> {
        let By { proven, owned } = by;
        let registration = self
            .register_call(queue, user.as_str(), spends)
            .await
            .map_err(|e| self.unavailable(Endpoint::Register, e))?;
        match registration {
            Registration::ProofSpent => {
                self.proof_refused(queue, Refused::Reused.reason());
                return Err(ApiError::ProofInvalid);
            }
            Registration::InviteSpent => {
                self.invite_refused(queue, InviteRefused::Spent.reason());
                return Err(ApiError::InviteInvalid);
            }
            _ => {}
        }
        let receipt = match signed_arrival(&registration).filter(|_| owned || is_new(&registration))
        {
            Some((arrival, committed_at_ms)) => Some(
                self.receipt(queue, user.as_str(), arrival, committed_at_ms)
                    .await,
            ),
            None => None,
        };
        let mut issued = None;
        let (result, reply) = outcome(
            queue,
            user,
            registration.clone(),
            receipt.as_deref(),
            proven,
            |arrival, number| {
                let credential =
                    self.credentials()
                        .issue(&queue.name, user.as_str(), arrival, number);
                issued = Some(credential.clone());
                credential
            },
        );
        self.metrics()
            .registrations
            .with_label_values(&[&queue.name, result])
            .inc();
        Ok((registration, issued, reply))
    }

    /// The `Set-Cookie` value that keeps a browser's place.
    pub(super) fn set_queue_cookie(
        &self,
        queue: &Queue,
        credential: &str,
        start_rank: u64,
        user: &UserId,
    ) -> String {
        let value = QueueCookie {
            credential: credential.to_string(),
            start_rank,
            user: user.clone(),
        };
        self.jar()
            .set(cookie::queue_cookie_name(&queue.name), value.value(), None)
    }
}

/// How a register names its user: whether a login proves it (`proven`),
/// and whether the login or the queue cookie names it (`owned`, rather
/// than a body's `userId`).
#[derive(Debug, Clone, Copy)]
pub(super) struct By {
    pub proven: bool,
    pub owned: bool,
}

impl From<&Registrant> for By {
    fn from(r: &Registrant) -> By {
        By {
            proven: r.proven,
            owned: r.owned,
        }
    }
}

/// Whether this registration made the user's place (its answer is the
/// only one a body's `userId` gets a receipt with: anyone may send one).
fn is_new(registration: &Registration) -> bool {
    matches!(
        registration,
        Registration::New { .. } | Registration::Prequeued { new: true, .. }
    )
}

/// The arrival a registration's receipt states, and the draw it joined
/// (ms it was committed at; 0: none); `None` where there is no arrival to
/// state.
fn signed_arrival(registration: &Registration) -> Option<(u64, u64)> {
    match *registration {
        Registration::New { arrival, .. } | Registration::AlreadyWaiting { arrival, .. } => {
            Some((arrival, 0))
        }
        Registration::Active { arrival, .. } if arrival > 0 => Some((arrival, 0)),
        Registration::Prequeued {
            arrival,
            committed_at_ms,
            ..
        } if arrival > 0 => Some((arrival, committed_at_ms)),
        _ => None,
    }
}

/// What the store's answer means: the metric label and the reply. A new
/// registration gets a credential, made by `credential` from the arrival
/// that Redis just gave this user; so does an admitted user whom a login
/// proves (`proven`), from the arrival it was admitted from. Each answer
/// with an arrival carries its receipt.
fn outcome(
    queue: &Queue,
    user: &UserId,
    registration: Registration,
    receipt: Option<&str>,
    proven: bool,
    credential: impl FnOnce(u64, Option<u64>) -> String,
) -> (&'static str, Reply) {
    match registration {
        Registration::New {
            place,
            arrival,
            number,
        } => {
            let credential = credential(arrival, number);
            (
                REGISTERED_NEW,
                body::waiting(
                    queue,
                    user.as_str(),
                    place,
                    Signed {
                        queue_credential: Some(&credential),
                        receipt,
                    },
                ),
            )
        }
        Registration::AlreadyWaiting { place, .. } => (
            REGISTERED_AGAIN,
            body::waiting(
                queue,
                user.as_str(),
                place,
                Signed {
                    queue_credential: None,
                    receipt,
                },
            ),
        ),
        Registration::Active {
            expires_at_ms,
            arrival,
        } => {
            let again = (proven && arrival > 0).then(|| credential(arrival, None));
            (
                REGISTERED_ACTIVE,
                body::registered_active(
                    queue,
                    user.as_str(),
                    expires_at_ms,
                    Signed {
                        queue_credential: again.as_deref(),
                        receipt,
                    },
                ),
            )
        }
        Registration::Prequeued {
            opens_in_ms,
            arrival,
            new,
            poll_after_ms,
            ..
        } => {
            let credential = new.then(|| credential(arrival, None));
            (
                if new {
                    REGISTERED_NEW
                } else {
                    REGISTERED_AGAIN
                },
                body::prequeued(
                    queue,
                    user.as_str(),
                    opens_in_ms,
                    poll_after_ms,
                    Signed {
                        queue_credential: credential.as_deref(),
                        receipt,
                    },
                ),
            )
        }
        Registration::NotOpen { opens_at_ms } => (
            REGISTERED_NOT_OPEN,
            Reply::from(ApiError::QueueNotOpen {
                opens_at: crate::time::rfc3339(opens_at_ms),
            }),
        ),
        Registration::Closed(closed) => (
            REGISTERED_CLOSED,
            Reply::from(ApiError::QueueClosed(closed.message)),
        ),
        // (Refused by `register_user` before they come here.)
        Registration::ProofSpent => (REGISTERED_CLOSED, Reply::from(ApiError::ProofInvalid)),
        Registration::InviteSpent => (REGISTERED_CLOSED, Reply::from(ApiError::InviteInvalid)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Place;

    #[test]
    fn minted_users_are_unguessable_and_follow_the_rule() {
        let a = mint();
        assert_eq!(a.as_str().len(), 22);
        assert_ne!(a, mint());
    }

    #[test]
    fn bodies_are_checked_before_redis() {
        let ok = parse(br#"{"userId":"u1","queue":"baseball"}"#).unwrap();
        assert_eq!(ok.user.as_ref().map(UserId::as_str), Some("u1"));
        assert_eq!(ok.queue.as_deref(), Some("baseball"));
        assert_eq!(parse(br#"{"queue":"baseball"}"#).unwrap().user, None);
        for (body, code) in [
            (&br#"{"userId":"u1","extra":1}"#[..], "invalid_request"),
            (br#"{"userId":"a b"}"#, "invalid_user_id"),
            (br#"{"userId":5}"#, "invalid_request"),
            (br#"{"userId":"#, "invalid_json"),
        ] {
            assert_eq!(parse(body).unwrap_err().code(), code, "{body:?}");
        }
    }

    #[test]
    fn only_a_new_registration_gets_a_credential() {
        let queue = super::super::tests::queue();
        let user = UserId::parse("u1").unwrap();
        // The answer and its label, and the answer's JSON.
        let run = |registration, proven, credential: fn(u64, Option<u64>) -> String| {
            let (label, reply) = outcome(&queue, &user, registration, None, proven, credential);
            let v: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
            (label, reply.status, v)
        };
        let place = Place {
            rank: 0,
            wait_ms: Some(0),
            poll_after_ms: 1_000,
        };
        let made = |arrival, _| format!("credential-{arrival}");
        let (label, _, v) = run(
            Registration::New {
                place,
                arrival: 7,
                number: None,
            },
            false,
            made,
        );
        assert_eq!(label, REGISTERED_NEW);
        assert_eq!(v["queueCredential"], "credential-7");
        let (label, _, v) = run(
            Registration::AlreadyWaiting {
                place,
                arrival: 7,
                number: None,
            },
            false,
            |_, _| unreachable!("no credential for a second registration"),
        );
        assert_eq!(label, REGISTERED_AGAIN);
        assert!(v.get("queueCredential").is_none());
        let active = || Registration::Active {
            expires_at_ms: 1_000,
            arrival: 7,
        };
        let (label, _, v) = run(active(), false, |_, _| {
            unreachable!("anyone may send a userId")
        });
        assert_eq!(label, REGISTERED_ACTIVE);
        assert_eq!(v["status"], "ACTIVE");
        assert_eq!(v["activeUntil"], "1970-01-01T00:00:01.000Z");
        assert!(v.get("queueCredential").is_none());
        assert_eq!(v["message"], body::LOST_CREDENTIAL);
        // A login proves the user: its credential is made again.
        let (_, _, v) = run(active(), true, made);
        assert_eq!(v["queueCredential"], "credential-7");
        assert!(v.get("message").is_none());
        let (label, status, v) = run(
            Registration::Closed(crate::store::Closed {
                message: "Sold out.".into(),
            }),
            false,
            |_, _| unreachable!("nobody joins a closed queue"),
        );
        assert_eq!((label, status), (REGISTERED_CLOSED, 410));
        assert_eq!(v["error"], "queue_closed");
        assert_eq!(v["message"], "Sold out.");
    }
}
