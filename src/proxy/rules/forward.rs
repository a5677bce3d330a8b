//! Which request headers reach the upstream, and the ones waitgate sets.
//!
//! Headers that describe one connection stop here (RFC 9110 §7.6.1):
//! `Connection`, `Keep-Alive`, `Proxy-Connection`, `TE`, `Trailer`,
//! `Proxy-Authorization`, `Proxy-Authenticate`, `HTTP2-Settings`, `Upgrade`
//! (kept only on a route that switches protocols), and every header the
//! client's `Connection` names. Framing (`Content-Length`, `Transfer-Encoding`) and
//! `Host` always pass: each path's writer owns the framing, and a client
//! must not be able to strip it by naming it in `Connection`.
//!
//! Then the headers waitgate sets itself ([`OWN`]) are dropped in every
//! spelling a backend could read as the same name. CGI and WSGI (and many
//! frameworks through them) upper-case a name and turn `-` into `_`, so
//! `X_Waitgate_User: mallory` next to waitgate's `X-Waitgate-User: alice`
//! would reach a backend as `HTTP_X_WAITGATE_USER='mallory,alice'`.
//!
//! `X-Forwarded-For` is the client's address; a value sent by the client is
//! kept in front of it only when the peer is a trusted proxy
//! (`trusted-proxies`), as are its `X-Forwarded-Proto` and `X-Request-Id`.
//! Anyone else could write anything there.

use std::net::{IpAddr, SocketAddr};

use ipnet::IpNet;

use super::{elements, is, Field};

/// The headers waitgate sets on every forwarded request, in the spelling it
/// sends them.
pub const USER_HEADER: &str = "X-Waitgate-User";
pub const QUEUE_HEADER: &str = "X-Waitgate-Queue";
pub const FORWARDED_FOR: &str = "X-Forwarded-For";
pub const FORWARDED_PROTO: &str = "X-Forwarded-Proto";
pub const REQUEST_ID: &str = "X-Request-Id";

/// Every name in [`OWN`] is dropped from the client's request, in any
/// spelling (see the module doc), before waitgate sets its own.
pub const OWN: [&str; 5] = [
    USER_HEADER,
    QUEUE_HEADER,
    FORWARDED_FOR,
    FORWARDED_PROTO,
    REQUEST_ID,
];

/// The peers whose forwarding headers are believed: `trusted-proxies`.
#[derive(Debug, Clone, Default)]
pub struct TrustedProxies(Vec<IpNet>);

impl TrustedProxies {
    pub fn new(nets: Vec<IpNet>) -> TrustedProxies {
        TrustedProxies(nets)
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        // A v4 client on a dual-stack listener shows as ::ffff:a.b.c.d.
        let ip = ip.to_canonical();
        self.0.iter().any(|net| net.contains(&ip))
    }
}

/// The client connection's far end, as the forwarding headers describe it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    /// `None` for a peer with no IP address (a Unix socket).
    pub ip: Option<IpAddr>,
    /// The peer is a trusted proxy: its forwarding headers are kept.
    pub trusted: bool,
}

impl Peer {
    pub fn new(addr: Option<SocketAddr>, trusted: &TrustedProxies) -> Peer {
        let ip = addr.map(|a| a.ip().to_canonical());
        Peer {
            ip,
            trusted: ip.is_some_and(|ip| trusted.contains(ip)),
        }
    }
}

/// The request's id: kept from a trusted peer if it sent a sound one,
/// otherwise 128 random bits in hex. Sent upstream, returned to the client
/// and written to the access log.
pub fn request_id<'a>(peer: Peer, fields: impl Iterator<Item = Field<'a>>) -> String {
    if peer.trusted {
        let sent = fields
            .filter(|(name, _)| is(name, "x-request-id"))
            .map(|(_, value)| value.trim_ascii())
            .next();
        if let Some(id) = sent.filter(|id| is_sound_id(id)) {
            // is_sound_id accepted visible ASCII only.
            return String::from_utf8_lossy(id).into_owned();
        }
    }
    format!("{:032x}", rand::random::<u128>())
}

/// At most 128 visible ASCII characters: safe in a header and a log line.
fn is_sound_id(id: &[u8]) -> bool {
    !id.is_empty() && id.len() <= 128 && id.iter().all(|b| b.is_ascii_graphic())
}

