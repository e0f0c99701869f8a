//! Log and terminal output of the `reel` command that never panics.
//!
//! `println!`, `eprintln!` and friends panic when the write fails: stderr piped into a reader
//! that is gone (`reel worker 2>&1 | tee log`, and Ctrl-C sent SIGINT to the whole process
//! group, `tee` included), or redirected to a full disk. tracing-subscriber's fmt layer does not
//! panic itself, but when its writer fails it reports that with `eprintln!` (the
//! `tracing_subscriber::fmt()` builder turns `log_internal_errors` on; tracing-subscriber 0.3.23,
//! `fmt_layer.rs`, `on_event`), which panics on the same broken stderr. So every `tracing::info!`
//! panicked once the pipe was closed, the signal handler's first (`SIGINT received`) included:
//! its task died before it cancelled the shutdown token, and the process ignored SIGINT and
//! SIGTERM from then on.
//!
//! Here the log writer swallows write errors ([`LossyStderr`]), `log_internal_errors` is off,
//! and the few direct lines go through [`stderr_line`] / [`stdout_line`], which drop theirs:
//! when stderr itself is broken there is nowhere left to report it.
//!
//! Rust ignores SIGPIPE in its binaries (the runtime sets it to SIG_IGN before `main`), so a
//! write to a closed pipe returns EPIPE instead of killing the process. Keep it that way: with
//! the default action a worker whose log reader died would be killed mid-step, without its
//! graceful shutdown. The writers here make the EPIPE harmless.

use std::io::{self, IsTerminal, Write};

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

/// The environment variable holding the log filter (`tracing_subscriber::EnvFilter` syntax,
/// e.g. `info`, `warn,reel_jobs=debug`); it overrides the command's default.
pub const LOG_ENV: &str = "REEL_LOG";

/// A writer whose write errors are dropped: every write "succeeds" as far as the caller knows.
#[derive(Debug)]
pub struct Lossy<W>(pub W);

impl<W: Write> Write for Lossy<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // On an error the rest of the buffer is given up, not retried: reported as written.
        Ok(self.0.write(buf).unwrap_or(buf.len()))
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        // The inner write_all retries short writes and EINTR; any other error ends the line.
        let _ = self.0.write_all(buf);
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        let _ = self.0.flush();
        Ok(())
    }
}

/// [`MakeWriter`] for tracing-subscriber: the process's stderr, write errors (EPIPE, ENOSPC,
/// EIO) dropped.
#[derive(Clone, Copy, Debug, Default)]
pub struct LossyStderr;

impl<'a> MakeWriter<'a> for LossyStderr {
    type Writer = Lossy<io::Stderr>;

    fn make_writer(&'a self) -> Self::Writer {
        Lossy(io::stderr())
    }
}

/// Write one line to stderr; a write error is dropped (stderr is where it would be reported).
pub fn stderr_line(line: std::fmt::Arguments<'_>) {
    let _ = writeln!(io::stderr(), "{line}");
}

/// Write one line to stdout; a write error is dropped. For output whose failure cannot be
/// reported anyway (the last words of a failing process); normal command output reports it.
pub fn stdout_line(line: std::fmt::Arguments<'_>) {
    let _ = writeln!(io::stdout(), "{line}");
}

/// Whether log lines get ANSI colours: only when stderr is a terminal and `NO_COLOR` is unset
/// or empty (<https://no-color.org>).
pub fn stderr_wants_colour() -> bool {
    io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// The log filter: `REEL_LOG` if it is set and parses, else `default`.
pub fn filter(default: &str) -> EnvFilter {
    EnvFilter::try_from_env(LOG_ENV).unwrap_or_else(|_| EnvFilter::new(default))
}

/// Install the process's subscriber: fmt lines on stderr through [`LossyStderr`], filtered by
/// [`filter`]`(default)`, coloured only per [`stderr_wants_colour`]. Does nothing when a
/// subscriber is installed already.
pub fn init(default: &str) {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter(default))
        .with_writer(LossyStderr)
        .with_ansi(stderr_wants_colour())
        // On a write error the fmt layer would eprintln! about it: a panic on a broken stderr.
        .log_internal_errors(false)
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that fails as a closed pipe does.
    struct Broken;

    impl Write for Broken {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> io::Result<()> {
            Err(io::Error::from_raw_os_error(28)) // ENOSPC
        }
    }

    #[test]
    fn lossy_swallows_write_errors() {
        let mut w = Lossy(Broken);
        assert_eq!(w.write(b"abc").unwrap(), 3);
        w.write_all(b"a line\n").unwrap();
        writeln!(w, "formatted {}", 1).unwrap();
        w.flush().unwrap();
    }

    #[test]
    fn lossy_passes_writes_through() {
        let mut w = Lossy(Vec::new());
        writeln!(w, "one").unwrap();
        w.write_all(b"two\n").unwrap();
        assert_eq!(w.0, b"one\ntwo\n");
    }

    /// The fmt layer over a broken writer: events are dropped, nothing panics.
    #[test]
    fn tracing_over_a_broken_writer_does_not_panic() {
        let subscriber = tracing_subscriber::fmt()
            .with_writer(|| Lossy(Broken))
            .log_internal_errors(false)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(n = 1, "an event nobody can read");
            tracing::error!("and another");
        });
    }
}
