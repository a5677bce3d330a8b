//! Browsers, over real HTTP against a real Redis: the redirect to the
//! waiting room (and the open-redirect attempts it refuses), the page in
//! both languages and without JavaScript, the queue and token cookies, the
//! same-site rule for cookie-authenticated changes, CORS, and identity
//! binding against the squatting attack. `tests/chromium.rs` drives a real
//! browser through the same flow.

mod common;

use std::time::Duration;

use common::*;
use serde_json::json;

const PAGE: &str = "/waiting-room/baseball";
/// A body naming queue `baseball` and nothing else (two queues are
/// configured).
const Q_BOB: &str = r#"{"userId":"bob","queue":"baseball"}"#;
const Q: &str = r#"{"queue":"baseball"}"#;
const HTML: (&str, &str) = ("Accept", "text/html,application/xhtml+xml,*/*;q=0.8");
const SAME_ORIGIN: (&str, &str) = ("Sec-Fetch-Site", "same-origin");

/// Queues `baseball` (waiting room on `/tickets`) and `soccer`, an upstream,
/// and the top-level keys of `extra` (YAML).
fn config(redis: &Redis, upstream: u16, queues: &str, extra: &str) -> TestConfig {
    TestConfig::on_free_ports(&redis.url(), upstream)
        .remove("jwt")
        .queues(queues)
        .set(
            "routes",
            "[{prefix: /tickets, upstream: ticketing, queue: baseball, waiting-room: true},
              {prefix: /api/v1/follow-up, upstream: ticketing, queue: baseball},
              {prefix: /soccer, upstream: ticketing, queue: soccer, waiting-room: true}]",
        )
        .with(extra)
}

/// Nobody is admitted by the gate (`max-active: 1` with a held gate), so
/// tests admit by hand.
const QUEUES: &str = "  baseball: {admission: {max-active: 1000}, page: {title: 'Baseball ticket open'}}\n  soccer: {}\n";

struct Room {
    wg: Waitgate,
    redis: Redis,
    upstream: Upstream,
}

impl Room {
    fn start(extra: &str) -> Room {
        Room::start_with(QUEUES, extra, &[])
    }

    fn start_with(queues: &str, extra: &str, env: &[(&str, &str)]) -> Room {
        let redis = Redis::start();
        let upstream = Upstream::start();
        let wg = config(&redis, upstream.port, queues, extra).start_env(env);
        hold_gate(&redis);
        Room {
            wg,
            redis,
            upstream,
        }
    }

    fn get(&self, target: &str, headers: &[(&str, &str)]) -> Response {
        request(self.wg.addr, "GET", target, headers, None).unwrap()
    }

    fn send(
        &self,
        method: &str,
        target: &str,
        headers: &[(&str, &str)],
        body: Option<&str>,
    ) -> Response {
        let mut all = headers.to_vec();
        if body.is_some() {
            all.push(("Content-Type", "application/json"));
        }
        request(self.wg.addr, method, target, &all, body.map(str::as_bytes)).unwrap()
    }

    /// Registers `user` in `baseball` by the API: its credential, when new.
    /// A POST of the page's own to `target`, with the cookies `cookie`.
    fn post_as(&self, target: &str, cookie: &str) -> Response {
        self.send("POST", target, &[("Cookie", cookie), SAME_ORIGIN], Some(Q))
    }

    /// A register call of the page's own (its body names no user), with
    /// `headers`.
    fn register_with(&self, headers: &[(&str, &str)]) -> Response {
        self.send("POST", "/api/v1/queue/register", headers, Some(Q))
    }

    fn join(&self, user: &str) -> Option<String> {
        let r = post_json(
            self.wg.addr,
            "/api/v1/queue/register",
            &json!({"userId": user, "queue": "baseball"}).to_string(),
        )
        .unwrap();
        assert_eq!(r.status, 200, "{r:?}");
        r.json()["queueCredential"].as_str().map(str::to_string)
    }

    fn waiting(&self) -> Vec<String> {
        redis::Commands::zrange(&mut self.redis.conn(), WAITING_KEY, 0, -1).unwrap()
    }

    fn heartbeat(&self, user: &str) -> Option<f64> {
        heartbeat_of(&mut self.redis.conn(), "baseball", user).map(|due| due as f64)
    }
}

/// A cookie sent with no sign of this site, from another site, from a
/// cross-site page, and from a sibling site: the same-site rule refuses
/// each.
fn not_this_site(cookie: &str) -> Vec<Vec<(&str, &str)>> {
    vec![
        vec![("Cookie", cookie)],
        vec![("Cookie", cookie), ("Origin", "https://evil.example")],
        vec![("Cookie", cookie), ("Sec-Fetch-Site", "cross-site")],
        vec![("Cookie", cookie), ("Sec-Fetch-Site", "same-site")],
    ]
}

/// The `Set-Cookie` values of a response.
fn set_cookies(r: &Response) -> Vec<&str> {
    r.headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("set-cookie"))
        .map(|(_, v)| v.as_str())
        .collect()
}

/// `name=value` of the `Set-Cookie` that sets `name`.
fn cookie_named(r: &Response, name: &str) -> Option<String> {
    set_cookies(r)
        .into_iter()
        .find(|c| c.starts_with(&format!("{name}=")))
        .map(|c| c.split(';').next().unwrap().to_string())
}

/// The user a queue cookie (`waitgate-queue-q=credential.rank.user`) holds.
fn cookie_user(cookie: &str) -> String {
    let value = cookie.split_once('=').unwrap().1;
    value.splitn(3, '.').nth(2).unwrap().to_string()
}

