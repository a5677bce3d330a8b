//! Reading and checking what a client sends to the queue API.
//!
//! Each function returns either the parsed value or the 4xx [`Reply`] that
//! explains what was wrong, so handlers read as a list of `?`s and nothing a
//! client sends can reach Redis unchecked.

use std::borrow::Cow;

use bytes::{Bytes, BytesMut};
use pingora::proxy::Session;

use crate::error::ApiError;
use crate::reply::Reply;
use crate::user::UserId;
use crate::wire::body::is_json;
pub use crate::wire::body::{declares_more_than, expects_continue, is_json_value, parse_json};

/// The largest request body the queue API reads.
pub const MAX_QUEUE_BODY_BYTES: usize = 4096;

/// A client's `userId`, checked against the user id rule.
pub fn user_id(text: impl Into<String>) -> Result<UserId, ApiError> {
    UserId::parse(text).ok_or(ApiError::InvalidUserId)
}

/// Reads a JSON request body of at most [`MAX_QUEUE_BODY_BYTES`] bytes.
///
/// 415 unless the body is declared `application/json`; 413 as soon as the
/// declared or received length passes the cap, without reading the rest (the
/// connection is then closed instead of drained).
pub async fn read_json_body(session: &mut Session) -> Result<Bytes, Reply> {
    let header = session.req_header();
    if !is_json(header.headers.get(http::header::CONTENT_TYPE)) {
        return Err(Reply::from(ApiError::UnsupportedMediaType).closing());
    }
    if declares_more_than(&header.headers, MAX_QUEUE_BODY_BYTES) {
        return Err(too_large());
    }
    if expects_continue(&header.headers) {
        // The client waits for this before sending the body.
        session
            .as_downstream_mut()
            .write_continue_response()
            .await
            .map_err(|_| unreadable())?;
    }

    let mut body = BytesMut::new();
    loop {
        match session.read_request_body().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > MAX_QUEUE_BODY_BYTES {
                    return Err(too_large());
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(body.freeze()),
            Err(_) => return Err(unreadable()),
        }
    }
}

fn too_large() -> Reply {
    Reply::from(ApiError::BodyTooLarge).closing()
}

fn unreadable() -> Reply {
    Reply::from(ApiError::InvalidRequest(Cow::Borrowed(
        "The request body could not be read.",
    )))
    .closing()
}

/// The query parameters the queue API reads. Others are ignored (polling
/// clients often add cache busters such as `_=1700000000`), but a parameter we
/// read may not appear twice: which copy wins would be a guess.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Query {
    pub user_id: Option<String>,
    pub queue: Option<String>,
}

/// The `userId` (required, checked) and `queue` (optional) of a query.
pub fn user_query(query: Option<&str>) -> Result<(UserId, Option<String>), ApiError> {
    let query = parse_query(query)?;
    let user = query.user_id.ok_or(ApiError::InvalidRequest(Cow::Borrowed(
        "The query parameter userId is required.",
    )))?;
    Ok((user_id(user)?, query.queue))
}

/// Reads the query as `application/x-www-form-urlencoded` (`%XX`, `+`).
/// A malformed escape is kept as written (and then fails the user id rule
/// or names no queue); a value that decodes to invalid UTF-8 is refused.
pub fn parse_query(query: Option<&str>) -> Result<Query, ApiError> {
    let mut out = Query::default();
    for (name, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        let slot = match name.as_ref() {
            "userId" => &mut out.user_id,
            "queue" => &mut out.queue,
            _ => continue,
        };
        if slot.is_some() {
            return Err(ApiError::InvalidRequest(Cow::Owned(format!(
                "The query parameter {name} is given more than once."
            ))));
        }
        // The decoder replaces invalid UTF-8 with U+FFFD; no valid user id
        // or queue name holds one, so its presence means the bytes were bad.
        if value.contains(char::REPLACEMENT_CHARACTER) {
            return Err(ApiError::InvalidRequest(Cow::Owned(format!(
                "The query parameter {name} is not valid percent-encoded UTF-8."
            ))));
        }
        *slot = Some(value.into_owned());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status_code(e: ApiError) -> (u16, String) {
        (e.status(), e.code().to_string())
    }

    #[test]
    fn user_ids_follow_the_rule() {
        assert_eq!(user_id("user_10").unwrap().as_str(), "user_10");
        for bad in ["", "a b", &"u".repeat(129)] {
            let (status, code) = status_code(user_id(bad).unwrap_err());
            assert_eq!((status, code.as_str()), (400, "invalid_user_id"), "{bad:?}");
        }
    }

    #[test]
    fn query_values_are_decoded_and_not_repeated() {
        let q = parse_query(Some("userId=a%40b&queue=baseball&_=17")).unwrap();
        assert_eq!(q.user_id.as_deref(), Some("a@b"));
        assert_eq!(q.queue.as_deref(), Some("baseball"));
        assert_eq!(parse_query(None).unwrap(), Query::default());
        let (status, code) = status_code(parse_query(Some("userId=a&userId=b")).unwrap_err());
        assert_eq!((status, code.as_str()), (400, "invalid_request"));
        // A malformed escape stays as written, and fails the user id rule.
        let (status, code) = status_code(user_query(Some("userId=%zz")).unwrap_err());
        assert_eq!((status, code.as_str()), (400, "invalid_user_id"));
        let (status, code) = status_code(parse_query(Some("userId=%ff")).unwrap_err());
        assert_eq!((status, code.as_str()), (400, "invalid_request"));
        let (status, code) = status_code(user_query(Some("queue=a")).unwrap_err());
        assert_eq!((status, code.as_str()), (400, "invalid_request"));
        assert_eq!(
            parse_query(Some("userId=a+b")).unwrap().user_id.as_deref(),
            Some("a b")
        );
    }

    #[test]
    fn json_errors_are_told_apart() {
        #[derive(serde::Deserialize, Debug)]
        #[serde(deny_unknown_fields, rename_all = "camelCase")]
        struct Body {
            #[allow(dead_code)]
            user_id: String,
        }
        let (s, c) = status_code(parse_json::<Body>(b"{").unwrap_err());
        assert_eq!((s, c.as_str()), (400, "invalid_json"));
        let (s, c) = status_code(parse_json::<Body>(b"{}").unwrap_err());
        assert_eq!((s, c.as_str()), (400, "invalid_request"));
        let (s, c) = status_code(parse_json::<Body>(br#"{"userId":5}"#).unwrap_err());
        assert_eq!((s, c.as_str()), (400, "invalid_request"));
        let (s, c) = status_code(parse_json::<Body>(br#"{"userId":"a","x":1}"#).unwrap_err());
        assert_eq!((s, c.as_str()), (400, "invalid_request"));
        let (s, c) = status_code(parse_json::<Body>(br#" ["a"]"#).unwrap_err());
        assert_eq!((s, c.as_str()), (400, "invalid_request"));
        let (s, c) = status_code(parse_json::<Body>(br#"["a""#).unwrap_err());
        assert_eq!((s, c.as_str()), (400, "invalid_json"));
        assert!(parse_json::<Body>(br#"{"userId":"a"}"#).is_ok());
    }

    #[test]
    fn json_media_type_allows_parameters() {
        let v = |s: &'static str| http::HeaderValue::from_static(s);
        assert!(is_json(Some(&v("application/json"))));
        assert!(is_json(Some(&v("Application/JSON; charset=utf-8"))));
        assert!(!is_json(Some(&v("text/plain"))));
        assert!(!is_json(Some(&v("application/jsonx"))));
        assert!(!is_json(None));
    }
}
