//! `DELETE /api/v1/queue/dropout?userId=&queue=` with `X-Queue-Credential`.
//!
//! Only the holder of the credential may take a user out of the queue, so
//! nobody can drop another user by knowing their user id.

use std::borrow::Cow;

use pingora::http::RequestHeader;

use super::who::Login;
use super::{credential, input, Endpoint, QueueApi};
use crate::browser::cookie;
use crate::browser::Caller;
use crate::error::ApiError;
use crate::reply::Reply;
use crate::store::Dropout;

/// The header that carries the queueCredential.
pub const CREDENTIAL_HEADER: &str = "x-queue-credential";

pub async fn handle(api: &QueueApi, head: &RequestHeader, caller: &Caller) -> Reply {
    match dropout(api, head, caller).await {
        Ok(reply) | Err(reply) => reply,
    }
}

async fn dropout(api: &QueueApi, head: &RequestHeader, caller: &Caller) -> Result<Reply, Reply> {
    let query = input::parse_query(head.uri.query())?;
    let queue = api.queue(query.queue.as_deref())?;
    // The header, when sent, is the credential; without it the queue
    // cookie's is (a browser).
    let header = || head.headers.get_all(CREDENTIAL_HEADER);
    let sent = match header().iter().next() {
        Some(_) => Some(presented_credential(header())?.to_string()),
        None => None,
    };
    let who = api.who(&queue, query.user_id, sent, caller, Login::IfSent)?;
    // Whom the answer is about, in the access log, refusals included.
    let about = |error: ApiError| Reply::from(error).about(&queue.name, who.user.as_str());
    if who.by_cookie {
        api.same_site(caller).map_err(about)?;
    }
    let presented = match &who.credential {
        Some(c) => c.as_str(),
        // None sent: say which header was missing.
        None => presented_credential(header()).map_err(about)?,
    };

    // A credential that is not one of ours for this user matches no
    // registration; Redis need not be asked.
    let arrival = api
        .arrival_of(&queue, &who.user, presented)
        .map_err(about)?;
    let removed = api
        .store()
        .dropout(&queue.keys, who.user.as_str(), arrival)
        .await
        .map_err(|e| about(api.unavailable(Endpoint::Dropout, e)))?;
    if removed != Dropout::CredentialMismatch {
        api.note_spent(&queue, who.user.as_str(), arrival).await;
    }
    let reply = outcome(removed)
        .map_err(about)?
        .about(&queue.name, who.user.as_str());
    // A browser that left forgets its place and its token.
    Ok(if who.by_cookie {
        reply
            .header(
                "Set-Cookie",
                api.jar().remove(cookie::queue_cookie_name(&queue.name)),
            )
            .header(
                "Set-Cookie",
                api.jar().remove(cookie::token_cookie_name(&queue.name)),
            )
    } else {
        reply
    })
}

/// What the store's answer means for the client.
fn outcome(dropout: Dropout) -> Result<Reply, ApiError> {
    match dropout {
        Dropout::Removed => Ok(Reply::no_content()),
        Dropout::NotQueued => Err(ApiError::UserNotQueued { hint: "" }),
        Dropout::CredentialMismatch => Err(ApiError::CredentialMismatch),
    }
}

/// Exactly one, non-empty, plausibly sized `X-Queue-Credential`.
fn presented_credential(
    values: http::header::GetAll<'_, http::HeaderValue>,
) -> Result<&str, ApiError> {
    let missing = || {
        ApiError::InvalidRequest(Cow::Borrowed(
            "Exactly one X-Queue-Credential header is required.",
        ))
    };
    let mut iter = values.iter();
    let first = iter.next().ok_or_else(missing)?;
    if iter.next().is_some() {
        return Err(missing());
    }
    let value = first.to_str().map_err(|_| missing())?.trim();
    if value.is_empty() || value.len() > credential::MAX_CREDENTIAL_BYTES {
        return Err(missing());
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderMap, HeaderValue};

    #[test]
    fn exactly_one_plausible_credential_is_read() {
        let mut headers = HeaderMap::new();
        assert!(presented_credential(headers.get_all(CREDENTIAL_HEADER)).is_err());
        headers.append(CREDENTIAL_HEADER, HeaderValue::from_static(" abc "));
        assert_eq!(
            presented_credential(headers.get_all(CREDENTIAL_HEADER)).unwrap(),
            "abc"
        );
        headers.append(CREDENTIAL_HEADER, HeaderValue::from_static("def"));
        let error = presented_credential(headers.get_all(CREDENTIAL_HEADER)).unwrap_err();
        assert_eq!(error.code(), "invalid_request");
        let mut long = HeaderMap::new();
        let value = "x".repeat(credential::MAX_CREDENTIAL_BYTES + 1);
        long.append(CREDENTIAL_HEADER, HeaderValue::from_str(&value).unwrap());
        assert!(presented_credential(long.get_all(CREDENTIAL_HEADER)).is_err());
    }

    #[test]
    fn the_store_answer_becomes_the_reply() {
        assert_eq!(outcome(Dropout::Removed).unwrap().status, 204);
        assert_eq!(outcome(Dropout::NotQueued).unwrap_err().status(), 404);
        assert_eq!(
            outcome(Dropout::CredentialMismatch).unwrap_err(),
            ApiError::CredentialMismatch
        );
    }
}
