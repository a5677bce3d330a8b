//! `DELETE /api/v1/queue/dropout?userId=&queue=` with `X-Queue-Credential`.
//!
//! Only the holder of the credential may take a user out of the queue, so
//! nobody can drop another user by knowing their user id.

use std::borrow::Cow;

use pingora::proxy::Session;

use super::{credential, input, Endpoint, QueueApi};
use crate::error::ApiError;
use crate::reply::Reply;
use crate::store::Dropout;

/// The header that carries the queueCredential.
pub const CREDENTIAL_HEADER: &str = "x-queue-credential";

pub async fn handle(api: &QueueApi, session: &mut Session) -> Reply {
    match dropout(api, session).await {
        Ok(reply) => reply,
        Err(error) => Reply::from(error),
    }
}

async fn dropout(api: &QueueApi, session: &mut Session) -> Result<Reply, ApiError> {
    let header = session.req_header();
    let (user, queue) = input::user_query(header.uri.query())?;
    let presented = presented_credential(header.headers.get_all(CREDENTIAL_HEADER))?;
    let queue = api.queue(queue.as_deref())?;

    // A credential that is not one of ours for this user matches no
    // registration; Redis need not be asked.
    let arrival = api
        .credentials()
        .check(&queue.name, user.as_str(), presented)
        .ok_or(ApiError::CredentialMismatch)?;
    let removed = api
        .store()
        .dropout(&queue.keys, user.as_str(), arrival)
        .await
        .map_err(|e| api.unavailable(Endpoint::Dropout, e))?;
    outcome(removed)
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
    if value.is_empty() || value.len() > credential::MAX_LEN {
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
        let value = "x".repeat(credential::MAX_LEN + 1);
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
