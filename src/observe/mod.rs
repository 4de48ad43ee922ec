//! What the service tells the outside about itself: traces and logs (`telemetry`), metric
//! instruments (`metrics`) and the GPU's state (`gpu`). A leaf: it imports only `sys`.

pub mod gpu;
pub mod metrics;
pub mod telemetry;
