//! Test harness: runs the real `clipfn` binary and real emulators as child processes on loopback.
//!
//! Everything the tests need comes from `.cache/clipfn.env`, written by `tools/setup.sh`. Child
//! processes start from an empty environment, so no developer credential or cloud variable leaks
//! in, and object_store never reaches for a metadata server.
#![allow(dead_code)] // each test binary uses a different part of the harness

use std::{
    collections::HashMap,
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::OnceLock,
    time::{Duration, Instant},
};

use serde_json::Value;

pub fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The variables `tools/setup.sh` recorded.
pub fn setup_env() -> &'static HashMap<String, String> {
    static ENV: OnceLock<HashMap<String, String>> = OnceLock::new();
    ENV.get_or_init(|| {
        let path = repo().join(".cache/clipfn.env");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}; run tools/setup.sh first", path.display()));
        text.lines()
            .filter_map(|line| line.trim().strip_prefix("export ").or(Some(line.trim())))
            .filter(|line| !line.starts_with('#'))
            .filter_map(|line| line.split_once('='))
            .map(|(k, v)| (k.to_string(), v.trim_matches('"').trim_matches('\'').to_string()))
            .collect()
    })
}

pub fn setup_var(name: &str) -> String {
    setup_env()
        .get(name)
        .cloned()
        .unwrap_or_else(|| panic!("{name} missing from .cache/clipfn.env; rerun tools/setup.sh"))
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A child process killed when dropped.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for_port(port: u16, child: &mut Child, what: &str) {
    let until = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{what} exited early: {status}");
        }
        assert!(Instant::now() < until, "{what} did not listen on {port} within 30 s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A running `clipfn serve`.
pub struct Server {
    pub proc: Proc,
    pub base: String,
}

pub struct ServerConfig {
    pub envs: Vec<(String, String)>,
    pub wait_ready: bool,
    /// Where the server's stderr (its log) goes; by default nowhere (see `server_log`).
    pub stderr: Option<PathBuf>,
}

impl ServerConfig {
    /// The test model, a file store at `store`, small fetch retries.
    pub fn local(store: &Path) -> Self {
        ServerConfig { envs: Vec::new(), wait_ready: true, stderr: None }
            .env("CLIPFN_STORE", &format!("file://{}", store.display()))
            .env("CLIPFN_BATCH_SIZE", "8")
    }

    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.envs.push((key.into(), value.into()));
        self
    }

    /// Writes the server's log to `path`, for tests that read it.
    pub fn stderr_to(mut self, path: &Path) -> Self {
        self.stderr = Some(path.to_path_buf());
        self
    }

    pub fn start(self) -> Server {
        let port = free_port();
        let mut command = Command::new(env!("CARGO_BIN_EXE_clipfn"));
        command
            .arg("serve")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("PORT", port.to_string())
            .env("RUST_LOG", "info")
            .env("ORT_DYLIB_PATH", setup_var("ORT_DYLIB_PATH"))
            .env("CLIPFN_MODEL", setup_var("CLIPFN_TEST_MODEL"))
            .env("CLIPFN_FETCH_RETRIES", "0")
            .envs(self.envs)
            .stdout(Stdio::null())
            .stderr(match &self.stderr {
                Some(path) => Stdio::from(std::fs::File::create(path).expect("creating the server log file")),
                None => server_log(),
            });
        let child = command.spawn().expect("starting clipfn");
        let mut server = Server { proc: Proc(child), base: format!("http://127.0.0.1:{port}") };
        wait_for_port(port, &mut server.proc.0, "clipfn");
        if self.wait_ready {
            server.wait_ready();
        }
        server
    }
}

impl Server {
    pub fn wait_ready(&mut self) {
        let until = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(r) = blocking_client().get(format!("{}/readyz", self.base)).send()
                && r.status() == 200
            {
                return;
            }
            if let Ok(Some(status)) = self.proc.0.try_wait() {
                panic!("clipfn exited before it was ready: {status}");
            }
            assert!(Instant::now() < until, "clipfn not ready within 60 s");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn post_json(&self, path: &str, body: &Value) -> (u16, Value) {
        self.post_raw(path, serde_json::to_vec(body).unwrap())
    }

    pub fn post_raw(&self, path: &str, body: Vec<u8>) -> (u16, Value) {
        let response = blocking_client()
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .expect("request to clipfn");
        let status = response.status().as_u16();
        (status, response.json().unwrap_or(Value::Null))
    }

    pub fn get(&self, path: &str) -> (u16, Value) {
        let response = blocking_client().get(format!("{}{path}", self.base)).send().expect("request to clipfn");
        (response.status().as_u16(), response.json().unwrap_or(Value::Null))
    }

    pub fn embed(&self, images: &[&str]) -> (u16, Value) {
        self.post_json("/v1/embed", &serde_json::json!({ "images": images }))
    }
}

/// Runs `clipfn serve` with a broken setting and returns its stderr; it must exit non-zero.
pub fn failed_start(envs: &[(&str, &str)]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_clipfn"))
        .arg("serve")
        .env_clear()
        .env("PORT", free_port().to_string())
        .env("ORT_DYLIB_PATH", setup_var("ORT_DYLIB_PATH"))
        .env("CLIPFN_MODEL", setup_var("CLIPFN_TEST_MODEL"))
        .envs(envs.iter().copied())
        .output()
        .unwrap();
    assert!(!output.status.success(), "{envs:?} should stop start-up");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Server logs are noise in a passing run; CLIPFN_TEST_LOGS=1 shows them.
fn server_log() -> Stdio {
    if std::env::var_os("CLIPFN_TEST_LOGS").is_some() { Stdio::inherit() } else { Stdio::null() }
}

pub fn blocking_client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder().timeout(Duration::from_secs(120)).no_proxy().build().unwrap()
}

/// Item `i` of an embed response: its embedding, or its error code.
pub fn item(body: &Value, i: usize) -> Result<Vec<f32>, String> {
    let item = &body["data"][i];
    assert_eq!(item["index"], i, "items out of order: {body}");
    match item.get("embedding") {
        Some(e) => Ok(e.as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect()),
        None => Err(item["error"]["code"].as_str().unwrap_or("?").to_string()),
    }
}

pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (norm(a) * norm(b))
}

/// Real camera photos fetched by setup (Debian wallpaper packages), sorted, at most `n`.
pub fn camera_photos(n: usize) -> Vec<PathBuf> {
    let dir = PathBuf::from(setup_var("CLIPFN_PHOTOS_DIR")).join("wallpapers");
    let mut photos: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x.eq_ignore_ascii_case("jpg") || x.eq_ignore_ascii_case("jpeg")))
        .collect();
    photos.sort();
    photos.truncate(n);
    assert!(!photos.is_empty(), "no camera photos in {}", dir.display());
    photos
}

