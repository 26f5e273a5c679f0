//! A lean ZooKeeper client for the load workloads: one task per session
//! owns its socket, pipelines requests (what callers queue while it reads
//! leaves in one write) and matches replies to requests in order.
//!
//! Why not `zookeeper-client` here: on a 2-core machine the load generator
//! shares the CPU with the server it measures, so what the client costs per
//! request is taken from the server. `zookeeper-client` spends about twice
//! what arbor-client spends per request (a reactor thread of its own, a
//! wake-up and a write per request), so a ZooKeeper server — Apache's, or
//! Arbor's ZooKeeper port — was measured with less CPU left over than
//! Arbor's native port. This client costs about what arbor-client costs, so
//! all three are measured alike. Watches and the lock recipe stay on
//! `zookeeper-client` (`zookeeper.rs`); `--zk-client crate` runs the load
//! workloads on it too, as a second load generator to check this one.
//!
//! It sets no watches, so the only frames it does not ask for are ping
//! replies (and notifications, which it would ignore).

use std::collections::VecDeque;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use arbor_protocol::zookeeper::codes::{create_flags, err, op, xid};
use arbor_protocol::zookeeper::jute::{Reader, Write};
use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

use super::{ConnectOptions, NodeMode};

/// Requests a session queues for its writer before callers wait (the load
/// loop bounds what is in flight far below this).
const QUEUE_MAX: usize = 4096;

/// Bytes of requests gathered into one write.
const WRITE_BATCH_MAX: usize = 256 * 1024;

/// The largest reply frame accepted: ZooKeeper's own default `jute.maxbuffer`
/// (1 MiB) with room for the header and stat.
const FRAME_MAX: usize = 1024 * 1024 + 1024;

/// The read buffer's starting size (it grows to a frame when one is larger).
const READ_BUFFER_BYTES: usize = 64 * 1024;

/// Bytes of a reply header: xid, zxid, err.
const REPLY_HEADER_BYTES: usize = 16;

/// ZooKeeper's password length, sent as zeros for a new session.
const PASSWORD_BYTES: usize = 16;

/// ZooKeeper's `Perms.ALL`, the open ACL's permissions.
const PERMS_ALL: i32 = 31;

/// A session's pings per session timeout (ZooKeeper's clients send one
/// when a third of it passes idle).
const PINGS_PER_TIMEOUT: u32 = 3;

/// One reply: ZooKeeper's error code and the record after the header.
struct Reply {
    code: i32,
    body: Bytes,
}

type Waiter = oneshot::Sender<Result<Reply, String>>;

/// A request for the connection task: the op code and its record; the task
/// numbers it.
struct Request {
    op: i32,
    body: Vec<u8>,
    reply: Waiter,
}

/// One ZooKeeper session over the lean client.
#[derive(Clone)]
pub struct JuteSession {
    requests: mpsc::Sender<Request>,
    timeout: Duration,
}

