//! What the client gets when a forwarded request fails.
//!
//! Before the reply has started, a JSON error: 502 when the upstream could
//! not be reached or answered with something that is not sound HTTP/1.x,
//! 504 when it did not answer in time. After the status line has gone out,
//! nothing more can be said honestly: the connection is closed with the
//! body incomplete, which every client reads as a failed reply. Writing an
//! error body into a reply that already started would make a broken reply
//! look whole (and, with `Content-Length`, exactly as long as promised).

use pingora::{Error, ErrorSource, ErrorType};

use std::borrow::Cow;

use crate::error::ApiError;
use crate::reply::Reply;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Refused, reset, closed early, or answered with something the rules
    /// refuse: 502.
    Unavailable,
    /// No connection or no answer within the upstream's timeouts: 504.
    Timeout,
    /// The client's request could not be read or forwarded as sent.
    BadRequest(u16),
    /// The client went away: nobody to answer.
    ClientGone,
}

impl Failure {
    /// How Pingora's proxy errors map onto the same failures as the lane's.
    pub fn from_pingora(e: &Error) -> Failure {
        match e.etype() {
            ErrorType::HTTPStatus(status) if (400..500).contains(status) => {
                Failure::BadRequest(*status)
            }
            ErrorType::HTTPStatus(_) => Failure::Unavailable,
            ErrorType::ConnectTimedout | ErrorType::ReadTimedout | ErrorType::WriteTimedout
                if e.esource() == &ErrorSource::Upstream =>
            {
                Failure::Timeout
            }
            _ => match e.esource() {
                ErrorSource::Upstream | ErrorSource::Internal | ErrorSource::Unset => {
                    Failure::Unavailable
                }
                ErrorSource::Downstream => match e.etype() {
                    // An HTTP/2 client that cancels its stream or closes
                    // the connection shows as an H2 error: there is nobody
                    // to answer either way.
                    ErrorType::WriteError
                    | ErrorType::ReadError
                    | ErrorType::ConnectionClosed
                    | ErrorType::H2Error => Failure::ClientGone,
                    _ => Failure::BadRequest(400),
                },
            },
        }
    }

    /// The reply to send, if any: none once the reply has `started` (the
    /// connection is closed instead) or when the client is gone. Every
    /// error reply closes the connection.
    pub fn reply(self, started: bool) -> Option<Reply> {
        if started {
            return None;
        }
        let error = match self {
            Failure::Unavailable => ApiError::UpstreamUnavailable,
            Failure::Timeout => ApiError::UpstreamTimeout,
            Failure::BadRequest(status) => ApiError::BadRequest {
                status,
                message: Cow::Borrowed("The request could not be processed."),
            },
            Failure::ClientGone => return None,
        };
        Some(Reply::from(error).closing())
    }
}

/// Why a forwarded request failed, in the words of the access log's
/// `error` field. The direct lane names its failures with these; Pingora's
/// errors are read into them by [`logged`], so that one failure is the same
/// line whichever path served the request.
pub mod why {
    /// Every address of the upstream's pool is marked down.
    pub const NO_HEALTHY_ADDRESS: &str = "no healthy upstream address";
    pub const CONNECT: &str = "cannot connect";
    pub const SEND: &str = "cannot send the request";
    pub const SEND_TIMEOUT: &str = "timed out sending the request";
    pub const HEAD_REFUSED: &str = "the response head was refused";
    pub const HEAD_TOO_LARGE: &str = "the response head is too large";
    pub const CLOSED_BEFORE_RESPONSE: &str = "closed before a response";
    pub const NO_RESPONSE: &str = "no response in time";
    pub const CLOSED_MID_BODY: &str = "the upstream closed mid-body";
    pub const STALLED_MID_BODY: &str = "the upstream stalled mid-body";
    pub const BODY_REFUSED: &str = "the response body's framing was refused";
    pub const SWITCHED: &str = "the upstream switched protocols";
    pub const REQUEST_REFUSED: &str = "the request could not be forwarded as sent";
    pub const OTHER: &str = "the upstream failed";
}

/// What the access log says of a forwarded request that failed: its
/// `error`, one of [`why`], and the `reason`, the rule that refused the
/// upstream's answer, when one did (`rules::response::Refusal`, or the
/// chunked body's framing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Logged {
    pub error: &'static str,
    pub reason: Option<&'static str>,
}

impl Logged {
    pub const fn new(error: &'static str) -> Logged {
        Logged {
            error,
            reason: None,
        }
    }
}

/// The access log's words for a Pingora proxy error, read into the lane's
/// ([`why`]); `started` says whether the reply had begun when it failed,
/// and `refusal` what the rules refused in the upstream's answer, if they
/// did (`watched::refusal`). `None` when the client went away: that is no
/// failure of the upstream, on either path.
pub fn logged(e: &Error, started: bool, refusal: Option<&'static str>) -> Option<Logged> {
    // Pingora's own reader refuses a malformed chunked body in these words
    // where no watched socket reads it first (a TLS upstream).
    let chunks = e.esource() == &ErrorSource::Upstream
        && matches!(
            e.etype(),
            ErrorType::Custom("InvalidChunk" | "InvalidTrailerEnd")
        );
    let refusal = refusal.or(chunks.then_some(super::chunked::REFUSED));
    let error = error_of(e, started, refusal.is_some())?;
    Some(Logged {
        error,
        reason: refusal,
    })
}

