//! Draws a [`Figure`] with plotters: title, a grid of panels, then a side column with the
//! colour bar and the legend, so a legend never covers data. The same code draws SVG
//! (1 px per logical px) and PNG (2 px per logical px).

use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::raster;
use super::scene::{ColorBar, Dash, Figure, LegendEntry, Mark, Panel, Shape, Swatch};
use super::theme::{
    self, bold_width, text_width, Theme, AXIS, CAPTION, GRID, INK, LEGEND, MISSING, TICK, TITLE,
};
use asa_core::error::{Error, Result};

type Drawn<DB> = std::result::Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

/// Logical widths of the side column parts.
const COLORBAR_BAR_W: f64 = 22.0;
const LEGEND_PAD: f64 = 16.0;
const SWATCH_W: f64 = 30.0;
const TITLE_H: f64 = 40.0;

/// Logical size of the whole figure and of its parts.
struct Layout {
    rows: usize,
    cols: usize,
    panels_w: f64,
    colorbar_w: f64,
    legend_w: f64,
    width: f64,
    height: f64,
}

fn layout(fig: &Figure) -> Layout {
    let cols = fig.columns.max(1);
    let rows = fig.panels.len().max(1).div_ceil(cols);
    let (pw, ph) = (fig.panel_size.0 as f64, fig.panel_size.1 as f64);
    let panels_w = pw * cols as f64;
    let legend_w = if fig.legend.is_empty() {
        0.0
    } else {
        let widest = fig
            .legend
            .iter()
            .map(|e| text_width(&e.label, LEGEND))
            .fold(0.0, f64::max);
        widest + SWATCH_W + 3.0 * LEGEND_PAD
    };
    let colorbar_w = fig
        .colorbar
        .as_ref()
        .map_or(0.0, |cb| COLORBAR_BAR_W + colorbar_labels_w(cb) + 20.0);
    let title_w = bold_width(&fig.title, TITLE) + 40.0;
    let width = (panels_w + colorbar_w + legend_w).max(title_w);
    Layout {
        rows,
        cols,
        panels_w,
        colorbar_w,
        legend_w,
        width,
        height: TITLE_H + ph * rows as f64,
    }
}

/// The figure as an SVG document.
pub fn to_svg(fig: &Figure) -> Result<String> {
    theme::ensure_fonts()?;
    let th = Theme::SVG;
    let l = layout(fig);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (th.upx(l.width), th.upx(l.height)))
            .into_drawing_area();
        draw_figure(&root, fig, &th, &l).map_err(|e| failed(fig, "svg", e))?;
        root.present().map_err(|e| failed(fig, "svg", e))?;
    }
    Ok(svg)
}

/// The figure as PNG bytes (8-bit RGB).
pub fn to_png(fig: &Figure) -> Result<Vec<u8>> {
    theme::ensure_fonts()?;
    let th = Theme::PNG;
    let l = layout(fig);
    let (w, h) = (th.upx(l.width), th.upx(l.height));
    let mut pixels = vec![255u8; w as usize * h as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut pixels, (w, h)).into_drawing_area();
        draw_figure(&root, fig, &th, &l).map_err(|e| failed(fig, "png", e))?;
        root.present().map_err(|e| failed(fig, "png", e))?;
    }
    let mut bytes = Vec::new();
    let mut encoder = png::Encoder::new(&mut bytes, w, h);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    // 2 px per logical px at 72 logical px per inch: 144 dpi.
    encoder.set_pixel_dims(Some(png::PixelDimensions {
        xppu: 5669,
        yppu: 5669,
        unit: png::Unit::Meter,
    }));
    let encoded = encoder
        .write_header()
        .and_then(|mut w| w.write_image_data(&pixels).and_then(|()| w.finish()));
    encoded.map_err(|e| Error::invalid(format!("{}.png", fig.name), "cannot encode", e))?;
    Ok(bytes)
}

fn failed(fig: &Figure, ext: &str, e: impl Into<asa_core::error::BoxError>) -> Error {
    Error::invalid(format!("{}.{ext}", fig.name), "cannot draw figure", e)
}

