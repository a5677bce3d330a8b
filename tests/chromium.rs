//! The waiting room in a real browser: Debian's headless Chromium, driven
//! over the DevTools protocol, against waitgate, a real Redis and an
//! upstream.
//!
//! - A visitor opens a protected page, lands on the waiting-room page,
//!   keeps the place across a reload and in a second tab, sees the page
//!   update as people ahead are admitted, is admitted by the real gate and
//!   arrives at the protected page with the token cookie; the upstream sees
//!   who it is.
//! - The page in Korean, with JavaScript turned off: it refreshes itself and
//!   still gets the visitor in.
//! - Screenshots at phone and desktop width (`target/screenshots/`; with
//!   `WAITGATE_SCREENSHOTS=docs`, also `docs/img/`, where the docs show
//!   them).

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use chromiumoxide::cdp::browser_protocol::emulation::{
    SetDeviceMetricsOverrideParams, SetScriptExecutionDisabledParams, SetTimezoneOverrideParams,
    SetUserAgentOverrideParams,
};
use chromiumoxide::cdp::browser_protocol::page::CaptureScreenshotFormat;
use chromiumoxide::page::ScreenshotParams;
use chromiumoxide::Page;
use common::browser::{eval, runtime, until, Chromium};
use common::*;

struct Room {
    wg: Waitgate,
    redis: Redis,
    upstream: Upstream,
}

impl Room {
    /// Queue `baseball`, one admission a second (held until a test releases
    /// it), a waiting-room route `/tickets`.
    fn start() -> Room {
        Room::start_env(&[])
    }

    fn start_env(env: &[(&str, &str)]) -> Room {
        Room::start_with(env, "")
    }

    /// [`Room::start_env`] with the top-level keys of `with` (YAML) added.
    fn start_with(env: &[(&str, &str)], with: &str) -> Room {
        let redis = Redis::start();
        let upstream = Upstream::start();
        let wg = TestConfig::on_free_ports(&redis.url(), upstream.port)
            .remove("threads")
            .remove("grace-period-s")
            .remove("jwt")
            .queues(
                "baseball: {admission: {interval-ms: 1000, batch-size: 1}, \
                 page: {title: 'Baseball ticket open'}}",
            )
            .set(
                "routes",
                "[{prefix: /tickets, upstream: ticketing, queue: baseball, waiting-room: true}]",
            )
            .set("cookies", "{secure: false}")
            .with(with)
            .start_env(env);
        hold_gate(&redis);
        Room {
            wg,
            redis,
            upstream,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.wg.addr)
    }

    /// A new tab at `path`, once it is in the room (within 10 s).
    async fn enter(&self, chromium: &Chromium, path: &str) -> Page {
        chromium
            .open(self.url(path), IN_THE_ROOM, Duration::from_secs(10))
            .await
    }

    /// Navigates `page` to `path`, and waits until it is in the room
    /// (within 10 s).
    async fn go_in(&self, page: &Page, path: &str) {
        go(page, self.url(path), IN_THE_ROOM, Duration::from_secs(10)).await;
    }

    fn waiting(&self) -> Vec<String> {
        redis::Commands::zrange(&mut self.redis.conn(), WAITING_KEY, 0, -1).unwrap()
    }
}

/// The window the tests and the screenshots take.
const WINDOW: Option<(u32, u32)> = Some((1280, 800));

async fn launch() -> Chromium {
    Chromium::launch_with(WINDOW, None).await
}

/// Sends `language` as the page's `Accept-Language` (the browser's own user
/// agent kept).
async fn accept_language(page: &Page, language: &str) {
    let agent: String = eval(page, "navigator.userAgent").await;
    page.execute(
        SetUserAgentOverrideParams::builder()
            .user_agent(agent)
            .accept_language(language)
            .build()
            .unwrap(),
    )
    .await
    .unwrap();
}

/// Navigates the page to `url`, and waits until `ready` is true in it
/// (within `limit`).
async fn go(page: &Page, url: String, ready: &str, limit: Duration) {
    page.goto(url).await.unwrap();
    until(page, ready, limit).await;
}

const MESSAGE: &str = "document.getElementById('wg-message').textContent";

/// The visitor is on the waiting-room page, loaded.
const IN_THE_ROOM: &str =
    "location.pathname === '/waiting-room/baseball' && document.readyState === 'complete'";

