//! The backfill's output: Parquet files under `--out`, one per chunk of photos, named for the task
//! and the chunk. Each file is encoded whole in memory and then put as one object, so no reader
//! ever sees half a file, and a file that is there is a chunk that is done.

use std::{collections::HashSet, sync::Arc};

use arrow_array::{RecordBatch, cast::AsArray};
use arrow_schema::{Field, Schema};
use bytes::Bytes;
use futures::{FutureExt, StreamExt, TryFutureExt, TryStreamExt, future::BoxFuture};
use object_store::{ObjectMeta, ObjectStoreExt, PutPayload, path::Path as ObjectPath};
use parquet::{
    arrow::{
        ArrowWriter, ProjectionMask,
        arrow_reader::ArrowReaderOptions,
        async_reader::{AsyncFileReader, ParquetRecordBatchStreamBuilder},
    },
    basic::Compression,
    errors::ParquetError,
    file::{
        metadata::{KeyValue, ParquetMetaData, ParquetMetaDataReader},
        properties::WriterProperties,
    },
};

use super::{BackfillError, columns::Columns, shard::Task};
use crate::{pipeline::Signals, storage::Prefix};

/// File metadata keys: the model that made the embeddings, and their length (a column group adds
/// its own: `columns::FACE_RECOGNIZER_KEY`).
pub const MODEL_KEY: &str = "clipfn.model";
pub const DIM_KEY: &str = "clipfn.dim";

/// Existing files read at once while scanning `--out`.
const SCAN_CONCURRENCY: usize = 16;

/// One photo's row.
pub struct Row {
    pub key: String,
    /// The embedding, the pixel signals and the heads' scores; none on error.
    pub signals: Option<Signals>,
    pub error: Option<(&'static str, String)>,
    pub bytes: Option<u64>,
}

/// What earlier runs left under `--out` for this task.
#[derive(Debug, Default)]
pub struct Existing {
    /// Keys that already have a row.
    pub done: HashSet<String>,
    /// This task's chunk files already present.
    pub chunks: usize,
    /// The first chunk number not yet used by this task.
    pub next_chunk: u32,
}

pub struct Output {
    prefix: Prefix,
    task: Task,
    model: String,
    columns: Arc<Columns>,
}

impl Output {
    pub fn new(prefix: Prefix, task: Task, model: String, columns: Columns) -> Self {
        Output { prefix, task, model, columns: Arc::new(columns) }
    }

    /// Checks every Parquet file under `--out` was made by this model, and collects the keys
    /// already done: those of this task's own chunks (a retried task skips what it finished) or,
    /// with `incremental`, those of every file (a nightly job embeds only new photos).
    pub async fn scan(&self, incremental: bool) -> Result<Existing, BackfillError> {
        let files: Vec<ObjectMeta> = self
            .prefix
            .store
            .list(Some(&self.prefix.path))
            .try_filter(|meta| std::future::ready(meta.location.as_ref().ends_with(".parquet")))
            .try_collect()
            .await
            .map_err(|e| self.error(e))?;
        let mut existing = Existing::default();
        let mut reads = futures::stream::iter(files.into_iter().map(|meta| {
            let own_chunk = self.own_chunk(&meta.location);
            let wanted = incremental || own_chunk.is_some();
            async move { (own_chunk, self.read_file(meta, wanted).await) }
        }))
        .buffer_unordered(SCAN_CONCURRENCY);
        while let Some((own_chunk, keys)) = reads.next().await {
            existing.done.extend(keys?);
            if let Some(chunk) = own_chunk {
                existing.chunks += 1;
                existing.next_chunk = existing.next_chunk.max(chunk + 1);
            }
        }
        Ok(existing)
    }

    /// Encodes one chunk and puts it as `task-IIIII-of-CCCCC-chunk-NNNNNN.parquet`.
    pub async fn write(&self, chunk: u32, dim: usize, rows: Vec<Row>) -> Result<(), BackfillError> {
        let (model, columns) = (self.model.clone(), Arc::clone(&self.columns));
        let encoded = tokio::task::spawn_blocking(move || encode(&rows, &model, dim, &columns))
            .await
            .map_err(|e| self.error(e))?
            .map_err(|e| self.error(e))?;
        let path = self.prefix.path.clone().join(file_name(self.task, chunk));
        self.prefix.store.put(&path, PutPayload::from(encoded)).await.map_err(|e| self.error(e))?;
        tracing::info!(file = %self.prefix.uri_of(&path), "chunk written");
        Ok(())
    }