pub async fn connect(addr: &str, options: &ConnectOptions) -> Result<JuteSession> {
    let handshake = async {
        let mut stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let timeout_ms = i32::try_from(options.session_timeout.as_millis()).unwrap_or(i32::MAX);
        let mut body = Vec::new();
        body.put_int(0); // protocol version
        body.put_long(0); // last zxid seen
        body.put_int(timeout_ms);
        body.put_long(0); // no session yet
        body.put_bytes(&[0; PASSWORD_BYTES]);
        body.put_bool(false); // not read-only
        let mut frame = Vec::with_capacity(4 + body.len());
        frame.put_bytes(&body);
        stream.write_all(&frame).await?;
        let mut length = [0u8; 4];
        stream.read_exact(&mut length).await?;
        let length = frame_length(length).map_err(std::io::Error::other)?;
        let mut response = vec![0u8; length];
        stream.read_exact(&mut response).await?;
        Ok::<_, std::io::Error>((stream, response))
    };
    let (stream, response) = tokio::time::timeout(options.connect_timeout, handshake)
        .await
        .map_err(|_| {
            anyhow!(
                "connecting to zookeeper at {addr}: no session within {:?}",
                options.connect_timeout
            )
        })?
        .with_context(|| format!("connecting to zookeeper at {addr}"))?;
    let mut reader = Reader::new(&response);
    let _version = reader.int("protocol version")?;
    let timeout_ms = reader.int("session timeout")?;
    let session_id = reader.long("session id")?;
    if timeout_ms <= 0 || session_id == 0 {
        return Err(anyhow!("zookeeper at {addr} refused the session"));
    }
    let timeout = Duration::from_millis(u64::try_from(timeout_ms).unwrap_or(0));
    let (requests, queue) = mpsc::channel(QUEUE_MAX);
    tokio::spawn(async move {
        let mut connection = Connection::default();
        let why = connection.run(stream, queue, timeout).await;
        for (_, waiter) in connection.waiting.drain(..) {
            let _ = waiter.send(Err(why.clone()));
        }
    });
    Ok(JuteSession { requests, timeout })
}

fn frame_length(prefix: [u8; 4]) -> Result<usize, String> {
    let length = u32::from_be_bytes(prefix) as usize;
    if length > FRAME_MAX {
        return Err(format!("reply frame of {length} bytes is past {FRAME_MAX}"));
    }
    Ok(length)
}

/// The state of the one task that owns a session's socket.
#[derive(Default)]
struct Connection {
    /// Encoded requests; `out[sent..]` is not written yet.
    out: Vec<u8>,
    sent: usize,
    /// Requests sent and not yet answered, in order (replies come in order).
    waiting: VecDeque<(i32, Waiter)>,
    last_xid: i32,
    /// A request was just taken: yield once, then gather what else is queued.
    gather: bool,
}

impl Connection {
    /// Reads replies, writes requests and pings, until the connection ends;
    /// returns why. One task does all of it (as arbor-client's does), so the
    /// replies of one read wake their callers, whose next requests leave
    /// together in the next write.
    async fn run(
        &mut self,
        mut stream: TcpStream,
        mut queue: mpsc::Receiver<Request>,
        timeout: Duration,
    ) -> String {
        let (mut reader, mut writer) = stream.split();
        let mut buffer = BytesMut::with_capacity(READ_BUFFER_BYTES);
        let mut ping = tokio::time::interval(timeout / PINGS_PER_TIMEOUT);
        ping.tick().await;
        loop {
            if std::mem::take(&mut self.gather) {
                // Callers woken by the replies just read are runnable now;
                // one yield lets them queue their next requests.
                tokio::task::yield_now().await;
                while self.out.len() < WRITE_BATCH_MAX {
                    match queue.try_recv() {
                        Ok(request) => self.encode(request),
                        Err(_) => break,
                    }
                }
            }
            if buffer.capacity() - buffer.len() < READ_BUFFER_BYTES / 4 {
                // Reclaims the space of frames already handed out.
                buffer.reserve(READ_BUFFER_BYTES);
            }
            let unsent = self.out.len() - self.sent;
            tokio::select! {
                read = reader.read_buf(&mut buffer) => match read {
                    Ok(0) => return "the server closed the connection".to_owned(),
                    Ok(_) => loop {
                        match next_frame(&mut buffer) {
                            Ok(Some(frame)) => {
                                if let Err(why) = self.deliver(frame) {
                                    return why;
                                }
                            }
                            Ok(None) => break,
                            Err(why) => return why,
                        }
                    },
                    Err(error) => return format!("read: {error}"),
                },
                written = writer.write(&self.out[self.sent..]), if unsent > 0 => match written {
                    Ok(count) => {
                        self.sent += count;
                        if self.sent == self.out.len() {
                            self.out.clear();
                            self.sent = 0;
                        }
                    }
                    Err(error) => return format!("write: {error}"),
                },
                request = queue.recv(), if self.out.len() < WRITE_BATCH_MAX => match request {
                    Some(request) => {
                        self.encode(request);
                        self.gather = true;
                    }
                    // Every handle is gone: the session is left to expire.
                    None => return "the session was dropped".to_owned(),
                },
                _ = ping.tick() => {
                    self.out.put_int(8);
                    self.out.put_int(xid::PING);
                    self.out.put_int(op::PING);
                }
            }
        }
    }

