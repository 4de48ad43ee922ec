//! Request and response bodies of the HTTP API, one file per endpoint.

mod album;
mod analyze;
mod classify;
mod embed;
mod embeddings;

pub use album::*;
pub use analyze::*;
pub use classify::*;
pub use embed::*;
pub use embeddings::*;
use serde::Deserialize;

/// A whole number as JSON Schema's `integer` reads it: `5.0` is 5 (JSON has one number type),
/// and one past the type's range is the nearest in it; a fraction or a negative count is refused.
fn whole<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: TryFrom<i64>,
{
    use serde::de::Error;
    let Some(number) = Option::<serde_json::Number>::deserialize(deserializer)? else { return Ok(None) };
    let value = match (number.as_i64(), number.as_f64()) {
        (Some(value), _) => value,
        // `as` saturates: 1e30 reads as i64::MAX.
        (None, Some(value)) if value.fract() == 0.0 => value as i64,
        _ => return Err(D::Error::custom(format!("expected a whole number, got {number}"))),
    };
    T::try_from(value).map(Some).map_err(|_| D::Error::custom(format!("expected a count, got {number}")))
}
