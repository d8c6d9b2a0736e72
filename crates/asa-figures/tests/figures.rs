//! Paper figures from exported tables (issue 5, SPEC section 6): every figure renders
//! from the small fixture tables of `tests/fixtures/tables` (written by its
//! `make_tables.py`) to an SVG string and to a PNG, and the checks are what a reader
//! would check: panels, series, legend labels, axis titles, a PNG with drawn text and
//! many colours. Degenerate tables (one model, layer or head, constant values, NaN,
//! header-only files) are skipped or drawn with a note, never a panic. The `figures`
//! command itself is tested in tests/it/figures.rs.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use asa_figures::plot::scene::{Figure, Mark};
use asa_figures::plot::theme::{viridis, Palette, FIRST_TOKEN, MISSING, MUTED};
use asa_figures::plot::{build_figures, to_png, to_svg, FigureOptions, Results};
use asa_logs::StepWindow;
use asa_tables::{read_table, write_table, Format};
use plotters::style::RGBColor;

fn tables(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/tables")
        .join(name)
}

fn load(dirs: &[&str]) -> Results {
    let dirs: Vec<PathBuf> = dirs.iter().map(|d| tables(d)).collect();
    Results::load(&dirs).expect("fixture tables load")
}

/// Every figure of the full fixtures (attention tables + training logs).
fn full() -> (Vec<Figure>, Vec<String>) {
    build_figures(&load(&["full", "logs"]), &FigureOptions::default())
}

fn find<'a>(figs: &'a [Figure], name: &str) -> &'a Figure {
    figs.iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("no figure {name}"))
}

/// The text of every `<text>` element, entities decoded.
fn texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .filter_map(|t| {
            let body = &t[t.find('>')? + 1..t.find("</text>")?];
            Some(
                body.trim()
                    .replace("&lt;", "<")
                    .replace("&gt;", ">")
                    .replace("&quot;", "\"")
                    .replace("&apos;", "'")
                    .replace("&amp;", "&"),
            )
        })
        .collect()
}

fn count_text(svg: &str, text: &str) -> usize {
    texts(svg).iter().filter(|t| *t == text).count()
}

fn hex(c: RGBColor) -> String {
    format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
}

/// `<polyline>` elements (one per drawn series) of one colour and stroke width; legend
/// swatches are 3 px wide, series 2 px (raw curves 1 px).
fn polylines(svg: &str, color: RGBColor, width: u32) -> usize {
    let stroke = format!("stroke=\"{}\" stroke-width=\"{width}\"", hex(color));
    svg.split("<polyline")
        .skip(1)
        .filter(|p| p[..p.find("/>").unwrap_or(p.len())].contains(&stroke))
        .count()
}

/// Filled `<rect>` elements of one colour (bars, heatmap cells, legend patches).
fn rects(svg: &str, color: RGBColor) -> usize {
    let fill = format!("fill=\"{}\"", hex(color));
    svg.split("<rect")
        .skip(1)
        .filter(|r| r[..r.find("/>").unwrap_or(r.len())].contains(&fill))
        .count()
}

/// (width, height, distinct colours, dark pixels in the title band) of a PNG.
fn png_stats(bytes: &[u8]) -> (u32, u32, usize, usize) {
    let decoder = png::Decoder::new(std::io::Cursor::new(bytes));
    let mut reader = decoder.read_info().expect("a PNG header");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("PNG pixels");
    assert_eq!(info.color_type, png::ColorType::Rgb);
    let (w, h) = (info.width, info.height);
    let px: Vec<[u8; 3]> = buf[..info.buffer_size()]
        .chunks(3)
        .map(|c| [c[0], c[1], c[2]])
        .collect();
    let distinct = px.iter().collect::<HashSet<_>>().len();
    // The title band (top 80 px at 2x): dark pixels exist only if glyphs were drawn.
    let dark = px[..(w * 80.min(h)) as usize]
        .iter()
        .filter(|p| p.iter().all(|&c| c < 90))
        .count();
    (w, h, distinct, dark)
}

