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
//! Anyone else could write anything there. The other forwarding headers
//! ([`Forwarding`]) follow the same rule: `Forwarded` is waitgate's own,
//! written from the `X-Forwarded-For` chain it believes; the client's
//! address, scheme, host,
//! port or prefix (`X-Real-IP`, `X-Forwarded-Host`, ...) pass from a
//! trusted peer only; a path to route on instead of the request's
//! (`X-Original-URL`, `X-Rewrite-URL`) never passes. Spring, for one,
//! believes `Forwarded` over everything else, and IIS and Symfony route on
//! `X-Original-URL`: from a client, either would undo what was checked.

use std::borrow::Cow;
use std::net::{IpAddr, SocketAddr};

use ipnet::IpNet;

use super::name::{Forwarding, Name, Own};
use super::{elements, is, Field};

/// The headers waitgate sets on every forwarded request, in the spelling it
/// sends them.
pub const USER_HEADER: &str = "X-Waitgate-User";
pub const QUEUE_HEADER: &str = "X-Waitgate-Queue";
pub const FORWARDED_FOR: &str = "X-Forwarded-For";
pub const FORWARDED_PROTO: &str = "X-Forwarded-Proto";
pub const REQUEST_ID: &str = "X-Request-Id";
pub const FORWARDED: &str = "Forwarded";

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
    /// The address as text, rendered once per connection rather than once
    /// per request (the longest IPv6 text is 45 bytes).
    text: [u8; 45],
    text_len: u8,
}

impl Peer {
    pub fn new(addr: Option<SocketAddr>, trusted: &TrustedProxies) -> Peer {
        use std::io::Write;
        let ip = addr.map(|a| a.ip().to_canonical());
        let mut text = [0u8; 45];
        let mut cursor = std::io::Cursor::new(&mut text[..]);
        if let Some(ip) = ip {
            let _ = write!(cursor, "{ip}");
        }
        let text_len = cursor.position() as u8;
        Peer {
            ip,
            trusted: ip.is_some_and(|ip| trusted.contains(ip)),
            text,
            text_len,
        }
    }

    /// The address as `X-Forwarded-For` writes it; empty for no address.
    pub fn ip_text(&self) -> &str {
        std::str::from_utf8(&self.text[..usize::from(self.text_len)]).unwrap_or("")
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
    random_id()
}

/// A request id of waitgate's own, for a request answered before its
/// headers are read.
pub fn generated_id() -> String {
    random_id()
}

/// 128 random bits as 32 lower-case hex digits.
fn random_id() -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bits: u128 = rand::random();
    let digits: Vec<u8> = (0..32)
        .map(|i| HEX[((bits >> (124 - 4 * i)) & 0xf) as usize])
        .collect();
    String::from_utf8(digits).unwrap_or_default()
}

/// At most 128 visible ASCII characters: safe in a header and a log line.
fn is_sound_id(id: &[u8]) -> bool {
    !id.is_empty() && id.len() <= 128 && id.iter().all(|b| b.is_ascii_graphic())
}

/// `X-Forwarded-For` as sent upstream: the client's address, after what a
/// trusted peer said about the hops before it.
fn forwarded_for<'p, 'a>(peer: &'p Peer, fields: impl Iterator<Item = Field<'a>>) -> Cow<'p, str> {
    if !peer.trusted {
        return Cow::Borrowed(peer.ip_text());
    }
    let mut value = String::new();
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
    if peer.ip.is_some() {
        if !value.is_empty() {
            value.push_str(", ");
        }
        value.push_str(peer.ip_text());
    }
    Cow::Owned(value)
}