fn draw_figure<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    fig: &Figure,
    th: &Theme,
    l: &Layout,
) -> Drawn<DB> {
    root.fill(&WHITE)?;
    let (title, body) = root.split_vertically(th.px(TITLE_H));
    let (tw, th_px) = title.dim_in_pixel();
    title.draw(&Text::new(
        fig.title.clone(),
        (tw as i32 / 2, th_px as i32 / 2),
        th.bold(TITLE)
            .color(&INK)
            .pos(Pos::new(HPos::Center, VPos::Center)),
    ))?;
    // A title wider than the panels widens the figure: centre the content under it.
    let content_w = l.panels_w + l.colorbar_w + l.legend_w;
    let body = body.margin(0, 0, th.px(((l.width - content_w) / 2.0).max(0.0)), 0);
    let (panels, side) = body.split_horizontally(th.px(l.panels_w));
    let cells = panels.split_evenly((l.rows, l.cols));
    for (panel, area) in fig.panels.iter().zip(&cells) {
        draw_panel(area, panel, th)?;
    }
    let mut side = side;
    if let Some(cb) = &fig.colorbar {
        let (bar, rest) = side.split_horizontally(th.px(l.colorbar_w));
        draw_colorbar(&bar, cb, th, fig.panel_size.1 as f64 * l.rows as f64)?;
        side = rest;
    }
    if !fig.legend.is_empty() {
        let (legend, _) = side.split_horizontally(th.px(l.legend_w));
        draw_legend(&legend, &fig.legend, th)?;
    }
    Ok(())
}

/// Decimals that tell ticks `span / n` apart, trailing zeros trimmed; `12k` for large
/// integers.
fn tick_label(v: f64, span: f64, n: usize, integer: bool) -> String {
    if integer {
        return if (v - v.round()).abs() < 1e-6 {
            format!("{}", v.round() as i64)
        } else {
            String::new()
        };
    }
    let step = (span / n.max(1) as f64).abs();
    if v.abs() >= 1e4 && step >= 500.0 {
        let k = v / 1000.0;
        return trim(format!("{k:.1}")) + "k";
    }
    let decimals = if step > 0.0 {
        (-step.log10()).ceil().clamp(0.0, 8.0) as usize + 1
    } else {
        3
    };
    let s = trim(format!("{v:.decimals$}"));
    if s == "-0" {
        "0".into()
    } else {
        s
    }
}

/// The value a tick of a log10 axis stands for, three significant digits (`0.5`, `2`,
/// `31.6`, `1e+04`).
fn log_tick_label(v: f64) -> String {
    let x = 10f64.powf(v);
    if !(1e-3..1e4).contains(&x) {
        return format!("{x:.0e}");
    }
    let decimals = (2 - x.log10().floor() as i32).clamp(0, 5) as usize;
    trim(format!("{x:.decimals$}"))
}

fn trim(s: String) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Number of tick labels to ask plotters for.
fn tick_count(range: (f64, f64), integer: bool, len_px: f64) -> usize {
    let by_space = (len_px / 34.0).clamp(3.0, 10.0) as usize;
    if integer {
        let n = (range.1 - range.0).round().max(1.0) as usize;
        n.min(by_space.max(2))
    } else {
        by_space
    }
}

/// A line style; opacity is blended with the white background up front, so overlapping
/// segments of one faint line do not darken each other.
fn stroke(color: RGBColor, opacity: f64, width: f64, th: &Theme) -> ShapeStyle {
    let o = opacity.clamp(0.0, 1.0);
    let blend = |v: u8| (v as f64 * o + 255.0 * (1.0 - o)).round() as u8;
    ShapeStyle {
        color: RGBColor(blend(color.0), blend(color.1), blend(color.2)).to_rgba(),
        filled: false,
        stroke_width: th.upx(width).max(1),
    }
}

/// A rectangle `(x0, y0, x1, y1)` in data coordinates.
type Rect = (f64, f64, f64, f64);

