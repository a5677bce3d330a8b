//! The one writer of replies that waitgate makes itself.
//!
//! Handlers and checks return a [`Reply`] value; only [`Reply::send`] touches
//! the session. Every reply is JSON (or empty), carries Content-Length and
//! `Cache-Control: no-store`, and errors share one shape:
//! `{"error":"<snake_case_code>","message":"<one sentence>"}`, made from an
//! [`ApiError`] here and nowhere else.

use std::borrow::Cow;

use bytes::Bytes;
use pingora::http::ResponseHeader;
use pingora::proxy::Session;
use serde::Serialize;

use crate::error::ApiError;

/// `Retry-After` for 503s: Redis outages are usually a restart or failover,
/// which take seconds.
pub const RETRY_AFTER_S: &str = "1";

#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub body: Bytes,
    /// Extra headers (`Allow`, `Retry-After`, `WWW-Authenticate`, ...).
    pub headers: Vec<(&'static str, String)>,
    /// `application/json` but for the waiting-room page and its files.
    pub content_type: &'static str,
    /// `no-store` but for the page's script and styles.
    pub cache_control: &'static str,
    /// Close the connection after this reply. Set when the request body was
    /// not read: draining an unread (possibly huge) body to keep the
    /// connection would cost more than a new connection.
    pub close: bool,
    /// The queue and user the request spoke for, when a queue API call
    /// knew them: for the access log, not sent. (Boxed: a reply is often
    /// an `Err`, and most have none.)
    pub subject: Option<Box<Subject>>,
    /// Whether `Content-Length` is sent: always, but for the answer to a
    /// `HEAD` whose length only a `GET` would learn (see
    /// [`Reply::without_length`]).
    pub sized: bool,
}

/// Whom a queue API reply was for.
#[derive(Debug, Clone)]
pub struct Subject {
    pub queue: String,
    /// Unknown when the request was refused before it named one (a page
    /// load from another site's image tag, say).
    pub user: Option<String>,
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    error: &'a str,
    message: &'a str,
    /// When registration opens (`queue_not_open` only).
    #[serde(rename = "opensAt", skip_serializing_if = "Option::is_none")]
    opens_at: Option<&'a str>,
}

impl Reply {
    /// A JSON body. Serialising our own plain structs cannot fail; if it ever
    /// did, the client still gets a well-formed error instead of a panic.
    pub fn json<T: Serialize>(status: u16, value: &T) -> Reply {
        match serde_json::to_vec(value) {
            Ok(body) => Reply::raw(status, Bytes::from(body)),
            Err(_) => Reply::from(ApiError::InternalError),
        }
    }

    /// A JSON body serialised already.
    pub fn json_bytes(status: u16, body: Vec<u8>) -> Reply {
        Reply::raw(status, Bytes::from(body))
    }

    pub fn no_content() -> Reply {
        Reply::raw(204, Bytes::new())
    }

    fn raw(status: u16, body: Bytes) -> Reply {
        Reply {
            status,
            body,
            headers: Vec::new(),
            content_type: "application/json",
            cache_control: "no-store",
            close: false,
            subject: None,
            sized: true,
        }
    }

    /// An HTML page.
    pub fn html(status: u16, page: String) -> Reply {
        Reply {
            content_type: "text/html; charset=utf-8",
            ..Reply::raw(status, Bytes::from(page))
        }
    }

    /// `303 See Other` to `location` (a path of this site).
    pub fn see_other(location: String) -> Reply {
        Reply {
            content_type: "text/plain; charset=utf-8",
            ..Reply::raw(303, Bytes::from_static(b"See Other\n"))
        }
        .header("Location", location)
    }

    /// A static file waitgate serves, with its caching rule.
    pub fn file(
        content_type: &'static str,
        body: &'static [u8],
        cache_control: &'static str,
    ) -> Reply {
        Reply {
            content_type,
            cache_control,
            ..Reply::raw(200, Bytes::from_static(body))
        }
    }

    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Reply {
        self.headers.push((name, value.into()));
        self
    }

