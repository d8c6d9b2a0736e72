//! The one look of every figure: a fixed colour per attention method (chosen from the
//! model label), a perceptual colour map (viridis) for heatmaps, font sizes, and the
//! DejaVu Sans font embedded in the binary so PNG text is identical on a machine with no
//! fonts installed.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use plotters::style::colors::colormaps::ViridisRGB;
use plotters::style::{register_font, FontDesc, FontStyle, IntoFont, RGBColor, TextStyle};

use asa_core::error::{Error, Result};
use asa_core::variant::VariantKind;

/// The attention method a model label names, for its colour: one of SPEC section 3's
/// variants, or another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Method {
    /// A known variant.
    Variant(VariantKind),
    /// Anything else: a colour from the fallback palette.
    Other,
}

impl Method {
    /// The method of a detected attention variant (run.json's `variant`), if known.
    pub fn of_variant(variant: &str) -> Option<Method> {
        VariantKind::parse(variant).map(Method::Variant)
    }

    /// Classifies a free-form label by keywords, e.g. `asa-1b` -> affine_scaled,
    /// `gated_asa` -> affine_scaled_gated, `softmax` or `base` -> softmax, `run3` -> Other.
    pub fn of_label(label: &str) -> Method {
        let lower = label.to_lowercase();
        let tokens: Vec<&str> = lower
            .split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|t| !t.is_empty())
            .collect();
        let joined: String = tokens.concat();
        let has = |t: &str| tokens.contains(&t);
        let affine = joined.contains("affine") || has("asa");
        let gated = joined.contains("gated") || has("gate");
        let kind = if affine && gated {
            VariantKind::AffineScaledGated
        } else if joined.contains("scaleinv") || has("si") {
            VariantKind::ScaleInvariant
        } else if joined.contains("logn") || joined.contains("ssmax") {
            VariantKind::Logn
        } else if joined.contains("offbyone") || has("obo") || joined.contains("softmax1") {
            VariantKind::OffByOne
        } else if joined.contains("sink") {
            VariantKind::Sink
        } else if gated {
            VariantKind::Gated
        } else if affine {
            VariantKind::AffineScaled
        } else if joined.contains("softmax")
            || joined.starts_with("base")
            || has("vanilla")
            || has("baseline")
        {
            VariantKind::Softmax
        } else {
            return Method::Other;
        };
        Method::Variant(kind)
    }

    /// Whether the method sends mass to no token (sink logits, off-by-one): only these
    /// have a sink mass to draw.
    pub fn has_sink(self) -> bool {
        matches!(self, Method::Variant(kind) if kind.has_sink_mass())
    }

    /// The method's fixed colour (`None` for [`Method::Other`]).
    pub fn color(self) -> Option<RGBColor> {
        let Method::Variant(kind) = self else {
            return None;
        };
        Some(match kind {
            VariantKind::Softmax => RGBColor(0x1f, 0x77, 0xb4),
            VariantKind::Sink => RGBColor(0xff, 0x7f, 0x0e),
            VariantKind::OffByOne => RGBColor(0x94, 0x67, 0xbd),
            VariantKind::Gated => RGBColor(0x2c, 0xa0, 0x2c),
            VariantKind::AffineScaled => RGBColor(0xd6, 0x27, 0x28),
            VariantKind::AffineScaledGated => RGBColor(0x8c, 0x56, 0x4b),
            VariantKind::ScaleInvariant => RGBColor(0xe3, 0x77, 0xc2),
            VariantKind::Logn => RGBColor(0x17, 0xbe, 0xcf),
        })
    }
}

/// Colours for labels that name no known method, in order of their sorted labels.
const FALLBACK: [RGBColor; 6] = [
    RGBColor(0x7f, 0x7f, 0x7f),
    RGBColor(0xbc, 0xbd, 0x22),
    RGBColor(0x39, 0x3b, 0x79),
    RGBColor(0x63, 0x79, 0x39),
    RGBColor(0x84, 0x3c, 0x39),
    RGBColor(0x7b, 0x41, 0x73),
];