/// "Save proof of my place": the link asks for the receipt (a register,
/// which keeps the place), then holds it as a file whose receipt the
/// published keys verify.
#[test]
fn the_page_offers_a_receipt_of_the_place_that_the_published_keys_verify() {
    let room = Room::start();
    register_new(room.wg.addr, "early");
    runtime().block_on(async {
        let chromium = launch().await;
        let page = room.enter(&chromium, "/tickets/seat").await;
        until(
            &page,
            "document.getElementById('wg-receipt') !== null",
            Duration::from_secs(5),
        )
        .await;
        let label: String = eval(&page, "document.getElementById('wg-receipt').textContent").await;
        assert_eq!(label, "Save proof of my place");
        let before = room.waiting();
        let _: bool = eval(
            &page,
            "document.getElementById('wg-receipt').click() || true",
        )
        .await;
        until(
            &page,
            "document.getElementById('wg-receipt').hasAttribute('data-receipt')",
            Duration::from_secs(5),
        )
        .await;
        assert_eq!(room.waiting(), before, "asking for it keeps the place");
        let file: String = eval(
            &page,
            "decodeURIComponent(document.getElementById('wg-receipt').href.split(',')[1])",
        )
        .await;
        let file: serde_json::Value = serde_json::from_str(&file).unwrap();
        assert_eq!(file["queue"], "baseball");
        assert!(file["keys"]
            .as_str()
            .unwrap()
            .ends_with("/.well-known/waitgate/keys"));
        let receipt = file["receipt"].as_str().unwrap();
        let keys = get(room.wg.addr, "/.well-known/waitgate/keys").unwrap();
        let jwks: jsonwebtoken::jwk::JwkSet = serde_json::from_slice(&keys.body).unwrap();
        let kid = jsonwebtoken::decode_header(receipt).unwrap().kid.unwrap();
        let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::EdDSA);
        validation.required_spec_claims.clear();
        validation.validate_exp = false;
        let claims = jsonwebtoken::decode::<serde_json::Value>(
            receipt,
            &jsonwebtoken::DecodingKey::from_jwk(jwks.find(&kid).unwrap()).unwrap(),
            &validation,
        )
        .unwrap()
        .claims;
        assert_eq!(claims["queue"], "baseball");
        assert_eq!(claims["sub"], before[1].as_str(), "the visitor's own place");
        let arrival: f64 =
            redis::Commands::zscore(&mut room.redis.conn(), WAITING_KEY, &before[1]).unwrap();
        assert_eq!(claims["arrival"].as_u64(), Some(arrival as u64));
        chromium.close().await;
    });
}

