//! The upstreams' metrics, read from a real scrape: what each address
//! answered (`waitgate_upstream_requests_total`), how long the requests
//! took (`waitgate_upstream_duration_seconds`), and which addresses take
//! traffic (`waitgate_upstream_up`). Runs on both HTTP paths (CI runs it
//! again with `WAITGATE_TEST_DIRECT_LANE=off`).

mod common;

use std::time::Duration;

use common::*;

/// The value of the series `series` (its name and labels as written) in a
/// scrape; 0 when it is not there.
fn value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0.0, |v| v.trim().parse().unwrap())
}

#[test]
fn each_address_counts_what_it_answered_and_says_whether_it_takes_traffic() {
    let redis = Redis::start();
    let (a, b) = (Upstream::start(), Upstream::start());
    let dead = free_port();
    let config = TestConfig::on_free_ports(&redis.url(), a.port)
        .upstream(
            "ticketing",
            &format!(
                "{{addresses: ['127.0.0.1:{}', '127.0.0.1:{}', '127.0.0.1:{dead}'], \
                 health-check: {{path: /health, interval-ms: 200, timeout-ms: 200}}}}",
                a.port, b.port
            ),
        )
        // An upstream whose one address refuses connections, unchecked:
        // its requests fail, and it still counts as taking traffic.
        .upstream("gone", &format!("{{address: '127.0.0.1:{dead}'}}"))
        .route("{prefix: /api/v1/gone, upstream: gone, queue: baseball}");
    let wg = config.start();
    let token = admitted_token(&wg, &redis, "fan_1");
    let up = |port: u16, upstream: &str| {
        format!("waitgate_upstream_up{{address=\"127.0.0.1:{port}\",upstream=\"{upstream}\"}}")
    };
    // The dead address fails its first checks; until then it may be chosen.
    let text = wg.wait_for_metrics(
        &format!("{} 0", up(dead, "ticketing")),
        Duration::from_secs(5),
    );
    assert_eq!(value(&text, &up(a.port, "ticketing")), 1.0, "{text}");
    assert_eq!(value(&text, &up(b.port, "ticketing")), 1.0, "{text}");
    assert_eq!(value(&text, &up(dead, "gone")), 1.0, "{text}");

    let before = get(wg.admin, "/metrics").unwrap().text();
    for _ in 0..6 {
        let r = with_token(wg.addr, "GET", "/api/v1/follow-up/seat", &token, None);
        assert_eq!(r.status, 200);
    }
    let r = with_token(wg.addr, "GET", "/api/v1/gone/seat", &token, None);
    assert_eq!(r.status, 502);

    let requests = |text: &str, port: u16, upstream: &str, status: u16| {
        value(
            text,
            &format!(
                "waitgate_upstream_requests_total{{address=\"127.0.0.1:{port}\",status=\"{status}\",upstream=\"{upstream}\"}}"
            ),
        )
    };
    let text = wg.wait_for_metrics(
        &format!(
            "waitgate_upstream_requests_total{{address=\"127.0.0.1:{dead}\",status=\"502\",upstream=\"gone\"}} 1"
        ),
        Duration::from_secs(5),
    );
    let sent = |port: u16| {
        requests(&text, port, "ticketing", 200) - requests(&before, port, "ticketing", 200)
    };
    // Round robin over the two healthy addresses; none to the dead one.
    assert_eq!(sent(a.port) + sent(b.port), 6.0, "{text}");
    assert!(sent(a.port) >= 1.0 && sent(b.port) >= 1.0, "{text}");
    assert_eq!(requests(&text, dead, "ticketing", 200), 0.0, "{text}");
    assert_eq!(requests(&text, dead, "ticketing", 502), 0.0, "{text}");
    let counted = |text: &str, upstream: &str| {
        value(
            text,
            &format!("waitgate_upstream_duration_seconds_count{{upstream=\"{upstream}\"}}"),
        )
    };
    assert_eq!(
        counted(&text, "ticketing") - counted(&before, "ticketing"),
        6.0,
        "{text}"
    );
    assert_eq!(counted(&text, "gone"), 1.0, "{text}");
}
