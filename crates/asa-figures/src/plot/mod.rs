//! Paper figures (Figs. 1-11) and Tables 4-5 from exported tables alone (SPEC section 6),
//! so a figure can be restyled and regenerated without re-running a model.
//!
//! Each figure family builds a plain [`scene::Figure`] from the tables ([`data`]);
//! [`render`] draws it with plotters as PNG and SVG in one [`theme`] (a fixed colour per
//! method, viridis heatmaps, embedded DejaVu Sans). A figure whose tables are missing is
//! skipped with a note; Fig. 11 is analytic and always drawn.
//!
//! | file | figure | tables |
//! |---|---|---|
//! | `fig1_query_profile` | one query's weights over keys, sink mass bar | query_profile |
//! | `fig2_qk_mean` | mean and mean absolute q.k over training steps | qk_series |
//! | `fig3_weight_sums` | per-query weight-sum histograms, mean and median | weight_sum_hist, attention |
//! | `fig4_first_token` | first-token weight per layer | attention |
//! | `fig5_head_total` | layer x head total attention, one colour scale | attention |
//! | `fig5_alpha` | layer x head mean Affine-Scaled α (models with alpha rows) | attention |
//! | `fig6_entropy` | attention entropy per layer | attention |
//! | `fig7_loss`, `fig10_loss_late` | loss curves, full run and late window | curves |
//! | `fig8_grad_norm` | gradient-norm curves with spike steps | curves, spike_steps |
//! | `fig9_heatmap` | 30 x 30 attention map of one layer | heatmap |
//! | `fig11_clipping` | sigmoid vs linear clipping (analytic) | none |
//! | `distance_profile` | attention mass by query-key distance band | distance_profile |
//! | `sink_emergence` | first-token weight per layer over training steps | attention_series |
//! | `tables4_5.md` | Table 4 (gradient statistics), Table 5 (spikes) | grad_stats, spikes |
//!
//! Choices the tables leave open:
//! - Fig. 3 mean: the mean of the per-layer `weight_sum` means (exact: every layer pools
//!   the same queries); median: a pooled `p50` row when attention.csv has one, else
//!   interpolated in the histogram bin holding the middle query and clamped to the range
//!   of the per-layer medians, where the pooled median always lies.
//! - Fig. 5: one colour scale over every model, from min(0, least total) to max(1, largest
//!   total), stated on the colour bar; SPEC's per-model min-max normalisation made a flat
//!   sink model look varied (a model whose totals spread by less than 0.1% says "every
//!   head" in its title). α is a companion figure on φ's range [0, 1].
//! - Fig. 10: the last 20% of the logged steps unless `--late-steps A..B` says otherwise
//!   (the paper's 1B runs: 7k-9k).
//! - Colours follow the label's method keywords (see [`theme::Method`]); one palette per
//!   run, so a label has one colour in every figure.

use std::path::{Path, PathBuf};

use asa_core::error::{Error, Result};
use asa_logs::StepWindow;
use asa_tables::{Format, OutputDir, StagingWatch};

pub mod analytic;
pub mod bars;
pub mod data;
pub mod distance;
pub mod error;
pub mod heatmaps;
pub mod lines;
pub mod raster;
pub mod render;
pub mod scene;
pub mod series;
pub mod tables;
pub mod theme;
pub mod training;

pub use data::Results;
pub use error::FigureError;
pub use render::{to_png, to_svg};
pub use scene::Figure;
pub use theme::Palette;

/// Choices that are not in the tables.
#[derive(Debug, Clone)]
pub struct FigureOptions {
    /// Fig. 10 window; default: the last `late_fraction` of the logged steps.
    pub late_steps: Option<StepWindow>,
    /// Share of the step range Fig. 10 shows when `late_steps` is not given (0.2).
    pub late_fraction: f64,
    /// The metric of Figs. 7 and 10; default a KD loss when the logs have one, else loss.
    pub loss_metric: Option<String>,
    /// Figs. 7, 8, 10: a centred mean over this many logged steps instead of the EMA.
    pub smooth: Option<usize>,
    /// Figs. 7, 8, 10 on a log-scaled y axis.
    pub log_y: bool,
}

impl Default for FigureOptions {
    fn default() -> Self {
        FigureOptions {
            late_steps: None,
            late_fraction: 0.2,
            loss_metric: None,
            smooth: None,
            log_y: false,
        }
    }
}

/// What a render wrote and what it skipped or noticed.
#[derive(Debug, Clone, Default)]
pub struct RenderReport {
    /// Files staged in the output folder (`fig4_first_token.png`, `tables4_5.md`, ...).
    pub files: Vec<String>,
    /// One line per skipped figure or dropped data (`fig5_head_total: ...`).
    pub notes: Vec<String>,
}

/// Shared state of one render: the tables, the palette, the notes.
pub struct Ctx<'a> {
    pub res: &'a Results,
    pub pal: &'a Palette,
    pub opts: &'a FigureOptions,
    notes: Vec<String>,
}

impl<'a> Ctx<'a> {
    /// A context over `res` with colours from `pal`.
    pub fn new(res: &'a Results, pal: &'a Palette, opts: &'a FigureOptions) -> Self {
        Ctx {
            res,
            pal,
            opts,
            notes: Vec::new(),
        }
    }

