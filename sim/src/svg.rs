//! An SVG timeline of one run: each breaker's and connection's states (from 0 s), lockouts,
//! the usage-limit lane, the upstream calls per connection and every client request from issue
//! to answer, on one time axis.

use crate::check::Span;
use crate::shared::RunResult;
use std::collections::BTreeMap;
use std::fmt::Write;

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

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// Renders the run's spans as an SVG document.
pub fn render(r: &RunResult) -> String {
    let end = r.simulated.as_millis().max(1) as f64;
    let mut lanes: BTreeMap<&str, Vec<&Span>> = BTreeMap::new();
    for s in &r.spans {
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
    let _ = writeln!(
        out,
        r#"<text x="10" y="20" font-size="14">{} (seed {}) — {:.1} s simulated</text>"#,
        esc(&r.scenario),
        r.seed,
        end / 1000.0
    );
    for (i, (lane, spans)) in lanes.iter().enumerate() {
        let y = 40.0 + lane_h * i as f64;
        let _ = writeln!(out, r#"<text x="10" y="{}">{}</text>"#, y + 16.0, esc(lane));
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
                esc(&title)
            );
        }
    }
    let axis_y = 40.0 + lane_h * lanes.len() as f64 + 14.0;
    for k in 0..=10 {
        let ms = (end * k as f64 / 10.0) as u64;
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{axis_y}" text-anchor="middle">{:.0}s</text>"#,
            x(ms),
            ms as f64 / 1000.0
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
