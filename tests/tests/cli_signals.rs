//! SIGTERM and SIGINT always stop `reel worker` and `reel serve`, also when the reader of their
//! log is gone (`reel worker 2>&1 | tee log`, and Ctrl-C killed `tee` with the worker): every
//! log line then meets a closed pipe (EPIPE), which used to panic inside the signal handler
//! before it cancelled the shutdown, so the process ignored both signals until kill -9. A second
//! signal during a graceful shutdown exits at once (130 for SIGINT, 143 for SIGTERM). And the
//! commands other than worker/serve/demo log warnings only, without colour on a pipe.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reel_tests::*;

/// How long a stop may take: a liveness bound (a hung process fails instead of hanging the
/// test), not a timing claim.
const STOP_BOUND: Duration = Duration::from_secs(30);

/// A `reel` child whose stdout and stderr share one pipe that this test reads, as with
/// `2>&1 | tee`; killed on drop.
struct Piped {
    child: Child,
    log: Option<BufReader<std::io::PipeReader>>,
    /// What was read before the pipe was closed.
    seen: String,
}

impl Piped {
    /// Start `reel --data-dir DIR ARGS…` (REEL_LOG=info) and read its output until a line
    /// contains `ready`.
    fn start(data_dir: &Path, args: &[&str], ready: &str) -> Piped {
        let (reader, writer) = std::io::pipe().expect("pipe");
        let child = {
            let mut cmd = Command::new(binary_path("reel"));
            cmd.arg("--data-dir")
                .arg(data_dir)
                .args(args)
                .env("REEL_LOG", "info")
                .stdin(Stdio::null())
                .stdout(writer.try_clone().expect("pipe"))
                .stderr(writer);
            cmd.spawn().expect("spawn reel")
            // `cmd` (with this process's copies of the write end) is dropped here, so the
            // child holds the only ones.
        };
        let mut p = Piped {
            child,
            log: Some(BufReader::new(reader)),
            seen: String::new(),
        };
        let log = p.log.as_mut().expect("log");
        loop {
            let mut line = String::new();
            let n = log.read_line(&mut line).expect("read the log");
            assert!(n > 0, "reel {args:?} ended before `{ready}`: {}", p.seen);
            p.seen.push_str(&line);
            if line.contains(ready) {
                return p;
            }
        }
    }

    /// Close the read end: from now on every write to stdout or stderr fails with EPIPE.
    fn close_log(&mut self) {
        self.log = None;
    }

    /// Send `signal` (TERM, INT) with the kill command.
    fn signal(&self, signal: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("run kill")
            .success();
        assert!(ok, "kill -{signal} failed");
    }

    /// Wait up to `bound` for the exit; its code (-1 when killed by a signal), or None.
    fn wait_for_exit(&mut self, bound: Duration) -> Option<i32> {
        let t0 = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return Some(status.code().unwrap_or(-1));
            }
            if t0.elapsed() >= bound {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Send `signal` and expect the exit within [`STOP_BOUND`]; returns the exit code.
    fn stop_with(mut self, signal: &str, what: &str) -> i32 {
        self.signal(signal);
        match self.wait_for_exit(STOP_BOUND) {
            Some(code) => code,
            None => panic!(
                "{what}: still running {} s after SIG{signal} with its log pipe closed; \
                 output before the pipe was closed:\n{}",
                STOP_BOUND.as_secs(),
                self.seen
            ),
        }
    }
}

impl Drop for Piped {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Submit a job and wait for it (the submitting `reel` has its own, working, output).
fn run_job(dir: &Path, args: &[&str]) {
    let (code, v, err) = reel(dir, args);
    assert_eq!(code, 0, "submit {args:?}: {v} {err}");
    let id = job_id(&v);
    let (code, v, err) = reel(dir, &["jobs", "wait", &id, "--timeout", "120"]);
    assert_eq!(code, 0, "job {args:?}: {v} {err}");
}

/// The worker works and logs (job started, job done…) into the closed pipe, then stops on
/// SIGTERM, and a new one on SIGINT, with exit status 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_stops_on_sigterm_and_sigint_with_its_log_pipe_closed() {
    for store in stores("worker_signals_closed_log").await {
        let dir = tempfile::tempdir().unwrap();
        let lib = tempfile::tempdir().unwrap();
        write_config(dir.path(), &store.url(), lib.path(), 1, "");
        let src = tempfile::tempdir().unwrap();
        write_random_file(&src.path().join("a.bin"), 10_000, 1);
        let a = src.path().join("a.bin");
        let rounds: [(&str, Vec<&str>); 2] = [
            ("TERM", vec!["intake", "--all-new"]),
            (
                "INT",
                vec!["archive", a.to_str().unwrap(), "--key-prefix", "s/"],
            ),
        ];
        for (signal, job) in rounds {
            let what = format!("{}: reel worker, SIG{signal}", store.name());
            let mut worker = Piped::start(dir.path(), &["worker"], ": running");
            worker.close_log();
            // Job handling logs at info level: those lines go to the closed pipe.
            run_job(dir.path(), &job);
            assert_eq!(worker.stop_with(signal, &what), 0, "{what}: exit status");
        }
    }
}

/// `reel serve` with its log pipe closed stops on SIGTERM and on SIGINT with exit status 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_stops_on_sigterm_and_sigint_with_its_log_pipe_closed() {
    for store in stores("serve_signals_closed_log").await {
        let dir = tempfile::tempdir().unwrap();
        let lib = tempfile::tempdir().unwrap();
        write_config(dir.path(), &store.url(), lib.path(), 1, "");
        for signal in ["TERM", "INT"] {
            let what = format!("{}: reel serve, SIG{signal}", store.name());
            let mut serve = Piped::start(
                dir.path(),
                &["serve", "--listen", "127.0.0.1:0"],
                "listening on http://",
            );
            let addr = listen_addr(&serve.seen);
            serve.close_log();
            // A request while the pipe is closed: the server keeps answering.
            assert_eq!(get_status(&addr, "/healthz"), 200, "{what}: /healthz");
            assert_eq!(serve.stop_with(signal, &what), 0, "{what}: exit status");
        }
    }
}

