//! Sends a planned request upstream and relays the response to the client.
//!
//! The response's head is judged by the shared rules (`super::response`);
//! its body is relayed as it comes, tracking only where it ends:
//! - `Content-Length` bodies are relayed byte for byte; chunked ones keep
//!   their data but are re-framed (`super::chunked`), as Pingora's proxy
//!   re-frames them;
//! - a body that ends when the upstream closes is sent on as chunked, as
//!   Pingora's proxy does, so the client connection survives it.
//!
//! The upstream connection goes back to the pool only when the response
//! ended exactly where its framing said, with nothing read past it, and
//! the upstream did not ask to close. Once the client has been promised a
//! reply (the upstream's head was accepted), a failure can only close the
//! client connection: see `crate::proxy::rules::failure`.

use bytes::{Buf, BytesMut};
use pingora::protocols::Stream;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::io::{send, Lane, READ_SIZE};
use super::request::Plan;
use super::response::{self, push_field, Response, MAX_RESPONSE_HEAD};
use crate::proxy::rules::failure::{why, Failure, Logged};
use crate::proxy::rules::forward::REQUEST_ID;
use crate::proxy::rules::pool::Pool;
use crate::proxy::rules::response::{client_body, Body, ClientBody};
use crate::shutdown::InFlight;

use crate::proxy::rules::chunked::{self, ChunkedEnd};

/// How a forwarded request ended.
pub struct Outcome {
    /// The status the client got (0 if none).
    pub status: u16,
    pub lane: Lane,
    /// Why the upstream failed, when it did.
    pub failed: Option<Logged>,
}

/// Why forwarding failed: how the client is answered, and what the access
/// log says.
#[derive(Debug, Clone, Copy)]
pub struct Failed {
    failure: Failure,
    logged: Logged,
}

/// A failure with no refused rule to name.
pub const fn failed(failure: Failure, error: &'static str) -> Failed {
    Failed {
        failure,
        logged: Logged::new(error),
    }
}

/// A failure the rules caused: they refused the upstream's answer, with
/// the rule named when there is one.
const fn refused(error: &'static str, reason: Option<&'static str>) -> Failed {
    Failed {
        failure: Failure::Unavailable,
        logged: Logged { error, reason },
    }
}

/// The client's connection failed while the reply was being written.
const GONE: Failed = failed(Failure::ClientGone, "the client went away");

/// Sends the request and relays the response. `close`: the client
/// connection ends after this reply, as the request asked or because the
/// server is draining (as of when the reply is written). `release` is
/// called when the response head says the backend released the user,
/// before any of it reaches the client (as the Pingora path does in its
/// response filter).
pub async fn forward(
    pool: &Pool,
    plan: &Plan,
    client: &mut Stream,
    (close, in_flight): (bool, &InFlight),
    request_id: &str,
    release: impl FnOnce(),
) -> Outcome {
    let mut buf = BytesMut::with_capacity(8 * 1024);
    let (conn, response) = match exchange(pool, plan, &mut buf, client).await {
        Ok(answer) => answer,
        Err(failed) => return fail(failed, plan, client, request_id).await,
    };
    if response.release {
        release();
    }
    // waitgate's own headers in the order Pingora's proxy writes them, so
    // that the two paths' replies are the same bytes.
    let mut out = response.head;
    push_field(&mut out, (REQUEST_ID.as_bytes(), request_id.as_bytes()));
    // The lane's clients speak HTTP/1.1; a chunked upstream's own
    // `Transfer-Encoding` was relayed.
    if response.body != Body::Chunked && client_body(response.body, true) == ClientBody::Chunked {
        push_field(&mut out, (b"Transfer-Encoding", b"chunked"));
    }
    let date = pingora::protocols::http::date::get_cached_date();
    push_field(&mut out, (b"Date", date.as_bytes()));
    let close = close || in_flight.draining();
    let connection: &[u8] = if close { b"close" } else { b"keep-alive" };
    push_field(&mut out, (b"Connection", connection));
    out.extend_from_slice(b"\r\n");

    let relayed = relay(
        conn,
        pool,
        response.upstream_close,
        &mut buf,
        response.body,
        out,
        client,
    )
    .await;
    let lane = match relayed {
        Ok(()) if client.flush().await.is_ok() && !close => Lane::Served,
        Ok(()) => Lane::Closed,
        Err(failed) => {
            return Outcome {
                status: response.status,
                lane: Lane::Closed,
                failed: logged(failed),
            }
        }
    };
    Outcome {
        status: response.status,
        lane,
        failed: None,
    }
}

