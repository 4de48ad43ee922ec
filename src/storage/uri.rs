//! `scheme://bucket/path`, split without percent-decoding: keys are taken literally.

/// A parsed `scheme://bucket/path` (for `file:///abs`, bucket is empty and path is `abs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uri<'a> {
    pub scheme: &'a str,
    pub bucket: &'a str,
    pub path: &'a str,
}

impl<'a> Uri<'a> {
    pub fn parse(s: &'a str) -> Option<Self> {
        let (scheme, rest) = s.split_once("://")?;
        let (bucket, path) = rest.split_once('/').unwrap_or((rest, ""));
        Some(Uri { scheme, bucket, path })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_split_into_parts() {
        assert_eq!(Uri::parse("gs://b/p/x.jpg"), Some(Uri { scheme: "gs", bucket: "b", path: "p/x.jpg" }));
        assert_eq!(Uri::parse("gs://b"), Some(Uri { scheme: "gs", bucket: "b", path: "" }));
        assert_eq!(Uri::parse("file:///srv/photos/"), Some(Uri { scheme: "file", bucket: "", path: "srv/photos/" }));
        assert_eq!(Uri::parse("user/7/x.jpg"), None);
    }
}
