use super::*;
use proptest::prelude::*;

/// Every event of `chunks` fed in order, as owned (name, data) pairs.
fn events(p: &mut SseParser, chunks: &[&[u8]]) -> Vec<(Option<String>, String)> {
    let mut out = Vec::new();
    for c in chunks {
        p.feed(c, |e| out.push((e.name.map(str::to_owned), e.data.to_owned())));
    }
    out
}

fn one(bytes: &[u8]) -> Vec<(Option<String>, String)> {
    events(&mut SseParser::default(), &[bytes])
}

fn ev(name: Option<&str>, data: &str) -> (Option<String>, String) {
    (name.map(str::to_owned), data.to_owned())
}

#[test]
fn lf_cr_and_crlf_all_end_lines() {
    let want = vec![ev(Some("a"), "1\n2"), ev(None, "3")];
    assert_eq!(one(b"event: a\ndata: 1\ndata: 2\n\ndata: 3\n\n"), want);
    assert_eq!(one(b"event: a\rdata: 1\rdata: 2\r\rdata: 3\r\r"), want);
    assert_eq!(one(b"event: a\r\ndata: 1\r\ndata: 2\r\n\r\ndata: 3\r\n\r\n"), want);
    assert_eq!(one(b"event: a\r\ndata: 1\rdata: 2\n\r\ndata: 3\r\n"), want[..1].to_vec());
}

#[test]
fn a_crlf_split_between_chunks_is_one_line_ending() {
    let mut p = SseParser::default();
    assert_eq!(events(&mut p, &[b"data: x\r", b"\n", b"data: y\r", b"", b"\n\r", b"\n"]), vec![ev(None, "x\ny")]);
    // A CR then an empty line: two endings, so the event is dispatched.
    let mut p = SseParser::default();
    assert_eq!(events(&mut p, &[b"data: x\r", b"\r"]), vec![ev(None, "x")]);
}

#[test]
fn a_leading_bom_is_dropped_once_even_split() {
    assert_eq!(one(b"\xEF\xBB\xBFdata: a\n\n"), vec![ev(None, "a")]);
    let mut p = SseParser::default();
    assert_eq!(events(&mut p, &[b"\xEF", b"\xBB", b"\xBFdata: a\n\n"]), vec![ev(None, "a")]);
    // Only at the very start: later a BOM is part of a field name (an unknown field).
    assert_eq!(one(b"data: a\n\n\xEF\xBB\xBFdata: b\n\n"), vec![ev(None, "a")]);
    // Two BOMs: the second makes the first line's field unknown.
    assert_eq!(one(b"\xEF\xBB\xBF\xEF\xBB\xBFdata: a\n\n"), vec![]);
    // Bytes that only begin like a BOM are stream bytes.
    let mut p = SseParser::default();
    assert_eq!(events(&mut p, &[b"\xEF", b"data: a\n\ndata: b\n\n"]), vec![ev(None, "b")]);
    let mut p = SseParser::default();
    assert_eq!(events(&mut p, &[b"d", b"ata: a\n\n"]), vec![ev(None, "a")]);
}

#[test]
fn comments_unknown_fields_and_the_colon_rules() {
    assert_eq!(one(b": ping\n\n"), vec![]);
    assert_eq!(one(b":\ndata: a\n: note\n\n"), vec![ev(None, "a")]);
    assert_eq!(one(b"foo: bar\ndata:a\n\n"), vec![ev(None, "a")]);
    // One space after the colon goes, a second stays; a colon in the value stays.
    assert_eq!(one(b"data:  a: b\n\n"), vec![ev(None, " a: b")]);
    // A field without a colon has an empty value.
    assert_eq!(one(b"data\ndata\n\n"), vec![ev(None, "\n")]);
    assert_eq!(one(b"data\n\n"), vec![ev(None, "")]);
    // Field names are case-sensitive.
    assert_eq!(one(b"Data: a\n\n"), vec![]);
}

#[test]
fn an_event_without_data_is_not_dispatched_and_its_type_does_not_leak() {
    assert_eq!(one(b"event: ping\n\ndata: a\n\n"), vec![ev(None, "a")]);
    assert_eq!(one(b"event: x\nevent: y\ndata: a\n\n"), vec![ev(Some("y"), "a")]);
    assert_eq!(one(b"event:\ndata: a\n\n"), vec![ev(None, "a")]);
}

#[test]
fn an_unfinished_event_is_never_dispatched() {
    let mut p = SseParser::default();
    assert_eq!(events(&mut p, &[b"data: a\n\ndata: b\n"]), vec![ev(None, "a")]);
    assert_eq!(events(&mut p, &[b"data: c"]), vec![]);
}

