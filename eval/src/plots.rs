//! Plots of a run (plotters): SVG and PNG of every section's figures with the seed's and the
//! model's bound beside reel's, one chart per section.
//!
//! Text is drawn with a TrueType font found on the machine (DejaVu or Liberation Sans) through
//! plotters' `ab_glyph` feature, so no fontconfig or freetype system library is needed; with no
//! font at all the plots are skipped and the report says so.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};

use crate::RunResult;

const FONTS: [&str; 4] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];

fn ensure_font() -> Result<()> {
    static DONE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let ok = *DONE.get_or_init(|| {
        for f in FONTS {
            if let Ok(bytes) = std::fs::read(f) {
                let leaked: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if register_font("sans-serif", FontStyle::Normal, leaked).is_ok() {
                    return true;
                }
            }
        }
        false
    });
    if !ok {
        bail!(
            "no TrueType font found (looked for {}); install fonts-dejavu-core",
            FONTS.join(", ")
        );
    }
    Ok(())
}

fn slug(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    while out.contains("--") {
        out = out.replace("--", "-");
    }
    out.trim_matches('-').chars().take(60).collect()
}

struct Bars {
    title: String,
    labels: Vec<String>,
    /// (series name, colour, values; NaN = absent)
    series: Vec<(&'static str, RGBColor, Vec<f64>)>,
}

fn draw_bars<DB: DrawingBackend>(
    area: DrawingArea<DB, plotters::coord::Shift>,
    b: &Bars,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    area.fill(&WHITE).map_err(|e| anyhow!("{e:?}"))?;
    let n = b.labels.len().max(1);
    let max = b
        .series
        .iter()
        .flat_map(|s| s.2.iter().copied())
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.15;
    let mut chart = ChartBuilder::on(&area)
        .caption(&b.title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(90)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..n as f64, 0f64..max)
        .map_err(|e| anyhow!("{e:?}"))?;
    let labels = b.labels.clone();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.floor() as usize;
            if (x - i as f64 - 0.5).abs() < 0.26 {
                labels.get(i).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .x_label_style(("sans-serif", 11))
        .draw()
        .map_err(|e| anyhow!("{e:?}"))?;
    let k = b.series.len().max(1) as f64;
    let w = 0.8 / k;
    for (si, (name, colour, values)) in b.series.iter().enumerate() {
        let colour = *colour;
        let rects: Vec<Rectangle<(f64, f64)>> = values
            .iter()
            .enumerate()
            .filter(|(_, v)| v.is_finite())
            .map(|(i, v)| {
                let x0 = i as f64 + 0.1 + w * si as f64;
                Rectangle::new([(x0, 0.0), (x0 + w * 0.95, *v)], colour.filled())
            })
            .collect();
        chart
            .draw_series(rects)
            .map_err(|e| anyhow!("{e:?}"))?
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], colour.filled()));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 12))
        .draw()
        .map_err(|e| anyhow!("{e:?}"))?;
    area.present().map_err(|e| anyhow!("{e:?}"))?;
    Ok(())
}

