//! The rulebook: every HTTP rule that both of waitgate's HTTP paths apply,
//! the Pingora proxy (`super::Gate`) and the direct lane (`super::lane`).
//!
//! A rule that lives here is decided once, from plain values, and each path
//! only carries the result out with its own writer. The two paths therefore
//! cannot give a client different answers, nor send an upstream different
//! bytes (the differential suite, `tests/differential.rs`, checks both).
//!
//! - [`request`]: what a request head must look like before it is routed
//!   (framing, `Host`, `Upgrade`);
//! - [`forward`]: which request headers reach the upstream and which ones
//!   waitgate sets itself (identity, `X-Forwarded-For`, `X-Forwarded-Proto`,
//!   `X-Request-Id`), with the trusted-proxy rule;
//! - [`response`]: how an upstream response's body is framed, which of its
//!   headers reach the client, and which responses are refused with a 502;
//! - [`chunked`]: where a chunked body ends, as Pingora's client reads it;
//! - [`pool`]: kept-alive upstream connections, reused only when nothing
//!   is waiting on them;
//! - [`failure`]: what the client gets when the upstream fails: a 502 or
//!   504 before the reply has started, a closed connection after;
//! - [`record`]: the metrics and the access-log line of every request.

pub mod chunked;
pub mod failure;
pub mod forward;
pub mod name;
pub mod pool;
pub mod record;
pub mod request;
pub mod response;

/// One header field as it arrived: name and value, raw bytes. Both parsers
/// (Pingora's and the lane's) can give their headers in this form.
pub type Field<'a> = (&'a [u8], &'a [u8]);

/// Header names compare without regard to case (RFC 9110 §5.1). For the
/// names the rules look at on every header, [`name::Name::of`] is quicker.
#[inline]
pub fn is(name: &[u8], lowercase: &str) -> bool {
    name.eq_ignore_ascii_case(lowercase.as_bytes())
}

/// The comma-separated elements of a list-valued header, trimmed.
pub fn elements(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&b| b == b',')
        .map(<[u8]>::trim_ascii)
        .filter(|e| !e.is_empty())
}
