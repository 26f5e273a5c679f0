//! The listener behind a small trait, so a simulated network (turmoil) can
//! drive the same server code as real TCP.

use std::future::Future;
use std::io;
use std::net::SocketAddr;

use tokio::io::{AsyncRead, AsyncWrite};

/// Something that accepts byte-stream connections.
pub trait Listener: Send + 'static {
    type Stream: AsyncRead + AsyncWrite + Send + Unpin + 'static;

    fn accept(&mut self) -> impl Future<Output = io::Result<(Self::Stream, SocketAddr)>> + Send;

    fn local_addr(&self) -> io::Result<SocketAddr>;
}

impl Listener for tokio::net::TcpListener {
    type Stream = tokio::net::TcpStream;

    async fn accept(&mut self) -> io::Result<(Self::Stream, SocketAddr)> {
        let (stream, peer) = tokio::net::TcpListener::accept(self).await?;
        // Replies are small and latency matters more than packet count.
        stream.set_nodelay(true)?;
        super::idle_spin::watch(&stream);
        Ok((stream, peer))
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        tokio::net::TcpListener::local_addr(self)
    }
}