#[test]
fn a_visitor_waits_on_the_page_and_arrives_with_the_token_cookie() {
    let room = Room::start();
    for early in ["early_1", "early_2"] {
        register_new(room.wg.addr, early);
    }
    runtime().block_on(async {
        let chromium = launch().await;
        let page = room.enter(&chromium, "/tickets/seat?from=chromium").await;
        let message: String = eval(&page, MESSAGE).await;
        assert_eq!(message, "2 people are ahead of you.");
        let place: String = eval(&page, "document.getElementById('wg-place').textContent").await;
        assert_eq!(place.trim(), "3");
        let live: String = eval(
            &page,
            "document.getElementById('wg-message').getAttribute('aria-live')",
        )
        .await;
        assert_eq!(live, "polite", "a live region a screen reader announces");
        let title: String = eval(&page, "document.title").await;
        assert_eq!(title, "Baseball ticket open");
        let waiting = room.waiting();
        assert_eq!(waiting.len(), 3);
        let user = waiting[2].clone();

        let cookies = page.get_cookies().await.unwrap();
        let queue_cookie = cookies
            .iter()
            .find(|c| c.name == "waitgate-queue-baseball")
            .expect("the queue cookie");
        assert!(queue_cookie.http_only, "no script can read it");
        assert!(queue_cookie.value.ends_with(&format!(".{user}")));
        let readable: String = eval(&page, "document.cookie").await;
        assert!(!readable.contains("waitgate"), "{readable}");

        // A reload and a second tab keep the place: nobody registers again.
        page.reload().await.unwrap();
        until(
            &page,
            "document.readyState === 'complete'",
            Duration::from_secs(5),
        )
        .await;
        assert_eq!(
            eval::<String>(&page, MESSAGE).await,
            "2 people are ahead of you."
        );
        let second = chromium
            .open(
                room.url("/waiting-room/baseball?return=/tickets/seat"),
                "document.readyState === 'complete'",
                Duration::from_secs(5),
            )
            .await;
        assert_eq!(
            eval::<String>(&second, MESSAGE).await,
            "2 people are ahead of you."
        );
        assert_eq!(room.waiting(), waiting, "the same three, in the same order");
        second.close().await.unwrap();

        // Someone ahead is let in: the page says so at its next poll,
        // without a reload.
        admit_by_hand(&mut room.redis.conn(), "early_1", u64::MAX / 2_000_000);
        let took = until(
            &page,
            &format!("{MESSAGE} === '1 person is ahead of you.'"),
            Duration::from_secs(5),
        )
        .await;
        println!("the page showed the new place {took:?} after an admission");
        // The next in line: the bar is full only once admitted.
        admit_by_hand(&mut room.redis.conn(), "early_2", u64::MAX / 2_000_000);
        until(
            &page,
            &format!("{MESSAGE} === \"You're next.\""),
            Duration::from_secs(5),
        )
        .await;
        let progress: String = eval(
            &page,
            "document.getElementById('wg-progress-text').textContent",
        )
        .await;
        assert_eq!(progress, "99% of the way");

        // The gate opens: this visitor goes in. The page trades the place
        // for the token and goes where it was going.
        release_gate(&room.redis);
        let took = until(
            &page,
            "location.pathname === '/tickets/seat' && location.search === '?from=chromium'",
            Duration::from_secs(15),
        )
        .await;
        println!("admitted and at the protected page {took:?} after the gate opened");
        let body: String = eval(&page, "document.body.innerText").await;
        assert!(body.contains("upstream"), "{body}");
        let cookies = page.get_cookies().await.unwrap();
        let token = cookies
            .iter()
            .find(|c| c.name == "waitgate-token-baseball")
            .expect("the token cookie");
        assert!(token.http_only);
        let seen = room.upstream.seen();
        let visit = seen
            .iter()
            .find(|s| s.target == "/tickets/seat?from=chromium")
            .expect("the upstream got the visit");
        assert_eq!(visit.header("X-Waitgate-User"), Some(user.as_str()));
        assert_eq!(visit.header("X-Waitgate-Queue"), Some("baseball"));
        chromium.close().await;
    });
}

#[test]
fn the_page_speaks_korean_and_gets_the_visitor_in_without_javascript() {
    let room = Room::start();
    runtime().block_on(async {
        let chromium = launch().await;
        let page = chromium.browser.new_page("about:blank").await.unwrap();
        accept_language(&page, "ko-KR,ko;q=0.9,en;q=0.5").await;
        page.execute(SetScriptExecutionDisabledParams::new(true))
            .await
            .unwrap();
        go(
            &page,
            room.url("/tickets/seat"),
            "location.pathname === '/waiting-room/baseball'",
            Duration::from_secs(10),
        )
        .await;
        let lang: String = eval(&page, "document.documentElement.lang").await;
        assert_eq!(lang, "ko");
        assert_eq!(eval::<String>(&page, MESSAGE).await, "다음 차례입니다.");
        let heading: String =
            eval(&page, "document.getElementById('wg-heading').textContent").await;
        assert_eq!(heading, "대기 중입니다");
        // No script ran: the refresh does it all.
        let scripted: bool = eval(
            &page,
            "document.getElementById('waitgate').dataset.connection !== undefined || false",
        )
        .await;
        assert!(!scripted);
        release_gate(&room.redis);
        let took = until(
            &page,
            "location.pathname === '/tickets/seat'",
            Duration::from_secs(25),
        )
        .await;
        println!("without JavaScript: at the protected page {took:?} after the gate opened");
        assert!(eval::<String>(&page, "document.body.innerText")
            .await
            .contains("upstream"));
        chromium.close().await;
    });
}

/// The width and height of a PNG, from its header.
fn png_size(png: &[u8]) -> (u32, u32) {
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "a PNG");
    let word = |at: usize| u32::from_be_bytes(png[at..at + 4].try_into().unwrap());
    (word(16), word(20))
}

