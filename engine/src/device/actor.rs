//! One OS thread owning one plugin handle, fed by a channel. Async callers send a closure and
//! await its result on a tokio oneshot, so a tape call that takes hours never blocks the
//! runtime. A caller that goes away (its future dropped) only loses the answer: the thread
//! finishes the call and serves the next one. A closure that panics is caught on the thread,
//! reported to its caller, and the thread carries on.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use super::error::DeviceError;

type Job<H> = Box<dyn FnOnce(&mut H) + Send + 'static>;

/// The sending side of an actor thread; cloning it shares the thread. The thread stops (and
/// drops its handle, which closes it in the plugin) when the last clone is dropped.
pub(crate) struct Actor<H> {
    tx: crossbeam_channel::Sender<Job<H>>,
    name: Arc<str>,
}

impl<H> Clone for Actor<H> {
    fn clone(&self) -> Self {
        Actor {
            tx: self.tx.clone(),
            name: self.name.clone(),
        }
    }
}

impl<H: Send + 'static> Actor<H> {
    /// Start the thread `name` owning `handle`.
    pub(crate) fn spawn(name: String, mut handle: H) -> Result<Self, DeviceError> {
        let (tx, rx) = crossbeam_channel::unbounded::<Job<H>>();
        let thread_name = name.clone();
        std::thread::Builder::new()
            .name(name.clone())
            .spawn(move || {
                let _span = tracing::debug_span!("device_thread", thread = %thread_name).entered();
                tracing::debug!("device thread started");
                while let Ok(job) = rx.recv() {
                    job(&mut handle);
                }
                tracing::debug!("device thread stopping: every owner dropped it");
                drop(handle);
            })
            .map_err(|e| DeviceError::ActorGone {
                call: "spawn",
                detail: format!(
                    "could not start thread {name}: {e}; the system is out of threads or memory"
                ),
            })?;
        Ok(Actor {
            tx,
            name: name.into(),
        })
    }

    /// Run `f` on the thread with exclusive access to the handle; `call` names it in the
    /// tracing span and in errors.
    pub(crate) async fn run<R: Send + 'static>(
        &self,
        call: &'static str,
        f: impl FnOnce(&mut H) -> R + Send + 'static,
    ) -> Result<R, DeviceError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let name = self.name.clone();
        let job: Job<H> = Box::new(move |h: &mut H| {
            let _span = tracing::debug_span!("device_call", thread = %name, call).entered();
            let r = catch_unwind(AssertUnwindSafe(|| f(h)));
            if tx.send(r.map_err(panic_message)).is_err() {
                tracing::debug!("caller went away before the answer; dropped");
            }
        });
        self.tx.send(job).map_err(|_| DeviceError::ActorGone {
            call,
            detail: format!("thread {} has stopped", self.name),
        })?;
        match rx.await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(msg)) => Err(DeviceError::ActorGone {
                call,
                detail: format!(
                    "the closure run on thread {} panicked ({msg}); the thread carries on, this is a reel bug",
                    self.name
                ),
            }),
            Err(_) => Err(DeviceError::ActorGone {
                call,
                detail: format!("thread {} dropped the request", self.name),
            }),
        }
    }
}

fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn runs_on_its_own_named_thread_and_survives_a_panicking_closure() {
        let actor = Actor::spawn("reel-test-actor".into(), 0u32).unwrap();
        let name = actor
            .run("name", |_| std::thread::current().name().map(str::to_owned))
            .await
            .unwrap();
        assert_eq!(name.as_deref(), Some("reel-test-actor"));
        let err = actor
            .run("boom", |_| -> u32 { panic!("kaboom") })
            .await
            .unwrap_err();
        assert!(err.to_string().contains("kaboom"), "{err}");
        let n = actor
            .run("count", |h| {
                *h += 1;
                *h
            })
            .await
            .unwrap();
        assert_eq!(n, 1);
    }
}
