//! Accepting connections: at most `[serve] max_connections` at once (and
//! `max_connections_per_address` from one client address), each closed when it sends
//! no complete request head within `[serve] header_timeout_seconds` (a half-open or idle
//! keep-alive connection included), and all of them finished gracefully at shutdown.
//!
//! `axum::serve` has neither a connection cap nor a header timeout (it gives hyper no timer),
//! so 3 000 half-open connections stayed open for good; this loop drives hyper's HTTP/1
//! connection itself, with tokio's timer, and gives each connection a permit of one semaphore.
//! A connection over the cap gets a short 503 and is closed; at shutdown the loop stops
//! accepting, asks every connection to finish its request in flight, and waits for all the
//! permits to come back.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use reel_queue::config::ServeConfig;

/// Largest buffer hyper reads a request head into; the head limit proper (431 with a JSON
/// body) is [`super::limits::MAX_HEADER_BYTES`], checked on the parsed headers.
const MAX_READ_BUFFER: usize = 64 * 1024;

const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\nRetry-After: 1\r\nContent-Length: 150\r\n\r\n";

fn busy_body() -> Vec<u8> {
    let body = br#"{"error":"too many connections: [serve] max_connections are open","hint":"retry in a second, and reuse connections","status":503}"#;
    let mut pad = body.to_vec();
    pad.resize(150, b' ');
    pad
}

/// Connections open per client address; a [`PerAddress`] slot is given back when dropped.
#[derive(Debug, Default, Clone)]
struct Addresses(Arc<Mutex<HashMap<IpAddr, u32>>>);

struct PerAddress {
    addresses: Addresses,
    ip: IpAddr,
}

impl Addresses {
    fn take(&self, ip: IpAddr, max: u32) -> Option<PerAddress> {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let n = m.entry(ip).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(PerAddress {
            addresses: self.clone(),
            ip,
        })
    }
}

impl Drop for PerAddress {
    fn drop(&mut self) {
        let mut m = self.addresses.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = m.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                m.remove(&self.ip);
            }
        }
    }
}

/// Answer 503 on `stream` and close it, within a second.
fn refuse(stream: tokio::net::TcpStream) {
    tokio::spawn(async move {
        let mut stream = stream;
        let _ = tokio::time::timeout(Duration::from_secs(1), async {
            let _ = stream.write_all(BUSY).await;
            let _ = stream.write_all(&busy_body()).await;
            let _ = stream.shutdown().await;
        })
        .await;
    });
}

/// Serve `app` on `listener` until `shutdown` is cancelled, then let the requests in flight
/// finish and return.
pub(super) async fn serve(
    listener: TcpListener,
    app: Router,
    cfg: &ServeConfig,
    shutdown: CancellationToken,
) {
    let max = cfg.max_connections.max(1) as usize;
    let permits = Arc::new(Semaphore::new(max));
    let header_timeout = Duration::from_secs(cfg.header_timeout_seconds.max(1));
    let per_address = cfg.max_connections_per_address.max(1);
    let addresses = Addresses::default();
    loop {
        let (stream, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // EMFILE and the like: wait a little rather than spin.
                    tracing::warn!(error = %e, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Some(slot) = addresses.take(peer.ip(), per_address) else {
            tracing::warn!(%peer, per_address, "connection refused: [serve] max_connections_per_address are open from it");
            refuse(stream);
            continue;
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            tracing::warn!(%peer, max, "connection refused: [serve] max_connections are open");
            refuse(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(app.clone());
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let _permit = (permit, slot);
            let mut builder = http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout)
                .max_buf_size(MAX_READ_BUFFER);
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        tracing::debug!(%peer, error = %e, "connection ended");
                    }
                }
                _ = stop.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    }
    // Every connection holds a permit until it is done; a connection still busy after the
    // request timeout (a long upload or download) is dropped with the process.
    let drain = std::time::Duration::from_secs(cfg.request_timeout_seconds.max(1));
    if tokio::time::timeout(drain, permits.acquire_many(max as u32))
        .await
        .is_err()
    {
        tracing::warn!(
            seconds = drain.as_secs(),
            "connections still busy at shutdown (long uploads or downloads); closing them"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_per_address_are_bounded_and_given_back() {
        let a = Addresses::default();
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let other: IpAddr = "127.0.0.2".parse().unwrap();
        let s1 = a.take(ip, 2).unwrap();
        let _s2 = a.take(ip, 2).unwrap();
        assert!(a.take(ip, 2).is_none());
        assert!(a.take(other, 2).is_some());
        drop(s1);
        assert!(a.take(ip, 2).is_some());
    }

    #[test]
    fn the_busy_answer_is_well_formed() {
        let body = busy_body();
        assert_eq!(body.len(), 150);
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["status"], 503);
    }
}
