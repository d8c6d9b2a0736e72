//! A figure as plain data: panels of marks in data coordinates, a legend, an optional
//! colour bar. Figure builders only produce a [`Figure`]; [`super::render`] draws it with
//! plotters, to SVG and PNG alike, so layout rules live in one place and tests can check
//! a figure's content without parsing its drawing.

use plotters::style::RGBColor;

/// Line dash pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dash {
    /// Continuous.
    Solid,
    /// Long dashes (mean lines).
    Dashed,
    /// Short dashes (median lines, guides).
    Dotted,
}

/// Point marker shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Filled circle.
    Dot,
    /// Hollow circle.
    Ring,
    /// Filled triangle.
    Triangle,
    /// Diagonal cross.
    Cross,
}

/// One thing drawn in a panel, in data coordinates.
#[derive(Debug, Clone)]
pub enum Mark {
    /// A polyline; a non-finite point is a gap in it. `markers` adds a dot per point.
    Line {
        points: Vec<(f64, f64)>,
        color: RGBColor,
        width: f64,
        dash: Dash,
        opacity: f64,
        markers: bool,
    },
    /// A filled area between `upper` and `lower` (same x order), e.g. mean ± std.
    Band {
        upper: Vec<(f64, f64)>,
        lower: Vec<(f64, f64)>,
        color: RGBColor,
    },
    /// Filled rectangles `(x0, y0, x1, y1)` of one colour (bars).
    Rects {
        rects: Vec<(f64, f64, f64, f64)>,
        color: RGBColor,
    },
    /// Filled rectangles with their own colours (heatmap cells).
    Cells {
        cells: Vec<((f64, f64, f64, f64), RGBColor)>,
    },
    /// A vertical line across the whole panel.
    VLine {
        x: f64,
        color: RGBColor,
        dash: Dash,
        width: f64,
    },
    /// Markers.
    Points {
        points: Vec<(f64, f64)>,
        color: RGBColor,
        shape: Shape,
        size: f64,
    },
    /// A text at a data position, centred on it.
    Text {
        x: f64,
        y: f64,
        text: String,
        color: RGBColor,
    },
}

impl Mark {
    /// A solid line of width 2 with markers when it has few points.
    pub fn line(points: Vec<(f64, f64)>, color: RGBColor) -> Mark {
        let markers = points.len() <= 40;
        Mark::Line {
            points,
            color,
            width: 2.0,
            dash: Dash::Solid,
            opacity: 1.0,
            markers,
        }
    }
}

/// One axis of a panel.
#[derive(Debug, Clone)]
pub struct Axis {
    /// Axis title with units, e.g. `attention entropy (nats)`.
    pub label: String,
    /// Shown range (lo < hi).
    pub range: (f64, f64),
    /// Ticks only at integers (layers, heads, positions).
    pub integer: bool,
    /// Values grow downwards / leftwards (matrix rows).
    pub reversed: bool,
    /// Ticks below this value get no label (room left of key 0 for the sink bar).
    pub hide_below: Option<f64>,
    /// The values are log10 of the data: ticks are labelled with 10^v.
    pub log10: bool,
}

impl Axis {
    /// A continuous axis.
    pub fn new(label: impl Into<String>, range: (f64, f64)) -> Axis {
        Axis {
            label: label.into(),
            range,
            integer: false,
            reversed: false,
            hide_below: None,
            log10: false,
        }
    }

    /// An axis of integer positions.
    pub fn integer(label: impl Into<String>, range: (f64, f64)) -> Axis {
        Axis {
            integer: true,
            ..Axis::new(label, range)
        }
    }
}

/// One chart of a figure.
#[derive(Debug, Clone)]
pub struct Panel {
    /// Caption above the chart (usually the model label).
    pub title: String,
    pub x: Axis,
    pub y: Axis,
    pub marks: Vec<Mark>,
    /// Grid lines (off for heatmaps).
    pub grid: bool,
}

/// What a legend entry shows beside its label.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Swatch {
    /// A line sample.
    Line(Dash),
    /// A filled square.
    Patch,
    /// A marker.
    Marker(Shape),
}

/// One legend entry.
#[derive(Debug, Clone)]
pub struct LegendEntry {
    pub label: String,
    pub color: RGBColor,
    pub swatch: Swatch,
}

/// A viridis colour bar shared by all panels.
#[derive(Debug, Clone)]
pub struct ColorBar {
    /// Bar title with units.
    pub label: String,
    /// Values at the bottom and top of the bar.
    pub range: (f64, f64),
}

/// A whole figure, written as `<name>.png` and `<name>.svg`.
#[derive(Debug, Clone)]
pub struct Figure {
    /// File stem, e.g. `fig4_first_token`.
    pub name: String,
    /// Title above all panels.
    pub title: String,
    pub panels: Vec<Panel>,
    /// Panels per row.
    pub columns: usize,
    /// Logical size of one panel.
    pub panel_size: (u32, u32),
    /// Shared legend, drawn beside the panels (never over data).
    pub legend: Vec<LegendEntry>,
    pub colorbar: Option<ColorBar>,
}

/// A figure's words: its file name `fig`, its `title`, and the label of the axis its
/// values are read on (`value_label`: the y axis, or the colour bar).
#[derive(Debug, Clone, Copy)]
pub struct FigureText<'a> {
    pub fig: &'a str,
    pub title: &'a str,
    pub value_label: &'a str,
}

impl Figure {
    /// A figure with panels laid out in up to three columns.
    pub fn new(name: &str, title: impl Into<String>, panels: Vec<Panel>) -> Figure {
        let columns = panels.len().clamp(1, 3);
        Figure {
            name: name.to_string(),
            title: title.into(),
            panels,
            columns,
            panel_size: (440, 330),
            legend: Vec::new(),
            colorbar: None,
        }
    }
}

/// A range that shows `values` with a margin: never empty, never NaN. `include_zero`
/// anchors bars and weights at 0.
pub fn fit_range(values: impl IntoIterator<Item = f64>, include_zero: bool) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.into_iter().filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    if include_zero {
        lo = lo.min(0.0);
        hi = hi.max(0.0);
    }
    let span = hi - lo;
    if span <= 1e-12 * hi.abs().max(lo.abs()).max(1e-300) {
        let pad = if hi.abs() > 0.0 { hi.abs() * 0.05 } else { 0.5 };
        return if include_zero && lo == 0.0 && hi == 0.0 {
            (0.0, 1.0)
        } else {
            (lo - pad, hi + pad)
        };
    }
    let pad = span * 0.06;
    let lo = if include_zero && lo == 0.0 {
        0.0
    } else {
        lo - pad
    };
    let hi = if include_zero && hi == 0.0 {
        0.0
    } else {
        hi + pad
    };
    (lo, hi)
}

/// The range of integer positions `lo..=hi` with half a cell each side.
pub fn int_range(values: impl IntoIterator<Item = f64>) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.into_iter().filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return (0.5, 1.5);
    }
    (lo - 0.5, hi + 0.5)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_never_empty() {
        assert_eq!(fit_range([], false), (0.0, 1.0));
        assert_eq!(fit_range([f64::NAN], true), (0.0, 1.0));
        let (lo, hi) = fit_range([1.0, 1.0], false);
        assert!(lo < 1.0 && hi > 1.0);
        let (lo, hi) = fit_range([0.0], true);
        assert_eq!((lo, hi), (0.0, 1.0));
        let (lo, hi) = fit_range([0.2, 0.8], true);
        assert_eq!(lo, 0.0);
        assert!(hi > 0.8);
        assert_eq!(int_range([3.0]), (2.5, 3.5));
    }
}
