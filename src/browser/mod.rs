//! Browsers: the rules that let a person in a browser wait in the queue
//! with no code of the site's own.
//!
//! - [`redirect`]: a browser without a token goes to the waiting-room page,
//!   and back only to a path of this site;
//! - [`cookie`]: the queue and token cookies;
//! - [`origin`]: the same-site rule for cookie-authenticated calls, and
//!   CORS for other allowed sites;
//! - [`template`] and [`text`]: the page, in English and Korean.
//!
//! The page itself is served by the queue API (`crate::queue_api::page`), which
//! registers and polls for the visitor. These modules hold rules only, and
//! import nothing of waitgate's but the path and user-id rules.

pub mod assets;
pub mod cookie;
pub mod origin;
pub mod redirect;
pub mod template;
pub mod text;

use cookie::QueueCookie;
use origin::Sent;

/// What a waiting-room path asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PagePath {
    /// `/waiting-room/<queue>`.
    Page(String),
    /// `/waiting-room/assets/<file>`.
    Asset(&'static assets::Asset),
    /// Under the prefix, but nothing there.
    Unknown,
}

/// Classifies a path under [`redirect::PAGE_PREFIX`]; `None` for any other.
pub fn page_path(path: &str) -> Option<PagePath> {
    let rest = path.strip_prefix(redirect::PAGE_PREFIX)?;
    if let Some(file) = rest.strip_prefix("assets/") {
        return Some(assets::find(file).map_or(PagePath::Unknown, PagePath::Asset));
    }
    let valid = !rest.is_empty()
        && rest
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    Some(if valid {
        PagePath::Page(rest.to_string())
    } else {
        PagePath::Unknown
    })
}

/// What a browser's request says about who sent it, read once from its
/// header fields by both HTTP paths. Owned: the direct lane answers after
/// its read buffer has moved on.
#[derive(Debug, Default, Clone)]
pub struct Caller {
    origin: Option<String>,
    fetch_site: Option<String>,
    /// `Sec-Fetch-Dest`: `document` for a navigation.
    fetch_dest: Option<String>,
    /// A browser's guess at a page the user may open next (a prefetch or
    /// a prerender), not a load of it.
    speculative: bool,
    host: Option<String>,
    /// `Cookie` header values.
    cookies: Vec<Vec<u8>>,
    /// `Authorization`, when there is exactly one.
    pub authorization: Option<String>,
    /// `X-Queue-Credential`, when there is exactly one.
    pub credential: Option<String>,
    /// `X-Waitgate-Proof`: a register's proof of work (empty when it was
    /// sent twice, or not as text).
    pub proof: Option<String>,
    /// `X-Waitgate-Invite`: a register's invite to an invite-only queue
    /// (empty when sent twice, or not as text).
    pub invite: Option<String>,
    pub accept_language: Option<String>,
}

impl Caller {
    /// Reads the fields (name, value) of a request head.
    pub fn from_fields<'a>(fields: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> Caller {
        let mut caller = Caller::default();
        let mut authorizations = 0;
        let mut credentials = 0;
        let mut proofs = 0;
        let mut invites = 0;
        for (name, value) in fields {
            let text = || {
                std::str::from_utf8(value)
                    .ok()
                    .map(|v| v.trim().to_string())
            };
            if name.eq_ignore_ascii_case(b"cookie") {
                caller.cookies.push(value.to_vec());
            } else if name.eq_ignore_ascii_case(b"origin") {
                caller.origin = text();
            } else if name.eq_ignore_ascii_case(b"sec-fetch-site") {
                caller.fetch_site = text();
            } else if name.eq_ignore_ascii_case(b"sec-fetch-dest") {
                caller.fetch_dest = text();
            } else if is_purpose_header(name) {
                caller.speculative |= speculative(value);
            } else if name.eq_ignore_ascii_case(b"host") {
                caller.host = text();
            } else if name.eq_ignore_ascii_case(b"authorization") {
                authorizations += 1;
                caller.authorization = text();
            } else if name.eq_ignore_ascii_case(b"x-queue-credential") {
                credentials += 1;
                caller.credential = text();
            } else if name.eq_ignore_ascii_case(b"x-waitgate-invite") {
                invites += 1;
                caller.invite = Some(text().unwrap_or_default());
            } else if name.eq_ignore_ascii_case(b"x-waitgate-proof") {
                proofs += 1;
                caller.proof = Some(text().unwrap_or_default());
            } else if name.eq_ignore_ascii_case(b"accept-language") {
                caller.accept_language = text();
            }
        }
        // Two of either is ambiguous: neither is believed.
        if authorizations > 1 {
            caller.authorization = None;
        }
        if credentials > 1 {
            caller.credential = None;
        }
        // Two proofs are one malformed one: refused, never guessed at.
        if proofs > 1 {
            caller.proof = Some(String::new());
        }
        if invites > 1 {
            caller.invite = Some(String::new());
        }
        caller
    }

    /// Where the request says it comes from.
    pub fn sent(&self) -> Sent<'_> {
        Sent {
            origin: self.origin.as_deref(),
            fetch_site: self.fetch_site.as_deref(),
            host: self.host.as_deref(),
        }
    }

    /// Whether the request may be a page load: a browser says
    /// `Sec-Fetch-Dest: document` when it navigates, and other values for
    /// an image, a frame or a script that loads the URL (which a page of any
    /// site can make). Clients that send no such header are taken at their
    /// word, as for the queue API.
    pub fn is_navigation(&self) -> bool {
        self.fetch_dest
            .as_deref()
            .is_none_or(|d| d.eq_ignore_ascii_case("document"))
    }

    /// Whether a browser says the request is a prefetch or a prerender.
    pub fn is_speculative(&self) -> bool {
        self.speculative
    }

    /// A browser says where its requests come from; an API client does
    /// not.
    pub fn is_browser(&self) -> bool {
        self.origin.is_some() || self.fetch_site.is_some()
    }

    /// The well-formed queue cookies for `queue`, in the order sent
    /// (callers take the first whose credential checks out).
    pub fn queue_cookies(&self, queue: &str) -> Vec<QueueCookie> {
        self.cookies(&cookie::queue_cookie_name(queue))
            .into_iter()
            .filter_map(QueueCookie::parse)
            .collect()
    }

    /// The values of every cookie called `name`, in the order sent.
    pub fn cookies(&self, name: &str) -> Vec<&str> {
        cookie::find_all(self.cookies.iter().map(Vec::as_slice), name).collect()
    }

    /// The request's host, from `Host`, or for HTTP/2 (which carries it in
    /// `:authority`) from the target's authority.
    pub fn with_authority(mut self, authority: Option<&str>) -> Caller {
        if self.host.is_none() {
            self.host = authority.map(str::to_string);
        }
        self
    }
}

