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
                    ErrorType::WriteError | ErrorType::ReadError | ErrorType::ConnectionClosed => {
                        Failure::ClientGone
                    }
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
    fn nothing_is_written_once_the_reply_has_started() {
        assert!(Failure::Unavailable.reply(true).is_none());
        assert!(Failure::Timeout.reply(true).is_none());
        assert!(Failure::ClientGone.reply(false).is_none());
        assert!(Failure::Unavailable.reply(false).unwrap().close);
    }
}
