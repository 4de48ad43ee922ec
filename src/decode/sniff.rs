//! Content sniffing: which decoder a photo goes to is decided by its first bytes, never by the key's
//! extension or the store's content type (phones and upload forms get both wrong).

/// The photo formats clipfn knows. Whether one can be decoded depends on the cargo features the
/// binary was built with (`heif`, `avif`); sniffing always works, so a disabled format gets a clear
/// `unsupported_format` rather than a generic one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    Jpeg,
    Png,
    Gif,
    WebP,
    Bmp,
    Tiff,
    /// HEIF with HEVC (iPhone HEIC) or any other non-AV1 HEIF brand.
    Heif,
    Avif,
}

impl Format {
    pub const ALL: [Format; 8] =
        [Format::Jpeg, Format::Png, Format::Gif, Format::WebP, Format::Bmp, Format::Tiff, Format::Heif, Format::Avif];

    pub fn name(self) -> &'static str {
        match self {
            Format::Jpeg => "jpeg",
            Format::Png => "png",
            Format::Gif => "gif",
            Format::WebP => "webp",
            Format::Bmp => "bmp",
            Format::Tiff => "tiff",
            Format::Heif => "heif",
            Format::Avif => "avif",
        }
    }

    /// Whether this binary was built with a decoder for the format.
    #[allow(clippy::match_like_matches_macro)] // one arm per feature reads better
    pub fn is_supported(self) -> bool {
        match self {
            Format::Heif => cfg!(feature = "heif"),
            Format::Avif => cfg!(feature = "avif"),
            _ => true,
        }
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The format of `bytes`, from its magic bytes; `None` for anything else (HTML error pages, text,
/// video, empty objects).
pub fn sniff(bytes: &[u8]) -> Option<Format> {
    let starts = |magic: &[u8]| bytes.starts_with(magic);
    if starts(&[0xFF, 0xD8, 0xFF]) {
        Some(Format::Jpeg)
    } else if starts(b"\x89PNG\r\n\x1a\n") {
        Some(Format::Png)
    } else if starts(b"GIF87a") || starts(b"GIF89a") {
        Some(Format::Gif)
    } else if bytes.len() >= 12 && starts(b"RIFF") && &bytes[8..12] == b"WEBP" {
        Some(Format::WebP)
    } else if starts(b"BM") && bytes.len() >= 26 {
        Some(Format::Bmp)
    } else if starts(b"II*\0") || starts(b"MM\0*") || starts(b"II+\0") || starts(b"MM\0+") {
        Some(Format::Tiff)
    } else {
        iso_bmff_brand(bytes)
    }
}

/// HEIF and AVIF are ISO base media files: a `ftyp` box first, whose major and compatible brands say
/// what is inside. AV1 brands win over the generic HEIF ones (`mif1` is in both kinds of file).
fn iso_bmff_brand(bytes: &[u8]) -> Option<Format> {
    if bytes.len() < 16 || &bytes[4..8] != b"ftyp" {
        return None;
    }
    let size = u32::from_be_bytes(bytes[0..4].try_into().unwrap()) as usize;
    let end = size.clamp(16, bytes.len().min(4096));
    let major = &bytes[8..12];
    // bytes[12..16] is the minor version; compatible brands follow.
    let compatible = bytes[16..end].chunks_exact(4);
    let brands = || std::iter::once(major).chain(compatible.clone());
    const AVIF: [&[u8]; 2] = [b"avif", b"avis"];
    const HEIF: [&[u8]; 8] = [b"heic", b"heix", b"heim", b"heis", b"hevc", b"hevx", b"mif1", b"msf1"];
    if AVIF.contains(&major) {
        Some(Format::Avif)
    } else if HEIF[..6].contains(&major) {
        Some(Format::Heif)
    } else if brands().any(|b| AVIF.contains(&b)) {
        Some(Format::Avif)
    } else if brands().any(|b| HEIF.contains(&b)) {
        Some(Format::Heif)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ftyp(major: &[u8; 4], compatible: &[&[u8; 4]]) -> Vec<u8> {
        let size = 16 + 4 * compatible.len();
        let mut b = (size as u32).to_be_bytes().to_vec();
        b.extend_from_slice(b"ftyp");
        b.extend_from_slice(major);
        b.extend_from_slice(&[0; 4]);
        compatible.iter().for_each(|c| b.extend_from_slice(*c));
        b.extend_from_slice(&[0, 0, 0, 8, b'm', b'e', b't', b'a']);
        b
    }

    #[test]
    fn knows_photo_formats_by_their_magic() {
        assert_eq!(sniff(&[0xFF, 0xD8, 0xFF, 0xE1, 0, 0]), Some(Format::Jpeg));
        assert_eq!(sniff(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR"), Some(Format::Png));
        assert_eq!(sniff(b"GIF89a\x01\x00"), Some(Format::Gif));
        assert_eq!(sniff(b"RIFF\x10\0\0\0WEBPVP8 "), Some(Format::WebP));
        assert_eq!(sniff(b"MM\0*\0\0\0\x08"), Some(Format::Tiff));
        assert_eq!(sniff(&ftyp(b"heic", &[b"mif1", b"heic"])), Some(Format::Heif));
        assert_eq!(sniff(&ftyp(b"mif1", &[b"mif1", b"miaf", b"MA1B", b"avif"])), Some(Format::Avif));
        assert_eq!(sniff(&ftyp(b"avif", &[b"mif1"])), Some(Format::Avif));
        assert_eq!(sniff(&ftyp(b"mif1", &[b"heic"])), Some(Format::Heif));
    }

    #[test]
    fn other_content_is_not_an_image() {
        assert_eq!(sniff(b""), None);
        assert_eq!(sniff(b"<!DOCTYPE html><html>403</html>"), None);
        assert_eq!(sniff(&ftyp(b"isom", &[b"isom", b"mp41"])), None, "an MP4 video");
        assert_eq!(sniff(b"RIFF\x10\0\0\0WAVEfmt "), None);
        assert_eq!(sniff(&[0xFF, 0xD8]), None);
    }
}