/// Renders `fig` both ways; asserts the PNG is a real picture with text; returns the SVG.
fn render(fig: &Figure) -> String {
    let svg = to_svg(fig).unwrap_or_else(|e| panic!("{}: svg: {e}", fig.name));
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    let png = to_png(fig).unwrap_or_else(|e| panic!("{}: png: {e}", fig.name));
    let (w, h, distinct, dark) = png_stats(&png);
    assert!(w >= 600 && h >= 400, "{}: {w} x {h}", fig.name);
    assert!(
        distinct >= 64,
        "{}: only {distinct} colours: blank?",
        fig.name
    );
    assert!(
        dark >= 200,
        "{}: title not drawn ({dark} dark pixels)",
        fig.name
    );
    svg
}

fn legend(fig: &Figure) -> Vec<&str> {
    fig.legend.iter().map(|e| e.label.as_str()).collect()
}

fn color(fig: &Figure, label: &str) -> RGBColor {
    fig.legend
        .iter()
        .find(|e| e.label == label)
        .unwrap_or_else(|| panic!("{}: no legend entry {label}", fig.name))
        .color
}

#[test]
fn every_figure_is_drawn_from_full_tables() {
    let (figs, notes) = full();
    let names: Vec<&str> = figs.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "fig1_query_profile",
            "fig2_qk_mean",
            "fig3_weight_sums",
            "fig4_first_token",
            "fig5_head_total",
            "fig5_alpha",
            "fig6_entropy",
            "fig7_loss",
            "fig8_grad_norm",
            "fig9_heatmap",
            "fig10_loss_late",
            "fig11_clipping",
            "distance_profile",
            "sink_emergence",
        ]
    );
    assert!(notes.is_empty(), "unexpected notes: {notes:?}");
    for f in &figs {
        let svg = render(f);
        let t = texts(&svg);
        assert!(t.contains(&f.title), "{}: title missing", f.name);
        for label in legend(f) {
            assert!(
                t.iter().any(|x| x == label),
                "{}: legend {label} missing",
                f.name
            );
        }
    }
}

#[test]
fn per_layer_lines_have_one_series_per_model() {
    let (figs, _) = full();
    for (name, y) in [
        (
            "fig4_first_token",
            "first-token weight aᵢ₀ (mean over queries)",
        ),
        ("fig6_entropy", "attention entropy (nats)"),
    ] {
        let f = find(&figs, name);
        assert_eq!(legend(f), ["base", "sink", "asa"]);
        let svg = render(f);
        assert_eq!(count_text(&svg, "layer"), 1);
        assert_eq!(count_text(&svg, y), 1);
        for m in ["base", "sink", "asa"] {
            // One 2 px series line and one 3 px legend swatch per model.
            assert_eq!(polylines(&svg, color(f, m), 2), 1, "{name} {m}");
            assert_eq!(polylines(&svg, color(f, m), 3), 1, "{name} {m}");
        }
        // ±1 std bands, one per model.
        assert_eq!(svg.matches("<polygon").count(), 3, "{name}");
    }
    // Layer ticks are the integers 1..3 only (the y ticks of Fig. 4 are all below 1).
    let svg = render(find(&figs, "fig4_first_token"));
    for tick in ["1", "2", "3"] {
        assert_eq!(count_text(&svg, tick), 1, "tick {tick}");
    }
    assert_eq!(count_text(&svg, "1.5"), 0, "no half layers");
}

#[test]
fn fig1_has_a_panel_per_model_and_a_sink_bar() {
    let (figs, _) = full();
    let f = find(&figs, "fig1_query_profile");
    assert_eq!(f.panels.len(), 3);
    let svg = render(f);
    let t = texts(&svg);
    // Only the sink model has a sink slot and a sink in its title.
    for title in [
        "base (layer 2, query 7)",
        "sink (layer 2, query 7, sink 0.250)",
        "asa (layer 2, query 7)",
    ] {
        assert!(
            t.contains(&title.to_string()),
            "missing panel {title}: {t:?}"
        );
    }
    for m in ["base", "sink", "asa"] {
        // 7 key bars (key 0 is black) and the legend patch.
        assert_eq!(rects(&svg, color(f, m)), 8, "{m}");
    }
    // Key 0 of each panel and its legend patch, in a colour no method has.
    assert_eq!(rects(&svg, FIRST_TOKEN), 4);
    assert!(legend(f).contains(&"first token (key 0)"));
    assert!(f
        .legend
        .iter()
        .all(|e| e.label == "first token (key 0)" || e.color != FIRST_TOKEN));
    assert_eq!(count_text(&svg, "key position j"), 3);
    assert_eq!(count_text(&svg, "attention weight aᵢⱼ"), 3);
    // One label over the sink model's sink bar, and the legend entry of the model `sink`.
    assert_eq!(count_text(&svg, "sink"), 2);
    assert_eq!(rects(&svg, MUTED), 2, "one sink bar and its legend patch");
    assert!(legend(f).contains(&"sink mass (to no token)"));
}

