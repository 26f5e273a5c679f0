//! The byte stream under a connection: plain TCP, or TLS over TCP. An enum
//! rather than a boxed stream, so the plain path keeps tokio's lock-free
//! split halves and costs one branch per poll.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use crate::tls::TlsOptions;

type Tls = TlsStream<TcpStream>;

pub(crate) enum ReadHalf {
    Plain(OwnedReadHalf),
    Tls(tokio::io::ReadHalf<Tls>),
}

pub(crate) enum WriteHalf {
    Plain(OwnedWriteHalf),
    Tls {
        half: tokio::io::WriteHalf<Tls>,
        /// Written bytes may still sit in rustls's buffer as records the
        /// socket had no room for: a TLS write can return before they are
        /// sent, and only a flush (or the next write) sends them.
        unflushed: bool,
    },
}

/// Connects to `addr`, with a TLS handshake if `tls` is set.
pub(crate) async fn connect(
    addr: &str,
    tls: Option<&TlsOptions>,
) -> io::Result<(ReadHalf, WriteHalf)> {
    let stream = TcpStream::connect(addr).await?;
    // Requests are small and latency-bound; batching is done by us, not Nagle.
    stream.set_nodelay(true)?;
    let Some(tls) = tls else {
        let (read, write) = stream.into_split();
        return Ok((ReadHalf::Plain(read), WriteHalf::Plain(write)));
    };
    let name = tls
        .server_name_for(addr)
        .map_err(|err| io::Error::new(io::ErrorKind::InvalidInput, err))?;
    let stream = tls.connector().connect(name, stream).await?;
    let (read, write) = tokio::io::split(stream);
    Ok((
        ReadHalf::Tls(read),
        WriteHalf::Tls {
            half: write,
            unflushed: false,
        },
    ))
}

impl WriteHalf {
    /// Whether a flush is owed before the connection may go idle.
    pub(crate) fn needs_flush(&self) -> bool {
        matches!(
            self,
            WriteHalf::Tls {
                unflushed: true,
                ..
            }
        )
    }
}

impl AsyncRead for ReadHalf {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ReadHalf::Plain(half) => Pin::new(half).poll_read(cx, buf),
            ReadHalf::Tls(half) => Pin::new(half).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for WriteHalf {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            WriteHalf::Plain(half) => Pin::new(half).poll_write(cx, buf),
            WriteHalf::Tls { half, unflushed } => {
                let written = Pin::new(half).poll_write(cx, buf);
                if matches!(written, Poll::Ready(Ok(_))) {
                    *unflushed = true;
                }
                written
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            WriteHalf::Plain(half) => Pin::new(half).poll_flush(cx),
            WriteHalf::Tls { half, unflushed } => {
                let flushed = Pin::new(half).poll_flush(cx);
                if matches!(flushed, Poll::Ready(Ok(()))) {
                    *unflushed = false;
                }
                flushed
            }
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            WriteHalf::Plain(half) => Pin::new(half).poll_shutdown(cx),
            WriteHalf::Tls { half, .. } => Pin::new(half).poll_shutdown(cx),
        }
    }
}