    /// Refuses a file of another model; returns its keys when `wanted`.
    async fn read_file(&self, meta: ObjectMeta, wanted: bool) -> Result<Vec<String>, BackfillError> {
        let uri = self.prefix.uri_of(&meta.location);
        let reader = RangeReader { store: Arc::clone(&self.prefix.store), path: meta.location, size: meta.size };
        let builder =
            ParquetRecordBatchStreamBuilder::new(reader).await.map_err(|e| self.error(format!("{uri}: {e}")))?;
        let found = builder
            .metadata()
            .file_metadata()
            .key_value_metadata()
            .and_then(|kv| kv.iter().find(|kv| kv.key == MODEL_KEY))
            .and_then(|kv| kv.value.clone())
            .unwrap_or_default();
        if found != self.model {
            return Err(BackfillError::OtherModel { file: uri, found, ours: self.model.clone() });
        }
        if !wanted {
            return Ok(Vec::new());
        }
        let key_column = ProjectionMask::columns(builder.parquet_schema(), ["key"]);
        let batches: Vec<RecordBatch> = builder
            .with_projection(key_column)
            .build()
            .map_err(|e| self.error(format!("{uri}: {e}")))?
            .try_collect()
            .await
            .map_err(|e| self.error(format!("{uri}: {e}")))?;
        Ok(batches
            .iter()
            .flat_map(|batch| batch.column(0).as_string::<i32>().iter().flatten().map(String::from))
            .collect())
    }

    /// The chunk number of an object, when it is one of this task's chunk files.
    fn own_chunk(&self, location: &ObjectPath) -> Option<u32> {
        let (task, chunk) = parse_file_name(location.filename()?)?;
        (task == self.task).then_some(chunk)
    }

    fn error(&self, e: impl std::fmt::Display) -> BackfillError {
        BackfillError::Output { location: self.prefix.uri_of(&self.prefix.path), message: e.to_string() }
    }
}

/// Reads an existing file by byte ranges (the footer, then only the columns asked for), so that
/// scanning `--out` does not download every embedding.
struct RangeReader {
    store: Arc<dyn object_store::ObjectStore>,
    path: ObjectPath,
    size: u64,
}

impl AsyncFileReader for RangeReader {
    fn get_bytes(&mut self, range: std::ops::Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        self.store.get_range(&self.path, range).map_err(|e| ParquetError::External(Box::new(e))).boxed()
    }

    /// The files are plain (no encryption, no page index needed), so the options change nothing.
    fn get_metadata<'a>(
        &'a mut self,
        _options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, parquet::errors::Result<Arc<ParquetMetaData>>> {
        async move {
            let size = self.size;
            Ok(Arc::new(ParquetMetaDataReader::new().load_and_finish(self, size).await?))
        }
        .boxed()
    }
}

/// The file name names the task (and the job's task count, which decides the keys it holds) and
/// the chunk.
pub fn file_name(task: Task, chunk: u32) -> String {
    format!("task-{:05}-of-{:05}-chunk-{chunk:06}.parquet", task.index, task.count)
}

fn parse_file_name(name: &str) -> Option<(Task, u32)> {
    let rest = name.strip_prefix("task-")?.strip_suffix(".parquet")?;
    let (index, rest) = rest.split_once("-of-")?;
    let (count, chunk) = rest.split_once("-chunk-")?;
    Some((Task { index: index.parse().ok()?, count: count.parse().ok()? }, chunk.parse().ok()?))
}

/// `rows` as one file: the groups of columns `columns` lists (src/hosts/backfill/columns/), in
/// order, and the model's id and its embeddings' length in the footer, with what the groups add.
fn encode(rows: &[Row], model: &str, dim: usize, columns: &Columns) -> Result<Vec<u8>, ParquetError> {
    let mut groups = columns.groups(rows.len(), dim);
    for row in rows {
        groups.iter_mut().for_each(|group| group.append(row));
    }
    let fields: Vec<Field> = groups.iter().flat_map(|group| group.fields()).collect();
    let mut arrays = Vec::with_capacity(fields.len());
    for group in &mut groups {
        arrays.extend(group.finish()?);
    }
    let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)?;
    let mut metadata =
        vec![KeyValue::new(MODEL_KEY.into(), model.to_string()), KeyValue::new(DIM_KEY.into(), dim.to_string())];
    metadata.extend(groups.iter().flat_map(|group| group.metadata()));
    parquet(&batch, metadata)
}

/// `batch` as one Parquet file (Snappy) with `metadata` in its footer.
fn parquet(batch: &RecordBatch, metadata: Vec<KeyValue>) -> Result<Vec<u8>, ParquetError> {
    let properties =
        WriterProperties::builder().set_compression(Compression::SNAPPY).set_key_value_metadata(Some(metadata)).build();
    let mut buffer = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut buffer, batch.schema(), Some(properties))?;
    writer.write(batch)?;
    writer.close()?;
    Ok(buffer)
}

