//! Which `http(s)://` URLs may be fetched: those under a prefix listed in `CLIPFN_ALLOWED_SOURCES`.
//!
//! References are parsed with a WHATWG URL parser (the one browsers follow) and compared part by
//! part, never as strings. The parser is lenient in ways an attacker can use, so a reference is
//! also refused when its host is not written the way the parser reads it (percent-encoding, IDNA
//! mapping, IPv4 in decimal or hex), when it carries user info (`allowed@evil`), or when its host
//! is an IP address in any notation.

use url::{Host, Url};

use crate::{source::SourceError, storage::StorageError};

/// One allowed prefix: scheme, host and port must be equal, and the path must start with `path`.
#[derive(Debug)]
struct AllowedPrefix {
    scheme: String,
    host: String,
    port: u16,
    /// Always ends with `/`, so `/photos` never admits `/photos-private/`.
    path: String,
}

impl AllowedPrefix {
    fn parse(text: &str) -> Result<Self, String> {
        let url = plain_url(text)?;
        if url.query().is_some() || url.fragment().is_some() {
            return Err("an allowed prefix has no query or fragment".into());
        }
        let mut path = url.path().to_string();
        if !path.ends_with('/') {
            path.push('/');
        }
        Ok(AllowedPrefix {
            scheme: url.scheme().to_string(),
            host: url.host_str().unwrap_or_default().to_string(),
            port: url.port_or_known_default().unwrap_or_default(),
            path,
        })
    }

    /// Whether a parsed URL lies under this prefix. IP hosts never equal a prefix's domain.
    fn covers(&self, url: &Url) -> bool {
        url.scheme() == self.scheme
            && url.username().is_empty()
            && url.password().is_none()
            && url.host() == Some(Host::Domain(self.host.as_str()))
            && url.port_or_known_default() == Some(self.port)
            && url.path().starts_with(&self.path)
    }
}

/// The allowed `http(s)://` prefixes.
#[derive(Debug)]
pub struct Allowlist {
    prefixes: Vec<AllowedPrefix>,
}

impl Allowlist {
    pub fn new<'a>(prefixes: impl IntoIterator<Item = &'a str>) -> Result<Self, SourceError> {
        let prefixes = prefixes
            .into_iter()
            .map(|text| {
                AllowedPrefix::parse(text)
                    .map_err(|why| SourceError::from(StorageError::Config(format!("CLIPFN_ALLOWED_SOURCES: {why}"))))
            })
            .collect::<Result<_, _>>()?;
        Ok(Allowlist { prefixes })
    }

    /// Parses a reference and admits it only under an allowed prefix. The query (a signature)
    /// is kept; the fragment, which is never sent, is dropped.
    pub fn admit(&self, reference: &str) -> Result<Url, SourceError> {
        let mut url = plain_url(reference).map_err(|e| SourceError::from(StorageError::Forbidden(e)))?;
        url.set_fragment(None);
        if !self.prefixes.iter().any(|p| p.covers(&url)) {
            return Err(SourceError::from(StorageError::Forbidden(
                "outside the configured store and allowed sources".into(),
            )));
        }
        Ok(url)
    }

    /// A redirect is followed only to a URL under the same prefix as the URL first asked for.
    pub fn same_prefix(&self, original: &Url, target: &Url) -> bool {
        self.prefixes.iter().filter(|p| p.covers(original)).any(|p| p.covers(target))
    }

    /// The `host:port` of every prefix, for per-host limits.
    pub fn hosts(&self) -> impl Iterator<Item = String> + '_ {
        self.prefixes.iter().map(|p| format!("{}:{}", p.host, p.port))
    }
}

/// `host:port` of an admitted URL, the key of its per-host limit.
pub fn host_key(url: &Url) -> String {
    format!("{}:{}", url.host_str().unwrap_or_default(), url.port_or_known_default().unwrap_or_default())
}

/// A URL for logs and error messages: without its query (signatures) and fragment.
pub fn without_query(url: &Url) -> String {
    let mut shown = url.clone();
    shown.set_query(None);
    shown.set_fragment(None);
    shown.to_string()
}