/// `c` mixed with black (`t > 0`) or white (`t < 0`) by `|t|`.
fn shade(c: RGBColor, t: f64) -> RGBColor {
    let target = if t > 0.0 { 0.0 } else { 255.0 };
    let t = t.abs();
    let mix = |v: u8| (v as f64 * (1.0 - t) + target * t).round() as u8;
    RGBColor(mix(c.0), mix(c.1), mix(c.2))
}

/// Darker, lighter, darker still ...: the k-th extra label of one method.
fn variant(c: RGBColor, k: usize) -> RGBColor {
    match k {
        0 => c,
        k => {
            let step = k.div_ceil(2) as f64 * 0.3;
            shade(
                c,
                if k % 2 == 1 {
                    step.min(0.7)
                } else {
                    -step.min(0.7)
                },
            )
        }
    }
}

/// Label -> colour for one `figures` run: the same label has the same colour in every
/// figure. Labels of one method share its colour, shaded when several runs name it.
#[derive(Debug, Clone, Default)]
pub struct Palette {
    colors: BTreeMap<String, RGBColor>,
    /// The method of each label: its detected variant where known, else its keywords.
    methods: BTreeMap<String, Method>,
}

impl Palette {
    /// Assigns colours to every label by its keywords (order of input does not matter).
    pub fn new<'a>(labels: impl IntoIterator<Item = &'a str>) -> Palette {
        Palette::with_variants(labels, &BTreeMap::new())
    }

    /// Assigns colours to every label, by its detected attention variant where `variants`
    /// (label -> variant name, from run.json) knows it, else by its keywords.
    pub fn with_variants<'a>(
        labels: impl IntoIterator<Item = &'a str>,
        variants: &BTreeMap<String, String>,
    ) -> Palette {
        let methods: BTreeMap<String, Method> = labels
            .into_iter()
            .map(|l| {
                let known = variants.get(l).and_then(|v| Method::of_variant(v));
                (l.to_string(), known.unwrap_or_else(|| Method::of_label(l)))
            })
            .collect();
        let mut sorted: Vec<(&Method, &String)> = methods.iter().map(|(l, m)| (m, l)).collect();
        sorted.sort();
        let mut per_method: BTreeMap<Method, usize> = BTreeMap::new();
        let mut colors = BTreeMap::new();
        for (&method, label) in sorted {
            let k = per_method.entry(method).or_default();
            let color = match method.color() {
                Some(c) => variant(c, *k),
                None => variant(FALLBACK[*k % FALLBACK.len()], *k / FALLBACK.len()),
            };
            *k += 1;
            colors.insert(label.to_string(), color);
        }
        Palette { colors, methods }
    }

    /// The label's method (keywords for a label the palette was not built with).
    pub fn method(&self, label: &str) -> Method {
        self.methods
            .get(label)
            .copied()
            .unwrap_or_else(|| Method::of_label(label))
    }

    /// The label's colour (a neutral grey for a label the palette was not built with).
    pub fn color(&self, label: &str) -> RGBColor {
        self.colors
            .get(label)
            .copied()
            .unwrap_or(RGBColor(0x55, 0x55, 0x55))
    }

    /// `labels` in legend order: by method (baseline first), then by label.
    pub fn order(&self, labels: impl IntoIterator<Item = String>) -> Vec<String> {
        let mut v: Vec<String> = labels.into_iter().collect();
        v.sort_by(|a, b| (self.method(a), a).cmp(&(self.method(b), b)));
        v.dedup();
        v
    }
}

/// Viridis at `t` in [0, 1] (clamped; NaN maps to 0).
pub fn viridis(t: f64) -> RGBColor {
    let t = if t.is_nan() { 0.0 } else { t.clamp(0.0, 1.0) };
    ViridisRGB::get_color(t as f32)
}

