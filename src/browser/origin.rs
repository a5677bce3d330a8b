//! Where a browser's request comes from: the same-site rule for requests a
//! cookie authenticates, and CORS for the origins an operator allows.
//!
//! A cookie is sent with every request to its site, whoever made the page
//! that sends it. So a `POST` or `DELETE` that the queue cookie
//! authenticates must show that this site's own page made it: browsers say
//! so in `Sec-Fetch-Site: same-origin`, and in `Origin`, which a page
//! cannot forge. Anything else (a form on another site, a request with
//! neither header) is refused with 403.

/// The origins waitgate trusts, from `public-origin` and
/// `cors.allowed-origins`.
#[derive(Debug, Clone, Default)]
pub struct Origins {
    /// This site's origin; by default the one the request's `Host` names.
    pub public: Option<String>,
    /// Other sites whose pages may call the queue API, with credentials.
    pub allowed: Vec<String>,
}

/// The request headers the rules read.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sent<'a> {
    pub origin: Option<&'a str>,
    pub fetch_site: Option<&'a str>,
    pub host: Option<&'a str>,
}

impl Origins {
    /// Whether `origin` is this site's: `public-origin`, or, without one,
    /// `http(s)://` followed by the request's `Host`.
    fn is_own(&self, origin: &str, host: Option<&str>) -> bool {
        match (&self.public, host) {
            (Some(public), _) => origin.eq_ignore_ascii_case(public),
            (None, Some(host)) => ["http://", "https://"].iter().any(|scheme| {
                origin.len() == scheme.len() + host.len()
                    && origin[..scheme.len()].eq_ignore_ascii_case(scheme)
                    && origin[scheme.len()..].eq_ignore_ascii_case(host)
            }),
            (None, None) => false,
        }
    }

    /// Whether `origin` is one of `cors.allowed-origins`.
    pub fn is_allowed(&self, origin: &str) -> bool {
        self.allowed.iter().any(|a| a.eq_ignore_ascii_case(origin))
    }

    /// The same-site rule for a cookie-authenticated `POST` or `DELETE`:
    /// the browser says the request is same-origin, or its `Origin` is this
    /// site's or an allowed one.
    pub fn same_site(&self, sent: Sent<'_>) -> bool {
        if sent
            .fetch_site
            .is_some_and(|s| s.eq_ignore_ascii_case("same-origin"))
        {
            return true;
        }
        sent.origin
            .is_some_and(|o| self.is_own(o, sent.host) || self.is_allowed(o))
    }

    /// The `Access-Control-Allow-*` headers for a reply to `sent`: only for
    /// an allowed origin, which is echoed (with credentials, a wildcard is
    /// not allowed).
    pub fn cors(&self, sent: Sent<'_>) -> Option<Vec<(&'static str, String)>> {
        let origin = sent.origin.filter(|o| self.is_allowed(o))?;
        Some(vec![
            ("Access-Control-Allow-Origin", origin.to_string()),
            ("Access-Control-Allow-Credentials", "true".into()),
            ("Vary", "Origin".into()),
        ])
    }
}

/// The answer to a CORS preflight (`OPTIONS` with `Origin` and
/// `Access-Control-Request-Method`) on the queue API.
pub fn preflight(origins: &Origins, sent: Sent<'_>) -> Option<Vec<(&'static str, String)>> {
    let mut headers = origins.cors(sent)?;
    headers.extend([
        ("Access-Control-Allow-Methods", "GET, POST, DELETE".into()),
        // Authorization: the site's login token, with identity binding.
        (
            "Access-Control-Allow-Headers",
            "Authorization, Content-Type, X-Queue-Credential, X-Waitgate-Proof, X-Waitgate-Invite"
                .into(),
        ),
        ("Access-Control-Max-Age", "600".into()),
    ]);
    Some(headers)
}

/// Normalises a configured origin (`scheme://host[:port]`, no path): the
/// form browsers send in `Origin`. `None` when it is not one.
pub fn parse_origin(text: &str) -> Option<String> {
    let (scheme, rest) = text.split_once("://")?;
    if !matches!(scheme, "http" | "https") || rest.is_empty() {
        return None;
    }
    let valid = rest
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']'));
    valid.then(|| format!("{scheme}://{}", rest.to_ascii_lowercase()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent<'a>(origin: Option<&'a str>, fetch_site: Option<&'a str>) -> Sent<'a> {
        Sent {
            origin,
            fetch_site,
            host: Some("tickets.example"),
        }
    }

    #[test]
    fn cookie_requests_must_come_from_this_site() {
        let o = Origins {
            public: None,
            allowed: vec!["https://shop.example".into()],
        };
        assert!(o.same_site(sent(None, Some("same-origin"))));
        assert!(o.same_site(sent(Some("https://tickets.example"), None)));
        assert!(o.same_site(sent(Some("http://TICKETS.example"), None)));
        assert!(o.same_site(sent(Some("https://shop.example"), Some("cross-site"))));
        for (origin, site) in [
            (None, None),
            (None, Some("cross-site")),
            (None, Some("same-site")),
            (Some("https://evil.example"), None),
            (Some("https://tickets.example.evil"), None),
            (Some("null"), None),
        ] {
            assert!(!o.same_site(sent(origin, site)), "{origin:?} {site:?}");
        }
        // With public-origin, only that one (and the allowed) count.
        let fixed = Origins {
            public: Some("https://tickets.example".into()),
            allowed: vec![],
        };
        assert!(fixed.same_site(sent(Some("https://tickets.example"), None)));
        assert!(!fixed.same_site(sent(Some("http://tickets.example"), None)));
    }

    #[test]
    fn cors_answers_only_allowed_origins() {
        let o = Origins {
            public: None,
            allowed: vec!["https://shop.example".into()],
        };
        let h = o.cors(sent(Some("https://shop.example"), None)).unwrap();
        assert!(h.contains(&("Access-Control-Allow-Origin", "https://shop.example".into())));
        assert!(o.cors(sent(Some("https://evil.example"), None)).is_none());
        assert!(o.cors(sent(None, None)).is_none());
        assert!(preflight(&o, sent(Some("https://shop.example"), None))
            .unwrap()
            .iter()
            .any(|(n, v)| *n == "Access-Control-Allow-Headers"
                && v.contains("X-Queue-Credential")
                && v.contains("X-Waitgate-Proof")));
    }

    #[test]
    fn configured_origins_are_normalised() {
        assert_eq!(
            parse_origin("https://Shop.Example:8443").as_deref(),
            Some("https://shop.example:8443")
        );
        for bad in [
            "shop.example",
            "ftp://a",
            "https://",
            "https://a/b",
            "https://a b",
        ] {
            assert_eq!(parse_origin(bad), None, "{bad}");
        }
    }
}