#[test]
fn fig2_draws_both_qk_panels_per_run() {
    let (figs, _) = full();
    let f = find(&figs, "fig2_qk_mean");
    assert_eq!(f.panels.len(), 2);
    let svg = render(f);
    assert_eq!(count_text(&svg, "training step"), 2);
    assert_eq!(count_text(&svg, "mean raw q·k (before 1/√d)"), 1);
    assert_eq!(count_text(&svg, "mean |q·k| (before 1/√d)"), 1);
    for m in ["base", "sink", "asa"] {
        assert_eq!(
            polylines(&svg, color(f, m), 2),
            2,
            "{m}: a line in each panel"
        );
    }
}

#[test]
fn fig3_marks_mean_and_median_per_model() {
    let (figs, _) = full();
    let f = find(&figs, "fig3_weight_sums");
    assert_eq!(f.panels.len(), 3);
    assert_eq!(legend(f), ["base", "sink", "asa", "mean", "median"]);
    let svg = render(f);
    let t = texts(&svg);
    // base: every W_i is 1; its pooled mean and median come from the per-layer rows.
    assert!(
        t.contains(&"base (mean 1.000, median 1.000)".to_string()),
        "{t:?}"
    );
    // asa: mean of the per-layer means (0.65 + 0.70 + 0.75) / 3.
    assert!(
        t.iter().any(|x| x.starts_with("asa (mean 0.700, median ")),
        "{t:?}"
    );
    assert_eq!(count_text(&svg, "share of queries (%)"), 3);
    // One x range for every panel, so the distributions compare.
    assert!(f.panels.iter().all(|p| p.x.range == f.panels[0].x.range));
    // Bars sit on the bin edges: base's only occupied bin is [1.0, 1.05).
    let base_bars: Vec<_> = f.panels[0]
        .marks
        .iter()
        .filter_map(|m| match m {
            Mark::Rects { rects, .. } => Some(rects.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(base_bars.len(), 1);
    assert_eq!((base_bars[0].0, base_bars[0].2), (1.0, 1.05));
    assert_eq!(count_text(&svg, "per-query weight sum Wᵢ = Σⱼ aᵢⱼ"), 3);
}

#[test]
fn fig5_has_one_colour_scale_and_an_alpha_companion() {
    let (figs, _) = full();
    let f = find(&figs, "fig5_head_total");
    assert_eq!(f.panels.len(), 3);
    // One scale for every model, stated on the colour bar: 0 to 1 holds every total.
    let cb = f.colorbar.as_ref().expect("a shared colour bar");
    assert_eq!(cb.range, (0.0, 1.0));
    let svg = render(f);
    let t = texts(&svg);
    assert!(t.contains(&"base (every head 1.000)".to_string()), "{t:?}");
    assert!(t.iter().any(|x| x.starts_with("sink (0.93")), "{t:?}");
    assert_eq!(count_text(&svg, "head"), 3);
    assert_eq!(count_text(&svg, "layer"), 3);
    assert_eq!(count_text(&svg, "head total Σⱼ aᵢⱼ (mean over queries)"), 1);
    assert!(!svg.contains("NaN"));
    // base's 3 x 2 cells, all 1, are the top colour of the scale.
    assert!(
        rects(&svg, viridis(1.0)) >= 6,
        "base's cells at the top colour"
    );

    // α only for the model with alpha rows, on φ's range.
    let a = find(&figs, "fig5_alpha");
    assert_eq!(a.panels.len(), 1);
    assert_eq!(a.colorbar.as_ref().unwrap().range, (0.0, 1.0));
    let svg = render(a);
    let t = texts(&svg);
    assert!(t.contains(&"asa (every head 0.600)".to_string()), "{t:?}");
    assert_eq!(count_text(&svg, "mean α = φ(wₕ · xᵢ) over queries"), 1);
}

#[test]
fn fig9_draws_a_masked_map_per_model_with_a_colour_bar() {
    let (figs, _) = full();
    let f = find(&figs, "fig9_heatmap");
    assert_eq!(f.panels.len(), 3);
    let svg = render(f);
    for m in ["base", "sink", "asa"] {
        assert_eq!(count_text(&svg, &format!("{m}, layer 2")), 1);
    }
    // 6 x 6 maps: the 15 keys above the diagonal of each are masked grey.
    assert_eq!(rects(&svg, MISSING), 45);
    assert_eq!(count_text(&svg, "query position i"), 3);
    assert_eq!(count_text(&svg, "key position j"), 3);
    // The scale is clipped below cell (0, 0), and the figure says where.
    let bar = texts(&svg)
        .into_iter()
        .filter(|t| t.starts_with("attention weight aᵢⱼ (≥ "))
        .count();
    assert_eq!(bar, 1);
    assert!(
        f.title.contains("the 98th percentile, max 1.000"),
        "{}",
        f.title
    );
    // Query 0 at the top: its tick label is above query 5's.
    let y_of = |label: &str| -> i64 {
        let at = svg
            .split("<text")
            .find(|t| {
                t.contains(&format!(">\n{label}\n</text>")) && t.contains("text-anchor=\"end\"")
            })
            .expect("a y tick");
        let y = at.split("y=\"").nth(1).unwrap();
        y[..y.find('"').unwrap()].parse().unwrap()
    };
    assert!(y_of("0") < y_of("4"), "queries grow downwards");
}

#[test]
fn training_curves_late_window_and_spikes() {
    let (figs, _) = full();
    let f7 = find(&figs, "fig7_loss");
    assert_eq!(
        legend(f7),
        ["softmax", "asa", "faint: raw, solid: debiased EMA (lags)"]
    );
    let svg = render(f7);
    for r in ["softmax", "asa"] {
        assert_eq!(polylines(&svg, color(f7, r), 2), 1, "{r}: smoothed line");
    }
    assert_eq!(count_text(&svg, "training loss (nats/token)"), 1);

    // Steps 0..=99: the late window is the last 20%, the 20 steps from 80.
    let f10 = find(&figs, "fig10_loss_late");
    assert!(
        f10.title.contains("steps 80–99, last 20% of the run"),
        "{}",
        f10.title
    );
    assert!(f10.panels[0].x.range.0 > 75.0);
    render(f10);

    let f8 = find(&figs, "fig8_grad_norm");
    assert!(legend(f8).contains(&"spike, k = 6") && legend(f8).contains(&"spike, k = 9"));
    let svg = render(f8);
    // Two k = 6 spikes of softmax as rings, one k = 9 spike as a triangle.
    let rings = svg
        .split("<circle")
        .skip(1)
        .filter(|c| {
            c.contains(&format!("stroke=\"{}\"", hex(color(f8, "softmax"))))
                && c.contains("fill=\"none\"")
        })
        .count();
    assert_eq!(rings, 2);
    assert_eq!(count_text(&svg, "gradient norm ‖g‖₂"), 1);
}

#[test]
fn late_window_can_be_given() {
    let opts = FigureOptions {
        late_steps: Some("50..80".parse::<StepWindow>().unwrap()),
        ..FigureOptions::default()
    };
    let (figs, _) = build_figures(&load(&["logs"]), &opts);
    let f = find(&figs, "fig10_loss_late");
    assert!(f.title.contains("steps 50..80"), "{}", f.title);
    let (lo, hi) = f.panels[0].x.range;
    assert!(lo > 45.0 && hi < 85.0, "{lo}..{hi}");
}

#[test]
fn fig11_and_distance_profile() {
    let (figs, _) = full();
    let f = find(&figs, "fig11_clipping");
    assert_eq!(f.panels.len(), 2);
    let svg = render(f);
    assert_eq!(count_text(&svg, "α = φ(x)"), 1);
    assert_eq!(count_text(&svg, "dφ/dx"), 1);
    let d = find(&figs, "distance_profile");
    assert_eq!(d.panels.len(), 3);
    assert_eq!(
        legend(d),
        [
            "first token (key 0)",
            "t = 0 (itself)",
            "1 ≤ t < 10",
            "10 ≤ t < 100"
        ]
    );
    let svg = render(d);
    for e in &d.legend {
        assert_eq!(
            polylines(&svg, e.color, 2),
            3,
            "{}: a line per panel",
            e.label
        );
    }
}

#[test]
fn one_colour_per_label_across_figures() {
    let (figs, _) = full();
    let pal = Palette::new(["base", "sink", "asa", "softmax"]);
    for f in &figs {
        for e in &f.legend {
            if ["base", "sink", "asa", "softmax"].contains(&e.label.as_str()) {
                assert_eq!(e.color, pal.color(&e.label), "{}: {}", f.name, e.label);
            }
        }
    }
    // Baseline-like labels share the baseline hue but are told apart.
    assert_ne!(pal.color("base"), pal.color("softmax"));
}

#[test]
fn heatmap_positions_out_of_range_are_noted_not_allocated() {
    // query 200000 once asked for a 4e10-cell grid (the process was killed at 24 GB)
    let dir = tempfile::tempdir().unwrap();
    let rows = "model,layer,query,key,value\nm,1,0,0,0.5\nm,1,200000,0,0.5\nm,1,1,-5,0.5\n";
    std::fs::write(dir.path().join("heatmap.csv"), rows).unwrap();
    let res = Results::load(&[dir.path().to_path_buf()]).unwrap();
    let (figs, notes) = build_figures(&res, &FigureOptions::default());
    render(find(&figs, "fig9_heatmap"));
    assert!(
        notes
            .iter()
            .any(|n| n.contains("2 rows with a position outside")),
        "{notes:?}"
    );
}

#[test]
fn degenerate_tables_do_not_panic() {
    let (figs, notes) = build_figures(&load(&["degenerate"]), &FigureOptions::default());
    for f in &figs {
        render(f);
    }
    let names: Vec<&str> = figs.iter().map(|f| f.name.as_str()).collect();
    assert!(
        !names.contains(&"fig6_entropy"),
        "every entropy mean is NaN"
    );
    for want in [
        "fig1_query_profile",
        "fig3_weight_sums",
        "fig4_first_token",
        "fig5_head_total",
        "fig9_heatmap",
        "fig2_qk_mean",
        "fig7_loss",
        "fig8_grad_norm",
        "fig11_clipping",
    ] {
        assert!(names.contains(&want), "{want} not drawn: {notes:?}");
    }
    let has = |s: &str| notes.iter().any(|n| n.contains(s));
    assert!(has("fig6_entropy: skipped"), "{notes:?}");
    assert!(!has("fig6_entropy: 1 non-finite"), "{notes:?}");
    assert!(
        has("fig7_loss: 1 non-finite or overflowing loss values drawn as gaps"),
        "{notes:?}"
    );
    assert!(
        has("distance_profile: 1 non-finite values left out"),
        "{notes:?}"
    );
    // run3's sums are all 1: its one bin has no width, drawn as a thin bar centred on 1
    let f3 = find(&figs, "fig3_weight_sums");
    let bar = f3.panels[0]
        .marks
        .iter()
        .find_map(|m| match m {
            Mark::Rects { rects, .. } => rects.first().copied(),
            _ => None,
        })
        .expect("a bar");
    assert!(bar.0 < 1.0 && bar.2 > 1.0 && ((bar.0 + bar.2) / 2.0 - 1.0).abs() < 1e-9);
    let f5 = find(&figs, "fig5_head_total");
    assert_eq!(f5.panels[0].title, "run3 (every head 1.000)");
}

#[test]
fn header_only_tables_are_skipped_with_a_note() {
    let dir = tempfile::tempdir().unwrap();
    for (name, header) in [
        ("attention", "model,metric,layer,head,stat,value"),
        ("heatmap", "model,layer,query,key,value"),
        ("curves", "run,metric,step,value,smoothed"),
        ("weight_sum_hist", "model,bin_lo,bin_hi,count"),
    ] {
        std::fs::write(
            dir.path().join(format!("{name}.csv")),
            format!("{header}\n"),
        )
        .unwrap();
    }
    let res = Results::load(&[dir.path().to_path_buf()]).unwrap();
    let (figs, notes) = build_figures(&res, &FigureOptions::default());
    let names: Vec<&str> = figs.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["fig11_clipping"]);
    assert_eq!(notes.len(), 13, "{notes:?}");
    assert!(notes.iter().all(|n| n.contains("skipped")), "{notes:?}");
}

#[test]
fn folders_are_merged_and_parquet_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let csv = tables("full").join("attention.csv");
    let table = read_table(&csv).unwrap();
    write_table(
        &table,
        &dir.path().join("attention.parquet"),
        Format::Parquet,
    )
    .unwrap();
    let res = Results::load(&[dir.path().to_path_buf(), tables("degenerate")]).unwrap();
    let (figs, _) = build_figures(&res, &FigureOptions::default());
    assert_eq!(
        legend(find(&figs, "fig4_first_token")),
        ["base", "sink", "asa", "run3"]
    );
}

#[test]
fn run_json_gives_each_models_variant() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        tables("full").join("attention.csv"),
        dir.path().join("attention.csv"),
    )
    .unwrap();
    let run = r#"{"models": [{"model": "base", "variant": "softmax"},
                             {"model": "asa", "variant": "affine_scaled"}]}"#;
    std::fs::write(dir.path().join("run.json"), run).unwrap();
    let res = Results::load(&[dir.path().to_path_buf()]).unwrap();
    assert_eq!(res.variants["base"], "softmax");
    assert_eq!(res.variants["asa"], "affine_scaled");
    // a folder without a readable run.json still loads
    std::fs::write(dir.path().join("run.json"), "not json").unwrap();
    assert!(Results::load(&[dir.path().to_path_buf()])
        .unwrap()
        .variants
        .is_empty());
}

