//! A stream whose first bytes were already read (a ZooKeeper connection's
//! first four, looked at for a four-letter word; a native one's first
//! eight, looked at for a peer that speaks something else) and are given
//! back ahead of the rest. Putting them into the frame reader's buffer instead would
//! not do: it decodes only after its next read returns, so a complete
//! frame header in those bytes (an oversized length to refuse) would wait
//! for bytes the client may never send.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The most bytes given back: what [`super::sniff`] looks at.
const PREFIX_BYTES_MAX: usize = super::sniff::SNIFF_BYTES;

pub(super) struct Prefixed<S> {
    prefix: [u8; PREFIX_BYTES_MAX],
    /// `prefix[start..end]` is still to be read.
    start: usize,
    end: usize,
    inner: S,
}

impl<S> Prefixed<S> {
    /// `inner`, read after `prefix` (at most [`PREFIX_BYTES_MAX`] bytes;
    /// more would be a bug, and is cut).
    pub(super) fn new(prefix: &[u8], inner: S) -> Self {
        let end = prefix.len().min(PREFIX_BYTES_MAX);
        let mut bytes = [0; PREFIX_BYTES_MAX];
        bytes[..end].copy_from_slice(&prefix[..end]);
        Prefixed {
            prefix: bytes,
            start: 0,
            end,
            inner,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.start < this.end {
            let count = (this.end - this.start).min(buf.remaining());
            buf.put_slice(&this.prefix[this.start..this.start + count]);
            this.start += count;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn the_prefix_comes_first_then_the_stream() {
        let (mut client, server) = tokio::io::duplex(64);
        tokio::io::AsyncWriteExt::write_all(&mut client, b" world")
            .await
            .expect("write");
        drop(client);
        let mut stream = Prefixed::new(b"helo", server);
        let mut one = [0u8; 1];
        stream.read_exact(&mut one).await.expect("read");
        assert_eq!(&one, b"h");
        let mut rest = Vec::new();
        stream.read_to_end(&mut rest).await.expect("read");
        assert_eq!(rest, b"elo world");
    }
}