/// The page's script configuration, from a page.
fn script_config(page: &str) -> serde_json::Value {
    let start = page.find("id=\"waitgate-config\">").unwrap() + "id=\"waitgate-config\">".len();
    let end = start + page[start..].find("</script>").unwrap();
    serde_json::from_str(&page[start..end]).unwrap()
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

#[test]
fn a_browser_without_a_token_is_sent_to_the_waiting_room_and_an_api_client_is_not() {
    let room = Room::start("cookies: {secure: false}\n");
    let r = room.get("/tickets/seat/7?x=1&y=%20", &[HTML]);
    assert_eq!(r.status, 303, "{r:?}");
    assert_eq!(
        r.header("Location"),
        Some("/waiting-room/baseball?return=/tickets/seat/7%3Fx%3D1%26y%3D%2520")
    );
    assert_eq!(r.header("Cache-Control"), Some("no-store"));
    // HEAD too.
    let mut client = Client::connect(room.wg.addr);
    client.send("HEAD /tickets/seat HTTP/1.1\r\nHost: t\r\nAccept: text/html\r\n\r\n");
    assert_eq!(client.head().status, 303);

    // API clients, other methods and routes without the room keep the 401.
    assert_eq!(room.get("/tickets/seat", &[]).error_code(), "invalid_token");
    assert_eq!(
        room.get("/tickets/seat", &[("Accept", "application/json")])
            .status,
        401
    );
    let post = room.send("POST", "/tickets/seat", &[HTML], Some(Q));
    assert_eq!(post.status, 401);
    assert_eq!(room.get("/api/v1/follow-up/x", &[HTML]).status, 401);
    // A page's own fetch() that asks for HTML (Turbo, htmx) is not a
    // navigation: the 401, not a redirect to a page it cannot show.
    for mode in ["cors", "same-origin", "no-cors"] {
        let r = room.get("/tickets/seat", &[HTML, ("Sec-Fetch-Mode", mode)]);
        assert_eq!(
            (r.status, r.error_code().as_str()),
            (401, "invalid_token"),
            "{mode}"
        );
    }
    let r = room.get("/tickets/seat", &[HTML, ("Sec-Fetch-Mode", "navigate")]);
    assert_eq!(r.status, 303);
    // A bad or expired token in the cookie is no token: the page.
    let bad = room.get(
        "/tickets/seat",
        &[HTML, ("Cookie", "waitgate-token-baseball=not.a.token")],
    );
    assert_eq!(bad.status, 303);

    // A valid token of another queue is that queue's 403, not the page,
    // whether it comes in Authorization or in a cookie.
    let soccer = room.soccer_token();
    let wrong = room.get(
        "/tickets/seat",
        &[HTML, ("Authorization", &format!("Bearer {soccer}"))],
    );
    assert_eq!(wrong.status, 403, "{wrong:?}");
    assert_eq!(wrong.error_code(), "insufficient_scope");
    let wrong = room.get(
        "/tickets/seat",
        &[HTML, ("Cookie", &format!("waitgate-token-soccer={soccer}"))],
    );
    assert_eq!(wrong.status, 403, "{wrong:?}");
    assert!(room.upstream.seen().is_empty());
}

impl Room {
    /// A token of queue `soccer`, from the API.
    fn soccer_token(&self) -> String {
        let r = post_json(
            self.wg.addr,
            "/api/v1/queue/register",
            &json!({"userId": "fan", "queue": "soccer"}).to_string(),
        )
        .unwrap();
        let credential = r.json()["queueCredential"].as_str().unwrap().to_string();
        let moved: i64 = redis::Script::new(
            "redis.call('ZREM', KEYS[1], ARGV[1]) redis.call('ZREM', KEYS[2], ARGV[1])
             redis.call('ZADD', KEYS[3], ARGV[2], ARGV[1])
             redis.call('HSET', KEYS[4], ARGV[1], ARGV[3])
             redis.call('HDEL', KEYS[5], ARGV[1]) return 1",
        )
        .key("queue:{soccer}:waiting")
        .key("queue:{soccer}:heartbeat")
        .key("queue:{soccer}:active")
        .key("queue:{soccer}:credential")
        .key("queue:{soccer}:due")
        .arg("fan")
        .arg(now_ms() + 600_000)
        .arg(arrival_of(&credential))
        .invoke(&mut self.redis.conn())
        .unwrap();
        assert_eq!(moved, 1);
        let r = post_json(
            self.wg.addr,
            "/api/v1/queue/active/token",
            &json!({"userId": "fan", "queue": "soccer", "queueCredential": credential}).to_string(),
        )
        .unwrap();
        assert_eq!(r.status, 200, "{r:?}");
        r.json()["accessToken"].as_str().unwrap().to_string()
    }
}

/// The arrival a queueCredential names (its first 8 bytes).
fn arrival_of(credential: &str) -> u64 {
    use base64::Engine;
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(credential)
        .unwrap();
    u64::from_be_bytes(raw[..8].try_into().unwrap())
}

#[test]
fn an_accept_that_refuses_html_is_an_api_client() {
    let room = Room::start("cookies: {secure: false}\n");
    for accept in [
        "text/html;q=0",
        "application/json, text/html; q=0.0",
        "TEXT/HTML;Q=0.000",
    ] {
        let r = room.get("/tickets/seat", &[("Accept", accept)]);
        assert_eq!(
            (r.status, r.error_code().as_str()),
            (401, "invalid_token"),
            "{accept}: {r:?}"
        );
        assert!(r.header("Location").is_none());
    }
    // Any weight above zero is still a browser.
    let r = room.get("/tickets/seat", &[("Accept", "text/html;q=0.001")]);
    assert_eq!(r.status, 303);
}

#[test]
fn the_page_joins_once_and_a_reload_or_a_second_tab_keeps_the_place() {
    let room = Room::start("cookies: {secure: false}\n");
    room.join("early_1");
    room.join("early_2");

    let first = room.get(&format!("{PAGE}?return=/tickets/seat"), &[HTML]);
    assert_eq!(first.status, 200, "{first:?}");
    assert_eq!(
        first.header("Content-Type"),
        Some("text/html; charset=utf-8")
    );
    let csp = first.header("Content-Security-Policy").unwrap();
    assert!(csp.contains("default-src 'self'") && csp.contains("frame-ancestors 'none'"));
    let cookie_header = set_cookies(&first)
        .into_iter()
        .find(|c| c.starts_with("waitgate-queue-baseball="))
        .expect("the queue cookie")
        .to_string();
    for attribute in ["HttpOnly", "SameSite=Lax", "Path=/"] {
        assert!(cookie_header.contains(attribute), "{cookie_header}");
    }
    assert!(!cookie_header.contains("Secure"), "cookies.secure: false");
    let cookie = cookie_named(&first, "waitgate-queue-baseball").unwrap();
    let user = cookie_user(&cookie);
    assert_eq!(user.len(), 22, "128 random bits, base64url");
    assert_eq!(room.waiting(), ["early_1", "early_2", user.as_str()]);

    let page = first.text();
    assert!(page.contains("<html lang=\"en\">"));
    assert!(page.contains("<title>Baseball ticket open</title>"));
    assert!(page.contains("2 people are ahead of you."), "{page}");
    assert!(page.contains(">3</dd>"), "place 3");
    assert!(page.contains("role=\"status\" aria-live=\"polite\""));
    // Without JavaScript the page refreshes itself, 5 to 20 s.
    assert!(page.contains("<noscript><meta http-equiv=\"refresh\" content=\"5\"></noscript>"));
    let script = script_config(&page);
    assert_eq!(script["rank"], 2);
    assert_eq!(script["return"], "/tickets/seat");
    // Nothing from another site.
    for src in ["src=\"http", "href=\"http", "src=\"//", "href=\"//"] {
        assert!(!page.contains(src), "{src}");
    }

    // A reload and a second tab carry the cookie: the same place, no new
    // registration, and the heartbeat kept (the next poll due no sooner
    // than the advice, 1 s near the head: cleanup waits that and the
    // timeout).
    for _ in 0..2 {
        let again = room.get(PAGE, &[HTML, ("Cookie", &cookie)]);
        assert_eq!(again.status, 200);
        assert!(set_cookies(&again).is_empty(), "{again:?}");
        assert!(again.text().contains("2 people are ahead of you."));
    }
    assert!(room.heartbeat(&user).unwrap() >= now_ms() as f64 + 1_000.0 - 50.0);
    assert_eq!(room.waiting().len(), 3);

    // Korean by Accept-Language.
    let ko = room.get(
        PAGE,
        &[
            HTML,
            ("Cookie", &cookie),
            ("Accept-Language", "ko-KR,ko;q=0.9,en;q=0.5"),
        ],
    );
    let text = ko.text();
    assert!(text.contains("<html lang=\"ko\">"));
    assert!(text.contains("앞에 2명이 있습니다."), "{text}");
    assert_eq!(ko.header("Content-Language"), Some("ko"));

    // The page's files come from waitgate.
    for (file, kind) in [
        ("waitgate.css", "text/css"),
        ("page.js", "text/javascript"),
        ("waitgate-client.js", "text/javascript"),
    ] {
        let r = room.get(&format!("/waiting-room/assets/{file}"), &[]);
        assert_eq!(r.status, 200, "{file}");
        assert!(r.header("Content-Type").unwrap().starts_with(kind));
        assert!(!r.body.is_empty());
    }
    assert_eq!(room.get("/waiting-room/assets/nope.js", &[]).status, 404);
    assert_eq!(room.get("/waiting-room/nosuchqueue", &[HTML]).status, 404);
    // Loading the page joins the queue: only a GET may. A HEAD gets the
    // page's headers, without a cookie or a length (only a load learns
    // them), and joins nobody.
    let post = room.send("POST", PAGE, &[HTML], Some(Q));
    assert_eq!(post.status, 405);
    assert_eq!(post.header("Allow"), Some("GET, HEAD"));
    let mut client = Client::connect(room.wg.addr);
    client.send(&format!(
        "HEAD {PAGE} HTTP/1.1\r\nHost: t\r\nAccept: text/html\r\nAccept-Language: ko\r\n\r\n"
    ));
    let head = client.head();
    assert_eq!(head.status, 200, "{:?}", head.headers);
    assert_eq!(
        head.header("Content-Type"),
        Some("text/html; charset=utf-8")
    );
    assert_eq!(head.header("Content-Language"), Some("ko"));
    assert!(head
        .header("Content-Security-Policy")
        .is_some_and(|csp| csp.contains("frame-ancestors 'none'")));
    assert_eq!(head.header("Cache-Control"), Some("no-store"));
    assert_eq!(head.header("Set-Cookie"), None);
    assert_eq!(head.header("Content-Length"), None);
    assert_eq!(head.header("Transfer-Encoding"), None);
    // Nothing follows the head: the same connection answers the next
    // request, a HEAD of a queue that does not exist.
    client.send("HEAD /waiting-room/nosuchqueue HTTP/1.1\r\nHost: t\r\nAccept: text/html\r\n\r\n");
    let missing = client.head();
    assert_eq!(missing.status, 404);
    assert_eq!(missing.header("Set-Cookie"), None);
    assert_eq!(room.waiting().len(), 3);
}

#[test]
fn cookies_are_secure_by_default() {
    let room = Room::start("");
    let r = room.get(PAGE, &[HTML]);
    let cookie = set_cookies(&r)
        .into_iter()
        .find(|c| c.starts_with("waitgate-queue-baseball="))
        .unwrap()
        .to_string();
    assert!(cookie.contains("Secure"), "{cookie}");
}

#[test]
fn once_admitted_the_page_trades_the_place_for_a_token_cookie_and_goes_back() {
    let room = Room::start("cookies: {secure: false}\n");
    let first = room.get(&format!("{PAGE}?return=/tickets/seat%3Fx%3D1"), &[HTML]);
    let cookie = cookie_named(&first, "waitgate-queue-baseball").unwrap();
    let user = cookie_user(&cookie);
    admit_by_hand(&mut room.redis.conn(), &user, now_ms() + 600_000);

    let admitted = room.get(
        &format!("{PAGE}?return=/tickets/seat%3Fx%3D1"),
        &[HTML, ("Cookie", &cookie)],
    );
    assert_eq!(admitted.status, 303, "{admitted:?}");
    assert_eq!(admitted.header("Location"), Some("/tickets/seat?x=1"));
    let token_header = set_cookies(&admitted)
        .into_iter()
        .find(|c| c.starts_with("waitgate-token-baseball="))
        .expect("the token cookie")
        .to_string();
    for attribute in ["HttpOnly", "SameSite=Lax", "Path=/", "Max-Age="] {
        assert!(token_header.contains(attribute), "{token_header}");
    }
    let token = cookie_named(&admitted, "waitgate-token-baseball").unwrap();

    // The protected page takes the cookie, and the backend sees who it is.
    let seat = room.get("/tickets/seat?x=1", &[HTML, ("Cookie", &token)]);
    assert_eq!(seat.status, 200, "{seat:?}");
    let seen = room.upstream.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].target, "/tickets/seat?x=1");
    assert_eq!(seen[0].header("X-Waitgate-User"), Some(user.as_str()));
    assert_eq!(seen[0].header("X-Waitgate-Queue"), Some("baseball"));
    // Authorization wins over the cookie.
    let both = room.get(
        "/tickets/seat",
        &[("Cookie", &token), ("Authorization", "Bearer nope")],
    );
    assert_eq!(both.status, 401);
}