#[test]
fn retry_takes_digits_only_and_id_never_nul() {
    let mut p = SseParser::default();
    events(&mut p, &[b"retry: 1500\n\n"]);
    assert_eq!(p.retry_ms(), Some(1500));
    events(&mut p, &[b"retry: 15x\nretry: -1\nretry:\nretry: 1.5\nretry: 99999999999999999999999\n\n"]);
    assert_eq!(p.retry_ms(), Some(1500));
    events(&mut p, &[b"id: 7\n\nid: a\0b\n\n"]);
    assert_eq!(p.last_event_id(), "7");
    events(&mut p, &[b"id\n\n"]);
    assert_eq!(p.last_event_id(), "");
}

#[test]
fn utf8_split_inside_a_character_is_reassembled() {
    let text = "data: žluťoučký kůň\n\n".as_bytes();
    let mut p = SseParser::default();
    assert_eq!(events(&mut p, &[&text[..8], &text[8..9], &text[9..]]), vec![ev(None, "žluťoučký kůň")]);
}

#[test]
fn an_event_past_the_limit_is_skipped_to_its_end() {
    let mut p = SseParser::with_limit(16);
    let got = events(&mut p, &[b"data: 0123456789", b"0123456789\ndata: more\n\ndata: ok\n\n"]);
    assert_eq!(got, vec![ev(None, "ok")]);
    assert!(p.overflowed());
    // Data lines that together pass the limit.
    let mut p = SseParser::with_limit(16);
    assert_eq!(one_with(&mut p, b"data: 0123456\ndata: 0123456\ndata: x\n\ndata: ok\n\n"), vec![ev(None, "ok")]);
    assert!(p.overflowed());
    // A skipped line that ends exactly at a chunk's edge is not an empty line.
    let mut p = SseParser::with_limit(8);
    let got = events(&mut p, &[b"data: 0123456789", b"\nevent: x\ndata: lost\n\ndata: ok\n\n"]);
    assert_eq!(got, vec![ev(None, "ok")]);
    // A line of exactly the limit passes, whole or split; one byte more does not.
    for cut in 0..=8 {
        let line = b"data:123\n\n";
        let mut p = SseParser::with_limit(8);
        assert_eq!(events(&mut p, &[&line[..cut], &line[cut..]]), vec![ev(None, "123")], "cut at {cut}");
        assert!(!p.overflowed());
        let line = b"data:1234\n\n";
        let mut p = SseParser::with_limit(8);
        assert_eq!(events(&mut p, &[&line[..cut], &line[cut..]]), vec![], "cut at {cut}");
        assert!(p.overflowed());
    }
}

#[test]
fn a_halting_parser_dispatches_nothing_after_an_overflow() {
    let bytes = b"data: a\n\ndata: 0123456789abcdef\n\ndata: b\n\n";
    assert_eq!(one_with(&mut SseParser::with_limit(12), bytes), vec![ev(None, "a"), ev(None, "b")]);
    let mut p = SseParser::with_limit(12).halting();
    assert_eq!(one_with(&mut p, bytes), vec![ev(None, "a")]);
    assert!(p.overflowed());
    assert_eq!(one_with(&mut p, b"data: c\n\n"), vec![]);
}

fn one_with(p: &mut SseParser, bytes: &[u8]) -> Vec<(Option<String>, String)> {
    events(p, &[bytes])
}

/// A stream that writes `evs` with the given line ending, comments and unknown fields mixed in.
fn write(evs: &[(Option<String>, String)], eol: &str, noise: bool) -> Vec<u8> {
    let mut s = String::new();
    for (name, data) in evs {
        if noise {
            s.push_str(&format!(": keep-alive{eol}id: 1{eol}"));
        }
        if let Some(n) = name {
            s.push_str(&format!("event: {n}{eol}"));
        }
        for line in data.split('\n') {
            s.push_str(&format!("data: {line}{eol}"));
        }
        s.push_str(eol);
    }
    s.into_bytes()
}

proptest! {
    #[test]
    fn any_split_of_a_stream_gives_the_same_events(
        evs in prop::collection::vec(
            (prop::option::of("[a-z_]{1,12}"), "[ -~é\n]{0,40}"
                .prop_filter("no CR", |d: &String| !d.contains('\r'))),
            0..6,
        ),
        eol in prop::sample::select(vec!["\n", "\r", "\r\n"]),
        noise in any::<bool>(),
        bom in any::<bool>(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
    ) {
        let mut bytes = if bom { BOM.to_vec() } else { Vec::new() };
        bytes.extend(write(&evs, eol, noise));
        let mut at: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
        at.sort_unstable();
        let mut chunks = Vec::new();
        let mut from = 0;
        for a in at {
            chunks.push(&bytes[from..a]);
            from = a;
        }
        chunks.push(&bytes[from..]);
        let got = events(&mut SseParser::default(), &chunks);
        let want: Vec<_> = evs.iter().map(|(n, d)| (n.clone(), d.clone())).collect();
        prop_assert_eq!(got, want);
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_stay_within_the_limit(
        chunks in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..64), 0..8),
    ) {
        let mut p = SseParser::with_limit(32);
        for c in &chunks {
            p.feed(c, |e| assert!(e.data.len() <= 32 * 3));
            prop_assert!(p.line.len() + p.data.len() <= 32);
        }
    }
}
