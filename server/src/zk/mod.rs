//! ZooKeeper's client protocol on a port of its own (`--zk-listen`), so
//! existing ZooKeeper clients and tools work against Arbor unchanged.
//!
//! It is a second wire format, not a second server: a ZooKeeper
//! connection is served by the same connection tasks as a native one
//! ([`crate::net::serve`]), its requests become the same [`Op`]s and run
//! through the same prep, commit, apply and read path, and its sessions are
//! the same sessions, watches and ephemerals. Only the bytes differ:
//!
//! * [`jute`]: ZooKeeper's serialization (in the protocol crate);
//! * [`handshake`]: `ConnectRequest` as the native handshake;
//! * [`request`]: request frames as native ops (the op code rides in the
//!   native xid, so each reply is written in the shape its op expects);
//! * [`reply`]: native replies, events and refusals as jute frames;
//! * [`codes`]: op codes, error codes, event types, and the mapping of
//!   Arbor's error codes onto ZooKeeper's (in the protocol crate);
//! * [`four_letter`]: `ruok`, `srvr`, `mntr` and the other words a fresh
//!   connection may send instead of a handshake, as far as `--4lw` lets it
//!   (`cons`, `wchc`, `wchp`, `wchs` and `dump` list sessions, and are off
//!   by default).
//!
//! [`Op`]: arbor_protocol::Op

pub mod four_letter;
pub mod handshake;
pub mod reply;
pub mod request;

// Shared with `arbor-bench`'s ZooKeeper load client.
pub use arbor_protocol::zookeeper::{codes, jute};