#[test]
fn the_return_path_never_leads_off_the_site() {
    let room = Room::start("cookies: {secure: false}\n");
    let evil = [
        "https://evil.example/tickets",
        "//evil.example/tickets",
        "/%2Fevil.example",
        "/\\evil.example",
        "/tickets/../admin",
        "/tickets/%2e%2e/admin",
        "/ticketsx",
        "/api/v1/queue/register",
        "javascript:alert(1)",
        "/nowhere",
    ];
    let first = room.get(PAGE, &[HTML]);
    let cookie = cookie_named(&first, "waitgate-queue-baseball").unwrap();
    // What the page's script would go to.
    for wanted in evil {
        let encoded: String = form_urlencoded::byte_serialize(wanted.as_bytes()).collect();
        let page = room
            .get(
                &format!("{PAGE}?return={encoded}"),
                &[HTML, ("Cookie", &cookie)],
            )
            .text();
        // Not followed: the queue's own waiting-room route instead.
        assert_eq!(script_config(&page)["return"], "/tickets", "{wanted}");
    }
    // Nor is there one to follow when the page is opened by itself (a
    // bookmark, a shared link).
    let alone = room.get(PAGE, &[HTML, ("Cookie", &cookie)]).text();
    assert_eq!(script_config(&alone)["return"], "/tickets");
    let good = room
        .get(
            &format!("{PAGE}?return=%2Fsoccer%2Fmatch"),
            &[HTML, ("Cookie", &cookie)],
        )
        .text();
    assert_eq!(script_config(&good)["return"], "/soccer/match");
    // Where the no-JavaScript admission sends the browser.
    admit_by_hand(
        &mut room.redis.conn(),
        &cookie_user(&cookie),
        now_ms() + 600_000,
    );
    let r = room.get(
        &format!("{PAGE}?return=https%3A%2F%2Fevil.example%2F"),
        &[HTML, ("Cookie", &cookie)],
    );
    assert_eq!(r.status, 303);
    assert_eq!(r.header("Location"), Some("/tickets"));
}