/// Reference embeddings from Pillow preprocessing + Python onnxruntime (tools/reference.py).
pub fn reference_embeddings(model: &str, photos: &[PathBuf]) -> HashMap<PathBuf, Vec<f32>> {
    reference_embeddings_with(model, &[], photos)
}

/// [`reference_embeddings`] with preprocessing flags (`--size`, `--crop`, `--mean`, ...).
pub fn reference_embeddings_with(model: &str, flags: &[&str], photos: &[PathBuf]) -> HashMap<PathBuf, Vec<f32>> {
    let output = Command::new(setup_var("CLIPFN_PYTHON"))
        .arg(repo().join("tools/reference.py"))
        .arg("--model")
        .arg(model)
        .args(flags)
        .args(photos)
        .env_remove("OPENBLAS_CORETYPE")
        .output()
        .expect("running tools/reference.py");
    assert!(output.status.success(), "reference.py failed: {}", String::from_utf8_lossy(&output.stderr));
    let json: Value = serde_json::from_slice(&output.stdout).expect("reference.py prints JSON");
    json["embeddings"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (PathBuf::from(k), v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()))
        .collect()
}

/// Spawns a process and waits until it listens on `port`.
pub fn spawn_listening(mut command: Command, port: u16, what: &str) -> Proc {
    let child = command.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap_or_else(|e| panic!("{what}: {e}"));
    let mut proc = Proc(child);
    wait_for_port(port, &mut proc.0, what);
    proc
}

/// fake-gcs-server on loopback serving `data` (one folder per bucket).
pub fn start_fake_gcs(data: &Path) -> (Proc, u16) {
    let port = free_port();
    let mut command = Command::new(setup_var("CLIPFN_FAKE_GCS_BIN"));
    // object_store reads BASE/BUCKET/KEY, which the emulator serves only for its public host.
    let public_host = format!("127.0.0.1:{port}");
    command.args(["-scheme", "http", "-host", "127.0.0.1", "-port", &port.to_string(), "-public-host", &public_host]);
    command.args(["-backend", "memory", "-data"]).arg(data);
    (spawn_listening(command, port, "fake-gcs-server"), port)
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
/// photo that is in flight for as long as the test wants. Other keys are served from `dir`.
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

/// The value of the series `name{labels...}` in Prometheus text, 0 when absent.
pub fn series(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' '))
        .find(|(series, _)| {
            let (series_name, rest) = series.split_once('{').unwrap_or((series, ""));
            series_name == name && labels.iter().all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")))
        })
        .map_or(0.0, |(_, value)| value.parse().unwrap())
}

pub fn scrape(server: &Server) -> String {
    let response = blocking_client().get(format!("{}/metrics", server.base)).send().unwrap();
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"].to_str().unwrap().to_string();
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    response.text().unwrap()
}
