//! `POST /api/v1/queue/active/token` with `{"userId","queueCredential","queue"?}`:
//! an active user trades its state for a short-lived ACTIVE_USER JWT.

use std::borrow::Cow;
use std::sync::Arc;

use pingora::proxy::Session;
use serde::{Deserialize, Serialize};

use super::who::Login;
use super::{credential, input, Endpoint, QueueApi};
use crate::browser::cookie;
use crate::browser::Caller;
use crate::edge::jwt::{now_s, Issued};
use crate::error::ApiError;
use crate::queues::Queue;
use crate::reply::Reply;
use crate::user::UserId;

/// The request body as sent: `userId` and `queueCredential` together, or
/// neither (a browser, whose queue cookie holds both).
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Body {
    #[serde(default)]
    user_id: Option<String>,
    #[serde(default)]
    queue_credential: Option<String>,
    #[serde(default)]
    queue: Option<String>,
}

/// A token-exchange request that passed every check short of Redis.
/// `user` and `credential` are `None` when the queue cookie holds them.
#[derive(Debug)]
pub struct Request {
    pub user: Option<UserId>,
    pub credential: Option<String>,
    pub queue: Option<String>,
}

/// Parses and checks a token-exchange body.
pub fn parse(body: &[u8]) -> Result<Request, ApiError> {
    let body: Body = input::parse_json(body)?;
    let user = match body.user_id {
        Some(user) => Some(input::user_id(user)?),
        None => None,
    };
    let credential = match body.queue_credential {
        Some(c) if c.is_empty() || c.len() > credential::MAX_CREDENTIAL_BYTES => {
            return Err(ApiError::InvalidRequest(Cow::Borrowed(
                "queueCredential must be the credential given at registration.",
            )))
        }
        other => other,
    };
    if user.is_some() != credential.is_some() {
        return Err(ApiError::InvalidRequest(Cow::Borrowed(
            "userId and queueCredential go together (or neither, with the waiting room's cookie).",
        )));
    }
    Ok(Request {
        user,
        credential,
        queue: body.queue,
    })
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct TokenBody<'a> {
    access_token: &'a str,
    token_type: &'static str,
    expires_in: u64,
}

pub async fn handle(api: &QueueApi, session: &mut Session, caller: &Caller) -> Reply {
    match token(api, session, caller).await {
        Ok(reply) | Err(reply) => reply,
    }
}

/// One answer for "not active" and "wrong credential", so that the endpoint
/// cannot be used to learn which users are active.
fn refused() -> ApiError {
    ApiError::NotActive
}

async fn token(api: &QueueApi, session: &mut Session, caller: &Caller) -> Result<Reply, Reply> {
    let request = parse(&api.read_body(session).await?)?;
    let queue = api.queue(request.queue.as_deref())?;
    let who = api.who(
        &queue,
        request.user.map(UserId::into_string),
        request.credential,
        caller,
        Login::IfSent,
    )?;
    // Whom the answer is about, in the access log, refusals included.
    let about = |reply: Reply| reply.about(&queue.name, who.user.as_str());
    if who.by_cookie {
        api.same_site(caller).map_err(|e| about(e.into()))?;
    }
    let credential = who
        .credential
        .as_deref()
        .ok_or_else(|| about(refused().into()))?;
    let issued = api
        .exchange(&queue, &who.user, credential)
        .await
        .map_err(|e| about(e.into()))?;
    let reply = Reply::json(
        200,
        &TokenBody {
            access_token: &issued.token,
            token_type: "Bearer",
            expires_in: issued.expires_in,
        },
    )
    .about(&queue.name, who.user.as_str());
    // A browser gets the token as a cookie too, for the protected routes.
    Ok(if who.by_cookie {
        reply.header("Set-Cookie", api.token_cookie(&queue.name, &issued))
    } else {
        reply
    })
}

impl QueueApi {
    /// Trades an active user's credential for a token: the one Redis call
    /// and the metric. Shared by the API and the waiting-room page.
    pub(super) async fn exchange(
        &self,
        queue: &Arc<Queue>,
        user: &UserId,
        credential: &str,
    ) -> Result<Issued, ApiError> {
        // A credential that is not one of ours for this user is refused
        // without asking Redis, with the same answer as any other refusal.
        let arrival = self
            .arrival_of(queue, user, credential)
            .map_err(|_| refused())?;
        let active_until_ms = self
            .calls
            .token(queue, user.as_str(), arrival)
            .await
            .map_err(|e| self.unavailable(Endpoint::Token, e))?
            .ok_or_else(refused)?;
        let issued = self
            .tokens()
            .issue(user.as_str(), &queue.name, active_until_ms, now_s())
            .ok_or_else(refused)?;
        self.metrics()
            .tokens_issued
            .with_label_values(&[&queue.name])
            .inc();
        Ok(issued)
    }

    /// The `Set-Cookie` value of a browser's token, kept as long as it is
    /// valid.
    pub(super) fn token_cookie(&self, queue: &str, issued: &Issued) -> String {
        self.jar().set(
            cookie::token_cookie_name(queue),
            issued.token.clone(),
            Some(std::time::Duration::from_secs(issued.expires_in)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_checked_before_redis() {
        let ok = parse(br#"{"userId":"u1","queueCredential":"c","queue":"q"}"#).unwrap();
        assert_eq!(
            (
                ok.user.as_ref().map(UserId::as_str),
                ok.credential.as_deref(),
                ok.queue.as_deref()
            ),
            (Some("u1"), Some("c"), Some("q"))
        );
        let browser = parse(br#"{"queue":"q"}"#).unwrap();
        assert!(browser.user.is_none() && browser.credential.is_none());
        let long = format!(
            r#"{{"userId":"u1","queueCredential":"{}"}}"#,
            "c".repeat(credential::MAX_CREDENTIAL_BYTES + 1)
        );
        for (body, code) in [
            (
                br#"{"userId":"u1","queueCredential":""}"#.to_vec(),
                "invalid_request",
            ),
            (long.into_bytes(), "invalid_request"),
            (
                br#"{"userId":"","queueCredential":"c"}"#.to_vec(),
                "invalid_user_id",
            ),
            (br#"{"userId":"u1"}"#.to_vec(), "invalid_request"),
            (br#"{"queueCredential":"c"}"#.to_vec(), "invalid_request"),
        ] {
            assert_eq!(parse(&body).unwrap_err().code(), code);
        }
    }
}