/// Parses an `http(s)://` URL whose host is a domain written exactly as the parser reads it,
/// without user info.
fn plain_url(text: &str) -> Result<Url, String> {
    let url = Url::parse(text).map_err(|e| format!("not a valid URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err("only http:// and https:// URLs are fetched".into());
    }
    let raw_authority = text.split_once("://").map_or("", |(_, rest)| rest);
    let raw_authority = &raw_authority[..raw_authority.find(['/', '\\', '?', '#']).unwrap_or(raw_authority.len())];
    if raw_authority.contains('@') || !url.username().is_empty() || url.password().is_some() {
        return Err("URLs with user info are refused".into());
    }
    match url.host() {
        Some(Host::Domain(host)) => {
            let raw_host = raw_authority.rsplit_once(':').map_or(raw_authority, |(host, _port)| host);
            if !raw_host.eq_ignore_ascii_case(host) {
                return Err("the host must be written plainly (no escapes or IP address forms)".into());
            }
            Ok(url)
        }
        Some(Host::Ipv4(_) | Host::Ipv6(_)) => Err("IP address hosts are refused; name the host".into()),
        None => Err("the URL has no host".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(prefixes: &[&str]) -> Allowlist {
        Allowlist::new(prefixes.iter().copied()).unwrap()
    }

    fn admitted(list: &Allowlist, reference: &str) -> bool {
        list.admit(reference).is_ok()
    }

    #[test]
    fn urls_under_a_prefix_are_admitted_with_their_query() {
        let list = list(&["https://storage.googleapis.com/photos-bucket", "http://localhost:8080/p/"]);
        let url =
            list.admit("https://storage.googleapis.com/photos-bucket/a/b.jpg?X-Goog-Signature=ab%2Fc#frag").unwrap();
        assert_eq!(url.query(), Some("X-Goog-Signature=ab%2Fc"));
        assert_eq!(without_query(&url), "https://storage.googleapis.com/photos-bucket/a/b.jpg");
        assert!(admitted(&list, "HTTPS://Storage.GoogleAPIs.com:443/photos-bucket/x.jpg"), "case and default port");
        assert!(admitted(&list, "http://localhost:8080/p/x.jpg"));
    }

    #[test]
    fn the_prefix_matches_whole_parts() {
        let list = list(&["https://cdn.example.com/photos", "http://localhost:8080/p/"]);
        for refused in [
            "https://cdn.example.com/photos-private/x.jpg",
            "https://cdn.example.com/photos/../secret/x.jpg",
            "https://cdn.example.com/photos/%2e%2e/secret.jpg",
            "http://cdn.example.com/photos/x.jpg",
            "https://cdn.example.com:8443/photos/x.jpg",
            "https://cdn.example.com.evil.example/photos/x.jpg",
            "https://evil.example/photos/x.jpg",
            "https://localhost:8080/p/x.jpg",
            "http://localhost:8081/p/x.jpg",
            "ftp://cdn.example.com/photos/x.jpg",
        ] {
            assert!(!admitted(&list, refused), "{refused} was admitted");
        }
    }

    #[test]
    fn disguised_hosts_are_refused() {
        let list = list(&["https://allowed.example/", "http://localhost/"]);
        for refused in [
            "https://allowed.example@evil.example/x.jpg",
            "https://allowed.example:443@evil.example/x.jpg",
            "https://user:pw@allowed.example/x.jpg",
            "https://allowed.example./x.jpg",
            "https://%61llowed.example/x.jpg",
            "https://allowed%2eexample/x.jpg",
            "https://ALLOWED.example\t/x.jpg",
            "https://\u{ff41}llowed.example/x.jpg",
            "http://127.0.0.1/x.jpg",
            "http://127.1/x.jpg",
            "http://0x7f.1/x.jpg",
            "http://0177.0.0.1/x.jpg",
            "http://2130706433/x.jpg",
            "http://[::1]/x.jpg",
            "http://[::ffff:127.0.0.1]/x.jpg",
            "http://[::ffff:7f00:1]/x.jpg",
            "http://169.254.169.254/computeMetadata/v1/",
        ] {
            let err = list.admit(refused).expect_err(refused);
            assert!(matches!(err, SourceError::Read(StorageError::Forbidden(_))), "{refused}: {err:?}");
        }
        assert!(admitted(&list, "https://allowed.example/x.jpg"));
    }

    #[test]
    fn redirects_stay_under_the_first_prefix() {
        let list = list(&["https://a.example/photos/", "https://b.example/"]);
        let url = |s: &str| Url::parse(s).unwrap();
        let original = url("https://a.example/photos/x.jpg?sig=1");
        assert!(list.same_prefix(&original, &url("https://a.example/photos/y/z.jpg")));
        assert!(!list.same_prefix(&original, &url("https://a.example/private/z.jpg")));
        assert!(!list.same_prefix(&original, &url("https://b.example/z.jpg")), "another allowed prefix");
        assert!(!list.same_prefix(&original, &url("https://127.0.0.1/photos/z.jpg")));
    }

    #[test]
    fn prefixes_name_a_host() {
        for bad in ["https://10.0.0.1/photos/", "https://[::1]/", "https://a.example/p?x=1", "https://u@a.example/"] {
            assert!(Allowlist::new([bad]).is_err(), "{bad} was accepted as a prefix");
        }
    }
}
