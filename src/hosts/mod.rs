//! The ways in and out: the HTTP server (`serve`), AWS Lambda (`lambda`), saved events
//! (`replay`) and whole listings into Parquet (`backfill`). Each holds a loaded
//! [`Service`](crate::service::Service) and drives it; none has a flow of its own. `openapi`
//! prints the API's document, with nothing loaded.

pub mod backfill;
pub mod lambda;
pub mod openapi;
pub mod replay;
pub mod serve;
