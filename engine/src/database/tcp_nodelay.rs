//! `TCP_NODELAY` on reel's PostgreSQL connections (catalogue and jobs), which sqlx 0.9.0 no
//! longer sets. This is an OS-boundary module: its one `unsafe` block borrows a socket
//! descriptor for one `setsockopt` call.
//!
//! A PostgreSQL client sends a request and waits for the answer. With Nagle's algorithm on, the
//! kernel holds back the last, partly filled segment of a request larger than one segment until
//! the server has acknowledged the segments before it. The server needs the whole request before
//! it answers, and Linux delays that acknowledgement by up to 40 ms. libpq sets `TCP_NODELAY` on
//! every connection for this reason, as sqlx did up to 0.8. sqlx 0.9.0 dropped it
//! (transact-rs/sqlx issue 4335); the fix is merged upstream but not released.
//!
//! On the test machine (loopback), closing a container of 10 000 objects sends a Bind message of
//! about 600 KB. That Bind reached the server 9 to 48 ms after the statement before it had
//! finished: about a fifth of the close. The same bench over a Unix socket (no Nagle) loaded
//! 85 000 objects/s against 65 000 over TCP.
//!
//! sqlx does not hand out a connection's socket, so reel finds it. The server reports the address
//! and port the connection comes from and the ones it was reached on (`inet_client_addr()`,
//! `inet_server_port()`, ...). The socket among this process's descriptors (`/proc/self/fd`)
//! whose local and peer ends are those is the connection's. A connection over a Unix socket (the
//! server reports no address) needs nothing. One through a proxy or NAT, where the server sees
//! other addresses, is not found and is left as it is. Remove this module once sqlx sets
//! `TCP_NODELAY` itself.

use std::net::{IpAddr, SocketAddr};
use std::os::fd::{BorrowedFd, RawFd};

use nix::sys::socket::{SockaddrStorage, getpeername, getsockname, setsockopt, sockopt};
use sqlx::PgConnection;
use sqlx::postgres::PgPoolOptions;

/// `options` with `TCP_NODELAY` set on every connection the pool opens (part of
/// [`super::postgres_pool_options`]).
pub(super) fn nodelay_on_connect(options: PgPoolOptions) -> PgPoolOptions {
    options.after_connect(|conn, _meta| Box::pin(set_tcp_nodelay(conn)))
}

/// Set `TCP_NODELAY` on the socket of `conn`, a connection just opened. Fails only if the server
/// cannot be asked for the connection's addresses (the connection is then unusable anyway). A
/// socket not found, or refusing the option, is logged and the connection kept as it is.
async fn set_tcp_nodelay(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    let Some((local, peer)) = connection_ends(conn).await? else {
        return Ok(()); // A Unix socket: no Nagle.
    };
    let Some(fd) = find_socket(local, peer) else {
        tracing::info!(
            %local,
            %peer,
            "no socket of this process has the ends the server reports (a proxy or NAT?); \
             TCP_NODELAY not set, so large statements on this connection may wait up to 40 ms"
        );
        return Ok(());
    };
    if let Err(error) = with_socket(fd, |socket| setsockopt(&socket, sockopt::TcpNoDelay, &true)) {
        tracing::warn!(%local, %peer, %error, "TCP_NODELAY refused; the connection keeps Nagle's algorithm");
    }
    Ok(())
}