/// A plotters chart over `f64 x f64` data coordinates.
type Chart<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// Draws one panel: its chart with axes and grid, then its marks in order.
fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    p: &Panel,
    th: &Theme,
) -> Drawn<DB> {
    let axes = PanelAxes::new(area, p, th);
    let mut chart = panel_chart(area, &axes, th)?;
    draw_mesh(&mut chart, &axes, th)?;
    let mut canvas = Canvas {
        area,
        chart,
        axes,
        th,
    };
    for mark in &p.marks {
        canvas.mark(mark)?;
    }
    Ok(())
}

/// A panel's axes as drawn: the ranges (a reversed y axis is negated, so that it grows
/// downwards) and the number of ticks each asks for.
struct PanelAxes<'p> {
    p: &'p Panel,
    /// The drawn x range.
    x: (f64, f64),
    /// The drawn y range: `-hi..-lo` when the y axis is reversed.
    y: (f64, f64),
    /// Tick labels to ask plotters for on x.
    nx: usize,
    /// Tick labels to ask plotters for on y.
    ny: usize,
}

impl<'p> PanelAxes<'p> {
    /// The axes of `p`, ticks spaced for the size of `area`.
    fn new<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, p: &'p Panel, th: &Theme) -> Self {
        let y = if p.y.reversed {
            (-p.y.range.1, -p.y.range.0)
        } else {
            p.y.range
        };
        let (w, h) = area.dim_in_pixel();
        let (w, h) = (w as f64 / th.scale, h as f64 / th.scale);
        PanelAxes {
            p,
            x: p.x.range,
            y,
            nx: tick_count(p.x.range, p.x.integer, w - 90.0),
            ny: tick_count(p.y.range, p.y.integer, h - 90.0),
        }
    }

    /// A data y on the drawn axis, or a drawn y in data units: negated when reversed.
    fn flip(&self, v: f64) -> f64 {
        if self.p.y.reversed {
            -v
        } else {
            v
        }
    }

    /// The label of x tick `v`; none below the axis' `hide_below`.
    fn x_label(&self, v: &f64) -> String {
        let x = &self.p.x;
        if x.hide_below.is_some_and(|h| *v < h) {
            String::new()
        } else {
            tick_label(*v, self.x.1 - self.x.0, self.nx, x.integer)
        }
    }

    /// The label of drawn y tick `v`, in data units.
    fn y_label(&self, v: &f64) -> String {
        let y = &self.p.y;
        match y.log10 {
            true => log_tick_label(self.flip(*v)),
            false => tick_label(self.flip(*v), self.y.1 - self.y.0, self.ny, y.integer),
        }
    }

    /// Width of the widest y tick label, sampled at five points of the range.
    fn y_labels_w(&self) -> f64 {
        let (y0, y1) = self.y;
        let yspan = y1 - y0;
        [
            y0,
            y1,
            (y0 + y1) / 2.0,
            y0 + yspan * 0.25,
            y0 + yspan * 0.75,
        ]
        .iter()
        .map(|v| text_width(&self.y_label(v), TICK))
        .fold(0.0, f64::max)
    }

    /// The finite points of `pts`, y on the drawn axis.
    fn finite(&self, pts: &[(f64, f64)]) -> Vec<(f64, f64)> {
        pts.iter()
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .map(|&(x, y)| (x, self.flip(y)))
            .collect()
    }
}

/// The panel's chart: caption, margins, and label areas with room for the widest y tick
/// label plus the rotated axis title.
fn panel_chart<'a, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    axes: &PanelAxes,
    th: &Theme,
) -> std::result::Result<Chart<'a, DB>, DrawingAreaErrorKind<DB::ErrorType>> {
    let p = axes.p;
    let mut builder = ChartBuilder::on(area);
    if !p.title.is_empty() {
        builder.caption(&p.title, th.bold(CAPTION).color(&INK));
    }
    builder
        .margin_top(th.px(if p.title.is_empty() { 14.0 } else { 4.0 }))
        .margin_bottom(th.px(6.0))
        .margin_left(th.px(6.0))
        .margin_right(th.px(18.0))
        .x_label_area_size(th.px(TICK + AXIS + 22.0))
        .y_label_area_size(th.px(axes.y_labels_w() + AXIS + 20.0))
        .build_cartesian_2d(axes.x.0..axes.x.1, axes.y.0..axes.y.1)
}

