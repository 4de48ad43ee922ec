//! Inline photos: `data:image/<type>;base64,<data>` references carry their bytes in the request.
//! The payload is decoded once into the bytes the decode stage reads; nothing touches the disk.

use base64::{
    Engine,
    alphabet::STANDARD,
    engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig},
};
use bytes::Bytes;

use super::SourceError;
use crate::storage::StorageError;

/// Standard base64, with or without its `=` padding.
const BASE64: GeneralPurpose = GeneralPurpose::new(
    &STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

pub fn is_inline(reference: &str) -> bool {
    reference.get(..5).is_some_and(|scheme| scheme.eq_ignore_ascii_case("data:"))
}

/// The media type and payload of a data URI, and whether the payload is base64.
fn split(reference: &str) -> Option<(&str, bool, &str)> {
    let (header, payload) = reference.get(5..)?.split_once(',')?;
    let (media_type, base64) = match header.rsplit_once(';') {
        Some((rest, last)) if last.trim().eq_ignore_ascii_case("base64") => (rest, true),
        _ => (header, false),
    };
    let media_type = media_type.split(';').next().unwrap_or_default().trim();
    Some((media_type, base64, payload))
}

/// The photo's bytes. The media type must be an image, but the format itself is judged later
/// from the bytes, as for any other source.
pub fn decode(reference: &str, limit: u64) -> Result<Bytes, SourceError> {
    let (media_type, base64, payload) =
        split(reference).ok_or_else(|| SourceError::BadInline("a data URI needs a ',' before its data".into()))?;
    if !media_type.get(..6).is_some_and(|t| t.eq_ignore_ascii_case("image/")) {
        return Err(SourceError::NotAnImage(media_type.to_string()));
    }
    if !base64 {
        return Err(SourceError::BadInline("inline photos must be base64 (data:image/...;base64,...)".into()));
    }
    let size = decoded_len(payload);
    if size > limit {
        return Err(SourceError::from(StorageError::TooLarge { size, limit }));
    }
    BASE64.decode(payload).map(Bytes::from).map_err(|e| SourceError::BadInline(format!("bad base64 in data URI: {e}")))
}

/// The bytes a base64 payload decodes to (exact for valid base64).
fn decoded_len(payload: &str) -> u64 {
    let data = payload.trim_end_matches('=').len() as u64;
    data * 3 / 4
}

/// How a data URI is echoed in responses and logs: its header and size, never its payload.
pub fn shown(reference: &str) -> String {
    match split(reference) {
        Some((media_type, _, payload)) => format!("data:{media_type};base64,…({} bytes)", decoded_len(payload)),
        None => "data:…".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_payloads_decode_with_or_without_padding() {
        assert_eq!(decode("data:image/png;base64,aGVsbG8=", 100).unwrap(), Bytes::from_static(b"hello"));
        assert_eq!(decode("DATA:Image/JPEG;name=a.jpg;BASE64,aGVsbG8", 100).unwrap(), Bytes::from_static(b"hello"));
        assert_eq!(decoded_len("aGVsbG8="), 5);
        assert_eq!(decoded_len("aGVsbG8h"), 6);
    }

    #[test]
    fn bad_data_uris_get_their_own_errors() {
        let err = |r: &str| decode(r, 100).unwrap_err();
        assert!(matches!(err("data:image/png;base64,a$b%"), SourceError::BadInline(_)));
        assert!(matches!(err("data:image/png,hello"), SourceError::BadInline(_)));
        assert!(matches!(err("data:image/png;base64"), SourceError::BadInline(_)));
        assert!(matches!(err("data:text/plain;base64,aGVsbG8="), SourceError::NotAnImage(t) if t == "text/plain"));
        assert!(matches!(err("data:;base64,aGVsbG8="), SourceError::NotAnImage(_)));
        assert!(matches!(
            decode("data:image/png;base64,aGVsbG8=", 4),
            Err(SourceError::Read(StorageError::TooLarge { size: 5, .. }))
        ));
    }

    #[test]
    fn echoes_leave_the_payload_out() {
        assert_eq!(shown("data:image/jpeg;base64,aGVsbG8h"), "data:image/jpeg;base64,…(6 bytes)");
        assert!(is_inline("Data:image/png;base64,x") && !is_inline("gs://b/data:x") && !is_inline("dat"));
    }
}
