//! What the photo's EXIF and size say: `taken_at` (the API's text: ISO 8601, with an offset when
//! the photo gives one) and `taken_at_utc` (its instant, where the offset is known), `location`
//! (`lat`, `lon`, `alt` as the API's; null where the photo records none), `width` and `height`
//! (upright, full size).

use std::sync::Arc;

use arrow_array::{
    ArrayRef, StructArray,
    builder::{Float64Builder, Int32Builder, StringBuilder, TimestampMillisecondBuilder},
};
use arrow_buffer::NullBuffer;
use arrow_schema::{ArrowError, DataType, Field, Fields, TimeUnit};

use super::{super::sink::Row, ColumnGroup};

pub struct MetadataColumns {
    taken_at: StringBuilder,
    taken_at_utc: TimestampMillisecondBuilder,
    /// Latitude, longitude, altitude.
    places: [Float64Builder; 3],
    /// Whether each row has a place: the `location` struct's validity.
    located: Vec<bool>,
    widths: Int32Builder,
    heights: Int32Builder,
}

impl MetadataColumns {
    pub fn new(rows: usize) -> Self {
        MetadataColumns {
            taken_at: StringBuilder::new(),
            taken_at_utc: TimestampMillisecondBuilder::with_capacity(rows).with_timezone("UTC"),
            places: std::array::from_fn(|_| Float64Builder::with_capacity(rows)),
            located: Vec::with_capacity(rows),
            widths: Int32Builder::with_capacity(rows),
            heights: Int32Builder::with_capacity(rows),
        }
    }
}

impl ColumnGroup for MetadataColumns {
    fn fields(&self) -> Vec<Field> {
        vec![
            Field::new("taken_at", DataType::Utf8, true),
            Field::new("taken_at_utc", DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())), true),
            Field::new("location", DataType::Struct(location_fields()), true),
            Field::new("width", DataType::Int32, true),
            Field::new("height", DataType::Int32, true),
        ]
    }

    fn append(&mut self, row: &Row) {
        let signals = row.signals.as_ref();
        let metadata = signals.and_then(|signals| signals.metadata.as_ref());
        let taken = metadata.and_then(|metadata| metadata.taken_at.as_ref());
        self.taken_at.append_option(taken.map(|taken| taken.iso8601()));
        self.taken_at_utc.append_option(taken.and_then(|taken| taken.utc_millis()));
        let place = metadata.and_then(|metadata| metadata.location);
        self.places[0].append_option(place.map(|place| place.lat));
        self.places[1].append_option(place.map(|place| place.lon));
        self.places[2].append_option(place.and_then(|place| place.alt));
        self.located.push(place.is_some());
        let size = signals.and_then(|signals| signals.size);
        self.widths.append_option(size.map(|(width, _)| width as i32));
        self.heights.append_option(size.map(|(_, height)| height as i32));
    }

    fn finish(&mut self) -> Result<Vec<ArrayRef>, ArrowError> {
        let places = self.places.iter_mut().map(|builder| Arc::new(builder.finish()) as ArrayRef).collect();
        let located = NullBuffer::from_iter(self.located.drain(..));
        Ok(vec![
            Arc::new(self.taken_at.finish()),
            Arc::new(self.taken_at_utc.finish()),
            Arc::new(StructArray::try_new(location_fields(), places, Some(located))?),
            Arc::new(self.widths.finish()),
            Arc::new(self.heights.finish()),
        ])
    }
}

fn location_fields() -> Fields {
    ["lat", "lon", "alt"].map(|name| Field::new(name, DataType::Float64, true)).into_iter().collect()
}
