//! PNG bar charts beside the report (plotters, DejaVu Sans through ab_glyph: no system
//! font libraries).

use std::path::Path;

use anyhow::{Context, Result, anyhow};
use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};

const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

/// Registers the font once; Err says why plots cannot have text here.
pub fn init_font() -> Result<()> {
    let bytes = std::fs::read(FONT).with_context(|| format!("reading {FONT}"))?;
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    register_font("sans-serif", FontStyle::Normal, bytes)
        .map_err(|_| anyhow!("{FONT} is not a usable font"))
}

/// A horizontal bar chart of `(label, value)` with `title` and the value axis `unit`.
pub fn bars(path: &Path, title: &str, unit: &str, data: &[(String, f64)]) -> Result<()> {
    let max = data.iter().map(|d| d.1).fold(0.0, f64::max).max(1e-9) * 1.15;
    let height = 120 + 44 * data.len() as u32;
    let root = BitMapBackend::new(path, (900, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(330)
        .build_cartesian_2d(0.0..max, (0..data.len()).into_segmented())
        .map_err(|e| anyhow!("{e}"))?;
    chart
        .configure_mesh()
        .x_desc(unit)
        .y_labels(data.len())
        .y_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) => data.get(*i).map(|d| d.0.clone()).unwrap_or_default(),
            _ => String::new(),
        })
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    chart
        .draw_series(data.iter().enumerate().map(|(i, (_, v))| {
            let mut bar = Rectangle::new(
                [
                    (0.0, SegmentValue::Exact(i)),
                    (*v, SegmentValue::Exact(i + 1)),
                ],
                Palette99::pick(i).filled(),
            );
            bar.set_margin(6, 6, 0, 0);
            bar
        }))
        .map_err(|e| anyhow!("{e}"))?;
    root.present().map_err(|e| anyhow!("{e}"))?;
    Ok(())
}
