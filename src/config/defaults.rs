//! The default of each key that has one, named for `#[serde(default = ...)]`.

pub fn listen() -> String {
    "127.0.0.1:8080".into()
}
pub fn admin_listen() -> String {
    "127.0.0.1:9091".into()
}
pub fn threads() -> u64 {
    2
}
pub fn grace_period_s() -> u64 {
    5
}
pub fn max_connections() -> u64 {
    10_000
}
/// Measured (tests/h2_budget.rs): a connection with this many requests
/// waiting for their bodies costs about three HTTP/1.1 connections
/// with one each; browsers open six connections a host over HTTP/1.1.
pub fn h2_max_streams() -> u64 {
    6
}
/// HTTP/2's initial window (RFC 9113 §6.9.2).
pub fn h2_window_bytes() -> u64 {
    65_535
}
pub fn direct_lane() -> bool {
    true
}
pub fn client_timeout_ms() -> u64 {
    10_000
}
pub fn connect_timeout_ms() -> u64 {
    2_000
}
pub fn resolve_interval_s() -> u64 {
    30
}
pub fn load_balancing() -> String {
    "round-robin".into()
}
pub fn read_timeout_ms() -> u64 {
    30_000
}
pub fn identity_leeway_s() -> u64 {
    5
}