#[test]
fn distance_bands_past_the_window_are_not_drawn() {
    // base was analysed with windows of 10 tokens: no pair is 10 or more apart
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        tables("full").join("distance_profile.csv"),
        dir.path().join("distance_profile.csv"),
    )
    .unwrap();
    let run = r#"{"models": [{"model": "base", "variant": "softmax", "seq_len": 10},
                             {"model": "asa", "variant": "affine_scaled", "seq_len": 128}]}"#;
    std::fs::write(dir.path().join("run.json"), run).unwrap();
    let res = Results::load(&[dir.path().to_path_buf()]).unwrap();
    let (figs, notes) = build_figures(&res, &FigureOptions::default());
    let d = find(&figs, "distance_profile");
    let lines = |i: usize| {
        d.panels[i]
            .marks
            .iter()
            .filter(|m| matches!(m, Mark::Line { .. }))
            .count()
    };
    assert_eq!(d.panels[0].title, "base");
    assert_eq!(lines(0), 3, "first, 0 and 1-10 only");
    assert_eq!(lines(1), 4, "sink has no run.json entry: every band");
    assert!(
        notes
            .iter()
            .any(|n| n.contains("band 10-100 not drawn: it starts at or past the window length 10")),
        "{notes:?}"
    );
}

/// Figs. 7, 8, 10 as the paper draws them (issue 28): runs labelled SIZE/METHOD give one
/// panel per size, "(a) 0.5B (b) 1B"; a KD loss is preferred over the loss and named; a
/// centred mean smooths without lag; `log_y` draws log10 of the values.
#[test]
fn training_curves_per_size_with_kd_loss_centred_smoothing_and_log_y() {
    let dir = tempfile::tempdir().unwrap();
    let mut csv = String::from("run,metric,step,value,smoothed\n");
    for run in ["1B/baseline", "1B/asa", "0.5B/baseline", "0.5B/asa"] {
        for step in 0..50 {
            // a step in the loss at step 25: a centred mean of 5 starts rising at 23
            let kd = if step < 25 { 4.0 } else { 2.0 };
            let gn = 1.0 + (step % 3) as f64;
            csv += &format!("{run},kd_loss,{step},{kd},{kd}\n{run},loss,{step},3.0,3.0\n");
            csv += &format!("{run},grad_norm,{step},{gn},{gn}\n");
        }
    }
    std::fs::write(dir.path().join("curves.csv"), csv).unwrap();
    let res = Results::load(&[dir.path().to_path_buf()]).unwrap();
    let opts = FigureOptions {
        smooth: Some(5),
        ..FigureOptions::default()
    };
    let (figs, notes) = build_figures(&res, &opts);
    let f7 = find(&figs, "fig7_loss");
    let titles: Vec<&str> = f7.panels.iter().map(|p| p.title.as_str()).collect();
    assert_eq!(titles, ["(a) 0.5B", "(b) 1B"]);
    assert_eq!(f7.title, "Fig. 7: kd_loss over training");
    assert!(
        notes
            .iter()
            .any(|n| n.contains("fig7_loss: plots kd_loss (a KD loss")),
        "{notes:?}"
    );
    assert_eq!(
        legend(f7),
        [
            "baseline",
            "asa",
            "faint: raw, solid: centred mean of 5 steps"
        ]
    );
    let svg = render(f7);
    for t in [
        "(a) 0.5B",
        "(b) 1B",
        "kd_loss (nats/token)",
        "faint: raw, solid: centred mean of 5 steps",
    ] {
        assert!(texts(&svg).iter().any(|x| x == t), "{t} missing");
    }
    // the smoothed line: flat 4 until step 22, the step centred on 24.5
    let smooth = f7.panels[0]
        .marks
        .iter()
        .filter_map(|m| match m {
            Mark::Line { points, width, .. } if *width == 2.0 => Some(points.clone()),
            _ => None,
        })
        .next()
        .unwrap();
    let at = |s: f64| smooth.iter().find(|p| p.0 == s).unwrap().1;
    assert_eq!(
        (at(22.0), at(23.0), at(26.0), at(27.0)),
        (4.0, 3.6, 2.4, 2.0)
    );
    let f8 = find(&figs, "fig8_grad_norm");
    assert_eq!(f8.panels.len(), 2);
    let f10 = find(&figs, "fig10_loss_late");
    assert!(
        f10.title.starts_with("Fig. 10: kd_loss, late phase"),
        "{}",
        f10.title
    );
    assert_eq!(f10.panels.len(), 2);

    // --metric loss and a log axis: log10 of the values, ticks labelled with the values
    let opts = FigureOptions {
        loss_metric: Some("loss".into()),
        log_y: true,
        ..FigureOptions::default()
    };
    let (figs, _) = build_figures(&res, &opts);
    let f7 = find(&figs, "fig7_loss");
    assert_eq!(f7.title, "Fig. 7: loss over training");
    assert!(f7.panels[0].y.log10 && f7.panels[0].y.label.ends_with("log scale"));
    let ys: Vec<f64> = f7.panels[0]
        .marks
        .iter()
        .flat_map(|m| match m {
            Mark::Line { points, .. } => points.iter().map(|p| p.1).collect(),
            _ => Vec::new(),
        })
        .collect();
    assert!(
        ys.iter().all(|y| (y - 3f64.log10()).abs() < 1e-12),
        "{ys:?}"
    );
    render(f7);
    let opts = FigureOptions {
        loss_metric: Some("val_loss".into()),
        ..FigureOptions::default()
    };
    let (_, notes) = build_figures(&res, &opts);
    assert!(
        notes
            .iter()
            .any(|n| n.contains("no metric val_loss (it has kd_loss, loss, grad_norm)")),
        "{notes:?}"
    );
}

