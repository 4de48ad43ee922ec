//! The objects column of a backfill file: `objects`, each object's `label`, `score` and `box`
//! ([x1, y1, x2, y2] in the upright photo's pixels), best first, as `/v1/analyze` answers them; a
//! query finds photos by label (docs/deploy.md, "Find photos of a thing"). Null on error, or when
//! the object model tripped on the photo.

use std::sync::Arc;

use arrow_array::{
    ArrayRef,
    builder::{ArrayBuilder, FixedSizeListBuilder, Float32Builder, ListBuilder, StringBuilder, StructBuilder},
};
use arrow_schema::{ArrowError, DataType, Field, Fields};

use super::{super::sink::Row, ColumnGroup, list_of};

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
}

impl ColumnGroup for ObjectColumn {
    fn fields(&self) -> Vec<Field> {
        vec![list_of("objects", object_fields())]
    }

    fn append(&mut self, row: &Row) {
        let objects = row.signals.as_ref().and_then(|signals| signals.objects.as_ref()?.as_ref().ok());
        let Some(objects) = objects else { return self.0.append_null() };
        let builder = self.0.values();
        for object in &objects.objects {
            builder.field_builder::<StringBuilder>(0).expect("label").append_value(&object.label);
            builder.field_builder::<Float32Builder>(1).expect("score").append_value(object.score);
            let corners = builder.field_builder::<FixedSizeListBuilder<Float32Builder>>(2).expect("box");
            corners.values().append_slice(&object.bbox);
            corners.append(true);
            builder.append(true);
        }
        self.0.append(true);
    }

    fn finish(&mut self) -> Result<Vec<ArrayRef>, ArrowError> {
        Ok(vec![Arc::new(self.0.finish())])
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
