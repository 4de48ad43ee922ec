//! Every integration test in one binary: one compile of the harness (`common`) and one link,
//! instead of one per file (issue 59). Each file is a module; `cargo test --test it ocr::` runs
//! one file's tests, `cargo test --test it ocr::some_test` one test.

mod common;

mod analyze;
mod backfill;
mod batching;
mod cpu_quota;
mod doc_paths;
mod embed;
mod faces;
mod faces_real;
mod faults;
mod folders;
mod formats;
mod immich;
mod lambda;
mod layers;
mod lifecycle;
mod objects;
mod ocr;
mod openapi;
mod shapes;
mod siglip;
mod stores;
mod telemetry;
mod text;
mod web_sources;
