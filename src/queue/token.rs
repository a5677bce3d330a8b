//! `POST /api/v1/queue/active/token` with `{"userId","queueCredential","queue"?}`:
//! an active user trades its state for a short-lived ACTIVE_USER JWT.

use std::borrow::Cow;

use pingora::proxy::Session;
use serde::{Deserialize, Serialize};

use super::{credential, input, Endpoint, QueueApi};
use crate::edge::jwt::now_s;
use crate::error::ApiError;
use crate::reply::Reply;
use crate::user::UserId;

/// The request body as sent.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Body {
    user_id: String,
    queue_credential: String,
    #[serde(default)]
    queue: Option<String>,
}

/// A token-exchange request that passed every check short of Redis.
#[derive(Debug)]
pub struct Request {
    pub user: UserId,
    pub credential: String,
    pub queue: Option<String>,
}

/// Parses and checks a token-exchange body.
pub fn parse(body: &[u8]) -> Result<Request, ApiError> {
    let body: Body = input::parse_json(body)?;
    let user = input::user_id(body.user_id)?;
    if body.queue_credential.is_empty() || body.queue_credential.len() > credential::MAX_LEN {
        return Err(ApiError::InvalidRequest(Cow::Borrowed(
            "queueCredential must be the credential given at registration.",
        )));
    }
    Ok(Request {
        user,
        credential: body.queue_credential,
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

pub async fn handle(api: &QueueApi, session: &mut Session) -> Reply {
    match token(api, session).await {
        Ok(reply) | Err(reply) => reply,
    }
}

/// One answer for "not active" and "wrong credential", so that the endpoint
/// cannot be used to learn which users are active.
fn refused() -> ApiError {
    ApiError::NotActive
}

async fn token(api: &QueueApi, session: &mut Session) -> Result<Reply, Reply> {
    let request = parse(&api.read_body(session).await?)?;
    let queue = api.queue(request.queue.as_deref())?;

    // A credential that is not one of ours for this user is refused without
    // asking Redis, with the same answer as any other refusal.
    let arrival = api
        .credentials()
        .check(&queue.name, request.user.as_str(), &request.credential)
        .ok_or_else(refused)?;
    let active_until_ms = api
        .store()
        .token(&queue.keys, request.user.as_str(), arrival)
        .await
        .map_err(|e| api.unavailable(Endpoint::Token, e))?
        .ok_or_else(refused)?;
    let issued = api
        .tokens()
        .issue(request.user.as_str(), &queue.name, active_until_ms, now_s())
        .ok_or_else(refused)?;
    api.metrics()
        .tokens_issued
        .with_label_values(&[&queue.name])
        .inc();
    Ok(Reply::json(
        200,
        &TokenBody {
            access_token: &issued.token,
            token_type: "Bearer",
            expires_in: issued.expires_in,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_checked_before_redis() {
        let ok = parse(br#"{"userId":"u1","queueCredential":"c","queue":"q"}"#).unwrap();
        assert_eq!(
            (
                ok.user.as_str(),
                ok.credential.as_str(),
                ok.queue.as_deref()
            ),
            ("u1", "c", Some("q"))
        );
        let long = format!(
            r#"{{"userId":"u1","queueCredential":"{}"}}"#,
            "c".repeat(credential::MAX_LEN + 1)
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
        ] {
            assert_eq!(parse(&body).unwrap_err().code(), code);
        }
    }
}