    /// Records whom the reply was for (the access log's queue and user).
    pub fn about(mut self, queue: &str, user: &str) -> Reply {
        self.subject = Some(Box::new(Subject {
            queue: queue.to_string(),
            user: Some(user.to_string()),
        }));
        self
    }

    /// Records the queue the reply was for, when no user is known.
    pub fn about_queue(mut self, queue: &str) -> Reply {
        self.subject = Some(Box::new(Subject {
            queue: queue.to_string(),
            user: None,
        }));
        self
    }

    pub fn closing(mut self) -> Reply {
        self.close = true;
        self
    }

    /// No `Content-Length`: for the bodiless answer to a `HEAD` whose `GET`
    /// would make content of a length not known without making it. Only
    /// for a `HEAD`: any other reply without a length would have to be
    /// read to the end of the connection.
    pub fn without_length(mut self) -> Reply {
        self.sized = false;
        self
    }

    /// The header fields every reply carries, in order: JSON type, length,
    /// no caching, the extra headers, and `Connection: close` when closing.
    /// Both writers below send exactly these.
    fn fields(&self) -> Vec<(&'static str, Cow<'_, str>)> {
        let mut fields = Vec::with_capacity(4 + self.headers.len());
        if self.status != 204 {
            fields.push(("Content-Type", Cow::Borrowed(self.content_type)));
            if self.sized {
                fields.push(("Content-Length", Cow::Owned(self.body.len().to_string())));
            }
        }
        fields.push(("Cache-Control", Cow::Borrowed(self.cache_control)));
        for (name, value) in &self.headers {
            fields.push((*name, Cow::Borrowed(value.as_str())));
        }
        if self.close {
            fields.push(("Connection", Cow::Borrowed("close")));
        }
        fields
    }

    /// Builds the response header: status, JSON type, length, no caching.
    pub fn response_header(&self) -> pingora::Result<ResponseHeader> {
        let fields = self.fields();
        let mut header = ResponseHeader::build(self.status, Some(fields.len()))?;
        for (name, value) in fields {
            header.append_header(name, value.into_owned())?;
        }
        Ok(header)
    }

    /// The reply as HTTP/1.1 bytes, for writers that hold the connection
    /// themselves (the direct lane), as Pingora's session writer sends it:
    /// the same fields as [`Reply::response_header`] in the same order (a
    /// closing reply's `Connection: close` among them), then `Date`, then,
    /// for a reply that does not close by itself, `Connection: close` when
    /// the connection ends anyway (`ends`: the client asked) and
    /// `keep-alive` when it does not; and no body when answering a HEAD
    /// request (the length still says what a GET would get).
    pub fn to_http1(&self, head_request: bool, ends: bool) -> Vec<u8> {
        let reason = http::StatusCode::from_u16(self.status)
            .ok()
            .and_then(|s| s.canonical_reason())
            .unwrap_or("");
        let mut head = format!("HTTP/1.1 {} {reason}\r\n", self.status);
        for (name, value) in self.fields() {
            head.push_str(name);
            head.push_str(": ");
            head.push_str(&value);
            head.push_str("\r\n");
        }
        // Cached per second, as the session writer's (RFC 9110 §6.6.1).
        let date = pingora::protocols::http::date::get_cached_date();
        head.push_str("Date: ");
        head.push_str(date.to_str().unwrap_or(""));
        head.push_str("\r\n");
        if !self.close {
            head.push_str(if ends {
                "Connection: close\r\n"
            } else {
                "Connection: keep-alive\r\n"
            });
        }
        head.push_str("\r\n");
        let mut out = head.into_bytes();
        if !head_request {
            out.extend_from_slice(&self.body);
        }
        out
    }

    /// The reply as an `http` response, for Pingora's plain HTTP apps (the
    /// admin listener).
    pub fn into_response(self) -> http::Response<Vec<u8>> {
        let mut response = http::Response::builder().status(self.status);
        for (name, value) in self.fields() {
            response = response.header(name, value.as_ref());
        }
        response
            .body(self.body.to_vec())
            .unwrap_or_else(|_| http::Response::new(Vec::new()))
    }

