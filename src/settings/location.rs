//! What kind of thing `CLIPFN_MODEL` names, told from the location alone: start-up checks need
//! to know whether a model folder (which may hold a text tower) is meant before anything is read.

/// Whether `CLIPFN_MODEL` names a folder rather than one `.onnx` file: anything ending in '/', or
/// a local directory.
pub fn is_folder(location: &str) -> bool {
    if location.ends_with('/') {
        return true;
    }
    let local = location.strip_prefix("file://").unwrap_or(location);
    !local.contains("://") && std::path::Path::new(local).is_dir()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folders_are_told_from_files() {
        let dir = tempfile::tempdir().unwrap();
        assert!(is_folder(dir.path().to_str().unwrap()));
        assert!(is_folder(&format!("file://{}", dir.path().display())));
        assert!(is_folder("gs://models/clip/"));
        assert!(!is_folder("gs://models/clip.onnx"));
        assert!(!is_folder("/no/such/model.onnx"));
    }
}
