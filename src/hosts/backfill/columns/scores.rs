//! The heads' column: `scores`, a float32 field per head, named as the head; null where a photo
//! has none.

use std::sync::Arc;

use arrow_array::{ArrayRef, StructArray, builder::Float32Builder};
use arrow_buffer::NullBuffer;
use arrow_schema::{ArrowError, DataType, Field, Fields};

use super::{super::sink::Row, ColumnGroup};

pub struct ScoreColumn {
    fields: Fields,
    /// One per head.
    scores: Vec<Float32Builder>,
    /// Whether each row has scores: the struct's validity.
    scored: Vec<bool>,
}

impl ScoreColumn {
    pub fn new(heads: &[String], rows: usize) -> Self {
        ScoreColumn {
            fields: heads.iter().map(|name| Field::new(name, DataType::Float32, true)).collect(),
            scores: heads.iter().map(|_| Float32Builder::with_capacity(rows)).collect(),
            scored: Vec::with_capacity(rows),
        }
    }
}

impl ColumnGroup for ScoreColumn {
    fn fields(&self) -> Vec<Field> {
        vec![Field::new("scores", DataType::Struct(self.fields.clone()), true)]
    }

    fn append(&mut self, row: &Row) {
        let scores = row.signals.as_ref().and_then(|signals| signals.scores.as_deref());
        for (head, builder) in self.scores.iter_mut().enumerate() {
            builder.append_option(scores.map(|scores| scores[head]));
        }
        self.scored.push(scores.is_some());
    }

    fn finish(&mut self) -> Result<Vec<ArrayRef>, ArrowError> {
        let columns = self.scores.iter_mut().map(|builder| Arc::new(builder.finish()) as ArrayRef).collect();
        let scored = NullBuffer::from_iter(self.scored.drain(..));
        Ok(vec![Arc::new(StructArray::try_new(self.fields.clone(), columns, Some(scored))?)])
    }
}