#[test]
fn cookie_authenticated_changes_must_come_from_this_site() {
    let room = Room::start("cookies: {secure: false}\n");
    // A register with no userId: an API client gets 400; a browser of
    // another site 403; this site's page a new user and the cookie.
    let r = room.register_with(&[]);
    assert_eq!(
        (r.status, r.error_code().as_str()),
        (400, "invalid_request")
    );
    let r = room.register_with(&[("Origin", "https://evil.example")]);
    assert_eq!(r.error_code(), "cross_site_request");
    assert!(room.waiting().is_empty(), "nothing written");
    let r = room.register_with(&[SAME_ORIGIN]);
    assert_eq!(r.status, 200, "{r:?}");
    let user = r.json()["userId"].as_str().unwrap().to_string();
    assert_eq!(user.len(), 22);
    let cookie = cookie_named(&r, "waitgate-queue-baseball").unwrap();
    assert_eq!(cookie_user(&cookie), user);
    // Registering again with the cookie keeps the place.
    let again = room.send(
        "POST",
        "/api/v1/queue/register",
        &[SAME_ORIGIN, ("Cookie", &cookie)],
        Some(r#"{"queue":"baseball"}"#),
    );
    assert_eq!(again.json()["userId"], user.as_str());
    assert!(again.json().get("queueCredential").is_none());
    // A register that the cookie names the user of is cookie-authenticated
    // too: refused unless it shows it came from this site.
    for headers in not_this_site(&cookie) {
        let r = room.register_with(&headers);
        assert_eq!(
            (r.status, r.error_code().as_str()),
            (403, "cross_site_request"),
            "{headers:?}"
        );
        assert!(set_cookies(&r).is_empty());
    }
    // The Origin of this site (from Host) counts as well.
    let host = format!("http://{}", room.wg.addr);
    let by_origin = room.register_with(&[("Origin", &host)]);
    assert_eq!(by_origin.status, 200);

    // rank reads the cookie (a GET: no same-site rule).
    let rank = room.get("/api/v1/queue/rank?queue=baseball", &[("Cookie", &cookie)]);
    assert_eq!(rank.json()["userId"], user.as_str());
    assert!(rank.json()["pollAfterMs"].as_u64().unwrap() >= 1000);

    // The token exchange and the dropout with the cookie: refused from
    // anywhere but this site, and nothing changes.
    admit_by_hand(&mut room.redis.conn(), &user, now_ms() + 600_000);
    for headers in not_this_site(&cookie) {
        let r = room.send("POST", "/api/v1/queue/active/token", &headers, Some(Q));
        assert_eq!(r.status, 403, "{headers:?}");
        assert_eq!(r.error_code(), "cross_site_request");
        assert!(set_cookies(&r).is_empty());
        let r = room.send(
            "DELETE",
            "/api/v1/queue/dropout?queue=baseball",
            &headers,
            None,
        );
        assert_eq!(r.error_code(), "cross_site_request", "{headers:?}");
    }
    let active: Option<f64> =
        redis::Commands::zscore(&mut room.redis.conn(), ACTIVE_KEY, &user).unwrap();
    assert!(active.is_some(), "still active");
    let token = room.post_as("/api/v1/queue/active/token", &cookie);
    assert_eq!(token.status, 200, "{token:?}");
    assert!(token.json()["accessToken"].is_string());
    assert!(cookie_named(&token, "waitgate-token-baseball").is_some());
    let gone = room.send(
        "DELETE",
        "/api/v1/queue/dropout?queue=baseball",
        &[("Cookie", &cookie), SAME_ORIGIN],
        None,
    );
    assert_eq!(gone.status, 204, "{gone:?}");
    let removed = set_cookies(&gone);
    assert_eq!(removed.len(), 2);
    assert!(
        removed.iter().all(|c| c.contains("Max-Age=0")),
        "{removed:?}"
    );
    let active: Option<f64> =
        redis::Commands::zscore(&mut room.redis.conn(), ACTIVE_KEY, &user).unwrap();
    assert!(active.is_none());

    // API clients that name the user and credential themselves are not
    // cookie-authenticated: no Origin needed.
    let credential = room.join("api_user").unwrap();
    let r = room.send(
        "DELETE",
        "/api/v1/queue/dropout?userId=api_user&queue=baseball",
        &[("X-Queue-Credential", &credential)],
        None,
    );
    assert_eq!(r.status, 204);
}

#[test]
fn cors_preflights_and_answers_are_for_allowed_origins_only() {
    let room = Room::start("cors: {allowed-origins: ['https://shop.example']}\n");
    let preflight = |origin: &str, target: &str| {
        room.send(
            "OPTIONS",
            target,
            &[
                ("Origin", origin),
                ("Access-Control-Request-Method", "POST"),
                ("Access-Control-Request-Headers", "content-type"),
            ],
            None,
        )
    };
    for target in [
        "/api/v1/queue/register",
        "/api/v1/queue/rank?queue=baseball",
        "/api/v1/queue/active/token",
        "/api/v1/queue/dropout",
    ] {
        let ok = preflight("https://shop.example", target);
        assert_eq!(ok.status, 204, "{target}: {ok:?}");
        assert_eq!(
            ok.header("Access-Control-Allow-Origin"),
            Some("https://shop.example")
        );
        assert_eq!(ok.header("Access-Control-Allow-Credentials"), Some("true"));
        assert_eq!(
            ok.header("Access-Control-Allow-Methods"),
            Some("GET, POST, DELETE")
        );
        assert_eq!(
            ok.header("Access-Control-Allow-Headers"),
            Some("Authorization, Content-Type, X-Queue-Credential, X-Waitgate-Proof, X-Waitgate-Invite")
        );
        let refused = preflight("https://evil.example", target);
        assert_eq!(refused.status, 403);
        assert_eq!(refused.error_code(), "origin_not_allowed");
        assert!(refused.header("Access-Control-Allow-Origin").is_none());
    }
    // OPTIONS without Origin is no preflight: the endpoint's 405.
    let plain = room.send("OPTIONS", "/api/v1/queue/register", &[], None);
    assert_eq!(plain.status, 405);

    // The answers themselves: allowed origins only, on both HTTP paths
    // (rank is the direct lane's, register the proxy's).
    let shop = ("Origin", "https://shop.example");
    let r = room.send(
        "POST",
        "/api/v1/queue/register",
        &[shop],
        Some(r#"{"userId":"spa_user","queue":"baseball"}"#),
    );
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("Access-Control-Allow-Origin"),
        Some("https://shop.example")
    );
    assert_eq!(r.header("Vary"), Some("Origin"));
    let credential = r.json()["queueCredential"].as_str().unwrap().to_string();
    let rank = room.get(
        "/api/v1/queue/rank?userId=spa_user&queue=baseball",
        &[shop, ("X-Queue-Credential", &credential)],
    );
    assert_eq!(rank.status, 200);
    assert_eq!(
        rank.header("Access-Control-Allow-Origin"),
        Some("https://shop.example")
    );
    assert_eq!(
        rank.header("Access-Control-Allow-Credentials"),
        Some("true")
    );
    let other = room.get(
        "/api/v1/queue/rank?userId=spa_user&queue=baseball",
        &[("Origin", "https://evil.example")],
    );
    assert_eq!(other.status, 200);
    assert!(other.header("Access-Control-Allow-Origin").is_none());
    // An error to an allowed origin carries the headers too (the app can
    // read why).
    let missing = room.get("/api/v1/queue/rank?userId=nobody&queue=baseball", &[shop]);
    assert_eq!(missing.status, 404);
    assert!(missing.header("Access-Control-Allow-Origin").is_some());
}

/// A login token of the site's, HS256.
fn login(sub: &str, secret: &str) -> String {
    login_until(sub, secret, now_ms() / 1000 + 600)
}

/// A login token of the shop's that runs out at `exp` (seconds).
fn login_until(sub: &str, secret: &str, exp: u64) -> String {
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &json!({"sub": sub, "iss": "shop", "aud": "waitgate", "exp": exp}),
        &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()),
    )
    .unwrap()
}

const LOGIN_SECRET: &str = "the-shops-login-secret-at-least-32-bytes!";

#[test]
fn without_identity_binding_a_squatter_takes_anothers_place() {
    // The attack, as it stands without binding: whoever registers as "bob"
    // first holds bob's place, and bob gets no credential.
    let room = Room::start("");
    assert!(room.join("bob").is_some(), "the squatter's credential");
    assert_eq!(room.join("bob"), None, "the real bob gets none");
    // and keeps it alive with rank, which needs no credential.
    let r = room.get("/api/v1/queue/rank?userId=bob&queue=baseball", &[]);
    assert_eq!(r.status, 200);
}