fn save(name: &str, png: &[u8]) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = root.join("target/screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, png).unwrap();
    if std::env::var("WAITGATE_SCREENSHOTS").as_deref() == Ok("docs") {
        std::fs::create_dir_all(root.join("docs/img")).unwrap();
        std::fs::write(root.join("docs/img").join(name), png).unwrap();
    }
    path
}

#[test]
fn screenshots_of_the_page_at_phone_and_desktop_width() {
    let room = Room::start();
    // A crowd ahead, as at a real open.
    let _: () = redis::Script::new(
        "for i = 1, tonumber(ARGV[1]) do
           redis.call('ZADD', KEYS[1], i, 'fan_' .. i)
           redis.call('HSET', KEYS[2], 'fan_' .. i, ARGV[2])
         end",
    )
    .key(WAITING_KEY)
    .key("queue:{baseball}:due")
    .arg(1241)
    .arg(u64::MAX / 2_000_000)
    .invoke(&mut room.redis.conn())
    .unwrap();
    runtime().block_on(async {
        let chromium = launch().await;
        for (name, width, height, scale, mobile, language) in [
            ("waiting-room-phone.png", 390, 844, 2.0, true, "en-US,en"),
            (
                "waiting-room-desktop.png",
                1280,
                800,
                1.0,
                false,
                "en-US,en",
            ),
            ("waiting-room-phone-ko.png", 390, 844, 2.0, true, "ko-KR,ko"),
        ] {
            let page = chromium.browser.new_page("about:blank").await.unwrap();
            page.execute(SetDeviceMetricsOverrideParams::new(
                width, height, scale, mobile,
            ))
            .await
            .unwrap();
            accept_language(&page, language).await;
            room.go_in(&page, "/tickets/seat").await;
            let message: String = eval(&page, MESSAGE).await;
            assert!(message.contains("1,241"), "{message}");
            // Nothing wider than the screen.
            let overflow: bool = eval(
                &page,
                "document.documentElement.scrollWidth > window.innerWidth",
            )
            .await;
            assert!(!overflow, "{name}: the page is wider than the screen");
            let png = page
                .screenshot(
                    ScreenshotParams::builder()
                        .format(CaptureScreenshotFormat::Png)
                        .build(),
                )
                .await
                .unwrap();
            let size = png_size(&png);
            let want = (
                (width as f64 * scale) as u32,
                (height as f64 * scale) as u32,
            );
            assert_eq!(size, want, "{name}");
            println!("{} ({}x{})", save(name, &png).display(), size.0, size.1);
            page.close().await.unwrap();
        }
        chromium.close().await;
    });
}

/// While Redis is down the page backs off (1 s, 2 s, 4 s ... give or take a
/// fifth), however often the server says to retry: a queue's worth of open
/// pages must not poll every second into an outage. It says the
/// connection is lost meanwhile. (It retried every second, as Retry-After
/// said.)
#[test]
fn the_page_backs_off_while_redis_is_down() {
    let mut room = Room::start();
    runtime().block_on(async {
        let chromium = launch().await;
        let page = room.enter(&chromium, "/tickets/seat").await;
        let _: bool = eval(
            &page,
            "(() => { window.ranks = 0; const f = window.fetch;
               window.fetch = (...a) => { if (String(a[0]).includes('/rank')) window.ranks++;
                 return f(...a); }; return true; })()",
        )
        .await;
        room.redis.kill();
        until(
            &page,
            "document.getElementById('waitgate').dataset.connection === 'lost'",
            Duration::from_secs(5),
        )
        .await;
        let lost_at: u64 = eval(&page, "window.ranks").await;
        tokio::time::sleep(Duration::from_millis(9_000)).await;
        let polls: u64 = eval(&page, "window.ranks").await;
        // After the poll that found the outage: retries about 1, 3 and 7 s
        // later (at most 1.2, 3.6 and 8.4), so at most three in 9 s.
        println!(
            "{} polls in the 9 s after the outage was seen",
            polls - lost_at
        );
        assert!(polls - lost_at <= 3, "{} polls in 9 s", polls - lost_at);
        let message: String = eval(&page, MESSAGE).await;
        assert!(!message.is_empty());
        chromium.close().await;
    });
}

