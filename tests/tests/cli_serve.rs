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
    /// An admin token whose root is the test's directory for sources and destinations.
    token: String,
}

/// `reel token create` in `data_dir` with one root and one key prefix; returns the bearer
/// string.
fn create_token(data_dir: &Path, scopes: &str, root: &Path, key_prefix: &str) -> String {
    let (code, v, err) = reel(
        data_dir,
        &[
            "token",
            "create",
            "--name",
            scopes,
            "--scope",
            scopes,
            "--root",
            root.to_str().unwrap(),
            "--key-prefix",
            key_prefix,
        ],
    );
    assert_eq!(code, 0, "token create: {v} {err}");
    v["token"].as_str().expect("the token").to_string()
}

impl Serve {
    /// `reel --data-dir DIR serve --listen 127.0.0.1:0` with an admin token rooted at `root`;
    /// the port is read back from its log.
    fn start(data_dir: &Path, root: &Path) -> Serve {
        let token = create_token(data_dir, "admin", root, "");
        Serve::start_listening(data_dir, "127.0.0.1:0", token)
    }

    /// `reel serve --listen LISTEN`, waiting until it says where it listens.
    fn start_listening(data_dir: &Path, listen: &str, token: String) -> Serve {
        let log_path = data_dir.join("serve.log");
        let log = std::fs::File::create(&log_path).expect("serve log");
        let child = Command::new(binary_path("reel"))
            .arg("--data-dir")
            .arg(data_dir)
            .args(["serve", "--listen", listen])
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
            token,
        };
        while t0.elapsed() < Duration::from_secs(60) {
            let text = std::fs::read_to_string(&log_path).unwrap_or_default();
            // Only a whole line: the log may be read while the line is half written (a read
            // once gave `127.0.0.1` without its port).
            if let Some(rest) = text.split("listening on http://").nth(1)
                && rest.contains('\n')
            {
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
        self.call_as(Some(&self.token), method, path, body)
    }

    /// One request with `token` (or none).
    fn call_as(
        &self,
        token: Option<&str>,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> (u16, Value) {
        let auth = token
            .map(|t| format!("Authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        let (status, body) = http(&self.addr, &auth, method, path, body);
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

/// A minimal HTTP/1.1 request (`Connection: close`) with `extra` header lines (each ending in
/// CRLF); returns the status and the body, with chunked transfer encoding undone.
fn http(addr: &str, extra: &str, method: &str, path: &str, body: Option<&Value>) -> (u16, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    let payload = body.map(Value::to_string).unwrap_or_default();
    let mut req =
        format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{extra}");
    if body.is_some() {
        req.push_str("Content-Type: application/json\r\n");
    }
    req.push_str(&format!(
        "Content-Length: {}\r\n\r\n{payload}",
        payload.len()
    ));
    s.write_all(req.as_bytes()).expect("send request");
    let raw = read_answer(&mut s);
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

/// Read one answer: to its `Content-Length` when it gives one (a server may keep the
/// connection open regardless of `Connection: close`), else to the end of the stream.
fn read_answer(s: &mut TcpStream) -> Vec<u8> {
    let mut raw = Vec::new();
    let mut buf = [0u8; 64 << 10];
    loop {
        if let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok());
            if let Some(n) = length
                && raw.len() >= split + 4 + n
            {
                return raw;
            }
        }
        match s.read(&mut buf) {
            Ok(0) => return raw,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(e) => panic!("read response: {e}"),
        }
    }
}

/// A data directory configured for `store_url` with a simulated library, a directory for the
/// test's sources and destinations, and `reel serve` on it with an admin token rooted there.
fn site(
    store_url: &str,
) -> (
    tempfile::TempDir,
    tempfile::TempDir,
    tempfile::TempDir,
    Serve,
) {
    let dir = tempfile::tempdir().unwrap();
    let lib = tempfile::tempdir().unwrap();
    write_config(dir.path(), store_url, lib.path(), 1, "");
    let base = tempfile::tempdir().unwrap();
    let serve = Serve::start(dir.path(), base.path());
    (dir, lib, base, serve)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archive_and_recall_through_the_http_api() {
    for store in stores("cli_serve").await {
        let name = store.name();
        let (dir, _lib, base, serve) = site(&store.url());
        let worker = Worker::start(dir.path(), 1);

        let (status, health) = serve.call("GET", "/healthz", None);
        assert_eq!(status, 200, "{name}: {health}");

        serve.run("/v1/jobs/intake", json!({"all_new": true}));

        // A small tree, archived over HTTP.
        let src = tempfile::tempdir_in(base.path()).unwrap();
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
        let dst = tempfile::tempdir_in(base.path()).unwrap();
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
        assert_eq!(
            done["jobs"].as_array().map(Vec::len),
            Some(3),
            "{name}: {done}"
        );
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

/// Send `request` as it is on a new connection and read the whole answer (the status line
/// first).
fn raw_request(addr: &str, request: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    s.write_all(request.as_bytes()).expect("send");
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// The attacks of issue #17 fail through the real server and worker: no credentials, a path
/// outside the token's roots (reel's own configuration, a root-only file, `/`, `..`), another
/// client's job, a foreign `Host`, a revoked token, and a destination directory swapped for a
/// symbolic link after the recall was queued; nothing is written outside the roots.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attacks_on_the_service_fail() {
    for store in stores("cli_serve_attacks").await {
        let name = store.name();
        let (dir, _lib, base, serve) = site(&store.url());
        let client = create_token(dir.path(), "submit", base.path(), "c/");
        let other = create_token(dir.path(), "submit", base.path(), "o/");
        let worker = Worker::start(dir.path(), 1);
        serve.run("/v1/jobs/intake", json!({"all_new": true}));
        let src = base.path().join("src");
        write_random_file(&src.join("a.bin"), 5000, 1);
        let archive = |p: &Path| json!({"paths": [p], "key_prefix": "c/"});

        // No credentials.
        let (code, v) = serve.call_as(None, "POST", "/v1/jobs/archive", Some(&archive(&src)));
        assert_eq!(code, 401, "{name}: {v}");

        // Outside the roots: reel's own config, a root-only file, one that does not exist:
        // the same answer.
        let secret = tempfile::tempdir().unwrap();
        std::fs::write(secret.path().join("shadow"), b"root only").unwrap();
        let mut answers = Vec::new();
        for p in [
            dir.path().join("reel.toml"),
            secret.path().join("shadow"),
            secret.path().join("nothing"),
            base.path().join("../etc"),
        ] {
            let (code, v) = serve.call_as(
                Some(&client),
                "POST",
                "/v1/jobs/archive",
                Some(&archive(&p)),
            );
            assert_eq!(code, 403, "{name}: {} {v}", p.display());
            answers.push(
                v["error"]
                    .as_str()
                    .unwrap_or_default()
                    .replace(&p.display().to_string(), "P"),
            );
        }
        assert!(
            answers.windows(2).all(|w| w[0] == w[1]),
            "{name}: {answers:?}"
        );

        // A recall into `/`, into reel's data directory, or out through `..`.
        let (_, job) = serve.call_as(
            Some(&client),
            "POST",
            "/v1/jobs/archive",
            Some(&archive(&src)),
        );
        let id = job["id"].as_str().expect("job id").to_string();
        assert_eq!(serve.wait(&id)["state"], "done", "{name}");
        for to in [
            "/".to_string(),
            dir.path().display().to_string(),
            format!("{}/../", base.path().display()),
        ] {
            let body = json!({"keys": ["c/a.bin"], "to": to});
            let (code, v) = serve.call_as(Some(&client), "POST", "/v1/jobs/recall", Some(&body));
            assert_eq!(code, 403, "{name}: to {to}: {v}");
        }

        // Another client's job does not exist for it.
        for (m, path) in [
            ("GET", format!("/v1/jobs/{id}")),
            ("POST", format!("/v1/jobs/{id}/retry")),
        ] {
            let (code, v) = serve.call_as(Some(&other), m, &path, None);
            assert_eq!(code, 404, "{name}: {m} {path}: {v}");
        }
        let (_, list) = serve.call_as(Some(&other), "GET", "/v1/jobs", None);
        assert_eq!(list["jobs"], json!([]), "{name}: {list}");
        // Nor may it read or replace the client's objects: the catalogue is shared, keys are
        // not.
        let loot = base.path().join("loot");
        for (route, body) in [
            ("/v1/jobs/recall", json!({"keys": ["c/a.bin"], "to": loot})),
            ("/v1/jobs/recall", json!({"prefix": "", "to": loot})),
            (
                "/v1/jobs/archive",
                json!({"paths": [src], "key_prefix": "c/"}),
            ),
        ] {
            let (code, v) = serve.call_as(Some(&other), "POST", route, Some(&body));
            assert_eq!(code, 403, "{name}: {route} {body}: {v}");
            assert!(
                v["error"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("key prefixes"),
                "{v}"
            );
        }
        assert!(
            !loot.exists(),
            "{name}: something was recalled for the other client"
        );

        // A root swapped for a link to reel's data directory (its owner renamed it) is refused.
        let inbox = base.path().join("inbox");
        std::fs::create_dir(&inbox).unwrap();
        let carol = create_token(dir.path(), "submit", &inbox, "carol/");
        std::fs::rename(&inbox, base.path().join("inbox.real")).unwrap();
        std::os::unix::fs::symlink(dir.path(), &inbox).unwrap();
        let body = json!({"paths": [inbox.join("reel.toml")], "key_prefix": "carol/"});
        let (code, v) = serve.call_as(Some(&carol), "POST", "/v1/jobs/archive", Some(&body));
        assert_eq!(code, 400, "{name}: {v}");
        assert!(
            v["error"]
                .as_str()
                .unwrap_or_default()
                .contains("symbolic link"),
            "{v}"
        );

        // A foreign Host (DNS rebinding).
        let answer = raw_request(
            &serve.addr,
            &format!(
                "GET /v1/jobs HTTP/1.1\r\nHost: evil.example\r\nAuthorization: Bearer {client}\r\nConnection: close\r\n\r\n"
            ),
        );
        assert!(answer.starts_with("HTTP/1.1 400"), "{name}: {answer}");

        // The destination swapped for a link after the recall was queued: the worker, which
        // resolves it again beneath the root, refuses it; nothing lands in the link's target.
        assert_eq!(worker.stop(), 0);
        let victim = tempfile::tempdir().unwrap();
        let out = base.path().join("out");
        let body = json!({"keys": ["c/a.bin"], "to": out.join("x")});
        let (code, job) = serve.call_as(Some(&client), "POST", "/v1/jobs/recall", Some(&body));
        assert_eq!(code, 202, "{name}: {job}");
        std::os::unix::fs::symlink(victim.path(), &out).unwrap();
        let worker = Worker::start(dir.path(), 2);
        let job = serve.wait(job["id"].as_str().unwrap());
        assert_eq!(job["state"], "failed", "{name}: {job}");
        assert!(
            job["error"]
                .as_str()
                .unwrap_or_default()
                .contains("symbolic link"),
            "{name}: {job}"
        );
        assert_eq!(
            std::fs::read_dir(victim.path()).unwrap().count(),
            0,
            "{name}: the recall wrote through the link"
        );

        // A revoked token is refused at its next request.
        let (code, _, err) = reel(dir.path(), &["token", "revoke", &client]);
        assert_eq!(code, 0, "{err}");
        let (code, v) = serve.call_as(Some(&client), "GET", "/v1/jobs", None);
        assert_eq!(code, 401, "{name}: {v}");

        assert_eq!(worker.stop(), 0);
        assert_eq!(serve.stop(), 0);
    }
}

/// Connections are bounded: at most `max_connections` at once (one more gets 503), and one that
/// sends nothing is closed after `header_timeout_seconds`; the service answers afterwards.
#[test]
fn idle_and_excess_connections_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let lib = tempfile::tempdir().unwrap();
    let base = tempfile::tempdir().unwrap();
    write_config(
        dir.path(),
        "sqlite:reel.db",
        lib.path(),
        1,
        "\n[serve]\nheader_timeout_seconds = 2\nmax_connections = 8\n",
    );
    let serve = Serve::start(dir.path(), base.path());
    let idle: Vec<TcpStream> = (0..8)
        .map(|_| TcpStream::connect(&serve.addr).expect("connect"))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let answer = raw_request(
        &serve.addr,
        "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n",
    );
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("max_connections"), "{answer}");
    // The idle ones are closed by the server within the header timeout (and some slack).
    for mut c in idle {
        c.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let mut buf = [0u8; 64];
        let t0 = Instant::now();
        let n = c.read(&mut buf).unwrap_or(0);
        assert_eq!(n, 0, "an idle connection got data");
        assert!(t0.elapsed() < Duration::from_secs(9), "not closed in time");
    }
    let (code, _) = serve.call("GET", "/healthz", None);
    assert_eq!(code, 200);
    assert_eq!(serve.stop(), 0);
}

/// `reel serve` refuses an address other than loopback while no token exists, and says what
/// to do; `reel token create` refuses roots over reel's own data directory.
#[test]
fn an_exposed_service_needs_a_token_first() {
    let dir = tempfile::tempdir().unwrap();
    let lib = tempfile::tempdir().unwrap();
    write_config(dir.path(), "sqlite:reel.db", lib.path(), 1, "");
    let out = Command::new(binary_path("reel"))
        .arg("--data-dir")
        .arg(dir.path())
        .args(["serve", "--listen", "0.0.0.0:0"])
        .output()
        .expect("run reel serve");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("no API token exists"), "{err}");
    assert!(err.contains("reel token create"), "{err}");
    let (code, _, err) = reel(
        dir.path(),
        &[
            "token", "create", "--name", "x", "--scope", "submit", "--root", "/",
        ],
    );
    assert_ne!(code, 0);
    assert!(err.contains("overlaps reel's own"), "{err}");
    let (code, _, err) = reel(
        dir.path(),
        &[
            "token", "create", "--name", "x", "--scope", "writer", "--root", "/tmp",
        ],
    );
    assert_ne!(code, 0);
    assert!(err.contains("unknown scope"), "{err}");
    let (code, v, _) = reel(dir.path(), &["token", "list"]);
    assert_eq!(code, 0);
    assert_eq!(v["tokens"], json!([]), "{v}");
}

/// The bytes of a test object: `n` bytes from a seeded generator, made on the fly (a large
/// object is never held in the test's memory either).
struct Generated {
    state: u64,
    left: u64,
}

impl Generated {
    fn new(n: u64, seed: u64) -> Generated {
        Generated {
            state: seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
            left: n,
        }
    }

    /// The next piece, at most `max` bytes; empty at the end.
    fn next_piece(&mut self, max: usize) -> Vec<u8> {
        let n = (self.left.min(max as u64)) as usize;
        self.left -= n as u64;
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            // xorshift64*
            self.state ^= self.state >> 12;
            self.state ^= self.state << 25;
            self.state ^= self.state >> 27;
            let v = self.state.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes();
            let take = (n - out.len()).min(8);
            out.extend_from_slice(&v[..take]);
        }
        out
    }

    /// SHA-256 of all of it.
    fn digest(n: u64, seed: u64) -> String {
        use sha2::Digest;
        let mut g = Generated::new(n, seed);
        let mut h = sha2::Sha256::new();
        loop {
            let p = g.next_piece(1 << 20);
            if p.is_empty() {
                break;
            }
            h.update(&p);
        }
        hex::encode(h.finalize())
    }
}

/// Stream `n` generated bytes to `PUT path` with `extra` header lines; the status, the
/// response's head (lower case) and its body.
fn put_stream(
    addr: &str,
    token: &str,
    path: &str,
    n: u64,
    seed: u64,
    extra: &str,
) -> (u16, String, Value) {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(300)))
        .expect("timeout");
    let head = format!(
        "PUT {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/octet-stream\r\nContent-Length: {n}\r\n{extra}\r\n"
    );
    s.write_all(head.as_bytes()).expect("send head");
    let mut g = Generated::new(n, seed);
    loop {
        let p = g.next_piece(1 << 20);
        if p.is_empty() {
            break;
        }
        // The server may answer (and close) early, e.g. 413: stop sending then.
        if s.write_all(&p).is_err() {
            break;
        }
    }
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end in {:?}", String::from_utf8_lossy(&raw)));
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status");
    let body = serde_json::from_slice(&raw[split + 4..]).unwrap_or(Value::Null);
    (status, head, body)
}

/// `GET path` with `extra` header lines, the body streamed through SHA-256; the status, the
/// head (lower case), the body's length and digest, and its first 64 KiB.
fn get_stream(
    addr: &str,
    token: &str,
    path: &str,
    extra: &str,
) -> (u16, String, u64, String, Vec<u8>) {
    use sha2::Digest;
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(300)))
        .expect("timeout");
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nAuthorization: Bearer {token}\r\n{extra}\r\n"
    );
    s.write_all(req.as_bytes()).expect("send");
    let mut buf = vec![0u8; 1 << 20];
    let mut head_bytes = Vec::new();
    let rest = loop {
        let n = s.read(&mut buf).expect("read head");
        assert!(n > 0, "closed before the head ended");
        head_bytes.extend_from_slice(&buf[..n]);
        if let Some(p) = head_bytes.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = head_bytes.split_off(p + 4);
            head_bytes.truncate(p);
            break rest;
        }
    };
    let head = String::from_utf8_lossy(&head_bytes).to_ascii_lowercase();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status");
    let mut h = sha2::Sha256::new();
    let mut len = rest.len() as u64;
    h.update(&rest);
    let mut first = rest.clone();
    loop {
        let n = s.read(&mut buf).expect("read body");
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        if first.len() < 1 << 16 {
            first.extend_from_slice(&buf[..n.min((1 << 16) - first.len())]);
        }
        len += n as u64;
    }
    (status, head, len, hex::encode(h.finalize()), first)
}