/// Answers a request that failed before any reply was sent, as the proxy
/// would (see `crate::proxy::rules::failure`), and ends the connection.
pub async fn fail(failed: Failed, plan: &Plan, client: &mut Stream, request_id: &str) -> Outcome {
    let status = match failed.failure.reply(false) {
        Some(reply) => {
            let reply = reply.header(REQUEST_ID, request_id);
            send(client, &reply, plan.head_request, false).await;
            reply.status
        }
        None => 0,
    };
    Outcome {
        status,
        lane: Lane::Closed,
        failed: logged(failed),
    }
}

/// What the access log says of a failure: nothing when the client went
/// away, as on Pingora's path (`failure::logged`).
fn logged(failed: Failed) -> Option<Logged> {
    (failed.failure != Failure::ClientGone).then_some(failed.logged)
}

/// Sends the request head and reads the final response head, relaying any
/// interim (1xx) response to the client. A kept-alive connection that fails
/// before any answer (the upstream closed it as it was taken) is retried
/// once on a new connection, for an idempotent method only (`GET`, `HEAD`,
/// `PUT`, `DELETE`), as on Pingora's path (`Gate::error_while_proxy`): a
/// `POST` or `PATCH` the upstream may have acted on is not sent twice.
async fn exchange(
    pool: &Pool,
    plan: &Plan,
    buf: &mut BytesMut,
    client: &mut Stream,
) -> Result<(TcpStream, Response), Failed> {
    let mut fresh_only = false;
    loop {
        let (mut conn, reused) = match (!fresh_only).then(|| pool.take()).flatten() {
            Some(conn) => (conn, true),
            None => (
                pool.connect().await.map_err(|f| failed(f, why::CONNECT))?,
                false,
            ),
        };
        buf.clear();
        let mut relayed = false;
        let sent = pingora::time::timeout(pool.read_timeout, conn.write_all(&plan.head)).await;
        let answer = match sent {
            Ok(Ok(())) => {
                read_head(
                    &mut conn,
                    pool,
                    buf,
                    plan.head_request,
                    client,
                    &mut relayed,
                )
                .await
            }
            Ok(Err(_)) => Err(failed(Failure::Unavailable, why::SEND)),
            Err(_) => Err(failed(Failure::Timeout, why::SEND_TIMEOUT)),
        };
        match answer {
            Ok(response) => return Ok((conn, response)),
            Err(Failed {
                failure: Failure::Unavailable,
                ..
            }) if reused && buf.is_empty() && !relayed && plan.idempotent => fresh_only = true,
            Err(failure) => return Err(failure),
        }
    }
}

/// Reads response heads until a final one. Interim (1xx) ones go to the
/// client as Pingora's proxy sends them: held while more of the upstream's
/// bytes are already read, and sent before waiting for more (`relayed`
/// then says so). So an interim answer reaches the client at once when the
/// final one is slow, and one read together with a head that is refused is
/// dropped with it: the client then gets the 502 alone, on either path.
async fn read_head(
    conn: &mut TcpStream,
    pool: &Pool,
    buf: &mut BytesMut,
    head_request: bool,
    client: &mut Stream,
    relayed: &mut bool,
) -> Result<Response, Failed> {
    let mut interim = Vec::new();
    loop {
        if !buf.is_empty() {
            match response::parse(buf, head_request).map_err(|r| refused(why::HEAD_REFUSED, r.0))? {
                Some(response) if response.interim => {
                    interim.extend_from_slice(&response.head);
                    interim.extend_from_slice(b"\r\n");
                    buf.advance(response.consumed);
                    continue;
                }
                Some(response) => {
                    buf.advance(response.consumed);
                    if !interim.is_empty() {
                        client.write_all(&interim).await.map_err(|_| GONE)?;
                    }
                    return Ok(response);
                }
                None => {}
            }
            if buf.len() >= MAX_RESPONSE_HEAD {
                return Err(failed(Failure::Unavailable, why::HEAD_TOO_LARGE));
            }
        }
        if !interim.is_empty() {
            client.write_all(&interim).await.map_err(|_| GONE)?;
            client.flush().await.map_err(|_| GONE)?;
            interim.clear();
            *relayed = true;
        }
        buf.reserve(READ_SIZE);
        match pingora::time::timeout(pool.read_timeout, conn.read_buf(buf)).await {
            Ok(Ok(n)) if n > 0 => {}
            Ok(_) => return Err(failed(Failure::Unavailable, why::CLOSED_BEFORE_RESPONSE)),
            Err(_) => return Err(failed(Failure::Timeout, why::NO_RESPONSE)),
        }
    }
}

