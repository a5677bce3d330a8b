//! Which requests the lane takes, and the request it sends upstream.
//!
//! The lane takes only what it can relay without a protocol switch, with
//! no body or a length-framed one that has arrived whole with its head, and a
//! register whose small JSON body came with its head; everything else, and every request whose decision is not
//! "forward", "rank" or "register", goes back to the Pingora proxy unread. The
//! decision itself is the proxy's (`crate::proxy::decision`), and the headers
//! sent upstream follow the shared rules (`crate::proxy::rules::forward`).

use std::net::IpAddr;

use crate::browser::Caller;
use crate::edge::jwt::{self, Identity, Tokens};
use crate::proxy::decision::{decide, Decision, RequestHead};
use crate::proxy::rules::forward::{self, Hop, Peer, TrustedProxies};
use crate::proxy::rules::name::Name;
use crate::proxy::rules::Field;
use crate::queue_api::{input, Endpoint};

use super::response::push_field;
use crate::proxy::routes::RouteTable;

/// A request the lane takes.
pub enum Take {
    Forward(Plan),
    /// `GET /api/v1/queue/rank`, answered from Redis as the proxy does.
    Rank {
        query: Option<String>,
        /// What the request's headers say about who sent it.
        caller: Box<Caller>,
    },
    /// `POST /api/v1/queue/register` with an `application/json` body of
    /// `body` bytes (at most the API's limit), answered as the proxy does
    /// once the body is there.
    Register {
        body: usize,
        caller: Box<Caller>,
    },
}

/// A request to forward, ready to send.
pub struct Plan {
    pub route: usize,
    pub identity: Identity,
    /// The request as the upstream gets it.
    pub head: Vec<u8>,
    pub head_request: bool,
    /// Bytes of the request body (`Content-Length`), which the lane sends
    /// after `head` once they have all come with it.
    pub body: usize,
    /// Safe to send again (RFC 9110 §9.2.2): `GET`, `HEAD`, `PUT`, `DELETE`.
    pub idempotent: bool,
}

/// The largest request body the lane forwards. It forwards only a body
/// that has arrived whole with its head (read on without waiting, up to
/// this); a longer one, or one still on its way, streams through the
/// proxy (docs/api.md, "The direct lane").
pub const MAX_LANE_BODY_BYTES: usize = 16 * 1024;

/// A taken request and what its record needs.
pub struct Taken {
    pub take: Take,
    /// Bytes of the client's request head.
    pub consumed: usize,
    /// The client asked to close after this request.
    pub client_close: bool,
    pub request_id: String,
    /// The client as the access log names it (`forward::client`).
    pub client: Option<IpAddr>,
    pub method: &'static str,
    /// The path without the query, for the access log.
    pub path: String,
}

