//! `docs/openapi.yaml` against the real answers: a running waitgate (on a
//! real Redis) is asked every documented operation, in the states that give
//! each documented answer, and every answer must be one the document lists
//! for that operation, with a body its schema accepts. Every operation of
//! the document is asked at least once.

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use common::*;
use serde_json::{json, Value};

const ADMIN_TOKEN: &str = "openapi-test-admin-token";

fn document() -> Value {
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/openapi.yaml"))
            .unwrap();
    serde_yaml::from_str(&text).expect("docs/openapi.yaml is YAML")
}

/// Checks answers against the document, noting which operations were asked.
struct Contract {
    doc: Value,
    asked: BTreeSet<(String, String)>,
}

impl Contract {
    /// `r` answered `method path`; `path` is the document's key (with
    /// `{queue}` for a path parameter).
    fn check(&mut self, method: &str, path: &str, r: &Response) {
        let method = method.to_ascii_lowercase();
        self.asked.insert((path.to_string(), method.clone()));
        let operation = &self.doc["paths"][path][&method];
        assert!(operation.is_object(), "{method} {path} is not documented");
        let mut answer = operation["responses"][r.status.to_string()].clone();
        assert!(
            answer.is_object(),
            "{method} {path} answered {}, which the document does not list: {}",
            r.status,
            r.text()
        );
        if let Some(reference) = answer["$ref"].as_str() {
            answer = self.resolve(reference);
        }
        let content = &answer["content"];
        let kind = r.header("Content-Type").unwrap_or("");
        if content.get("application/json").is_some() {
            assert!(
                kind.starts_with("application/json"),
                "{method} {path}: {kind}"
            );
            let schema = &content["application/json"]["schema"];
            let body: Value = serde_json::from_slice(&r.body)
                .unwrap_or_else(|e| panic!("{method} {path}: not JSON ({e}): {}", r.text()));
            // Schemas refer to `#/components/...`: validate within a root
            // that has them.
            let rooted = json!({ "components": self.doc["components"], "allOf": [schema] });
            let validator = jsonschema::validator_for(&rooted).expect("a valid schema");
            let errors: Vec<String> = validator
                .iter_errors(&body)
                .map(|e| e.to_string())
                .collect();
            assert!(
                errors.is_empty(),
                "{method} {path} {}: {body} does not match the document: {errors:?}",
                r.status
            );
        } else if content.get("text/html").is_some() {
            assert!(kind.starts_with("text/html"), "{method} {path}: {kind}");
        } else {
            assert!(
                r.body.is_empty() || r.status == 303,
                "{method} {path} {}: a body the document does not describe",
                r.status
            );
        }
    }

    fn resolve(&self, reference: &str) -> Value {
        let pointer = reference.strip_prefix('#').expect("a local reference");
        self.doc
            .pointer(pointer)
            .cloned()
            .expect("the reference resolves")
    }

    /// Every operation the document lists was asked.
    fn all_asked(&self) {
        let mut documented = BTreeSet::new();
        for (path, item) in self.doc["paths"].as_object().unwrap() {
            for method in item.as_object().unwrap().keys() {
                documented.insert((path.clone(), method.clone()));
            }
        }
        let missing: Vec<_> = documented.difference(&self.asked).collect();
        assert!(missing.is_empty(), "never asked: {missing:?}");
    }
}

