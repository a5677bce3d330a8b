//! The two HTTP paths, compared: one corpus of client requests against a
//! scripted upstream's many behaviours, sent to a waitgate with the direct
//! lane on and to one with it off. For every case the client must get the
//! same answer (status, headers in the same order, their values but
//! `Date`'s, decoded body, and whether the connection was left open, cut
//! short or closed) and the upstream must receive the same requests, byte
//! for byte but for the random `X-Request-Id`. Registrations, which the lane answers too, are
//! compared the same way (with the random credential and the clock-bound
//! wait estimate hidden), and each side's Redis must then hold the same
//! waiting users.
//!
//! Each case carries its number in its path, so that what each upstream saw
//! can be matched to it. Cases run in parallel, as real clients would.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::scripted::{ok, Recorded, Scripted, Step};
use common::*;

const PROTECTED: &str = "/api/v1/follow-up";

/// The upstream's behaviours: what it answers to a request whose path is
/// `/api/v1/follow-up/b/<name>/...`. `head` tells whether the request was
/// HEAD (an upstream answers those without a body, or not).
fn behaviour(name: &str, head: bool) -> Option<Vec<Step>> {
    let send = |b: &[u8]| Step::Send(b.to_vec());
    let pause = |ms| Step::Pause(Duration::from_millis(ms));
    let body_unless_head = |with_body: &[u8], head_only: &[u8]| {
        if head {
            send(head_only)
        } else {
            send(with_body)
        }
    };
    // A response's head, then its body unless the request was a HEAD.
    let head_then =
        |head_only: &[u8], body: &[u8]| body_unless_head(&[head_only, body].concat(), head_only);
    Some(match name {
        "ok" => vec![head_then(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\n", b"hello")],
        "empty" => vec![send(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")],
        "chunked" => vec![head_then(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", b"5;x=1\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")],
        "trailers" => vec![head_then(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n", b"3\r\nabc\r\n0\r\nX-Sum: 7\r\n\r\n")],
        "until-close" => vec![
            head_then(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n", b"until the end"),
            Step::Close,
        ],
        "http10" => vec![head_then(b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\n", b"old")],
        "http10-close" => vec![
            head_then(b"HTTP/1.0 200 OK\r\n\r\n", b"old and closing"),
            Step::Close,
        ],
        "keep-alive-10" => vec![head_then(b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\n", b"ka")],
        "no-content" => vec![send(b"HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n")],
        "not-modified" => vec![send(
            b"HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\nContent-Length: 10\r\n\r\n",
        )],
        "head-with-body" => vec![send(
            b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nbody",
        )],
        "extra-bytes" => vec![head_then(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n", b"hiEXTRA")],
        "late-bytes" => vec![
            head_then(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n", b"hi"),
            pause(150),
            send(b"HTTP/1.1 302 Found\r\nSet-Cookie: s=evil\r\nContent-Length: 0\r\n\r\n"),
        ],
        "chunked-extra" => vec![send(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\nEXTRA",
        )],
        "cl-plus" => vec![send(b"HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\nhello"), Step::Close],
        "cl-two" => vec![
            send(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!"),
            Step::Close,
        ],
        "cl-same-twice" => vec![head_then(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", b"hello")],
        "cl-list" => vec![send(b"HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\nhello"), Step::Close],
        "te-comma" => vec![
            send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked,\r\n\r\n2\r\nhi\r\n0\r\n\r\nSMUGGLED"),
            Step::Close,
        ],
        "te-gzip" => vec![
            send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nzzz"),
            Step::Close,
        ],
        "reset" => vec![Step::Reset],
        "close" => vec![Step::Close],
        "stall" => vec![pause(1_500)],
        "cut-length" => vec![
            send(b"HTTP/1.1 200 OK\r\nContent-Length: 70\r\n\r\nhello"),
            pause(50),
            Step::Close,
        ],
        "cut-chunked" => vec![
            send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"),
            pause(50),
            Step::Close,
        ],
        "bad-chunks" => vec![
            send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nnope\r\n"),
            Step::Close,
        ],
        "early-hints" => vec![
            send(b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"),
            head_then(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n", b"ok"),
        ],
        "switch" => vec![send(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
        )],
        "garbage" => vec![send(b"SSH-2.0-OpenSSH_9.2\r\n\r\n"), Step::Close],
        "bare-lf-chunks" => vec![
            send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\nabc\n0\n\n"),
            Step::Close,
        ],
        "lf-in-extension" => vec![head_then(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", b"8;e\nab\r\nwxyzwxyz\r\n10\r\n0\r\n\r\nHTTP/1.1 20\r\n0\r\n\r\n")],
        "size-space" => vec![
            send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5 6\r\nhello\r\n0\r\n\r\n"),
            Step::Close,
        ],
        "cl-huge" => vec![
            send(b"HTTP/1.1 200 OK\r\nContent-Length: 9999999999999999999\r\n\r\nhello"),
            Step::Close,
        ],
        "length-and-chunked" => vec![
            send(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n"),
            Step::Close,
        ],
        "many-headers" => {
            let mut text = String::from("HTTP/1.1 200 OK\r\n");
            for i in 0..120 {
                text.push_str(&format!("X-H{i}: {i}\r\n"));
            }
            text.push_str("Content-Length: 2\r\n\r\n");
            let mut bytes = text.into_bytes();
            if !head {
                bytes.extend_from_slice(b"ok");
            }
            vec![Step::Send(bytes)]
        }
        "hop-headers" => vec![head_then(b"HTTP/1.1 200 OK\r\nConnection: X-Hop, keep-alive\r\nKeep-Alive: timeout=5\r\nX-Hop: secret\r\nProxy-Connection: keep-alive\r\nX-Kept: yes\r\nContent-Length: 2\r\n\r\n", b"ok")],
        "folded" => vec![head_then(b"HTTP/1.1 200 OK\r\nX-Folded: one\r\n\t two\r\nContent-Length: 2\r\n\r\n", b"ok")],
        "own-headers" => vec![head_then(b"HTTP/1.1 200 OK\r\nDate: Thu, 01 Jan 1970 00:00:00 GMT\r\nX-Request-Id: upstream-made\r\nContent-Length: 2\r\n\r\n", b"ok")],
        "odd-status" => vec![head_then(b"HTTP/1.1 299 Very Fine Indeed\r\nContent-Length: 2\r\n\r\n", b"ok")],
        "status-below-100" => vec![head_then(b"HTTP/1.1 099 Odd\r\nContent-Length: 2\r\n\r\n", b"ok")],
        "interim-slow" => vec![
            send(b"HTTP/1.1 102 Processing\r\n\r\n"),
            Step::Pause(Duration::from_millis(400)),
            head_then(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n", b"ok"),
        ],
        "server-error" => vec![head_then(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 6\r\n\r\n", b"broken")],
        "redirect" => vec![send(
            b"HTTP/1.1 302 Found\r\nLocation: /elsewhere\r\nSet-Cookie: a=1; HttpOnly\r\nSet-Cookie: b=2\r\nContent-Length: 0\r\n\r\n",
        )],
        "large" => {
            let body: Vec<u8> = (0..200_000u32).map(|i| b'a' + (i % 26) as u8).collect();
            let mut bytes =
                format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
            if !head {
                bytes.extend_from_slice(&body);
            }
            vec![Step::Send(bytes)]
        }
        "slow-body" => vec![
            send(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n"),
            pause(100),
            body_unless_head(b"slow", b""),
        ],
        "bare-lf" => vec![head_then(b"HTTP/1.1 200 OK\nContent-Length: 2\n\n", b"lf")],
        "space-before-colon" => vec![head_then(b"HTTP/1.1 200 OK\r\nContent-Length : 2\r\n\r\n", b"sp")],
        _ => return None,
    })
}

const BEHAVIOURS: &[&str] = &[
    "ok",
    "empty",
    "chunked",
    "trailers",
    "until-close",
    "http10",
    "http10-close",
    "keep-alive-10",
    "no-content",
    "not-modified",
    "head-with-body",
    "extra-bytes",
    "chunked-extra",
    "cl-plus",
    "cl-two",
    "cl-same-twice",
    "cl-list",
    "te-comma",
    "te-gzip",
    "reset",
    "close",
    "stall",
    "cut-length",
    "cut-chunked",
    "bad-chunks",
    "early-hints",
    "switch",
    "garbage",
    "bare-lf-chunks",
    "lf-in-extension",
    "size-space",
    "cl-huge",
    "length-and-chunked",
    "many-headers",
    "hop-headers",
    "folded",
    "own-headers",
    "odd-status",
    "status-below-100",
    "interim-slow",
    "server-error",
    "redirect",
    "large",
    "slow-body",
    "bare-lf",
    "space-before-colon",
];

/// Behaviours whose bytes arrive while the upstream connection is idle.
/// An upstream that answers late, at the moment the next request on that
/// connection is in flight, cannot be told apart from its answer by any
/// HTTP/1.1 proxy; so these cases run one at a time, each with the
/// connection quiet again before the next request, and each is followed by
/// a probe that must get its own answer.
const LATE: &[&str] = &["late-bytes"];

/// The behaviour a recorded request asked for.
fn script(r: &Recorded) -> Vec<Step> {
    let name = r
        .path()
        .split("/b/")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap_or("ok");
    behaviour(name, r.method == "HEAD").unwrap_or_else(|| vec![Step::Send(ok(r.path()))])
}

/// One case: the bytes a client sends on one connection, and the methods of
/// the requests in them (a HEAD's answer has no body).
struct Case {
    id: usize,
    bytes: Vec<u8>,
    methods: Vec<String>,
    /// Run alone, then wait for the upstream's late bytes (see [`LATE`]).
    alone: bool,
}

fn corpus(token: &str) -> Vec<Case> {
    let mut cases = Vec::new();
    let auth = format!("Authorization: Bearer {token}\r\n");
    let add = |cases: &mut Vec<Case>, build: &dyn Fn(usize) -> (String, Vec<&'static str>)| {
        let id = cases.len();
        let (text, methods) = build(id);
        cases.push(Case {
            id,
            bytes: text.into_bytes(),
            methods: methods.into_iter().map(str::to_string).collect(),
            alone: false,
        });
    };
    for &b in BEHAVIOURS {
        let base = move |id: usize| format!("{PROTECTED}/b/{b}/c{id}");
        // The lane's kind of request.
        add(&mut cases, &|id| {
            (
                format!(
                    "GET {}?q=1 HTTP/1.1\r\nHost: tickets\r\n{auth}\r\n",
                    base(id)
                ),
                vec!["GET"],
            )
        });
        add(&mut cases, &|id| {
            (
                format!("HEAD {} HTTP/1.1\r\nHost: tickets\r\n{auth}\r\n", base(id)),
                vec!["HEAD"],
            )
        });
        // Spoofed identity and forwarding headers, and a close.
        add(&mut cases, &|id| {
            (
                format!(
                    "GET {} HTTP/1.1\r\nHost: tickets\r\n{auth}X_Waitgate_User: mallory\r\nX-Waitgate-Queue: evil\r\nX-Forwarded-For: 6.6.6.6\r\nX-Request-Id: mine\r\nConnection: close\r\n\r\n",
                    base(id)
                ),
                vec!["GET"],
            )
        });
        // HTTP/1.0, keeping its connection: never a chunked body.
        add(&mut cases, &|id| {
            (
                format!(
                    "GET {} HTTP/1.0\r\nHost: tickets\r\nConnection: keep-alive\r\n{auth}\r\n",
                    base(id)
                ),
                vec!["GET"],
            )
        });
        // A body, which came with its head.
        add(&mut cases, &|id| {
            (
                format!(
                    "POST {} HTTP/1.1\r\nHost: tickets\r\n{auth}Content-Type: text/plain\r\nContent-Length: 4\r\n\r\nbody",
                    base(id)
                ),
                vec!["POST"],
            )
        });
        // Two requests in one write, the second a plain one.
        if !matches!(b, "late-bytes" | "stall") {
            add(&mut cases, &|id| {
                (
                    format!(
                        "GET {} HTTP/1.1\r\nHost: tickets\r\n{auth}\r\nGET {PROTECTED}/b/ok/c{id}-2 HTTP/1.1\r\nHost: tickets\r\n{auth}\r\n",
                        base(id)
                    ),
                    vec!["GET", "GET"],
                )
            });
        }
    }
    for &b in LATE {
        for method in ["GET", "HEAD", "POST"] {
            add(&mut cases, &|id| {
                let body = if method == "POST" {
                    "Content-Length: 2\r\n\r\nhi"
                } else {
                    "\r\n"
                };
                (
                    format!("{method} {PROTECTED}/b/{b}/c{id} HTTP/1.1\r\nHost: t\r\n{auth}{body}"),
                    vec![method],
                )
            });
            // The probe: a plain request after the late bytes have come.
            add(&mut cases, &|id| {
                (
                    format!("GET {PROTECTED}/b/ok/c{id} HTTP/1.1\r\nHost: t\r\n{auth}\r\n"),
                    vec!["GET"],
                )
            });
        }
    }
    let first_alone = cases.len() - LATE.len() * 6;
    for case in &mut cases[first_alone..] {
        case.alone = true;
    }
    // Hostile and unusual requests, against a well-behaved upstream.
    let hostile: Vec<(String, Vec<&str>)> = vec![
        ("GET {P} HTTP/1.1\r\nHost: t\r\n\r\n".into(), vec!["GET"]),
        ("GET {P} HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer nope\r\n\r\n".into(), vec!["GET"]),
        ("GET {P} HTTP/1.1\r\nAUTH\r\n\r\n".into(), vec!["GET"]),
        ("GET {P} HTTP/1.1\r\nHost: a\r\nHost: b\r\nAUTH\r\n\r\n".into(), vec!["GET"]),
        ("GET {P}/..  HTTP/1.1\r\nHost: t\r\nAUTH\r\n\r\n".into(), vec!["GET"]),
        ("GET {P}/a b HTTP/1.1\r\nHost: t\r\nAUTH\r\n\r\n".into(), vec!["GET"]),
        ("GET {P}/a\"b HTTP/1.1\r\nHost: t\r\nAUTH\r\n\r\n".into(), vec!["GET"]),
        ("GET {P}/%EA%B3%B5%EC%97%B0 HTTP/1.1\r\nHost: t\r\nAUTH\r\n\r\n".into(), vec!["GET"]),
        ("GET {P}/%EF%BC%8F HTTP/1.1\r\nHost: t\r\nAUTH\r\n\r\n".into(), vec!["GET"]),
        ("GET {P} HTTP/1.1\r\nHost: a b\r\nAUTH\r\n\r\n".into(), vec!["GET"]),
        ("GET {P} HTTP/1.1\r\nHost : t\r\nAUTH\r\n\r\n".into(), vec!["GET"]),
        ("GET {P} HTTP/1.1\r\nHost: t\r\nAUTH\r\nX-A: b\r\n c\r\n\r\n".into(), vec!["GET"]),
        ("GET {P} HTTP/1.2\r\nHost: t\r\nAUTH\r\n\r\n".into(), vec!["GET"]),
        ("GET {P} HTTP/1.1\r\nHost: t\r\nConnection: authorization\r\nAUTH\r\n\r\n".into(), vec!["GET"]),
        ("GET {P} HTTP/1.0\r\nAUTH\r\n\r\n".into(), vec!["GET"]),
        ("GET {P}/a<b HTTP/1.1\r\nHost: t\r\nAUTH\r\n\r\n".into(), vec!["GET"]),
        ("GET {P}/a`b HTTP/1.1\r\nHost: t\r\nAUTH\r\n\r\n".into(), vec!["GET"]),
        ("GET {P}?x# HTTP/1.1\r\nHost: t\r\nAUTH\r\n\r\n".into(), vec!["GET"]),
        ("GET {P}/../admin HTTP/1.1\r\nHost: t\r\nAUTH\r\n\r\n".into(), vec!["GET"]),
        ("GET {P}/%2e%2e/admin HTTP/1.1\r\nHost: t\r\nAUTH\r\n\r\n".into(), vec!["GET"]),
        ("GET {P}//x HTTP/1.1\r\nHost: t\r\nAUTH\r\n\r\n".into(), vec!["GET"]),
        ("GET {P}/a;b HTTP/1.1\r\nHost: t\r\nAUTH\r\n\r\n".into(), vec!["GET"]),
        ("GET http://evil.example{P}/abs HTTP/1.1\r\nHost: t\r\nAUTH\r\n\r\n".into(), vec!["GET"]),
        ("GET {P} HTTP/1.1\r\nHost: t\r\nAUTH\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n".into(), vec!["GET"]),
        ("GET {P} HTTP/1.1\r\nHost: t\r\nAUTH\r\nConnection: X-Secret\r\nX-Secret: s\r\n\r\n".into(), vec!["GET"]),
        ("GET {P} HTTP/1.1\r\nHost: t\r\nAUTH\r\nTE: trailers\r\nKeep-Alive: 5\r\n\r\n".into(), vec!["GET"]),
        // Fields the upstream must not get, between others that keep their
        // order.
        ("GET {P} HTTP/1.1\r\nHost: t\r\nKeep-Alive: 5\r\nX-One: 1\r\nAUTH\r\nProxy-Connection: keep-alive\r\nX-Two: 2\r\nX-Three: 3\r\n\r\n".into(), vec!["GET"]),
        ("POST {P} HTTP/1.1\r\nHost: t\r\nTE: trailers\r\nAUTH\r\nX-One: 1\r\nContent-Type: application/json\r\nContent-Length: 2\r\nX-Two: 2\r\n\r\n{}".into(), vec!["POST"]),
        ("GET {P} HTTP/1.1\r\nHost: t\r\nAUTH\r\nExpect: 100-continue\r\n\r\n".into(), vec!["GET"]),
        ("GET {P} HTTP/1.1\r\nHost: t\r\nAUTH\r\nContent-Length: 0\r\n\r\n".into(), vec!["GET"]),
        ("GET {P} HTTP/1.1\r\nHost: t\r\nAUTH\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc".into(), vec!["GET"]),
        ("GET {P} HTTP/1.1\r\nHost: t\r\nAUTH\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n".into(), vec!["GET"]),
        ("POST {P} HTTP/1.1\r\nHost: t\r\nAUTH\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nbody\r\n0\r\n\r\n".into(), vec!["POST"]),
        ("DELETE {P} HTTP/1.1\r\nHost: t\r\nAUTH\r\n\r\n".into(), vec!["DELETE"]),
        ("OPTIONS {P} HTTP/1.1\r\nHost: t\r\nAUTH\r\n\r\n".into(), vec!["OPTIONS"]),
        ("GET /nowhere HTTP/1.1\r\nHost: t\r\nAUTH\r\n\r\n".into(), vec!["GET"]),
        ("GET /api/v1/queue/rank?userId=fan HTTP/1.1\r\nHost: t\r\n\r\n".into(), vec!["GET"]),
        ("GET /api/v1/queue/rank?userId=nobody HTTP/1.1\r\nHost: t\r\n\r\n".into(), vec!["GET"]),
        ("GET /api/v1/queue/rank?userId=a&queue=baseball#x HTTP/1.1\r\nHost: t\r\n\r\n".into(), vec!["GET"]),
        ("HEAD /api/v1/queue/rank?userId=fan HTTP/1.1\r\nHost: t\r\n\r\n".into(), vec!["HEAD"]),
        ("GET {P} HTTP/1.1\r\nhost: t\r\nauthorization: bearer TOKEN\r\n\r\n".into(), vec!["GET"]),
        ("GET {P} HTTP/1.1\r\nHost: t\r\nAUTH\r\nX-Long: LONG\r\n\r\n".into(), vec!["GET"]),
        ("GET {P} HTTP/1.1\r\nHost: victim@evil.example\r\nAUTH\r\n\r\n".into(), vec!["GET"]),
        ("GET {P} HTTP/1.1\r\nHost: t\r\nAUTH\r\nConnection: keep-alive, keep-alive, keep-alive, keep-alive, keep-alive, keep-alive, keep-alive, keep-alive, keep-alive, keep-alive\r\n\r\n".into(), vec!["GET"]),
        ("GET {P} HTTP/1.1\r\nHost: t\r\nAUTH\r\nConnection: x-forwarded-for\r\n\r\n".into(), vec!["GET"]),
        ("GET {P} HTTP/1.1\r\nHost: t\r\nAUTH\r\nProxy-Authorization: Basic c2VjcmV0\r\nTrailer: X-A\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n".into(), vec!["GET"]),
        ("GET {P} HTTP/1.1\r\nHost: t\r\nAUTH\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n".into(), vec!["GET"]),
        ("\r\nGET {P}?a#frag HTTP/1.1\r\nHost: t\r\nAUTH\r\n\r\n".into(), vec!["GET"]),
        ("GET {P} HTTP/1.1\r\nHost: t\r\nAUTH\r\n\r\nGARBAGE\r\n\r\n".into(), vec!["GET", "GET"]),
        // Dot segments a server could read behind spaces, dots or an
        // escaped `;`.
        ("GET {P}/..%20/x HTTP/1.1\r\nHost: t\r\nAUTH\r\n\r\n".into(), vec!["GET"]),
        ("GET {P}/%20../x HTTP/1.1\r\nHost: t\r\nAUTH\r\n\r\n".into(), vec!["GET"]),
        ("GET {P}/.%20/x HTTP/1.1\r\nHost: t\r\nAUTH\r\n\r\n".into(), vec!["GET"]),
        ("GET {P}/..%3B/x HTTP/1.1\r\nHost: t\r\nAUTH\r\n\r\n".into(), vec!["GET"]),
        ("GET {P}/.../x HTTP/1.1\r\nHost: t\r\nAUTH\r\n\r\n".into(), vec!["GET"]),
        // Forwarding headers a client may not write.
        ("GET {P} HTTP/1.1\r\nHost: t\r\nAUTH\r\nForwarded: for=6.6.6.6;proto=https\r\nX-Real-IP: 6.6.6.6\r\nTrue-Client-IP: 6.6.6.6\r\nX-Client-IP: 6.6.6.6\r\nX-Forwarded-Host: evil\r\nX-Forwarded-Port: 1\r\nX-Forwarded-Prefix: /x\r\nX-Original-URL: /admin\r\nX_Rewrite_URL: /admin\r\n\r\n".into(), vec!["GET"]),
        ("POST {P} HTTP/1.1\r\nHost: t\r\nAUTH\r\nForwarded: for=6.6.6.6\r\nX-Original-URL: /admin\r\nContent-Length: 2\r\n\r\nhi".into(), vec!["POST"]),
        // A signed length.
        ("POST {P} HTTP/1.1\r\nHost: t\r\nAUTH\r\nContent-Length: +2\r\n\r\nhi".into(), vec!["POST"]),
        // HTTP/1.0 keeping its connection.
        ("GET {P} HTTP/1.0\r\nConnection: keep-alive\r\nAUTH\r\n\r\n".into(), vec!["GET"]),
        ("GET {P} HTTP/1.1\r\nHost: t\r\nAUTH\r\n\r\nPOST {P}/2 HTTP/1.1\r\nHost: t\r\nAUTH\r\nContent-Length: 2\r\n\r\nhi".into(), vec!["GET", "POST"]),
        // Bodies of every method that carries one: the lane forwards those
        // that have arrived whole with their head, within its limit.
        ("PUT {P} HTTP/1.1\r\nHost: t\r\nAUTH\r\nContent-Length: 5\r\n\r\nhello".into(), vec!["PUT"]),
        ("PATCH {P} HTTP/1.1\r\nHost: t\r\nAUTH\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"seat\":12}".into(), vec!["PATCH"]),
        ("DELETE {P} HTTP/1.1\r\nHost: t\r\nAUTH\r\nContent-Length: 2\r\n\r\nhi".into(), vec!["DELETE"]),
        ("POST {P} HTTP/1.1\r\nHost: t\r\nAUTH\r\nContent-Length: 0\r\n\r\n".into(), vec!["POST"]),
        // Within the first 4 KiB read with its head, and past it but
        // arrived: the lane's, when on.
        ("PUT {P} HTTP/1.1\r\nHost: t\r\nAUTH\r\nContent-Length: 3000\r\n\r\nBODY3000".into(), vec!["PUT"]),
        ("POST {P} HTTP/1.1\r\nHost: t\r\nAUTH\r\nContent-Length: 12000\r\n\r\nBODY12000".into(), vec!["POST"]),
        // Past the lane's 16 KiB: Pingora's proxy on both sides.
        ("POST {P} HTTP/1.1\r\nHost: t\r\nAUTH\r\nContent-Length: 20000\r\n\r\nBODY20000".into(), vec!["POST"]),
        ("POST {P} HTTP/1.1\r\nHost: t\r\nAUTH\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi".into(), vec!["POST"]),
        ("POST {P} HTTP/1.1\r\nHost: t\r\nAUTH\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nhi".into(), vec!["POST"]),
        ("PUT {P} HTTP/1.1\r\nHost: t\r\nAUTH\r\nContent-Length: 2\r\n\r\nhiPUT {P}/2 HTTP/1.1\r\nHost: t\r\nAUTH\r\nContent-Length: 3\r\n\r\nbye".into(), vec!["PUT", "PUT"]),
    ];
    for (template, methods) in hostile {
        add(&mut cases, &|id| {
            let text = template
                .replace("{P}", &format!("{PROTECTED}/h/c{id}"))
                .replace("AUTH\r\n", &auth)
                .replace("TOKEN", token)
                .replace("LONG", &"x".repeat(20_000))
                .replace("BODY12000", &"b".repeat(12_000))
                .replace("BODY3000", &"c".repeat(3_000))
                .replace("BODY20000", &"b".repeat(20_000));
            (text, methods.clone())
        });
    }
    // Registrations, which the lane answers too when the whole JSON body
    // came with the head. `{U}` is a user of the case's own; each side has
    // a Redis of its own, so both register it anew. Those that register
    // run alone, in the same order on both sides, so that their places
    // agree.
    let register = |headers: &str, body: &str| {
        format!(
            "POST /api/v1/queue/register HTTP/1.1\r\nHost: t\r\n{headers}Content-Length: {}\r\n\r\n{body}",
            body.len()
        )
    };
    let json = "Content-Type: application/json\r\n";
    let new_user = r#"{"userId":"r{U}","queue":"baseball"}"#;
    let registrations: Vec<(String, bool)> = vec![
        (register(json, new_user), true),
        (register("Content-Type: application/json; charset=utf-8\r\n", new_user), true),
        (register(json, r#"{"userId":"r{U}"}"#), true),
        (register(&format!("{json}Expect: 100-continue\r\n"), new_user), true),
        (register(&format!("{json}Connection: close\r\n"), new_user), true),
        (format!("POST /api/v1/queue/register HTTP/1.1\r\nHost: t\r\n{json}Transfer-Encoding: chunked\r\n\r\n24\r\n{new_user}\r\n0\r\n\r\n"), true),
        (format!("{}{}", register(json, new_user), register(json, new_user)), true),
        (register(json, r#"{"userId":"fan","queue":"baseball"}"#), false),
        (register(json, r#"{"userId":"r{U}","#), false),
        (register(json, r#"{"userId":"r{U}","extra":1}"#), false),
        (register(json, r#"["r{U}"]"#), false),
        (register(json, r#"{"queue":"baseball"}"#), false),
        (register(json, r#"{"userId":"r{U}","queue":"nope"}"#), false),
        (register(json, r#"{"userId":"","queue":"baseball"}"#), false),
        (register(json, &format!(r#"{{"userId":"{}"}}"#, "u".repeat(300))), false),
        (register(json, r#"{"userId":"a b<c>"}"#), false),
        (register(json, &format!(r#"{{"userId":"r{{U}}","pad":"{}"}}"#, "x".repeat(5000))), false),
        (register("Content-Type: text/plain\r\n", new_user), false),
        (register("", new_user), false),
        (register(&format!("{json}{json}"), new_user), true),
        (register(&format!("{json}Content-Length: 1\r\n"), new_user), false),
        (format!("POST /api/v1/queue/register HTTP/1.1\r\nHost: t\r\n{json}Content-Length: +36\r\n\r\n{new_user}"), false),
        (format!("POST /api/v1/queue/register HTTP/1.1\r\nHost: t\r\n{json}Content-Length: 36\r\n\r\n{{\"userId\""), false),
        (format!("POST /api/v1/queue/register HTTP/1.1\r\n{json}Content-Length: 36\r\n\r\n{new_user}"), false),
        (format!("POST /api/v1/queue/register HTTP/1.0\r\nHost: t\r\n{json}Content-Length: 36\r\n\r\n{new_user}"), true),
        ("GET /api/v1/queue/register HTTP/1.1\r\nHost: t\r\n\r\n".to_string(), false),
        (register(&format!("{json}Upgrade: websocket\r\nConnection: Upgrade\r\n"), new_user), false),
    ];
    let first_registration = cases.len();
    for (template, _) in &registrations {
        let method = if template.starts_with("GET") {
            "GET"
        } else {
            "POST"
        };
        let requests = template.matches(" HTTP/1.").count();
        add(&mut cases, &|id| {
            // As long as `{U}`, so that the lengths above stay right.
            assert!(id < 1000);
            (
                template.replace("{U}", &format!("{id:03}")),
                vec![method; requests],
            )
        });
    }
    for (case, (_, registers)) in cases[first_registration..].iter_mut().zip(&registrations) {
        case.alone = *registers;
    }
    cases
}

/// What a client saw on one connection, in a form both paths can be
/// compared by.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    messages: Vec<Message>,
    /// How the connection ended: "closed", "open" (idle when the client
    /// stopped reading) or "reset".
    end: &'static str,
    /// The `(userId, queueCredential)` of each registration answered, read
    /// before the credential is hidden; not compared (it is random), but
    /// used once the cases are done to check that each one works.
    credentials: Unequal<Vec<(String, String)>>,
}

/// A value two `Seen`s may differ by.
#[derive(Debug)]
struct Unequal<T>(T);

impl<T> PartialEq for Unequal<T> {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl<T> Eq for Unequal<T> {}

#[derive(Debug, PartialEq, Eq)]
enum Message {
    Whole {
        status: u16,
        /// The status line as sent, then the headers in the order sent:
        /// lower-cased names, the values of `Date` and `X-Request-Id` hidden.
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
    /// A head, then a body that ended early (or framing not understood).
    CutShort { status: u16, got: usize },
    /// Bytes that are not a response.
    Garbage(usize),
}

fn run(addr: SocketAddr, case: &Case) -> Seen {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_nodelay(true).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let _ = stream.write_all(&case.bytes);
    let mut raw = Vec::new();
    let mut buf = [0u8; 65536];
    let mut idle_since = Instant::now();
    let end = loop {
        match stream.read(&mut buf) {
            Ok(0) => break "closed",
            Ok(n) => {
                raw.extend_from_slice(&buf[..n]);
                idle_since = Instant::now();
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break "reset",
            Err(_) => {
                // Longer than any scripted pause, shorter than a stall.
                if idle_since.elapsed() > Duration::from_millis(1_200) {
                    break "open";
                }
            }
        }
    };
    // A reset after a complete reply reads the same as a close to a client.
    let mut messages = parse(&raw, &case.methods);
    let mut credentials = Vec::new();
    for message in &mut messages {
        if let Message::Whole { body, .. } = message {
            if let Ok(answer) = serde_json::from_slice::<serde_json::Value>(body) {
                if let (Some(user), Some(credential)) = (
                    answer["userId"].as_str(),
                    answer["queueCredential"].as_str(),
                ) {
                    credentials.push((user.to_string(), credential.to_string()));
                }
            }
            hide_unsteady(body);
        }
    }
    let end = if end == "reset" && !messages.is_empty() {
        "closed"
    } else {
        end
    };
    Seen {
        messages,
        end,
        credentials: Unequal(credentials),
    }
}

/// A registration's `queueCredential` is random, its `receipt` signs its
/// arrival (each waitgate with a key of its own), and its
/// `estimatedWaitSeconds` and `pollAfterMs` (the time left to the next
/// poll, for a user already waiting: one registered twice in one write)
/// count from the moment they were asked: their values are hidden, their
/// lengths kept.
fn hide_unsteady(body: &mut [u8]) {
    for key in [
        &b"\"queueCredential\":\""[..],
        b"\"receipt\":\"",
        b"\"estimatedWaitSeconds\":",
        b"\"pollAfterMs\":",
    ] {
        if let Some(at) = body.windows(key.len()).position(|w| w == key) {
            let value = body[at + key.len()..].iter_mut();
            for b in value.take_while(|b| !matches!(**b, b'"' | b',' | b'}')) {
                *b = b'*';
            }
        }
    }
}

/// Splits what a client read into responses.
fn parse(mut raw: &[u8], methods: &[String]) -> Vec<Message> {
    let mut out = Vec::new();
    let mut requests = methods.iter();
    let mut method = requests.next();
    while !raw.is_empty() {
        let mut slots = [httparse::EMPTY_HEADER; 256];
        let mut response = httparse::Response::new(&mut slots);
        let consumed = match response.parse(raw) {
            Ok(httparse::Status::Complete(n)) => n,
            _ => {
                out.push(Message::Garbage(raw.len()));
                break;
            }
        };
        let status = response.code.unwrap_or(0);
        let mut headers: Vec<(String, String)> = response
            .headers
            .iter()
            .map(|h| {
                let name = h.name.to_ascii_lowercase();
                let value = if name == "x-request-id" || name == "date" {
                    "<varies>".to_string()
                } else if name == "set-cookie" && h.value.starts_with(b"waitgate-queue-") {
                    // The queue cookie's value is the random credential;
                    // its name and attributes are compared.
                    let value = String::from_utf8_lossy(h.value);
                    let (pair, attributes) = value.split_once(';').unwrap_or((&value, ""));
                    let name = pair.split_once('=').map_or(pair, |(n, _)| n);
                    format!("{name}=<credential>;{attributes}")
                } else {
                    String::from_utf8_lossy(h.value).into_owned()
                };
                (name, value)
            })
            .collect();
        // The status line as sent, first: `HTTP/1.1 099` and `HTTP/1.1 99`
        // are both status 99 to a parser.
        let line_end = raw.iter().position(|&b| b == b'\n').unwrap_or(0);
        headers.insert(
            0,
            (
                "<status line>".to_string(),
                String::from_utf8_lossy(&raw[..line_end]).into_owned(),
            ),
        );
        let find = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
        };
        raw = &raw[consumed..];
        let interim = (100..200).contains(&status) && status != 101;
        let no_body = interim
            || status == 204
            || status == 304
            || status == 101
            || method.is_some_and(|m| m == "HEAD");
        if !interim {
            method = requests.next();
        }
        if no_body {
            out.push(Message::Whole {
                status,
                headers,
                body: Vec::new(),
            });
            continue;
        }
        if find("transfer-encoding").is_some_and(|t| t.eq_ignore_ascii_case("chunked")) {
            match dechunk(raw) {
                Some((body, used)) => {
                    raw = &raw[used..];
                    out.push(Message::Whole {
                        status,
                        headers,
                        body,
                    });
                }
                None => {
                    out.push(Message::CutShort {
                        status,
                        got: raw.len(),
                    });
                    break;
                }
            }
        } else if let Some(length) = find("content-length").and_then(|l| l.parse::<usize>().ok()) {
            if raw.len() < length {
                out.push(Message::CutShort {
                    status,
                    got: raw.len(),
                });
                break;
            }
            out.push(Message::Whole {
                status,
                headers,
                body: raw[..length].to_vec(),
            });
            raw = &raw[length..];
        } else {
            out.push(Message::Whole {
                status,
                headers,
                body: raw.to_vec(),
            });
            break;
        }
    }
    out
}

/// A chunked body's data and the bytes it took, or `None` if it is cut short.
fn dechunk(raw: &[u8]) -> Option<(Vec<u8>, usize)> {
    let mut body = Vec::new();
    let mut at = 0;
    loop {
        let line_end = raw[at..].windows(2).position(|w| w == b"\r\n")? + at;
        let size_text = std::str::from_utf8(&raw[at..line_end]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        at = line_end + 2;
        if size == 0 {
            // Trailers, then the empty line.
            loop {
                let end = raw[at..].windows(2).position(|w| w == b"\r\n")? + at;
                let empty = end == at;
                at = end + 2;
                if empty {
                    return Some((body, at));
                }
            }
        }
        if raw.len() < at + size + 2 {
            return None;
        }
        body.extend_from_slice(&raw[at..at + size]);
        at += size + 2;
    }
}

/// A request as an upstream saw it, for comparison.
fn upstream_view(r: &Recorded) -> String {
    let lines: Vec<String> = r
        .head
        .lines()
        .skip(1)
        .filter(|l| !l.is_empty())
        .map(|l| match l.split_once(':') {
            Some((n, _)) if n.eq_ignore_ascii_case("x-request-id") => format!("{n}: <id>"),
            // A request that named no host gets the upstream's address,
            // which is each side's own.
            Some((n, v))
                if n.eq_ignore_ascii_case("host") && v.trim().starts_with("127.0.0.1:") =>
            {
                format!("{n}: <the upstream's address>")
            }
            _ => l.to_string(),
        })
        .collect();
    format!(
        "{}\n{}\nbody={:?}",
        r.head.lines().next().unwrap_or(""),
        lines.join("\n"),
        String::from_utf8_lossy(&r.body)
    )
}

/// The requests an upstream saw for case `id`. A request the upstream
/// reset is counted once however often it came: both paths send it again
/// once when the connection it failed on was a reused one, and whether it
/// was depends on what the other cases, run at the same time, left in the
/// pool.
fn seen_for(upstream: &Scripted, id: usize) -> Vec<String> {
    let tag = format!("/c{id}");
    let mut seen: Vec<String> = upstream
        .seen()
        .iter()
        .filter(|r| {
            let path = r.path();
            path.ends_with(&tag)
                || path.contains(&format!("{tag}-"))
                || path.contains(&format!("{tag}/"))
        })
        .map(upstream_view)
        .collect();
    seen.dedup_by(|a, b| a == b && a.contains("/b/reset/"));
    seen
}

struct Side {
    wg: Waitgate,
    upstream: Scripted,
}

fn side(redis: &Redis, lane: bool) -> Side {
    let upstream = Scripted::start(script);
    // Nobody registered by a case is removed before the end: their
    // heartbeats outlast the run.
    let wg = TestConfig::on_free_ports(&redis.url(), upstream.port)
        .queues("baseball: {admission: {max-active: 1}, heartbeat: {timeout-ms: 600000}}")
        .set("direct-lane", &lane.to_string())
        .set("upstreams.ticketing.read-timeout-ms", "800")
        .log("{format: json}")
        .start_env(&[("RUST_LOG", "")]);
    Side { wg, upstream }
}

/// Runs every case against a side: most a few at a time, as concurrent
/// clients, then the ones that must run alone.
fn run_all(addr: SocketAddr, cases: &Arc<Vec<Case>>) -> BTreeMap<usize, Seen> {
    let together: Arc<Vec<&Case>> = Arc::new(cases.iter().filter(|c| !c.alone).collect());
    let mut results = run_together(addr, cases, &together);
    for case in cases.iter().filter(|c| c.alone) {
        results.insert(case.id, run(addr, case));
        std::thread::sleep(Duration::from_millis(400));
    }
    results
}

fn run_together(
    addr: SocketAddr,
    cases: &Arc<Vec<Case>>,
    together: &Arc<Vec<&Case>>,
) -> BTreeMap<usize, Seen> {
    let ids: Arc<Vec<usize>> = Arc::new(together.iter().map(|c| c.id).collect());
    let results = Arc::new(Mutex::new(BTreeMap::new()));
    let next = Arc::new(Mutex::new(0usize));
    let workers: Vec<_> = (0..16)
        .map(|_| {
            let (cases, ids, results, next) =
                (cases.clone(), ids.clone(), results.clone(), next.clone());
            std::thread::spawn(move || loop {
                let i = {
                    let mut n = next.lock().unwrap();
                    *n += 1;
                    *n - 1
                };
                let Some(&id) = ids.get(i) else { return };
                let case = &cases[id];
                let seen = run(addr, case);
                results.lock().unwrap().insert(case.id, seen);
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    Arc::try_unwrap(results).unwrap().into_inner().unwrap()
}

#[test]
fn the_direct_lane_and_the_pingora_proxy_give_the_same_answers_and_send_the_same_bytes() {
    // A Redis each, so that a registration is new on both sides.
    let (redis, proxy_redis) = (Redis::start(), Redis::start());
    let lane = side(&redis, true);
    let proxy = side(&proxy_redis, false);
    let token = admitted_token(&lane.wg, &redis, "fan");
    admitted_token(&proxy.wg, &proxy_redis, "fan");
    // With `fan` active the gate has no room, and each side's admitter
    // records that (a rate of 0) once someone waits. It is recorded here
    // first, so that every registration's estimate and advice follow from
    // its place alone, the same on both sides.
    for redis in [&redis, &proxy_redis] {
        let _: () = redis::cmd("HSET")
            .arg("queue:{baseball}:admission")
            .arg("rate")
            .arg("0.0000")
            .query(&mut redis.conn())
            .unwrap();
    }
    let cases = Arc::new(corpus(&token));
    assert!(cases.len() >= 200, "{} cases", cases.len());
    assert!(BEHAVIOURS.len() >= 30);
    println!(
        "{} client cases over {} upstream behaviours (+ {} run alone)",
        cases.len(),
        BEHAVIOURS.len(),
        LATE.len()
    );

    let (on, off) = std::thread::scope(|s| {
        let on = s.spawn(|| run_all(lane.wg.addr, &cases));
        let off = s.spawn(|| run_all(proxy.wg.addr, &cases));
        (on.join().unwrap(), off.join().unwrap())
    });
    // Let late bytes and retries land before reading what upstreams saw.
    std::thread::sleep(Duration::from_millis(500));

    let mut differences = Vec::new();
    for case in cases.iter() {
        let (a, b) = (&on[&case.id], &off[&case.id]);
        if a != b {
            differences.push(format!(
                "case {} {:?}\n  lane:  {a:?}\n  proxy: {b:?}",
                case.id,
                String::from_utf8_lossy(&case.bytes[..case.bytes.len().min(120)])
            ));
        }
        let (sa, sb) = (
            seen_for(&lane.upstream, case.id),
            seen_for(&proxy.upstream, case.id),
        );
        if sa != sb {
            differences.push(format!(
                "case {} upstream saw\n  lane:  {sa:#?}\n  proxy: {sb:#?}",
                case.id
            ));
        }
    }
    assert!(
        differences.is_empty(),
        "{} of {} cases differ:\n{}",
        differences.len(),
        cases.len(),
        differences.join("\n")
    );
    // Both access logs say the same of every request, failures in the
    // same words.
    let (lane_log, proxy_log) = wait_for_equal_logs(&lane.wg, &proxy.wg);
    let only = |a: &BTreeMap<String, usize>, b: &BTreeMap<String, usize>| -> Vec<String> {
        a.iter()
            .filter(|(line, n)| b.get(*line) != Some(n))
            .map(|(line, n)| format!("{n} x {line}"))
            .collect()
    };
    let (lane_only, proxy_only) = (only(&lane_log, &proxy_log), only(&proxy_log, &lane_log));
    assert!(
        lane_only.is_empty() && proxy_only.is_empty(),
        "the access logs differ:\n  lane only:\n    {}\n  proxy only:\n    {}",
        lane_only.join("\n    "),
        proxy_only.join("\n    ")
    );
    let failures = lane_log.keys().filter(|l| l.contains("\"error\"")).count();
    assert!(
        failures >= 10,
        "{failures} kinds of failure logged:\n{lane_log:#?}"
    );
    // The same users wait on both sides, in the same order: the
    // registrations refused changed nothing on either.
    let waiting = |redis: &Redis| -> Vec<String> {
        redis::cmd("ZRANGE")
            .arg(WAITING_KEY)
            .arg(0)
            .arg(-1)
            .query(&mut redis.conn())
            .unwrap()
    };
    let (lane_waiting, proxy_waiting) = (waiting(&redis), waiting(&proxy_redis));
    assert_eq!(lane_waiting, proxy_waiting);
    assert_eq!(lane_waiting.len(), 9, "{lane_waiting:?}");
    // Each credential a registration was given works: its dropout is
    // accepted, and then nobody is left waiting on either side.
    for (side, seen, redis) in [(&lane, &on, &redis), (&proxy, &off, &proxy_redis)] {
        let credentials: Vec<_> = seen
            .values()
            .flat_map(|s| s.credentials.0.clone())
            .collect();
        assert_eq!(credentials.len(), 9, "{credentials:?}");
        for (user, credential) in credentials {
            let r = dropout(side.wg.addr, &user, &credential);
            assert_eq!(r.status, 204, "{user}: {r:?}");
        }
        assert!(waiting(redis).is_empty());
    }
}

/// The access lines of a waitgate's log, as a count of each line less what
/// differs by chance (`request_id`, `timestamp`, `duration_ms`) or by side
/// (the `upstream` port).
fn access_log(wg: &Waitgate) -> BTreeMap<String, usize> {
    let mut lines = BTreeMap::new();
    for line in wg.log().lines() {
        let Ok(serde_json::Value::Object(mut fields)) = serde_json::from_str(line) else {
            continue;
        };
        if fields.get("target").and_then(|t| t.as_str()) != Some("waitgate::access") {
            continue;
        }
        for chance in [
            "request_id",
            "timestamp",
            "duration_ms",
            "upstream",
            "count",
        ] {
            fields.remove(chance);
        }
        *lines
            .entry(serde_json::Value::Object(fields).to_string())
            .or_insert(0) += 1;
    }
    lines
}

/// Both sides' access logs, once they are the same (a line is written
/// just after its request ends) or after 5 s.
fn wait_for_equal_logs(
    a: &Waitgate,
    b: &Waitgate,
) -> (BTreeMap<String, usize>, BTreeMap<String, usize>) {
    let mut logs = Default::default();
    eventually(Duration::from_secs(5), || {
        logs = (access_log(a), access_log(b));
        logs.0 == logs.1
    });
    logs
}
