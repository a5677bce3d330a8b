//! `POST /api/v1/queue/active/token` with `{"userId","queueCredential","queue"?}`:
//! an active user trades its state for a short-lived ACTIVE_USER JWT.

use pingora::proxy::Session;
use serde::{Deserialize, Serialize};

use super::{credential, input, Endpoint, QueueApi};
use crate::edge::jwt::now_s;
use crate::reply::Reply;

/// The request body.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Body {
    pub user_id: String,
    pub queue_credential: String,
    #[serde(default)]
    pub queue: Option<String>,
}

/// Parses and checks a token-exchange body: everything short of Redis.
pub fn parse(body: &[u8]) -> Result<Body, Reply> {
    let body: Body = input::parse_json(body)?;
    input::check_user_id(&body.user_id)?;
    if body.queue_credential.is_empty() || body.queue_credential.len() > credential::MAX_LEN {
        return Err(Reply::error(
            400,
            "invalid_request",
            "queueCredential must be the credential given at registration.",
        ));
    }
    Ok(body)
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
fn refused() -> Reply {
    Reply::error(
        403,
        "not_active",
        "The user is not active, or the queue credential does not match.",
    )
}

async fn token(api: &QueueApi, session: &mut Session) -> Result<Reply, Reply> {
    let body = parse(&api.read_body(session).await?)?;
    let queue = api.queue(body.queue.as_deref())?;

    // A credential that is not one of ours for this user is refused without
    // asking Redis, with the same answer as any other refusal.
    let arrival = api
        .credentials()
        .check(&queue.name, &body.user_id, &body.queue_credential)
        .ok_or_else(refused)?;
    let active_until_ms = api
        .store()
        .token(&queue.keys, &body.user_id, arrival)
        .await
        .map_err(|e| api.unavailable(Endpoint::Token, e))?
        .ok_or_else(refused)?;
    let issued = api
        .tokens()
        .issue(&body.user_id, &queue.name, active_until_ms, now_s())
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
