//! What a register must show to buy a place, where its queue asks it: a
//! solved proof-of-work challenge (`challenge`), and an invitation the
//! site signed (`invite`). Both are checked without Redis; what passes is
//! a [`challenge::Spent`] that `lua/register.lua` records once it bought a
//! place, so that it buys one only. The queue API calls these checks
//! (`queue_api::proof`); nothing here knows of requests or of Redis.

pub mod challenge;
pub mod invite;