/// A page that could not place the visitor (Redis unavailable) does not
/// poll a place it does not have: it reloads later, and the load places
/// the visitor once Redis is back. (It polled rank with no cookie, got
/// 400, and reloaded every few seconds.)
#[test]
fn a_page_shown_while_redis_is_down_reloads_rather_than_polls() {
    let mut room = Room::start();
    room.redis.kill();
    runtime().block_on(async {
        let chromium = launch().await;
        let page = chromium
            .open(
                room.url("/waiting-room/baseball?return=/tickets/seat"),
                "document.readyState === 'complete' && \
             document.getElementById('waitgate').dataset.status === 'UNAVAILABLE'",
                Duration::from_secs(10),
            )
            .await;
        // Past the page's first advice (5 s): it reloads, and no rank call
        // reaches waitgate.
        tokio::time::sleep(Duration::from_millis(7_000)).await;
        let metrics = get(room.wg.admin, "/metrics").unwrap().text();
        let polls: Vec<&str> = metrics
            .lines()
            .filter(|l| l.starts_with("waitgate_http_requests_total{route=\"rank\""))
            .collect();
        assert!(polls.is_empty(), "polled with no place: {polls:?}");
        room.redis.restart();
        hold_gate(&room.redis);
        // The next load (about 5 s after the first) places the visitor.
        until(
            &page,
            "document.getElementById('waitgate') && \
             document.getElementById('waitgate').dataset.status === 'WAITING'",
            Duration::from_secs(15),
        )
        .await;
        assert_eq!(room.waiting().len(), 1);
        chromium.close().await;
    });
}

/// Before registration opens, the page says when in the visitor's own time
/// zone (Seoul here, nine hours ahead of UTC), not in UTC.
#[test]
fn the_not_open_page_says_when_in_the_visitors_time() {
    let room = Room::start_env(&[("WAITGATE_ADMIN_TOKEN", ADMIN_TOKEN)]);
    // On the hour plus 7 minutes, at least an hour away.
    let prequeue_from = (room.redis.now_ms() / 3_600_000 + 2) * 3_600_000 + 7 * 60_000;
    schedule(
        &room.wg,
        Some(prequeue_from),
        prequeue_from + 3_600_000,
        false,
    );
    let seoul_hour = (prequeue_from / 3_600_000 + 9) % 24;
    let twelve = match seoul_hour % 12 {
        0 => 12,
        h => h,
    };
    runtime().block_on(async {
        let chromium = launch().await;
        let page = chromium.browser.new_page("about:blank").await.unwrap();
        page.execute(SetTimezoneOverrideParams::new("Asia/Seoul"))
            .await
            .unwrap();
        go(
            &page,
            room.url("/waiting-room/baseball"),
            "document.readyState === 'complete'",
            Duration::from_secs(5),
        )
        .await;
        let message: String = eval(&page, MESSAGE).await;
        assert!(message.starts_with("The queue opens at "), "{message}");
        assert!(!message.contains("UTC"), "{message}");
        assert!(
            message.contains(&format!("{twelve}:07")),
            "{seoul_hour}:07 in Seoul: {message}"
        );
        chromium.close().await;
    });
}

/// A browser that refuses cookies is told the page needs them, and the page
/// stops there: it neither polls nor reloads, so it does not join again at
/// every load (the one load that reached the server joined once).
#[test]
fn a_browser_that_refuses_cookies_is_told_so_and_joins_once() {
    let room = Room::start();
    runtime().block_on(async {
        // Cookies blocked for every site, as the browser's settings do it.
        let chromium = Chromium::launch_with(WINDOW, Some(
            r#"{"profile":{"default_content_setting_values":{"cookies":2}}}"#,
        ))
        .await;
        let page = chromium
            .open(room.url("/tickets/seat"), "location.pathname === '/waiting-room/baseball'", Duration::from_secs(10))
            .await;
        until(
            &page,
            "document.getElementById('waitgate').dataset.status === 'COOKIES_REQUIRED'",
            Duration::from_secs(5),
        )
        .await;
        assert_eq!(
            eval::<String>(&page, MESSAGE).await,
            "This waiting room keeps your place in a cookie. Allow cookies for this site, then reload this page."
        );
        // Longer than the page's poll and reload intervals (1 s near the
        // head): still the one place, and the same page.
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert_eq!(room.waiting().len(), 1, "{:?}", room.waiting());
        assert_eq!(
            eval::<String>(&page, "document.getElementById('waitgate').dataset.status").await,
            "COOKIES_REQUIRED"
        );
        chromium.close().await;
    });
}