    /// Records a note about figure `fig`.
    pub fn note(&mut self, fig: &str, msg: impl std::fmt::Display) {
        self.notes.push(format!("{fig}: {msg}"));
    }

    /// The notes so far.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }
}

/// A built figure, or why it was skipped.
pub type Built = std::result::Result<Figure, FigureError>;

/// Every figure builder, in paper order: (file stem, builder).
#[allow(clippy::type_complexity)]
pub const FIGURES: [(&str, fn(&mut Ctx) -> Built); 14] = [
    ("fig1_query_profile", bars::fig1_query_profile),
    ("fig2_qk_mean", lines::fig2_qk_mean),
    ("fig3_weight_sums", bars::fig3_weight_sums),
    ("fig4_first_token", lines::fig4_first_token),
    ("fig5_head_total", heatmaps::fig5_head_total),
    ("fig5_alpha", heatmaps::fig5_alpha),
    ("fig6_entropy", lines::fig6_entropy),
    ("fig7_loss", lines::fig7_loss),
    ("fig8_grad_norm", lines::fig8_grad_norm),
    ("fig9_heatmap", heatmaps::fig9_heatmap),
    ("fig10_loss_late", lines::fig10_loss_late),
    ("fig11_clipping", analytic::fig11_clipping),
    ("distance_profile", distance::distance_profile),
    ("sink_emergence", series::sink_emergence),
];

/// Builds every figure whose tables exist; skipped ones become notes.
pub fn build_figures(res: &Results, opts: &FigureOptions) -> (Vec<Figure>, Vec<String>) {
    let labels = res.labels();
    let pal = Palette::with_variants(labels.iter().map(String::as_str), &res.variants);
    let mut ctx = Ctx::new(res, &pal, opts);
    let mut figures = Vec::new();
    for (name, build) in FIGURES {
        match build(&mut ctx) {
            Ok(fig) => figures.push(fig),
            Err(why) => ctx.note(name, format!("skipped ({why})")),
        }
    }
    (figures, ctx.notes)
}

/// Reads the tables under `results` (several folders are merged) and stages every
/// figure as PNG and SVG, plus `tables4_5.md`, in `out`. The caller commits `out`.
pub fn render_all(results: &[PathBuf], out: &mut OutputDir) -> Result<RenderReport> {
    render_all_with(results, out, &FigureOptions::default())
}

/// [`render_all`], staging the files under `folder` of `out` (`figures`: the figures of
/// `analyze --figures`, committed with the tables staged in the same `out`, as one unit).
pub fn render_all_in(
    results: &[PathBuf],
    out: &mut OutputDir,
    folder: &str,
) -> Result<RenderReport> {
    render_into(results, out, folder, &FigureOptions::default())
}

/// [`render_all`] with options.
pub fn render_all_with(
    results: &[PathBuf],
    out: &mut OutputDir,
    opts: &FigureOptions,
) -> Result<RenderReport> {
    render_into(results, out, "", opts)
}

/// [`render_all_with`] under `folder` of `out` (`""`: its top).
fn render_into(
    results: &[PathBuf],
    out: &mut OutputDir,
    folder: &str,
    opts: &FigureOptions,
) -> Result<RenderReport> {
    let res = Results::load(results)?;
    let mut report = render_results(&res, out, folder, opts)?;
    if res.names().is_empty() {
        report.notes.insert(
            0,
            "no tables found (attention.csv, curves.csv, ...): only the analytic Fig. 11 is drawn"
                .into(),
        );
    }
    Ok(report)
}

/// Every figure the tables under `results` allow, written into the folder `out` (created;
/// the files appear all at once, when all are rendered): the work of `figures` and `demo`.
/// A results folder that does not exist is an error before `out` is created.
pub fn write_figures(
    results: &[PathBuf],
    out: &Path,
    opts: &FigureOptions,
    staging: &StagingWatch,
) -> Result<RenderReport> {
    if let Some(bad) = results.iter().find(|d| !d.is_dir()) {
        return Err(Error::input(bad, "not a results folder"));
    }
    let mut dir = OutputDir::create(out, Format::Csv, staging)?;
    let report = render_all_with(results, &mut dir, opts)?;
    dir.commit()?;
    Ok(report)
}

/// Renders from tables already in memory, staging the files under `folder` of `out` (`""`:
/// its top).
pub fn render_results(
    res: &Results,
    out: &mut OutputDir,
    folder: &str,
    opts: &FigureOptions,
) -> Result<RenderReport> {
    let (figures, mut notes) = build_figures(res, opts);
    let in_folder = |file: String| match folder {
        "" => file,
        f => format!("{f}/{file}"),
    };
    let mut files = Vec::new();
    for fig in &figures {
        let svg = to_svg(fig)?;
        let png = to_png(fig)?;
        for (ext, bytes) in [("svg", svg.as_bytes()), ("png", png.as_slice())] {
            let file = in_folder(format!("{}.{ext}", fig.name));
            out.write_bytes(&file, bytes)?;
            files.push(file);
        }
    }
    match tables::tables4_5(res) {
        Ok((text, table_notes)) => {
            let file = in_folder("tables4_5.md".into());
            out.write_bytes(&file, text.as_bytes())?;
            files.push(file);
            notes.extend(table_notes.into_iter().map(|n| format!("tables4_5: {n}")));
        }
        Err(why) => notes.push(format!("tables4_5: skipped ({why})")),
    }
    Ok(RenderReport { files, notes })
}
