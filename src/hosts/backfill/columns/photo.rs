//! The columns every file starts with: `key`, `embedding` (list of float32, null on error),
//! `error_code` and `error_message` (null when embedded) and `bytes` (the photo's size, null when it
//! was not fetched).

use std::sync::Arc;

use arrow_array::{
    ArrayRef,
    builder::{Float32Builder, Int64Builder, ListBuilder, StringBuilder},
};
use arrow_schema::{ArrowError, DataType, Field};

use super::{super::sink::Row, ColumnGroup};

pub struct PhotoColumns {
    keys: StringBuilder,
    embeddings: ListBuilder<Float32Builder>,
    codes: StringBuilder,
    messages: StringBuilder,
    bytes: Int64Builder,
}

impl PhotoColumns {
    pub fn new(rows: usize, dim: usize) -> Self {
        PhotoColumns {
            keys: StringBuilder::new(),
            embeddings: ListBuilder::with_capacity(Float32Builder::with_capacity(rows * dim), rows),
            codes: StringBuilder::new(),
            messages: StringBuilder::new(),
            bytes: Int64Builder::with_capacity(rows),
        }
    }
}

impl ColumnGroup for PhotoColumns {
    fn fields(&self) -> Vec<Field> {
        vec![
            Field::new("key", DataType::Utf8, false),
            Field::new("embedding", DataType::List(Arc::new(Field::new_list_field(DataType::Float32, true))), true),
            Field::new("error_code", DataType::Utf8, true),
            Field::new("error_message", DataType::Utf8, true),
            Field::new("bytes", DataType::Int64, true),
        ]
    }

    fn append(&mut self, row: &Row) {
        self.keys.append_value(&row.key);
        match row.signals.as_ref().and_then(|signals| signals.embedding.as_deref()) {
            Some(embedding) => {
                self.embeddings.values().append_slice(embedding);
                self.embeddings.append(true);
            }
            None => self.embeddings.append_null(),
        }
        self.codes.append_option(row.error.as_ref().map(|(code, _)| *code));
        self.messages.append_option(row.error.as_ref().map(|(_, message)| message));
        self.bytes.append_option(row.bytes.map(|b| b as i64));
    }

    fn finish(&mut self) -> Result<Vec<ArrayRef>, ArrowError> {
        Ok(vec![
            Arc::new(self.keys.finish()),
            Arc::new(self.embeddings.finish()),
            Arc::new(self.codes.finish()),
            Arc::new(self.messages.finish()),
            Arc::new(self.bytes.finish()),
        ])
    }
}
