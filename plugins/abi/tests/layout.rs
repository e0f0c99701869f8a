//! Layout of every `#[repr(C)]` type of ABI v1 on 64-bit targets (x86_64, aarch64).
//!
//! The figures below ARE the ABI: a C plugin compiled against `include/reel_plugin.h` lays its
//! structs out this way. If this test fails, a field was moved, resized or inserted, which
//! breaks every plugin already built. Append fields instead (docs/ABI.md, "Versioning"), then
//! add the new offsets here.
#![cfg(target_pointer_width = "64")]

use std::mem::{align_of, offset_of, size_of};

use reel_plugin_abi::types::*;

/// Assert size, alignment and each `(field, offset)` of a struct.
macro_rules! layout {
    ($ty:ty, size = $size:expr, align = $align:expr, { $($field:ident : $off:expr),* $(,)? }) => {{
        assert_eq!(size_of::<$ty>(), $size, "size of {}", stringify!($ty));
        assert_eq!(align_of::<$ty>(), $align, "alignment of {}", stringify!($ty));
        $(
            assert_eq!(
                offset_of!($ty, $field),
                $off,
                "offset of {}::{}",
                stringify!($ty),
                stringify!($field)
            );
        )*
    }};
}

#[test]
fn status_layout() {
    layout!(ReelStatus, size = 288, align = 8, {
        struct_size: 0,
        sense_key: 4,
        asc: 5,
        ascq: 6,
        reserved0: 7,
        flags: 8,
        reserved1: 12,
        residue: 16,
        elapsed_ns: 24,
        message: 32,
    });
    assert_eq!(REEL_MESSAGE_LEN, 256);
}

#[test]
fn element_layout() {
    layout!(ReelElement, size = 64, align = 4, {
        kind: 0,
        address: 4,
        index: 8,
        flags: 12,
        source_address: 16,
        reserved: 20,
        barcode: 24,
    });
    assert_eq!(REEL_BARCODE_LEN, 40);
}

#[test]
fn position_layout() {
    layout!(ReelPosition, size = 32, align = 8, {
        block: 0,
        file: 8,
        partition: 16,
        flags: 20,
        wrap: 24,
        lpos: 28,
    });
}

#[test]
fn drive_stats_layout() {
    layout!(ReelDriveStats, size = 168, align = 8, {
        struct_size: 0,
        valid: 4,
        busy_ns: 8,
        streaming_ns: 16,
        locate_ns: 24,
        mount_ns: 32,
        bytes_written: 40,
        bytes_read: 48,
        records_written: 56,
        records_read: 64,
        filemarks_written: 72,
        locates: 80,
        backhitch_underrun: 88,
        backhitch_sync: 96,
        repositions: 104,
        mounts: 112,
        writes_not_at_eod: 120,
        relabels: 128,
        write_errors_corrected: 136,
        write_errors_uncorrected: 144,
        read_errors_corrected: 152,
        read_errors_uncorrected: 160,
    });
}

#[test]
fn geometry_layout() {
    layout!(ReelGeometry, size = 48, align = 8, {
        struct_size: 0,
        wraps: 4,
        bands: 8,
        reserved: 12,
        min_lpos: 16,
        max_lpos: 24,
        capacity_bytes: 32,
        eowp_count: 40,
        reserved2: 44,
    });
}

#[test]
fn extent_layout() {
    layout!(ReelExtent, size = 16, align = 8, {
        first_block: 0,
        last_block: 8,
    });
}

#[test]
fn drive_info_layout() {
    layout!(ReelLibraryInfo, size = 120, align = 4, {
        struct_size: 0,
        reserved: 4,
        vendor: 8,
        product: 24,
        serial: 56,
    });
    layout!(ReelDriveInfo, size = 136, align = 8, {
        struct_size: 0,
        reserved: 4,
        vendor: 8,
        product: 24,
        serial: 56,
        max_record_bytes: 120,
        capabilities: 128,
    });
}

#[test]
fn opaque_handles_have_no_size() {
    assert_eq!(size_of::<ReelLibrary>(), 0);
    assert_eq!(size_of::<ReelDrive>(), 0);
}

#[test]
fn plugin_table_layout() {
    layout!(ReelPluginV1, size = 280, align = 8, {
        struct_size: 0,
        abi_major: 4,
        abi_minor: 6,
        name: 8,
        version: 16,
        caps: 24,
        thread_model: 32,
        reserved: 36,
        library_open: 40,
        library_close: 48,
        library_inventory: 56,
        library_move: 64,
        library_import: 72,
        library_export: 80,
        control: 88,
        drive_open: 96,
        drive_close: 104,
        drive_info: 112,
        drive_test_ready: 120,
        drive_load: 128,
        drive_unload: 136,
        drive_rewind: 144,
        drive_locate: 152,
        drive_space: 160,
        drive_read_position: 168,
        drive_write_record: 176,
        drive_write_filemarks: 184,
        drive_read_record: 192,
        drive_set_lbp: 200,
        drive_mam_read: 208,
        drive_mam_write: 216,
        drive_statistics: 224,
        drive_tape_alerts: 232,
        drive_geometry: 240,
        drive_rao: 248,
        library_info: 256,
        set_log: 264,
        drive_write_records: 272,
    });
}

#[test]
fn write_record_layout() {
    layout!(ReelWriteRecord, size = 24, align = 8, {
        data: 0,
        len: 8,
        crc: 16,
        flags: 20,
    });
}

#[test]
fn slots_are_nullable_pointers() {
    // `Option<extern "C" fn>` must be one pointer wide so a NULL slot reads as None.
    assert_eq!(
        size_of::<Option<unsafe extern "C" fn(*mut ReelDrive, *mut ReelStatus) -> i32>>(),
        size_of::<usize>()
    );
}
