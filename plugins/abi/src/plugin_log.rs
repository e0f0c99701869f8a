//! A plugin's log events, forwarded to its host (ABI 1.2, `set_log`).
//!
//! A plugin loaded with dlopen carries its own copy of `tracing`, and its events go nowhere:
//! the host's subscriber lives in the host's copy. When the host calls `set_log`, the SDK makes
//! [`HostSink`] the global default of the plugin's copy. It formats each event (its message,
//! then its other fields as `name=value`) and hands it to the host's callback, which records it
//! in the host's log under the plugin's name. Spans are not forwarded: the host's own spans
//! around each call (job, task, mount) already say what the plugin was doing.

use std::cell::Cell;
use std::ffi::{CString, c_char, c_void};
use std::fmt::Write as _;

use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::{Event, Level, Metadata, Subscriber, span};

use crate::types::{
    REEL_LOG_DEBUG, REEL_LOG_ERROR, REEL_LOG_INFO, REEL_LOG_TRACE, REEL_LOG_WARN, ReelLogFn,
};

/// The `REEL_LOG_*` number of a `tracing` level.
pub fn level_number(level: &Level) -> u32 {
    match *level {
        Level::ERROR => REEL_LOG_ERROR,
        Level::WARN => REEL_LOG_WARN,
        Level::INFO => REEL_LOG_INFO,
        Level::DEBUG => REEL_LOG_DEBUG,
        Level::TRACE => REEL_LOG_TRACE,
    }
}

/// The `REEL_LOG_*` number of the most verbose level a filter lets through (0: none).
pub fn filter_number(filter: LevelFilter) -> u32 {
    filter.into_level().map_or(0, |l| level_number(&l))
}

type LogCallback = unsafe extern "C" fn(*mut c_void, u32, *const c_char, *const c_char);

/// The subscriber that hands every event to the host's callback.
pub struct HostSink {
    log: LogCallback,
    context: *mut c_void,
    max_level: u32,
}

// SAFETY: the ABI requires the host's callback to be callable from any thread the plugin runs
// on, and its context to stay valid for as long as the plugin is loaded; the sink only passes
// the context back to that callback.
unsafe impl Send for HostSink {}
// SAFETY: as above; the sink has no interior state.
unsafe impl Sync for HostSink {}

thread_local! {
    /// Set while an event is being handed to the host: an event the host's callback raised in
    /// this same copy of `tracing` (a plugin linked into its host) is dropped, not looped.
    static FORWARDING: Cell<bool> = const { Cell::new(false) };
}

/// Collects an event's message and fields into one line.
#[derive(Default)]
struct Line {
    message: String,
    fields: String,
}

impl Line {
    fn field(&mut self, field: &Field, value: std::fmt::Arguments<'_>) {
        if field.name() == "message" {
            let _ = self.message.write_fmt(value);
        } else {
            let _ = write!(self.fields, " {}={}", field.name(), value);
        }
    }
}

impl Visit for Line {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.field(field, format_args!("{value}"));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.field(field, format_args!("{value:?}"));
    }
}

/// A C string of `text`, NUL bytes replaced (they would cut the text short).
fn c_text(text: &str) -> CString {
    CString::new(text.replace('\0', "\u{FFFD}")).unwrap_or_default()
}

impl Subscriber for HostSink {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        level_number(metadata.level()) <= self.max_level
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(match self.max_level {
            0 => LevelFilter::OFF,
            REEL_LOG_ERROR => LevelFilter::ERROR,
            REEL_LOG_WARN => LevelFilter::WARN,
            REEL_LOG_INFO => LevelFilter::INFO,
            REEL_LOG_DEBUG => LevelFilter::DEBUG,
            _ => LevelFilter::TRACE,
        })
    }

    fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
        span::Id::from_u64(1)
    }

    fn record(&self, _: &span::Id, _: &span::Record<'_>) {}

    fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}

    fn event(&self, event: &Event<'_>) {
        // Not while forwarding already, nor during the thread's teardown.
        if FORWARDING.try_with(|f| f.replace(true)).unwrap_or(true) {
            return;
        }
        /// Clears the flag however the forwarding ends (a panic in a field's formatting).
        struct Done;
        impl Drop for Done {
            fn drop(&mut self) {
                let _ = FORWARDING.try_with(|f| f.set(false));
            }
        }
        let _done = Done;
        let mut line = Line::default();
        event.record(&mut line);
        line.message.push_str(&line.fields);
        let target = c_text(event.metadata().target());
        let message = c_text(&line.message);
        // SAFETY: the callback and context are what the host gave `set_log` (see the Send
        // impl); both strings are NUL-terminated and outlive the call, as the ABI requires.
        unsafe {
            (self.log)(
                self.context,
                level_number(event.metadata().level()),
                target.as_ptr(),
                message.as_ptr(),
            )
        };
    }

    fn enter(&self, _: &span::Id) {}

    fn exit(&self, _: &span::Id) {}
}

/// Make the host's callback the destination of this copy of `tracing`'s events. A second call
/// (a second library of the same plugin) keeps the first sink: the host is the same.
pub fn install(log: ReelLogFn, context: *mut c_void, max_level: u32) {
    let Some(log) = log else {
        return;
    };
    let sink = HostSink {
        log,
        context,
        max_level: max_level.min(REEL_LOG_TRACE),
    };
    let _ = tracing::subscriber::set_global_default(sink);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;
    use std::sync::Mutex;

    static SEEN: Mutex<Vec<(u32, String, String)>> = Mutex::new(Vec::new());

    unsafe extern "C" fn capture(
        _context: *mut c_void,
        level: u32,
        target: *const c_char,
        message: *const c_char,
    ) {
        // SAFETY: HostSink passes NUL-terminated strings valid for the call.
        let (t, m) = unsafe { (CStr::from_ptr(target), CStr::from_ptr(message)) };
        SEEN.lock().unwrap().push((
            level,
            t.to_string_lossy().into_owned(),
            m.to_string_lossy().into_owned(),
        ));
    }

    #[test]
    fn events_reach_the_callback_with_their_level_fields_and_target() {
        let sink = HostSink {
            log: capture,
            context: std::ptr::null_mut(),
            max_level: REEL_LOG_INFO,
        };
        tracing::subscriber::with_default(sink, || {
            tracing::warn!(drive = 2, barcode = "GFS001L9", "cartridge\0stuck");
            tracing::info!("library open");
            tracing::debug!("not recorded: above the host's level");
        });
        let seen = SEEN.lock().unwrap().clone();
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert_eq!(seen[0].0, REEL_LOG_WARN);
        assert_eq!(seen[0].1, "reel_plugin_abi::plugin_log::tests");
        assert_eq!(seen[0].2, "cartridge\u{FFFD}stuck drive=2 barcode=GFS001L9");
        assert_eq!(
            (seen[1].0, seen[1].2.as_str()),
            (REEL_LOG_INFO, "library open")
        );
        assert_eq!(filter_number(LevelFilter::OFF), 0);
        assert_eq!(filter_number(LevelFilter::DEBUG), REEL_LOG_DEBUG);
    }
}
