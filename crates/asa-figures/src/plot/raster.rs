//! Pixel spans of thick lines and filled polygons for the PNG output. plotters' bitmap
//! polygon filler drops or thins parts of some shapes (a thick segment at certain slopes
//! came out one pixel wide: a stray thin diagonal line), so PNG lines and bands are
//! filled here, row by row, and drawn as one-pixel-high rectangles. SVG is unaffected
//! (the viewer fills its shapes).

/// One row of pixels to fill: `(y, x_first, x_last)`, inclusive, in device pixels.
pub type Span = (i32, i32, i32);

/// The pixels whose centres lie within `width / 2` of the polyline `points` (round joins
/// and caps), each pixel once, row by row.
pub fn thick_polyline(points: &[(f64, f64)], width: f64) -> Vec<Span> {
    let r = (width / 2.0).max(0.5);
    let mut rows: std::collections::BTreeMap<i32, Vec<(f64, f64)>> = Default::default();
    let segments: Vec<((f64, f64), (f64, f64))> = match points {
        [] => Vec::new(),
        [p] => vec![(*p, *p)],
        _ => points.windows(2).map(|w| (w[0], w[1])).collect(),
    };
    for (a, b) in segments {
        let y0 = (a.1.min(b.1) - r - 0.5).floor() as i32;
        let y1 = (a.1.max(b.1) + r - 0.5).ceil() as i32;
        for y in y0..=y1 {
            if let Some(iv) = capsule_row(a, b, r, y as f64 + 0.5) {
                rows.entry(y).or_default().push(iv);
            }
        }
    }
    rows.into_iter()
        .flat_map(|(y, ivs)| merge(ivs).into_iter().filter_map(move |iv| span(y, iv)))
        .collect()
}

/// The pixels whose centres lie inside `poly` (even-odd rule), row by row.
pub fn polygon(poly: &[(f64, f64)]) -> Vec<Span> {
    if poly.len() < 3 {
        return Vec::new();
    }
    let (lo, hi) = poly
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), p| {
            (a.min(p.1), b.max(p.1))
        });
    let mut out = Vec::new();
    for y in (lo - 0.5).floor() as i32..=(hi - 0.5).ceil() as i32 {
        let yc = y as f64 + 0.5;
        let mut xs: Vec<f64> = (0..poly.len())
            .filter_map(|i| {
                let (p, q) = (poly[i], poly[(i + 1) % poly.len()]);
                // half-open in y so a vertex on the row counts once
                let crosses = (p.1 <= yc) != (q.1 <= yc);
                crosses.then(|| p.0 + (yc - p.1) / (q.1 - p.1) * (q.0 - p.0))
            })
            .collect();
        xs.sort_by(f64::total_cmp);
        out.extend(xs.chunks_exact(2).filter_map(|c| span(y, (c[0], c[1]))));
    }
    out
}

/// The x interval where the row at height `yc` meets the capsule of radius `r` around
/// segment `a`-`b` (convex: the union of its two end discs and its body).
fn capsule_row(a: (f64, f64), b: (f64, f64), r: f64, yc: f64) -> Option<(f64, f64)> {
    let disc = |c: (f64, f64)| {
        let dy = yc - c.1;
        (dy.abs() <= r).then(|| {
            let dx = (r * r - dy * dy).sqrt();
            (c.0 - dx, c.0 + dx)
        })
    };
    let (dx, dy) = (b.0 - a.0, b.1 - a.1);
    let len = (dx * dx + dy * dy).sqrt();
    let mut ivs: Vec<(f64, f64)> = [disc(a), disc(b)].into_iter().flatten().collect();
    if len > 1e-9 {
        let (nx, ny) = (-dy / len * r, dx / len * r);
        let quad = [
            (a.0 + nx, a.1 + ny),
            (b.0 + nx, b.1 + ny),
            (b.0 - nx, b.1 - ny),
            (a.0 - nx, a.1 - ny),
        ];
        let xs: Vec<f64> = (0..4)
            .filter_map(|i| {
                let (p, q) = (quad[i], quad[(i + 1) % 4]);
                if (p.1 - yc) * (q.1 - yc) > 0.0 {
                    return None;
                }
                if (q.1 - p.1).abs() < 1e-12 {
                    // a horizontal edge: its ends come from the edges beside it
                    return None;
                }
                Some(p.0 + (yc - p.1) / (q.1 - p.1) * (q.0 - p.0))
            })
            .collect();
        if !xs.is_empty() {
            let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            ivs.push((lo, hi));
        }
    }
    let lo = ivs.iter().map(|i| i.0).fold(f64::INFINITY, f64::min);
    let hi = ivs.iter().map(|i| i.1).fold(f64::NEG_INFINITY, f64::max);
    (lo <= hi).then_some((lo, hi))
}

/// Overlapping intervals joined, so no pixel is drawn twice.
fn merge(mut ivs: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    ivs.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut out: Vec<(f64, f64)> = Vec::new();
    for iv in ivs {
        match out.last_mut() {
            Some(last) if iv.0 <= last.1 + 1.0 => last.1 = last.1.max(iv.1),
            _ => out.push(iv),
        }
    }
    out
}

/// Pixels of row `y` whose centres lie in `[lo, hi]`; none when no centre does.
fn span(y: i32, (lo, hi): (f64, f64)) -> Option<Span> {
    let (x0, x1) = ((lo - 0.5).ceil() as i32, (hi - 0.5).floor() as i32);
    (x0 <= x1).then_some((y, x0, x1))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pixels per row of a span list.
    fn widths(spans: &[Span]) -> Vec<i32> {
        spans.iter().map(|s| s.2 - s.1 + 1).collect()
    }

    #[test]
    fn a_thick_segment_keeps_its_width_at_every_slope() {
        // 4 px wide, long enough that its caps do not matter in the middle rows
        for (dx, dy) in [
            (200.0f64, 0.0f64),
            (200.0, 37.0),
            (200.0, 113.0),
            (200.0, -151.0),
        ] {
            let spans = thick_polyline(&[(10.0, 300.0), (10.0 + dx, 300.0 + dy)], 4.0);
            let len: f64 = (dx * dx + dy * dy).sqrt();
            let area: i32 = widths(&spans).iter().sum();
            // a 4 x len band plus two half discs of radius 2: about 4 len + 12.6 pixels
            let want = 4.0 * len + std::f64::consts::PI * 4.0;
            assert!(
                (area as f64 - want).abs() < 0.05 * want,
                "slope {dy}/{dx}: {area} pixels, want about {want}"
            );
        }
    }

    #[test]
    fn polygon_fills_inside_only() {
        // a 10 x 4 rectangle: 4 rows of 10 pixels
        let spans = polygon(&[(0.0, 0.0), (10.0, 0.0), (10.0, 4.0), (0.0, 4.0)]);
        assert_eq!(spans, (0..4).map(|y| (y, 0, 9)).collect::<Vec<_>>());
        assert!(polygon(&[(0.0, 0.0), (1.0, 1.0)]).is_empty());
    }
}
