//! clipfn: photo references in, CLIP image embeddings out.
//!
//! A request flows one way through the stages, each a module:
//! `api` (HTTP) -> `source` (bytes) -> `decode` (upright RGB) -> `preprocess` (tensor slot)
//! -> `batcher` (cross-request queue, one model worker) -> `model` (ONNX Runtime session).
//! `pipeline` carries one request through them; `serve` and `lambda` host the API, and `backfill`
//! drives a whole listing through the same pipeline into Parquet files.

pub mod api;
pub mod backfill;
pub mod batcher;
pub mod budget;
pub mod config;
pub mod decode;
pub mod gpu;
pub mod labels;
pub mod lambda;
pub mod memory;
pub mod metrics;
pub mod model;
mod panics;
pub mod pipeline;
pub mod preprocess;
pub mod replay;
pub mod serve;
pub mod source;
pub mod telemetry;
pub mod text;
pub mod tokenize;
