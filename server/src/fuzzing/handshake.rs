//! The handshake target: a connection's first bytes, served by the server's
//! own [`net::serve`](crate::net::serve) over an in-memory stream, on a
//! fresh server state each time (so no input depends on the ones before).
//!
//! The input is what a client sends before it hangs up: the handshake and,
//! when that succeeds, requests. Whatever it is, the server must end the
//! connection and everything it says must be whole frames of
//! `ServerMessage`s: `Connected` first if anything but `Closing`, `Closing`
//! last if at all, and replies in request order (their xids a prefix of the
//! requests' xids).

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use arbor_protocol::frame::FrameDecoder;
use arbor_protocol::{codec, ClientMessage, ServerMessage};
use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::runtime::Runtime;
use tokio::sync::mpsc;
use tokio_util::codec::Decoder;
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::config::Config;
use crate::context::Shared;
use crate::pipeline::apply::StateMachine;
use crate::pipeline::commit::{run_committer, Committer, MemoryLog};

/// The in-memory stream's buffer each way, as a socket's would be.
const STREAM_BUFFER_BYTES: usize = 64 * 1024;

/// Wall time of the manual clock: prep stamps txns with it.
const CLOCK_WALL_MS: u64 = 1_700_000_000_000;

thread_local! {
    /// One runtime for every input on this thread: making one is most of
    /// the cost of serving a short connection.
    static RUNTIME: Runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime builds");
}

pub fn handshake(data: &[u8]) {
    let config = Config::default();
    let frame_bytes_max = config.frame_bytes_max;
    let said = RUNTIME.with(|runtime| runtime.block_on(serve_one(config, data)));
    check_answers(data, &said, frame_bytes_max);
}

/// Serves one connection that sends `data` and hangs up; returns all the
/// server said on it.
async fn serve_one(config: Config, data: &[u8]) -> Vec<u8> {
    let (queue, proposals) = mpsc::channel(config.commit_queue_max);
    let committer = Committer::new(MemoryLog::default(), 0, None, queue);
    let (clock, _driver) = Clock::manual(CLOCK_WALL_MS);
    let shared = Arc::new(Shared::new(config, clock, StateMachine::new(), committer));
    let stop = CancellationToken::new();
    let committing = tokio::spawn(run_committer(proposals, shared.clone(), stop.clone()));

    let (mut client, server) = tokio::io::duplex(STREAM_BUFFER_BYTES);
    let peer = SocketAddr::from((Ipv4Addr::LOCALHOST, 40_000));
    let serving = tokio::spawn(crate::net::serve(
        server,
        peer,
        None,
        crate::net::Wire::Native,
        shared,
    ));
    let (mut from_server, mut to_server) = tokio::io::split(&mut client);
    let mut said = Vec::new();
    let send = async {
        // The server may close first (a refused handshake): not an error.
        let _ = to_server.write_all(data).await;
        let _ = to_server.shutdown().await;
    };
    let (_, read) = tokio::join!(send, from_server.read_to_end(&mut said));
    read.expect("an in-memory stream does not fail");
    serving.await.expect("serving a connection does not panic");
    stop.cancel();
    committing.await.expect("the committer does not panic");
    said
}

/// The properties of what the server said (see the module docs).
fn check_answers(sent: &[u8], said: &[u8], frame_bytes_max: usize) {
    let messages = decode_all::<ServerMessage>(said, frame_bytes_max);
    assert!(messages.whole, "the server sent a partial or broken frame");
    let answers = messages.values;
    for (index, message) in answers.iter().enumerate() {
        match message {
            ServerMessage::Connected(_) => assert_eq!(index, 0, "Connected after other messages"),
            ServerMessage::Closing { .. } => {
                assert_eq!(index + 1, answers.len(), "messages after Closing")
            }
            _ => assert!(
                matches!(answers[0], ServerMessage::Connected(_)),
                "a reply or event before Connected"
            ),
        }
    }
    let requested: Vec<u64> = decode_all::<ClientMessage>(sent, frame_bytes_max)
        .values
        .iter()
        .skip(1)
        .map_while(|message| match message {
            ClientMessage::Request { xid, .. } => Some(*xid),
            ClientMessage::Connect(_) => None,
        })
        .collect();
    let replied: Vec<u64> = answers
        .iter()
        .filter_map(|message| match message {
            ServerMessage::Reply { xid, .. } => Some(*xid),
            _ => None,
        })
        .collect();
    assert!(
        requested.starts_with(&replied),
        "replies {replied:?} are not the requests {requested:?} in order"
    );
}

/// The messages of a stream, as far as they are whole frames that decode.
struct Decoded<T> {
    values: Vec<T>,
    /// Whether the whole stream was such frames.
    whole: bool,
}

fn decode_all<T: bincode::Decode<()>>(stream: &[u8], frame_bytes_max: usize) -> Decoded<T> {
    let mut decoder = FrameDecoder::new(frame_bytes_max);
    let mut buffer = BytesMut::from(stream);
    let mut values = Vec::new();
    while let Ok(Some(frame)) = decoder.decode(&mut buffer) {
        match codec::decode::<T>(&frame) {
            Ok(value) => values.push(value),
            Err(_) => {
                return Decoded {
                    values,
                    whole: false,
                }
            }
        }
    }
    let whole = buffer.is_empty();
    Decoded { values, whole }
}
