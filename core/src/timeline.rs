//! A timeline of states drawn as SVG: one lane per breaker, connection, lockout or lane, each
//! span a coloured bar on one time axis. The simulation (`sim svg`) and the gateway's
//! dashboard draw with this one renderer, so a production incident and a simulated run look
//! the same.

use std::collections::BTreeMap;
use std::fmt::Write;

/// A state held over an interval of one lane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    /// Lane (`breaker:openai`, `conn:k1`, `lock:p/c/m`).
    pub lane: String,
    /// State name (`OPEN`, `cooldown`, `locked`, …).
    pub state: String,
    /// From (ms after the timeline's start).
    pub from_ms: u64,
    /// To (ms after the start), if it ended.
    pub to_ms: Option<u64>,
    /// What a reader sees on hovering it (empty: the state and times).
    pub note: String,
}

/// What the picture shows besides its spans.
#[derive(Debug, Clone)]
pub struct Frame<'a> {
    /// The heading.
    pub title: &'a str,
    /// The length of the time axis (ms).
    pub end_ms: u64,
    /// Where the axis's labels count from: 0 (seconds after the start) or, when set, the
    /// seconds before the end (a live timeline reads "-60 min … now").
    pub count_back: bool,
}

fn color(state: &str) -> &'static str {
    match state {
        "OPEN" => "#d9534f",
        "HALF_OPEN" => "#f0ad4e",
        "DEGRADED" => "#f7e08a",
        "CLOSED" => "#5cb85c",
        "cooldown" => "#5bc0de",
        "locked" => "#9370db",
        "banned" | "credits_exhausted" | "expired" => "#333333",
        "active" => "#c8e6c9",
        "slow" => "#b39ddb",
        "call" => "#1f4e79",
        "2xx" => "#5cb85c",
        "4xx" => "#f0ad4e",
        "5xx" => "#d9534f",
        "gave up" => "#bbbbbb",
        _ => "#999999",
    }
}

/// `s` as SVG text: nothing in it can become markup.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

fn axis_label(frame: &Frame<'_>, ms: u64) -> String {
    if !frame.count_back {
        return format!("{:.0}s", ms as f64 / 1000.0);
    }
    let back = frame.end_ms.saturating_sub(ms);
    if back == 0 {
        "now".to_owned()
    } else if frame.end_ms >= 120_000 {
        format!("-{:.0} min", back as f64 / 60_000.0)
    } else {
        format!("-{:.0}s", back as f64 / 1000.0)
    }
}

/// Draws `spans` (each lane in name order) as an SVG document.
pub fn render(frame: &Frame<'_>, spans: &[Span]) -> String {
    let end = frame.end_ms.max(1) as f64;
    let mut lanes: BTreeMap<&str, Vec<&Span>> = BTreeMap::new();
    for s in spans {
        lanes.entry(s.lane.as_str()).or_default().push(s);
    }
    let (label_w, width, lane_h) = (260.0, 900.0, 26.0);
    let height = 60.0 + lane_h * lanes.len() as f64 + 60.0;
    let x = |ms: u64| label_w + (ms as f64 / end) * width;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{height}" font-family="monospace" font-size="12">"#,
        label_w + width + 20.0
    );
    let _ = writeln!(out, r#"<text x="10" y="20" font-size="14">{}</text>"#, escape(frame.title));
    for (i, (lane, spans)) in lanes.iter().enumerate() {
        let y = 40.0 + lane_h * i as f64;
        let _ = writeln!(out, r#"<text x="10" y="{}">{}</text>"#, y + 16.0, escape(lane));
        let _ = writeln!(
            out,
            r##"<rect x="{label_w}" y="{}" width="{width}" height="{}" fill="#f4f4f4"/>"##,
            y + 2.0,
            lane_h - 6.0
        );
        for s in spans {
            let to = s.to_ms.unwrap_or(end as u64).min(end as u64);
            let w = (x(to) - x(s.from_ms)).max(1.0);
            let title = if s.note.is_empty() {
                format!("{} {}–{} ms", s.state, s.from_ms, to)
            } else {
                format!("{} ({}–{} ms)", s.note, s.from_ms, to)
            };
            // Requests and calls are thin bars inside their lane; states fill it.
            let (top, h) = if s.state == "call" { (y + 4.0, lane_h - 10.0) } else { (y + 2.0, lane_h - 6.0) };
            let _ = writeln!(
                out,
                r#"<rect x="{:.1}" y="{top}" width="{w:.1}" height="{h}" fill="{}"><title>{}</title></rect>"#,
                x(s.from_ms),
                color(&s.state),
                escape(&title)
            );
        }
    }
    let axis_y = 40.0 + lane_h * lanes.len() as f64 + 14.0;
    for k in 0..=10 {
        let ms = (end * k as f64 / 10.0) as u64;
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{axis_y}" text-anchor="middle">{}</text>"#,
            x(ms),
            axis_label(frame, ms)
        );
    }
    let legend_y = axis_y + 26.0;
    let mut lx = label_w;
    for state in [
        "CLOSED",
        "DEGRADED",
        "HALF_OPEN",
        "OPEN",
        "active",
        "cooldown",
        "locked",
        "banned",
        "call",
        "2xx",
        "4xx",
        "5xx",
    ] {
        let _ = writeln!(
            out,
            r#"<rect x="{lx}" y="{}" width="12" height="12" fill="{}"/><text x="{}" y="{legend_y}">{state}</text>"#,
            legend_y - 10.0,
            color(state),
            lx + 16.0
        );
        lx += 16.0 + 8.0 * state.len() as f64 + 18.0;
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(lane: &str, state: &str, from_ms: u64, to_ms: Option<u64>, note: &str) -> Span {
        Span { lane: lane.into(), state: state.into(), from_ms, to_ms, note: note.into() }
    }

    #[test]
    fn one_row_per_lane_and_a_bar_per_span() {
        let frame = Frame { title: "run", end_ms: 10_000, count_back: false };
        let svg = render(
            &frame,
            &[
                span("conn:k1", "cooldown", 1_000, Some(2_000), ""),
                span("breaker:a", "OPEN", 0, None, ""),
                span("conn:k1", "locked", 3_000, None, ""),
            ],
        );
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        let a = svg.find(">breaker:a<").expect("breaker lane");
        let k = svg.find(">conn:k1<").expect("connection lane");
        assert!(a < k, "lanes in name order");
        assert_eq!(svg.matches("<title>").count(), 3);
        // An open span runs to the end of the axis: 260 + 900.
        assert!(svg.contains(r#"<rect x="260.0" y="42" width="900.0""#), "{svg}");
        assert!(svg.contains(">10s<"));
    }

    #[test]
    fn text_from_upstreams_cannot_become_markup() {
        let frame = Frame { title: "<script>alert(1)</script>", end_ms: 60_000, count_back: true };
        let svg = render(&frame, &[span("lock:p/c/<b>m</b>", "locked", 0, None, "\"><script>x</script>")]);
        assert!(!svg.contains("<script>") && !svg.contains("<b>"), "{svg}");
        assert!(svg.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(svg.contains("&quot;&gt;&lt;script&gt;"));
        assert!(svg.contains(">now<") && svg.contains(">-30s<"));
    }

    #[test]
    fn a_live_hour_counts_back_in_minutes() {
        let frame = Frame { title: "last hour", end_ms: 3_600_000, count_back: true };
        let svg = render(&frame, &[]);
        assert!(svg.contains(">-60 min<") && svg.contains(">-6 min<") && svg.contains(">now<"), "{svg}");
    }
}
