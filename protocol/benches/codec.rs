//! The wire's hot paths without a server: framing and (de)coding of the
//! messages every request and reply carries. `cargo bench -p arbor-protocol`.

use arbor_protocol::codec;
use arbor_protocol::frame::{encode_frame, FrameDecoder, DEFAULT_FRAME_BYTES_MAX};
use arbor_protocol::{ClientMessage, CreateMode, Op, OpResult, ServerMessage, Stat};
use bytes::BytesMut;
use divan::{black_box, Bencher};
use tokio_util::codec::Decoder;

fn main() {
    divan::main();
}

fn create_request(size: usize) -> ClientMessage {
    ClientMessage::Request {
        xid: 12_345,
        op: Op::Create {
            path: "/bench/create/node-0000012345".to_owned(),
            data: vec![7; size],
            mode: CreateMode::Persistent,
        },
    }
}

fn data_reply(size: usize) -> ServerMessage {
    ServerMessage::Reply {
        xid: 12_345,
        zxid: 0x1_0000_2345,
        result: Ok(OpResult::Data {
            data: vec![7; size],
            stat: Stat::default(),
        }),
    }
}

fn children_reply(count: usize) -> ServerMessage {
    ServerMessage::Reply {
        xid: 1,
        zxid: 2,
        result: Ok(OpResult::Children {
            names: (0..count)
                .map(|i| format!("lock-{i:010}"))
                .collect::<Vec<_>>()
                .into(),
            stat: Stat::default(),
        }),
    }
}

/// A create request of `size` data bytes, framed into a reused buffer.
#[divan::bench(args = [100, 4096])]
fn encode_create_request(bencher: Bencher, size: usize) {
    let message = create_request(size);
    let mut out = Vec::with_capacity(8192);
    bencher.bench_local(|| {
        out.clear();
        encode_frame(black_box(&message), DEFAULT_FRAME_BYTES_MAX, &mut out)
    });
}

/// A framed create request split off a read buffer and decoded, as the
/// server's connection reader does.
#[divan::bench(args = [100, 4096])]
fn decode_create_request(bencher: Bencher, size: usize) {
    let mut wire = Vec::new();
    encode_frame(&create_request(size), DEFAULT_FRAME_BYTES_MAX, &mut wire).expect("encodes");
    let mut decoder = FrameDecoder::new(DEFAULT_FRAME_BYTES_MAX);
    bencher
        .with_inputs(|| BytesMut::from(&wire[..]))
        .bench_local_refs(|buffer| {
            let payload = decoder.decode(buffer).expect("valid").expect("whole frame");
            codec::decode::<ClientMessage>(&payload).expect("valid")
        });
}

/// A get-data reply, as the server writes it.
#[divan::bench(args = [100, 4096])]
fn encode_data_reply(bencher: Bencher, size: usize) {
    let message = data_reply(size);
    let mut out = Vec::with_capacity(8192);
    bencher.bench_local(|| {
        out.clear();
        encode_frame(black_box(&message), DEFAULT_FRAME_BYTES_MAX, &mut out)
    });
}

/// A get-data reply, as the client reads it.
#[divan::bench(args = [100, 4096])]
fn decode_data_reply(bencher: Bencher, size: usize) {
    let payload = codec::encode(&data_reply(size)).expect("encodes");
    bencher.bench_local(|| codec::decode::<ServerMessage>(black_box(&payload)).expect("valid"));
}

/// A lock queue's listing: what every waiter of a herd would read.
#[divan::bench(args = [10, 1000])]
fn decode_children_reply(bencher: Bencher, count: usize) {
    let payload = codec::encode(&children_reply(count)).expect("encodes");
    bencher.bench_local(|| codec::decode::<ServerMessage>(black_box(&payload)).expect("valid"));
}
