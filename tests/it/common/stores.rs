//! Photo stores for the tests: local folders served as `file://` stores, the GCS and S3 emulators
//! (fake-gcs-server, moto), and `HeldStore`, a GCS stand-in that answers late on cue.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use tempfile::TempDir;

use super::{Proc, ServerConfig, setup_var, spawn_on_free_port};

/// What one key of a local store holds.
pub enum Object {
    /// A copy of this file.
    Copy(PathBuf),
    /// These bytes.
    Bytes(Vec<u8>),
}

/// A local photo store: a fresh folder holding each object under its key. A key may name
/// subfolders (`sample/photo-1.jpg`); they are made. The folder goes when the `TempDir` drops.
pub fn store<K: AsRef<str>>(objects: impl IntoIterator<Item = (K, Object)>) -> TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (key, object) in objects {
        let path = dir.path().join(key.as_ref());
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        match object {
            Object::Copy(from) => {
                std::fs::copy(&from, &path).unwrap_or_else(|e| panic!("{}: {e}", from.display()));
            }
            Object::Bytes(bytes) => std::fs::write(&path, bytes).unwrap(),
        }
    }
    dir
}

/// A local store holding copies of `photos` under the keys `key(index, photo)` names, and those
/// keys in the order of `photos`.
pub fn store_keyed(photos: &[PathBuf], key: impl Fn(usize, &Path) -> String) -> (TempDir, Vec<String>) {
    let keys: Vec<String> = photos.iter().enumerate().map(|(i, photo)| key(i, photo)).collect();
    (store(keys.iter().zip(photos).map(|(key, photo)| (key, Object::Copy(photo.clone())))), keys)
}

/// A local store holding copies of `photos` under their own file names.
pub fn store_named(photos: &[PathBuf]) -> TempDir {
    store_keyed(photos, |_, photo| file_name(photo).to_string()).0
}

/// The last part of `path`, as a store key.
pub fn file_name(path: &Path) -> &str {
    path.file_name().unwrap().to_str().unwrap()
}

/// fake-gcs-server on loopback serving `data` (one folder per bucket); with `log`, its log (a line
/// per request) goes to that file.
pub fn start_fake_gcs(data: &Path, log: Option<&Path>) -> (Proc, u16) {
    spawn_on_free_port("fake-gcs-server", |port| {
        let mut command = Command::new(setup_var("CLIPFN_FAKE_GCS_BIN"));
        // object_store reads BASE/BUCKET/KEY, which the emulator serves only for its public host.
        let public_host = format!("127.0.0.1:{port}");
        command.args([
            "-scheme",
            "http",
            "-host",
            "127.0.0.1",
            "-port",
            &port.to_string(),
            "-public-host",
            &public_host,
        ]);
        command.args(["-backend", "memory", "-data"]).arg(data);
        match log {
            Some(log) => {
                let file = std::fs::File::create(log).unwrap();
                command.stdout(file.try_clone().unwrap()).stderr(file)
            }
            None => command.stdout(Stdio::null()).stderr(Stdio::null()),
        };
        command
    })
}

/// moto's S3 server on loopback, empty; it accepts unsigned path-style calls.
pub fn start_moto() -> (Proc, u16) {
    spawn_on_free_port("moto_server", |port| {
        let mut command = Command::new(setup_var("CLIPFN_MOTO_SERVER_BIN"));
        command
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap());
        command.stdout(Stdio::null()).stderr(Stdio::null());
        command
    })
}

/// Service-account JSON (GOOGLE_SERVICE_ACCOUNT_KEY) pointing object_store at the emulator with
/// OAuth off, so it never asks a metadata server for a token.
pub fn fake_gcs_credentials(port: u16) -> String {
    serde_json::json!({
        "gcs_base_url": format!("http://127.0.0.1:{port}"),
        "disable_oauth": true,
        "client_email": "",
        "private_key": "",
        "private_key_id": "",
    })
    .to_string()
}

/// Settings that point clipfn's GCS client at a loopback emulator on `port`.
pub fn gcs_env(config: ServerConfig, port: u16) -> ServerConfig {
    config.env("GOOGLE_SERVICE_ACCOUNT_KEY", &fake_gcs_credentials(port)).env("GOOGLE_ALLOW_HTTP", "true")
}

/// A GCS stand-in whose objects named `slow*` are held back until `release()`: the one thing a
/// real emulator cannot do is answer late on cue, and overload, deadline and drain tests need a
/// photo that is in flight for as long as the test wants. Objects named `error*` get a 500 whose
/// text names an internal host, as a failing store's would. Other keys are served from `dir`.
pub struct HeldStore {
    pub port: u16,
    gate: std::sync::Arc<tokio::sync::Semaphore>,
    _runtime: tokio::runtime::Runtime,
}

impl HeldStore {
    pub fn start(dir: &Path) -> HeldStore {
        use axum::{extract::Path as UrlPath, http::StatusCode, response::IntoResponse};
        let gate = std::sync::Arc::new(tokio::sync::Semaphore::new(0));
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let port = listener.local_addr().unwrap().port();
        let (dir, held) = (dir.to_path_buf(), std::sync::Arc::clone(&gate));
        let app = axum::Router::new().route(
            "/{bucket}/{*key}",
            axum::routing::get(move |UrlPath((_bucket, key)): UrlPath<(String, String)>| async move {
                if key.starts_with("error") {
                    let text = "backend db-7.internal.example failed";
                    return (StatusCode::INTERNAL_SERVER_ERROR, text).into_response();
                }
                let file = if key.starts_with("slow") {
                    held.acquire().await.unwrap().forget();
                    dir.join("good.jpg")
                } else {
                    dir.join(&key)
                };
                match std::fs::read(file) {
                    Ok(bytes) => {
                        ([("etag", "\"1\""), ("last-modified", "Mon, 30 Nov 2026 00:00:00 GMT")], bytes).into_response()
                    }
                    Err(_) => StatusCode::NOT_FOUND.into_response(),
                }
            }),
        );
        runtime.spawn(async move { axum::serve(listener, app).await });
        HeldStore { port, gate, _runtime: runtime }
    }

    /// Lets every held request (and any later one) through.
    pub fn release(&self) {
        self.gate.add_permits(1 << 20);
    }
}
