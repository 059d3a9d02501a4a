use super::*;
use proptest::prelude::*;
use tokio::io::AsyncReadExt;

const PREFACE: &[u8; PREFACE_LEN] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const DATA: u8 = 0x0;
const SETTINGS: u8 = 0x4;
const WINDOW_UPDATE: u8 = 0x8;

fn frame(kind: u8, stream_id: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len();
    let mut out = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, 0];
    out.extend_from_slice(&stream_id.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

fn reset(stream_id: u32) -> Vec<u8> {
    frame(RST_STREAM, stream_id, &8u32.to_be_bytes())
}

/// A connection's bytes, and the same bytes less the resets that must be dropped.
fn conversation() -> (Vec<u8>, Vec<u8>) {
    let kept_frames = |dropped: bool| {
        let mut frames = vec![
            frame(SETTINGS, 0, &[0, 4, 0, 1, 0, 0]),
            frame(HEADERS, 1, b"headers-1"),
            frame(DATA, 1, &[7u8; 300]),
            // Stream 3's HEADERS were never sent.
            if dropped { Vec::new() } else { reset(3) },
            reset(1),
            frame(HEADERS, 5, b"headers-5"),
            reset(5),
            // Stream 3 is below an opened stream now: the server knows it closed.
            reset(3),
            frame(WINDOW_UPDATE, 0, &1024u32.to_be_bytes()),
            // Malformed or not a client stream: the server's to judge.
            reset(0),
            reset(2),
            frame(RST_STREAM, 9, &[0, 0]),
            if dropped { Vec::new() } else { reset(7) },
            if dropped { Vec::new() } else { reset(11) },
            frame(DATA, 5, &[]),
            frame(HEADERS, 13, b"headers-13"),
            frame(DATA, 13, &[9u8; 2000]),
        ];
        let mut bytes = PREFACE.to_vec();
        frames.iter_mut().for_each(|f| bytes.append(f));
        bytes
    };
    (kept_frames(false), kept_frames(true))
}

/// Runs `input` through a filter in chunks of the given sizes (cycled), the way reads
/// into a large buffer do.
fn filter_in_chunks(input: &[u8], sizes: &[usize]) -> Vec<u8> {
    let mut filter = ResetFilter::new();
    let mut out = Vec::new();
    let mut rest = input;
    let mut sizes = sizes.iter().cycle();
    while !rest.is_empty() {
        let n = (*sizes.next().unwrap()).clamp(1, rest.len());
        let held = filter.take_held();
        let mut region = held.as_slice().to_vec();
        region.extend_from_slice(&rest[..n]);
        let kept = filter.filter(&mut region);
        out.extend_from_slice(&region[..kept]);
        rest = &rest[n..];
    }
    out.extend_from_slice(filter.take_held().as_slice());
    out
}

#[test]
fn resets_of_streams_never_opened_are_dropped_and_nothing_else() {
    let (input, expected) = conversation();
    assert_ne!(input, expected);
    assert_eq!(filter_in_chunks(&input, &[input.len()]), expected);
}

#[test]
fn a_read_of_one_byte_at_a_time_gives_the_same_bytes() {
    let (input, expected) = conversation();
    assert_eq!(filter_in_chunks(&input, &[1]), expected);
}

#[test]
fn a_connection_that_is_not_http2_passes_unchanged() {
    let input = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".repeat(3);
    assert_eq!(filter_in_chunks(&input, &[input.len()]), input);
}

proptest! {
    #[test]
    fn any_split_of_the_reads_gives_the_same_bytes(
        sizes in proptest::collection::vec(1usize..64, 1..16)
    ) {
        let (input, expected) = conversation();
        prop_assert_eq!(filter_in_chunks(&input, &sizes), expected);
    }

    #[test]
    fn any_bytes_filter_the_same_whatever_the_reads(
        frames in proptest::collection::vec(
            (0u8..10, 0u32..12, proptest::collection::vec(any::<u8>(), 0..40)),
            0..24,
        ),
        noise in proptest::collection::vec(any::<u8>(), 0..12),
        sizes in proptest::collection::vec(1usize..64, 1..16),
    ) {
        let mut input = PREFACE.to_vec();
        for (kind, stream_id, payload) in &frames {
            input.extend_from_slice(&frame(*kind, *stream_id, payload));
        }
        input.extend_from_slice(&noise);
        let whole = filter_in_chunks(&input, &[input.len()]);
        prop_assert!(whole.len() <= input.len());
        prop_assert_eq!(filter_in_chunks(&input, &sizes), whole);
    }
}

/// A reader that hands out its chunks one per read, `Pending` before each.
struct Trickle {
    chunks: std::collections::VecDeque<Vec<u8>>,
    pending_next: bool,
}

impl AsyncRead for Trickle {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.pending_next {
            self.pending_next = false;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        self.pending_next = true;
        if let Some(mut chunk) = self.chunks.pop_front() {
            let n = chunk.len().min(buf.remaining());
            buf.put_slice(&chunk[..n]);
            if n < chunk.len() {
                self.chunks.push_front(chunk.split_off(n));
            }
        }
        Poll::Ready(Ok(()))
    }
}

async fn read_all_with(input: &[u8], chunk: usize, read_len: usize) -> Vec<u8> {
    let trickle = Trickle {
        chunks: input.chunks(chunk).map(<[u8]>::to_vec).collect(),
        pending_next: true,
    };
    let mut conn = IgnoreIdleResets::new(trickle);
    let mut out = Vec::new();
    let mut buf = vec![0u8; read_len];
    loop {
        let n = conn.read(&mut buf).await.unwrap();
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&buf[..n]);
    }
}

#[tokio::test]
async fn the_connection_reads_the_filtered_bytes_whatever_the_read_sizes() {
    let (input, expected) = conversation();
    for chunk in [1, 5, 13, 64, 4096] {
        for read_len in [1, 3, 9, 10, 17, 8192] {
            assert_eq!(
                read_all_with(&input, chunk, read_len).await,
                expected,
                "chunks of {chunk}, reads of {read_len}"
            );
        }
    }
}

#[tokio::test]
async fn a_connection_ending_inside_a_frame_header_passes_what_it_had() {
    let (mut input, _) = conversation();
    input.extend_from_slice(&frame(HEADERS, 15, b"x")[..5]);
    for read_len in [3, 8192] {
        let out = read_all_with(&input, 7, read_len).await;
        assert!(
            out.ends_with(&input[input.len() - 5..]),
            "reads of {read_len}"
        );
    }
}
