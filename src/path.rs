//! The path rules: which request targets are too ambiguous to route, what
//! is under a prefix, and which paths are the queue API's.
//!
//! Pingora forwards the request target as it was received and does no
//! normalisation, while backends (Spring, Tomcat, nginx, Express) each
//! normalise in their own way. A path that two parsers could read
//! differently is how prefix checks get bypassed (`/public/..;/admin`,
//! `/a/%2e%2e/b`, `//admin`). So instead of normalising, waitgate refuses
//! every form that would need it: what is checked is exactly what is
//! forwarded.

use std::borrow::Cow;

/// Why a path was refused. Each becomes a 400 with its own message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathReject {
    /// Not origin-form: does not start with `/`.
    NotAbsolute,
    /// A NUL, control or non-ASCII byte, raw or percent-encoded (bar the
    /// escaped UTF-8 of letters).
    ControlByte,
    /// An empty segment (`//`).
    EmptySegment,
    /// A `.` or `..` segment.
    DotSegment,
    /// `\`, which some servers read as `/`.
    Backslash,
    /// `;`, which servlet containers strip as a path parameter.
    Semicolon,
    /// A percent-encoded `/`, `\`, `.` or `%` (the last covers double encoding).
    EncodedSeparator,
    /// A `%` not followed by two hex digits.
    BadPercent,
    /// A character that must be percent-encoded in a request target: `#`,
    /// `<`, `>`, a space, a backtick in the path, `"` in the query.
    Unencoded,
}

impl PathReject {
    pub fn message(self) -> &'static str {
        match self {
            PathReject::NotAbsolute => "The request path must start with /.",
            PathReject::ControlByte => {
                "The request path contains a control or non-ASCII byte (escaped letters excepted)."
            }
            PathReject::EmptySegment => "The request path contains an empty segment (//).",
            PathReject::DotSegment => {
                "The request path contains a . or .. segment, or one a server could read as one."
            }
            PathReject::Backslash => "The request path contains a backslash.",
            PathReject::Semicolon => "The request path contains a semicolon.",
            PathReject::EncodedSeparator => {
                "The request path contains a percent-encoded /, \\, . or %."
            }
            PathReject::BadPercent => "The request path contains a malformed percent escape.",
            PathReject::Unencoded => {
                "The request target contains a character that must be percent-encoded (#, <, >, `, \", space)."
            }
        }
    }
}

/// Checks a request target (path and optional `?query`) as raw bytes.
///
/// The path must be origin-form and need no normalisation. The query is not
/// part of routing; it is checked for control bytes and for characters that
/// no client may send unencoded.
///
/// The characters refused unencoded are exactly those the `http` crate's
/// URI parser refuses, plus `#`: Pingora parses the target with it, so
/// applying the same set here, before either path reads the target, gives
/// both paths the same answer. A `#` starts a fragment, which a client never
/// sends (RFC 9112 §3.2); a parser that cuts it off and one that forwards it
/// would read two different targets.
pub fn classify(target: &[u8]) -> Result<(), PathReject> {
    let (path, query) = match target.iter().position(|&b| b == b'?') {
        Some(i) => (&target[..i], &target[i + 1..]),
        None => (target, &[][..]),
    };
    if query.iter().any(|&b| is_control(b)) {
        return Err(PathReject::ControlByte);
    }
    if query
        .iter()
        .any(|&b| matches!(b, b'#' | b'<' | b'>' | b'"' | b' '))
    {
        return Err(PathReject::Unencoded);
    }
    if path.first() != Some(&b'/') {
        return Err(PathReject::NotAbsolute);
    }
    let mut i = 0;
    while i < path.len() {
        match path[i] {
            b if is_control(b) => return Err(PathReject::ControlByte),
            b'#' | b'<' | b'>' | b'`' | b' ' => return Err(PathReject::Unencoded),
            b'\\' => return Err(PathReject::Backslash),
            b';' => return Err(PathReject::Semicolon),
            b'%' => {
                let decoded = escaped(path, i)?;
                if decoded >= 0x80 {
                    i = letters(path, i)?;
                    continue;
                }
                match decoded {
                    b'/' | b'\\' | b'.' | b'%' => return Err(PathReject::EncodedSeparator),
                    b if is_control(b) => return Err(PathReject::ControlByte),
                    _ => {}
                }
                i += 2;
            }
            _ => {}
        }
        i += 1;
    }
    // Segment checks on the raw path: every segment sits between two `/`s.
    if path[1..].split(|&b| b == b'/').any(reads_as_dots) {
        return Err(PathReject::DotSegment);
    }
    // `/` alone is fine; otherwise an empty segment means `//` (or a trailing
    // `/`, which is allowed: `/a/` is a distinct, unambiguous resource).
    if path.windows(2).any(|w| w == b"//") {
        return Err(PathReject::EmptySegment);
    }
    Ok(())
}