/// The panel's axes, tick labels, axis titles and (unless it has none) grid lines.
fn draw_mesh<DB: DrawingBackend>(
    chart: &mut Chart<'_, DB>,
    axes: &PanelAxes,
    th: &Theme,
) -> Drawn<DB> {
    let p = axes.p;
    let x_fmt = |v: &f64| axes.x_label(v);
    let y_fmt = |v: &f64| axes.y_label(v);
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(p.x.label.as_str())
        .y_desc(p.y.label.as_str())
        .x_labels(axes.nx)
        .y_labels(axes.ny)
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .label_style(th.text(TICK, INK))
        .axis_desc_style(th.text(AXIS, INK))
        .axis_style(stroke(INK, 1.0, 1.0, th))
        .bold_line_style(stroke(GRID, 1.0, 1.0, th))
        .light_line_style(TRANSPARENT)
        .set_all_tick_mark_size(th.px(4.0));
    if !p.grid {
        mesh.disable_mesh();
    }
    mesh.draw()
}

/// A panel ready for its marks: its area, chart, axes and the theme.
struct Canvas<'a, 'p, DB: DrawingBackend> {
    area: &'a DrawingArea<DB, Shift>,
    chart: Chart<'a, DB>,
    axes: PanelAxes<'p>,
    th: &'p Theme,
}

impl<DB: DrawingBackend> Canvas<'_, '_, DB> {
    /// Draws one mark.
    fn mark(&mut self, mark: &Mark) -> Drawn<DB> {
        match mark {
            Mark::Line {
                points,
                color,
                width,
                dash,
                opacity,
                markers,
            } => {
                self.line(points, stroke(*color, *opacity, *width, self.th), *dash)?;
                if *markers {
                    self.line_markers(points, *color, *opacity, *width)?;
                }
                Ok(())
            }
            Mark::Band {
                upper,
                lower,
                color,
            } => self.band(upper, lower, *color),
            Mark::Rects { rects, color } => self.rects(rects, *color),
            Mark::Cells { cells } => self.cells(cells),
            Mark::VLine {
                x,
                color,
                dash,
                width,
            } => self.vline(*x, *color, *dash, *width),
            Mark::Points {
                points,
                color,
                shape,
                size,
            } => self.points(points, *color, *shape, *size),
            Mark::Text { x, y, text, color } => self.text(*x, *y, text, *color),
        }
    }

    /// A polyline; a non-finite point is a gap: the line stops there and starts again
    /// after it.
    fn line(&mut self, points: &[(f64, f64)], style: ShapeStyle, dash: Dash) -> Drawn<DB> {
        for run in points.split(|p| !(p.0.is_finite() && p.1.is_finite())) {
            let pts: Vec<(f64, f64)> = run.iter().map(|&(x, y)| (x, self.axes.flip(y))).collect();
            self.run(pts, style, dash)?;
        }
        Ok(())
    }

    /// One unbroken piece of a polyline, in drawn coordinates.
    fn run(&mut self, pts: Vec<(f64, f64)>, style: ShapeStyle, dash: Dash) -> Drawn<DB> {
        match dash {
            Dash::Solid if self.th.bitmap && style.stroke_width > 1 => {
                let px = to_pixels(&self.chart, &pts);
                let spans = raster::thick_polyline(&px, style.stroke_width as f64);
                fill_spans(self.area, &self.chart, &spans, style.color)?;
            }
            Dash::Solid => {
                self.chart.draw_series(LineSeries::new(pts, style))?;
            }
            Dash::Dashed | Dash::Dotted => {
                let (on, off) = dash_pattern(dash, self.th);
                self.chart
                    .draw_series(DashedLineSeries::new(pts, on, off, style))?;
            }
        }
        Ok(())
    }

