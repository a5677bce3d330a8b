//! waitgate: a virtual waiting room that runs as a reverse proxy.
//!
//! Users register in a queue held in Redis, are admitted in batches to an
//! *active* state, trade that state for a short-lived JWT, and only then
//! reach the protected backend, which waitgate checks at the edge and
//! forwards to. The layout follows a request:
//!
//! - [`config`]: the YAML file, parsed into one validated `Config` (what
//!   `waitgate -t` runs).
//! - [`server`]: assembles the Pingora services from the config.
//! - [`proxy`]: the `ProxyHttp` dispatcher, the path classifier, the
//!   rulebook both HTTP paths call (`proxy::rules`) and the direct lane
//!   (`proxy::lane`), waitgate's own relay for plain GETs and rank polls.
//! - [`queue`]: the queue API (register, rank, dropout), one file per
//!   endpoint.
//! - [`edge`]: the signing key and the JWT checks at the edge.
//! - [`entry`]: what a register shows to buy a place where its queue asks
//!   it: a solved proof-of-work challenge, a signed invitation.
//! - [`limits`]: how often one client may call the queue API.
//! - [`store`]: Redis, as typed calls over the Lua scripts in `lua/`.
//! - [`background`]: the admission gate, the heartbeat cleanup and the
//!   gauge sampler, run by every instance with no leader.
//! - [`durability`]: what keeps a waiting user's place through Redis
//!   outages, failovers and data loss.
//! - [`metrics`]: the Prometheus collectors.
//! - [`admin`]: `/metrics`, `/healthz` and `/readyz` on their own listener,
//!   and the operators' API ([`control`]: pause, live rates, scheduled
//!   opens, revocation) under `/admin/v1/`.
//! - [`reply`]: the one writer of the replies waitgate makes itself.
//! - [`cli`] and [`logging`]: the command line and log set-up.

// The proxy's request futures nest the store's (three Redis topologies
// behind one call) deeper than the default limit of 128 lets rustc lay out.
#![recursion_limit = "256"]

pub mod admin;
pub mod background;
pub mod browser;
pub mod cli;
pub mod config;
pub mod control;
pub mod durability;
pub mod edge;
pub mod entry;
pub mod error;
pub mod fairness;
pub mod limits;
pub mod logging;
pub mod metrics;
pub mod path;
pub mod proxy;
pub mod queue_api;
pub mod queues;
pub mod reload;
pub mod reply;
pub mod revocation;
pub mod server;
pub mod shutdown;
pub mod store;
pub mod time;
pub mod user;
pub mod wire;