#[test]
fn sink_emergence_draws_each_layers_first_token_mean_over_the_steps() {
    let (figs, _) = full();
    let f = find(&figs, "sink_emergence");
    // one panel per model of attention_series, one line per layer (per-head, std and other
    // metrics' rows left out), layer 1 to 3 from viridis' dark end to its light end
    let titles: Vec<&str> = f.panels.iter().map(|p| p.title.as_str()).collect();
    assert_eq!(titles, ["base", "sink"]);
    for (panel, slope) in f.panels.iter().zip([0.3, 0.5]) {
        let lines: Vec<(&Vec<(f64, f64)>, RGBColor)> = panel
            .marks
            .iter()
            .filter_map(|m| match m {
                Mark::Line { points, color, .. } => Some((points, *color)),
                _ => None,
            })
            .collect();
        assert_eq!(lines.len(), 3, "{}", panel.title);
        for (l, (points, color)) in lines.iter().enumerate() {
            let layer = (l + 1) as f64;
            assert_eq!(*color, viridis(l as f64 / 2.0));
            let want: Vec<(f64, f64)> = (0..=4)
                .map(|k| {
                    let step = 250.0 * k as f64;
                    (step, (0.1 + slope * layer * step / 1000.0).min(1.0))
                })
                .collect();
            assert_eq!(points.len(), want.len());
            for (got, want) in points.iter().zip(&want) {
                assert_eq!(got.0, want.0);
                assert!(
                    (got.1 - want.1).abs() < 1e-6,
                    "{}: {got:?} vs {want:?}",
                    panel.title
                );
            }
        }
    }
    assert_eq!(legend(f), ["layer 1", "layer 2", "layer 3"]);
    render(f);
}