/// One visitor's share of the per-client limits docs/operations.md gives as
/// safe (a twentieth: one poll a second, a burst of 3): the page, with its
/// reloads, its polls and its token exchange, never meets them.
#[test]
fn the_page_never_meets_one_visitors_share_of_the_safe_limits() {
    let room = Room::start_with(
        &[],
        "limits: {register-per-client: {per-second: 1, burst: 3}, \
         rank-per-client: {per-second: 1, burst: 3}, \
         token-per-client: {per-second: 1, burst: 2}}",
    );
    register_new(room.wg.addr, "ahead");
    runtime().block_on(async {
        let chromium = launch().await;
        let page = room.enter(&chromium, "/tickets/seat").await;
        page.reload().await.unwrap();
        // Five seconds of polls, someone ahead let in meanwhile.
        std::thread::sleep(Duration::from_secs(2));
        admit_by_hand(&mut room.redis.conn(), "ahead", u64::MAX / 2_000_000);
        until(
            &page,
            &format!("{MESSAGE} === \"You're next.\""),
            Duration::from_secs(5),
        )
        .await;
        std::thread::sleep(Duration::from_secs(3));
        release_gate(&room.redis);
        until(
            &page,
            "location.pathname === '/tickets/seat'",
            Duration::from_secs(15),
        )
        .await;
        chromium.close().await;
    });
    let metrics = get(room.wg.admin, "/metrics").unwrap().text();
    for route in ["register", "rank", "token", "page"] {
        let series = format!("waitgate_rate_limited_total{{route=\"{route}\"}} 0");
        assert!(metrics.contains(&series), "{series}:\n{metrics}");
    }
}

/// The difficulty the docs give as the default (`challenge: {}`).
const DEFAULT_DIFFICULTY_BITS: u64 = 16;

/// A queue that asks a proof of work: the page solves the challenge in a
/// Web Worker, showing how it goes, registers with the proof and shows the
/// place; a visitor with the cookie is not asked again. Each solve, from
/// the page's load to the place shown, is timed: at the default difficulty
/// the median is under 2 s here.
#[test]
fn the_page_solves_the_challenge_and_joins_within_two_seconds() {
    let room = Room::start_with(
        &[],
        "queues: {baseball: {admission: {interval-ms: 1000, batch-size: 1}, challenge: {}, \
         page: {title: 'Baseball ticket open'}}}",
    );
    register_new_with_proof(&room.wg, "early_1");
    runtime().block_on(async {
        let chromium = launch().await;
        let mut times = Vec::new();
        for round in 0..9 {
            chromium.browser.clear_cookies().await.unwrap();
            let page = room.enter(&chromium, "/tickets/seat").await;
            // The place shown, measured in the page from its navigation.
            let placed = "document.getElementById('waitgate').dataset.status === 'WAITING'";
            until(&page, placed, Duration::from_secs(30)).await;
            let ms: f64 = eval(&page, "performance.now()").await;
            times.push(ms);
            let message: String = eval(&page, MESSAGE).await;
            assert_eq!(
                message,
                if round == 0 {
                    "1 person is ahead of you.".to_string()
                } else {
                    format!("{} people are ahead of you.", round + 1)
                }
            );
            if round == 0 {
                // A reload keeps the place, with no puzzle this time: the
                // cookie's place is polled.
                page.reload().await.unwrap();
                until(&page, IN_THE_ROOM, Duration::from_secs(5)).await;
                let status: String =
                    eval(&page, "document.getElementById('waitgate').dataset.status").await;
                assert_eq!(status, "WAITING");
            }
            page.close().await.unwrap();
        }
        assert_eq!(room.waiting().len(), 10, "one place per visitor");
        let proofs = proofs_issued(&room.wg);
        assert_eq!(proofs, 10, "one challenge per place");
        times.sort_by(f64::total_cmp);
        let median = times[times.len() / 2];
        println!(
            "time to a place at {DEFAULT_DIFFICULTY_BITS} bits, page load to place shown (ms): {times:.0?}; median {median:.0}"
        );
        assert!(median < 2_000.0, "median {median:.0} ms: {times:?}");
        chromium.close().await;
    });
}

