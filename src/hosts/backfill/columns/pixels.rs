//! The pixel signals' columns: `hash` (the perceptual hash's 64 bits as int64:
//! `printf('%016x', hash)` is the API's hex) and `sharpness`; null on error.

use std::sync::Arc;

use arrow_array::{
    ArrayRef,
    builder::{Float64Builder, Int64Builder},
};
use arrow_schema::{ArrowError, DataType, Field};

use super::{super::sink::Row, ColumnGroup};

pub struct PixelColumns {
    hashes: Int64Builder,
    sharpness: Float64Builder,
}

impl PixelColumns {
    pub fn new(rows: usize) -> Self {
        PixelColumns { hashes: Int64Builder::with_capacity(rows), sharpness: Float64Builder::with_capacity(rows) }
    }
}

impl ColumnGroup for PixelColumns {
    fn fields(&self) -> Vec<Field> {
        vec![Field::new("hash", DataType::Int64, true), Field::new("sharpness", DataType::Float64, true)]
    }

    fn append(&mut self, row: &Row) {
        let pixels = row.signals.as_ref().and_then(|signals| signals.pixels);
        // The same 64 bits, read as a signed integer: the type SQL engines xor and bit_count.
        self.hashes.append_option(pixels.map(|pixels| pixels.hash as i64));
        self.sharpness.append_option(pixels.map(|pixels| pixels.sharpness));
    }

    fn finish(&mut self) -> Result<Vec<ArrayRef>, ArrowError> {
        Ok(vec![Arc::new(self.hashes.finish()), Arc::new(self.sharpness.finish())])
    }
}
