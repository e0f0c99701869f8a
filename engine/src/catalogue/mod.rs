//! The catalogue: what is on which tape.
//!
//! One schema on two backends, both tested with every query:
//!
//! - **SQLite** (the default, one host): `sqlite:/path/to/catalogue.db`, one file created if
//!   missing, WAL with `synchronous=FULL` (every commit is on stable storage before it returns,
//!   so an acknowledged archive survives a power cut), foreign keys on, a 30 s busy timeout.
//! - **PostgreSQL** (many hosts): `postgres://user@host:5432/db`, a connection pool. Add
//!   `?schema=NAME` to keep the catalogue in its own schema: the schema is created if missing
//!   and every pooled connection sets `search_path` to it.
//!
//! The migrations are embedded in the binary and run by [`Catalogue::open`]; they are recorded
//! in their own table ([`MIGRATIONS_TABLE`]) so the jobs layer can run its own migrator in the
//! same database through [`Catalogue::pool_sqlite`] / [`Catalogue::pool_postgres`].
//!
//! **Visibility.** An object is reported as archived ([`Catalogue::object`],
//! [`Catalogue::list_objects`], [`Catalogue::count_objects`], [`Catalogue::copies`]) only through
//! a copy in a [`ContainerState::Durable`] or [`ContainerState::Verified`] container: a container
//! closed but not yet covered by a synchronous barrier reports nothing.
//!
//! **Guards.** The catalogue refuses what would let a later write destroy acknowledged data:
//! containers are created only at or after the recorded end of data of an active, labelled
//! cartridge, in file and block order; end of data never moves back over a durable container;
//! a cartridge holding live containers is never relabelled; a dead container never comes back.

mod backend;
mod cartridge;
mod close;
mod container;
mod dump;
mod error;
mod object;
mod pool;
#[cfg(test)]
mod test_support;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use backend::MIGRATIONS_TABLE;
pub use cartridge::{Cartridge, CartridgeState};
pub use container::{Container, ContainerState};
pub use error::{CatalogueError, Result};
pub use object::{CopyLocation, MAX_KEY_BYTES, NewCopy, Object, validate_key};
pub use pool::StorageClass;

use backend::Backend;

/// The catalogue: a handle on its database. Cheap to clone (clones share the pool).
#[derive(Clone, Debug)]
pub struct Catalogue {
    backend: Backend,
}

impl Catalogue {
    /// Open the catalogue at `url` and bring its schema up to date.
    ///
    /// `url` is `sqlite:PATH` (the file is created if missing; its directory must exist) or
    /// `postgres://…` / `postgresql://…`, optionally with `?schema=NAME` (1 to 63 characters of
    /// `a-z 0-9 _`), which puts the catalogue's tables in that schema, created if missing.
    pub async fn open(url: &str) -> Result<Catalogue> {
        Ok(Catalogue {
            backend: backend::connect(url).await?,
        })
    }

    /// `"sqlite"` or `"postgres"`.
    pub fn backend(&self) -> &'static str {
        match self.backend {
            Backend::Sqlite(_) => "sqlite",
            Backend::Postgres(_) => "postgres",
        }
    }

    /// The SQLite pool, for the jobs layer's own tables in the same file (None on PostgreSQL).
    /// Keep writes short: SQLite has one writer at a time.
    pub fn pool_sqlite(&self) -> Option<&sqlx::SqlitePool> {
        match &self.backend {
            Backend::Sqlite(p) => Some(p),
            Backend::Postgres(_) => None,
        }
    }

    /// The PostgreSQL pool, for the jobs layer's own tables in the same database (None on
    /// SQLite). With `?schema=NAME`, its connections' `search_path` is that schema.
    pub fn pool_postgres(&self) -> Option<&sqlx::PgPool> {
        match &self.backend {
            Backend::Postgres(p) => Some(p),
            Backend::Sqlite(_) => None,
        }
    }

    /// Close the pool: wait for connections in use to come back, then close them all. Other
    /// clones of this catalogue can no longer be used afterwards.
    pub async fn close(&self) {
        match &self.backend {
            Backend::Sqlite(p) => p.close().await,
            Backend::Postgres(p) => p.close().await,
        }
    }
}
