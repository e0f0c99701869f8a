//! Job persistence: reel's job records, the apalis bridge, tape requests, leases, the drive
//! board.

pub mod apalis_bridge;
pub mod backoff;
pub mod drives;
pub mod inventory;
pub mod lease;
pub mod requests;
pub mod store;

pub use apalis_bridge::{ApalisDb, JobQueue, Ticket};
pub use backoff::Backoff;
pub use drives::{BoardEntry, BoardMount, DriveBoard};
pub use inventory::{ElementView, Inventory, InventoryView};
pub use lease::{Fence, LeaseManager};
pub use requests::{ClaimLimit, NewTapeRequest, RequestMode, TapeRequest, TapeRequests};

pub use store::{FailOutcome, JobRecord, JobStore, Progress, StartOutcome};