#[cfg(test)]
mod tests {
    use arrow_array::{
        Array,
        types::{Float32Type, Float64Type, Int32Type, Int64Type, TimestampMillisecondType},
    };

    use super::*;
    use crate::{
        decode::{Location, Metadata, TakenAt},
        hosts::backfill::columns::FACE_RECOGNIZER_KEY,
        pipeline::{Face, Faces, Object, Objects, Ocr, OcrLine},
        signals::PixelSignals,
    };

    #[test]
    fn file_names_name_task_and_chunk_and_parse_back() {
        let task = Task { index: 2, count: 3 };
        let name = file_name(task, 17);
        assert_eq!(name, "task-00002-of-00003-chunk-000017.parquet");
        assert_eq!(parse_file_name(&name), Some((task, 17)));
        assert_eq!(parse_file_name("part-0.parquet"), None);
        assert_eq!(parse_file_name("task-00002-of-00003-chunk-000017.parquet.tmp"), None);
    }

    #[test]
    fn rows_round_trip_with_model_metadata_and_every_signal() {
        let pixels = PixelSignals { hash: 0xfedc_ba98_7654_3210, sharpness: 412.5, coarser: [300.0, 200.0] };
        let local = chrono::NaiveDate::from_ymd_opt(2024, 5, 4).unwrap().and_hms_opt(13, 2, 1).unwrap();
        let taken = TakenAt { local, subsec_digits: 0, offset_minutes: Some(120), offset_from_gps: false };
        let face = Face {
            bbox: [1.0, 2.0, 3.0, 4.0],
            cut: false,
            score: 0.9,
            landmarks: [[0.0; 2]; 5],
            embedding: vec![1.0, 0.0],
            chip_pixels: 2.0,
        };
        let signals = Signals {
            embedding: Some(vec![0.6, 0.8]),
            pixels: Some(pixels),
            scores: Some(vec![5.5, 0.25]),
            faces: Some(Ok(Faces { faces: vec![face], left_out: 0 })),
            ocr: Some(Ok(Ocr { lines: vec![line("OPEN"), line("24 小时")], left_out: 0 })),
            objects: Some(Ok(Objects {
                objects: vec![Object {
                    label: "cat".into(),
                    class: 15,
                    score: 0.5,
                    bbox: [0.0, 1.0, 2.0, 3.0],
                    embedding: None,
                }],
                left_out: 0,
            })),
            size: Some((4, 3)),
            metadata: Some(Metadata {
                taken_at: Some(taken),
                location: Some(Location { lat: -22.9, lon: -43.2, alt: None }),
                jpeg_quality: Some(90),
            }),
        };
        let rows = vec![
            Row { key: "a.jpg".into(), signals: Some(signals), error: None, bytes: Some(1234) },
            Row { key: "b.jpg".into(), signals: None, error: Some(("not_found", "no object".into())), bytes: None },
        ];
        let heads = vec!["aesthetic".to_string(), "sharp".to_string()];
        let columns = Columns { heads, faces: Some("dlib:00:chips-3".into()), ocr: true, objects: true };
        let file = bytes::Bytes::from(encode(&rows, "clip-test", 2, &columns).unwrap());
        let builder = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file).unwrap();
        let kv = builder.metadata().file_metadata().key_value_metadata().unwrap().clone();
        assert!(kv.contains(&KeyValue::new(MODEL_KEY.into(), "clip-test".to_string())));
        assert!(kv.contains(&KeyValue::new(DIM_KEY.into(), "2".to_string())));
        assert!(kv.contains(&KeyValue::new(FACE_RECOGNIZER_KEY.into(), "dlib:00:chips-3".to_string())));
        let names: Vec<String> = builder.schema().fields().iter().map(|f| f.name().clone()).collect();
        let (every_file, each_capability) = names.split_at(12);
        assert_eq!(every_file, EVERY_FILE);
        assert_eq!(each_capability, ["scores", "faces", "ocr", "ocr_text", "objects"]);
        let batch = builder.build().unwrap().next().unwrap().unwrap();
        assert_eq!(batch.num_rows(), 2);
        let column = |name: &str| batch.column_by_name(name).unwrap();
        let embedding = column("embedding").as_list::<i32>();
        assert!(embedding.is_valid(0) && embedding.is_null(1));
        let first = embedding.value(0);
        assert_eq!(first.as_primitive::<Float32Type>().values().to_vec(), vec![0.6, 0.8]);
        assert_eq!(column("error_code").as_string::<i32>().iter().collect::<Vec<_>>(), vec![None, Some("not_found")]);
        let hashes = column("hash").as_primitive::<Int64Type>();
        assert_eq!((hashes.value(0) as u64, hashes.is_null(1)), (0xfedc_ba98_7654_3210, true));
        assert_eq!(
            column("sharpness").as_primitive::<Float64Type>().iter().collect::<Vec<_>>(),
            vec![Some(412.5), None]
        );
        let taken_at = column("taken_at").as_string::<i32>();
        assert_eq!(taken_at.iter().collect::<Vec<_>>(), vec![Some("2024-05-04T13:02:01+02:00"), None]);
        let utc = column("taken_at_utc").as_primitive::<TimestampMillisecondType>();
        assert_eq!(utc.iter().collect::<Vec<_>>(), vec![Some(1_714_820_521_000), None], "11:02:01 UTC");
        let location = column("location").as_struct();
        assert!(location.is_valid(0) && location.is_null(1));
        let place = |field: &str| location.column_by_name(field).unwrap().as_primitive::<Float64Type>().clone();
        assert_eq!((place("lat").value(0), place("lon").value(0), place("alt").is_null(0)), (-22.9, -43.2, true));
        assert_eq!(column("width").as_primitive::<Int32Type>().iter().collect::<Vec<_>>(), vec![Some(4), None]);
        assert_eq!(column("height").as_primitive::<Int32Type>().iter().collect::<Vec<_>>(), vec![Some(3), None]);
        let scores = column("scores").as_struct();
        assert!(scores.is_valid(0) && scores.is_null(1));
        let sharp = scores.column_by_name("sharp").unwrap().as_primitive::<Float32Type>();
        assert_eq!(sharp.value(0), 0.25);
        let faces = column("faces").as_list::<i32>();
        assert!(faces.is_valid(0) && faces.is_null(1));
        let first = faces.value(0);
        let first = first.as_struct();
        assert_eq!(first.len(), 1);
        assert_eq!(first.column_by_name("score").unwrap().as_primitive::<Float32Type>().value(0), 0.9);
        let bbox = first.column_by_name("box").unwrap().as_fixed_size_list().value(0);
        assert_eq!(bbox.as_primitive::<Float32Type>().values().to_vec(), vec![1.0, 2.0, 3.0, 4.0]);
        let joined = column("ocr_text").as_string::<i32>();
        assert_eq!(joined.iter().collect::<Vec<_>>(), vec![Some("OPEN\n24 小时"), None], "joined by newlines");
        let lines = column("ocr").as_list::<i32>();
        assert!(lines.is_valid(0) && lines.is_null(1));
        let first = lines.value(0);
        let first = first.as_struct();
        assert_eq!(first.column_by_name("text").unwrap().as_string::<i32>().value(1), "24 小时");
        assert_eq!(first.column_by_name("box_score").unwrap().as_primitive::<Float32Type>().value(0), 0.75);
        let corners = first.column_by_name("box").unwrap().as_fixed_size_list().value(0);
        assert_eq!(
            corners.as_primitive::<Float32Type>().values().to_vec(),
            vec![1.0, 2.0, 9.0, 2.0, 9.0, 5.0, 1.0, 5.0]
        );
        let objects = column("objects").as_list::<i32>();
        assert!(objects.is_valid(0) && objects.is_null(1));
        let first = objects.value(0);
        assert_eq!(first.as_struct().column_by_name("label").unwrap().as_string::<i32>().value(0), "cat");
    }

    fn line(text: &str) -> OcrLine {
        let corners = [[1.0, 2.0], [9.0, 2.0], [9.0, 5.0], [1.0, 5.0]];
        OcrLine { text: text.into(), score: 0.95, box_score: 0.75, corners }
    }

    #[test]
    fn without_heads_there_is_no_scores_column() {
        let rows =
            vec![Row { key: "b.jpg".into(), signals: None, error: Some(("not_found", "x".into())), bytes: None }];
        let file = bytes::Bytes::from(encode(&rows, "clip-test", 2, &Columns::default()).unwrap());
        let builder = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file).unwrap();
        let names: Vec<String> = builder.schema().fields().iter().map(|f| f.name().clone()).collect();
        assert_eq!(names, EVERY_FILE);
    }

    /// The columns every file has, in order.
    const EVERY_FILE: [&str; 12] = [
        "key",
        "embedding",
        "error_code",
        "error_message",
        "bytes",
        "hash",
        "sharpness",
        "taken_at",
        "taken_at_utc",
        "location",
        "width",
        "height",
    ];
}
