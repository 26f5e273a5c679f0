//! The network edge: accepting connections, framing, the handshake, and the
//! per-connection request loop.

mod connection;
mod listener;
mod registry;

pub use connection::serve;
pub use listener::Listener;
pub use registry::{ConnectionHandle, ConnectionRegistry, Outbound};