/// Black, greys and the colours of fixed non-method marks.
pub const INK: RGBColor = RGBColor(0x22, 0x22, 0x22);
/// Grid lines.
pub const GRID: RGBColor = RGBColor(0xe3, 0xe3, 0xe3);
/// Cells with no value (masked or NaN).
pub const MISSING: RGBColor = RGBColor(0xd9, 0xd9, 0xd9);
/// Secondary annotation lines (median, separators).
pub const MUTED: RGBColor = RGBColor(0x66, 0x66, 0x66);
/// The first-token bar of Fig. 1 (key 0): black, unlike every method colour.
pub const FIRST_TOKEN: RGBColor = RGBColor(0x00, 0x00, 0x00);
/// Legend swatch of faint raw curves.
pub const FAINT: RGBColor = RGBColor(0xb8, 0xb8, 0xb8);

/// Font family name the embedded fonts are registered under (plotters' sans-serif).
const FAMILY: &str = "sans-serif";

/// Registers the embedded DejaVu Sans (regular and bold) once per process.
pub fn ensure_fonts() -> Result<()> {
    static DONE: OnceLock<bool> = OnceLock::new();
    let ok = *DONE.get_or_init(|| {
        register_font(FAMILY, FontStyle::Normal, dejavu::sans::regular()).is_ok()
            && register_font(FAMILY, FontStyle::Bold, dejavu::sans::bold()).is_ok()
    });
    if ok {
        Ok(())
    } else {
        Err(Error::usage("the embedded DejaVu Sans font failed to load"))
    }
}

/// Sizes in logical pixels, multiplied by `scale` (SVG 1, PNG 2).
#[derive(Debug, Clone, Copy)]
pub struct Theme {
    /// Pixels per logical pixel.
    pub scale: f64,
    /// Bitmap output: thick polylines are drawn segment by segment (the rasterizer's
    /// miter joins spike at near-reversals of noisy curves; SVG joins are the viewer's),
    /// and legend text is nudged down to sit centred on its swatch (ab_glyph places
    /// glyphs a little high for a centred anchor).
    pub bitmap: bool,
}

/// Font sizes (logical pixels).
pub const TITLE: f64 = 19.0;
/// Panel captions.
pub const CAPTION: f64 = 15.0;
/// Axis titles.
pub const AXIS: f64 = 14.0;
/// Tick labels.
pub const TICK: f64 = 12.0;
/// Legend entries and annotations.
pub const LEGEND: f64 = 13.0;

impl Theme {
    /// The theme of vector output (1 px = 1 logical px).
    pub const SVG: Theme = Theme {
        scale: 1.0,
        bitmap: false,
    };
    /// The theme of PNG output (2 px per logical px: sharp on print and high-DPI screens).
    pub const PNG: Theme = Theme {
        scale: 2.0,
        bitmap: true,
    };

    /// `v` logical pixels, in device pixels.
    pub fn px(&self, v: f64) -> i32 {
        (v * self.scale).round() as i32
    }

    /// `v` logical pixels, as an unsigned size.
    pub fn upx(&self, v: f64) -> u32 {
        self.px(v).max(0) as u32
    }

    /// The regular font at `size` logical pixels.
    pub fn font(&self, size: f64) -> FontDesc<'static> {
        (FAMILY, size * self.scale).into_font()
    }

    /// The bold font at `size` logical pixels.
    pub fn bold(&self, size: f64) -> FontDesc<'static> {
        (FAMILY, size * self.scale, FontStyle::Bold).into_font()
    }

    /// The regular font in a colour.
    pub fn text(&self, size: f64, color: RGBColor) -> TextStyle<'static> {
        self.font(size).color(&color)
    }
}

/// Width of `text` at `size` logical pixels, in logical pixels (layout before drawing).
pub fn text_width(text: &str, size: f64) -> f64 {
    measure(text, size, FontStyle::Normal)
}