/// Horizontal bars: one labelled row per figure (long labels fit on the left).
fn draw_hbars<DB: DrawingBackend>(
    area: DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    labels: &[String],
    values: &[f64],
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    area.fill(&WHITE).map_err(|e| anyhow!("{e:?}"))?;
    let n = labels.len().max(1);
    let max = values
        .iter()
        .copied()
        .filter(|v| v.is_finite())
        .fold(100.0f64, f64::max)
        * 1.1;
    let mut chart = ChartBuilder::on(&area)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(420)
        .build_cartesian_2d(0f64..max, 0f64..n as f64)
        .map_err(|e| anyhow!("{e:?}"))?;
    let l = labels.to_vec();
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(n * 2 + 1)
        .y_label_formatter(&|y| {
            let i = y.floor() as usize;
            if (y - i as f64 - 0.5).abs() < 0.26 {
                l.get(n - 1 - i.min(n - 1)).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_label_style(("sans-serif", 11))
        .x_desc("% of the model's bound (100 = the model's best)")
        .draw()
        .map_err(|e| anyhow!("{e:?}"))?;
    let blue = RGBColor(31, 119, 180);
    chart
        .draw_series(
            values
                .iter()
                .enumerate()
                .filter(|(_, v)| v.is_finite())
                .map(|(i, v)| {
                    let y = (n - 1 - i) as f64;
                    Rectangle::new([(0.0, y + 0.15), (*v, y + 0.85)], blue.filled())
                }),
        )
        .map_err(|e| anyhow!("{e:?}"))?;
    chart
        .draw_series(std::iter::once(PathElement::new(
            vec![(100.0, 0.0), (100.0, n as f64)],
            BLACK.stroke_width(1),
        )))
        .map_err(|e| anyhow!("{e:?}"))?;
    area.present().map_err(|e| anyhow!("{e:?}"))?;
    Ok(())
}

fn write_both(dir: &Path, name: &str, b: &Bars) -> Result<Vec<PathBuf>> {
    let svg = dir.join(format!("{name}.svg"));
    let png = dir.join(format!("{name}.png"));
    draw_bars(SVGBackend::new(&svg, (1000, 560)).into_drawing_area(), b)
        .with_context(|| format!("drawing {}", svg.display()))?;
    draw_bars(BitMapBackend::new(&png, (1000, 560)).into_drawing_area(), b)
        .with_context(|| format!("drawing {}", png.display()))?;
    Ok(vec![svg, png])
}

/// Draw one chart per section (rows with a common unit), reel beside the seed and the bound.
pub fn draw(r: &RunResult, dir: &Path) -> Result<Vec<PathBuf>> {
    ensure_font()?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut out = Vec::new();
    let mut sections: Vec<&str> = Vec::new();
    for row in &r.rows {
        if !sections.contains(&row.section.as_str()) {
            sections.push(&row.section);
        }
    }
    for sec in sections {
        // The unit most rows of the section use, excluding gate counters.
        let rows: Vec<&crate::row::Row> = r
            .rows
            .iter()
            .filter(|x| {
                x.section == sec
                    && !x.measure.contains("wrong bytes")
                    && !x.measure.contains("not at EOD")
            })
            .collect();
        let mut units: Vec<(&str, usize)> = Vec::new();
        for x in &rows {
            match units.iter_mut().find(|u| u.0 == x.unit) {
                Some(u) => u.1 += 1,
                None => units.push((&x.unit, 1)),
            }
        }
        let Some(&(unit, _)) = units.iter().max_by_key(|u| u.1) else {
            continue;
        };
        let rows: Vec<&&crate::row::Row> = rows.iter().filter(|x| x.unit == unit).collect();
        // A section of one or two figures is in the efficiency chart below, not a chart of its own.
        if rows.len() < 3 {
            continue;
        }
        let b = Bars {
            title: format!("{sec} ({unit}, {})", r.mode),
            labels: rows
                .iter()
                .map(|x| x.measure.chars().take(28).collect())
                .collect(),
            series: vec![
                (
                    "reel",
                    RGBColor(31, 119, 180),
                    rows.iter().map(|x| x.value).collect(),
                ),
                (
                    "seed",
                    RGBColor(214, 39, 40),
                    rows.iter()
                        .map(|x| x.seed_value.unwrap_or(f64::NAN))
                        .collect(),
                ),
                (
                    "model bound",
                    RGBColor(120, 120, 120),
                    rows.iter().map(|x| x.bound.unwrap_or(f64::NAN)).collect(),
                ),
            ],
        };
        out.extend(write_both(dir, &format!("{}-{}", r.mode, slug(sec)), &b)?);
    }
    // Every row with a model bound: reel's efficiency against it.
    let eff: Vec<&crate::row::Row> = r.rows.iter().filter(|x| x.efficiency.is_some()).collect();
    if !eff.is_empty() {
        let labels: Vec<String> = eff
            .iter()
            .map(|x| {
                let sec: String = x.section.chars().take(40).collect();
                let m: String = x.measure.chars().take(26).collect();
                format!("{sec} · {m}")
            })
            .collect();
        let values: Vec<f64> = eff
            .iter()
            .map(|x| x.efficiency.unwrap_or(f64::NAN) * 100.0)
            .collect();
        let title = format!("reel against the model's bound ({})", r.mode);
        let h = 120 + 22 * eff.len() as u32;
        let svg = dir.join(format!("{}-efficiency.svg", r.mode));
        let png = dir.join(format!("{}-efficiency.png", r.mode));
        draw_hbars(
            SVGBackend::new(&svg, (1200, h)).into_drawing_area(),
            &title,
            &labels,
            &values,
        )?;
        draw_hbars(
            BitMapBackend::new(&png, (1200, h)).into_drawing_area(),
            &title,
            &labels,
            &values,
        )?;
        out.push(svg);
        out.push(png);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_are_file_names() {
        assert_eq!(
            slug("Synthetic writer 600 / 250 MB/s"),
            "synthetic-writer-600-250-mb-s"
        );
    }
}