/// Whether a segment is, or is read by some server as, `.` or `..`: made
/// of dots and spaces only (raw or escaped) up to an escaped `;`, `?` or
/// `#`. IIS and Windows trim trailing spaces and dots from a name
/// (`..%20`, `...`), some stacks trim leading ones (`%20..`), servlet
/// containers cut a path parameter (`..%3B`, decoded before the cut), and
/// a proxy that decodes the path before passing it on (nginx's `$uri`)
/// makes `..%3F` a `..` and a query. Called on a path whose escapes are
/// already checked.
fn reads_as_dots(segment: &[u8]) -> bool {
    let mut dots = false;
    let mut i = 0;
    while i < segment.len() {
        let mut b = segment[i];
        if b == b'%' {
            b = escaped(segment, i).unwrap_or(0);
            i += 2;
        }
        match b {
            b'.' => dots = true,
            b' ' => {}
            b';' | b'?' | b'#' => break,
            _ => return false,
        }
        i += 1;
    }
    dots
}

/// The byte the escape at `path[at]` (a `%`) stands for.
fn escaped(path: &[u8], at: usize) -> Result<u8, PathReject> {
    match (
        path.get(at + 1).copied().and_then(hex),
        path.get(at + 2).copied().and_then(hex),
    ) {
        (Some(h), Some(l)) => Ok(h << 4 | l),
        _ => Err(PathReject::BadPercent),
    }
}

/// Reads the run of escaped bytes outside ASCII that starts at `path[at]`
/// and returns where it ends. The run must be UTF-8 (which has no overlong
/// forms: `%C0%AF` is not a `/`) of letters only, so that a site's paths in
/// Korean (`/%EA%B3%B5%EC%97%B0`), Japanese, Chinese or accented Latin pass,
/// while nothing a backend could fold into a separator does: Unicode's
/// compatibility forms (NFKC) turn a fullwidth solidus (U+FF0F) into `/` and
/// a one-dot leader (U+2024) into `.`, and are refused like other symbols.
fn letters(path: &[u8], at: usize) -> Result<usize, PathReject> {
    let mut run = Vec::new();
    let mut end = at;
    while path.get(end) == Some(&b'%') {
        let byte = escaped(path, end)?;
        if byte < 0x80 {
            break;
        }
        run.push(byte);
        end += 3;
    }
    let text = std::str::from_utf8(&run).map_err(|_| PathReject::ControlByte)?;
    if text.chars().all(is_letter) {
        Ok(end)
    } else {
        Err(PathReject::ControlByte)
    }
}