/// The headers by which browsers mark a request that loads a page ahead of
/// the user: `Sec-Purpose` (Chromium's speculation rules), `Purpose`
/// (`<link rel=prefetch>` in Chromium and Safari), `X-Purpose` and `X-Moz`
/// (older browsers, Firefox).
fn is_purpose_header(name: &[u8]) -> bool {
    [&b"sec-purpose"[..], b"purpose", b"x-purpose", b"x-moz"]
        .iter()
        .any(|known| name.eq_ignore_ascii_case(known))
}

/// Whether a purpose header's value says prefetch (`prefetch`,
/// `prefetch;prerender`) or preview.
fn speculative(value: &[u8]) -> bool {
    let value = String::from_utf8_lossy(value).to_ascii_lowercase();
    value.contains("prefetch") || value.contains("prerender") || value.contains("preview")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiting_room_paths_are_classified() {
        assert_eq!(
            page_path("/waiting-room/baseball"),
            Some(PagePath::Page("baseball".into()))
        );
        assert!(matches!(
            page_path("/waiting-room/assets/page.js"),
            Some(PagePath::Asset(a)) if a.name == "page.js"
        ));
        for unknown in [
            "/waiting-room/",
            "/waiting-room/a/b",
            "/waiting-room/assets/x.js",
            "/waiting-room/a.b",
        ] {
            assert_eq!(page_path(unknown), Some(PagePath::Unknown), "{unknown}");
        }
        assert_eq!(page_path("/waiting-roomx"), None);
        assert_eq!(page_path("/tickets"), None);
    }

    #[test]
    fn the_caller_is_read_from_the_fields_once() {
        let fields: Vec<(&[u8], &[u8])> = vec![
            (b"Host", b"tickets"),
            (b"cookie", b"waitgate-queue-q=abc.3.bob; other=1"),
            (b"Origin", b"https://tickets"),
            (b"Sec-Fetch-Site", b"same-origin"),
            (b"X-Queue-Credential", b"c1"),
            (b"x-queue-credential", b"c2"),
            (b"Authorization", b"Bearer t"),
        ];
        let c = Caller::from_fields(fields.into_iter());
        assert_eq!(c.sent().host, Some("tickets"));
        assert_eq!(c.sent().origin, Some("https://tickets"));
        assert_eq!(c.sent().fetch_site, Some("same-origin"));
        assert_eq!(c.authorization.as_deref(), Some("Bearer t"));
        assert_eq!(c.credential, None, "two credentials: neither");
        let q = &c.queue_cookies("q")[0];
        assert_eq!(
            (q.credential.as_str(), q.start_rank, q.user.as_str()),
            ("abc", 3, "bob")
        );
        assert!(c.queue_cookies("other").is_empty());
        let h2 = Caller::from_fields(std::iter::empty()).with_authority(Some("tickets:443"));
        assert_eq!(h2.sent().host, Some("tickets:443"));
    }
}
