//! The faces column of a backfill file: `faces`, each face's `box` ([x1, y1, x2, y2] in the upright
//! photo's pixels), `score` and `embedding` (the recognizer's; the file's `clipfn.face_recognizer`
//! names it). Null on error, or when a face model tripped on the photo.

use std::sync::Arc;

use arrow_array::builder::{ArrayBuilder, FixedSizeListBuilder, Float32Builder, ListBuilder, StructBuilder};
use arrow_schema::{DataType, Field, Fields};

use crate::pipeline::Face;

/// The column's field.
pub fn field() -> Field {
    Field::new("faces", DataType::List(Arc::new(Field::new_list_field(DataType::Struct(face_fields()), true))), true)
}

/// The column's builder, filled a row at a time.
pub struct FaceColumn(ListBuilder<StructBuilder>);

impl FaceColumn {
    pub fn new() -> Self {
        let fields: Vec<Box<dyn ArrayBuilder>> = vec![
            Box::new(FixedSizeListBuilder::new(Float32Builder::new(), 4)),
            Box::new(Float32Builder::new()),
            Box::new(ListBuilder::new(Float32Builder::new())),
        ];
        FaceColumn(ListBuilder::new(StructBuilder::new(face_fields(), fields)))
    }

    pub fn append(&mut self, faces: Option<&[Face]>) {
        let Some(faces) = faces else { return self.0.append_null() };
        let builder = self.0.values();
        for face in faces {
            let boxes = builder.field_builder::<FixedSizeListBuilder<Float32Builder>>(0).expect("box");
            boxes.values().append_slice(&face.bbox);
            boxes.append(true);
            builder.field_builder::<Float32Builder>(1).expect("score").append_value(face.score);
            let embedding = builder.field_builder::<ListBuilder<Float32Builder>>(2).expect("embedding");
            embedding.values().append_slice(&face.embedding);
            embedding.append(true);
            builder.append(true);
        }
        self.0.append(true);
    }

    pub fn finish(mut self) -> arrow_array::ArrayRef {
        Arc::new(self.0.finish())
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