/// The client's address, for the access log and the per-client limits:
/// the peer's; or, from a trusted peer, the last address its
/// `X-Forwarded-For` names that is not itself a trusted proxy (walking the
/// hops from the right, as nginx's realip module does with
/// `real_ip_recursive on`), so that behind a CDN and a balancer both
/// trusted the client is the address the CDN saw. A port after an address
/// is dropped; a hop that is not an address ends the walk (at the peer,
/// when it is the last hop).
pub fn client<'a>(
    peer: Peer,
    fields: impl Iterator<Item = Field<'a>>,
    trusted: &TrustedProxies,
) -> Option<IpAddr> {
    if !peer.trusted {
        return peer.ip;
    }
    let hops: Vec<&[u8]> = fields
        .filter(|(name, _)| is(name, "x-forwarded-for"))
        .flat_map(|(_, sent)| elements(sent))
        .collect();
    let mut client = peer.ip;
    for hop in hops.iter().rev() {
        // An address, an address with a port, or an IPv6 address in
        // brackets without one (as some balancers write it).
        let Some(ip) = std::str::from_utf8(hop).ok().and_then(|hop| {
            hop.parse::<IpAddr>()
                .ok()
                .or_else(|| hop.parse::<SocketAddr>().ok().map(|a| a.ip()))
                .or_else(|| {
                    let inner = hop.strip_prefix('[')?.strip_suffix(']')?;
                    inner.parse::<std::net::Ipv6Addr>().ok().map(IpAddr::V6)
                })
        }) else {
            break;
        };
        let ip = ip.to_canonical();
        client = Some(ip);
        if !trusted.contains(ip) {
            break;
        }
    }
    client
}

/// `X-Forwarded-Proto` as sent upstream: what a trusted peer said (`http`
/// or `https`), else the scheme of the listener the request came in on.
fn forwarded_proto<'a>(
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

/// `Forwarded` (RFC 7239) as sent upstream, always waitgate's own: the
/// hops a trusted peer named in `X-Forwarded-For`, as `for=` elements (the
/// first with the scheme its `X-Forwarded-Proto` named), then waitgate's
/// hop, `for=<peer>;proto=<scheme of the listener>`. A `Forwarded` sent to
/// waitgate is never kept, even from a trusted peer: many balancers append
/// to `X-Forwarded-For` but pass a client's `Forwarded` through unchanged,
/// and a backend that believes `Forwarded` first would read the client's
/// word. So `Forwarded` says what `X-Forwarded-For` says, element for
/// element, and what waitgate's log says of the client.
fn forwarded<'a>(
    peer: &Peer,
    scheme: &'static str,
    fields: impl Iterator<Item = Field<'a>> + Clone,
) -> String {
    use std::fmt::Write;
    let mut value = String::new();
    if peer.trusted {
        let proto = forwarded_proto(*peer, scheme, fields.clone());
        let hops = fields.filter(|(name, _)| is(name, "x-forwarded-for"));
        // The hops `X-Forwarded-For` keeps (`forwarded_for`), and only them.
        let kept = hops
            .flat_map(|(_, sent)| elements(sent))
            .filter(|hop| hop.iter().all(|b| b.is_ascii_graphic()));
        for hop in kept {
            let first = value.is_empty();
            if !first {
                value.push_str(", ");
            }
            let hop = std::str::from_utf8(hop).unwrap_or("");
            match hop.parse::<IpAddr>() {
                Ok(ip) => push_node(&mut value, ip),
                Err(_) => match hop.parse::<SocketAddr>() {
                    Ok(a) => {
                        let _ = write!(value, "for=\"{a}\"");
                    }
                    Err(_) => value.push_str("for=unknown"),
                },
            }
            if first {
                let _ = write!(value, ";proto={proto}");
            }
        }
        if !value.is_empty() {
            value.push_str(", ");
        }
    }
    match peer.ip {
        Some(ip) => push_node(&mut value, ip),
        None => value.push_str("for=unknown"),
    }
    let _ = write!(value, ";proto={scheme}");
    value
}

/// `for=` an address, as RFC 7239 writes a node: an IPv6 one in brackets
/// and quotes.
fn push_node(value: &mut String, ip: IpAddr) {
    use std::fmt::Write;
    let _ = match ip.to_canonical() {
        IpAddr::V4(v4) => write!(value, "for={v4}"),
        IpAddr::V6(v6) => write!(value, "for=\"[{v6}]\""),
    };
}