/// `X-Forwarded-For` as sent upstream: the client's address, after what a
/// trusted peer said about the hops before it.
pub fn forwarded_for<'a>(peer: Peer, fields: impl Iterator<Item = Field<'a>>) -> String {
    let mut value = String::new();
    if peer.trusted {
        for (_, sent) in fields.filter(|(name, _)| is(name, "x-forwarded-for")) {
            for hop in elements(sent) {
                if hop.iter().all(|b| b.is_ascii_graphic()) {
                    if !value.is_empty() {
                        value.push_str(", ");
                    }
                    value.push_str(&String::from_utf8_lossy(hop));
                }
            }
        }
    }
    if let Some(ip) = peer.ip {
        if !value.is_empty() {
            value.push_str(", ");
        }
        value.push_str(&ip.to_string());
    }
    value
}

/// `X-Forwarded-Proto` as sent upstream: what a trusted peer said (`http`
/// or `https`), else the scheme of the listener the request came in on.
pub fn forwarded_proto<'a>(
    peer: Peer,
    scheme: &'static str,
    mut fields: impl Iterator<Item = Field<'a>>,
) -> &'static str {
    if peer.trusted {
        let sent = fields.find(|(name, _)| is(name, "x-forwarded-proto"));
        match sent.map(|(_, v)| v.trim_ascii()) {
            Some(v) if v.eq_ignore_ascii_case(b"https") => return "https",
            Some(v) if v.eq_ignore_ascii_case(b"http") => return "http",
            _ => {}
        }
    }
    scheme
}

/// The connection-scoped headers of one request: the names its
/// `Connection` header lists, and whether it may switch protocols.
#[derive(Debug, Default)]
pub struct Hop<'a> {
    listed: Vec<&'a [u8]>,
    /// Keep `Upgrade` and `Connection` (a route with `websocket: true`).
    upgrade: bool,
}