    /// A dot on every finite point of a line, sized by the line's width.
    fn line_markers(
        &mut self,
        points: &[(f64, f64)],
        color: RGBColor,
        opacity: f64,
        width: f64,
    ) -> Drawn<DB> {
        let th = self.th;
        let pts = self.axes.finite(points);
        let r = th.px(width + 1.5);
        self.chart.draw_series(
            pts.iter()
                .map(|&c| Circle::new(c, r, stroke(color, opacity, 1.0, th).filled())),
        )?;
        Ok(())
    }

    /// The area between `upper` and `lower`, light (drawn only with three points or
    /// more).
    fn band(&mut self, upper: &[(f64, f64)], lower: &[(f64, f64)], color: RGBColor) -> Drawn<DB> {
        let mut poly = self.axes.finite(upper);
        let mut low = self.axes.finite(lower);
        low.reverse();
        poly.extend(low);
        if poly.len() >= 3 && self.th.bitmap {
            let spans = raster::polygon(&to_pixels(&self.chart, &poly));
            fill_spans(self.area, &self.chart, &spans, color.mix(0.18))?;
        } else if poly.len() >= 3 {
            self.chart.draw_series(std::iter::once(Polygon::new(
                poly,
                color.mix(0.18).filled(),
            )))?;
        }
        Ok(())
    }

    /// Filled rectangles of one colour; one with a non-finite corner is left out.
    fn rects(&mut self, rects: &[Rect], color: RGBColor) -> Drawn<DB> {
        let flip = |v: f64| self.axes.flip(v);
        self.chart.draw_series(
            rects
                .iter()
                .filter(|r| [r.0, r.1, r.2, r.3].iter().all(|v| v.is_finite()))
                .map(|r| Rectangle::new([(r.0, flip(r.1)), (r.2, flip(r.3))], color.filled())),
        )?;
        Ok(())
    }

    /// Filled rectangles, each in its own colour.
    fn cells(&mut self, cells: &[(Rect, RGBColor)]) -> Drawn<DB> {
        let flip = |v: f64| self.axes.flip(v);
        self.chart.draw_series(
            cells
                .iter()
                .map(|(r, c)| Rectangle::new([(r.0, flip(r.1)), (r.2, flip(r.3))], c.filled())),
        )?;
        Ok(())
    }

    /// A vertical line from the bottom to the top of the chart (none at a non-finite x).
    fn vline(&mut self, x: f64, color: RGBColor, dash: Dash, width: f64) -> Drawn<DB> {
        if x.is_finite() {
            let (y0, y1) = self.axes.y;
            let pts = vec![(x, y0), (x, y1)];
            let style = stroke(color, 1.0, width, self.th);
            if dash == Dash::Solid {
                self.chart.draw_series(LineSeries::new(pts, style))?;
            } else {
                let (on, off) = dash_pattern(dash, self.th);
                self.chart
                    .draw_series(DashedLineSeries::new(pts, on, off, style))?;
            }
        }
        Ok(())
    }

    /// A marker of `shape` on every finite point.
    fn points(&mut self, points: &[(f64, f64)], c: RGBColor, shape: Shape, size: f64) -> Drawn<DB> {
        let th = self.th;
        let pts = self.axes.finite(points);
        let r = th.px(size);
        let chart = &mut self.chart;
        match shape {
            Shape::Dot => {
                chart.draw_series(pts.iter().map(|&p| Circle::new(p, r, c.filled())))?;
            }
            Shape::Ring => {
                let s = stroke(c, 1.0, 1.5, th);
                chart.draw_series(pts.iter().map(|&p| Circle::new(p, r, s)))?;
            }
            Shape::Triangle => {
                chart.draw_series(
                    pts.iter()
                        .map(|&p| TriangleMarker::new(p, r + 1, c.filled())),
                )?;
            }
            Shape::Cross => {
                let s = stroke(c, 1.0, 1.5, th);
                chart.draw_series(pts.iter().map(|&p| Cross::new(p, r, s)))?;
            }
        }
        Ok(())
    }

