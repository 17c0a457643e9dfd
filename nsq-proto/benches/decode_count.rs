//! A fixed amount of decoding work, for counting instructions with callgrind (repeatable on a
//! busy machine, unlike wall-clock time): 100,000 message frames with 100-byte bodies are
//! decoded from one buffer inside `decode_all`, once. See BENCHMARKS.md for the command.

use bytes::BytesMut;
use nsq_proto::{Frame, FrameDecoder, Message, MessageId, encode_message_frame};
use std::hint::black_box;

const FRAMES: usize = 100_000;
const BODY_LEN: usize = 100;

/// Decodes every frame in `buf`. Not inlined, so callgrind can count exactly this function.
#[inline(never)]
fn decode_all(decoder: FrameDecoder, buf: &mut BytesMut) -> usize {
    let mut n = 0;
    while let Some(frame) = decoder.decode(buf).expect("valid stream") {
        if let Frame::Message(msg) = frame {
            black_box(&msg);
            n += 1;
        }
    }
    n
}

fn main() {
    let mut wire = Vec::with_capacity(FRAMES * (BODY_LEN + 34));
    for i in 0..FRAMES {
        let msg = Message {
            timestamp: 1_700_000_000_000_000_000 + i as i64,
            attempts: 1,
            id: MessageId::new(*b"0123456789abcdef"),
            body: vec![b'x'; BODY_LEN].into(),
        };
        encode_message_frame(&mut wire, &msg);
    }
    let mut buf = BytesMut::from(&wire[..]);
    assert_eq!(decode_all(FrameDecoder::default(), &mut buf), FRAMES);
}