impl<'a> Hop<'a> {
    pub fn new(fields: impl Iterator<Item = Field<'a>>, upgrade: bool) -> Hop<'a> {
        let mut listed = Vec::new();
        for (_, value) in fields.filter(|(name, _)| is(name, "connection")) {
            for token in elements(value) {
                // The usual values name no header; skip them without
                // allocating.
                let named = !(token.eq_ignore_ascii_case(b"close")
                    || token.eq_ignore_ascii_case(b"keep-alive")
                    || token.eq_ignore_ascii_case(b"upgrade"));
                if named {
                    listed.push(token);
                }
            }
        }
        Hop { listed, upgrade }
    }

    /// Whether a client's header goes on to the upstream.
    pub fn forwards(&self, name: &[u8]) -> bool {
        if is(name, "content-length") || is(name, "transfer-encoding") || is(name, "host") {
            return true;
        }
        if is(name, "connection") || is(name, "upgrade") {
            return self.upgrade;
        }
        // The rest of Pingora's own list of headers it never forwards.
        if is(name, "keep-alive")
            || is(name, "proxy-connection")
            || is(name, "te")
            || is(name, "trailer")
            || is(name, "proxy-authorization")
            || is(name, "proxy-authenticate")
            || is(name, "http2-settings")
        {
            return false;
        }
        if OWN.iter().any(|own| same_for_cgi(name, own)) {
            return false;
        }
        !self
            .listed
            .iter()
            .any(|listed| listed.eq_ignore_ascii_case(name))
    }

    /// Whether an upstream's response header goes on to the client. Framing
    /// headers are each path's business; `Date` and `X-Request-Id` are
    /// waitgate's own.
    pub fn relays(&self, name: &[u8]) -> bool {
        if is(name, "content-length") || is(name, "transfer-encoding") {
            return true;
        }
        if is(name, "connection") || is(name, "upgrade") {
            return self.upgrade;
        }
        if is(name, "keep-alive")
            || is(name, "proxy-connection")
            || is(name, "te")
            || is(name, "date")
            || is(name, "x-request-id")
        {
            return false;
        }
        !self
            .listed
            .iter()
            .any(|listed| listed.eq_ignore_ascii_case(name))
    }
}

/// Whether two header names read the same to a CGI or WSGI backend: equal
/// once case is ignored and `_` is read as `-`.
fn same_for_cgi(name: &[u8], own: &str) -> bool {
    let fold = |b: u8| match b {
        b'_' => b'-',
        b => b.to_ascii_lowercase(),
    };
    name.len() == own.len()
        && name
            .iter()
            .zip(own.bytes())
            .all(|(&a, b)| fold(a) == fold(b))
}

/// The headers waitgate adds to every forwarded request, in order.
pub fn added<'v>(
    user: &'v str,
    queue: &'v str,
    forwarded_for: &'v str,
    proto: &'v str,
    request_id: &'v str,
) -> [(&'static str, &'v str); 5] {
    [
        (USER_HEADER, user),
        (QUEUE_HEADER, queue),
        (FORWARDED_FOR, forwarded_for),
        (FORWARDED_PROTO, proto),
        (REQUEST_ID, request_id),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Iterator<Item = Field<'a>> + Clone {
        pairs.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes()))
    }

    fn trusted(cidrs: &[&str]) -> TrustedProxies {
        TrustedProxies::new(cidrs.iter().map(|c| c.parse().unwrap()).collect())
    }

    fn peer(ip: &str, trust: &TrustedProxies) -> Peer {
        Peer::new(Some(SocketAddr::new(ip.parse().unwrap(), 40000)), trust)
    }

    #[test]
    fn identity_headers_are_dropped_in_every_spelling_a_backend_reads_alike() {
        let hop = Hop::default();
        for name in [
            "X-Waitgate-User",
            "x-waitgate-user",
            "X_Waitgate_User",
            "X-Waitgate_User",
            "x_waitgate-queue",
            "X_FORWARDED_FOR",
            "x-request_id",
        ] {
            assert!(!hop.forwards(name.as_bytes()), "{name}");
        }
        for name in ["X-Waitgate-Users", "X-Waitgate", "Authorization", "Cookie"] {
            assert!(hop.forwards(name.as_bytes()), "{name}");
        }
    }

    #[test]
    fn connection_scoped_headers_stop_here_but_framing_and_host_never_do() {
        let pairs = [("Connection", "close, X-Secret, Content-Length, host")];
        let hop = Hop::new(fields(&pairs), false);
        for name in [
            "connection",
            "Keep-Alive",
            "TE",
            "Upgrade",
            "x-secret",
            "Proxy-Connection",
        ] {
            assert!(!hop.forwards(name.as_bytes()), "{name}");
        }
        for name in ["content-length", "Transfer-Encoding", "Host", "X-Other"] {
            assert!(hop.forwards(name.as_bytes()), "{name}");
        }
        let switching = Hop::new(fields(&[("Connection", "Upgrade")]), true);
        assert!(switching.forwards(b"upgrade"));
        assert!(switching.forwards(b"connection"));
    }

    #[test]
    fn responses_lose_connection_headers_date_and_the_upstreams_request_id() {
        let pairs = [("Connection", "keep-alive, X-Hop")];
        let hop = Hop::new(fields(&pairs), false);
        for name in [
            "Connection",
            "Keep-Alive",
            "x-hop",
            "Date",
            "X-Request-Id",
            "Upgrade",
        ] {
            assert!(!hop.relays(name.as_bytes()), "{name}");
        }
        for name in [
            "Content-Length",
            "Transfer-Encoding",
            "Set-Cookie",
            "X-Waitgate-User",
        ] {
            assert!(hop.relays(name.as_bytes()), "{name}");
        }
    }

    #[test]
    fn forwarded_for_believes_only_trusted_peers() {
        let trust = trusted(&["10.0.0.0/8", "::1/128"]);
        let sent = [
            ("X-Forwarded-For", "1.2.3.4, 5.6.7.8"),
            ("x-forwarded-for", "9.9.9.9"),
        ];
        let stranger = peer("192.0.2.7", &trust);
        assert!(!stranger.trusted);
        assert_eq!(forwarded_for(stranger, fields(&sent)), "192.0.2.7");
        let proxy = peer("10.1.2.3", &trust);
        assert!(proxy.trusted);
        assert_eq!(
            forwarded_for(proxy, fields(&sent)),
            "1.2.3.4, 5.6.7.8, 9.9.9.9, 10.1.2.3"
        );
        let mapped = peer("::ffff:10.0.0.1", &trust);
        assert!(mapped.trusted);
        assert_eq!(forwarded_for(mapped, fields(&[])), "10.0.0.1");
        assert!(peer("::1", &trust).trusted);
    }

    #[test]
    fn proto_and_request_id_come_from_trusted_peers_only() {
        let trust = trusted(&["10.0.0.0/8"]);
        let sent = [("X-Forwarded-Proto", "HTTPS"), ("X-Request-Id", "abc-123")];
        let proxy = peer("10.0.0.2", &trust);
        let stranger = peer("192.0.2.1", &trust);
        assert_eq!(forwarded_proto(proxy, "http", fields(&sent)), "https");
        assert_eq!(forwarded_proto(stranger, "http", fields(&sent)), "http");
        assert_eq!(request_id(proxy, fields(&sent)), "abc-123");
        let made = request_id(stranger, fields(&sent));
        assert_eq!(made.len(), 32);
        assert!(made.bytes().all(|b| b.is_ascii_hexdigit()), "{made}");
        assert_ne!(made, request_id(stranger, fields(&sent)));
        let bad = [("X-Request-Id", "has space")];
        assert_eq!(request_id(proxy, fields(&bad)).len(), 32);
    }
}
