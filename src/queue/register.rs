//! `POST /api/v1/queue/register` with `{"userId","queue"?}`.

use pingora::proxy::Session;
use serde::Deserialize;

use super::{active_reply, input, waiting_reply, Endpoint, QueueApi};
use crate::metrics::{REGISTERED_ACTIVE, REGISTERED_AGAIN, REGISTERED_NEW};
use crate::reply::Reply;
use crate::store::Registration;

/// The request body.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Body {
    pub user_id: String,
    #[serde(default)]
    pub queue: Option<String>,
}

/// Parses and checks a register body: everything short of Redis.
pub fn parse(body: &[u8]) -> Result<Body, Reply> {
    let body: Body = input::parse_json(body)?;
    input::check_user_id(&body.user_id)?;
    Ok(body)
}

pub async fn handle(api: &QueueApi, session: &mut Session) -> Reply {
    match register(api, session).await {
        Ok(reply) | Err(reply) => reply,
    }
}

async fn register(api: &QueueApi, session: &mut Session) -> Result<Reply, Reply> {
    let body = parse(&api.read_body(session).await?)?;
    let queue = api.queue(body.queue.as_deref())?;

    let registration = api
        .store()
        .register(&queue.keys, &body.user_id, &queue.admission)
        .await
        .map_err(|e| api.unavailable(Endpoint::Register, e))?;

    let (result, reply) = match registration {
        Registration::New { place, arrival } => {
            // Only a new registration gets a credential: it signs the arrival
            // that Redis just gave this user.
            let credential = api.credentials().issue(&queue.name, &body.user_id, arrival);
            (
                REGISTERED_NEW,
                waiting_reply(queue, &body.user_id, place, Some(&credential)),
            )
        }
        Registration::AlreadyWaiting(place) => (
            REGISTERED_AGAIN,
            waiting_reply(queue, &body.user_id, place, None),
        ),
        Registration::Active { .. } => (REGISTERED_ACTIVE, active_reply(queue, &body.user_id)),
    };
    api.metrics()
        .registrations
        .with_label_values(&[&queue.name, result])
        .inc();
    Ok(reply)
}
