//! `plots DIR`: draws the performance curves of `docs/performance.md` as SVG from the figures
//! `scripts/curves` measured into `DIR`:
//! - `scale.csv` and `requests.csv` (`axis,size,instructions`): one line per axis, each point
//!   its cost as a multiple of the axis's small end, the 1.2× limit drawn across
//!   (`scale-decision.svg`, `scale-request.svg`);
//! - `soak-rss.csv` (`seconds,rss_kib`, from `soak --target combo`), if present: the binary's
//!   resident set through the soak (`soak-rss.svg`).

use plotters::prelude::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Rows of a CSV with a header line, split at commas; a row with the wrong number of fields is
/// an error naming its line.
fn rows(path: &Path, fields: usize) -> anyhow::Result<Vec<Vec<String>>> {
    let text = std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate().skip(1) {
        if line.trim().is_empty() {
            continue;
        }
        let row: Vec<String> = line.split(',').map(|f| f.trim().to_owned()).collect();
        anyhow::ensure!(row.len() == fields, "{}:{}: expected {fields} fields, got {:?}", path.display(), n + 1, line);
        out.push(row);
    }
    Ok(out)
}

fn number(path: &Path, field: &str) -> anyhow::Result<f64> {
    field.parse().map_err(|_| anyhow::anyhow!("{}: {field:?} is not a number", path.display()))
}

/// Each axis's points (size, cost as a multiple of its smallest size's), sizes ascending.
type Curves = BTreeMap<String, Vec<(f64, f64)>>;

fn curves(path: &Path) -> anyhow::Result<Curves> {
    let mut raw: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for row in rows(path, 3)? {
        raw.entry(row[0].clone()).or_default().push((number(path, &row[1])?, number(path, &row[2])?));
    }
    let mut out = Curves::new();
    for (axis, mut points) in raw {
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        let base = points.first().map(|p| p.1).filter(|b| *b > 0.0);
        let base =
            base.ok_or_else(|| anyhow::anyhow!("{}: axis {axis:?} has no positive small end", path.display()))?;
        out.insert(axis, points.into_iter().map(|(size, cost)| (size.max(1.0), cost / base)).collect());
    }
    Ok(out)
}

const COLOURS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

fn draw_curves(curves: &Curves, title: &str, x_desc: &str, out: &Path) -> anyhow::Result<()> {
    let x_max = curves.values().flatten().map(|p| p.0).fold(10.0, f64::max) * 2.0;
    let y_max = curves.values().flatten().map(|p| p.1).fold(1.4, f64::max) * 1.1;
    let root = SVGBackend::new(out, (820, 480)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(60)
        .build_cartesian_2d((1f64..x_max).log_scale(), 0f64..y_max)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc("cost × the small end")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.1}"))
        .draw()?;
    let limit = [(1.0, 1.2), (x_max, 1.2)];
    chart
        .draw_series(LineSeries::new(limit, BLACK.mix(0.5).stroke_width(1)))?
        .label("limit 1.2×")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.mix(0.5)));
    for (i, (axis, points)) in curves.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        chart
            .draw_series(LineSeries::new(points.iter().copied(), colour.stroke_width(2)))?
            .label(axis.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2)));
        chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, colour.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

fn draw_rss(path: &Path, out: &Path) -> anyhow::Result<()> {
    let points: Vec<(f64, f64)> = rows(path, 2)?
        .iter()
        .map(|r| Ok((number(path, &r[0])? / 60.0, number(path, &r[1])? / 1024.0)))
        .collect::<anyhow::Result<_>>()?;
    anyhow::ensure!(!points.is_empty(), "{}: no samples", path.display());
    let x_max = points.iter().map(|p| p.0).fold(1.0, f64::max);
    let y_max = points.iter().map(|p| p.1).fold(1.0, f64::max) * 1.3;
    let root = SVGBackend::new(out, (820, 400)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption("ferroute's resident set through the proxied soak", ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)?;
    chart.configure_mesh().x_desc("minutes").y_desc("MiB").y_label_formatter(&|y| format!("{y:.0}")).draw()?;
    chart.draw_series(LineSeries::new(points, COLOURS[0].stroke_width(2)))?;
    root.present()?;
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let dir: PathBuf = std::env::args_os().nth(1).map(PathBuf::from).unwrap_or_else(|| "docs/performance".into());
    let mut drawn = Vec::new();
    for (csv, svg, title, x_desc) in [
        (
            "scale.csv",
            "scale-decision.svg",
            "one routing decision as the world grows",
            "size of the axis (0 drawn at 1)",
        ),
        ("requests.csv", "scale-request.svg", "one proxied JSON request as the config grows", "size of the axis"),
    ] {
        let path = dir.join(csv);
        if path.exists() {
            draw_curves(&curves(&path)?, title, x_desc, &dir.join(svg))?;
            drawn.push(svg);
        }
    }
    let rss = dir.join("soak-rss.csv");
    if rss.exists() {
        draw_rss(&rss, &dir.join("soak-rss.svg"))?;
        drawn.push("soak-rss.svg");
    }
    anyhow::ensure!(!drawn.is_empty(), "no figures in {} (scripts/curves measures them)", dir.display());
    println!("drew {} in {}", drawn.join(", "), dir.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn curves_are_multiples_of_each_axis_small_end_and_bad_rows_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("scale.csv");
        std::fs::write(&path, "axis,size,instructions\npins,100000,120\npins,0,100\nkeys,8,50\nkeys,1000,300\n")
            .unwrap();
        let c = curves(&path).unwrap();
        assert_eq!(c["pins"], vec![(1.0, 1.0), (100000.0, 1.2)]);
        assert_eq!(c["keys"], vec![(8.0, 1.0), (1000.0, 6.0)]);
        draw_curves(&c, "t", "x", &dir.path().join("a.svg")).unwrap();
        let svg = std::fs::read_to_string(dir.path().join("a.svg")).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("pins") && svg.contains("limit 1.2×"));
        std::fs::write(&path, "axis,size,instructions\npins,1\n").unwrap();
        assert!(curves(&path).unwrap_err().to_string().contains("scale.csv:2"));
    }
}