/// Width of `text` in the bold font.
pub fn bold_width(text: &str, size: f64) -> f64 {
    measure(text, size, FontStyle::Bold)
}

fn measure(text: &str, size: f64, style: FontStyle) -> f64 {
    if ensure_fonts().is_err() {
        return text.chars().count() as f64 * size * 0.62;
    }
    // Measured at 10x so integer rounding of the layout box does not matter.
    (FAMILY, size * 10.0, style)
        .into_font()
        .box_size(text)
        .map(|(w, _)| w as f64 / 10.0)
        .unwrap_or(text.chars().count() as f64 * size * 0.62)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOFTMAX: Method = Method::Variant(VariantKind::Softmax);
    const AFFINE: Method = Method::Variant(VariantKind::AffineScaled);

    #[test]
    fn detected_variants_colour_labels_that_name_no_method() {
        // the folder names of three checkpoints; run.json says what they are
        let variants: BTreeMap<String, String> = [
            ("llama_gqa", "softmax"),
            ("zeta", "affine_scaled"),
            ("mid", "off_by_one"),
        ]
        .map(|(l, v)| (l.to_string(), v.to_string()))
        .into();
        let pal = Palette::with_variants(["llama_gqa", "zeta", "mid", "run3"], &variants);
        assert_eq!(pal.color("llama_gqa"), SOFTMAX.color().unwrap());
        assert_eq!(pal.color("zeta"), AFFINE.color().unwrap());
        assert_eq!(
            pal.color("mid"),
            Method::Variant(VariantKind::OffByOne).color().unwrap()
        );
        assert_eq!(pal.color("run3"), FALLBACK[0]);
        let order = pal.order(["zeta", "run3", "mid", "llama_gqa"].map(String::from));
        assert_eq!(order, ["llama_gqa", "mid", "zeta", "run3"]);
    }

    #[test]
    fn labels_map_to_methods() {
        for (label, m) in [
            ("base", SOFTMAX),
            ("softmax", SOFTMAX),
            ("baseline-1b", SOFTMAX),
            ("sink", Method::Variant(VariantKind::Sink)),
            ("gpt-oss-sink", Method::Variant(VariantKind::Sink)),
            ("off_by_one", Method::Variant(VariantKind::OffByOne)),
            ("off-by-one", Method::Variant(VariantKind::OffByOne)),
            ("gated", Method::Variant(VariantKind::Gated)),
            ("asa", AFFINE),
            ("affine_scaled", AFFINE),
            ("asa-1b", AFFINE),
            (
                "affine+gated",
                Method::Variant(VariantKind::AffineScaledGated),
            ),
            ("gated_asa", Method::Variant(VariantKind::AffineScaledGated)),
            (
                "scale_invariant",
                Method::Variant(VariantKind::ScaleInvariant),
            ),
            ("logn", Method::Variant(VariantKind::Logn)),
            ("run3", Method::Other),
            ("database", Method::Other),
        ] {
            assert_eq!(Method::of_label(label), m, "{label}");
        }
    }

    #[test]
    fn palette_is_deterministic_and_distinct() {
        let a = Palette::new(["asa", "base", "asa-350m", "zeta", "alpha"]);
        let b = Palette::new(["alpha", "zeta", "asa-350m", "base", "asa"]);
        for l in ["asa", "base", "asa-350m", "zeta", "alpha"] {
            assert_eq!(a.color(l), b.color(l), "{l}");
        }
        assert_eq!(a.color("asa"), AFFINE.color().unwrap());
        assert_ne!(a.color("asa"), a.color("asa-350m"));
        assert_ne!(a.color("alpha"), a.color("zeta"));
        assert_eq!(
            a.order(["zeta", "asa", "base"].map(String::from)),
            ["base", "asa", "zeta"]
        );
    }
}
