//! Immich's `/predict` form as its client (`machine-learning.repository.ts`, v2.5.6) sends it: a
//! multipart body as undici's `FormData` writes it, with `entries` and the photo as a blob named
//! `image`, or a `text` field. Shared by tests/it/immich.rs and the Immich bench.

pub const BOUNDARY: &str = "----formdata-undici-0421337";

/// The Content-Type of [`form`]'s bodies.
pub fn content_type() -> String {
    format!("multipart/form-data; boundary={BOUNDARY}")
}

/// A form part: its name, whether it is a blob (`filename="blob"`, as `FormData` names a Blob),
/// and its bytes.
pub struct Part<'a>(pub &'a str, pub bool, pub &'a [u8]);

pub fn form(parts: &[Part]) -> Vec<u8> {
    let mut body = Vec::new();
    for Part(name, blob, bytes) in parts {
        body.extend_from_slice(format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"").as_bytes());
        if *blob {
            body.extend_from_slice(b"; filename=\"blob\"\r\nContent-Type: application/octet-stream");
        }
        body.extend_from_slice(b"\r\n\r\n");
        body.extend_from_slice(bytes);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    body
}

/// The form Immich sends for a photo's CLIP embedding.
pub fn visual_form(photo: &[u8]) -> Vec<u8> {
    let entries = r#"{"clip":{"visual":{"modelName":"ViT-B-32__openai"}}}"#;
    form(&[Part("entries", false, entries.as_bytes()), Part("image", true, photo)])
}
