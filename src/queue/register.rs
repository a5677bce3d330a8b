//! `POST /api/v1/queue/register` with `{"userId","queue"?}`.

use pingora::proxy::Session;
use serde::Deserialize;

use super::{body, input, Endpoint, QueueApi};
use crate::error::ApiError;
use crate::metrics::{REGISTERED_ACTIVE, REGISTERED_AGAIN, REGISTERED_NEW, REGISTERED_NOT_OPEN};
use crate::queues::Queue;
use crate::reply::Reply;
use crate::store::Registration;
use crate::user::UserId;

/// The request body as sent.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Body {
    user_id: String,
    #[serde(default)]
    queue: Option<String>,
}

/// A register request that passed every check short of Redis.
#[derive(Debug)]
pub struct Request {
    pub user: UserId,
    pub queue: Option<String>,
}

/// Parses and checks a register body.
pub fn parse(body: &[u8]) -> Result<Request, ApiError> {
    let body: Body = input::parse_json(body)?;
    Ok(Request {
        user: input::user_id(body.user_id)?,
        queue: body.queue,
    })
}

pub async fn handle(api: &QueueApi, session: &mut Session) -> Reply {
    match register(api, session).await {
        Ok(reply) | Err(reply) => reply,
    }
}

async fn register(api: &QueueApi, session: &mut Session) -> Result<Reply, Reply> {
    let request = parse(&api.read_body(session).await?)?;
    let queue = api.queue(request.queue.as_deref())?;
    let registration = api
        .store()
        .register(&queue.keys, request.user.as_str(), &queue.admission)
        .await
        .map_err(|e| api.unavailable(Endpoint::Register, e))?;
    let (result, reply) = outcome(&queue, &request.user, registration, |arrival| {
        api.credentials()
            .issue(&queue.name, request.user.as_str(), arrival)
    });
    api.metrics()
        .registrations
        .with_label_values(&[&queue.name, result])
        .inc();
    Ok(reply)
}

/// What the store's answer means: the metric label and the reply. Only a
/// new registration gets a credential, made by `credential` from the
/// arrival that Redis just gave this user.
fn outcome(
    queue: &Queue,
    user: &UserId,
    registration: Registration,
    credential: impl FnOnce(u64) -> String,
) -> (&'static str, Reply) {
    match registration {
        Registration::New { place, arrival } => {
            let credential = credential(arrival);
            (
                REGISTERED_NEW,
                body::waiting(queue, user.as_str(), place, Some(&credential)),
            )
        }
        Registration::AlreadyWaiting(place) => (
            REGISTERED_AGAIN,
            body::waiting(queue, user.as_str(), place, None),
        ),
        Registration::Active { .. } => (REGISTERED_ACTIVE, body::active(queue, user.as_str())),
        Registration::Prequeued {
            opens_in_ms,
            arrival: Some(arrival),
        } => {
            let credential = credential(arrival);
            (
                REGISTERED_NEW,
                body::prequeued(queue, user.as_str(), opens_in_ms, Some(&credential)),
            )
        }
        Registration::Prequeued {
            opens_in_ms,
            arrival: None,
        } => (
            REGISTERED_AGAIN,
            body::prequeued(queue, user.as_str(), opens_in_ms, None),
        ),
        Registration::NotOpen { opens_at_ms } => (
            REGISTERED_NOT_OPEN,
            Reply::from(ApiError::QueueNotOpen {
                opens_at: crate::time::rfc3339(opens_at_ms),
            }),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Place;

    #[test]
    fn bodies_are_checked_before_redis() {
        let ok = parse(br#"{"userId":"u1","queue":"baseball"}"#).unwrap();
        assert_eq!(ok.user.as_str(), "u1");
        assert_eq!(ok.queue.as_deref(), Some("baseball"));
        for (body, code) in [
            (&br#"{"userId":"a b"}"#[..], "invalid_user_id"),
            (br#"{"userId":"u1","extra":1}"#, "invalid_request"),
            (br#"{"queue":"baseball"}"#, "invalid_request"),
            (br#"{"userId":"#, "invalid_json"),
        ] {
            assert_eq!(parse(body).unwrap_err().code(), code, "{body:?}");
        }
    }

    #[test]
    fn only_a_new_registration_gets_a_credential() {
        let queue = super::super::tests::queue();
        let user = UserId::parse("u1").unwrap();
        let place = Place {
            rank: 0,
            wait_ms: Some(0),
        };
        let (label, reply) = outcome(
            &queue,
            &user,
            Registration::New { place, arrival: 7 },
            |arrival| format!("credential-{arrival}"),
        );
        assert_eq!(label, REGISTERED_NEW);
        let v: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
        assert_eq!(v["queueCredential"], "credential-7");
        let (label, reply) = outcome(&queue, &user, Registration::AlreadyWaiting(place), |_| {
            unreachable!("no credential for a second registration")
        });
        assert_eq!(label, REGISTERED_AGAIN);
        let v: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
        assert!(v.get("queueCredential").is_none());
        let (label, reply) = outcome(
            &queue,
            &user,
            Registration::Active { expires_at_ms: 1 },
            |_| unreachable!(),
        );
        assert_eq!(label, REGISTERED_ACTIVE);
        let v: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
        assert_eq!(v["status"], "ACTIVE");
    }
}