/// With `require-credential`, rank takes the credential of the user's
/// current registration only: one of a registration that left (a dropout,
/// then a new registration) polls nothing and keeps nothing alive.
#[test]
fn rank_with_require_credential_refuses_an_earlier_registrations_credential() {
    let queues = "  baseball: {require-credential: true}\n  soccer: {}\n";
    let room = Room::start_with(queues, "", &[]);
    let register = || {
        let r = room.send("POST", "/api/v1/queue/register", &[], Some(Q_BOB));
        assert_eq!(r.status, 200, "{r:?}");
        r.json()["queueCredential"].as_str().unwrap().to_string()
    };
    let rank = |credential: &str| {
        room.get(
            "/api/v1/queue/rank?userId=bob&queue=baseball",
            &[("X-Queue-Credential", credential)],
        )
    };
    let earlier = register();
    assert_eq!(rank(&earlier).status, 200);
    let r = room.send(
        "DELETE",
        "/api/v1/queue/dropout?userId=bob&queue=baseball",
        &[("X-Queue-Credential", &earlier)],
        None,
    );
    assert_eq!(r.status, 204, "{r:?}");
    std::thread::sleep(Duration::from_millis(5));
    let current = register();
    assert_ne!(current, earlier);
    let before = room.heartbeat("bob").unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let r = rank(&earlier);
    assert_eq!(
        (r.status, r.error_code().as_str()),
        (403, "credential_mismatch"),
        "{r:?}"
    );
    assert_eq!(
        room.heartbeat("bob").unwrap(),
        before,
        "no heartbeat written"
    );
    let r = rank(&current);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["rank"], 0);
}

