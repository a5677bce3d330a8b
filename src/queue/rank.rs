//! `GET /api/v1/queue/rank?userId=&queue=`: the user's place, and a heartbeat.

use pingora::proxy::Session;

use super::{active_reply, input, waiting_reply, Endpoint, QueueApi};
use crate::reply::Reply;
use crate::store::Position;

pub async fn handle(api: &QueueApi, session: &mut Session) -> Reply {
    match rank(api, session).await {
        Ok(reply) | Err(reply) => reply,
    }
}

async fn rank(api: &QueueApi, session: &mut Session) -> Result<Reply, Reply> {
    let (user, queue) = input::user_query(session.req_header().uri.query())?;
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
