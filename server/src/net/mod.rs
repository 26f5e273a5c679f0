//! The network edge: accepting connections, framing, the handshake, and the
//! per-connection request loop.

mod connection;
pub mod idle_spin;
mod listener;
pub mod log_throttle;
pub mod open_files;
pub mod outbound;
mod registry;
pub mod tls;

pub use connection::{serve, Wire};
pub use listener::Listener;
pub use outbound::{Outbound, OutboundSender, OutboundTotal};
pub use registry::{ConnectionHandle, ConnectionRegistry};
pub use tls::{TlsAcceptor, TlsError, TlsFiles};
