//! Errors of the on-tape format decoders and of the container builder.
//!
//! Every error says what was wrong and where: which structure, which field, at which byte
//! offset inside the record, and (through [`FormatError::InRecord`]) which record of the
//! container. Decoders never panic; they return one of these.

/// What went wrong while encoding, decoding or checking reel's on-tape format.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    /// The record ends before a field it must contain.
    #[error(
        "{structure}: truncated at byte {offset}: field `{field}` needs {needed} bytes, only {available} left; the record is cut short (damaged tape, or read with a buffer smaller than the record)"
    )]
    Truncated {
        /// Which structure (label, container header, footer record, footer trailer, footer index).
        structure: &'static str,
        /// The field being read.
        field: &'static str,
        /// Byte offset of the field in the record (or in the footer index).
        offset: usize,
        /// Bytes the field needs.
        needed: usize,
        /// Bytes left in the record.
        available: usize,
    },
    /// The record does not start with the magic of the expected structure.
    #[error(
        "{structure}: not a reel {structure} (magic at byte 0 is {found:02X?}, expected {expected:?}); this record was not written by reel or the tape is not positioned where the catalogue says"
    )]
    BadMagic {
        /// Which structure was expected.
        structure: &'static str,
        /// The first bytes found.
        found: Vec<u8>,
        /// The magic expected.
        expected: &'static str,
    },
    /// The structure was written by a format version this reel does not read.
    #[error(
        "{structure}: format version {found} at byte 8, this reel reads versions 1 to {supported}; a later version was written by a newer reel: upgrade reel to read it"
    )]
    UnsupportedVersion {
        /// Which structure.
        structure: &'static str,
        /// Version found.
        found: u32,
        /// Newest version this build reads.
        supported: u32,
    },
    /// The CRC32C stored in the structure does not match its bytes.
    #[error(
        "{structure}: CRC32C mismatch at byte {offset} (stored {stored:08x}, computed {computed:08x}); the record is damaged, use another copy"
    )]
    Crc {
        /// Which structure.
        structure: &'static str,
        /// Byte offset of the stored CRC.
        offset: usize,
        /// CRC found in the record.
        stored: u32,
        /// CRC computed over the bytes.
        computed: u32,
    },
    /// A field holds a value that is not allowed.
    #[error("{structure}: field `{field}` at byte {offset} is invalid: {reason}")]
    InvalidField {
        /// Which structure.
        structure: &'static str,
        /// The field.
        field: &'static str,
        /// Byte offset of the field.
        offset: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// Bytes follow the end of the structure.
    #[error(
        "{structure}: {extra} unexpected bytes after the end of the structure at byte {offset}; the record is damaged or not a reel record"
    )]
    TrailingBytes {
        /// Which structure.
        structure: &'static str,
        /// Where the structure ended.
        offset: usize,
        /// How many bytes follow.
        extra: usize,
    },
    /// The records of a container are not in the order or sizes the format requires.
    #[error("container layout: {reason}")]
    Layout {
        /// What is wrong (names the record).
        reason: String,
    },
    /// A SHA-256 computed over the data does not match the one in the footer or index.
    #[error(
        "{what}: SHA-256 mismatch (expected {expected}, computed {computed}); the data is damaged, use another copy"
    )]
    DigestMismatch {
        /// Which object (key, generation, offset) or "container data stream".
        what: String,
        /// Hex digest expected.
        expected: String,
        /// Hex digest computed.
        computed: String,
    },
    /// The builder was used out of order (a programming error in the caller).
    #[error("container builder: {reason}")]
    Usage {
        /// What was done wrong.
        reason: String,
    },
    /// An error inside one record of a container: the record number says where.
    #[error(
        "record {record} of the container (tape block container_first_block + {record}): {source}"
    )]
    InRecord {
        /// 0-based record number within the container (0 = header record).
        record: u64,
        /// The error inside that record.
        #[source]
        source: Box<FormatError>,
    },
}

impl FormatError {
    /// Wrap this error with the number of the container record it happened in.
    pub fn in_record(self, record: u64) -> FormatError {
        FormatError::InRecord {
            record,
            source: Box::new(self),
        }
    }
}
