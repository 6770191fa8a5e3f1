//! The report's plots, drawn by `plotters` as SVG text to inline in the page: histograms, bars and lines.
//!
//! Every function takes what it draws and returns the SVG; drawing into a string cannot fail for want of a
//! device, so a drawing error (a range `plotters` refuses) becomes a short note in place of the plot.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

const WIDTH: u32 = 560;
const HEIGHT: u32 = 300;
const BAR: RGBColor = RGBColor(0x3b, 0x6e, 0xa8);
const SECOND: RGBColor = RGBColor(0xd0, 0x6b, 0x2c);

fn note(why: &str) -> String {
    format!("<p class=\"note\">(no plot: {})</p>", crate::html::escape(why))
}

/// The area drawing functions draw on: an SVG page of the plot's size, white.
type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;
type Drawn = Result<(), Box<dyn std::error::Error>>;

/// Runs `draw` on a white SVG area of `width` x `height` and returns the SVG text, or a note saying why nothing
/// could be drawn.
fn svg(width: u32, height: u32, draw: impl FnOnce(&Area<'_>) -> Drawn) -> String {
    let mut text = String::new();
    let drawn = (|| -> Drawn {
        let root = SVGBackend::with_string(&mut text, (width, height)).into_drawing_area();
        root.fill(&WHITE)?;
        draw(&root)?;
        root.present()?;
        Ok(())
    })();
    match drawn {
        Ok(()) => text,
        Err(e) => note(&e.to_string()),
    }
}

/// Equal-width bins of `values` between their minimum and maximum: `(left edges, counts, width)`.
pub(crate) fn bins(values: &[f64], n_bins: usize) -> (Vec<f64>, Vec<u64>, f64) {
    let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    let (lo, hi) = finite.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &v| (a.min(v), b.max(v)));
    if finite.is_empty() {
        return (Vec::new(), Vec::new(), 1.0);
    }
    let n = n_bins.max(1);
    let width = if hi > lo { (hi - lo) / n as f64 } else { 1.0 };
    let mut counts = vec![0u64; n];
    for v in finite {
        let b = (((v - lo) / width) as usize).min(n - 1);
        counts[b] += 1;
    }
    ((0..n).map(|b| lo + b as f64 * width).collect(), counts, width)
}

/// A histogram of `values` in `n_bins` equal bins, `x` naming the values.
pub(crate) fn histogram(title: &str, x: &str, values: &[f64], n_bins: usize) -> String {
    let (edges, counts, width) = bins(values, n_bins);
    if edges.is_empty() {
        return note("no values");
    }
    let bars: Vec<(f64, f64, u64)> = edges.iter().zip(&counts).map(|(&e, &c)| (e, e + width, c)).collect();
    columns(title, x, "cells", &bars)
}

/// Bars from `x0` to `x1` of height `count` on a numeric axis.
pub(crate) fn columns(title: &str, x: &str, y: &str, bars: &[(f64, f64, u64)]) -> String {
    if bars.is_empty() {
        return note("no values");
    }
    let lo = bars.iter().map(|b| b.0).fold(f64::INFINITY, f64::min);
    let hi = bars.iter().map(|b| b.1).fold(f64::NEG_INFINITY, f64::max);
    let top = bars.iter().map(|b| b.2).max().unwrap_or(1).max(1) as f64 * 1.05;
    svg(WIDTH, HEIGHT, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 16))
            .margin(8)
            .x_label_area_size(36)
            .y_label_area_size(56)
            .build_cartesian_2d(lo..hi.max(lo + 1e-9), 0f64..top)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_desc(x)
            .y_desc(y)
            .x_label_formatter(&|v| short(*v))
            .y_label_formatter(&|v| short(*v))
            .draw()?;
        chart.draw_series(
            bars.iter().map(|&(a, b, c)| Rectangle::new([(a, 0.0), (b, c as f64)], BAR.mix(0.85).filled())),
        )?;
        Ok(())
    })
}

/// Horizontal bars, one per label, from the top in the order given, each labelled at its end with its name and
/// count (the axis leaves room for them).
pub(crate) fn bars(title: &str, x: &str, labeled: &[(String, u64)]) -> String {
    if labeled.is_empty() {
        return note("no values");
    }
    let n = labeled.len();
    let height = (70 + 20 * n as u32).max(140);
    let top = labeled.iter().map(|l| l.1).max().unwrap_or(1).max(1) as f64 * 1.6;
    svg(WIDTH, height, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 16))
            .margin(8)
            .x_label_area_size(32)
            .y_label_area_size(8)
            .build_cartesian_2d(0f64..top, 0f64..n as f64)?;
        chart.configure_mesh().disable_y_mesh().y_labels(0).x_label_formatter(&|v| short(*v)).x_desc(x).draw()?;
        // Row k from the top sits between n - k - 1 and n - k.
        let row = |k: usize| (n - 1 - k) as f64;
        chart.draw_series(labeled.iter().enumerate().map(|(k, (_, c))| {
            Rectangle::new([(0.0, row(k) + 0.15), (*c as f64, row(k) + 0.85)], BAR.mix(0.85).filled())
        }))?;
        let style = TextStyle::from(("sans-serif", 12).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
        chart.draw_series(labeled.iter().enumerate().map(|(k, (name, c))| {
            Text::new(format!(" {} ({})", shorten(name, 28), c), (*c as f64, row(k) + 0.5), style.clone())
        }))?;
        Ok(())
    })
}

