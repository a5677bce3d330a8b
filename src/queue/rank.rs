//! `GET /api/v1/queue/rank?userId=&queue=`: the user's place, and a heartbeat.

use pingora::proxy::Session;

use super::{body, input, Endpoint, QueueApi};
use crate::error::ApiError;
use crate::queues::Queue;
use crate::reply::Reply;
use crate::store::Position;
use crate::user::UserId;

pub async fn handle(api: &QueueApi, session: &mut Session) -> Reply {
    answer(api, session.req_header().uri.query()).await
}

/// The reply to a rank request with this query string (without the `?`).
/// Needs nothing else of the request, so the direct lane answers it too.
pub async fn answer(api: &QueueApi, query: Option<&str>) -> Reply {
    match rank(api, query).await {
        Ok(reply) => reply,
        Err(error) => Reply::from(error),
    }
}

async fn rank(api: &QueueApi, query: Option<&str>) -> Result<Reply, ApiError> {
    let (user, queue) = input::user_query(query)?;
    let queue = api.queue(queue.as_deref())?;
    let position = api
        .store()
        .rank(&queue.keys, user.as_str(), &queue.admission)
        .await
        .map_err(|e| api.unavailable(Endpoint::Rank, e))?;
    outcome(&queue, &user, position)
}

/// What the store's answer means for the client.
fn outcome(queue: &Queue, user: &UserId, position: Position) -> Result<Reply, ApiError> {
    match position {
        Position::Waiting(place) => Ok(body::waiting(queue, user.as_str(), place, None)),
        Position::Active { .. } => Ok(body::active(queue, user.as_str())),
        Position::Prequeued { opens_in_ms } => {
            Ok(body::prequeued(queue, user.as_str(), opens_in_ms, None))
        }
        Position::NotQueued => Err(ApiError::UserNotQueued {
            hint: "register first",
        }),
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
    }
}
