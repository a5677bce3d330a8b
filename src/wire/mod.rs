//! What comes over the wire, read one way for everyone: the one
//! `Content-Length` grammar, request bodies and the `Bearer` scheme. Generic: it imports
//! nothing of waitgate's but its error type, so that every part (the
//! proxy's rules, the queue API, the admin API) can use it.

pub mod authorization;
pub mod body;
pub mod length;
