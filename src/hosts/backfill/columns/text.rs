//! The OCR columns of a backfill file: `ocr`, each line's `text`, `score`, `box_score` and `box`
//! (its four corners as 8 numbers, x then y), and `ocr_text`, the lines joined by newlines, which a
//! query searches (docs/deploy.md, "Find photos by a word in them"). Both are null on error, or
//! when an OCR model tripped on the photo.

use std::sync::Arc;

use arrow_array::{
    ArrayRef,
    builder::{ArrayBuilder, FixedSizeListBuilder, Float32Builder, ListBuilder, StringBuilder, StructBuilder},
};
use arrow_schema::{ArrowError, DataType, Field, Fields};

use super::{super::sink::Row, ColumnGroup, list_of};

pub struct TextColumns {
    lines: ListBuilder<StructBuilder>,
    joined: StringBuilder,
}

impl TextColumns {
    pub fn new() -> Self {
        let fields: Vec<Box<dyn ArrayBuilder>> = vec![
            Box::new(StringBuilder::new()),
            Box::new(Float32Builder::new()),
            Box::new(Float32Builder::new()),
            Box::new(FixedSizeListBuilder::new(Float32Builder::new(), 8)),
        ];
        TextColumns { lines: ListBuilder::new(StructBuilder::new(line_fields(), fields)), joined: StringBuilder::new() }
    }
}

impl ColumnGroup for TextColumns {
    fn fields(&self) -> Vec<Field> {
        vec![list_of("ocr", line_fields()), Field::new("ocr_text", DataType::Utf8, true)]
    }

    fn append(&mut self, row: &Row) {
        let Some(ocr) = row.signals.as_ref().and_then(|signals| signals.ocr.as_ref()?.as_ref().ok()) else {
            self.lines.append_null();
            return self.joined.append_null();
        };
        let line_builder = self.lines.values();
        for line in &ocr.lines {
            line_builder.field_builder::<StringBuilder>(0).expect("text").append_value(&line.text);
            line_builder.field_builder::<Float32Builder>(1).expect("score").append_value(line.score);
            line_builder.field_builder::<Float32Builder>(2).expect("box_score").append_value(line.box_score);
            let corners = line_builder.field_builder::<FixedSizeListBuilder<Float32Builder>>(3).expect("box");
            corners.values().append_slice(line.corners.as_flattened());
            corners.append(true);
            line_builder.append(true);
        }
        self.lines.append(true);
        let texts: Vec<&str> = ocr.lines.iter().map(|line| line.text.as_str()).collect();
        self.joined.append_value(texts.join("\n"));
    }

    fn finish(&mut self) -> Result<Vec<ArrayRef>, ArrowError> {
        Ok(vec![Arc::new(self.lines.finish()), Arc::new(self.joined.finish())])
    }
}

fn line_fields() -> Fields {
    let float = || Arc::new(Field::new_list_field(DataType::Float32, true));
    Fields::from(vec![
        Field::new("text", DataType::Utf8, true),
        Field::new("score", DataType::Float32, true),
        Field::new("box_score", DataType::Float32, true),
        Field::new("box", DataType::FixedSizeList(float(), 8), true),
    ])
}