/// One or two lines over a shared x axis (`log_y`: a logarithmic y axis; values ≤ 0 are left out there).
pub(crate) fn lines(title: &str, x: &str, y: &str, series: &[(&str, Vec<(f64, f64)>)], log_y: bool) -> String {
    let points: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|s| s.1.iter().copied())
        .filter(|&(_, v)| v.is_finite() && (!log_y || v > 0.0))
        .collect();
    if points.is_empty() {
        return note("no values");
    }
    let (x0, x1) = points.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), p| (a.min(p.0), b.max(p.0)));
    let (y0, y1) = points.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), p| (a.min(p.1), b.max(p.1)));
    let x1 = if x1 > x0 { x1 } else { x0 + 1.0 };
    svg(WIDTH, HEIGHT, |root| {
        let mut builder = ChartBuilder::on(root);
        builder.caption(title, ("sans-serif", 16)).margin(8).x_label_area_size(36).y_label_area_size(64);
        let colors = [BAR, SECOND];
        if log_y {
            let mut chart = builder.build_cartesian_2d(x0..x1, (y0..(y1 * 1.5).max(y0 * 10.0)).log_scale())?;
            chart.configure_mesh().x_desc(x).y_desc(y).x_label_formatter(&|v| short(*v)).draw()?;
            for (k, (name, s)) in series.iter().enumerate() {
                let c = colors[k % 2];
                chart
                    .draw_series(LineSeries::new(s.iter().copied().filter(|p| p.1 > 0.0), c.stroke_width(2)))?
                    .label(*name)
                    .legend(move |(a, b)| PathElement::new([(a, b), (a + 16, b)], c.stroke_width(2)));
            }
            if series.len() > 1 {
                chart.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw()?;
            }
        } else {
            // From 0 (or below), with room above the highest point, also when every point is equal.
            let top = y1 + 0.08 * (y1 - y0.min(0.0)).max(y1.abs()).max(1e-9);
            let mut chart = builder.build_cartesian_2d(x0..x1, (y0.min(0.0))..top)?;
            chart.configure_mesh().x_desc(x).y_desc(y).y_label_formatter(&|v| short(*v)).draw()?;
            for (k, (name, s)) in series.iter().enumerate() {
                let c = colors[k % 2];
                chart
                    .draw_series(LineSeries::new(s.iter().copied(), c.stroke_width(2)))?
                    .label(*name)
                    .legend(move |(a, b)| PathElement::new([(a, b), (a + 16, b)], c.stroke_width(2)));
            }
            if series.len() > 1 {
                chart.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw()?;
            }
        }
        Ok(())
    })
}

/// An axis label: `12k`, `3.5M`, `0.25`.
fn short(v: f64) -> String {
    let a = v.abs();
    let trim = |s: String| if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_string() } else { s };
    if a >= 1e9 {
        format!("{}G", trim(format!("{:.1}", v / 1e9)))
    } else if a >= 1e6 {
        format!("{}M", trim(format!("{:.1}", v / 1e6)))
    } else if a >= 1e4 {
        format!("{}k", trim(format!("{:.1}", v / 1e3)))
    } else if a >= 10.0 || a == 0.0 {
        format!("{v:.0}")
    } else {
        trim(format!("{v:.2}"))
    }
}

fn shorten(s: &str, n: usize) -> String {
    if s.chars().count() <= n { s.to_string() } else { format!("{}…", s.chars().take(n - 1).collect::<String>()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_count_every_finite_value_once() {
        let (edges, counts, width) = bins(&[0.0, 1.0, 2.0, 3.0, 4.0, f64::NAN], 4);
        assert_eq!((edges.len(), counts.iter().sum::<u64>(), width), (4, 5, 1.0));
        assert_eq!(counts, [1, 1, 1, 2]);
        assert_eq!(bins(&[5.0, 5.0], 3).1.iter().sum::<u64>(), 2);
        assert!(bins(&[], 3).0.is_empty());
    }

    #[test]
    fn plots_are_svg_and_empty_data_is_a_note() {
        assert!(histogram("h", "x", &[1.0, 2.0, 2.0], 10).starts_with("<svg"));
        assert!(bars("b", "cells", &[("a".into(), 3), ("b".into(), 1)]).contains("<svg"));
        assert!(lines("l", "x", "y", &[("s", vec![(1.0, 10.0), (2.0, 1.0)])], true).contains("<svg"));
        assert!(histogram("h", "x", &[], 10).contains("no plot"));
    }

    #[test]
    fn axis_labels_are_short() {
        assert_eq!(
            [short(0.0), short(12.0), short(12_000.0), short(3_500_000.0), short(0.25)],
            ["0", "12", "12k", "3.5M", "0.25"]
        );
    }
}
