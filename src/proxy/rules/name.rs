//! The header names the rules care about, recognised in one pass.
//!
//! Every rule looks at every header of a request or response, and most
//! names are none of the ones it cares about. Comparing each name with a
//! dozen others, case-insensitively, was a measured share of the direct
//! lane's time per request (see the README's performance section); this
//! recognises a name with one length check and, at most, a couple of
//! comparisons.

/// A header name, as far as the rules are concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Name {
    ContentLength,
    TransferEncoding,
    Host,
    Connection,
    Upgrade,
    Expect,
    Authorization,
    Date,
    /// A header that describes one connection only and is never forwarded
    /// (`Keep-Alive`, `Proxy-Connection`, `TE`, `Trailer`,
    /// `Proxy-Authorization`, `Proxy-Authenticate`, `HTTP2-Settings`).
    Hop,
    /// One of the headers waitgate sets on forwarded requests, in the exact
    /// spelling (case aside): `X-Forwarded-For`, `-Proto`, `X-Request-Id`,
    /// `X-Waitgate-User`, `-Queue`.
    Own(Own),
    /// One of those, spelt with `_` for `-` somewhere: what a CGI or WSGI
    /// backend reads as the same name.
    OwnAlias,
    /// `X-Waitgate-Release`: the backend gives the user's slot back. Read
    /// on upstream responses, never relayed.
    Release,
    /// A header that tells a backend about the client or the request's way
    /// to it, which only a proxy in front may say (see [`Forwarding`]).
    /// `alias`: spelt with `_` for `-` somewhere.
    Forwarding {
        kind: Forwarding,
        alias: bool,
    },
    Other,
}

/// The forwarding headers other than waitgate's own, by what waitgate does
/// with a client's (`rules::forward`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forwarding {
    /// `Forwarded` (RFC 7239): waitgate sets it, after a trusted peer's.
    Forwarded,
    /// The client's address, or the scheme, host, port or prefix the
    /// client used: `X-Real-IP`, `True-Client-IP`, `X-Client-IP`,
    /// `CF-Connecting-IP`, `X-Scheme`, `X-Host` and the others of
    /// [`FORWARDING`], and every `X-Forwarded-*` but `-For` and `-Proto`.
    /// Kept from a trusted peer only.
    Describes,
    /// A path other than the request's, which some stacks route on
    /// (`X-Original-URL`, `X-Original-URI`, `X-Rewrite-URL`,
    /// `X-Envoy-Original-Path`), or a claim that the request is a
    /// framework's own internal one (`X-Middleware-Subrequest`): never
    /// forwarded, since waitgate checked the request as it came.
    Reroutes,
}

/// The forwarding headers by name (lower case), bar `X-Forwarded-*`: the
/// client's address as balancers, CDNs and servers write it, the scheme or
/// host it used, and the paths some stacks route on.
const FORWARDING: [(&str, Forwarding); 32] = [
    ("forwarded", Forwarding::Forwarded),
    ("x-original-forwarded-for", Forwarding::Describes),
    ("fly-client-ip", Forwarding::Describes),
    ("x-appengine-user-ip", Forwarding::Describes),
    ("x-azure-clientip", Forwarding::Describes),
    ("cloudfront-viewer-address", Forwarding::Describes),
    ("x-real-port", Forwarding::Describes),
    ("x-middleware-subrequest", Forwarding::Reroutes),
    ("x-forwarded", Forwarding::Describes),
    ("x-real-ip", Forwarding::Describes),
    ("x-client-ip", Forwarding::Describes),
    ("client-ip", Forwarding::Describes),
    ("true-client-ip", Forwarding::Describes),
    ("cf-connecting-ip", Forwarding::Describes),
    ("fastly-client-ip", Forwarding::Describes),
    ("x-cluster-client-ip", Forwarding::Describes),
    ("proxy-client-ip", Forwarding::Describes),
    ("wl-proxy-client-ip", Forwarding::Describes),
    ("x-remote-ip", Forwarding::Describes),
    ("x-remote-addr", Forwarding::Describes),
    ("x-originating-ip", Forwarding::Describes),
    ("x-proxyuser-ip", Forwarding::Describes),
    ("x-envoy-external-address", Forwarding::Describes),
    ("x-scheme", Forwarding::Describes),
    ("x-url-scheme", Forwarding::Describes),
    ("front-end-https", Forwarding::Describes),
    ("x-host", Forwarding::Describes),
    ("x-original-host", Forwarding::Describes),
    ("x-original-url", Forwarding::Reroutes),
    ("x-original-uri", Forwarding::Reroutes),
    ("x-rewrite-url", Forwarding::Reroutes),
    ("x-envoy-original-path", Forwarding::Reroutes),
];

