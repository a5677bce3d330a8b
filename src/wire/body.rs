//! Request bodies as the wire brings them: the length a head declares,
//! `100 Continue`, the JSON media type, and a JSON object read into a type
//! with an error a client can act on.

use std::borrow::Cow;

use serde::de::DeserializeOwned;

use super::length::{content_length, Length};
use crate::error::ApiError;

/// Whether a head's `Content-Length` says more than `limit` bytes (a body
/// refused before any of it is read).
pub fn declares_more_than(headers: &http::HeaderMap, limit: usize) -> bool {
    headers
        .get(http::header::CONTENT_LENGTH)
        .map(|v| content_length(v.as_bytes()))
        .is_some_and(|length| match length {
            Length::Bytes(n) => n > limit as u64,
            Length::TooLarge => true,
            Length::Invalid => false,
        })
}

/// Whether a head asks for `100 Continue` before its body is sent.
pub fn expects_continue(headers: &http::HeaderMap) -> bool {
    headers
        .get(http::header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"))
}

/// Parses a JSON object body into `T`, telling syntax errors from field
/// errors.
pub fn parse_json<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    // serde would also read a struct from an array (`["user"]`); the API
    // takes named fields only.
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    if first.is_some_and(|&b| b != b'{')
        && serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok()
    {
        return Err(ApiError::InvalidRequest(Cow::Borrowed(
            "The body must be a JSON object.",
        )));
    }
    serde_json::from_slice(body).map_err(|e| {
        use serde_json::error::Category;
        match e.classify() {
            Category::Data => ApiError::InvalidRequest(Cow::Owned(sentence(&e.to_string()))),
            Category::Syntax | Category::Eof | Category::Io => {
                ApiError::InvalidJson(sentence(&format!("The body is not valid JSON: {e}")))
            }
        }
    })
}

/// `application/json`, with any parameters (`; charset=utf-8`), any case.
pub fn is_json(value: Option<&http::HeaderValue>) -> bool {
    value.is_some_and(|v| is_json_value(v.as_bytes()))
}

/// [`is_json`] of a header value's bytes (the direct lane's).
pub fn is_json_value(value: &[u8]) -> bool {
    // As `HeaderValue::to_str`: visible ASCII and tabs only.
    if !value.iter().all(|&b| b == b'\t' || (32..127).contains(&b)) {
        return false;
    }
    let Ok(value) = std::str::from_utf8(value) else {
        return false;
    };
    let media = value.split(';').next().unwrap_or("").trim();
    media.eq_ignore_ascii_case("application/json")
}

/// serde's messages are fragments ("missing field `userId` at line 1 column
/// 2"); the API promises one sentence.
fn sentence(text: &str) -> String {
    let mut s = String::with_capacity(text.len() + 1);
    let mut chars = text.chars();
    if let Some(first) = chars.next() {
        s.extend(first.to_uppercase());
        s.push_str(chars.as_str());
    }
    if !s.ends_with('.') {
        s.push('.');
    }
    s
}