/// Without JavaScript, a queue that asks a proof of work says that the
/// page needs it, and neither joins nor refreshes.
#[test]
fn without_javascript_the_challenge_page_says_it_needs_it() {
    let room = Room::start_with(&[], "queues: {baseball: {challenge: {difficulty-bits: 8}}}");
    runtime().block_on(async {
        let chromium = launch().await;
        let page = chromium.browser.new_page("about:blank").await.unwrap();
        page.execute(SetScriptExecutionDisabledParams::new(true))
            .await
            .unwrap();
        room.go_in(&page, "/tickets/seat").await;
        let note: String = eval(&page, "document.getElementById('wg-note').textContent").await;
        assert!(note.contains("needs JavaScript"), "{note}");
        let refresh: bool = eval(
            &page,
            "document.documentElement.innerHTML.includes('http-equiv=\"refresh\"')",
        )
        .await;
        assert!(!refresh, "a page that cannot join does not reload itself");
        assert!(room.waiting().is_empty());
        chromium.close().await;
    });
}

/// How many challenges waitgate issued for `baseball`.
fn proofs_issued(wg: &Waitgate) -> u64 {
    let metrics = get(wg.admin, "/metrics").unwrap().text();
    metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix("waitgate_challenges_issued_total{queue=\"baseball\"} ")?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

/// Registers `user` through the API with a solved challenge.
fn register_new_with_proof(wg: &Waitgate, user: &str) {
    let r = get(wg.addr, "/api/v1/queue/challenge?queue=baseball").unwrap();
    let v = r.json();
    let challenge = v["challenge"].as_str().unwrap();
    let bits = v["difficultyBits"].as_u64().unwrap() as u32;
    let proof = solve_proof(challenge, bits);
    let body = serde_json::json!({ "userId": user }).to_string();
    let r = request(
        wg.addr,
        "POST",
        "/api/v1/queue/register",
        &[
            ("Content-Type", "application/json"),
            ("X-Waitgate-Proof", &proof),
        ],
        Some(body.as_bytes()),
    )
    .unwrap();
    assert_eq!(r.status, 200, "{r:?}");
}

/// An invite-only queue that also asks a proof of work: the page of the
/// invitation's link solves the challenge and registers with both.
#[test]
fn the_page_of_an_invitation_joins_an_invite_only_queue_with_a_proof() {
    invited_visitor_joins("challenge: {difficulty-bits: 8}, ");
}

/// An invite-only queue: the page of the invitation's link joins through
/// its script, and takes the invite out of the address bar.
#[test]
fn the_page_of_an_invitation_joins_an_invite_only_queue() {
    invited_visitor_joins("");
}

fn invited_visitor_joins(challenge: &str) {
    let secret = "the-site-s-invite-secret-of-32-bytes-or-more";
    let room = Room::start_with(
        &[("SITE_INVITE_SECRET", secret)],
        &format!("queues: {{baseball: {{{challenge}invite: {{secret-env: SITE_INVITE_SECRET}}}}}}"),
    );
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600;
    let invite = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &serde_json::json!({"queue": "baseball", "jti": "chromium-1", "exp": exp}),
        &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()),
    )
    .unwrap();
    runtime().block_on(async {
        let chromium = launch().await;
        let page = room.enter(&chromium, "/tickets/seat").await;
        let status: String =
            eval(&page, "document.getElementById('waitgate').dataset.status").await;
        assert_eq!(status, "INVITE_REQUIRED");
        go(
            &page,
            room.url(&format!(
                "/waiting-room/baseball?return=/tickets/seat&invite={invite}"
            )),
            "document.getElementById('waitgate').dataset.status === 'WAITING'",
            Duration::from_secs(20),
        )
        .await;
        assert_eq!(room.waiting().len(), 1);
        let search: String = eval(&page, "location.search").await;
        assert!(
            search.starts_with("?return=") && !search.contains("invite"),
            "the invite left the address: {search}"
        );
        chromium.close().await;
    });
}