    fn encode(&mut self, request: Request) {
        self.last_xid = if self.last_xid == i32::MAX {
            1
        } else {
            self.last_xid + 1
        };
        self.out
            .put_int(i32::try_from(8 + request.body.len()).unwrap_or(i32::MAX));
        self.out.put_int(self.last_xid);
        self.out.put_int(request.op);
        self.out.extend_from_slice(&request.body);
        self.waiting.push_back((self.last_xid, request.reply));
    }

    /// Hands a reply to the request it answers.
    fn deliver(&mut self, frame: Bytes) -> Result<(), String> {
        let mut header = Reader::new(&frame);
        let reply_xid = header.int("xid").map_err(|e| e.to_string())?;
        let _zxid = header.long("zxid").map_err(|e| e.to_string())?;
        let code = header.int("err").map_err(|e| e.to_string())?;
        if reply_xid == xid::PING || reply_xid == xid::NOTIFICATION {
            return Ok(());
        }
        let Some((expected, waiter)) = self.waiting.pop_front() else {
            return Err(format!("a reply with xid {reply_xid} to no request"));
        };
        if expected != reply_xid {
            let why = format!("reply xid {reply_xid}, expected {expected}");
            let _ = waiter.send(Err(why.clone()));
            return Err(why);
        }
        let _ = waiter.send(Ok(Reply {
            code,
            body: frame.slice(REPLY_HEADER_BYTES..),
        }));
        Ok(())
    }
}

/// The next whole frame in `buffer`, if one is there.
fn next_frame(buffer: &mut BytesMut) -> Result<Option<Bytes>, String> {
    let Some(prefix) = buffer.get(..4) else {
        return Ok(None);
    };
    let length = frame_length([prefix[0], prefix[1], prefix[2], prefix[3]])?;
    if buffer.len() < 4 + length {
        buffer.reserve(4 + length - buffer.len());
        return Ok(None);
    }
    buffer.advance(4);
    Ok(Some(buffer.split_to(length).freeze()))
}

/// The record of a path-and-flag request (getData, exists, getChildren).
fn path_watch(path: &str) -> Vec<u8> {
    let mut body = Vec::with_capacity(path.len() + 5);
    body.put_string(path);
    body.put_bool(false);
    body
}

fn put_create(body: &mut Vec<u8>, path: &str, data: &[u8], flags: i32) {
    body.put_string(path);
    body.put_bytes(data);
    body.put_count(1);
    body.put_int(PERMS_ALL);
    body.put_string("world");
    body.put_string("anyone");
    body.put_int(flags);
}

fn put_delete(body: &mut Vec<u8>, path: &str) {
    body.put_string(path);
    body.put_int(-1); // any version
}

impl JuteSession {
    /// Sends one request and waits for its reply.
    async fn call(&self, op: i32, body: Vec<u8>) -> Result<Reply> {
        let (reply, answer) = oneshot::channel();
        self.requests
            .send(Request { op, body, reply })
            .await
            .map_err(|_| anyhow!("zookeeper session: the connection task ended"))?;
        answer
            .await
            .map_err(|_| anyhow!("zookeeper session: the connection task ended"))?
            .map_err(|why| anyhow!("zookeeper session: {why}"))
    }

    /// Sends one request; its reply's record, or the error code as an error.
    async fn expect_ok(&self, op: i32, body: Vec<u8>, path: &str) -> Result<Bytes> {
        let reply = self.call(op, body).await?;
        match reply.code {
            err::OK => Ok(reply.body),
            code => Err(anyhow!("zookeeper: error {code} on op {op} for {path}")),
        }
    }

