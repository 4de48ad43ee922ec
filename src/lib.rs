//! clipfn: photo references in, CLIP image embeddings out.
//!
//! A request flows one way through the stages, each a module:
//! `api` (HTTP) -> `source` (bytes) -> `decode` (upright RGB) -> `preprocess` (tensor slot)
//! -> `worker` (cross-request queue, the one owner of the sessions) -> `model` (ONNX Runtime).
//! `pipeline` carries one request's photos through them and `text` its texts; `service` loads it
//! all once at start-up; `hosts` serve it (HTTP, Lambda, replay) or drive a whole listing through
//! it (backfill). Below the stages: `storage` (object stores, plain reads), `settings`,
//! `embedding` (vectors and scores), `observe` (telemetry, metrics) and `sys` (budgets, memory).
//! Each part imports only the parts below it (docs/design.md; tests/layers.rs holds it to that).

mod api;
pub mod decode;
mod embedding;
pub mod hosts;
pub mod model;
pub mod observe;
mod pipeline;
pub mod preprocess;
mod service;
pub mod settings;
mod source;
mod storage;
pub mod sys;
mod text;
pub mod tokenize;
mod worker;
