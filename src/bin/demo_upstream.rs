//! A tiny stand-in for the ticketing backend behind waitgate.
//!
//! It answers every request with JSON saying what it received, including the
//! identity headers waitgate sets (`X-Waitgate-User`, `X-Waitgate-Queue`), so
//! the demo shows what a protected request looks like once it gets through;
//! a browser (`Accept: text/html`) gets the same as a small page.
//!
//! ```text
//! cargo run --release --features demo --bin waitgate-demo-upstream -- 127.0.0.1:9000
//! curl -s 127.0.0.1:9000/api/v1/follow-up/access
//! ```

use async_trait::async_trait;
use http::Response;
use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;
use pingora::server::configuration::ServerConf;
use pingora::server::Server;
use pingora::services::listening::Service;

struct Backend;

fn header<'a>(session: &'a ServerSession, name: &str) -> Option<&'a str> {
    session
        .req_header()
        .headers
        .get(name)
        .and_then(|v| v.to_str().ok())
}

#[async_trait]
impl ServeHttp for Backend {
    async fn response(&self, session: &mut ServerSession) -> Response<Vec<u8>> {
        let seen = serde_json::json!({
            "backend": "demo",
            "method": session.req_header().method.as_str(),
            "path": String::from_utf8_lossy(session.req_header().raw_path()),
            "waitgateUser": header(session, "x-waitgate-user"),
            "waitgateQueue": header(session, "x-waitgate-queue"),
            "message": "You reached the protected backend.",
        });
        let browser = header(session, "accept").is_some_and(|a| a.contains("text/html"));
        let (kind, body) = if browser {
            // The JSON, escaped into a page (no markup from the request).
            let text = serde_json::to_string_pretty(&seen)
                .unwrap_or_default()
                .replace('&', "&amp;")
                .replace('<', "&lt;")
                .replace('>', "&gt;");
            let page = format!(
                "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
                 <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
                 <title>Tickets</title></head><body><h1>You're in: the ticketing backend</h1>\
                 <p>This is what the backend received:</p><pre>{text}</pre></body></html>"
            );
            ("text/html; charset=utf-8", page.into_bytes())
        } else {
            ("application/json", seen.to_string().into_bytes())
        };
        Response::builder()
            .status(200)
            .header("Content-Type", kind)
            .header("Content-Length", body.len())
            .body(body)
            .unwrap_or_else(|_| Response::new(Vec::new()))
    }
}

fn main() {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:9000".to_string());
    let conf = ServerConf {
        threads: 1,
        grace_period_seconds: Some(0),
        graceful_shutdown_timeout_seconds: Some(0),
        ..ServerConf::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();
    let mut service = Service::new("demo upstream".to_string(), Backend);
    service.add_tcp(&addr);
    server.add_service(service);
    eprintln!("demo upstream listening on {addr}");
    server.run_forever();
}