    pub fn session_timeout(&self) -> Duration {
        self.timeout
    }

    pub async fn create(&self, path: &str, data: &[u8], mode: NodeMode) -> Result<String> {
        let flags = match mode {
            NodeMode::Persistent => create_flags::PERSISTENT,
            NodeMode::Ephemeral => create_flags::EPHEMERAL,
        };
        let mut body = Vec::with_capacity(path.len() + data.len() + 40);
        put_create(&mut body, path, data, flags);
        let record = self.expect_ok(op::CREATE, body, path).await?;
        Ok(Reader::new(&record).string("created path")?)
    }

    pub async fn ensure(&self, path: &str, data: &[u8]) -> Result<()> {
        let mut body = Vec::new();
        put_create(&mut body, path, data, create_flags::PERSISTENT);
        match self.call(op::CREATE, body).await?.code {
            err::OK | err::NODE_EXISTS => Ok(()),
            code => Err(anyhow!("zookeeper: error {code} creating {path}")),
        }
    }

    /// All creates (or deletes) in one multi; an error if any op failed.
    async fn multi(&self, op_code: i32, paths: &[String], data: &[u8]) -> Result<()> {
        let mut body = Vec::new();
        for path in paths {
            body.put_int(op_code);
            body.put_bool(false);
            body.put_int(-1);
            match op_code {
                op::CREATE => put_create(&mut body, path, data, create_flags::PERSISTENT),
                _ => put_delete(&mut body, path),
            }
        }
        body.put_int(op::ERROR);
        body.put_bool(true);
        body.put_int(-1);
        let first = paths.first().map_or("", String::as_str);
        let record = self.expect_ok(op::MULTI, body, first).await?;
        // A failed multi answers every op with an error result; a header
        // of type `ERROR` first is enough to tell.
        let mut results = Reader::new(&record);
        let kind = results.int("multi result type")?;
        let _done = results.bool("multi result done")?;
        let _code = results.int("multi result err")?;
        if kind == op::ERROR {
            let code = results.int("error result")?;
            return Err(anyhow!(
                "zookeeper: multi from {first} failed with error {code}"
            ));
        }
        Ok(())
    }

    pub async fn create_batch(&self, paths: &[String], data: &[u8]) -> Result<()> {
        self.multi(op::CREATE, paths, data).await
    }

    pub async fn delete_batch(&self, paths: &[String]) -> Result<()> {
        self.multi(op::DELETE, paths, &[]).await
    }

    /// Reads a node; returns the data length.
    pub async fn get(&self, path: &str) -> Result<usize> {
        let record = self.expect_ok(op::GET_DATA, path_watch(path), path).await?;
        Ok(Reader::new(&record).buffer("data")?.map_or(0, <[u8]>::len))
    }

    pub async fn get_if_exists(&self, path: &str) -> Result<Option<Vec<u8>>> {
        let reply = self.call(op::GET_DATA, path_watch(path)).await?;
        match reply.code {
            err::OK => Ok(Some(
                Reader::new(&reply.body)
                    .buffer("data")?
                    .unwrap_or_default()
                    .to_vec(),
            )),
            err::NO_NODE => Ok(None),
            code => Err(anyhow!("zookeeper: error {code} reading {path}")),
        }
    }

    pub async fn exists(&self, path: &str) -> Result<bool> {
        match self.call(op::EXISTS, path_watch(path)).await?.code {
            err::OK => Ok(true),
            err::NO_NODE => Ok(false),
            code => Err(anyhow!("zookeeper: error {code} on exists {path}")),
        }
    }

    pub async fn set(&self, path: &str, data: &[u8]) -> Result<()> {
        let mut body = Vec::with_capacity(path.len() + data.len() + 12);
        body.put_string(path);
        body.put_bytes(data);
        body.put_int(-1); // any version
        self.expect_ok(op::SET_DATA, body, path).await?;
        Ok(())
    }

