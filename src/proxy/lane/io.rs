//! What the lane's parts share: the outcome of a request, and the writer of
//! waitgate's own replies.

use pingora::protocols::Stream;
use tokio::io::AsyncWriteExt;

use crate::reply::Reply;

/// Room made for each read of an upstream response.
pub const READ_SIZE: usize = 4096;

/// What became of the connection's next request.
#[derive(Debug, PartialEq, Eq)]
pub enum Lane {
    /// Not for the lane: everything read is still in the buffer, for the
    /// proxy to read again.
    Pass,
    /// Answered; the connection carries on to its next request. A reply
    /// that ends the connection is [`Lane::Closed`].
    Served,
    /// The client went away, sent no whole head in time, or the reply could
    /// not be completed: close the connection.
    Closed,
}

/// Writes one reply of waitgate's own and flushes it; false if the client
/// is gone. `head_request`: the reply answers a HEAD (no body is sent);
/// `ends`: the connection ends after it, as the client asked (a reply that
/// closes by itself says so anyway: [`Reply::to_http1`]).
pub async fn send(client: &mut Stream, reply: &Reply, head_request: bool, ends: bool) -> bool {
    client
        .write_all(&reply.to_http1(head_request, ends))
        .await
        .is_ok()
        && client.flush().await.is_ok()
}