/// A second signal while the graceful shutdown waits (here for a request whose body never
/// comes) exits at once: 143 after SIGTERM, 130 after SIGINT.
#[test]
fn second_signal_during_a_graceful_shutdown_exits_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let lib = tempfile::tempdir().unwrap();
    write_config(dir.path(), "sqlite:reel.db", lib.path(), 1, "");
    let (code, v, err) = reel(
        dir.path(),
        &["token", "create", "--name", "t", "--scope", "operate"],
    );
    assert_eq!(code, 0, "{v} {err}");
    let token = v["token"].as_str().expect("token").to_string();
    for (second, status) in [("TERM", 143), ("INT", 130)] {
        let what = format!("reel serve, SIGTERM then SIG{second}");
        let mut serve = Piped::start(
            dir.path(),
            &["serve", "--listen", "127.0.0.1:0"],
            "listening on http://",
        );
        let addr = listen_addr(&serve.seen);
        serve.close_log();
        // A request in flight for good: the body is announced and never sent (by a client
        // with a token, so that the handler waits for the body).
        let mut stuck = TcpStream::connect(&addr).expect("connect");
        write!(
            stuck,
            "POST /v1/jobs/intake HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
             Authorization: Bearer {token}\r\nContent-Length: 100\r\n\r\n{{"
        )
        .expect("send request head");
        stuck.flush().expect("flush");
        std::thread::sleep(Duration::from_millis(500));
        serve.signal("TERM");
        // The graceful shutdown waits for that request.
        assert_eq!(
            serve.wait_for_exit(Duration::from_secs(1)),
            None,
            "{what}: the first SIGTERM did not wait for the request in flight"
        );
        assert_eq!(
            serve.stop_with(second, &what),
            status,
            "{what}: exit status"
        );
        drop(stuck);
    }
}

/// `reel jobs list` logs warnings and errors only by default, and no ANSI colour on a pipe;
/// `REEL_LOG` still overrides the filter (and still gets no colour on a pipe).
#[test]
fn quiet_commands_log_no_info_and_no_colour_on_a_pipe() {
    let dir = tempfile::tempdir().unwrap();
    let lib = tempfile::tempdir().unwrap();
    write_config(dir.path(), "sqlite:reel.db", lib.path(), 1, "");
    let run = |log: Option<&str>| {
        let mut cmd = Command::new(binary_path("reel"));
        cmd.arg("--data-dir")
            .arg(dir.path())
            .args(["jobs", "list"])
            .env_remove("REEL_LOG")
            .env_remove("NO_COLOR")
            .stdin(Stdio::null());
        if let Some(l) = log {
            cmd.env("REEL_LOG", l);
        }
        // output() pipes stdout and stderr.
        let out = cmd.output().expect("run reel jobs list");
        assert!(out.status.success(), "reel jobs list: {out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let quiet = run(None);
    assert!(!quiet.contains("INFO"), "INFO lines by default: {quiet}");
    assert!(!quiet.contains('\x1b'), "ANSI escapes on a pipe: {quiet:?}");
    let chatty = run(Some("debug"));
    assert!(
        chatty.contains("DEBUG") || chatty.contains("INFO"),
        "REEL_LOG=debug did not override the quiet default: {chatty}"
    );
    assert!(
        !chatty.contains('\x1b'),
        "ANSI escapes on a pipe: {chatty:?}"
    );
}

/// The address in `reel serve`'s "listening on http://ADDR" line.
fn listen_addr(log: &str) -> String {
    log.split("listening on http://")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no listening address in {log}"))
        .to_string()
}

/// `GET path`; the status code.
fn get_status(addr: &str, path: &str) -> u16 {
    use std::io::Read;
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("send request");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read response");
    String::from_utf8_lossy(&raw)
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("bad response {:?}", String::from_utf8_lossy(&raw)))
}

/// Found by the torture run (seed 4242, SQLite): a worker started again after a `kill -9`
/// found a cartridge left in its drive, met a drive fault while unloading it, and exited: the
/// whole host stayed down until someone noticed. It now logs the failed unload and comes up;
/// the drive is tried again when next used.
#[test]
fn a_drive_fault_while_tidying_up_at_start_does_not_stop_the_worker() {
    let dir = tempfile::tempdir().unwrap();
    let lib = tempfile::tempdir().unwrap();
    let cfg = write_plugin_config(
        dir.path(),
        "sqlite:reel.db",
        &plugin_path("reel_plugin_sim"),
        &format!(
            "dir={}\\nsim.clock=instant\\nsim.calibrated=true\\nsim.drives=1\\nsim.cartridges=4\\nsim.shared=true",
            lib.path().display()
        ),
        "",
    );
    // An idle drive keeps its cartridge (so the crash below leaves it there).
    let text = std::fs::read_to_string(&cfg).unwrap();
    assert!(text.contains("min_mount_seconds = 0"), "{text}");
    std::fs::write(
        &cfg,
        text.replace("min_mount_seconds = 0", "min_mount_seconds = 600"),
    )
    .unwrap();
    let src = tempfile::tempdir().unwrap();
    let sum = write_random_file(&src.path().join("a.bin"), 300_000, 3);
    let w = Worker::start(dir.path(), 1);
    run_job(dir.path(), &["intake", "--all-new"]);
    run_job(
        dir.path(),
        &[
            "archive",
            src.path().to_str().unwrap(),
            "--key-prefix",
            "t/",
        ],
    );
    // A crash with the cartridge still in the drive (it stays between batches).
    w.kill();
    let layout = std::fs::read_to_string(lib.path().join("library.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&layout).unwrap();
    // The simulator's element address of drive 0 is 256 (docs/SIMULATOR.md).
    assert!(
        v["locations"]
            .as_object()
            .is_some_and(|l| l.values().any(|a| a == 256)),
        "the cartridge was left in the drive: {v}"
    );
    // The drive's next command fails with a hardware error: that is the unload at start-up.
    let mb = lib.path().join("mailbox").join("drive-0");
    std::fs::create_dir_all(&mb).unwrap();
    let tmp = lib.path().join("mailbox").join(".f.tmp");
    std::fs::write(&tmp, r#"{"op":"fault","kind":"drive_fault","drive":0}"#).unwrap();
    std::fs::rename(&tmp, mb.join("0001.json")).unwrap();
    let mut w = Worker::start(dir.path(), 2);
    std::thread::sleep(Duration::from_secs(2));
    let exited = w.child.try_wait().unwrap();
    let log = std::fs::read_to_string(dir.path().join("worker-2.log")).unwrap_or_default();
    assert!(exited.is_none(), "the worker exited ({exited:?}): {log}");
    assert!(
        log.contains("could not be unloaded"),
        "the fault met the unload at start-up: {log}"
    );
    // The library stays usable through it.
    let dst = tempfile::tempdir().unwrap();
    run_job(
        dir.path(),
        &["recall", "t/a.bin", "--to", dst.path().to_str().unwrap()],
    );
    assert_eq!(sha256_file(&dst.path().join("t/a.bin")), sum);
    assert_eq!(w.stop(), 0);
}
