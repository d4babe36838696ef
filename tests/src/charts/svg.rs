//! SVG written directly: a bar chart with whiskers, a line chart with a range band, and the
//! caption (title, date, machine, command, note). Text is SVG `<text>` in the viewer's
//! sans-serif font, so nothing here needs a font file.

use std::collections::BTreeSet;
use std::fmt::Write;

use super::Meta;

/// One engine's bar in a group: the median, and the range over the runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    pub series: String,
    pub median: f64,
    pub lo: f64,
    pub hi: f64,
    pub runs: usize,
}

/// The bars of one format and thread count.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    pub label: String,
    pub bars: Vec<Bar>,
}

/// One plot of a bar chart (decode, prefill).
#[derive(Debug, Clone, PartialEq)]
pub struct Panel {
    pub title: String,
    pub groups: Vec<Group>,
}

/// A line: (x, median, lo, hi) per point.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64, f64, f64)>,
}

const WIDTH: f64 = 900.0;
const PALETTE: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
];
const PLOT_HEIGHT: f64 = 300.0;

/// `&`, `<`, `>` and quotes as XML entities.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

/// 1234.5 -> "1,235"; 45.67 -> "45.7"; 0.123 -> "0.123".
pub fn format_number(v: f64) -> String {
    if !v.is_finite() || v == 0.0 {
        return format!("{v}");
    }
    if v.abs() >= 1000.0 {
        let digits = format!("{:.0}", v.abs());
        let mut out = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(c);
        }
        if v < 0.0 { format!("-{out}") } else { out }
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

/// A step of 1, 2 or 5 times a power of ten giving about `n` intervals up to `max`.
fn nice_step(max: f64, n: f64) -> f64 {
    if max <= 0.0 || !max.is_finite() {
        return 1.0;
    }
    let raw = max / n;
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    let nice = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * mag
}

/// Splits `s` into lines of at most `width` characters at spaces.
fn wrap(s: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in s.split_whitespace() {
        if !line.is_empty() && line.len() + 1 + word.len() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

fn header(svg: &mut String, height: f64, meta: &Meta) {
    let _ = write!(
        svg,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" \
         viewBox=\"0 0 {WIDTH} {height}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <title>{}</title>\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"24\" text-anchor=\"middle\" font-size=\"16\" font-weight=\"bold\">{}</text>\n",
        escape(&meta.title),
        WIDTH / 2.0,
        escape(&meta.title)
    );
}

/// The caption lines under the plot: date and machine, the command, the note.
fn caption_lines(meta: &Meta) -> Vec<String> {
    let mut lines = wrap(&format!("Measured {} on {}.", meta.date, meta.machine), 124);
    lines.extend(wrap(&format!("Command: {}", meta.command), 124));
    if let Some(note) = &meta.note {
        lines.extend(wrap(note, 124));
    }
    lines
}

fn caption(svg: &mut String, top: f64, lines: &[String]) {
    for (i, l) in lines.iter().enumerate() {
        let _ = writeln!(
            svg,
            "<text x=\"16\" y=\"{:.1}\" font-size=\"11\" fill=\"#333\">{}</text>",
            top + 15.0 * i as f64,
            escape(l)
        );
    }
}

fn legend(svg: &mut String, names: &[String], y: f64) {
    let mut x = 16.0;
    for (i, name) in names.iter().enumerate() {
        let _ = writeln!(
            svg,
            "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"12\" height=\"12\" fill=\"{}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            y - 10.0,
            PALETTE[i % PALETTE.len()],
            x + 16.0,
            y,
            escape(name)
        );
        x += 28.0 + 7.0 * name.len() as f64;
    }
}

/// A y axis from 0 to `max` with gridlines, in the box (x0, top)..(x1, bottom).
fn y_axis(svg: &mut String, x0: f64, x1: f64, top: f64, bottom: f64, max: f64) -> f64 {
    let step = nice_step(max, 5.0);
    let top_value = (max / step).ceil() * step;
    let mut v = 0.0;
    while v <= top_value + step * 1e-9 {
        let y = bottom - (bottom - top) * v / top_value;
        let _ = writeln!(
            svg,
            "<line x1=\"{x0:.1}\" y1=\"{y:.1}\" x2=\"{x1:.1}\" y2=\"{y:.1}\" stroke=\"#ddd\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" font-size=\"10\">{}</text>",
            x0 - 4.0,
            y + 3.0,
            format_number(v)
        );
        v += step;
    }
    let _ = writeln!(
        svg,
        "<line x1=\"{x0:.1}\" y1=\"{top:.1}\" x2=\"{x0:.1}\" y2=\"{bottom:.1}\" stroke=\"#333\"/>\
         <line x1=\"{x0:.1}\" y1=\"{bottom:.1}\" x2=\"{x1:.1}\" y2=\"{bottom:.1}\" stroke=\"#333\"/>"
    );
    top_value
}

/// Panels side by side; in each, a group per label, a bar per series (the median, labelled),
/// a whisker from the least to the most of the runs.
pub fn bar_chart(meta: &Meta, panels: &[Panel]) -> String {
    let names: Vec<String> = panels
        .iter()
        .flat_map(|p| {
            p.groups
                .iter()
                .flat_map(|g| g.bars.iter().map(|b| b.series.clone()))
        })
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let color = |s: &str| {
        let i = names.iter().position(|n| n == s).unwrap_or(0);
        PALETTE[i % PALETTE.len()]
    };
    let lines = caption_lines(meta);
    let (plot_top, plot_bottom) = (80.0, 80.0 + PLOT_HEIGHT);
    let height = plot_bottom + 62.0 + 15.0 * lines.len() as f64 + 10.0;
    let mut svg = String::new();
    header(&mut svg, height, meta);
    legend(&mut svg, &names, 48.0);
    let count = panels.len().max(1) as f64;
    let panel_width = (WIDTH - 20.0) / count;
    for (pi, panel) in panels.iter().enumerate() {
        let x0 = 10.0 + panel_width * pi as f64 + 60.0;
        let x1 = 10.0 + panel_width * (pi as f64 + 1.0) - 16.0;
        let max = panel
            .groups
            .iter()
            .flat_map(|g| g.bars.iter().map(|b| b.hi.max(b.median)))
            .fold(0.0, f64::max);
        let top_value = y_axis(&mut svg, x0, x1, plot_top, plot_bottom, max * 1.08);
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-weight=\"bold\">{}</text>",
            (x0 + x1) / 2.0,
            plot_top - 8.0,
            escape(&panel.title)
        );
        let y_of = |v: f64| plot_bottom - (plot_bottom - plot_top) * v / top_value;
        let group_width = (x1 - x0) / panel.groups.len().max(1) as f64;
        for (gi, group) in panel.groups.iter().enumerate() {
            let gx = x0 + group_width * gi as f64;
            let bar_width = (group_width * 0.8 / group.bars.len().max(1) as f64).min(60.0);
            let start = gx + (group_width - bar_width * group.bars.len() as f64) / 2.0;
            for (bi, bar) in group.bars.iter().enumerate() {
                let bx = start + bar_width * bi as f64;
                let y = y_of(bar.median);
                let _ = writeln!(
                    svg,
                    "<rect x=\"{:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\">\
                     <title>{}: median {} (range {} - {}, {} runs)</title></rect>",
                    bx + 2.0,
                    bar_width - 4.0,
                    (plot_bottom - y).max(0.0),
                    color(&bar.series),
                    escape(&bar.series),
                    format_number(bar.median),
                    format_number(bar.lo),
                    format_number(bar.hi),
                    bar.runs
                );
                let cx = bx + bar_width / 2.0;
                if bar.hi > bar.lo {
                    let _ = writeln!(
                        svg,
                        "<path d=\"M{cx:.1} {:.1}V{:.1}M{:.1} {:.1}H{:.1}M{:.1} {:.1}H{:.1}\" \
                         stroke=\"#222\" fill=\"none\"/>",
                        y_of(bar.lo),
                        y_of(bar.hi),
                        cx - 5.0,
                        y_of(bar.lo),
                        cx + 5.0,
                        cx - 5.0,
                        y_of(bar.hi),
                        cx + 5.0
                    );
                }
                let _ = writeln!(
                    svg,
                    "<text x=\"{cx:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"10\">{}</text>",
                    y_of(bar.hi.max(bar.median)) - 4.0,
                    format_number(bar.median)
                );
            }
            // "format, N threads" on two lines, so narrow groups do not run into each other.
            let cx = gx + group_width / 2.0;
            let _ = write!(
                svg,
                "<text x=\"{cx:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"11\">",
                plot_bottom + 16.0
            );
            for (li, part) in group.label.split(", ").enumerate() {
                let dy = if li == 0 { 0.0 } else { 13.0 };
                let _ = write!(
                    svg,
                    "<tspan x=\"{cx:.1}\" dy=\"{dy}\">{}</tspan>",
                    escape(part)
                );
            }
            svg.push_str("</text>\n");
        }
    }
    caption(&mut svg, plot_bottom + 56.0, &lines);
    svg.push_str("</svg>\n");
    svg
}

/// Lines of medians with a band from the least to the most; `log2_x` puts x on a log2 scale
/// with a tick at each x of the data.
pub fn line_chart(
    meta: &Meta,
    series: &[Series],
    x_label: &str,
    y_label: &str,
    log2_x: bool,
) -> String {
    let lines = caption_lines(meta);
    let (x0, x1, top, bottom) = (70.0, WIDTH - 20.0, 70.0, 70.0 + PLOT_HEIGHT);
    let height = bottom + 56.0 + 15.0 * lines.len() as f64 + 10.0;
    let mut svg = String::new();
    header(&mut svg, height, meta);
    let names: Vec<String> = series.iter().map(|s| s.name.clone()).collect();
    legend(&mut svg, &names, 48.0);
    let points = series.iter().flat_map(|s| s.points.iter());
    let tx = |x: f64| {
        if log2_x {
            x.max(f64::MIN_POSITIVE).log2()
        } else {
            x
        }
    };
    let (mut lo_x, mut hi_x, mut max_y) = (f64::INFINITY, f64::NEG_INFINITY, 0.0f64);
    for &(x, m, _, hi) in points {
        lo_x = lo_x.min(tx(x));
        hi_x = hi_x.max(tx(x));
        max_y = max_y.max(hi.max(m));
    }
    if !lo_x.is_finite() || !hi_x.is_finite() {
        (lo_x, hi_x) = (0.0, 1.0);
    }
    if hi_x <= lo_x {
        hi_x = lo_x + 1.0;
    }
    let top_value = y_axis(&mut svg, x0, x1, top, bottom, max_y * 1.08);
    let px = |x: f64| x0 + 10.0 + (x1 - x0 - 20.0) * (tx(x) - lo_x) / (hi_x - lo_x);
    let py = |y: f64| bottom - (bottom - top) * y / top_value;
    // x ticks: every x of the data on a log2 axis, else about eight nice steps.
    let ticks: Vec<f64> = if log2_x {
        let set: BTreeSet<u64> = series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0.to_bits()))
            .collect();
        let mut t: Vec<f64> = set.into_iter().map(f64::from_bits).collect();
        t.sort_by(f64::total_cmp);
        t
    } else {
        let step = nice_step(hi_x - lo_x, 8.0);
        let mut t = Vec::new();
        let mut v = (lo_x / step).ceil() * step;
        while v <= hi_x + step * 1e-9 {
            t.push(v);
            v += step;
        }
        t
    };
    for t in ticks {
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"10\">{}</text>",
            px(t),
            bottom + 14.0,
            format_number(t)
        );
    }
    let _ = writeln!(
        svg,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\
         <text x=\"16\" y=\"{:.1}\" transform=\"rotate(-90 16 {:.1})\" text-anchor=\"middle\">{}</text>",
        (x0 + x1) / 2.0,
        bottom + 32.0,
        escape(x_label),
        (top + bottom) / 2.0,
        (top + bottom) / 2.0,
        escape(y_label)
    );
    for (i, s) in series.iter().enumerate() {
        let c = PALETTE[i % PALETTE.len()];
        if s.points.iter().any(|p| p.3 > p.2) {
            let mut d = String::new();
            for (k, p) in s.points.iter().enumerate() {
                let _ = write!(
                    d,
                    "{}{:.1} {:.1}",
                    if k == 0 { "M" } else { "L" },
                    px(p.0),
                    py(p.3)
                );
            }
            for p in s.points.iter().rev() {
                let _ = write!(d, "L{:.1} {:.1}", px(p.0), py(p.2));
            }
            let _ = writeln!(svg, "<path d=\"{d}Z\" fill=\"{c}\" fill-opacity=\"0.2\"/>");
        }
        let mut d = String::new();
        for (k, p) in s.points.iter().enumerate() {
            let _ = write!(
                d,
                "{}{:.1} {:.1}",
                if k == 0 { "M" } else { "L" },
                px(p.0),
                py(p.1)
            );
        }
        let _ = writeln!(
            svg,
            "<path d=\"{d}\" stroke=\"{c}\" stroke-width=\"2\" fill=\"none\"/>"
        );
        if s.points.len() <= 40 {
            for p in &s.points {
                let _ = writeln!(
                    svg,
                    "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{c}\"><title>{}: {} at {}</title></circle>",
                    px(p.0),
                    py(p.1),
                    escape(&s.name),
                    format_number(p.1),
                    format_number(p.0)
                );
            }
        }
    }
    caption(&mut svg, bottom + 50.0, &lines);
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_escapes() {
        assert_eq!(format_number(1234.6), "1,235");
        assert_eq!(format_number(123456.0), "123,456");
        assert_eq!(format_number(45.67), "45.7");
        assert_eq!(format_number(0.5), "0.500");
        assert_eq!(format_number(0.0), "0");
        assert_eq!(escape("a<b & \"c\""), "a&lt;b &amp; &quot;c&quot;");
        assert_eq!(nice_step(1000.0, 5.0), 200.0);
        assert_eq!(wrap("aa bb cc", 5), vec!["aa bb", "cc"]);
    }
}