    /// Writes the reply to the client.
    pub async fn send(self, session: &mut Session) -> pingora::Result<()> {
        if self.close {
            session.set_keepalive(None);
        }
        let header = self.response_header()?;
        let empty = self.body.is_empty();
        session
            .write_response_header(Box::new(header), empty)
            .await?;
        if !empty {
            session.write_response_body(Some(self.body), true).await?;
        }
        Ok(())
    }
}

impl From<ApiError> for Reply {
    /// The `{"error","message"}` body every failure uses, with the headers
    /// its status calls for: `Retry-After` on a 503, `Allow` on a 405, the
    /// RFC 6750 challenge on a refused token.
    fn from(error: ApiError) -> Reply {
        let message = error.message();
        let body = serde_json::to_vec(&ErrorBody {
            error: error.code(),
            message: &message,
            opens_at: match &error {
                ApiError::QueueNotOpen { opens_at } => Some(opens_at),
                _ => None,
            },
        })
        .unwrap_or_default();
        let reply = Reply::raw(error.status(), Bytes::from(body));
        match error {
            ApiError::MethodNotAllowed { allow, .. } => reply.header("Allow", allow),
            ApiError::InvalidToken(_) => {
                reply.header("WWW-Authenticate", r#"Bearer error="invalid_token""#)
            }
            ApiError::InsufficientScope(_) => {
                reply.header("WWW-Authenticate", r#"Bearer error="insufficient_scope""#)
            }
            ApiError::AdminUnauthorized => reply.header("WWW-Authenticate", "Bearer"),
            ApiError::RateLimited { retry_after_s } => {
                reply.header("Retry-After", retry_after_s.to_string())
            }
            _ if error.status() == 503 => reply.header("Retry-After", RETRY_AFTER_S),
            _ => reply,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_have_one_shape() {
        let r = Reply::from(ApiError::UserNotQueued { hint: "" });
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(v["error"], "user_not_queued");
        assert_eq!(v["message"], "The user is not in this queue.");
        assert_eq!(v.as_object().unwrap().len(), 2);
        let h = r.response_header().unwrap();
        assert_eq!(
            h.headers["content-length"],
            r.body.len().to_string().as_str()
        );
        assert_eq!(h.headers["content-type"], "application/json");
    }

    #[test]
    fn unavailable_and_rate_limited_say_when_to_retry() {
        for error in ApiError::all() {
            let status = error.status();
            let h = Reply::from(error).response_header().unwrap();
            assert_eq!(
                h.headers.get("retry-after").is_some(),
                status == 503 || status == 429,
                "{status}"
            );
        }
        let h = Reply::from(ApiError::RedisUnavailable)
            .response_header()
            .unwrap();
        assert_eq!(h.headers["retry-after"], RETRY_AFTER_S);
        let h = Reply::from(ApiError::RateLimited { retry_after_s: 7 })
            .response_header()
            .unwrap();
        assert_eq!(h.headers["retry-after"], "7");
    }

    #[test]
    fn raw_replies_match_the_session_ones() {
        let r = Reply::from(ApiError::RedisUnavailable).closing();
        let text = String::from_utf8(r.to_http1(false, false)).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(
            head.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
            "{head}"
        );
        assert!(head.contains(&format!("Content-Length: {}", body.len())));
        assert!(head.contains("Retry-After: 1"));
        assert!(head.contains("Connection: close"));
        assert!(head.contains("\r\nDate: "), "{head}");
        assert_eq!(body.as_bytes(), &r.body[..]);
        let head_only = r.to_http1(true, false);
        assert!(head_only.ends_with(b"\r\n\r\n"));
        let open = String::from_utf8(Reply::no_content().to_http1(false, false)).unwrap();
        assert!(open.contains("\r\nConnection: keep-alive\r\n"), "{open}");
    }

    #[test]
    fn closing_replies_say_so() {
        let h = Reply::from(ApiError::BodyTooLarge)
            .closing()
            .response_header()
            .unwrap();
        assert_eq!(h.headers["connection"], "close");
    }
}