#[test]
fn with_identity_binding_the_squatting_attack_is_refused() {
    let queues = "  baseball: {require-credential: true}\n  soccer: {}\n";
    let identity =
        "identity: {issuer: shop, audience: waitgate, secret-env: SHOP_LOGIN_SECRET, cookie: session}\ncookies: {secure: false}\n";
    let room = Room::start_with(queues, identity, &[("SHOP_LOGIN_SECRET", LOGIN_SECRET)]);
    let register_as = |body: &str, login: Option<&str>| {
        let auth = login.map(|l| format!("Bearer {l}"));
        let headers: Vec<(&str, &str)> = auth
            .as_deref()
            .map(|a| vec![("Authorization", a)])
            .unwrap_or_default();
        room.send("POST", "/api/v1/queue/register", &headers, Some(body))
    };
    let mallory = login("mallory", LOGIN_SECRET);
    let bob = login("bob", LOGIN_SECRET);

    // Mallory, signed in as herself, asks for bob's place: refused, and
    // nothing is written.
    let r = register_as(r#"{"userId":"bob","queue":"baseball"}"#, Some(&mallory));
    assert_eq!(
        (r.status, r.error_code().as_str()),
        (403, "identity_mismatch")
    );
    // Without a login, or with a forged one: 401.
    let r = register_as(r#"{"userId":"bob","queue":"baseball"}"#, None);
    assert_eq!((r.status, r.error_code().as_str()), (401, "login_required"));
    let forged = login("bob", "not-the-shops-secret-but-as-long-as-it");
    let r = register_as(Q, Some(&forged));
    assert_eq!((r.status, r.error_code().as_str()), (401, "invalid_login"));
    assert!(room.waiting().is_empty());

    // Bob registers as himself (userId from the login; repeating it is
    // fine) and gets his credential.
    let r = register_as(Q, Some(&bob));
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["userId"], "bob");
    let credential = r.json()["queueCredential"].as_str().unwrap().to_string();
    let r = register_as(r#"{"userId":"bob","queue":"baseball"}"#, Some(&bob));
    assert_eq!(r.json()["userId"], "bob");
    // Mallory registers too, as herself.
    assert_eq!(register_as(Q, Some(&mallory)).status, 200);
    assert_eq!(room.waiting(), ["bob", "mallory"]);

    // Mallory cannot read or keep alive bob's place.
    let auth = format!("Bearer {mallory}");
    let r = room.get(
        "/api/v1/queue/rank?userId=bob&queue=baseball",
        &[("Authorization", &auth)],
    );
    assert_eq!(r.error_code(), "identity_mismatch");
    let r = room.get("/api/v1/queue/rank?userId=bob&queue=baseball", &[]);
    assert_eq!(r.error_code(), "login_required");
    let before = room.heartbeat("bob").unwrap();
    // Bob's own rank needs his credential too (require-credential).
    let auth = format!("Bearer {bob}");
    let r = room.get(
        "/api/v1/queue/rank?queue=baseball",
        &[("Authorization", &auth)],
    );
    assert_eq!(
        (r.status, r.error_code().as_str()),
        (400, "invalid_request")
    );
    let mallory_credential = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
    let r = room.get(
        "/api/v1/queue/rank?queue=baseball",
        &[
            ("Authorization", &auth),
            ("X-Queue-Credential", mallory_credential),
        ],
    );
    assert_eq!(r.error_code(), "credential_mismatch");
    assert_eq!(
        room.heartbeat("bob").unwrap(),
        before,
        "no heartbeat written"
    );
    let r = room.get(
        "/api/v1/queue/rank?queue=baseball",
        &[
            ("Authorization", &auth),
            ("X-Queue-Credential", &credential),
        ],
    );
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["rank"], 0);

    // In a browser, the login cookie: the page joins as the signed-in user,
    // and a second device gets the same registration's credential.
    let session = format!("session={bob}");
    let page = room.get(PAGE, &[HTML, ("Cookie", &session)]);
    assert_eq!(page.status, 200, "{page:?}");
    let cookie = cookie_named(&page, "waitgate-queue-baseball").unwrap();
    assert_eq!(cookie_user(&cookie), "bob");
    assert_eq!(room.waiting(), ["bob", "mallory"], "the same place");
    let signed_out = room.get(PAGE, &[HTML]);
    assert_eq!(signed_out.status, 401);
    assert!(signed_out.text().contains("Sign in to the site first"));
    // Its heading says what is wanted (it said the queue was not open).
    assert!(
        signed_out
            .text()
            .contains(r#"<h1 id="wg-heading" class="wg-heading">Sign in to join the queue</h1>"#),
        "{}",
        signed_out.text()
    );
    // Admitted, bob opens the page on yet another device (the login cookie
    // only): he is let in there too.
    admit_by_hand(&mut room.redis.conn(), "bob", now_ms() + 600_000);
    let device = room.get(
        &format!("{PAGE}?return=/tickets/seat"),
        &[HTML, ("Cookie", &session)],
    );
    assert_eq!(device.status, 303, "{device:?}");
    assert_eq!(device.header("Location"), Some("/tickets/seat"));
    assert!(cookie_named(&device, "waitgate-token-baseball").is_some());

    // The token exchange is authenticated by the credential: with no login
    // token it takes the body's userId; with mallory's login, her own.
    let exchange = |headers: &[(&str, &str)], user: &str| {
        room.send(
            "POST",
            "/api/v1/queue/active/token",
            headers,
            Some(&format!(
                r#"{{"userId":"{user}","queue":"baseball","queueCredential":"{credential}"}}"#
            )),
        )
    };
    let r = exchange(&[], "bob");
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.json()["accessToken"].is_string());
    let auth = format!("Bearer {mallory}");
    let r = exchange(&[("Authorization", &auth)], "bob");
    assert_eq!(r.error_code(), "identity_mismatch");
    let r = exchange(&[("Authorization", &format!("Bearer {forged}"))], "bob");
    assert_eq!(r.error_code(), "invalid_login");
}

/// A site's login that runs out while its user waits keeps the place: the
/// rank polls, the page and, once admitted, the token exchange take the
/// registration's credential with it. A login that ran out proves nothing
/// on its own (no heartbeat is written for it), and joining needs a fresh
/// one.
#[test]
fn a_login_that_runs_out_while_its_user_waits_keeps_the_place() {
    let identity =
        "identity: {issuer: shop, audience: waitgate, secret-env: SHOP_LOGIN_SECRET, cookie: session, leeway-s: 0}\ncookies: {secure: false}\n";
    let room = Room::start_with(QUEUES, identity, &[("SHOP_LOGIN_SECRET", LOGIN_SECRET)]);
    // Bob's login is good for two seconds more: he joins with it, and it
    // runs out while he waits.
    let bob_login = login_until("bob", LOGIN_SECRET, now_ms() / 1000 + 2);
    let bob = format!("session={bob_login}");
    let bob_lapsed = bob.clone();
    // Logins that ran out an hour ago, before anyone here joined.
    let long_ago = |sub: &str| login_until(sub, LOGIN_SECRET, now_ms() / 1000 - 3600);
    let lapsed = |sub: &str| match sub {
        "bob" => bob_login.clone(),
        _ => long_ago(sub),
    };
    let carol = format!("session={}", login("carol", LOGIN_SECRET));

    // Bob and carol join on the page, signed in.
    let page = room.get(PAGE, &[HTML, ("Cookie", &bob)]);
    assert_eq!(page.status, 200, "{page:?}");
    let queue_cookie = cookie_named(&page, "waitgate-queue-baseball").unwrap();
    let credential = queue_cookie
        .split_once('=')
        .unwrap()
        .1
        .split('.')
        .next()
        .unwrap()
        .to_string();
    let carols = room.get(PAGE, &[HTML, ("Cookie", &carol)]);
    let carol_cookie = cookie_named(&carols, "waitgate-queue-baseball").unwrap();
    assert_eq!(room.waiting(), ["bob", "carol"]);
    let rank = "/api/v1/queue/rank?queue=baseball";

    // Bob's login runs out. Alone, it proves nothing: no heartbeat.
    std::thread::sleep(Duration::from_millis(3100));
    assert_eq!(
        room.get(PAGE, &[HTML, ("Cookie", &bob)]).status,
        401,
        "run out"
    );
    let before = room.heartbeat("bob").unwrap();
    let r = room.get(rank, &[("Cookie", &bob_lapsed)]);
    assert_eq!((r.status, r.error_code().as_str()), (401, "invalid_login"));
    // Nor with carol's queue cookie, or a credential that is not his.
    let r = room.get(
        rank,
        &[("Cookie", &format!("{bob_lapsed}; {carol_cookie}"))],
    );
    assert_eq!((r.status, r.error_code().as_str()), (401, "invalid_login"));
    let r = room.get(
        rank,
        &[
            ("Authorization", &format!("Bearer {}", lapsed("bob"))),
            ("X-Queue-Credential", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"),
        ],
    );
    assert_eq!((r.status, r.error_code().as_str()), (401, "invalid_login"));
    // A login that ran out, forged: nothing either, with the credential.
    let forged = login_until("bob", "not-the-shops-secret-but-as-long-as-it", 1);
    let r = room.get(
        rank,
        &[
            ("Authorization", &format!("Bearer {forged}")),
            ("X-Queue-Credential", &credential),
        ],
    );
    assert_eq!((r.status, r.error_code().as_str()), (401, "invalid_login"));
    // A login that ran out before his registration was made is not paired
    // with its credential either.
    let r = room.get(
        rank,
        &[
            ("Authorization", &format!("Bearer {}", long_ago("bob"))),
            ("X-Queue-Credential", &credential),
        ],
    );
    assert_eq!((r.status, r.error_code().as_str()), (401, "invalid_login"));
    let old = format!("session={}; {queue_cookie}", long_ago("bob"));
    assert_eq!(room.get(rank, &[("Cookie", &old)]).status, 401);
    assert_eq!(room.get(PAGE, &[HTML, ("Cookie", &old)]).status, 401);
    assert_eq!(
        room.heartbeat("bob").unwrap(),
        before,
        "no heartbeat written"
    );

    // With his queue cookie (the page's polls), or his credential (an API
    // client), the place is kept: answered, and the heartbeat written.
    std::thread::sleep(Duration::from_millis(5));
    let r = room.get(
        rank,
        &[("Cookie", &format!("{bob_lapsed}; {queue_cookie}"))],
    );
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        (r.json()["userId"].as_str(), r.json()["rank"].as_i64()),
        (Some("bob"), Some(0))
    );
    let r = room.get(
        rank,
        &[
            ("Authorization", &format!("Bearer {}", lapsed("bob"))),
            ("X-Queue-Credential", &credential),
        ],
    );
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["userId"], "bob");
    assert_ne!(
        room.heartbeat("bob").unwrap(),
        before,
        "the heartbeat is written"
    );
    // The page shows his place, and joins nobody.
    let page = room.get(
        PAGE,
        &[HTML, ("Cookie", &format!("{bob_lapsed}; {queue_cookie}"))],
    );
    assert_eq!(page.status, 200, "{page:?}");
    assert!(cookie_named(&page, "waitgate-queue-baseball").is_none());
    let head = room.send(
        "HEAD",
        PAGE,
        &[HTML, ("Cookie", &format!("{bob_lapsed}; {queue_cookie}"))],
        None,
    );
    assert_eq!(head.status, 200);
    // Without the queue cookie, or to join anew, the login must be fresh.
    let page = room.get(PAGE, &[HTML, ("Cookie", &bob_lapsed)]);
    assert_eq!(page.status, 401);
    assert!(page.text().contains("Sign in to the site first"));
    let head = room.send("HEAD", PAGE, &[HTML, ("Cookie", &bob_lapsed)], None);
    assert_eq!(head.status, 401);
    let r = room.register_with(&[("Authorization", &format!("Bearer {}", lapsed("dave")))]);
    assert_eq!((r.status, r.error_code().as_str()), (401, "invalid_login"));
    assert_eq!(room.waiting(), ["bob", "carol"]);

    // Admitted, he is let in from the page, and his client exchanges the
    // credential for a token: the lapsed login still names him.
    admit_by_hand(&mut room.redis.conn(), "bob", now_ms() + 600_000);
    let back = room.get(
        &format!("{PAGE}?return=/tickets/seat"),
        &[HTML, ("Cookie", &format!("{bob_lapsed}; {queue_cookie}"))],
    );
    assert_eq!(back.status, 303, "{back:?}");
    assert!(cookie_named(&back, "waitgate-token-baseball").is_some());
    // The exchange of bob's credential, as `user` with `user`'s lapsed login.
    let exchange_as = |user: &str| {
        room.send(
            "POST",
            "/api/v1/queue/active/token",
            &[("Authorization", &format!("Bearer {}", lapsed(user)))],
            Some(&format!(
                r#"{{"userId":"{user}","queue":"baseball","queueCredential":"{credential}"}}"#
            )),
        )
    };
    let r = exchange_as("bob");
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.json()["accessToken"].is_string());
    // Carol's lapsed login cannot take bob's token with his credential.
    let r = exchange_as("carol");
    assert_eq!((r.status, r.error_code().as_str()), (401, "invalid_login"));
}

