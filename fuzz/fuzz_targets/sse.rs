//! The SSE parser: any bytes, split anywhere, give the same events as the same bytes in one
//! piece; nothing over the limit is ever dispatched; a halting parser dispatches nothing after
//! its first overflow.
#![no_main]

use ferroute_core::sse::SseParser;
use libfuzzer_sys::fuzz_target;

const LIMIT: usize = 64;

fn run(p: &mut SseParser, chunks: &[&[u8]]) -> Vec<(Option<String>, String)> {
    let mut out = Vec::new();
    for c in chunks {
        p.feed(c, |e| {
            assert!(e.data.len() <= LIMIT * 3, "an event over the limit was dispatched");
            out.push((e.name.map(str::to_owned), e.data.to_owned()));
        });
    }
    out
}

fuzz_target!(|data: &[u8]| {
    // The first byte chooses the cut points; the rest is the stream.
    let Some((&seed, bytes)) = data.split_first() else { return };
    let mut chunks = Vec::new();
    let mut at = 0;
    let mut step = usize::from(seed % 7) + 1;
    while at < bytes.len() {
        let end = (at + step).min(bytes.len());
        chunks.push(&bytes[at..end]);
        at = end;
        step = step * 5 % 11 + 1;
    }
    let whole = run(&mut SseParser::with_limit(LIMIT), &[bytes]);
    let split = run(&mut SseParser::with_limit(LIMIT), &chunks);
    assert_eq!(whole, split, "splitting the stream changed its events");

    let mut halting = SseParser::with_limit(LIMIT).halting();
    let mut after_overflow = 0;
    for c in &chunks {
        let was = halting.overflowed();
        halting.feed(c, |_| {
            if was {
                after_overflow += 1;
            }
        });
    }
    assert_eq!(after_overflow, 0, "a halting parser dispatched after an overflow");
    let halted = run(&mut SseParser::with_limit(LIMIT).halting(), &[bytes]);
    assert!(halted.len() <= whole.len() && halted[..] == whole[..halted.len()], "halting changed what came before");
});
