//! Debian's headless Chromium (package `chromium`), driven over the
//! DevTools protocol: a browser with a profile of its own, a page's
//! JavaScript evaluated, and a wait until it is true.

#![allow(dead_code)]

use std::path::Path;
use std::time::{Duration, Instant};

use chromiumoxide::{Browser, BrowserConfig, Page};
use futures::StreamExt;

/// Debian's Chromium (package `chromium`).
pub const CHROMIUM: &str = "/usr/bin/chromium";

/// A headless Chromium with its own empty profile.
pub struct Chromium {
    pub browser: Browser,
    handler: tokio::task::JoinHandle<()>,
    _profile: tempfile::TempDir,
}

impl Chromium {
    /// With the browser's own window size.
    pub async fn launch() -> Chromium {
        Chromium::launch_with(None, None).await
    }

    /// With a window of `size` (width, height), and `preferences` written
    /// into the profile before start (the browser's settings, as its
    /// settings page writes them).
    pub async fn launch_with(size: Option<(u32, u32)>, preferences: Option<&str>) -> Chromium {
        assert!(
            Path::new(CHROMIUM).exists(),
            "{CHROMIUM} is missing: apt-get install chromium (scripts/test.sh says so too)"
        );
        let profile = tempfile::tempdir().unwrap();
        if let Some(preferences) = preferences {
            let default = profile.path().join("Default");
            std::fs::create_dir_all(&default).unwrap();
            std::fs::write(default.join("Preferences"), preferences).unwrap();
        }
        let mut config = BrowserConfig::builder()
            .chrome_executable(CHROMIUM)
            .user_data_dir(profile.path())
            .no_sandbox()
            .new_headless_mode();
        if let Some((width, height)) = size {
            config = config.window_size(width, height);
        }
        let config = config
            // No connection anywhere but to waitgate.
            .args([
                "--disable-gpu",
                "--disable-quic",
                "--disable-component-update",
                "--no-default-browser-check",
            ])
            .build()
            .unwrap();
        let (browser, mut handler) = Browser::launch(config).await.expect("chromium starts");
        let handler = tokio::spawn(async move { while handler.next().await.is_some() {} });
        Chromium {
            browser,
            handler,
            _profile: profile,
        }
    }

    /// A new tab at `url`, once `ready` is true in it (within `limit`).
    pub async fn open(&self, url: String, ready: &str, limit: Duration) -> Page {
        let page = self.browser.new_page(url).await.unwrap();
        until(&page, ready, limit).await;
        page
    }

    pub async fn close(mut self) {
        let _ = self.browser.close().await;
        let _ = self.browser.wait().await;
        self.handler.abort();
    }
}

/// Evaluates `js` in the page.
pub async fn eval<T: serde::de::DeserializeOwned>(page: &Page, js: &str) -> T {
    page.evaluate(js)
        .await
        .unwrap_or_else(|e| panic!("{js}: {e}"))
        .into_value()
        .unwrap_or_else(|e| panic!("{js}: {e}"))
}

/// Waits until `js` is true in the page, at most `limit`; how long it took.
pub async fn until(page: &Page, js: &str, limit: Duration) -> Duration {
    let started = Instant::now();
    loop {
        // A navigation under way makes an evaluation fail: look again.
        if let Ok(value) = page.evaluate(js).await {
            if value.into_value::<bool>().unwrap_or(false) {
                return started.elapsed();
            }
        }
        if started.elapsed() > limit {
            let url = page.url().await.ok().flatten();
            let text = page
                .evaluate("document.body ? document.body.innerText : ''")
                .await
                .ok()
                .and_then(|v| v.into_value::<String>().ok());
            panic!("not true within {limit:?}: {js}\nat {url:?}\n{text:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The runtime a test drives the browser from.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}
