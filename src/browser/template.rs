//! Page templates: HTML with `{{name}}` placeholders.
//!
//! The built-in page and an operator's `queues.<q>.page.template` are read
//! the same way, once, when the config is loaded: a placeholder waitgate
//! does not know, or a template without `{{head}}` (which carries the
//! page's script, styles and refresh), is refused then, not at the first
//! visitor. Every value is HTML-escaped except `{{head}}`, which waitgate
//! writes itself.

/// Every placeholder, and what it becomes.
pub const PLACEHOLDERS: &[(&str, &str)] = &[
    (
        "head",
        "the page's styles, script and no-JavaScript refresh (required, inside <head>)",
    ),
    ("lang", "the page's language: en or ko"),
    ("title", "queues.<q>.page.title, or \"Waiting room\""),
    ("heading", "the headline for the visitor's state"),
    (
        "message",
        "one sentence: how many are ahead, or why nobody moves",
    ),
    ("place-label", "\"Your place\""),
    (
        "place",
        "the visitor's place, from 1 (\"–\" before the open)",
    ),
    ("wait-label", "\"Estimated wait\""),
    ("wait", "the estimated wait, in words"),
    ("progress-label", "\"Progress\""),
    (
        "progress",
        "how far the visitor has come since joining, 0 to 100",
    ),
    ("note", "what to do: keep the page open"),
    ("status", "WAITING, PREQUEUE, PAUSED or NOT_OPEN"),
    ("queue", "the queue's name"),
];

/// The page's elements the script updates, by id: a template without them
/// still works, but stays still between refreshes.
pub const ELEMENT_IDS: &[&str] = &[
    "waitgate",
    "wg-heading",
    "wg-message",
    "wg-place",
    "wg-wait",
    "wg-progress",
    "wg-note",
];

/// A template, split at its placeholders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Value(&'static str),
}

impl Template {
    /// Splits `text` at `{{name}}`s; every name must be a known one, and
    /// `{{head}}` must be there.
    pub fn parse(text: &str) -> Result<Template, String> {
        let mut parts = Vec::new();
        let mut rest = text;
        let mut has_head = false;
        while let Some(start) = rest.find("{{") {
            let Some(len) = rest[start + 2..].find("}}") else {
                return Err("a `{{` is never closed".into());
            };
            let name = rest[start + 2..start + 2 + len].trim();
            let Some((known, _)) = PLACEHOLDERS.iter().find(|(p, _)| *p == name) else {
                return Err(format!(
                    "unknown placeholder {{{{{name}}}}} (known: {})",
                    PLACEHOLDERS
                        .iter()
                        .map(|(p, _)| *p)
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            };
            has_head |= *known == "head";
            parts.push(Part::Text(rest[..start].to_string()));
            parts.push(Part::Value(known));
            rest = &rest[start + 2 + len + 2..];
        }
        parts.push(Part::Text(rest.to_string()));
        if !has_head {
            return Err("the template needs {{head}} inside its <head>".into());
        }
        Ok(Template { parts })
    }

    /// The page, with `value(name)` for each placeholder: escaped, except
    /// `head`.
    pub fn render<'a>(&self, value: impl Fn(&str) -> &'a str) -> String {
        let mut out = String::with_capacity(8 * 1024);
        for part in &self.parts {
            match part {
                Part::Text(text) => out.push_str(text),
                Part::Value("head") => out.push_str(value("head")),
                Part::Value(name) => escape_into(&mut out, value(name)),
            }
        }
        out
    }
}

/// HTML-escapes `text` (for element content and quoted attribute values).
pub fn escape_into(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
}

pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    escape_into(&mut out, text);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_filled_and_escaped_except_head() {
        let t = Template::parse("<head>{{head}}</head><p title=\"{{ title }}\">{{message}}</p>")
            .unwrap();
        let page = t.render(|name| match name {
            "head" => "<script src=\"/a.js\"></script>",
            "title" => "a\"b",
            "message" => "<img src=x onerror=alert(1)> & 'q'",
            _ => "",
        });
        assert_eq!(
            page,
            "<head><script src=\"/a.js\"></script></head><p title=\"a&quot;b\">&lt;img src=x onerror=alert(1)&gt; &amp; &#39;q&#39;</p>"
        );
    }

    #[test]
    fn bad_templates_are_refused_with_the_reason() {
        assert!(Template::parse("<p>{{message}}</p>")
            .unwrap_err()
            .contains("{{head}}"));
        assert!(Template::parse("{{head}}{{mesage}}")
            .unwrap_err()
            .contains("unknown placeholder {{mesage}}"));
        assert!(Template::parse("{{head}}{{title").is_err());
    }

    #[test]
    fn the_built_in_page_parses_and_has_every_element() {
        let page = include_str!("../../assets/waiting-room/page.html");
        Template::parse(page).unwrap();
        for id in ELEMENT_IDS {
            assert!(page.contains(&format!("id=\"{id}\"")), "{id}");
        }
    }
}