#[test]
fn identity_binding_checks_rs256_and_es256_logins_against_a_jwks_file() {
    let dir = tempfile::tempdir().unwrap();
    let openssl = |args: &[&str]| tls::openssl(dir.path(), args);
    openssl(&[
        "genpkey",
        "-algorithm",
        "RSA",
        "-pkeyopt",
        "rsa_keygen_bits:2048",
        "-out",
        "rsa.pem",
    ]);
    // An EC key (P-256) in the file `out`.
    let ec_key = |out: &str| {
        openssl(&[
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-out",
            out,
        ])
    };
    ec_key("ec.pem");
    // The public halves, as JWKs.
    let rsa_text =
        String::from_utf8(openssl(&["rsa", "-in", "rsa.pem", "-noout", "-text"])).unwrap();
    let n = hex_field(&rsa_text, "modulus:", "publicExponent:");
    let ec_text = String::from_utf8(openssl(&["ec", "-in", "ec.pem", "-noout", "-text"])).unwrap();
    let point = hex_field(&ec_text, "pub:", "ASN1 OID:");
    assert_eq!(point[0], 4, "an uncompressed point");
    let b64 = |bytes: &[u8]| {
        use base64::Engine;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    };
    let n = n.strip_prefix(&[0u8][..]).unwrap_or(&n).to_vec();
    let jwks = json!({"keys": [
        {"kty": "RSA", "kid": "r1", "alg": "RS256", "use": "sig", "n": b64(&n), "e": "AQAB"},
        {"kty": "EC", "kid": "e1", "alg": "ES256", "crv": "P-256", "x": b64(&point[1..33]), "y": b64(&point[33..65])},
    ]});
    let jwks_path = dir.path().join("jwks.json");
    std::fs::write(&jwks_path, jwks.to_string()).unwrap();
    let identity = format!(
        "identity: {{issuer: shop, audience: waitgate, jwks-file: '{}'}}\n",
        jwks_path.display()
    );
    let room = Room::start_with(QUEUES, &identity, &[]);
    // The private keys as DER: PKCS#1 for RSA, PKCS#8 for EC.
    let sign = |alg: jsonwebtoken::Algorithm, kid: &str, pem: &str, sub: &str| {
        let key = match alg {
            jsonwebtoken::Algorithm::RS256 => jsonwebtoken::EncodingKey::from_rsa_der(&openssl(&[
                "rsa",
                "-in",
                pem,
                "-outform",
                "DER",
                "-traditional",
            ])),
            _ => jsonwebtoken::EncodingKey::from_ec_der(&openssl(&[
                "pkcs8", "-topk8", "-nocrypt", "-in", pem, "-outform", "DER",
            ])),
        };
        let mut header = jsonwebtoken::Header::new(alg);
        header.kid = Some(kid.into());
        let exp = now_ms() / 1000 + 600;
        jsonwebtoken::encode(
            &header,
            &json!({"sub": sub, "iss": "shop", "aud": "waitgate", "exp": exp}),
            &key,
        )
        .unwrap()
    };
    for (alg, kid, pem, user) in [
        (jsonwebtoken::Algorithm::RS256, "r1", "rsa.pem", "rsa_user"),
        (jsonwebtoken::Algorithm::ES256, "e1", "ec.pem", "ec_user"),
    ] {
        let auth = format!("Bearer {}", sign(alg, kid, pem, user));
        let r = room.register_with(&[("Authorization", &auth)]);
        assert_eq!(r.status, 200, "{alg:?}: {r:?}");
        assert_eq!(r.json()["userId"], user);
    }
    // A token signed with a key the JWKS does not have, or an HS256 one
    // (no such key): refused.
    ec_key("other.pem");
    let stranger = format!(
        "Bearer {}",
        sign(
            jsonwebtoken::Algorithm::ES256,
            "e1",
            "other.pem",
            "stranger"
        )
    );
    let r = room.register_with(&[("Authorization", &stranger)]);
    assert_eq!(r.error_code(), "invalid_login");
    let hs = format!("Bearer {}", login("hs_user", LOGIN_SECRET));
    let r = room.register_with(&[("Authorization", &hs)]);
    assert_eq!(r.error_code(), "invalid_login");
    assert_eq!(room.waiting(), ["rsa_user", "ec_user"]);
}

/// The bytes of a hex dump (`aa:bb:...`) in `text` between two labels.
fn hex_field(text: &str, from: &str, to: &str) -> Vec<u8> {
    let start = text.find(from).unwrap() + from.len();
    let end = start + text[start..].find(to).unwrap();
    text[start..end]
        .split(|c: char| c == ':' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .map(|h| u8::from_str_radix(h, 16).unwrap())
        .collect()
}

#[test]
fn the_page_says_so_when_redis_is_down_and_keeps_the_place() {
    let mut room = Room::start("cookies: {secure: false}\n");
    let first = room.get(PAGE, &[HTML]);
    let cookie = cookie_named(&first, "waitgate-queue-baseball").unwrap();
    room.redis.signal("STOP");
    let started = std::time::Instant::now();
    let down = room.get(PAGE, &[HTML, ("Cookie", &cookie)]);
    assert_eq!(down.status, 503, "{down:?}");
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(down.header("Retry-After").is_some());
    assert!(down.text().contains("The waiting room is busy"));
    // Nobody was placed: the heading says busy, not in line.
    assert!(
        down.text()
            .contains(r#"<h1 id="wg-heading" class="wg-heading">The waiting room is busy</h1>"#),
        "{}",
        down.text()
    );
    room.redis.signal("CONT");
    let back = room.get(PAGE, &[HTML, ("Cookie", &cookie)]);
    assert_eq!(back.status, 200);
    assert!(set_cookies(&back).is_empty(), "the same place");
    let _ = &mut room;
}

#[test]
fn an_operators_template_is_used_and_a_broken_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("room.html");
    std::fs::write(
        &good,
        "<!doctype html><html lang=\"{{lang}}\"><head>{{head}}</head><body>\
         <h1 id=\"wg-heading\">{{heading}}</h1><p>OUR OWN PAGE {{title}}: {{message}} ({{status}})</p></body></html>",
    )
    .unwrap();
    let queues = format!(
        "  baseball: {{page: {{title: 'Big <Game>', template: '{}'}}}}\n  soccer: {{}}\n",
        good.display()
    );
    let room = Room::start_with(&queues, "", &[]);
    let page = room.get(PAGE, &[HTML]).text();
    assert!(
        page.contains("OUR OWN PAGE Big &lt;Game&gt;: You&#39;re next. (WAITING)"),
        "{page}"
    );
    assert!(page.contains("id=\"waitgate-config\""));

    let bad = dir.path().join("bad.html");
    std::fs::write(&bad, "<html><body>{{message}} {{pleace}}</body></html>").unwrap();
    let config = config(
        &room.redis,
        1,
        &format!(
            "  baseball: {{page: {{template: '{}'}}}}\n  soccer: {{}}\n",
            bad.display()
        ),
        "",
    );
    let file = dir.path().join("bad.yaml");
    std::fs::write(&file, config.yaml()).unwrap();
    let out = run_binary(&["-c", file.to_str().unwrap(), "-t"], Some(SECRET_B64));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("queues.baseball.page.template"), "{err}");
    assert!(err.contains("unknown placeholder {{pleace}}"), "{err}");
}

