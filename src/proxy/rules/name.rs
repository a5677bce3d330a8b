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
    Other,
}

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
            12 | 15 | 16 | 17 => own(name),
            _ => Name::Other,
        }
    }
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
    let mut alias = false;
    for (&a, b) in name.iter().zip(spelling.bytes()) {
        if fold(a) != b {
            return Name::Other;
        }
        alias |= a == b'_';
    }
    if alias {
        Name::OwnAlias
    } else {
        Name::Own(own)
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
            ("X-Waitgate-Users", Name::Other),
            ("X-Forwarded-Fox", Name::Other),
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