/// Letters of the scripts a path may carry escaped: Hangul (syllables and
/// jamo), CJK ideographs, kana, and the alphabetic characters of Latin-1,
/// Latin Extended-A, Greek and Cyrillic. None of them folds into ASCII
/// punctuation under Unicode normalisation.
fn is_letter(c: char) -> bool {
    matches!(c,
        '\u{AC00}'..='\u{D7A3}'
        | '\u{1100}'..='\u{11FF}'
        | '\u{3131}'..='\u{318E}'
        | '\u{4E00}'..='\u{9FFF}'
        | '\u{3041}'..='\u{3096}'
        | '\u{30A1}'..='\u{30FA}')
        || (matches!(c, '\u{C0}'..='\u{17F}' | '\u{370}'..='\u{4FF}') && c.is_alphabetic())
}

/// Control bytes (C0 and DEL), plus raw bytes outside ASCII: RFC 3986 wants
/// those percent-encoded, and accepting them raw invites parser differences.
fn is_control(b: u8) -> bool {
    !(0x20..0x7f).contains(&b)
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// The origin-form part (`/path?query`) of a request target.
///
/// Origin-form is returned as it is. Absolute-form (`http://host/path`,
/// which RFC 9112 §3.2.2 says a server must accept) is cut down to its path
/// and query: the authority is ignored, since the upstream is always the
/// configured one. Anything else (`*`, `host:port`) has no origin form.
pub fn origin_form(target: &[u8]) -> Option<Cow<'_, [u8]>> {
    if target.first() == Some(&b'/') {
        return Some(Cow::Borrowed(target));
    }
    let scheme_len = if starts_with_ignore_case(target, b"http://") {
        7
    } else if starts_with_ignore_case(target, b"https://") {
        8
    } else {
        return None;
    };
    let rest = &target[scheme_len..];
    match rest.iter().position(|&b| b == b'/' || b == b'?') {
        Some(i) if rest[i] == b'/' => Some(Cow::Borrowed(&rest[i..])),
        // `http://host?q`: the path is empty, i.e. `/`.
        Some(i) => Some(Cow::Owned([b"/", &rest[i..]].concat())),
        None => Some(Cow::Borrowed(b"/")),
    }
}

fn starts_with_ignore_case(bytes: &[u8], prefix: &[u8]) -> bool {
    bytes.len() >= prefix.len() && bytes[..prefix.len()].eq_ignore_ascii_case(prefix)
}

/// Does `path` fall under `prefix`, at a segment boundary?
///
/// `/api/v1/follow-up` matches itself, `/api/v1/follow-up/x` and
/// `/api/v1/follow-up?x`, but not `/api/v1/follow-upx`. Case-sensitive, as
/// paths are (RFC 3986 §6.2.2.1 only folds the scheme and host).
pub fn under_prefix(path: &str, prefix: &str) -> bool {
    if prefix == "/" {
        return path.starts_with('/');
    }
    match path.strip_prefix(prefix) {
        Some(rest) => rest.is_empty() || rest.starts_with('/'),
        None => false,
    }
}

/// Everything under this prefix is the queue API; nothing under it is ever
/// forwarded.
pub const QUEUE_API_PREFIX: &str = "/api/v1/queue";

pub fn is_queue_api_path(path: &str) -> bool {
    under_prefix(path, QUEUE_API_PREFIX)
}

/// The endpoints of the queue API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Register,
    Rank,
    Dropout,
    Token,
    /// A proof-of-work challenge for register.
    Challenge,
    /// The queue's draw and order figures (no Redis call).
    Fairness,
    /// The receipts' public keys, as a JWKS (outside the queue API's
    /// prefix, where such keys are looked for).
    Keys,
}

/// Where the receipts' public keys are served.
pub const KEYS_PATH: &str = "/.well-known/waitgate/keys";

impl Endpoint {
    pub const ALL: [Endpoint; 7] = [
        Endpoint::Register,
        Endpoint::Rank,
        Endpoint::Dropout,
        Endpoint::Token,
        Endpoint::Challenge,
        Endpoint::Fairness,
        Endpoint::Keys,
    ];

    pub fn from_path(path: &str) -> Option<Endpoint> {
        Endpoint::ALL.into_iter().find(|e| e.path() == path)
    }

