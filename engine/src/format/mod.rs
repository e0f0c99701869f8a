//! reel's on-tape format (docs/FORMAT.md): the BOT label, containers (header record,
//! fixed-size data records, footer records with the index, then a filemark), and their
//! decoders.
//!
//! Every structure is little-endian and wrapped in the same envelope: an 8-byte magic, the
//! format version, the body length, the body, and a CRC32C over all of it. Strings are
//! length-prefixed UTF-8. Decoders refuse damaged, truncated or foreign data with a
//! [`FormatError`] that says what and where, and never panic on any input.
//!
//! - [`Label`]: block 0 of every reel cartridge.
//! - [`ContainerHeader`]: the first record of a container.
//! - [`ContainerBuilder`]: frames object bytes into data records and hashes them (write path).
//! - [`Footer`], [`IndexEntry`], [`FooterTrailer`]: the index at the end of a container.
//! - [`ObjectMeta`]: an object's kind (file or symbolic link), mode, owner and mtime.
//! - [`ContainerReader`]: reads a container back and checks it (verify, rebuild).

mod container;
mod error;
mod footer;
mod label;
mod meta;
mod reader;
mod record;
mod wire;

pub use container::{ContainerHeader, HEADER_MAGIC};
pub use error::FormatError;
pub use footer::{
    FOOTER_MAGIC, Footer, FooterTrailer, IndexEntry, MAX_KEY_LEN, TRAILER_LEN, TRAILER_MAGIC,
};
pub use label::{LABEL_MAGIC, Label, MAX_BARCODE_LEN, MAX_POOL_LEN};
pub use meta::{META_LEN, ObjectKind, ObjectMeta};
pub use reader::ContainerReader;
pub use record::{ContainerBuilder, ExternalHashBuilder};

/// Default size of a data record: 1 MiB.
pub const DEFAULT_RECORD_SIZE: usize = 1 << 20;
/// Smallest data record size: 256 KiB.
pub const MIN_RECORD_SIZE: usize = 256 << 10;
/// Largest data record size: 8 MiB.
pub const MAX_RECORD_SIZE: usize = 8 << 20;
/// Version of the on-tape format this reel writes (and the newest it reads). Version 2 added
/// each object's metadata to the index entry (docs/FORMAT.md §4.5, §8).
pub const FORMAT_VERSION: u32 = 2;
/// Oldest on-tape format version this reel reads: tapes written by every earlier reel.
pub const OLDEST_READABLE_VERSION: u32 = 1;

// Each structure is written with the version of its layout, the oldest that has it, so a reel
// that reads only version 1 still reads the labels, headers and trailers of newer tapes and
// refuses only what it cannot parse (docs/FORMAT.md §8).
/// Version of the label's layout.
pub(crate) const LABEL_VERSION: u32 = 1;
/// Version of the container header's layout.
pub(crate) const HEADER_VERSION: u32 = 1;
/// Version of the footer records' layout (2: index entries carry metadata).
pub(crate) const FOOTER_VERSION: u32 = 2;
/// Version of the footer trailer's layout.
pub(crate) const TRAILER_VERSION: u32 = 1;

/// Tape block of the data record holding byte `offset` of a container's data stream: the
/// container's first block (its header record), plus one, plus the data record number.
pub fn data_block(container_first_block: u64, offset: u64, record_size: u32) -> u64 {
    container_first_block + 1 + offset / u64::from(record_size.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_block_of_an_object_follows_the_header() {
        // First container: file 1, header at block 2 (label at 0, filemark at 1).
        assert_eq!(data_block(2, 0, 1 << 20), 3);
        assert_eq!(data_block(2, (1 << 20) - 1, 1 << 20), 3);
        assert_eq!(data_block(2, 1 << 20, 1 << 20), 4);
        assert_eq!(data_block(2, 5 << 20, 0), 2 + 1 + (5 << 20));
    }
}