/// The peak resident memory of a process, in bytes (`VmHWM`).
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

/// Stage `key` and wait until `GET /v1/objects/{key}` stops answering 409.
fn stage_and_wait(serve: &Serve, key: &str) -> Value {
    let (status, stage) = serve.call("POST", &format!("/v1/stage/{key}"), None);
    assert!(status == 202 || status == 200, "{stage}");
    let job = serve.wait(stage["job"].as_str().expect("stage job"));
    assert_eq!(job["state"], "done", "{job}");
    let (status, again) = serve.call("POST", &format!("/v1/stage/{key}"), None);
    assert_eq!(
        (status, again["state"].as_str()),
        (200, Some("staged")),
        "{again}"
    );
    stage
}

/// A client with no filesystem shared with reel archives and fetches objects over HTTP:
/// uploads streamed (a wrong checksum refused, nothing queued), the archive job run by the
/// worker, the spool emptied after it, a recall staged on request, the object served whole
/// and by ranges; on SQLite a 2 GiB object goes up and down (and once with a wrong checksum,
/// refused) with serve's memory staying small.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_stream_in_and_out_without_a_shared_filesystem() {
    for store in stores("cli_serve_objects").await {
        let name = store.name();
        let (dir, _lib, _base, serve) = site(&store.url());
        let worker = Worker::start(dir.path(), 1);
        serve.run("/v1/jobs/intake", json!({"all_new": true}));
        let (addr, token) = (serve.addr.clone(), serve.token.clone());
        let n = 300_001u64;
        let sum = Generated::digest(n, 7);

        // A wrong checksum is refused and queues nothing.
        let wrong = format!("x-reel-sha256: {}\r\n", "0".repeat(64));
        let (status, _, body) = put_stream(&addr, &token, "/v1/objects/up/one.bin", n, 7, &wrong);
        assert_eq!(status, 400, "{name}: {body}");
        assert!(
            body["error"]
                .as_str()
                .unwrap_or_default()
                .contains("SHA-256"),
            "{body}"
        );
        let (_, jobs) = serve.call("GET", "/v1/jobs", None);
        let archives = jobs["jobs"]
            .as_array()
            .map(|j| j.iter().filter(|j| j["kind"] == "archive").count());
        assert_eq!(archives, Some(0), "{name}: {jobs}");

        // The right one is archived.
        let right = format!("x-reel-sha256: {sum}\r\n");
        let (status, head, job) = put_stream(&addr, &token, "/v1/objects/up/one.bin", n, 7, &right);
        assert_eq!(status, 202, "{name}: {job}");
        assert!(head.contains(&format!("x-reel-sha256: {sum}")), "{head}");
        let job = serve.wait(job["id"].as_str().unwrap());
        assert_eq!(job["state"], "done", "{name}: {job}");
        let (_, found) = serve.call("GET", "/v1/catalog/objects/up/one.bin", None);
        assert_eq!(found["sha256"], sum.as_str(), "{name}: {found}");

        // Once its job is done the upload leaves the spool.
        let spool = dir.path().join("spool");
        let t0 = Instant::now();
        while std::fs::read_dir(&spool).unwrap().count() > 0 {
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "{name}: the spool kept the upload"
            );
            std::thread::sleep(Duration::from_millis(200));
        }

        // Not staged: 409 saying so; staged on request, then served whole and in ranges.
        let (status, err) = serve.call("GET", "/v1/objects/up/one.bin", None);
        assert_eq!(status, 409, "{name}: {err}");
        assert_eq!(err["recall"]["state"], "none", "{err}");
        stage_and_wait(&serve, "up/one.bin");
        let (status, head, len, digest, _) =
            get_stream(&addr, &token, "/v1/objects/up/one.bin", "");
        assert_eq!(
            (status, len, digest.as_str()),
            (200, n, sum.as_str()),
            "{name}: {head}"
        );
        assert!(head.contains("accept-ranges: bytes"), "{head}");
        let mut all = Generated::new(n, 7).next_piece(n as usize);
        let (status, head, len, _, first) = get_stream(
            &addr,
            &token,
            "/v1/objects/up/one.bin",
            "Range: bytes=1000-1999\r\n",
        );
        assert_eq!((status, len), (206, 1000), "{head}");
        assert!(
            head.contains(&format!("content-range: bytes 1000-1999/{n}")),
            "{head}"
        );
        assert_eq!(first, all[1000..2000]);
        let (status, _, len, _, first) = get_stream(
            &addr,
            &token,
            "/v1/objects/up/one.bin",
            "Range: bytes=-10\r\n",
        );
        assert_eq!((status, len), (206, 10));
        assert_eq!(first, all.split_off(n as usize - 10));
        let (status, head, _, _, _) = get_stream(
            &addr,
            &token,
            "/v1/objects/up/one.bin",
            &format!("Range: bytes={n}-\r\n"),
        );
        assert_eq!(status, 416, "{head}");
        assert!(
            head.contains(&format!("content-range: bytes */{n}")),
            "{head}"
        );

        if name == "sqlite" {
            // 2 GiB and a bit, up and down, through a server whose memory stays small; sent
            // whole with a wrong checksum first, which is refused and leaves nothing.
            let big = (2u64 << 30) + 12_345;
            let sum = Generated::digest(big, 11);
            let (status, _, err) = put_stream(
                &addr,
                &token,
                "/v1/objects/big/one.bin",
                big,
                11,
                &format!("x-reel-sha256: {}\r\n", Generated::digest(1, 1)),
            );
            assert_eq!(status, 400, "{err}");
            assert_eq!(
                std::fs::read_dir(&spool).unwrap().count(),
                0,
                "a refused upload stayed"
            );
            let (status, _, job) = put_stream(
                &addr,
                &token,
                "/v1/objects/big/one.bin",
                big,
                11,
                &format!("x-reel-sha256: {sum}\r\n"),
            );
            assert_eq!(status, 202, "{job}");
            let job = serve.wait(job["id"].as_str().unwrap());
            assert_eq!(job["state"], "done", "{job}");
            stage_and_wait(&serve, "big/one.bin");
            let (status, head, len, digest, _) =
                get_stream(&addr, &token, "/v1/objects/big/one.bin", "");
            assert_eq!(
                (status, len, digest.as_str()),
                (200, big, sum.as_str()),
                "{head}"
            );
            let rss = peak_rss(serve.child.id());
            assert!(
                rss < 256 << 20,
                "reel serve peaked at {} MiB moving a 2 GiB object: it buffered it",
                rss >> 20
            );
        }
        assert_eq!(worker.stop(), 0, "{name}: worker did not stop cleanly");
        assert_eq!(serve.stop(), 0, "{name}: reel serve did not stop cleanly");
    }
}

