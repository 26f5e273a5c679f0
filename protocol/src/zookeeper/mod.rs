//! ZooKeeper's client protocol, as far as both sides of it need: jute, its
//! serialization ([`jute`]), and its numbers ([`codes`]). The server's
//! ZooKeeper port (`arbor_server::zk`) and `arbor-bench`'s ZooKeeper load
//! client both build on these, so the two cannot drift apart.

pub mod codes;
pub mod jute;