/// The headers waitgate sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Own {
    User,
    Queue,
    ForwardedFor,
    ForwardedProto,
    RequestId,
}

impl Name {
    pub fn of(name: &[u8]) -> Name {
        let eq = |lower: &str| name.eq_ignore_ascii_case(lower.as_bytes());
        match name.len() {
            2 if eq("te") => Name::Hop,
            4 if eq("host") => Name::Host,
            4 if eq("date") => Name::Date,
            6 if eq("expect") => Name::Expect,
            7 if eq("upgrade") => Name::Upgrade,
            7 if eq("trailer") => Name::Hop,
            10 if eq("connection") => Name::Connection,
            10 if eq("keep-alive") => Name::Hop,
            13 if eq("authorization") => Name::Authorization,
            14 if eq("content-length") => Name::ContentLength,
            14 if eq("http2-settings") => Name::Hop,
            16 if eq("proxy-connection") => Name::Hop,
            17 if eq("transfer-encoding") => Name::TransferEncoding,
            18 if eq("proxy-authenticate") => Name::Hop,
            18 if eq("x-waitgate-release") => Name::Release,
            19 if eq("proxy-authorization") => Name::Hop,
            12 | 15 | 16 | 17 => match own(name) {
                Name::Other => forwarding(name),
                own => own,
            },
            _ => forwarding(name),
        }
    }
}

/// Names of the forwarding headers, in any case and with `_` for `-`.
fn forwarding(name: &[u8]) -> Name {
    // Most names are none of them: one length check and one byte for those.
    if name.len() < 6 || !matches!(fold(name[0]), b'c' | b'f' | b'p' | b't' | b'w' | b'x') {
        return Name::Other;
    }
    for (spelling, kind) in FORWARDING {
        if spelling.len() == name.len() {
            if let Some(alias) = folded_eq(name, spelling) {
                return Name::Forwarding { kind, alias };
            }
        }
    }
    // Every other `X-Forwarded-*` (`-For` and `-Proto` are waitgate's own).
    match name.len() > 12 {
        true => match folded_eq(&name[..12], "x-forwarded-") {
            Some(alias) => Name::Forwarding {
                kind: Forwarding::Describes,
                alias: alias || name[12..].contains(&b'_'),
            },
            None => Name::Other,
        },
        false => Name::Other,
    }
}

/// Whether `name` reads as `spelling` (lower case, same length) with `_`
/// for `-`: `Some(true)` where it used a `_`.
fn folded_eq(name: &[u8], spelling: &str) -> Option<bool> {
    let mut alias = false;
    for (&a, b) in name.iter().zip(spelling.bytes()) {
        if fold(a) != b {
            return None;
        }
        alias |= a == b'_';
    }
    Some(alias)
}

/// Names of the lengths of waitgate's own headers.
fn own(name: &[u8]) -> Name {
    let (own, spelling): (Own, &str) = match name.len() {
        12 => (Own::RequestId, "x-request-id"),
        15 if fold(name[2]) == b'f' => (Own::ForwardedFor, "x-forwarded-for"),
        15 => (Own::User, "x-waitgate-user"),
        16 => (Own::Queue, "x-waitgate-queue"),
        _ => (Own::ForwardedProto, "x-forwarded-proto"),
    };
    match folded_eq(name, spelling) {
        None => Name::Other,
        Some(true) => Name::OwnAlias,
        Some(false) => Name::Own(own),
    }
}