fn error_of(e: &Error, started: bool, refused: bool) -> Option<&'static str> {
    let failure = Failure::from_pingora(e);
    match failure {
        Failure::ClientGone => return None,
        Failure::BadRequest(_) => return Some(why::REQUEST_REFUSED),
        Failure::Unavailable | Failure::Timeout => {}
    }
    // The words of the error and of the errors under it.
    let context = e.to_string();
    Some(match e.etype() {
        ErrorType::ConnectNoRoute if context.contains(why::NO_HEALTHY_ADDRESS) => {
            why::NO_HEALTHY_ADDRESS
        }
        ErrorType::ConnectTimedout
        | ErrorType::ConnectRefused
        | ErrorType::ConnectNoRoute
        | ErrorType::ConnectError
        | ErrorType::ConnectProxyFailure
        | ErrorType::TLSHandshakeFailure
        | ErrorType::TLSHandshakeTimedout
        | ErrorType::TLSWantX509Lookup
        | ErrorType::InvalidCert
        | ErrorType::HandshakeError
        | ErrorType::SocketError
        | ErrorType::BindError => why::CONNECT,
        ErrorType::WriteTimedout => why::SEND_TIMEOUT,
        ErrorType::WriteError => why::SEND,
        ErrorType::ReadTimedout if started => why::STALLED_MID_BODY,
        ErrorType::ReadTimedout => why::NO_RESPONSE,
        _ if refused && started => why::BODY_REFUSED,
        _ if refused => why::HEAD_REFUSED,
        // Pingora's client refuses a head of 1 MiB or more in these words;
        // the lane stops reading at the same size.
        ErrorType::InvalidHTTPHeader if context.contains("larger than") => why::HEAD_TOO_LARGE,
        ErrorType::InvalidHTTPHeader | ErrorType::H1Error if started => why::BODY_REFUSED,
        ErrorType::InvalidHTTPHeader | ErrorType::H1Error => why::HEAD_REFUSED,
        ErrorType::Custom("PrematureBodyEnd") => why::CLOSED_MID_BODY,
        ErrorType::ConnectionClosed | ErrorType::ReadError if started => why::CLOSED_MID_BODY,
        ErrorType::ConnectionClosed | ErrorType::ReadError => why::CLOSED_BEFORE_RESPONSE,
        _ => why::OTHER,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_errors_map_to_502_and_504() {
        let refused = Error::new(ErrorType::ConnectRefused).into_up();
        assert_eq!(Failure::from_pingora(&refused), Failure::Unavailable);
        let slow = Error::new(ErrorType::ReadTimedout).into_up();
        assert_eq!(Failure::from_pingora(&slow), Failure::Timeout);
        let gone = Error::new(ErrorType::WriteError).into_down();
        assert_eq!(Failure::from_pingora(&gone), Failure::ClientGone);
        let bad = Error::new(ErrorType::HTTPStatus(413));
        assert_eq!(Failure::from_pingora(&bad), Failure::BadRequest(413));
        assert_eq!(Failure::Unavailable.reply(false).unwrap().status, 502);
        assert_eq!(Failure::Timeout.reply(false).unwrap().status, 504);
    }

    #[test]
    fn pingora_errors_are_logged_in_the_lanes_words() {
        let up = |t| Error::new(t).into_up();
        assert_eq!(
            error_of(&up(ErrorType::ConnectRefused), false, false),
            Some(why::CONNECT)
        );
        let none = Error::explain(ErrorType::ConnectNoRoute, why::NO_HEALTHY_ADDRESS).into_up();
        assert_eq!(error_of(&none, false, false), Some(why::NO_HEALTHY_ADDRESS));
        let slow = up(ErrorType::ReadTimedout);
        assert_eq!(error_of(&slow, false, false), Some(why::NO_RESPONSE));
        assert_eq!(error_of(&slow, true, false), Some(why::STALLED_MID_BODY));
        let closed = up(ErrorType::ConnectionClosed);
        assert_eq!(
            error_of(&closed, false, false),
            Some(why::CLOSED_BEFORE_RESPONSE)
        );
        assert_eq!(error_of(&closed, true, false), Some(why::CLOSED_MID_BODY));
        let refused = up(ErrorType::ReadError);
        assert_eq!(error_of(&refused, false, true), Some(why::HEAD_REFUSED));
        assert_eq!(error_of(&refused, true, true), Some(why::BODY_REFUSED));
        let gone = Error::new(ErrorType::WriteError).into_down();
        assert_eq!(error_of(&gone, true, false), None);
        let cancelled = Error::new(ErrorType::H2Error).into_down();
        assert_eq!(Failure::from_pingora(&cancelled), Failure::ClientGone);
        assert_eq!(logged(&cancelled, false, None), None);
        let chunks = up(ErrorType::new("InvalidChunk"));
        assert_eq!(
            logged(&chunks, true, None),
            Some(Logged {
                error: why::BODY_REFUSED,
                reason: Some(super::super::chunked::REFUSED)
            })
        );
        // A client's own chunked body: no rule about the upstream's answer.
        let theirs = Error::new(ErrorType::new("InvalidChunk")).into_down();
        assert_eq!(
            logged(&theirs, false, None),
            Some(Logged::new(why::REQUEST_REFUSED))
        );
        let short = up(ErrorType::new("PrematureBodyEnd"));
        assert_eq!(error_of(&short, true, false), Some(why::CLOSED_MID_BODY));
        assert_eq!(
            error_of(&up(ErrorType::InternalError), false, false),
            Some(why::OTHER)
        );
    }

    #[test]
    fn nothing_is_written_once_the_reply_has_started() {
        assert!(Failure::Unavailable.reply(true).is_none());
        assert!(Failure::Timeout.reply(true).is_none());
        assert!(Failure::ClientGone.reply(false).is_none());
        assert!(Failure::Unavailable.reply(false).unwrap().close);
    }
}
