//! Panics that clipfn contains (a decoder on a hostile file, the model on a photo that trips it)
//! are reported with their message.

use std::any::Any;

/// The message a panic was raised with, when it was a string.
pub fn message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}
