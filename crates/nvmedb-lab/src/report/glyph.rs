//! A bitmap-backend wrapper that rasterises text itself.
//!
//! Why: plotters 0.3.7's `ab_glyph` text path places each glyph's bounding box at the pen
//! position and ignores the glyph's left side bearing, so PNG text comes out uneven ("cl"
//! renders like "d"). SVG output keeps real `<text>` elements and is unaffected.
//!
//! Owns: `PngText`, which delegates every drawing call to the wrapped backend except
//! `draw_text`, which lays glyphs out with their bearings and kerning. Invariants: the text box
//! it fills has the size plotters estimates for layout (so labels land where plotters planned
//! them), honours the anchor and the rotation of the style, and never draws outside the canvas.

use ab_glyph::{point, Font, FontRef, ScaleFont};
use plotters::prelude::DrawingBackend;
use plotters_backend::text_anchor::{HPos, VPos};
use plotters_backend::{BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingErrorKind};

/// Wraps a pixel backend and draws text with `font`.
pub(crate) struct PngText<B> {
    inner: B,
    font: FontRef<'static>,
}

impl<B: DrawingBackend> PngText<B> {
    pub(crate) fn new(inner: B, font: FontRef<'static>) -> Self {
        Self { inner, font }
    }
}

type R<E> = Result<(), DrawingErrorKind<E>>;

impl<B: DrawingBackend> DrawingBackend for PngText<B> {
    type ErrorType = B::ErrorType;

    fn get_size(&self) -> (u32, u32) {
        self.inner.get_size()
    }
    fn ensure_prepared(&mut self) -> R<B::ErrorType> {
        self.inner.ensure_prepared()
    }
    fn present(&mut self) -> R<B::ErrorType> {
        self.inner.present()
    }
    fn draw_pixel(&mut self, point: BackendCoord, color: BackendColor) -> R<B::ErrorType> {
        self.inner.draw_pixel(point, color)
    }
    fn draw_line<S: BackendStyle>(
        &mut self,
        from: BackendCoord,
        to: BackendCoord,
        style: &S,
    ) -> R<B::ErrorType> {
        self.inner.draw_line(from, to, style)
    }
    fn draw_rect<S: BackendStyle>(
        &mut self,
        upper_left: BackendCoord,
        bottom_right: BackendCoord,
        style: &S,
        fill: bool,
    ) -> R<B::ErrorType> {
        self.inner.draw_rect(upper_left, bottom_right, style, fill)
    }
    fn draw_path<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        path: I,
        style: &S,
    ) -> R<B::ErrorType> {
        self.inner.draw_path(path, style)
    }
    fn draw_circle<S: BackendStyle>(
        &mut self,
        center: BackendCoord,
        radius: u32,
        style: &S,
        fill: bool,
    ) -> R<B::ErrorType> {
        self.inner.draw_circle(center, radius, style, fill)
    }
    fn fill_polygon<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        vert: I,
        style: &S,
    ) -> R<B::ErrorType> {
        self.inner.fill_polygon(vert, style)
    }
    fn blit_bitmap(&mut self, pos: BackendCoord, size: (u32, u32), src: &[u8]) -> R<B::ErrorType> {
        self.inner.blit_bitmap(pos, size, src)
    }
    fn estimate_text_size<S: BackendTextStyle>(
        &self,
        text: &str,
        style: &S,
    ) -> Result<(u32, u32), DrawingErrorKind<B::ErrorType>> {
        self.inner.estimate_text_size(text, style)
    }

    fn draw_text<S: BackendTextStyle>(
        &mut self,
        text: &str,
        style: &S,
        pos: BackendCoord,
    ) -> R<B::ErrorType> {
        let color = style.color();
        if color.alpha == 0.0 || text.is_empty() {
            return Ok(());
        }
        // The box plotters planned for this text.
        let (bw, bh) = self.inner.estimate_text_size(text, style)?;
        let (bw, bh) = (bw as f32, bh as f32);
        let scaled = self.font.as_scaled(style.size() as f32);
        // Put the baseline so ascent : descent splits the planned height.
        let (asc, desc) = (scaled.ascent(), scaled.descent());
        let baseline = if asc - desc > 0.0 { bh * asc / (asc - desc) } else { bh };
        let dx = match style.anchor().h_pos {
            HPos::Left => 0.0,
            HPos::Right => -bw,
            HPos::Center => -bw / 2.0,
        };
        let dy = match style.anchor().v_pos {
            VPos::Top => 0.0,
            VPos::Center => -bh / 2.0,
            VPos::Bottom => -bh,
        };
        let trans = style.transform();
        let (w, h) = self.inner.get_size();
        let mut pen = 0.0f32;
        let mut prev = None;
        for c in text.chars() {
            let id = scaled.glyph_id(c);
            if let Some(p) = prev {
                pen += scaled.kern(p, id);
            }
            prev = Some(id);
            let glyph = id.with_scale_and_position(scaled.scale(), point(pen + dx, baseline + dy));
            pen += scaled.h_advance(id);
            let Some(outline) = self.font.outline_glyph(glyph) else { continue };
            let b = outline.px_bounds();
            let mut pixels = Vec::new();
            outline.draw(|gx, gy, cov| {
                if cov > 0.0 {
                    pixels.push((b.min.x as i32 + gx as i32, b.min.y as i32 + gy as i32, cov));
                }
            });
            for (x, y, cov) in pixels {
                let (x, y) = trans.transform(x, y);
                let (x, y) = (pos.0 + x, pos.1 + y);
                if x >= 0 && y >= 0 && (x as u32) < w && (y as u32) < h {
                    let px = BackendColor { alpha: color.alpha * f64::from(cov.min(1.0)), rgb: color.rgb };
                    self.inner.draw_pixel((x, y), px)?;
                }
            }
        }
        Ok(())
    }
}