    pub async fn delete(&self, path: &str) -> Result<()> {
        let mut body = Vec::with_capacity(path.len() + 8);
        put_delete(&mut body, path);
        self.expect_ok(op::DELETE, body, path).await?;
        Ok(())
    }

    pub async fn delete_if_exists(&self, path: &str) -> Result<()> {
        let mut body = Vec::with_capacity(path.len() + 8);
        put_delete(&mut body, path);
        match self.call(op::DELETE, body).await?.code {
            err::OK | err::NO_NODE => Ok(()),
            code => Err(anyhow!("zookeeper: error {code} deleting {path}")),
        }
    }

    pub async fn children(&self, path: &str) -> Result<Vec<String>> {
        let record = self
            .expect_ok(op::GET_CHILDREN, path_watch(path), path)
            .await?;
        Ok(Reader::new(&record).strings("children")?)
    }

    /// Waits until the server this session talks to has applied every
    /// write the leader had committed when it got the request.
    pub async fn sync(&self, path: &str) -> Result<()> {
        let mut body = Vec::with_capacity(path.len() + 4);
        body.put_string(path);
        self.expect_ok(op::SYNC, body, path).await?;
        Ok(())
    }

    /// Closes the session (its ephemerals go at once).
    pub async fn close(&self) -> Result<()> {
        self.expect_ok(op::CLOSE_SESSION, Vec::new(), "").await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply_frame(xid: i32, code: i32, record: &[u8]) -> Vec<u8> {
        let mut frame = Vec::new();
        frame.put_int(i32::try_from(REPLY_HEADER_BYTES + record.len()).unwrap_or(i32::MAX));
        frame.put_int(xid);
        frame.put_long(7);
        frame.put_int(code);
        frame.extend_from_slice(record);
        frame
    }

    #[test]
    fn frames_are_cut_whole_and_forged_lengths_refused() {
        let whole = reply_frame(1, err::OK, b"abc");
        let mut buffer = BytesMut::from(&whole[..whole.len() - 1]);
        assert_eq!(next_frame(&mut buffer), Ok(None));
        buffer.extend_from_slice(&whole[whole.len() - 1..]);
        let frame = next_frame(&mut buffer).ok().flatten();
        assert_eq!(frame.as_deref(), Some(&whole[4..]));
        assert!(buffer.is_empty());
        let mut forged = BytesMut::from(&(FRAME_MAX as u32 + 1).to_be_bytes()[..]);
        assert!(next_frame(&mut forged).is_err());
    }

    #[test]
    fn replies_go_to_their_requests_in_order_and_pings_are_skipped() {
        let mut connection = Connection::default();
        let (first, mut first_answer) = oneshot::channel();
        let (second, mut second_answer) = oneshot::channel();
        for reply in [first, second] {
            connection.encode(Request {
                op: op::GET_DATA,
                body: path_watch("/a"),
                reply,
            });
        }
        let ping = Bytes::from(reply_frame(xid::PING, err::OK, &[])[4..].to_vec());
        assert_eq!(connection.deliver(ping), Ok(()));
        let answer = Bytes::from(reply_frame(1, err::NO_NODE, b"r")[4..].to_vec());
        assert_eq!(connection.deliver(answer), Ok(()));
        match first_answer.try_recv() {
            Ok(Ok(reply)) => {
                assert_eq!(reply.code, err::NO_NODE);
                assert_eq!(&reply.body[..], b"r");
            }
            _ => panic!("the first request got no reply"),
        }
        // A reply out of order ends the connection and fails its request.
        let wrong = Bytes::from(reply_frame(5, err::OK, &[])[4..].to_vec());
        assert!(connection.deliver(wrong).is_err());
        assert!(matches!(second_answer.try_recv(), Ok(Err(_))));
    }
}