/// The connection-scoped headers of one request: the names its
/// `Connection` header lists, and whether it may switch protocols.
#[derive(Debug, Default)]
pub struct Hop<'a> {
    listed: Vec<&'a [u8]>,
    /// Keep `Upgrade` and `Connection` (a route with `websocket: true`).
    upgrade: bool,
    /// The peer is a trusted proxy: the forwarding headers that describe
    /// the client pass.
    trusted: bool,
}

impl<'a> Hop<'a> {
    /// The hop of a request from a peer (`trusted`: a trusted proxy), or of
    /// a response (`false`).
    pub fn new(fields: impl Iterator<Item = Field<'a>>, upgrade: bool, trusted: bool) -> Hop<'a> {
        let mut listed = Vec::new();
        for (name, value) in fields {
            if Name::of(name) != Name::Connection {
                continue;
            }
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
        Hop {
            listed,
            upgrade,
            trusted,
        }
    }

    /// Whether a client's header goes on to the upstream. Every spelling of
    /// waitgate's own headers is dropped (see the module doc).
    pub fn forwards(&self, name: &[u8]) -> bool {
        match Name::of(name) {
            Name::ContentLength | Name::TransferEncoding | Name::Host => true,
            Name::Connection | Name::Upgrade => self.upgrade,
            Name::Hop | Name::Own(_) | Name::OwnAlias => false,
            Name::Forwarding {
                kind: Forwarding::Describes,
                alias: false,
            } => self.trusted && !self.is_listed(name),
            Name::Forwarding { .. } => false,
            _ => !self.is_listed(name),
        }
    }

    /// Whether an upstream's response header goes on to the client. Framing
    /// headers are each path's business; `Date` and `X-Request-Id` are
    /// waitgate's own.
    pub fn relays(&self, name: &[u8]) -> bool {
        match Name::of(name) {
            Name::ContentLength | Name::TransferEncoding => true,
            Name::Connection | Name::Upgrade => self.upgrade,
            Name::Hop | Name::Date | Name::Own(Own::RequestId) | Name::Release => false,
            _ => !self.is_listed(name),
        }
    }

    fn is_listed(&self, name: &[u8]) -> bool {
        self.listed
            .iter()
            .any(|listed| listed.eq_ignore_ascii_case(name))
    }
}

/// The headers waitgate adds to every forwarded request, worked out once
/// from the client's headers and the peer, for both HTTP paths.
pub struct Added<'v> {
    user: &'v str,
    queue: &'v str,
    request_id: &'v str,
    forwarded_for: Cow<'v, str>,
    proto: &'static str,
    forwarded: String,
}

impl<'v> Added<'v> {
    /// `scheme` is that of the listener the request came in on.
    pub fn new<'a>(
        peer: &'v Peer,
        scheme: &'static str,
        fields: impl Iterator<Item = Field<'a>> + Clone,
        user: &'v str,
        queue: &'v str,
        request_id: &'v str,
    ) -> Added<'v> {
        Added {
            user,
            queue,
            request_id,
            forwarded_for: forwarded_for(peer, fields.clone()),
            proto: forwarded_proto(*peer, scheme, fields.clone()),
            forwarded: forwarded(peer, scheme, fields),
        }
    }

    /// The headers, in the order they are sent.
    pub fn fields(&self) -> [(&'static str, &str); 6] {
        [
            (USER_HEADER, self.user),
            (QUEUE_HEADER, self.queue),
            (FORWARDED_FOR, &self.forwarded_for),
            (FORWARDED_PROTO, self.proto),
            (FORWARDED, &self.forwarded),
            (REQUEST_ID, self.request_id),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Iterator<Item = Field<'a>> + Clone {
        pairs.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes()))
    }

    /// That `passes` lets through every name of `kept` and none of
    /// `dropped` (names apart by spaces, which no header name holds).
    fn sorts(passes: impl Fn(&[u8]) -> bool, kept: &str, dropped: &str) {
        for name in kept.split_whitespace() {
            assert!(passes(name.as_bytes()), "{name} should pass");
        }
        for name in dropped.split_whitespace() {
            assert!(!passes(name.as_bytes()), "{name} should be dropped");
        }
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
        sorts(
            |n| hop.forwards(n),
            "X-Waitgate-Users X-Waitgate Authorization Cookie",
            "X-Waitgate-User x-waitgate-user X_Waitgate_User X-Waitgate_User x_waitgate-queue X_FORWARDED_FOR x-request_id",
        );
    }

    #[test]
    fn connection_scoped_headers_stop_here_but_framing_and_host_never_do() {
        let pairs = [("Connection", "close, X-Secret, Content-Length, host")];
        let hop = Hop::new(fields(&pairs), false, false);
        sorts(
            |n| hop.forwards(n),
            "content-length Transfer-Encoding Host X-Other",
            "connection Keep-Alive TE Upgrade x-secret Proxy-Connection",
        );
        let switching = Hop::new(fields(&[("Connection", "Upgrade")]), true, false);
        assert!(switching.forwards(b"upgrade"));
        assert!(switching.forwards(b"connection"));
    }

    #[test]
    fn responses_lose_connection_headers_date_and_the_upstreams_request_id() {
        let pairs = [("Connection", "keep-alive, X-Hop")];
        let hop = Hop::new(fields(&pairs), false, false);
        sorts(
            |n| hop.relays(n),
            "Content-Length Transfer-Encoding Set-Cookie X-Waitgate-User",
            "Connection Keep-Alive x-hop Date X-Request-Id Upgrade",
        );
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
        assert_eq!(forwarded_for(&stranger, fields(&sent)), "192.0.2.7");
        let proxy = peer("10.1.2.3", &trust);
        assert!(proxy.trusted);
        assert_eq!(
            forwarded_for(&proxy, fields(&sent)),
            "1.2.3.4, 5.6.7.8, 9.9.9.9, 10.1.2.3"
        );
        let mapped = peer("::ffff:10.0.0.1", &trust);
        assert!(mapped.trusted);
        assert_eq!(forwarded_for(&mapped, fields(&[])), "10.0.0.1");
        let v6 = peer("2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", &trust);
        assert_eq!(v6.ip_text(), "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff");
        assert!(peer("::1", &trust).trusted);
    }

    #[test]
    fn the_logged_client_is_what_a_trusted_peer_names_last() {
        let trust = trusted(&["10.0.0.0/8"]);
        let proxy = peer("10.1.2.3", &trust);
        let stranger = peer("192.0.2.7", &trust);
        let sent = [
            ("X-Forwarded-For", "1.2.3.4, 5.6.7.8"),
            ("x-forwarded-for", " 2001:db8::1 "),
        ];
        let ip = |text: &str| Some(text.parse::<IpAddr>().unwrap());
        assert_eq!(client(proxy, fields(&sent), &trust), ip("2001:db8::1"));
        assert_eq!(client(stranger, fields(&sent), &trust), ip("192.0.2.7"));
        let one = [("X-FORWARDED-FOR", "1.2.3.4, ::ffff:5.6.7.8")];
        assert_eq!(client(proxy, fields(&one), &trust), ip("5.6.7.8"));
        let ported = [("X-Forwarded-For", "1.2.3.4:80, [2001:db8::2]:443")];
        assert_eq!(client(proxy, fields(&ported), &trust), ip("2001:db8::2"));
        let bracketed = [("X-Forwarded-For", "[2001:db8::3]")];
        assert_eq!(client(proxy, fields(&bracketed), &trust), ip("2001:db8::3"));
        let ported = [("X-Forwarded-For", "192.0.2.1:8080")];
        assert_eq!(client(proxy, fields(&ported), &trust), ip("192.0.2.1"));
        for junk in ["unknown", "1.2.3.4, not-an-address", "", "1.2.3.4:x"] {
            let sent = [("X-Forwarded-For", junk)];
            assert_eq!(
                client(proxy, fields(&sent), &trust),
                ip("10.1.2.3"),
                "{junk}"
            );
        }
        assert_eq!(client(proxy, fields(&[]), &trust), ip("10.1.2.3"));
        // Hops that are trusted proxies themselves are walked past.
        let chain = [(
            "X-Forwarded-For",
            "198.51.100.1, 1.2.3.4, 10.9.9.9, 10.8.8.8",
        )];
        assert_eq!(client(proxy, fields(&chain), &trust), ip("1.2.3.4"));
        let inside = [("X-Forwarded-For", "10.5.5.5, 10.9.9.9")];
        assert_eq!(client(proxy, fields(&inside), &trust), ip("10.5.5.5"));
        let broken = [("X-Forwarded-For", "1.2.3.4, unknown, 10.9.9.9")];
        assert_eq!(client(proxy, fields(&broken), &trust), ip("10.9.9.9"));
    }

    #[test]
    fn forwarding_headers_pass_from_trusted_peers_only_and_reroutes_never() {
        let describes = [
            "X-Real-IP",
            "True-Client-IP",
            "X-Client-IP",
            "X-Forwarded-Host",
            "X-Forwarded-Port",
            "X-Forwarded-Prefix",
            "CF-Connecting-IP",
        ];
        let never = [
            "Forwarded",
            "X-Original-URL",
            "X-Rewrite-URL",
            "x_real_ip",
            "X_Forwarded_Host",
        ];
        let stranger = Hop::new(fields(&[]), false, false);
        let proxy = Hop::new(fields(&[("Connection", "X-Forwarded-Port")]), false, true);
        for name in describes.iter().chain(&never) {
            assert!(!stranger.forwards(name.as_bytes()), "{name}");
        }
        for name in never {
            assert!(!proxy.forwards(name.as_bytes()), "{name}");
        }
        for name in describes.iter().filter(|n| **n != "X-Forwarded-Port") {
            assert!(proxy.forwards(name.as_bytes()), "{name}");
        }
        // Named in `Connection`: stops here, as any header so named.
        assert!(!proxy.forwards(b"x-forwarded-port"));
        // Responses carry them as any other header.
        assert!(stranger.relays(b"X-Real-IP"));
    }

    #[test]
    fn forwarded_is_waitgates_from_the_chain_it_believes() {
        let trust = trusted(&["10.0.0.0/8"]);
        let stranger = peer("192.0.2.7", &trust);
        let proxy = peer("10.1.2.3", &trust);
        let spoof = [
            ("Forwarded", "for=6.6.6.6;proto=https;host=evil"),
            ("X-Forwarded-For", "6.6.6.6"),
        ];
        assert_eq!(
            forwarded(&stranger, "http", fields(&spoof)),
            "for=192.0.2.7;proto=http"
        );
        // From a trusted peer, its `X-Forwarded-For` is the chain; a
        // `Forwarded` it passed on is not (nor can its quotes swallow
        // waitgate's own element).
        assert_eq!(
            forwarded(&proxy, "https", fields(&spoof)),
            "for=6.6.6.6;proto=https, for=10.1.2.3;proto=https"
        );
        let quoted = [("Forwarded", "for=\"6.6.6.6;host=evil")];
        assert_eq!(
            forwarded(&proxy, "http", fields(&quoted)),
            "for=10.1.2.3;proto=http"
        );
        let hops = [
            (
                "X-Forwarded-For",
                "1.2.3.4, 2001:db8::1, [2001:db8::2]:443, junk, x y",
            ),
            ("X-Forwarded-Proto", "https"),
        ];
        assert_eq!(
            forwarded(&proxy, "http", fields(&hops)),
            "for=1.2.3.4;proto=https, for=\"[2001:db8::1]\", for=\"[2001:db8::2]:443\", for=unknown, for=10.1.2.3;proto=http"
        );
        let v6 = peer("2001:db8::9", &trust);
        assert_eq!(
            forwarded(&v6, "https", fields(&[])),
            "for=\"[2001:db8::9]\";proto=https"
        );
        let unix = Peer::new(None, &trust);
        assert_eq!(
            forwarded(&unix, "http", fields(&[])),
            "for=unknown;proto=http"
        );
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
