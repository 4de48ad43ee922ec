//! A backfill file's columns, in groups: the photo's own (`photo`), its pixel signals (`pixels`),
//! what its EXIF and size say (`metadata`), and one group per loaded capability: the heads'
//! scores (`scores`), faces (`faces`), text (`text`), objects (`objects`). Each group says its
//! fields, fills its builders a row at a time and finishes them into its columns; the sink lays out
//! the groups [`Columns`] lists, in that order, and knows none of them.

mod faces;
mod metadata;
mod objects;
mod photo;
mod pixels;
mod scores;
mod text;

use std::sync::Arc;

use arrow_array::ArrayRef;
use arrow_schema::{ArrowError, DataType, Field, Fields};
use parquet::file::metadata::KeyValue;

#[cfg(test)]
pub(super) use self::faces::FACE_RECOGNIZER_KEY;
use self::{
    faces::FaceColumn, metadata::MetadataColumns, objects::ObjectColumn, photo::PhotoColumns, pixels::PixelColumns,
    scores::ScoreColumn, text::TextColumns,
};
use super::sink::Row;
use crate::pipeline::Pipeline;

/// One group of a file's columns.
pub trait ColumnGroup {
    /// Its fields, in order.
    fn fields(&self) -> Vec<Field>;
    /// Adds `row`'s values (nulls where it has none).
    fn append(&mut self, row: &Row);
    /// Its columns, one per field, holding every row appended.
    fn finish(&mut self) -> Result<Vec<ArrayRef>, ArrowError>;
    /// What it adds to the file's footer.
    fn metadata(&self) -> Vec<KeyValue> {
        Vec::new()
    }
}

/// The columns a file has beyond those every file has: one per loaded capability.
#[derive(Debug, Clone, Default)]
pub struct Columns {
    /// The heads' names, a `scores` field each.
    pub heads: Vec<String>,
    /// With face models (and so a `faces` column), the recognizer's id.
    pub faces: Option<String>,
    /// With OCR models: the `ocr` and `ocr_text` columns.
    pub ocr: bool,
    /// With an object model: the `objects` column.
    pub objects: bool,
}

impl Columns {
    /// The columns of what `pipeline` has loaded.
    pub fn of(pipeline: &Pipeline) -> Self {
        Columns {
            heads: pipeline.heads().map(|heads| heads.names.clone()).unwrap_or_default(),
            faces: pipeline.faces().map(|(_, recognizer)| recognizer.id.clone()),
            ocr: pipeline.ocr().is_some(),
            objects: pipeline.objects().is_some(),
        }
    }

    /// Empty groups for a chunk of `rows` rows of `dim`-long embeddings, in the file's order.
    pub fn groups(&self, rows: usize, dim: usize) -> Vec<Box<dyn ColumnGroup>> {
        let mut groups: Vec<Box<dyn ColumnGroup>> = vec![
            Box::new(PhotoColumns::new(rows, dim)),
            Box::new(PixelColumns::new(rows)),
            Box::new(MetadataColumns::new(rows)),
        ];
        if !self.heads.is_empty() {
            groups.push(Box::new(ScoreColumn::new(&self.heads, rows)));
        }
        if let Some(recognizer) = &self.faces {
            groups.push(Box::new(FaceColumn::new(recognizer)));
        }
        if self.ocr {
            groups.push(Box::new(TextColumns::new()));
        }
        if self.objects {
            groups.push(Box::new(ObjectColumn::new()));
        }
        groups
    }
}

/// A column of a list of structs of `fields` a row (the faces, the lines, the objects); null where
/// the row has none.
fn list_of(name: &str, fields: Fields) -> Field {
    Field::new(name, DataType::List(Arc::new(Field::new_list_field(DataType::Struct(fields), true))), true)
}
