//! `DELETE /api/v1/queue/dropout?userId=&queue=` with `X-Queue-Credential`.
//!
//! Only the holder of the credential may take a user out of the queue (the
//! seed let anyone drop anyone by user id).

use pingora::proxy::Session;

use super::{credential, input, Endpoint, QueueApi};
use crate::reply::Reply;
use crate::store::Dropout;

/// The header that carries the queueCredential.
pub const CREDENTIAL_HEADER: &str = "x-queue-credential";

pub async fn handle(api: &QueueApi, session: &mut Session) -> Reply {
    match dropout(api, session).await {
        Ok(reply) | Err(reply) => reply,
    }
}

async fn dropout(api: &QueueApi, session: &mut Session) -> Result<Reply, Reply> {
    let header = session.req_header();
    let (user, queue) = input::user_query(header.uri.query())?;
    let presented = presented_credential(header.headers.get_all(CREDENTIAL_HEADER))?;
    let queue = api.queue(queue.as_deref())?;

    // A credential that is not one of ours for this user matches no
    // registration; Redis need not be asked.
    let Some(arrival) = api.credentials().check(&queue.name, &user, presented) else {
        return Ok(mismatch());
    };
    let outcome = api
        .store()
        .dropout(&queue.keys, &user, arrival)
        .await
        .map_err(|e| api.unavailable(Endpoint::Dropout, e))?;
    Ok(match outcome {
        Dropout::Removed => Reply::no_content(),
        Dropout::NotQueued => {
            Reply::error(404, "user_not_queued", "The user is not in this queue.")
        }
        Dropout::CredentialMismatch => mismatch(),
    })
}

fn mismatch() -> Reply {
    Reply::error(
        403,
        "credential_mismatch",
        "The queue credential does not match.",
    )
}

/// Exactly one, non-empty, plausibly sized `X-Queue-Credential`.
fn presented_credential(
    values: http::header::GetAll<'_, http::HeaderValue>,
) -> Result<&str, Reply> {
    let missing = || {
        Reply::error(
            400,
            "invalid_request",
            "Exactly one X-Queue-Credential header is required.",
        )
    };
    let mut iter = values.iter();
    let first = iter.next().ok_or_else(missing)?;
    if iter.next().is_some() {
        return Err(missing());
    }
    let value = first.to_str().map_err(|_| missing())?.trim();
    if value.is_empty() || value.len() > credential::MAX_LEN {
        return Err(missing());
    }
    Ok(value)
}
