//! The proxy: what happens to a request on the listener.
//!
//! A request flows one way: framing and path checks, then routing, then
//! either the queue API (answered here, never forwarded) or a protected
//! route (JWT checked at the edge, then forwarded). [`decision`] makes that
//! decision from the request head alone, as a plain value, for the Pingora
//! proxy ([`gate`]) and for the direct lane ([`lane`]) alike; every HTTP
//! rule both apply comes from [`rules`]. [`connections`] runs each client
//! connection: the connection cap, the whole-head deadline, and the hand-off
//! to the lane or to Pingora; [`listener`] accepts them, one task each.
//! [`watched`] makes the Pingora proxy's
//! plain-TCP upstream connections, so that they are judged by the same
//! framing rules as the lane's.

pub mod connections;
pub mod decision;
pub mod fenced;
pub mod gate;
pub mod head;
pub mod lane;
pub mod listener;
pub mod routes;
pub mod rules;
pub mod upstream;
pub mod watched;

pub use decision::{decide, Decision, RequestHead};
pub use gate::Gate;
