//! The waiting-room page's own files, served by waitgate from
//! `/waiting-room/assets/` so that the page makes no request to anyone
//! else (its Content-Security-Policy allows only this origin).

/// One file.
#[derive(Debug, PartialEq, Eq)]
pub struct Asset {
    pub name: &'static str,
    pub content_type: &'static str,
    pub body: &'static [u8],
}

/// An asset of `name` served as `content_type`, its bytes built in.
macro_rules! asset {
    ($name:literal, $content_type:expr, $path:literal) => {
        Asset {
            name: $name,
            content_type: $content_type,
            body: include_bytes!($path),
        }
    };
}

const JS: &str = "text/javascript; charset=utf-8";

/// Every file, by name.
pub const ASSETS: &[Asset] = &[
    asset!(
        "waitgate.css",
        "text/css; charset=utf-8",
        "../../assets/waiting-room/waitgate.css"
    ),
    asset!("page.js", JS, "../../assets/waiting-room/page.js"),
    // Solves a queue's proof-of-work challenge off the page's thread.
    asset!(
        "proof-worker.js",
        JS,
        "../../assets/waiting-room/proof-worker.js"
    ),
    // The client a site's own page can use too (examples/js/README.md).
    asset!(
        "waitgate-client.js",
        JS,
        "../../examples/js/waitgate-client.js"
    ),
];

/// The file called `name`.
pub fn find(name: &str) -> Option<&'static Asset> {
    ASSETS.iter().find(|a| a.name == name)
}

/// The page's built-in template.
pub const PAGE: &str = include_str!("../../assets/waiting-room/page.html");

/// Browsers may keep the files an hour: a new release changes them at most
/// that late for a visitor already waiting.
pub const CACHE: &str = "public, max-age=3600";

/// What the page may load and run: this origin only, no inline script or
/// style, and no framing by another site.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; \
     form-action 'self'; frame-ancestors 'none'";