/// The connection's local and peer ends as the server sees them (None over a Unix socket).
async fn connection_ends(
    conn: &mut PgConnection,
) -> Result<Option<(SocketAddr, SocketAddr)>, sqlx::Error> {
    let (client_addr, client_port, server_addr, server_port): (
        Option<String>,
        Option<i32>,
        Option<String>,
        Option<i32>,
    ) = sqlx::query_as(
        "SELECT host(inet_client_addr()), inet_client_port(), \
                host(inet_server_addr()), inet_server_port()",
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(socket_addr(client_addr, client_port).zip(socket_addr(server_addr, server_port)))
}

/// Run `f` on `fd`, a socket [`find_socket`] found for a connection the caller holds.
fn with_socket<T>(fd: RawFd, f: impl FnOnce(BorrowedFd<'_>) -> T) -> T {
    // SAFETY: `fd` was listed in /proc/self/fd as a TCP socket with the two ends of a connection
    // the caller holds, which keeps it open; the borrow does not outlive this call.
    let socket = unsafe { BorrowedFd::borrow_raw(fd) };
    f(socket)
}

/// An address with an IPv4-mapped IPv6 address taken as IPv4, so that the server's view and
/// the kernel's compare equal.
fn unmapped(ip: IpAddr, port: u16) -> SocketAddr {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    SocketAddr::new(ip, port)
}

/// An address and port as the server reports them (None for a Unix socket).
fn socket_addr(addr: Option<String>, port: Option<i32>) -> Option<SocketAddr> {
    Some(unmapped(addr?.parse().ok()?, u16::try_from(port?).ok()?))
}

/// A socket address as the kernel reports it (None for a socket that is not IP).
fn kernel_addr(addr: &SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = addr.as_sockaddr_in() {
        return Some(unmapped(IpAddr::V4(v4.ip()), v4.port()));
    }
    let v6 = addr.as_sockaddr_in6()?;
    Some(unmapped(IpAddr::V6(v6.ip()), v6.port()))
}

/// The descriptor of this process's socket whose local end is `local` and peer end is `peer`
/// (both [`unmapped`]).
fn find_socket(local: SocketAddr, peer: SocketAddr) -> Option<RawFd> {
    let entries = std::fs::read_dir("/proc/self/fd").ok()?;
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<RawFd>().ok())
        .find(|&fd| {
            let ends = || -> Option<(SocketAddr, SocketAddr)> {
                let mine = getsockname::<SockaddrStorage>(fd).ok()?;
                let theirs = getpeername::<SockaddrStorage>(fd).ok()?;
                Some((kernel_addr(&mine)?, kernel_addr(&theirs)?))
            };
            ends() == Some((local, peer))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::socket::getsockopt;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::{AsFd, AsRawFd};

    #[test]
    fn the_socket_with_both_ends_is_found_and_set_and_no_other() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        let local = client.local_addr().unwrap();
        let peer = client.peer_addr().unwrap();
        assert_eq!(find_socket(local, peer), Some(client.as_raw_fd()));
        // The accepted end has the same two addresses the other way round.
        assert_eq!(find_socket(peer, local), Some(server.as_raw_fd()));
        // A peer with another port matches nothing.
        let elsewhere = SocketAddr::new(peer.ip(), peer.port().wrapping_add(1));
        assert_eq!(find_socket(local, elsewhere), None);

        let nodelay = |s: &TcpStream| getsockopt(&s.as_fd(), sockopt::TcpNoDelay).unwrap();
        assert!(!nodelay(&client), "a new socket has Nagle's algorithm on");
        with_socket(client.as_raw_fd(), |socket| {
            setsockopt(&socket, sockopt::TcpNoDelay, &true)
        })
        .unwrap();
        assert!(nodelay(&client));
        assert!(!nodelay(&server), "only the socket found is changed");
    }

    /// Every connection of a PostgreSQL catalogue's pool has TCP_NODELAY (when the test server
    /// is reached over TCP, as in CI).
    #[tokio::test]
    async fn every_pooled_postgres_connection_has_tcp_nodelay()
    -> Result<(), Box<dyn std::error::Error>> {
        let Some(db) = crate::catalogue::testing::postgres().await? else {
            return Ok(());
        };
        let pool = db.catalogue().pool_postgres().ok_or("no PostgreSQL pool")?;
        // Held at once, so the pool opens three connections.
        let mut held = Vec::new();
        for _ in 0..3 {
            held.push(pool.acquire().await?);
        }
        let mut tcp = 0;
        for conn in &mut held {
            let Some((local, peer)) = connection_ends(conn).await? else {
                continue;
            };
            let fd = find_socket(local, peer).ok_or("the connection's socket is not found")?;
            let on = with_socket(fd, |socket| getsockopt(&socket, sockopt::TcpNoDelay))?;
            assert!(on, "connection {local} -> {peer} has Nagle's algorithm on");
            tcp += 1;
        }
        if std::env::var("CI").is_ok() {
            assert_eq!(tcp, 3, "CI's PostgreSQL is reached over TCP");
        }
        Ok(())
    }

    #[test]
    fn ipv4_mapped_addresses_match_their_ipv4_form() {
        let addr = |a: &str, port: i32| socket_addr(Some(a.into()), Some(port));
        let v4 = addr("127.0.0.1", 5432);
        assert_eq!(v4, addr("::ffff:127.0.0.1", 5432));
        assert_ne!(v4, addr("127.0.0.1", 5433));
        assert_ne!(v4, addr("::1", 5432));
    }

    #[test]
    fn a_unix_socket_has_no_address() {
        assert_eq!(socket_addr(None, None), None);
        assert_eq!(socket_addr(Some("127.0.0.1".into()), Some(70_000)), None);
        assert_eq!(
            socket_addr(Some("::1".into()), Some(5432)),
            Some("[::1]:5432".parse().unwrap())
        );
    }
}