/// Whether the lane takes this request, and what it sends upstream.
/// `pooled` tells whether the lane holds a pool for a route (it has none
/// for a TLS upstream).
pub fn take(
    routes: &RouteTable,
    tokens: &Tokens,
    pooled: impl Fn(usize) -> bool,
    request: &httparse::Request<'_, '_>,
    consumed: usize,
    peer: Peer,
    trusted: &TrustedProxies,
) -> Option<Taken> {
    if request.version != Some(1) {
        return None;
    }
    let (method, head_request) = match request.method? {
        "GET" => ("GET", false),
        "HEAD" => ("HEAD", true),
        "POST" => ("POST", false),
        "PUT" => ("PUT", false),
        "PATCH" => ("PATCH", false),
        "DELETE" => ("DELETE", false),
        _ => return None,
    };
    // GET and HEAD come without a body; the others may carry one, framed
    // by one Content-Length (a chunked body or `Expect` is the proxy's).
    let may_have_body = !matches!(method, "GET" | "HEAD");
    let target = request.path?.as_bytes();
    if !target.starts_with(b"/") {
        return None;
    }
    let register = method == "POST"
        && target.split(|&b| b == b'?').next() == Some(Endpoint::Register.path().as_bytes());
    let fields = request.headers.iter().map(|h| (h.name.as_bytes(), h.value));
    let mut client_close = false;
    let mut connection_headers = 0;
    // The body: one Content-Length of plain digits; for a register, within
    // the API's limit and with one JSON Content-Type (anything else is the
    // proxy's to answer).
    let mut body = None;
    let mut json = None;
    for (name, value) in fields.clone() {
        if register && name.eq_ignore_ascii_case(b"content-type") {
            if json.is_some() {
                return None;
            }
            json = Some(input::is_json_value(value));
            continue;
        }
        match Name::of(name) {
            Name::ContentLength if may_have_body && body.is_none() => {
                let length = crate::wire::length::content_length(value).bytes()?;
                let limit = if register {
                    input::MAX_QUEUE_BODY_BYTES
                } else {
                    MAX_LANE_BODY_BYTES
                };
                if length > limit as u64 {
                    return None;
                }
                body = Some(length as usize);
            }
            Name::ContentLength | Name::TransferEncoding | Name::Upgrade | Name::Expect => {
                return None
            }
            Name::Connection => {
                // Pingora reads keep-alive from the first of several; the
                // lane leaves such requests to it.
                connection_headers += 1;
                if connection_headers > 1 {
                    return None;
                }
                for token in crate::proxy::rules::elements(value) {
                    if token.eq_ignore_ascii_case(b"close") {
                        client_close = true;
                    } else if !token.eq_ignore_ascii_case(b"keep-alive") {
                        // It names another header: rare, left to the proxy.
                        return None;
                    }
                }
            }
            _ => {}
        }
    }

    let head = RequestHead {
        method,
        http11: true,
        target,
        authority: None,
        fields: fields.clone(),
    };
    let take = match decide(routes, tokens, &head, jwt::now_s()) {
        Decision::Forward {
            route,
            identity,
            origin: None,
            upgrade: false,
        } if pooled(route) && !register => {
            let request_id = forward::request_id(peer, fields.clone());
            let client = forward::client(peer, fields.clone(), trusted);
            let head = upstream_head(method, target, fields, peer, &identity, &request_id);
            return Some(Taken {
                take: Take::Forward(Plan {
                    route,
                    identity,
                    head,
                    head_request,
                    body: body.unwrap_or(0),
                    idempotent: !matches!(method, "POST" | "PATCH"),
                }),
                consumed,
                client_close,
                request_id,
                client,
                method,
                path: path_of(target),
            });
        }
        Decision::Queue(Endpoint::Register) if register && json == Some(true) => Take::Register {
            body: body?,
            caller: Box::new(Caller::from_fields(fields.clone())),
        },
        Decision::Queue(Endpoint::Rank) if method == "GET" => Take::Rank {
            query: target
                .iter()
                .position(|&b| b == b'?')
                .map(|at| String::from_utf8_lossy(&target[at + 1..]).into_owned()),
            caller: Box::new(Caller::from_fields(fields.clone())),
        },
        _ => return None,
    };
    Some(Taken {
        take,
        consumed,
        client_close,
        request_id: forward::request_id(peer, fields.clone()),
        client: forward::client(peer, fields, trusted),
        method,
        path: path_of(target),
    })
}

/// The request line and headers the upstream gets.
fn upstream_head<'a>(
    method: &str,
    target: &[u8],
    fields: impl Iterator<Item = Field<'a>> + Clone,
    peer: Peer,
    identity: &Identity,
    request_id: &str,
) -> Vec<u8> {
    let hop = Hop::new(fields.clone(), false, peer.trusted);
    let added = forward::Added::new(
        &peer,
        "http",
        fields.clone(),
        &identity.user,
        &identity.queue,
        request_id,
    );
    let mut head = Vec::with_capacity(512);
    head.extend_from_slice(method.as_bytes());
    head.push(b' ');
    head.extend_from_slice(target);
    head.extend_from_slice(b" HTTP/1.1\r\n");
    for field in fields {
        if hop.forwards(field.0) {
            push_field(&mut head, field);
        }
    }
    for (name, value) in added.fields() {
        push_field(&mut head, (name.as_bytes(), value.as_bytes()));
    }
    head.extend_from_slice(b"\r\n");
    head
}

fn path_of(target: &[u8]) -> String {
    let path = target.split(|&b| b == b'?').next().unwrap_or(target);
    String::from_utf8_lossy(path).into_owned()
}