    /// A text centred on a data position (none at a non-finite one).
    fn text(&mut self, x: f64, y: f64, text: &str, color: RGBColor) -> Drawn<DB> {
        if x.is_finite() && y.is_finite() {
            self.chart.draw_series(std::iter::once(Text::new(
                text.to_string(),
                (x, self.axes.flip(y)),
                self.th
                    .text(LEGEND, color)
                    .pos(Pos::new(HPos::Center, VPos::Center)),
            )))?;
        }
        Ok(())
    }
}

/// Data points in device pixels (absolute, sub-pixel) of `chart`'s plotting area.
fn to_pixels<DB: DrawingBackend>(chart: &Chart<'_, DB>, pts: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let area = chart.plotting_area();
    let (xr, yr) = area.get_pixel_range();
    let (cx, cy) = (area.get_x_range(), area.get_y_range());
    let fx = (xr.end - xr.start - 1) as f64 / (cx.end - cx.start);
    let fy = (yr.end - yr.start - 1) as f64 / (cy.end - cy.start);
    pts.iter()
        .map(|&(x, y)| {
            (
                // + 0.5: plotters' pixel i covers [i, i + 1)
                xr.start as f64 + (x - cx.start) * fx + 0.5,
                yr.start as f64 + (cy.end - y) * fy + 0.5,
            )
        })
        .collect()
}

/// Fills pixel rows (absolute device pixels) clipped to the plotting area of `chart`,
/// drawn on the panel's `area`.
fn fill_spans<DB: DrawingBackend, C: Color>(
    area: &DrawingArea<DB, Shift>,
    chart: &Chart<'_, DB>,
    spans: &[raster::Span],
    color: C,
) -> Drawn<DB> {
    let (xr, yr) = chart.plotting_area().get_pixel_range();
    let (bx, by) = area.get_base_pixel();
    let style = color.filled();
    for &(y, x0, x1) in spans {
        let (x0, x1) = (x0.max(xr.start), x1.min(xr.end - 1));
        if !yr.contains(&y) || x0 > x1 {
            continue;
        }
        area.draw(&Rectangle::new(
            [(x0 - bx, y - by), (x1 - bx + 1, y - by + 1)],
            style,
        ))?;
    }
    Ok(())
}

fn dash_pattern(dash: Dash, th: &Theme) -> (i32, i32) {
    match dash {
        Dash::Dashed => (th.px(8.0), th.px(5.0)),
        _ => (th.px(2.5), th.px(3.5)),
    }
}

/// Width of the colour bar's tick labels and rotated title.
fn colorbar_labels_w(cb: &ColorBar) -> f64 {
    let (lo, hi) = cb.range;
    let widest = [lo, hi, (lo + hi) / 2.0, lo + (hi - lo) * 0.2]
        .iter()
        .map(|v| text_width(&tick_label(*v, hi - lo, 6, false), TICK))
        .fold(0.0, f64::max);
    widest + AXIS + 22.0
}

fn draw_colorbar<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    cb: &ColorBar,
    th: &Theme,
    panels_h: f64,
) -> Drawn<DB> {
    // Align the bar with the plotting areas of the panels (caption above, ticks below).
    let (lo, hi) = if cb.range.0 < cb.range.1 {
        cb.range
    } else {
        (cb.range.0 - 0.5, cb.range.0 + 0.5)
    };
    let top = CAPTION + 16.0;
    let bottom = TICK + AXIS + 28.0;
    let height = (panels_h - top - bottom).max(40.0);
    let mut chart = ChartBuilder::on(area)
        .margin_top(th.px(top))
        .margin_bottom(th.px((panels_h - top - height).max(0.0)))
        .margin_left(th.px(4.0))
        .margin_right(th.px(10.0))
        .y_label_area_size(th.px(0.0))
        .right_y_label_area_size(th.px(colorbar_labels_w(cb)))
        .build_cartesian_2d(0f64..1f64, lo..hi)?;
    let ny = 6;
    let span = hi - lo;
    let fmt = |v: &f64| tick_label(*v, span, ny, false);
    chart
        .configure_mesh()
        .disable_mesh()
        .disable_x_axis()
        .y_labels(ny)
        .y_label_formatter(&fmt)
        .y_desc(cb.label.as_str())
        .label_style(th.text(TICK, INK))
        .axis_desc_style(th.text(AXIS, INK))
        .axis_style(stroke(INK, 1.0, 1.0, th))
        .set_all_tick_mark_size(th.px(4.0))
        .draw()?;
    let steps = 128;
    chart.draw_series((0..steps).map(|i| {
        let a = lo + span * i as f64 / steps as f64;
        let b = lo + span * (i + 1) as f64 / steps as f64;
        let t = (i as f64 + 0.5) / steps as f64;
        Rectangle::new([(0.0, a), (1.0, b)], theme::viridis(t).filled())
    }))?;
    Ok(())
}

fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    entries: &[LegendEntry],
    th: &Theme,
) -> Drawn<DB> {
    let x = th.px(LEGEND_PAD);
    let row = th.px(LEGEND + 10.0);
    let mut y = th.px(CAPTION + 30.0);
    let box_w = area.dim_in_pixel().0 as i32 - th.px(LEGEND_PAD);
    let box_h = row * entries.len() as i32 + th.px(10.0);
    area.draw(&Rectangle::new(
        [
            (th.px(LEGEND_PAD * 0.4), y - row / 2 - th.px(5.0)),
            (box_w, y - row / 2 + box_h - th.px(5.0)),
        ],
        stroke(MISSING, 1.0, 1.0, th),
    ))?;
    for e in entries {
        let sw = th.px(SWATCH_W);
        match e.swatch {
            Swatch::Line(Dash::Solid) => {
                area.draw(&PathElement::new(
                    vec![(x, y), (x + sw, y)],
                    stroke(e.color, 1.0, 2.5, th),
                ))?;
            }
            Swatch::Line(dash) => {
                let (on, off) = dash_pattern(dash, th);
                area.draw(&DashedPathElement::new(
                    vec![(x, y), (x + sw, y)],
                    on,
                    off,
                    stroke(e.color, 1.0, 2.0, th),
                ))?;
            }
            Swatch::Patch => {
                let half = th.px(LEGEND * 0.45);
                area.draw(&Rectangle::new(
                    [(x + sw / 2 - half, y - half), (x + sw / 2 + half, y + half)],
                    e.color.filled(),
                ))?;
            }
            Swatch::Marker(shape) => {
                let r = th.px(4.5);
                let c = (x + sw / 2, y);
                match shape {
                    Shape::Dot => area.draw(&Circle::new(c, r, e.color.filled()))?,
                    Shape::Ring => area.draw(&Circle::new(c, r, stroke(e.color, 1.0, 1.5, th)))?,
                    Shape::Triangle => {
                        area.draw(&TriangleMarker::new(c, r + 1, e.color.filled()))?
                    }
                    Shape::Cross => area.draw(&Cross::new(c, r, stroke(e.color, 1.0, 1.5, th)))?,
                }
            }
        }
        let nudge = if th.bitmap { th.px(1.5) } else { 0 };
        area.draw(&Text::new(
            e.label.clone(),
            (x + sw + th.px(8.0), y + nudge),
            th.text(LEGEND, INK).pos(Pos::new(HPos::Left, VPos::Center)),
        ))?;
        y += row;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_labels_are_short_and_distinct() {
        assert_eq!(tick_label(0.30000000000000004, 1.0, 5, false), "0.3");
        assert_eq!(log_tick_label(0.0), "1");
        assert_eq!(log_tick_label(0.5), "3.16");
        assert_eq!(log_tick_label(-1.0), "0.1");
        assert_eq!(tick_label(-0.0, 1.0, 5, false), "0");
        assert_eq!(tick_label(12000.0, 10000.0, 5, false), "12k");
        assert_eq!(tick_label(2.0, 10.0, 5, true), "2");
        assert_eq!(tick_label(2.5, 10.0, 5, true), "");
        assert_eq!(tick_label(0.0025, 0.01, 5, false), "0.0025");
    }
}
