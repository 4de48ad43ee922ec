//! The faces column of a backfill file: `faces`, each face's `box` ([x1, y1, x2, y2] in the upright
//! photo's pixels), `score` and `embedding` (the recognizer's; the file's `clipfn.face_recognizer`
//! names it). Null on error, or when a face model tripped on the photo.

use std::sync::Arc;

use arrow_array::{
    ArrayRef,
    builder::{ArrayBuilder, FixedSizeListBuilder, Float32Builder, ListBuilder, StructBuilder},
};
use arrow_schema::{ArrowError, DataType, Field, Fields};
use parquet::file::metadata::KeyValue;

use super::{super::sink::Row, ColumnGroup, list_of};

/// The file metadata key naming the recognizer that made the `faces` embeddings (its id, as every
/// face answer gives it).
pub const FACE_RECOGNIZER_KEY: &str = "clipfn.face_recognizer";

pub struct FaceColumn {
    faces: ListBuilder<StructBuilder>,
    recognizer: String,
}

impl FaceColumn {
    pub fn new(recognizer: &str) -> Self {
        let fields: Vec<Box<dyn ArrayBuilder>> = vec![
            Box::new(FixedSizeListBuilder::new(Float32Builder::new(), 4)),
            Box::new(Float32Builder::new()),
            Box::new(ListBuilder::new(Float32Builder::new())),
        ];
        let faces = ListBuilder::new(StructBuilder::new(face_fields(), fields));
        FaceColumn { faces, recognizer: recognizer.to_string() }
    }
}

impl ColumnGroup for FaceColumn {
    fn fields(&self) -> Vec<Field> {
        vec![list_of("faces", face_fields())]
    }

    fn append(&mut self, row: &Row) {
        let found = row.signals.as_ref().and_then(|signals| signals.faces.as_ref()?.as_ref().ok());
        let Some(found) = found else { return self.faces.append_null() };
        let builder = self.faces.values();
        for face in &found.faces {
            let boxes = builder.field_builder::<FixedSizeListBuilder<Float32Builder>>(0).expect("box");
            boxes.values().append_slice(&face.bbox);
            boxes.append(true);
            builder.field_builder::<Float32Builder>(1).expect("score").append_value(face.score);
            let embedding = builder.field_builder::<ListBuilder<Float32Builder>>(2).expect("embedding");
            embedding.values().append_slice(&face.embedding);
            embedding.append(true);
            builder.append(true);
        }
        self.faces.append(true);
    }

    fn finish(&mut self) -> Result<Vec<ArrayRef>, ArrowError> {
        Ok(vec![Arc::new(self.faces.finish())])
    }

    fn metadata(&self) -> Vec<KeyValue> {
        vec![KeyValue::new(FACE_RECOGNIZER_KEY.into(), self.recognizer.clone())]
    }
}

fn face_fields() -> Fields {
    let float = || Arc::new(Field::new_list_field(DataType::Float32, true));
    Fields::from(vec![
        Field::new("box", DataType::FixedSizeList(float(), 4), true),
        Field::new("score", DataType::Float32, true),
        Field::new("embedding", DataType::List(float()), true),
    ])
}
