//! clipfn: photo references in, CLIP image embeddings out.
//!
//! A request flows one way through the stages, each a module, from `api` (HTTP) through `source`,
//! `decode`, `preprocess` and the model `worker` to the `model`'s towers; `pipeline` carries one
//! request's photos through them and `text` its texts; `service` loads it all once at start-up;
//! `hosts` serve it (HTTP, Lambda, replay) or drive a whole listing through it (backfill).
//! docs/design.md draws the flow and the layers (each part imports only the parts below it;
//! tests/it/layers.rs holds it to that).

pub mod album;
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
mod signals;
mod source;
mod storage;
pub mod sys;
mod text;
pub mod tokenize;
mod worker;