#[test]
fn every_answer_is_one_the_openapi_document_describes() {
    let redis = Redis::start();
    let upstream = Upstream::start();
    let wg = TestConfig::on_free_ports(&redis.url(), upstream.port)
        .route("{prefix: /tickets, upstream: ticketing, queue: baseball, waiting-room: true}")
        .set("cors", "{allowed-origins: ['https://shop.example']}")
        .set("cookies", "{secure: false}")
        .start_env(&[("WAITGATE_ADMIN_TOKEN", ADMIN_TOKEN)]);
    hold_gate(&redis);
    let mut c = Contract {
        doc: document(),
        asked: BTreeSet::new(),
    };
    let addr = wg.addr;
    let send = |method: &str, target: &str, headers: &[(&str, &str)], body: Option<&str>| {
        let mut all = headers.to_vec();
        if body.is_some() && !headers.iter().any(|(n, _)| *n == "Content-Type") {
            all.push(("Content-Type", "application/json"));
        }
        request(addr, method, target, &all, body.map(str::as_bytes)).unwrap()
    };
    const REGISTER: &str = "/api/v1/queue/register";
    const RANK: &str = "/api/v1/queue/rank";
    const DROPOUT: &str = "/api/v1/queue/dropout";
    const TOKEN: &str = "/api/v1/queue/active/token";
    const CHALLENGE: &str = "/api/v1/queue/challenge";

    // register: new, again, and every refusal.
    let first = send("POST", REGISTER, &[], Some(r#"{"userId":"alice"}"#));
    assert!(first.json()["queueCredential"].is_string());
    c.check("POST", REGISTER, &first);
    let credential = first.json()["queueCredential"]
        .as_str()
        .unwrap()
        .to_string();
    c.check(
        "POST",
        REGISTER,
        &send("POST", REGISTER, &[], Some(r#"{"userId":"alice"}"#)),
    );
    for (headers, body, status) in [
        (vec![], "{", 400),
        (vec![], r#"{"userId":"a b"}"#, 400),
        (vec![], r#"{"userId":"u","queue":"nope"}"#, 404),
        (
            vec![("Content-Type", "text/plain")],
            r#"{"userId":"u"}"#,
            415,
        ),
        (vec![("Origin", "https://evil.example")], "{}", 403),
    ] {
        let r = send("POST", REGISTER, &headers, Some(body));
        assert_eq!(r.status, status, "{body}: {r:?}");
        c.check("POST", REGISTER, &r);
    }
    let big = format!(r#"{{"userId":"{}"}}"#, "x".repeat(5000));
    let r = send("POST", REGISTER, &[], Some(&big));
    assert_eq!(r.status, 413);
    c.check("POST", REGISTER, &r);

    // rank: waiting, unknown, bad.
    let r = send("GET", &format!("{RANK}?userId=alice"), &[], None);
    assert_eq!(r.json()["status"], "WAITING");
    c.check("GET", RANK, &r);
    for (target, status) in [
        (format!("{RANK}?userId=nobody"), 404),
        (format!("{RANK}?userId=a%20b"), 400),
        (RANK.to_string(), 400),
    ] {
        let r = send("GET", &target, &[], None);
        assert_eq!(r.status, status, "{target}");
        c.check("GET", RANK, &r);
    }
    let r = send("POST", RANK, &[], Some("{}"));
    assert_eq!(r.status, 405);
    c.check("POST", REGISTER, &send("GET", REGISTER, &[], None));

    // token: not active, then active.
    let exchange = json!({"userId": "alice", "queueCredential": credential}).to_string();
    let r = send("POST", TOKEN, &[], Some(&exchange));
    assert_eq!(r.status, 403);
    c.check("POST", TOKEN, &r);
    admit_by_hand(&mut redis.conn(), "alice", u64::MAX / 2_000_000);
    let r = send("POST", TOKEN, &[], Some(&exchange));
    assert_eq!(r.status, 200, "{r:?}");
    c.check("POST", TOKEN, &r);
    let r = send("GET", &format!("{RANK}?userId=alice"), &[], None);
    assert_eq!(r.json()["status"], "ACTIVE");
    c.check("GET", RANK, &r);
    c.check("POST", TOKEN, &send("POST", TOKEN, &[], Some("[")));

    // dropout: wrong credential, right one, gone.
    let bob = register_new(addr, "bob");
    let wrong = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
    for (credential, status) in [(wrong, 403), (bob.as_str(), 204), (bob.as_str(), 404)] {
        let r = send(
            "DELETE",
            &format!("{DROPOUT}?userId=bob"),
            &[("X-Queue-Credential", credential)],
            None,
        );
        assert_eq!(r.status, status);
        c.check("DELETE", DROPOUT, &r);
    }
    let r = send("DELETE", &format!("{DROPOUT}?userId=bob"), &[], None);
    assert_eq!(r.status, 400);
    c.check("DELETE", DROPOUT, &r);

    // challenge: none asked here, an unknown queue, the wrong method.
    let r = send("GET", CHALLENGE, &[], None);
    assert_eq!(r.json()["difficultyBits"], 0, "{r:?}");
    c.check("GET", CHALLENGE, &r);
    let r = send("GET", &format!("{CHALLENGE}?queue=nope"), &[], None);
    assert_eq!(r.status, 404);
    c.check("GET", CHALLENGE, &r);
    let r = send("GET", &format!("{CHALLENGE}?queue=a&queue=b"), &[], None);
    assert_eq!(r.status, 400);
    c.check("GET", CHALLENGE, &r);

    // fairness: the figures, an unknown queue, two queues named; the
    // receipts' keys.
    const FAIRNESS: &str = "/api/v1/queue/fairness";
    let r = send("GET", &format!("{FAIRNESS}?queue=baseball"), &[], None);
    assert_eq!(r.status, 200, "{r:?}");
    c.check("GET", FAIRNESS, &r);
    for (query, status) in [("?queue=nope", 404), ("?queue=a&queue=b", 400)] {
        let r = send("GET", &format!("{FAIRNESS}{query}"), &[], None);
        assert_eq!(r.status, status);
        c.check("GET", FAIRNESS, &r);
    }
    const KEYS: &str = "/.well-known/waitgate/keys";
    let r = send("GET", KEYS, &[], None);
    assert_eq!(r.status, 200);
    c.check("GET", KEYS, &r);

    // Preflights, allowed and not.
    for path in [REGISTER, RANK, DROPOUT, TOKEN, CHALLENGE] {
        for (origin, status) in [("https://shop.example", 204), ("https://evil.example", 403)] {
            let r = send(
                "OPTIONS",
                path,
                &[
                    ("Origin", origin),
                    ("Access-Control-Request-Method", "POST"),
                ],
                None,
            );
            assert_eq!(r.status, status, "{path} {origin}");
            c.check("OPTIONS", path, &r);
        }
    }

    // The waiting-room page: joined, admitted (303), unknown queue, POST.
    const PAGE: &str = "/waiting-room/{queue}";
    let html = ("Accept", "text/html");
    let page = send(
        "GET",
        "/waiting-room/baseball?return=/tickets",
        &[html],
        None,
    );
    assert_eq!(page.status, 200);
    c.check("GET", PAGE, &page);
    let cookie = page
        .headers
        .iter()
        .find(|(n, v)| n.eq_ignore_ascii_case("set-cookie") && v.starts_with("waitgate-queue-"))
        .map(|(_, v)| v.split(';').next().unwrap().to_string())
        .unwrap();
    let user = cookie.splitn(3, '.').nth(2).unwrap().to_string();
    let with_cookie = |target: &str| send("GET", target, &[html, ("Cookie", &cookie)], None);
    admit_by_hand(&mut redis.conn(), &user, u64::MAX / 2_000_000);
    let r = with_cookie("/waiting-room/baseball?return=/tickets");
    assert_eq!(r.status, 303);
    c.check("GET", PAGE, &r);
    c.check(
        "GET",
        PAGE,
        &send("GET", "/waiting-room/nope", &[html], None),
    );

    // A scheduled open: before its pre-queue, then in it.
    let event = |body: Value| {
        let r = request(
            wg.admin,
            "PUT",
            "/admin/v1/queues/baseball/event",
            &[
                ("Authorization", &format!("Bearer {ADMIN_TOKEN}")),
                ("Content-Type", "application/json"),
            ],
            Some(body.to_string().as_bytes()),
        )
        .unwrap();
        assert_eq!(r.status, 200, "{r:?}");
    };
    let at = |offset_s: i64| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        chrono::DateTime::from_timestamp(now + offset_s, 0)
            .unwrap()
            .to_rfc3339()
    };
    event(json!({"prequeueFrom": at(600), "openAt": at(1200)}));
    let r = send("POST", REGISTER, &[], Some(r#"{"userId":"early_bird"}"#));
    assert_eq!(r.json()["error"], "queue_not_open");
    c.check("POST", REGISTER, &r);
    event(json!({"prequeueFrom": at(-1), "openAt": at(1200)}));
    let r = send("POST", REGISTER, &[], Some(r#"{"userId":"early_bird"}"#));
    assert_eq!(r.json()["status"], "PREQUEUE", "{r:?}");
    c.check("POST", REGISTER, &r);
    let r = send("GET", &format!("{RANK}?userId=early_bird"), &[], None);
    assert_eq!(r.json()["status"], "PREQUEUE");
    c.check("GET", RANK, &r);

    // Redis stopped: 503 from every operation.
    redis.signal("STOP");
    for (method, path, target, body) in [
        (
            "POST",
            REGISTER,
            REGISTER.to_string(),
            Some(r#"{"userId":"late"}"#),
        ),
        ("GET", RANK, format!("{RANK}?userId=alice"), None),
        ("POST", TOKEN, TOKEN.to_string(), Some(exchange.as_str())),
    ] {
        let r = send(method, &target, &[], body);
        assert_eq!(r.status, 503, "{method} {target}");
        c.check(method, path, &r);
    }
    let r = send(
        "DELETE",
        &format!("{DROPOUT}?userId=alice"),
        &[("X-Queue-Credential", &credential)],
        None,
    );
    assert_eq!(r.status, 503);
    c.check("DELETE", DROPOUT, &r);
    let r = with_cookie("/waiting-room/baseball");
    assert_eq!(r.status, 503);
    c.check("GET", PAGE, &r);
    redis.signal("CONT");
    c.all_asked();
}

/// The document is valid OpenAPI 3.1 (`openapi-spec-validator`, from PyPI;
/// scripts/test.sh installs it for the user).
#[test]
fn the_openapi_document_is_valid() {
    let out = std::process::Command::new("openapi-spec-validator")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/openapi.yaml"))
        .output()
        .expect("openapi-spec-validator is installed (pip install openapi-spec-validator)");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
