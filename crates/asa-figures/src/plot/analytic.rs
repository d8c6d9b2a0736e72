//! Fig. 11: the two Affine-Scaled activations phi, needing no data: sigmoid and linear
//! clipping clamp(0.1x + 0.5, 0, 1) (SPEC section 3), and their slopes.

use super::scene::{Axis, Dash, Figure, LegendEntry, Mark, Panel, Swatch};
use super::theme::{Method, MUTED};
use super::{Built, Ctx};
use asa_core::variant::VariantKind;
use plotters::style::RGBColor;

/// sigma(x).
fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// The paper's linear clipping: 0 for x <= -5, 0.1x + 0.5 between, 1 for x >= 5.
pub fn linear_clipping(x: f64) -> f64 {
    (0.1 * x + 0.5).clamp(0.0, 1.0)
}

const SIGMOID: RGBColor = RGBColor(0x3b, 0x52, 0x8b);

/// Fig. 11: phi(x) and phi'(x) for x in [-10, 10], dotted guides at the clipping points.
pub fn fig11_clipping(_ctx: &mut Ctx) -> Built {
    let linear = Method::Variant(VariantKind::AffineScaled)
        .color()
        .unwrap_or(MUTED);
    let xs: Vec<f64> = (0..=400).map(|i| -10.0 + i as f64 * 0.05).collect();
    let curve = |f: &dyn Fn(f64) -> f64| xs.iter().map(|&x| (x, f(x))).collect::<Vec<_>>();
    let line = |points, color, dash| Mark::Line {
        points,
        color,
        width: 2.2,
        dash,
        opacity: 1.0,
        markers: false,
    };
    let guides = || {
        [-5.0, 5.0].map(|x| Mark::VLine {
            x,
            color: MUTED,
            dash: Dash::Dotted,
            width: 1.0,
        })
    };
    let mut value = vec![
        line(curve(&sigmoid), SIGMOID, Dash::Solid),
        line(curve(&linear_clipping), linear, Dash::Solid),
    ];
    value.extend(guides());
    let d_sigmoid = |x: f64| sigmoid(x) * (1.0 - sigmoid(x));
    let d_linear = |x: f64| if x.abs() < 5.0 { 0.1 } else { 0.0 };
    let mut slope = vec![
        line(curve(&d_sigmoid), SIGMOID, Dash::Solid),
        line(curve(&d_linear), linear, Dash::Solid),
    ];
    slope.extend(guides());
    let x = || Axis::new("pre-activation x = wₕ · xᵢ", (-10.0, 10.0));
    let panels = vec![
        Panel {
            title: "scale α = φ(x)".into(),
            x: x(),
            y: Axis::new("α = φ(x)", (-0.04, 1.04)),
            marks: value,
            grid: true,
        },
        Panel {
            title: "slope dφ/dx".into(),
            x: x(),
            y: Axis::new("dφ/dx", (-0.01, 0.27)),
            marks: slope,
            grid: true,
        },
    ];
    let mut f = Figure::new(
        "fig11_clipping",
        "Fig. 11: sigmoid vs linear clipping for the Affine-Scaled α",
        panels,
    );
    f.legend = vec![
        LegendEntry {
            label: "sigmoid σ(x)".into(),
            color: SIGMOID,
            swatch: Swatch::Line(Dash::Solid),
        },
        LegendEntry {
            label: "linear clipping clamp(0.1x + 0.5, 0, 1)".into(),
            color: linear,
            swatch: Swatch::Line(Dash::Solid),
        },
        LegendEntry {
            label: "x = ±5".into(),
            color: MUTED,
            swatch: Swatch::Line(Dash::Dotted),
        },
    ];
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clipping_points() {
        assert_eq!(linear_clipping(-5.0), 0.0);
        assert_eq!(linear_clipping(0.0), 0.5); // 0.1 * 0 + 0.5
        assert_eq!(linear_clipping(5.0), 1.0);
        assert_eq!(linear_clipping(12.0), 1.0);
        assert_eq!(sigmoid(0.0), 0.5);
    }
}
