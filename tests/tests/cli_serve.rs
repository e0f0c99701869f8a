//! End to end through `reel serve`: the real binary listening on a free port, a `reel worker`
//! with the simulator, and a small HTTP/1.1 client on std's TcpStream (no HTTP client crate):
//! intake, archive of a small tree and recall of one object over the API (byte for byte),
//! catalogue look-ups, /metrics and /openapi.json, graceful shutdown on SIGTERM.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reel_tests::*;
use serde_json::{Value, json};

/// A `reel serve` child, killed on drop unless stopped.
struct Serve {
    child: Child,
    addr: String,
}

impl Serve {
    /// `reel --data-dir DIR serve --listen 127.0.0.1:0`; the port is read back from its log.
    fn start(data_dir: &Path) -> Serve {
        let log_path = data_dir.join("serve.log");
        let log = std::fs::File::create(&log_path).expect("serve log");
        let child = Command::new(binary_path("reel"))
            .arg("--data-dir")
            .arg(data_dir)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .env("REEL_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("spawn reel serve");
        let t0 = Instant::now();
        let mut serve = Serve {
            child,
            addr: String::new(),
        };
        while t0.elapsed() < Duration::from_secs(60) {
            let text = std::fs::read_to_string(&log_path).unwrap_or_default();
            if let Some(rest) = text.split("listening on http://").nth(1) {
                serve.addr = rest
                    .split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .to_string();
                return serve;
            }
            if let Ok(Some(status)) = serve.child.try_wait() {
                panic!("reel serve exited with {status}: {text}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!(
            "reel serve did not say where it listens: {}",
            std::fs::read_to_string(&log_path).unwrap_or_default()
        );
    }

    /// SIGTERM, then wait; returns the exit code.
    fn stop(mut self) -> i32 {
        let code = terminate(&mut self.child);
        std::mem::forget(self);
        code
    }

    /// One request; returns the status and the body (JSON, or a JSON string when it is not).
    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let (status, body) = http(&self.addr, method, path, body);
        let json = serde_json::from_slice(&body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
        (status, json)
    }

    /// Wait for a job to reach a final state through `GET /v1/jobs/{id}`.
    fn wait(&self, id: &str) -> Value {
        let t0 = Instant::now();
        loop {
            let (status, job) = self.call("GET", &format!("/v1/jobs/{id}"), None);
            assert_eq!(status, 200, "{job}");
            if ["done", "failed", "cancelled"].contains(&job["state"].as_str().unwrap_or("")) {
                return job;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(120),
                "job {id} did not finish: {job}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Submit and wait; the job must end `done`.
    fn run(&self, route: &str, body: Value) -> Value {
        let (status, job) = self.call("POST", route, Some(&body));
        assert_eq!(status, 202, "{route}: {job}");
        let job = self.wait(job["id"].as_str().expect("job id"));
        assert_eq!(job["state"], "done", "{route}: {job}");
        job
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A minimal HTTP/1.1 request (`Connection: close`); returns the status and the body, with
/// chunked transfer encoding undone.
fn http(addr: &str, method: &str, path: &str, body: Option<&Value>) -> (u16, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    let payload = body.map(Value::to_string).unwrap_or_default();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if body.is_some() {
        req.push_str("Content-Type: application/json\r\n");
    }
    req.push_str(&format!(
        "Content-Length: {}\r\n\r\n{payload}",
        payload.len()
    ));
    s.write_all(req.as_bytes()).expect("send request");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read response");
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end in {:?}", String::from_utf8_lossy(&raw)));
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line in {head}"));
    let mut body = raw[split + 4..].to_vec();
    if head.contains("transfer-encoding: chunked") {
        let mut out = Vec::new();
        let mut rest = &body[..];
        loop {
            let eol = rest
                .windows(2)
                .position(|w| w == b"\r\n")
                .expect("chunk size");
            let size = usize::from_str_radix(String::from_utf8_lossy(&rest[..eol]).trim(), 16)
                .expect("chunk size hex");
            if size == 0 {
                break;
            }
            out.extend_from_slice(&rest[eol + 2..eol + 2 + size]);
            rest = &rest[eol + 2 + size + 2..];
        }
        body = out;
    }
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archive_and_recall_through_the_http_api() {
    for store in stores("cli_serve").await {
        let name = store.name();
        let dir = tempfile::tempdir().unwrap();
        let lib = tempfile::tempdir().unwrap();
        write_config(dir.path(), &store.url(), lib.path(), 1, "");
        let serve = Serve::start(dir.path());
        let worker = Worker::start(dir.path(), 1);

        let (status, health) = serve.call("GET", "/healthz", None);
        assert_eq!(status, 200, "{name}: {health}");

        serve.run("/v1/jobs/intake", json!({"all_new": true}));

        // A small tree, archived over HTTP.
        let src = tempfile::tempdir().unwrap();
        let mut sums = std::collections::BTreeMap::new();
        for i in 0..6u64 {
            let rel = format!("d{}/f{i}.bin", i % 2);
            sums.insert(
                rel.clone(),
                write_random_file(&src.path().join(&rel), 1000 + i * 4099, i),
            );
        }
        let job = serve.run(
            "/v1/jobs/archive",
            json!({"paths": [src.path()], "key_prefix": "s/"}),
        );
        assert_eq!(job["progress"]["objects_done"], 6, "{name}: {job}");

        // The catalogue, over HTTP.
        let (status, objs) = serve.call("GET", "/v1/catalog/objects?prefix=s/", None);
        assert_eq!(status, 200, "{objs}");
        assert_eq!(objs.as_array().map(Vec::len), Some(6), "{name}: {objs}");
        let (status, found) = serve.call("GET", "/v1/catalog/objects/s/d1/f3.bin", None);
        assert_eq!(status, 200, "{found}");
        assert_eq!(found["sha256"], hex32(&sums["d1/f3.bin"]), "{found}");
        assert_eq!(found["copies"].as_array().map(Vec::len), Some(1), "{found}");
        let (status, err) = serve.call("GET", "/v1/catalog/objects/s/none", None);
        assert_eq!(status, 404, "{err}");

        // Recall one object over HTTP; the bytes match.
        let dst = tempfile::tempdir().unwrap();
        serve.run(
            "/v1/jobs/recall",
            json!({"keys": ["s/d1/f3.bin"], "to": dst.path()}),
        );
        assert_eq!(
            sha256_file(&dst.path().join("s/d1/f3.bin")),
            sums["d1/f3.bin"],
            "{name}: recalled bytes differ"
        );
        assert!(
            !dst.path().join("s/d0/f0.bin").exists(),
            "recalled more than asked"
        );

        // The job list and the metrics see the same jobs.
        let (_, done) = serve.call("GET", "/v1/jobs?state=done", None);
        assert_eq!(done.as_array().map(Vec::len), Some(3), "{name}: {done}");
        let (status, metrics) = serve.call("GET", "/metrics", None);
        assert_eq!(status, 200);
        let text = metrics.as_str().unwrap_or_default();
        for line in [
            r#"reel_jobs{kind="archive",state="done"} 1"#,
            r#"reel_jobs{kind="recall",state="done"} 1"#,
            "reel_store_up 1",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{name}: no `{line}` in {text}"
            );
        }
        let (status, doc) = serve.call("GET", "/openapi.json", None);
        assert_eq!(status, 200);
        assert!(
            doc["paths"]["/v1/jobs/archive"]["post"].is_object(),
            "{doc}"
        );

        assert_eq!(worker.stop(), 0, "{name}: worker did not stop cleanly");
        assert_eq!(
            serve.stop(),
            0,
            "{name}: reel serve did not stop cleanly on SIGTERM"
        );
    }
}
