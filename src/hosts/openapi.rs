//! `clipfn openapi`: the OpenAPI document for these settings, as a server serves it before its
//! model is loaded, on stdout: what a backend generates its clients from in its own build, with
//! no model and no server.

use std::io::Write;

use crate::settings::Settings;

pub fn print(settings: &Settings) -> std::io::Result<()> {
    std::io::stdout().write_all(&crate::api::openapi_document(settings, None))
}