    pub fn path(self) -> &'static str {
        match self {
            Endpoint::Register => "/api/v1/queue/register",
            Endpoint::Rank => "/api/v1/queue/rank",
            Endpoint::Dropout => "/api/v1/queue/dropout",
            Endpoint::Token => "/api/v1/queue/active/token",
            Endpoint::Challenge => "/api/v1/queue/challenge",
            Endpoint::Fairness => "/api/v1/queue/fairness",
            Endpoint::Keys => KEYS_PATH,
        }
    }

    /// The one method the endpoint takes.
    pub fn method(self) -> &'static str {
        match self {
            Endpoint::Register | Endpoint::Token => "POST",
            Endpoint::Rank | Endpoint::Challenge | Endpoint::Fairness | Endpoint::Keys => "GET",
            Endpoint::Dropout => "DELETE",
        }
    }

    /// The name used in logs and metric labels.
    pub fn name(self) -> &'static str {
        match self {
            Endpoint::Register => "register",
            Endpoint::Rank => "rank",
            Endpoint::Dropout => "dropout",
            Endpoint::Token => "token",
            Endpoint::Challenge => "challenge",
            Endpoint::Fairness => "fairness",
            Endpoint::Keys => "keys",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_paths_pass() {
        for p in [
            "/",
            "/api/v1/follow-up",
            "/api/v1/follow-up/",
            "/api/v1/follow-up/access?x=1&y=%2F",
            "/a/b.c/d..e/.well-known",
            "/a/..x/%20/.b%20/a%3B../a%3F%23",
            "/a/%41%7e",
            "/a?b=/../c",
            // What the `http` crate's parser accepts unencoded, and so Pingora.
            "/a/{\"x\"}|^[]",
            "/a?q={x}|`^",
        ] {
            assert_eq!(classify(p.as_bytes()), Ok(()), "{p}");
        }
    }

    #[test]
    fn escaped_letters_pass_and_other_escaped_text_does_not() {
        for p in [
            // 공연 (Korean), チケット, 票, café, Ωμέγα, билет
            "/tickets/%EA%B3%B5%EC%97%B0/1",
            "/t/%E3%83%81%E3%82%B1%E3%83%83%E3%83%88",
            "/t/%E7%A5%A8?x=1",
            "/t/caf%C3%A9",
            "/t/%CE%A9%CE%BC%CE%AD%CE%B3%CE%B1",
            "/t/%D0%B1%D0%B8%D0%BB%D0%B5%D1%82",
            "/t/%ea%b0%80%41",
        ] {
            assert_eq!(classify(p.as_bytes()), Ok(()), "{p}");
        }
        for p in [
            "/t/%C0%AF",             // an overlong `/`
            "/t/%C0%AE%C0%AE",       // overlong `..`
            "/t/%EF%BC%8F",          // fullwidth solidus: `/` under NFKC
            "/t/%EF%BC%8E%EF%BC%8E", // fullwidth full stops
            "/t/%E2%80%A4",          // one dot leader
            "/t/%EF%BC%BC",          // fullwidth reverse solidus
            "/t/%C2%A0",             // no-break space
            "/t/%EA%B0",             // cut short
            "/t/%EA%41%80",          // broken by ASCII
            "/t/%ED%A0%80",          // a surrogate
            "/t/%E2%80%AE",          // right-to-left override
            "/t/%C3%97",             // multiplication sign, not a letter
        ] {
            assert_eq!(classify(p.as_bytes()), Err(PathReject::ControlByte), "{p}");
        }
    }

    #[test]
    fn ambiguous_paths_are_refused() {
        use PathReject::*;
        let cases: &[(&[u8], PathReject)] = &[
            (b"api", NotAbsolute),
            (b"*", NotAbsolute),
            (b"http://evil/api", NotAbsolute),
            (b"/a/../b", DotSegment),
            (b"/a/./b", DotSegment),
            (b"/a/..", DotSegment),
            (b"/.", DotSegment),
            (b"/a/..%20/b", DotSegment),
            (b"/a/%20../b", DotSegment),
            (b"/a/.%20/b", DotSegment),
            (b"/a/..%3B/b", DotSegment),
            (b"/a/..%3bjsessionid=x/b", DotSegment),
            (b"/a/.../b", DotSegment),
            (b"/a/..%3F/b", DotSegment),
            (b"/a/..%23x", DotSegment),
            (b"/a/%20.%20.", DotSegment),
            (b"/a//b", EmptySegment),
            (b"//a", EmptySegment),
            (b"/a\\b", Backslash),
            (b"/a/..;/b", Semicolon),
            (b"/a;jsessionid=1", Semicolon),
            (b"/a\0b", ControlByte),
            (b"/a\tb", ControlByte),
            (b"/a\x7fb", ControlByte),
            (b"/caf\xc3\xa9", ControlByte),
            (b"/a?b=\x01", ControlByte),
            (b"/a/%2e%2e/b", EncodedSeparator),
            (b"/a/%2E/b", EncodedSeparator),
            (b"/a%2fb", EncodedSeparator),
            (b"/a%2Fb", EncodedSeparator),
            (b"/a%5cb", EncodedSeparator),
            (b"/a%252e%252e/b", EncodedSeparator),
            (b"/a%25", EncodedSeparator),
            (b"/a%00", ControlByte),
            (b"/a%0a", ControlByte),
            (b"/a%", BadPercent),
            (b"/a%2", BadPercent),
            (b"/a%zz", BadPercent),
            (b"/a<b", Unencoded),
            (b"/a>b", Unencoded),
            (b"/a`b", Unencoded),
            (b"/a b", Unencoded),
            (b"/x?#", Unencoded),
            (b"/x#frag", Unencoded),
            (b"/api/v1/queue/rank?userId=a&queue=baseball#x", Unencoded),
            (b"/a?b=<script>", Unencoded),
            (b"/a?b=\"", Unencoded),
        ];
        for (p, why) in cases {
            assert_eq!(classify(p), Err(*why), "{}", String::from_utf8_lossy(p));
        }
    }

    #[test]
    fn absolute_form_is_cut_to_its_path() {
        let o = |t: &[u8]| origin_form(t).map(|o| String::from_utf8_lossy(&o).into_owned());
        assert_eq!(o(b"/a?b").as_deref(), Some("/a?b"));
        assert_eq!(o(b"http://evil.example/a/b?c").as_deref(), Some("/a/b?c"));
        assert_eq!(o(b"HTTPS://x:443/a").as_deref(), Some("/a"));
        assert_eq!(o(b"http://x").as_deref(), Some("/"));
        assert_eq!(o(b"http://x?a=/b").as_deref(), Some("/?a=/b"));
        assert_eq!(o(b"*"), None);
        assert_eq!(o(b"example.com:443"), None);
        assert_eq!(o(b"ftp://x/a"), None);
    }

    #[test]
    fn prefixes_match_at_segment_boundaries_only() {
        let prefix = "/api/v1/follow-up";
        assert!(under_prefix("/api/v1/follow-up", prefix));
        assert!(under_prefix("/api/v1/follow-up/x", prefix));
        assert!(!under_prefix("/api/v1/follow-upx", prefix));
        assert!(!under_prefix("/api/v1/Follow-up/x", prefix));
        assert!(!under_prefix("/api/v1", prefix));
        assert!(under_prefix("/anything", "/"));
    }

    /// RFC 3986 normalisation as a backend would apply it: decode every
    /// percent escape (§6.2.2.2), then remove dot segments (§5.2.4).
    fn normalise(path: &str) -> String {
        let bytes = path.as_bytes();
        let mut decoded = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'%' {
                if let (Some(h), Some(l)) = (
                    bytes.get(i + 1).and_then(|&b| hex(b)),
                    bytes.get(i + 2).and_then(|&b| hex(b)),
                ) {
                    decoded.push(h << 4 | l);
                    i += 3;
                    continue;
                }
            }
            decoded.push(bytes[i]);
            i += 1;
        }
        let decoded = String::from_utf8_lossy(&decoded).into_owned();
        let mut out: Vec<&str> = Vec::new();
        for segment in decoded.split('/').skip(1) {
            match segment {
                "." => {}
                ".." => {
                    out.pop();
                }
                s => out.push(s),
            }
        }
        format!("/{}", out.join("/"))
    }

    mod property {
        use super::*;
        use proptest::prelude::*;

        const PREFIX: &str = "/api/v1/follow-up";

        fn segment() -> impl Strategy<Value = String> {
            // The prefix's own names, segments that have fooled path
            // normalisers, and random ones.
            const NAMES: &[&str] = &["api", "v1", "follow-up", "admin"];
            const TRICKY: &[&str] = &[
                ".", "..", "", "%2e", "%2E%2e", "%2f", "%5C", "%25", "%252e", ";x", "..;", "\\",
                "%41", "%",
            ];
            prop_oneof![
                4 => prop::sample::select(NAMES).prop_map(str::to_string),
                14 => prop::sample::select(TRICKY).prop_map(str::to_string),
                1 => "[a-z.%-]{1,6}",
            ]
        }

        fn path() -> impl Strategy<Value = String> {
            prop_oneof![
                // Paths under the prefix with anything after it.
                prop::collection::vec(segment(), 0..6)
                    .prop_map(|s| format!("{PREFIX}/{}", s.join("/"))),
                // Anything at all.
                prop::collection::vec(segment(), 1..8).prop_map(|s| format!("/{}", s.join("/"))),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(4096))]

            /// Whatever the classifier accepts under a prefix stays under that
            /// prefix once normalised: no path can climb out of its route.
            #[test]
            fn accepted_paths_stay_under_their_prefix(path in path()) {
                if classify(path.as_bytes()).is_ok() && under_prefix(&path, PREFIX) {
                    let normal = normalise(&path);
                    prop_assert!(under_prefix(&normal, PREFIX), "{} -> {}", path, normal);
                    // And normalisation changes nothing the backend could read differently.
                    prop_assert_eq!(normalise(&normal), normal.clone());
                }
            }

            /// The classifier never panics, whatever the bytes.
            #[test]
            fn classify_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
                let _ = classify(&bytes);
                let _ = origin_form(&bytes);
            }

            /// Whatever the classifier accepts, the `http` crate (Pingora's
            /// parser) accepts too and reads as the same path and query, so
            /// the proxy and the direct lane see one target.
            #[test]
            fn accepted_targets_parse_alike_in_http(bytes in prop::collection::vec(32u8..127, 1..40)) {
                let mut target = vec![b'/'];
                target.extend_from_slice(&bytes);
                if classify(&target).is_ok() {
                    let uri = http::uri::PathAndQuery::try_from(&target[..]);
                    prop_assert!(uri.is_ok(), "{:?}", String::from_utf8_lossy(&target));
                    let parsed = uri.unwrap();
                    prop_assert_eq!(parsed.as_str().as_bytes(), &target[..]);
                }
            }
        }
    }

    #[test]
    fn endpoints_live_under_the_queue_prefix_but_the_keys() {
        for endpoint in Endpoint::ALL {
            assert_eq!(
                is_queue_api_path(endpoint.path()),
                endpoint != Endpoint::Keys,
                "{endpoint:?}"
            );
            assert_eq!(Endpoint::from_path(endpoint.path()), Some(endpoint));
        }
        assert_eq!(Endpoint::from_path("/api/v1/queue/rank/"), None);
        assert!(is_queue_api_path("/api/v1/queue"));
        assert!(!is_queue_api_path("/api/v1/queuex"));
    }
}