/// A WebDriver session on Debian's `chromedriver` and headless `chromium`, both as installed
/// by `.ci/run` (under `CI=true` their absence fails the test; elsewhere it is skipped loudly).
struct Browser {
    driver: Child,
    addr: String,
    session: String,
}

impl Browser {
    fn start() -> Option<Browser> {
        let (chromium, chromedriver) = ("/usr/bin/chromium", "/usr/bin/chromedriver");
        if !Path::new(chromium).exists() || !Path::new(chromedriver).exists() {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "chromium and chromedriver are missing under CI=true (.ci/run installs them)"
            );
            eprintln!(
                "*** SKIPPED the dashboard's browser test: apt-get install chromium chromium-driver ***"
            );
            return None;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let driver = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn chromedriver");
        let addr = format!("127.0.0.1:{port}");
        let t0 = Instant::now();
        while TcpStream::connect(&addr).is_err() {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "chromedriver did not listen"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut b = Browser {
            driver,
            addr,
            session: String::new(),
        };
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1400,1600"]
            }
        }}});
        let v = b.call("POST", "/session", Some(&caps));
        b.session = v["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no WebDriver session: {v}"))
            .to_string();
        Some(b)
    }

    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Value {
        let (status, bytes) = http(&self.addr, "", method, path, body);
        let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        assert_eq!(status, 200, "WebDriver {method} {path}: {v}");
        v
    }

    fn go(&self, url: &str) {
        self.call(
            "POST",
            &format!("/session/{}/url", self.session),
            Some(&json!({ "url": url })),
        );
    }

    /// Run `script` in the page; its return value.
    fn eval(&self, script: &str) -> Value {
        self.call(
            "POST",
            &format!("/session/{}/execute/sync", self.session),
            Some(&json!({"script": script, "args": []})),
        )["value"]
            .clone()
    }

    /// Wait until `script` returns true in the page.
    fn wait_for(&self, what: &str, script: &str) {
        let t0 = Instant::now();
        while self.eval(script) != Value::Bool(true) {
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "the dashboard never showed {what}: {}",
                self.eval("return document.body.innerText")
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    fn screenshot(&self, to: &Path) {
        let v = self.call(
            "GET",
            &format!("/session/{}/screenshot", self.session),
            None,
        );
        use base64::Engine;
        let png = base64::engine::general_purpose::STANDARD
            .decode(v["value"].as_str().expect("screenshot"))
            .expect("base64 screenshot");
        assert!(png.starts_with(b"\x89PNG"), "not a PNG");
        std::fs::write(to, png).expect("write the screenshot");
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = http(
                &self.addr,
                "",
                "DELETE",
                &format!("/session/{}", self.session),
                None,
            );
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// The dashboard in a real browser: it loads with a token, shows the simulated library's
/// drives and cartridges, and shows a job that ran after it loaded without a reload; the
/// screenshot is saved as `target/dashboard.png`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_the_library_live_in_a_browser() {
    let Some(browser) = Browser::start() else {
        return;
    };
    let store = stores("cli_serve_dashboard").await.remove(0);
    let (dir, _lib, base, serve) = site(&store.url());
    // The worker serves its drive metrics on loopback.
    let metrics = format!(
        "127.0.0.1:{}",
        std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap()
            .port()
    );
    let cfg = dir.path().join("reel.toml");
    let text = std::fs::read_to_string(&cfg).unwrap().replace(
        "heartbeat_ms = 1000\n",
        &format!("heartbeat_ms = 1000\nmetrics_listen = \"{metrics}\"\n"),
    );
    std::fs::write(&cfg, text).unwrap();
    let worker = Worker::start(dir.path(), 1);
    serve.run("/v1/jobs/intake", json!({"all_new": true}));
    // What the page must show, as the API says it.
    let t0 = Instant::now();
    let lib = loop {
        let (_, lib) = serve.call("GET", "/v1/library", None);
        if lib["seen_ms"].as_i64().unwrap_or(0) > 0 && !lib["drives"].as_array().unwrap().is_empty()
        {
            break lib;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no library view: {lib}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let drive = lib["drives"][0]["drive"].as_str().unwrap().to_string();
    let barcode = lib["cartridges"][0]["barcode"]
        .as_str()
        .unwrap()
        .to_string();

    browser.go(&format!(
        "http://{}/dashboard#token={}",
        serve.addr, serve.token
    ));
    browser.wait_for(
        "the drive and a cartridge",
        &format!(
            "return document.querySelector('#drives tr[data-drive=\"{drive}\"]') !== null \
             && document.querySelector('#cartridges tr[data-barcode=\"{barcode}\"]') !== null \
             && document.querySelectorAll('#slots div').length > 0"
        ),
    );
    assert_eq!(
        browser.eval("return location.hash"),
        json!(""),
        "the token stayed in the address bar"
    );
    let loads = browser.eval("return performance.getEntriesByType('navigation').length");

    // A job after the page loaded appears without a reload.
    let src = tempfile::tempdir_in(base.path()).unwrap();
    write_random_file(&src.path().join("a.bin"), 100_000, 1);
    let job = serve.run(
        "/v1/jobs/archive",
        json!({"paths": [src.path()], "key_prefix": "dash/"}),
    );
    let id = job["id"].as_str().unwrap();
    browser.wait_for(
        "the finished archive job",
        &format!("return document.querySelector('#done tr[data-job=\"{id}\"]') !== null"),
    );
    assert_eq!(
        browser.eval("return performance.getEntriesByType('navigation').length"),
        loads,
        "the page was reloaded"
    );
    // The worker's metrics saw the intake's mounts (each ended with a session summary), the
    // archive's bytes, the drive's state and the blank tapes' sense keys.
    // The archive's mount ends (the idle drive unloads) with its session summary, whose
    // drive time includes the transfer of what was written.
    let t0 = Instant::now();
    let text = loop {
        let (status, body) = http(&metrics, "", "GET", "/metrics", None);
        assert_eq!(status, 200);
        let text = String::from_utf8_lossy(&body).into_owned();
        let transfer: f64 = text
            .lines()
            .filter(|l| {
                l.starts_with("reel_mount_session_drive_seconds_sum")
                    && l.contains("part=\"transfer\"")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        if transfer > 0.0 {
            break text;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no mount session with transfer time: {text}"
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    let value = |prefix: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let d = format!("drive=\"{drive}\"");
    assert!(
        value(&format!("reel_drive_mounts_total{{{d}}}")) >= 10.0,
        "{text}"
    );
    assert!(
        value(&format!("reel_drive_bytes_total{{{d},mode=\"write\"}}")) >= 100_000.0,
        "{text}"
    );
    assert!(value("reel_mount_session_seconds_count") >= 10.0, "{text}");
    assert!(
        value("reel_drive_mount_duration_seconds_count") >= 10.0,
        "{text}"
    );
    assert_eq!(value(&format!("reel_drive_state{{{d},")), 1.0, "{text}");
    assert!(value("reel_device_sense_total") >= 1.0, "{text}");
    // Beside the build: the target directory this test binary runs from (CARGO_TARGET_DIR
    // or the workspace's target/), as target/dashboard.png.
    let exe = std::env::current_exe().unwrap();
    let target = exe.ancestors().nth(3).expect("the target directory");
    let shot = target.join("dashboard.png");
    browser.screenshot(&shot);
    // A wrong token: the page says so and shows nothing.
    browser.go(&format!(
        "http://{}/dashboard#token=reel_nope.nope",
        serve.addr
    ));
    browser.wait_for(
        "the refusal",
        "return document.getElementById('main').hidden === true \
         && document.getElementById('status').textContent.includes('token')",
    );
    drop(browser);
    assert_eq!(worker.stop(), 0);
    assert_eq!(serve.stop(), 0);
}
