//! Reading and checking what a client sends to the queue API.
//!
//! Each function returns either the parsed value or the 4xx [`Reply`] that
//! explains what was wrong, so handlers read as a list of `?`s and nothing a
//! client sends can reach Redis unchecked.

use bytes::{Bytes, BytesMut};
use pingora::proxy::Session;
use serde::de::DeserializeOwned;

use crate::reply::Reply;

/// The largest request body the queue API reads (SPEC §3).
pub const MAX_BODY: usize = 4096;

/// The largest `userId` (SPEC §3).
pub const MAX_USER_ID: usize = 128;

/// `userId`: 1..128 characters of `A-Z a-z 0-9 . _ : @ -`.
pub fn is_valid_user_id(user: &str) -> bool {
    !user.is_empty()
        && user.len() <= MAX_USER_ID
        && user
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'@' | b'-'))
}

pub fn check_user_id(user: &str) -> Result<(), Reply> {
    if is_valid_user_id(user) {
        Ok(())
    } else {
        Err(Reply::error(
            400,
            "invalid_user_id",
            "userId must be 1 to 128 characters of A-Z a-z 0-9 . _ : @ -.",
        ))
    }
}

/// Reads a JSON request body of at most [`MAX_BODY`] bytes.
///
/// 415 unless the body is declared `application/json`; 413 as soon as the
/// declared or received length passes the cap, without reading the rest (the
/// connection is then closed instead of drained).
pub async fn read_json_body(session: &mut Session) -> Result<Bytes, Reply> {
    let header = session.req_header();
    if !is_json(header.headers.get(http::header::CONTENT_TYPE)) {
        return Err(Reply::error(
            415,
            "unsupported_media_type",
            "The body must be sent as Content-Type: application/json.",
        )
        .closing());
    }
    let declared = header
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY as u64) {
        return Err(too_large());
    }
    let expects_continue = header
        .headers
        .get(http::header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    if expects_continue {
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
                if body.len() + chunk.len() > MAX_BODY {
                    return Err(too_large());
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(body.freeze()),
            Err(_) => return Err(unreadable()),
        }
    }
}

/// Parses a JSON object body into `T`, telling syntax errors from field
/// errors.
pub fn parse_json<T: DeserializeOwned>(body: &[u8]) -> Result<T, Reply> {
    // serde would also read a struct from an array (`["user"]`); the API
    // takes named fields only.
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    if first.is_some_and(|&b| b != b'{')
        && serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok()
    {
        return Err(Reply::error(
            400,
            "invalid_request",
            "The body must be a JSON object.",
        ));
    }
    serde_json::from_slice(body).map_err(|e| {
        use serde_json::error::Category;
        match e.classify() {
            Category::Data => Reply::error(400, "invalid_request", &sentence(&e.to_string())),
            Category::Syntax | Category::Eof | Category::Io => Reply::error(
                400,
                "invalid_json",
                &sentence(&format!("The body is not valid JSON: {e}")),
            ),
        }
    })
}

/// `application/json`, with any parameters (`; charset=utf-8`), any case.
fn is_json(value: Option<&http::HeaderValue>) -> bool {
    let Some(value) = value.and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let media = value.split(';').next().unwrap_or("").trim();
    media.eq_ignore_ascii_case("application/json")
}

fn too_large() -> Reply {
    Reply::error(
        413,
        "body_too_large",
        "The request body is larger than 4096 bytes.",
    )
    .closing()
}

fn unreadable() -> Reply {
    Reply::error(
        400,
        "invalid_request",
        "The request body could not be read.",
    )
    .closing()
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

/// The query parameters the queue API reads. Others are ignored (polling
/// clients often add cache busters such as `_=1700000000`), but a parameter we
/// read may not appear twice: which copy wins would be a guess.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Query {
    pub user_id: Option<String>,
    pub queue: Option<String>,
}

/// The `userId` (required, checked) and `queue` (optional) of a query.
pub fn user_query(query: Option<&str>) -> Result<(String, Option<String>), Reply> {
    let query = parse_query(query)?;
    let user = query.user_id.ok_or_else(|| {
        Reply::error(
            400,
            "invalid_request",
            "The query parameter userId is required.",
        )
    })?;
    check_user_id(&user)?;
    Ok((user, query.queue))
}

pub fn parse_query(query: Option<&str>) -> Result<Query, Reply> {
    let mut out = Query::default();
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let slot = match name {
            "userId" => &mut out.user_id,
            "queue" => &mut out.queue,
            _ => continue,
        };
        if slot.is_some() {
            return Err(Reply::error(
                400,
                "invalid_request",
                &format!("The query parameter {name} is given more than once."),
            ));
        }
        let decoded = percent_decode(value).ok_or_else(|| {
            Reply::error(
                400,
                "invalid_request",
                &format!("The query parameter {name} is not valid percent-encoded UTF-8."),
            )
        })?;
        *slot = Some(decoded);
    }
    Ok(out)
}

/// Decodes `application/x-www-form-urlencoded` values: `%XX` and `+`.
fn percent_decode(value: &str) -> Option<String> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = bytes.get(i + 1..i + 3)?;
                let hex = std::str::from_utf8(hex).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(r: Reply) -> (u16, String) {
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        (r.status, v["error"].as_str().unwrap().to_string())
    }

    #[test]
    fn user_ids_follow_the_spec() {
        for ok in ["user_10", "a", "x.y:z@w-v", &"u".repeat(128)] {
            assert!(check_user_id(ok).is_ok(), "{ok}");
        }
        for bad in ["", " ", "a b", "a/b", "ü", "a\0", "{q}", &"u".repeat(129)] {
            let (status, code) = code(check_user_id(bad).unwrap_err());
            assert_eq!((status, code.as_str()), (400, "invalid_user_id"), "{bad:?}");
        }
    }

    #[test]
    fn query_values_are_decoded_and_not_repeated() {
        let q = parse_query(Some("userId=a%40b&queue=baseball&_=17")).unwrap();
        assert_eq!(q.user_id.as_deref(), Some("a@b"));
        assert_eq!(q.queue.as_deref(), Some("baseball"));
        assert_eq!(parse_query(None).unwrap(), Query::default());
        let (status, code) = code(parse_query(Some("userId=a&userId=b")).unwrap_err());
        assert_eq!((status, code.as_str()), (400, "invalid_request"));
        assert!(parse_query(Some("userId=%zz")).is_err());
        assert!(parse_query(Some("userId=%ff")).is_err());
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
        let (s, c) = code(parse_json::<Body>(b"{").unwrap_err());
        assert_eq!((s, c.as_str()), (400, "invalid_json"));
        let (s, c) = code(parse_json::<Body>(b"{}").unwrap_err());
        assert_eq!((s, c.as_str()), (400, "invalid_request"));
        let (s, c) = code(parse_json::<Body>(br#"{"userId":5}"#).unwrap_err());
        assert_eq!((s, c.as_str()), (400, "invalid_request"));
        let (s, c) = code(parse_json::<Body>(br#"{"userId":"a","x":1}"#).unwrap_err());
        assert_eq!((s, c.as_str()), (400, "invalid_request"));
        let (s, c) = code(parse_json::<Body>(br#" ["a"]"#).unwrap_err());
        assert_eq!((s, c.as_str()), (400, "invalid_request"));
        let (s, c) = code(parse_json::<Body>(br#"["a""#).unwrap_err());
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
