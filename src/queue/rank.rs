//! `GET /api/v1/queue/rank?userId=&queue=`: the user's place, and a heartbeat.

use pingora::proxy::Session;

use super::{active_reply, input, waiting_reply, Endpoint, QueueApi};
use crate::reply::Reply;
use crate::store::Position;

pub async fn handle(api: &QueueApi, session: &mut Session) -> Reply {
    answer(api, session.req_header().uri.query()).await
}

/// The reply to a rank request with this query string (without the `?`).
/// Needs nothing else of the request, so the direct lane answers it too.
pub async fn answer(api: &QueueApi, query: Option<&str>) -> Reply {
    match rank(api, query).await {
        Ok(reply) | Err(reply) => reply,
    }
}

async fn rank(api: &QueueApi, query: Option<&str>) -> Result<Reply, Reply> {
    let (user, queue) = input::user_query(query)?;
    let queue = api.queue(queue.as_deref())?;

    let position = api
        .store()
        .rank(&queue.keys, &user, &queue.admission)
        .await
        .map_err(|e| api.unavailable(Endpoint::Rank, e))?;
    Ok(match position {
        Position::Waiting(place) => waiting_reply(queue, &user, place, None),
        Position::Active { .. } => active_reply(queue, &user),
        Position::NotQueued => Reply::error(
            404,
            "user_not_queued",
            "The user is not in this queue; register first.",
        ),
    })
}
