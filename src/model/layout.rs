//! Where the image tower lays out a batch. Photos wait in the queue as resized bytes (a quarter of
//! their size as floats); only when their batch runs are they normalised, if the layout asks for
//! it, and laid end to end, into one buffer that is kept from batch to batch so that a full batch
//! (38 MB of floats at 224 px and 64 photos) is not allocated again for each run.

use image::RgbImage;

use crate::preprocess::{Layout, Pixels, Transform};

pub struct PixelBatch {
    pixels: Pixels,
}

impl PixelBatch {
    /// Room for `batch_size` photos of `slot_len` values each.
    pub fn new(layout: Layout, batch_size: usize, slot_len: usize) -> Self {
        PixelBatch { pixels: Pixels::empty(layout, batch_size * slot_len) }
    }

    /// Lays `squares` out end to end, in place of the last batch.
    pub fn lay_out(&mut self, squares: &[&RgbImage], transform: &Transform) -> &Pixels {
        self.pixels.clear();
        for square in squares {
            self.pixels.push(square, transform);
        }
        &self.pixels
    }
}
