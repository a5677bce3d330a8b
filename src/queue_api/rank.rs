//! `GET /api/v1/queue/rank?userId=&queue=`: the user's place, and a heartbeat.

use super::body::Signed;
use super::who::Login;
use super::{body, input, Endpoint, QueueApi};
use crate::browser::Caller;
use crate::error::ApiError;
use crate::queues::Queue;
use crate::reply::Reply;
use crate::store::{Current, Position};
use crate::user::UserId;

/// The reply to a rank request with this query string (without the `?`),
/// from a client that sent these headers. Both HTTP paths call it.
pub async fn answer(api: &QueueApi, query: Option<&str>, caller: &Caller) -> Reply {
    match rank(api, query, caller).await {
        Ok(reply) | Err(reply) => reply,
    }
}

async fn rank(api: &QueueApi, query: Option<&str>, caller: &Caller) -> Result<Reply, Reply> {
    let query = input::parse_query(query)?;
    let queue = api.queue(query.queue.as_deref())?;
    let header_credential = caller.credential.clone();
    let who = api.who(
        &queue,
        query.user_id,
        header_credential,
        caller,
        Login::Keep,
    )?;
    // Whom the answer is about, in the access log, refusals included.
    let about = |error: ApiError| Reply::from(error).about(&queue.name, who.user.as_str());
    if queue.config.require_credential {
        let presented = who.credential.as_deref().ok_or_else(|| {
            about(ApiError::InvalidRequest(std::borrow::Cow::Borrowed(
                "This queue needs the queueCredential with rank: send X-Queue-Credential.",
            )))
        })?;
        let arrival = api
            .arrival_of(&queue, &who.user, presented)
            .map_err(about)?;
        // Of the registration that stands: one of an earlier registration
        // polls nobody's place (a second call, on such queues only).
        let current = api
            .store()
            .current(&queue.keys, who.user.as_str(), arrival)
            .await
            .map_err(|e| about(api.unavailable(Endpoint::Rank, e)))?;
        if current == Current::Earlier {
            return Err(about(ApiError::CredentialMismatch));
        }
    }
    // A credential of the user's, when one came, lets a place Redis lost
    // be seated again.
    let position = api
        .rank_or_reseat(&queue, who.user.as_str(), who.credential.as_deref())
        .await
        .map_err(|e| about(api.unavailable(Endpoint::Rank, e)))?;
    outcome(&queue, &who.user, position)
        .map(|r| r.about(&queue.name, who.user.as_str()))
        .map_err(about)
}

/// What the store's answer means for the client.
fn outcome(queue: &Queue, user: &UserId, position: Position) -> Result<Reply, ApiError> {
    match position {
        Position::Waiting(place) => Ok(body::waiting(
            queue,
            user.as_str(),
            place,
            Signed::default(),
        )),
        Position::Active { .. } => Ok(body::active(queue, user.as_str())),
        Position::Prequeued {
            opens_in_ms,
            poll_after_ms,
        } => Ok(body::prequeued(
            queue,
            user.as_str(),
            opens_in_ms,
            poll_after_ms,
            Signed::default(),
        )),
        Position::NotQueued => Err(ApiError::UserNotQueued {
            hint: "register first",
        }),
        Position::Closed(closed) => Ok(body::closed(queue, user.as_str(), &closed)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Place;

    #[test]
    fn the_store_answer_becomes_the_reply() {
        let queue = super::super::tests::queue();
        let user = UserId::parse("u1").unwrap();
        let waiting = outcome(
            &queue,
            &user,
            Position::Waiting(Place {
                rank: 4,
                wait_ms: Some(2_400),
                poll_after_ms: 1_000,
            }),
        )
        .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&waiting.body).unwrap();
        assert_eq!(v["status"], "WAITING");
        assert_eq!(v["rank"], 4);
        assert_eq!(v["estimatedWaitingCount"], 5);
        assert_eq!(v["estimatedWaitSeconds"], 2);
        assert!(v.get("queueCredential").is_none());
        let missing = outcome(&queue, &user, Position::NotQueued).unwrap_err();
        assert_eq!((missing.status(), missing.code()), (404, "user_not_queued"));
        let closed = outcome(
            &queue,
            &user,
            Position::Closed(crate::store::Closed {
                message: "Sold out.".into(),
            }),
        )
        .unwrap();
        assert_eq!(closed.status, 200);
        let v: serde_json::Value = serde_json::from_slice(&closed.body).unwrap();
        assert_eq!(v["status"], "CLOSED");
        assert_eq!(v["message"], "Sold out.");
        assert!(v.get("rank").is_none() && v.get("pollAfterMs").is_none());
    }
}