#[test]
fn the_page_joins_the_queue_only_on_a_page_load() {
    let room = Room::start("cookies: {secure: false}\n");
    // Another site's page can put the URL in an image or a frame: the
    // browser says so, and nobody joins.
    for dest in ["image", "iframe", "script", "empty"] {
        let r = room.get(
            PAGE,
            &[
                HTML,
                ("Sec-Fetch-Dest", dest),
                ("Sec-Fetch-Site", "cross-site"),
            ],
        );
        assert_eq!(r.status, 403, "{dest}");
        assert_eq!(r.error_code(), "cross_site_request");
        assert!(set_cookies(&r).is_empty());
    }
    assert!(room.waiting().is_empty());
    // Nor does a browser's guess at the next page: a prefetch or a
    // prerender of the page (speculation rules, `<link rel=prefetch>`),
    // or of a protected page that sends it there.
    for (name, value) in [
        ("Sec-Purpose", "prefetch"),
        ("Sec-Purpose", "prefetch;prerender"),
        ("Purpose", "prefetch"),
        ("X-Moz", "prefetch"),
    ] {
        let r = room.get(
            PAGE,
            &[
                HTML,
                ("Sec-Fetch-Dest", "document"),
                ("Sec-Fetch-Site", "same-origin"),
                (name, value),
            ],
        );
        assert_eq!(
            (r.status, r.error_code().as_str()),
            (403, "prefetch_declined"),
            "{name}: {value}"
        );
        assert!(set_cookies(&r).is_empty());
    }
    assert!(room.waiting().is_empty());
    // A navigation, even from a link on another site, joins.
    let r = room.get(
        PAGE,
        &[
            HTML,
            ("Sec-Fetch-Dest", "document"),
            ("Sec-Fetch-Site", "cross-site"),
        ],
    );
    assert_eq!(r.status, 200);
    assert_eq!(room.waiting().len(), 1);
}

#[test]
fn a_token_cookie_changes_nothing_from_another_site() {
    let room = Room::start("cookies: {secure: false}\n");
    let first = room.get(PAGE, &[HTML]);
    let queue_cookie = cookie_named(&first, "waitgate-queue-baseball").unwrap();
    admit_by_hand(
        &mut room.redis.conn(),
        &cookie_user(&queue_cookie),
        now_ms() + 600_000,
    );
    let admitted = room.get(PAGE, &[HTML, ("Cookie", &queue_cookie)]);
    let token = cookie_named(&admitted, "waitgate-token-baseball").unwrap();

    // A form of another site (or one that says nothing) cannot POST with
    // the cookie; this site's page can.
    for headers in not_this_site(&token) {
        let r = room.send("POST", "/tickets/buy", &headers, Some(Q));
        assert_eq!(r.status, 403, "{headers:?}");
        assert_eq!(r.error_code(), "cross_site_request");
    }
    assert!(
        room.upstream.seen().is_empty(),
        "nothing reached the backend"
    );
    let r = room.post_as("/tickets/buy", &token);
    assert_eq!(r.status, 200, "{r:?}");
    // Reading with it is fine from anywhere (a link on another site).
    let r = room.get(
        "/tickets/seat",
        &[("Cookie", &token), ("Sec-Fetch-Site", "cross-site")],
    );
    assert_eq!(r.status, 200);
    // With Authorization the rule does not apply: no cookie is involved.
    let bearer = format!("Bearer {}", token.split_once('=').unwrap().1);
    let r = room.send(
        "POST",
        "/tickets/buy",
        &[("Authorization", &bearer)],
        Some(Q),
    );
    assert_eq!(r.status, 200);
}

#[test]
fn cookies_that_do_not_check_out_do_not_hide_the_real_ones() {
    let room = Room::start("cookies: {secure: false}\n");
    let first = room.get(PAGE, &[HTML]);
    let good = cookie_named(&first, "waitgate-queue-baseball").unwrap();
    let user = cookie_user(&good);
    // A malformed one and a forged one of the same name come first (tossed
    // in by another site of the domain, say); a cookie with a byte that is
    // not UTF-8 sits in the same header.
    let forged = format!("waitgate-queue-baseball=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA.0.{user}");
    let header = format!("waitgate-queue-baseball=junk; {forged}; pref=M\u{fc}ller; {good}");
    let mut raw = header.into_bytes();
    let at = raw.iter().position(|&b| b == 0xc3).unwrap();
    raw.splice(at..at + 2, [0xfc]);
    let mut client = Client::connect(room.wg.addr);
    let mut request =
        format!("GET {PAGE} HTTP/1.1\r\nHost: t\r\nAccept: text/html\r\nCookie: ").into_bytes();
    request.extend_from_slice(&raw);
    request.extend_from_slice(b"\r\n\r\n");
    client.send_bytes(&request);
    let (head, _) = client.response();
    assert_eq!(head.status, 200);
    assert!(
        head.header("Set-Cookie").is_none(),
        "the same place: no new user"
    );
    assert_eq!(room.waiting(), [user.as_str()]);

    // A start the cookie says is absurd (it is the visitor's to edit) is
    // no more than a wrong progress bar.
    let (credential, _) = good.split_once('=').unwrap().1.split_once('.').unwrap();
    let absurd = format!("waitgate-queue-baseball={credential}.18446744073709551615.{user}");
    let r = room.get(PAGE, &[HTML, ("Cookie", &absurd)]);
    assert_eq!(r.status, 200);
    assert!(
        r.text().contains("value=\"99\""),
        "rank 0 of an absurd start: the next in line"
    );
}

/// A wait of hours is told in hours, not hundreds of minutes, in either
/// language; and the bar is full only once admitted: the next in line is
/// at 99%.
#[test]
fn long_waits_are_told_in_hours_and_the_bar_is_full_only_once_admitted() {
    let room = Room::start_with(
        "  baseball: {admission: {max-active: 1000, interval-ms: 60000, batch-size: 1}}\n  soccer: {}\n",
        "cookies: {secure: false}\n",
        &[],
    );
    let first = room.get(PAGE, &[HTML]);
    assert_eq!(first.status, 200, "{first:?}");
    let page = first.text();
    assert!(page.contains("You're next."), "{page}");
    assert!(page.contains("value=\"99\""), "the next in line: {page}");

    for i in 0..150 {
        room.join(&format!("early_{i}"));
    }
    // 151 ahead (the first visitor too), one a minute: about 2.5 hours.
    let page = room.get(PAGE, &[HTML]).text();
    assert!(page.contains("151 people are ahead of you."), "{page}");
    assert!(page.contains("About 3 hours"), "{page}");
    let page = room.get(PAGE, &[HTML, ("Accept-Language", "ko")]).text();
    assert!(page.contains("약 3시간"), "{page}");
}

/// Before registration opens, the page says when in plain UTC (not RFC
/// 3339), and gives its script the time, to say it in the visitor's own.
#[test]
fn the_not_open_page_says_when_in_words() {
    let room = Room::start_with(
        QUEUES,
        "cookies: {secure: false}\n",
        &[("WAITGATE_ADMIN_TOKEN", ADMIN_TOKEN)],
    );
    let prequeue_from = (room.redis.now_ms() / 60_000 + 60) * 60_000;
    let at = waitgate::time::rfc3339(prequeue_from);
    schedule(
        &room.wg,
        Some(prequeue_from),
        prequeue_from + 3_600_000,
        false,
    );

    let page = room.get(PAGE, &[HTML]).text();
    // "2026-12-04T10:00:00.000Z" read as "2026-12-04 10:00 UTC".
    let words = format!("{} UTC", at[..16].replace('T', " "));
    assert!(
        page.contains(&format!("The queue opens at {words}. Come back then.")),
        "{page}"
    );
    assert_eq!(script_config(&page)["opensAtMs"], prequeue_from);
    assert_eq!(script_config(&page)["status"], "NOT_OPEN");
}