/// Relays the body after the head in `out`. The upstream connection goes
/// back to the pool if the response ended exactly where its framing says
/// (and the upstream keeps it open), before the client gets the last bytes:
/// a client's next request then finds it there.
///
/// On failure, what was relayed so far (at least the head) still goes to
/// the client before its connection is closed, as Pingora's proxy sends the
/// head as soon as it has it: the client sees the same cut-short reply
/// whichever path served it.
async fn relay(
    conn: TcpStream,
    pool: &Pool,
    upstream_close: bool,
    buf: &mut BytesMut,
    body: Body,
    mut out: Vec<u8>,
    client: &mut Stream,
) -> Result<(), Failed> {
    match relay_body(conn, pool, upstream_close, buf, body, &mut out, client).await {
        Ok(()) => Ok(()),
        Err(why) => {
            if !out.is_empty() {
                let _ = client.write_all(&out).await;
            }
            Err(why)
        }
    }
}

async fn relay_body(
    mut conn: TcpStream,
    pool: &Pool,
    upstream_close: bool,
    buf: &mut BytesMut,
    body: Body,
    out: &mut Vec<u8>,
    client: &mut Stream,
) -> Result<(), Failed> {
    let mut chunks = ChunkedEnd::default();
    let mut left = match body {
        Body::Length(n) => n,
        _ => 0,
    };
    loop {
        // Move what the upstream sent so far into `out`, up to the body's end.
        let done = match body {
            Body::Empty => true,
            Body::Length(_) => {
                let take = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                out.extend_from_slice(&buf[..take]);
                buf.advance(take);
                left -= take as u64;
                left == 0
            }
            Body::Chunked => match chunks
                .feed(buf, out)
                .map_err(|_| refused(why::BODY_REFUSED, Some(chunked::REFUSED)))?
            {
                Some(end) => {
                    buf.advance(end);
                    true
                }
                None => {
                    buf.clear();
                    false
                }
            },
            Body::UntilClose => {
                if !buf.is_empty() {
                    out.extend_from_slice(format!("{:X}\r\n", buf.len()).as_bytes());
                    out.extend_from_slice(buf);
                    out.extend_from_slice(b"\r\n");
                    buf.clear();
                }
                false
            }
            Body::Tunnel => return Err(failed(Failure::Unavailable, why::SWITCHED)),
        };
        if done {
            // Anything read past the end was never asked for: do not reuse.
            if buf.is_empty() && !upstream_close {
                pool.put(conn);
            }
            let written = client.write_all(out).await;
            out.clear();
            return written.map_err(|_| GONE);
        }
        if !out.is_empty() {
            let written = client.write_all(out).await;
            out.clear();
            written.map_err(|_| GONE)?;
        }
        buf.reserve(READ_SIZE);
        match pingora::time::timeout(pool.read_timeout, conn.read_buf(buf)).await {
            Ok(Ok(0)) if body == Body::UntilClose => {
                return client.write_all(b"0\r\n\r\n").await.map_err(|_| GONE);
            }
            Ok(Ok(n)) if n > 0 => {}
            Ok(_) => return Err(failed(Failure::Unavailable, why::CLOSED_MID_BODY)),
            Err(_) => return Err(failed(Failure::Timeout, why::STALLED_MID_BODY)),
        }
    }
}