/// Lower case, with `_` read as `-`.
fn fold(b: u8) -> u8 {
    match b {
        b'_' => b'-',
        b => b.to_ascii_lowercase(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forwarding(kind: Forwarding, alias: bool) -> Name {
        Name::Forwarding { kind, alias }
    }

    #[test]
    fn names_are_recognised_in_any_case() {
        for (text, name) in [
            ("Content-Length", Name::ContentLength),
            ("TRANSFER-ENCODING", Name::TransferEncoding),
            ("host", Name::Host),
            ("Connection", Name::Connection),
            ("upgrade", Name::Upgrade),
            ("Expect", Name::Expect),
            ("authorization", Name::Authorization),
            ("Date", Name::Date),
            ("TE", Name::Hop),
            ("Keep-Alive", Name::Hop),
            ("Proxy-Authorization", Name::Hop),
            ("proxy-authenticate", Name::Hop),
            ("Proxy-Connection", Name::Hop),
            ("Trailer", Name::Hop),
            ("HTTP2-Settings", Name::Hop),
            ("X-Waitgate-User", Name::Own(Own::User)),
            ("x-waitgate-queue", Name::Own(Own::Queue)),
            ("X-Forwarded-For", Name::Own(Own::ForwardedFor)),
            ("X-FORWARDED-PROTO", Name::Own(Own::ForwardedProto)),
            ("X-Request-Id", Name::Own(Own::RequestId)),
            ("X_Waitgate_User", Name::OwnAlias),
            ("x-waitgate_queue", Name::OwnAlias),
            ("X_Forwarded_For", Name::OwnAlias),
            ("x_request_id", Name::OwnAlias),
            ("Forwarded", forwarding(Forwarding::Forwarded, false)),
            ("X-Real-IP", forwarding(Forwarding::Describes, false)),
            ("x_real_ip", forwarding(Forwarding::Describes, true)),
            ("True-Client-IP", forwarding(Forwarding::Describes, false)),
            ("X-Forwarded-Host", forwarding(Forwarding::Describes, false)),
            ("X-FORWARDED-PORT", forwarding(Forwarding::Describes, false)),
            (
                "X-Forwarded-Prefix",
                forwarding(Forwarding::Describes, false),
            ),
            (
                "x-forwarded_prefix",
                forwarding(Forwarding::Describes, true),
            ),
            (
                "X-Forwarded-Server",
                forwarding(Forwarding::Describes, false),
            ),
            ("X-Original-URL", forwarding(Forwarding::Reroutes, false)),
            ("x-rewrite-url", forwarding(Forwarding::Reroutes, false)),
            ("X-Forwarded-", Name::Other),
            ("X-Forwarded", forwarding(Forwarding::Describes, false)),
            ("Client-IP", forwarding(Forwarding::Describes, false)),
            (
                "WL-Proxy-Client-IP",
                forwarding(Forwarding::Describes, false),
            ),
            ("X-Host", forwarding(Forwarding::Describes, false)),
            ("X-Scheme", forwarding(Forwarding::Describes, false)),
            ("Front-End-Https", forwarding(Forwarding::Describes, false)),
            (
                "X-Envoy-Original-Path",
                forwarding(Forwarding::Reroutes, false),
            ),
            ("X-Hosts", Name::Other),
            ("Cookie", Name::Other),
            ("Forwarded-For", Name::Other),
            ("X-Waitgate-Users", Name::Other),
            ("X-Forwarded-Fox", forwarding(Forwarding::Describes, false)),
            ("Content-Type", Name::Other),
            ("Hostx", Name::Other),
            ("", Name::Other),
        ] {
            assert_eq!(Name::of(text.as_bytes()), name, "{text}");
        }
    }

    proptest::proptest! {
        /// The classifier agrees with plain comparisons for any name.
        #[test]
        fn agrees_with_plain_comparison(name in "[A-Za-z_-]{0,20}") {
            let lower = name.to_ascii_lowercase();
            let folded = lower.replace('_', "-");
            let got = Name::of(name.as_bytes());
            let own = ["x-waitgate-user", "x-waitgate-queue", "x-forwarded-for", "x-forwarded-proto", "x-request-id"];
            if own.contains(&folded.as_str()) {
                proptest::prop_assert!(matches!(got, Name::Own(_) | Name::OwnAlias));
                proptest::prop_assert_eq!(got == Name::OwnAlias, name.contains('_'));
            } else if folded.starts_with("x-forwarded-") && folded.len() > 12 {
                let describes = matches!(got, Name::Forwarding { kind: Forwarding::Describes, .. });
                proptest::prop_assert!(describes, "{}", name);
                proptest::prop_assert_eq!(got == Name::Forwarding { kind: Forwarding::Describes, alias: true }, name.contains('_'));
            } else if super::FORWARDING.iter().any(|(n, _)| *n == folded) {
                let forwarding = matches!(got, Name::Forwarding { .. });
                proptest::prop_assert!(forwarding, "{}", name);
            } else if lower == "content-length" {
                proptest::prop_assert_eq!(got, Name::ContentLength);
            } else if ["te", "trailer", "keep-alive", "proxy-connection", "proxy-authorization", "proxy-authenticate", "http2-settings"].contains(&lower.as_str()) {
                proptest::prop_assert_eq!(got, Name::Hop);
            } else if !["transfer-encoding", "host", "connection", "upgrade", "expect", "authorization", "date"].contains(&lower.as_str()) {
                proptest::prop_assert_eq!(got, Name::Other);
            }
        }
    }
}
