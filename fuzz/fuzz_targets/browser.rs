//! What a browser sends that the waiting room reads: `Cookie` headers, the
//! queue cookie, `Accept-Language`, `Accept`, the `return` path, origins,
//! and page templates. No panic; a followed `return` is always a path of
//! this site; a queue cookie that parses writes back as it was read.
#![no_main]

use libfuzzer_sys::fuzz_target;
use waitgate::browser::cookie::{find_all, pairs, QueueCookie};
use waitgate::browser::origin::parse_origin;
use waitgate::browser::redirect::{safe_return, wants_html};
use waitgate::browser::template::Template;
use waitgate::browser::text::Lang;

fuzz_target!(|data: &[u8]| {
    for (name, value) in pairs(data) {
        assert!(!name.is_empty());
        assert!(!name.contains(';') && !value.contains(';'));
    }
    let _ = find_all(std::iter::once(data), "waitgate-queue-q").count();
    let _ = wants_html(std::iter::once(data));
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Some(cookie) = QueueCookie::parse(text) {
        assert_eq!(cookie.value(), text);
    }
    let _ = Lang::negotiate(Some(text));
    if let Some(back) = safe_return(Some(text), |p| p.starts_with("/tickets")) {
        assert!(back == text && back.starts_with("/tickets"));
        assert!(!back.starts_with("//") && !back.starts_with("/\\"));
    }
    if let Some(origin) = parse_origin(text) {
        assert!(origin.starts_with("http://") || origin.starts_with("https://"));
    }
    if let Ok(template) = Template::parse(text) {
        let page = template.render(|_| "<x>");
        assert!(!page.contains("{{"), "a placeholder left in {page:?}");
    }
});
