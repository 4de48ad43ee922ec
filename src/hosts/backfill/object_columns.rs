//! The objects column of a backfill file: `objects`, each object's `label`, `score` and `box`
//! ([x1, y1, x2, y2] in the upright photo's pixels), best first, as `/v1/analyze` answers them; a
//! query finds photos by label (docs/deploy.md, "Find photos of a thing"). Null on error, or when
//! the object model tripped on the photo.

use std::sync::Arc;

use arrow_array::builder::{
    ArrayBuilder, FixedSizeListBuilder, Float32Builder, ListBuilder, StringBuilder, StructBuilder,
};
use arrow_schema::{DataType, Field, Fields};

use crate::pipeline::Object;

/// The column's field.
pub fn field() -> Field {
    Field::new(
        "objects",
        DataType::List(Arc::new(Field::new_list_field(DataType::Struct(object_fields()), true))),
        true,
    )
}

/// The column's builder, filled a row at a time.
pub struct ObjectColumn(ListBuilder<StructBuilder>);

impl ObjectColumn {
    pub fn new() -> Self {
        let fields: Vec<Box<dyn ArrayBuilder>> = vec![
            Box::new(StringBuilder::new()),
            Box::new(Float32Builder::new()),
            Box::new(FixedSizeListBuilder::new(Float32Builder::new(), 4)),
        ];
        ObjectColumn(ListBuilder::new(StructBuilder::new(object_fields(), fields)))
    }

    pub fn append(&mut self, objects: Option<&[Object]>) {
        let Some(objects) = objects else { return self.0.append_null() };
        let builder = self.0.values();
        for object in objects {
            builder.field_builder::<StringBuilder>(0).expect("label").append_value(&object.label);
            builder.field_builder::<Float32Builder>(1).expect("score").append_value(object.score);
            let corners = builder.field_builder::<FixedSizeListBuilder<Float32Builder>>(2).expect("box");
            corners.values().append_slice(&object.bbox);
            corners.append(true);
            builder.append(true);
        }
        self.0.append(true);
    }

    pub fn finish(mut self) -> arrow_array::ArrayRef {
        Arc::new(self.0.finish())
    }
}

fn object_fields() -> Fields {
    let float = || Arc::new(Field::new_list_field(DataType::Float32, true));
    Fields::from(vec![
        Field::new("label", DataType::Utf8, true),
        Field::new("score", DataType::Float32, true),
        Field::new("box", DataType::FixedSizeList(float(), 4), true),
    ])
}
