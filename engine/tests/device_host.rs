//! The device host against an in-process Rust plugin (built with the SDK and handed to the
//! host through `Plugin::from_table`), and bad plugin files through `load_plugin`.

use std::collections::HashMap;
use std::ffi::CStr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use reel_engine::device::{DeviceError, Drive, Library, LoadError, Plugin, load_plugin};
use reel_engine::format::{
    ContainerBuilder, ContainerHeader, ContainerReader, Footer, Label, MIN_RECORD_SIZE, data_block,
};
use reel_plugin_abi::sdk::{self, Call, DriveInfo, Element, Fault, ReadRecord};
use reel_plugin_abi::types::*;

// ---- the in-process test plugin ---------------------------------------------------------

/// Faults injected through `control`, per drive index, returned by the drive's next call.
#[derive(Default)]
struct Shared {
    faults: Mutex<HashMap<u32, Fault>>,
}

struct MemLib {
    shared: Arc<Shared>,
    ua_after_load: u32,
    tag: String,
}

/// Drives of a library opened with `tag=T` report their close here (from `Drop`).
static CLOSED: Mutex<Option<HashMap<String, std::sync::mpsc::Sender<u32>>>> = Mutex::new(None);

/// Hands a blocked `locate(GATE_BLOCK)` its channels: "entered" then wait for "release".
type Gate = (
    tokio::sync::oneshot::Sender<()>,
    std::sync::mpsc::Receiver<()>,
);
static GATE: Mutex<Option<Gate>> = Mutex::new(None);
const GATE_BLOCK: u64 = 777;
const PANIC_BLOCK: u64 = 666;

const LOAD_NS: u64 = 1_000;
const TUR_NS: u64 = 10;
const LOCATE_NS: u64 = 42;

impl sdk::Library for MemLib {
    type Drive = MemDrive;
    const NAME: &'static CStr = c"reel-test-mem";
    const VERSION: &'static CStr = c"0.0.1";
    const CAPS: u64 = REEL_CAP_CHANGER | REEL_CAP_MAM;

    fn open(config: &str, _call: &mut Call) -> Result<Self, Fault> {
        let mut ua_after_load = 1;
        let mut tag = String::new();
        for kv in config.split_whitespace() {
            match kv.split_once('=') {
                Some(("ua_after_load", v)) => {
                    ua_after_load = v.parse().map_err(|_| Fault::invalid("ua_after_load"))?
                }
                Some(("tag", v)) => tag = v.to_owned(),
                _ => return Err(Fault::invalid(format!("unknown config {kv}"))),
            }
        }
        Ok(MemLib {
            shared: Arc::default(),
            ua_after_load,
            tag,
        })
    }

    fn inventory(&mut self, _call: &mut Call) -> Result<Vec<Element>, Fault> {
        Ok(vec![
            Element {
                kind: REEL_ELEMENT_SLOT,
                address: 1000,
                index: 0,
                flags: REEL_ELEMENT_FULL,
                source_address: 0,
                barcode: "TST001L9".into(),
            },
            Element {
                kind: REEL_ELEMENT_DRIVE,
                address: 1,
                index: 0,
                flags: 0,
                source_address: 0,
                barcode: String::new(),
            },
        ])
    }

    fn move_medium(&mut self, source: u32, destination: u32, call: &mut Call) -> Result<(), Fault> {
        if source == destination {
            return Err(Fault::check(
                sense_key::ILLEGAL_REQUEST,
                asc::INVALID_ELEMENT_ADDRESS,
                "source is the destination",
            ));
        }
        call.elapsed_ns = 5_000_000;
        Ok(())
    }

    fn control(&mut self, request: &str, _call: &mut Call) -> Result<String, Fault> {
        // "fault <drive> <code> <key> <asc> <ascq> <flags>"
        let w: Vec<&str> = request.split_whitespace().collect();
        let num = |i: usize| -> Result<i64, Fault> {
            w.get(i)
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| Fault::invalid(format!("bad control request {request:?}")))
        };
        if w.first() != Some(&"fault") {
            return Err(Fault::invalid(format!(
                "unknown control request {request:?}"
            )));
        }
        let mut f = Fault::code(num(2)? as i32, "injected by the test");
        f.sense_key = num(3)? as u8;
        f.asc = num(4)? as u8;
        f.ascq = num(5)? as u8;
        f.flags = num(6)? as u32 | REEL_FLAG_SENSE_VALID;
        self.shared.faults.lock().unwrap().insert(num(1)? as u32, f);
        Ok("ok".into())
    }

    fn open_drive(&mut self, index: u32, _call: &mut Call) -> Result<MemDrive, Fault> {
        if index >= 2 {
            return Err(Fault::invalid(format!("no drive {index}")));
        }
        Ok(MemDrive {
            index,
            shared: self.shared.clone(),
            ua_after_load: self.ua_after_load,
            tag: self.tag.clone(),
            pending_ua: 0,
            loaded: false,
            block: 0,
            mam: HashMap::new(),
            tape: Vec::new(),
        })
    }
}

struct MemDrive {
    index: u32,
    shared: Arc<Shared>,
    ua_after_load: u32,
    tag: String,
    pending_ua: u32,
    loaded: bool,
    block: u64,
    mam: HashMap<u16, Vec<u8>>,
    /// The medium: records, `None` for a filemark; EOD after the last.
    tape: Vec<Option<Vec<u8>>>,
}

impl MemDrive {
    /// Writing at the current position discards everything after it (tape semantics).
    fn append(&mut self, item: Option<Vec<u8>>) {
        let at = self.block as usize;
        self.tape.resize(at.max(self.tape.len()), None);
        self.tape.truncate(at);
        self.tape.push(item);
        self.block += 1;
    }
}

impl MemDrive {
    fn injected(&self) -> Result<(), Fault> {
        match self.shared.faults.lock().unwrap().remove(&self.index) {
            Some(f) => Err(f),
            None => Ok(()),
        }
    }
}

impl Drop for MemDrive {
    fn drop(&mut self) {
        if let Some(tx) = CLOSED
            .lock()
            .unwrap()
            .as_ref()
            .and_then(|m| m.get(&self.tag))
        {
            let _ = tx.send(self.index);
        }
    }
}

impl sdk::Drive for MemDrive {
    fn info(&mut self, _call: &mut Call) -> Result<DriveInfo, Fault> {
        self.injected()?;
        Ok(DriveInfo {
            vendor: "TEST".into(),
            product: "MEM".into(),
            serial: format!("D{}", self.index),
            max_record_bytes: 8 << 20,
            // drive 1 is an older drive without MAM (a library of mixed generations)
            capabilities: (self.index == 1).then_some(REEL_CAP_CHANGER),
        })
    }
    fn test_ready(&mut self, call: &mut Call) -> Result<(), Fault> {
        self.injected()?;
        call.elapsed_ns = TUR_NS;
        if self.pending_ua > 0 {
            self.pending_ua -= 1;
            return Err(Fault::check(
                sense_key::UNIT_ATTENTION,
                asc::MEDIUM_MAY_HAVE_CHANGED,
                "medium may have changed",
            ));
        }
        if !self.loaded {
            return Err(Fault::check(
                sense_key::NOT_READY,
                asc::MEDIUM_NOT_PRESENT,
                "no medium",
            ));
        }
        Ok(())
    }
    fn load(&mut self, call: &mut Call) -> Result<(), Fault> {
        self.injected()?;
        call.elapsed_ns = LOAD_NS;
        self.loaded = true;
        self.pending_ua = self.ua_after_load;
        self.block = 0;
        Ok(())
    }
    fn unload(&mut self, _call: &mut Call) -> Result<(), Fault> {
        self.injected()?;
        self.loaded = false;
        Ok(())
    }
    fn rewind(&mut self, _call: &mut Call) -> Result<(), Fault> {
        self.injected()?;
        self.block = 0;
        Ok(())
    }
    fn locate(&mut self, block: u64, call: &mut Call) -> Result<(), Fault> {
        self.injected()?;
        if block == PANIC_BLOCK {
            panic!("test plugin panics on locate {PANIC_BLOCK}");
        }
        if block == GATE_BLOCK {
            let gate = GATE.lock().unwrap().take();
            if let Some((entered, release)) = gate {
                let _ = entered.send(());
                let _ = release.recv();
            }
        }
        call.elapsed_ns = LOCATE_NS;
        self.block = block;
        Ok(())
    }
    fn space(&mut self, _kind: u32, count: i64, _call: &mut Call) -> Result<(), Fault> {
        self.injected()?;
        self.block = self.block.saturating_add_signed(count);
        Ok(())
    }
    fn read_position(&mut self, _call: &mut Call) -> Result<ReelPosition, Fault> {
        self.injected()?;
        Ok(ReelPosition {
            block: self.block,
            ..Default::default()
        })
    }
    fn write_record(
        &mut self,
        data: &[u8],
        _crc: Option<u32>,
        _call: &mut Call,
    ) -> Result<(), Fault> {
        self.injected()?;
        self.append(Some(data.to_vec()));
        Ok(())
    }
    fn write_filemarks(
        &mut self,
        count: u32,
        _immediate: bool,
        _call: &mut Call,
    ) -> Result<(), Fault> {
        self.injected()?;
        for _ in 0..count {
            self.append(None);
        }
        Ok(())
    }
    fn read_record(&mut self, buffer: &mut [u8], _call: &mut Call) -> Result<ReadRecord, Fault> {
        self.injected()?;
        let item = self.tape.get(self.block as usize).cloned();
        match item {
            None => Err(Fault::check(
                sense_key::BLANK_CHECK,
                asc::END_OF_DATA,
                "end of data",
            )),
            Some(None) => {
                self.block += 1;
                Err(Fault::check(sense_key::NO_SENSE, asc::FILEMARK, "filemark")
                    .with_flags(REEL_FLAG_FILEMARK))
            }
            Some(Some(rec)) => {
                let n = rec.len().min(buffer.len());
                buffer[..n].copy_from_slice(&rec[..n]);
                self.block += 1;
                if n < rec.len() {
                    return Err(Fault::check(
                        sense_key::NO_SENSE,
                        asc::NONE,
                        "record longer than the buffer",
                    )
                    .with_flags(REEL_FLAG_ILI)
                    .with_transferred(n));
                }
                Ok(ReadRecord { len: n, crc: None })
            }
        }
    }
    fn mam_read(&mut self, attribute: u16, _call: &mut Call) -> Result<Vec<u8>, Fault> {
        self.injected()?;
        self.mam.get(&attribute).cloned().ok_or_else(|| {
            Fault::check(
                sense_key::ILLEGAL_REQUEST,
                asc::INVALID_FIELD_IN_CDB,
                "no such attribute",
            )
        })
    }
    fn mam_write(&mut self, attribute: u16, data: &[u8], _call: &mut Call) -> Result<(), Fault> {
        self.injected()?;
        self.mam.insert(attribute, data.to_vec());
        Ok(())
    }
}

static TABLE: ReelPluginV1 = sdk::plugin_table::<MemLib>();

fn plugin() -> Arc<Plugin> {
    Plugin::from_table(&TABLE, "in-process test plugin").expect("the SDK table negotiates")
}

async fn library(config: &str) -> Library {
    let p = plugin();
    let config = config.to_owned();
    // Library::open blocks while the plugin opens: keep it off the runtime's thread.
    tokio::task::spawn_blocking(move || Library::open(p, &config))
        .await
        .unwrap()
        .unwrap()
}

// ---- drive host -------------------------------------------------------------------------

#[tokio::test(flavor = "current_thread")]
async fn library_and_drive_calls_work_from_async_code() {
    let lib = library("").await;
    let inv = lib.inventory().await.unwrap();
    assert_eq!(inv[0].barcode, "TST001L9");
    assert_eq!(lib.move_medium(1000, 1).await.unwrap(), 5_000_000);
    let e = lib.move_medium(1, 1).await.unwrap_err();
    assert!(matches!(e, DeviceError::IllegalRequest { .. }), "{e}");
    let e = lib.open_drive(9).await.unwrap_err();
    assert!(
        matches!(
            e,
            DeviceError::Plugin {
                code: REEL_E_INVALID_ARG,
                ..
            }
        ),
        "{e}"
    );

    let d = lib.open_drive(1).await.unwrap();
    assert_eq!(d.index(), 1);
    // ABI 1.2: drive 1 says it has no MAM; the engine asks the drive, not the library
    assert!(lib.plugin().has_cap(REEL_CAP_MAM));
    assert!(d.has_cap(REEL_CAP_CHANGER) && !d.has_cap(REEL_CAP_MAM));
    assert_eq!(d.info().await.unwrap().capabilities, Some(REEL_CAP_CHANGER));
    let d0 = lib.open_drive(0).await.unwrap();
    assert!(d0.has_cap(REEL_CAP_MAM));
    drop(d0);
    let thread = d
        .run(|_| std::thread::current().name().map(str::to_owned))
        .await
        .unwrap();
    assert_eq!(thread.as_deref(), Some("reel-drive-1"));
    assert_eq!(d.info().await.unwrap().serial, "D1");
    d.load().await.unwrap();
    assert_eq!(d.locate(12).await.unwrap(), LOCATE_NS);
    assert_eq!(d.read_position().await.unwrap().block, 12);
    d.space(REEL_SPACE_RECORDS, -2).await.unwrap();
    d.write_filemarks(1, false).await.unwrap();
    assert_eq!(d.read_position().await.unwrap().block, 11);
    d.mam_write(mam::BARCODE, b"TST001L9".to_vec())
        .await
        .unwrap();
    assert_eq!(d.mam_read(mam::BARCODE).await.unwrap(), b"TST001L9");
    // A streaming loop runs as one closure on the drive thread.
    let written = d
        .run(|h| -> Result<u32, DeviceError> {
            for _ in 0..3 {
                h.write_record(&[0u8; 16], None)?;
            }
            Ok(3)
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(written, 3);
    assert_eq!(d.read_position().await.unwrap().block, 14);
    let e = d.rao(vec![ReelExtent::default()]).await.unwrap_err();
    assert!(
        matches!(
            e,
            DeviceError::Unsupported {
                call: "drive_rao",
                ..
            }
        ),
        "{e}"
    );
    d.unload().await.unwrap();
}

#[tokio::test]
async fn load_waits_out_the_unit_attention_and_reports_total_time() {
    let lib = library("ua_after_load=2").await;
    let d = lib.open_drive(0).await.unwrap();
    // Before a load the drive is not ready.
    let e = d
        .run(|h| h.test_ready().map_err(DeviceError::from))
        .await
        .unwrap();
    assert!(matches!(e, Err(DeviceError::NotReady { .. })), "{e:?}");
    // Two unit attentions consumed, then ready: one load plus three TEST UNIT READY.
    assert_eq!(d.load().await.unwrap(), LOAD_NS + 3 * TUR_NS);
    d.run(|h| h.test_ready().map_err(DeviceError::from))
        .await
        .unwrap()
        .unwrap();

    // The wait is bounded: a drive that never stops raising unit attention is reported.
    let lib = library("ua_after_load=1000").await;
    let d = lib.open_drive(0).await.unwrap();
    let e = d.load().await.unwrap_err();
    assert!(matches!(e, DeviceError::UnitAttention { .. }), "{e}");
}

#[tokio::test]
async fn a_panicking_call_poisons_that_drive_only() {
    let lib = library("").await;
    let d0 = lib.open_drive(0).await.unwrap();
    let d1 = lib.open_drive(1).await.unwrap();
    let e = d0.locate(PANIC_BLOCK).await.unwrap_err();
    assert!(
        matches!(
            e,
            DeviceError::Panicked {
                call: "drive_locate",
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("reopen the drive"), "{e}");
    let e = d0.read_position().await.unwrap_err();
    assert!(matches!(e, DeviceError::Poisoned { .. }), "{e}");
    // The other drive and the library keep working.
    d1.locate(5).await.unwrap();
    assert_eq!(d1.read_position().await.unwrap().block, 5);
    lib.inventory().await.unwrap();
    // Reopening the drive gives a fresh handle.
    let d0 = lib.open_drive(0).await.unwrap();
    d0.locate(3).await.unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn a_blocked_drive_blocks_neither_the_runtime_nor_other_drives_and_survives_its_caller() {
    let lib = library("").await;
    let d0 = lib.open_drive(0).await.unwrap();
    let d1 = lib.open_drive(1).await.unwrap();
    let (entered_tx, entered_rx) = tokio::sync::oneshot::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel();
    *GATE.lock().unwrap() = Some((entered_tx, release_rx));

    let blocked = {
        let d0 = d0.clone();
        tokio::spawn(async move { d0.locate(GATE_BLOCK).await })
    };
    // The plugin is now inside drive 0's call, holding its thread.
    entered_rx.await.unwrap();
    // This runtime has one thread: these complete only because drive 0 does not block it.
    d1.locate(9).await.unwrap();
    assert_eq!(d1.read_position().await.unwrap().block, 9);
    // The caller goes away mid-call.
    blocked.abort();
    assert!(blocked.await.unwrap_err().is_cancelled());
    release_tx.send(()).unwrap();
    // Drive 0's thread finished the call and serves the next one.
    assert_eq!(d0.read_position().await.unwrap().block, GATE_BLOCK);
    d0.locate(4).await.unwrap();
    assert_eq!(d0.read_position().await.unwrap().block, 4);
}

#[tokio::test]
async fn containers_written_through_a_drive_are_recalled_by_block_arithmetic() {
    let lib = library("").await;
    let d = lib.open_drive(0).await.unwrap();
    d.load().await.unwrap();
    let rs = MIN_RECORD_SIZE;
    let objects: Vec<(String, Vec<u8>)> = [10, rs + 5, 3 * rs, 0, 77]
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            (
                format!("dir/obj{i}"),
                (0..n).map(|j| (j * 13 + i) as u8).collect(),
            )
        })
        .collect();
    let label = Label {
        barcode: "TST001L9".into(),
        pool: "p".into(),
        cartridge_uuid: uuid::Uuid::from_u128(77),
        epoch: 1,
        created_unix: 0,
    };
    let (objs, lab) = (objects.clone(), label.clone());
    // Label, filemark, then two containers each closed by a filemark, as docs/FORMAT.md says.
    let written = d
        .run(move |h| -> Result<Vec<(u64, Footer)>, String> {
            let s = |e: &dyn std::fmt::Display| e.to_string();
            h.write_record(&lab.encode(), None).map_err(|e| s(&e))?;
            h.write_filemarks(1, false).map_err(|e| s(&e))?;
            let mut out = Vec::new();
            for sequence in 1..=2u64 {
                let first = h.read_position().map_err(|e| s(&e))?.block;
                let mut b = ContainerBuilder::try_new(ContainerHeader {
                    container_uuid: uuid::Uuid::from_u128(u128::from(sequence)),
                    cartridge_uuid: lab.cartridge_uuid,
                    barcode: lab.barcode.clone(),
                    pool: lab.pool.clone(),
                    record_size: rs as u32,
                    sequence,
                    created_unix: 0,
                })
                .map_err(|e| s(&e))?;
                h.write_record(&b.header_record(), None)
                    .map_err(|e| s(&e))?;
                for (key, data) in &objs {
                    b.begin_object(key, sequence).map_err(|e| s(&e))?;
                    for rec in b.write(data) {
                        h.write_record(&rec, None).map_err(|e| s(&e))?;
                        b.recycle(rec);
                    }
                    b.end_object().map_err(|e| s(&e))?;
                }
                let (tail, footer) = b.finish();
                for rec in &tail {
                    h.write_record(rec, None).map_err(|e| s(&e))?;
                }
                h.write_filemarks(1, false).map_err(|e| s(&e))?;
                out.push((first, footer));
            }
            Ok(out)
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(written[0].0, 2, "the first container is file 1 at block 2");

    // Block 0 is the label.
    d.locate(0).await.unwrap();
    let rec = d
        .run(|h| {
            let mut buf = vec![0u8; 4096];
            let r = h.read_record(&mut buf).map_err(DeviceError::from)?;
            buf.truncate(r.len);
            Ok::<_, DeviceError>(buf)
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(Label::decode(&rec).unwrap(), label);

    // Recall: LOCATE to container_first_block + 1 + offset / R, skip offset % R, read length.
    for (first, footer) in &written {
        for (e, (key, data)) in footer.entries.iter().zip(&objects) {
            assert_eq!(&e.key, key);
            if e.length == 0 {
                continue;
            }
            d.locate(data_block(*first, e.offset, rs as u32))
                .await
                .unwrap();
            let (skip, length) = ((e.offset % rs as u64) as usize, e.length as usize);
            let got = d
                .run(move |h| -> Result<Vec<u8>, DeviceError> {
                    let mut out = Vec::with_capacity(skip + length);
                    let mut buf = vec![0u8; rs];
                    while out.len() < skip + length {
                        let r = h.read_record(&mut buf)?;
                        out.extend_from_slice(&buf[..r.len]);
                    }
                    Ok(out[skip..skip + length].to_vec())
                })
                .await
                .unwrap()
                .unwrap();
            assert!(got == *data, "object {key} read back differs");
        }
    }

    // Verify: the second container in one pass, header to filemark, with its index.
    let (first, footer) = written[1].clone();
    d.locate(first).await.unwrap();
    let entries = footer.entries.clone();
    let (header, read_footer) = d
        .run(move |h| -> Result<(ContainerHeader, Footer), String> {
            let mut reader = ContainerReader::with_index(entries).map_err(|e| e.to_string())?;
            let mut buf = vec![0u8; rs];
            loop {
                match h.read_record(&mut buf).map_err(DeviceError::from) {
                    Ok(r) => reader
                        .push_record(&buf[..r.len])
                        .map_err(|e| e.to_string())?,
                    Err(DeviceError::Filemark { .. }) => break,
                    Err(e) => return Err(e.to_string()),
                }
            }
            reader.finish().map_err(|e| e.to_string())
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(header.sequence, 2);
    assert_eq!(read_footer, footer);
    // Past the last container's filemark is end of data.
    d.locate(first + 1 + footer.data_records + 1 + 1)
        .await
        .unwrap();
    let e = d
        .run(|h| h.read_record(&mut [0u8; 16]).map_err(DeviceError::from))
        .await
        .unwrap()
        .unwrap_err();
    assert!(matches!(e, DeviceError::EndOfData { .. }), "{e}");
}

/// Inject a fault on drive 0's next call and return the error that call gives.
async fn fault(
    lib: &Library,
    d: &Drive,
    code: i32,
    key: u8,
    (a, q): (u8, u8),
    flags: u32,
) -> DeviceError {
    lib.control(&format!("fault 0 {code} {key} {a} {q} {flags}"))
        .await
        .unwrap();
    d.read_position().await.unwrap_err()
}

#[tokio::test]
async fn plugin_sense_maps_to_typed_errors() {
    let lib = library("").await;
    let d = lib.open_drive(0).await.unwrap();
    let cc = REEL_E_CHECK_CONDITION;
    macro_rules! expect {
        ($e:expr, $pat:pat) => {{
            let e = $e;
            assert!(matches!(e, $pat), "got {e:?}");
            e
        }};
    }
    let e = expect!(
        fault(&lib, &d, cc, 0, asc::FILEMARK, REEL_FLAG_FILEMARK).await,
        DeviceError::Filemark { .. }
    );
    assert_eq!(e.sense(), Some((0, 0, 1)));
    expect!(
        fault(&lib, &d, cc, 8, asc::END_OF_DATA, 0).await,
        DeviceError::EndOfData { .. }
    );
    expect!(
        fault(&lib, &d, cc, 0, asc::END_OF_MEDIUM, REEL_FLAG_EOM).await,
        DeviceError::EarlyWarning { .. }
    );
    expect!(
        fault(&lib, &d, cc, 0xD, asc::END_OF_MEDIUM_REACHED, REEL_FLAG_EOM).await,
        DeviceError::EndOfMedium { .. }
    );
    let e = expect!(
        fault(&lib, &d, cc, 3, asc::UNRECOVERED_READ_ERROR, 0).await,
        DeviceError::Medium { .. }
    );
    assert!(e.to_string().contains("reel will use another copy"), "{e}");
    expect!(
        fault(&lib, &d, cc, 4, asc::INTERNAL_TARGET_FAILURE, 0).await,
        DeviceError::Hardware { .. }
    );
    expect!(
        fault(&lib, &d, cc, 2, asc::BECOMING_READY, 0).await,
        DeviceError::NotReady { .. }
    );
    expect!(
        fault(&lib, &d, cc, 6, asc::POWER_ON_RESET, 0).await,
        DeviceError::UnitAttention { .. }
    );
    expect!(
        fault(&lib, &d, cc, 5, asc::INVALID_FIELD_IN_CDB, 0).await,
        DeviceError::IllegalRequest { .. }
    );
    expect!(
        fault(&lib, &d, cc, 7, asc::WRITE_PROTECTED, 0).await,
        DeviceError::DataProtect { .. }
    );
    expect!(
        fault(&lib, &d, cc, 7, asc::WORM_OVERWRITE_ATTEMPTED, 0).await,
        DeviceError::Worm { .. }
    );
    expect!(
        fault(&lib, &d, cc, 0xB, asc::LBP_GUARD_CHECK_FAILED, 0).await,
        DeviceError::LbpMismatch { .. }
    );
    expect!(
        fault(&lib, &d, cc, 0xB, (0x47, 0), 0).await,
        DeviceError::Aborted { .. }
    );
    expect!(
        fault(&lib, &d, REEL_E_TRANSPORT, 0, (0, 0), 0).await,
        DeviceError::Transport { .. }
    );
    let e = expect!(
        fault(&lib, &d, REEL_E_INTERNAL, 0, (0, 0), 0).await,
        DeviceError::Plugin {
            code: REEL_E_INTERNAL,
            ..
        }
    );
    assert!(e.to_string().contains("injected by the test"), "{e}");
    // After all that the drive is healthy.
    d.locate(1).await.unwrap();
}

#[tokio::test]
async fn a_drive_outlives_its_library_handle_and_closes_when_dropped() {
    let (tx, rx) = std::sync::mpsc::channel();
    CLOSED
        .lock()
        .unwrap()
        .get_or_insert_with(HashMap::new)
        .insert("close-test".into(), tx);
    let lib = library("tag=close-test").await;
    let d = lib.open_drive(1).await.unwrap();
    drop(lib);
    // The drive keeps the library open; it still works on its own.
    d.locate(2).await.unwrap();
    let clone = d.clone();
    drop(d);
    clone.locate(3).await.unwrap();
    // Dropping the last owner ends the drive thread, which closes the handle in the plugin.
    drop(clone);
    let closed =
        tokio::task::spawn_blocking(move || rx.recv_timeout(std::time::Duration::from_secs(60)))
            .await
            .unwrap();
    assert_eq!(
        closed,
        Ok(1),
        "drive 1 was not closed after its last owner went away"
    );
}

// ---- bad plugin files -------------------------------------------------------------------

fn cc(dir: &Path, name: &str, source: &str) -> PathBuf {
    let src = dir.join(format!("{name}.c"));
    let out = dir.join(format!("lib{name}.so"));
    std::fs::write(&src, source).unwrap();
    let status = std::process::Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-shared", "-fPIC", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("a C compiler (cc) is needed to build the bad-plugin fixtures");
    assert!(status.success(), "cc failed on {name}.c");
    out
}

const TABLE_C: &str = r#"
#include <stdint.h>
#include <stddef.h>
static int lib_open(const char *c, void **out, void *st) { (void)c; (void)out; (void)st; return -2; }
static void lib_close(void *l) { (void)l; }
static int drv_open(void *l, uint32_t i, void **out, void *st) { (void)l; (void)i; (void)out; (void)st; return -2; }
static void drv_close(void *d) { (void)d; }
struct table {
    uint32_t struct_size; uint16_t abi_major; uint16_t abi_minor;
    const char *name; const char *version; uint64_t caps; uint32_t thread_model; uint32_t reserved;
    void *library_open; void *library_close; void *library_inventory; void *library_move;
    void *library_import; void *library_export; void *control; void *drive_open; void *drive_close;
    void *rest[24];
};
static const struct table TABLE = {
    sizeof(struct table), MAJOR, 0, "c-fixture", "0", 0, 1, 0,
    (void *)lib_open, (void *)lib_close, NULL, NULL, NULL, NULL, NULL, (void *)drv_open, (void *)drv_close, {0}
};
const struct table *reel_plugin_v1(void) { return &TABLE; }
"#;

#[test]
fn bad_plugin_files_give_errors_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();

    let text = dir.path().join("not-a-plugin.so");
    std::fs::write(&text, "this is not an ELF file\n").unwrap();
    let e = load_plugin(&text).unwrap_err();
    assert!(
        matches!(e, DeviceError::Load(LoadError::NotALibrary { .. })),
        "{e}"
    );
    assert!(e.to_string().contains(&text.display().to_string()), "{e}");

    let missing = dir.path().join("missing.so");
    let e = load_plugin(&missing).unwrap_err();
    assert!(
        e.to_string().contains(&missing.display().to_string()),
        "{e}"
    );

    let no_entry = cc(
        dir.path(),
        "noentry",
        "int reel_something_else(void) { return 1; }\n",
    );
    let e = load_plugin(&no_entry).unwrap_err();
    assert!(
        matches!(e, DeviceError::Load(LoadError::NoEntry { .. })),
        "{e}"
    );
    assert!(
        e.to_string().contains(&no_entry.display().to_string()),
        "{e}"
    );

    let major2 = cc(dir.path(), "major2", &format!("#define MAJOR 2\n{TABLE_C}"));
    let e = load_plugin(&major2).unwrap_err();
    assert!(
        matches!(
            e,
            DeviceError::Load(LoadError::UnknownMajor {
                found: 2,
                expected: 1,
                ..
            })
        ),
        "{e}"
    );
    assert!(e.to_string().contains(&major2.display().to_string()), "{e}");
}

#[test]
fn each_plugin_file_is_its_own_plugin_and_only_safe_files_load() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let table = |name: &str| format!("#define MAJOR 1\n{}", TABLE_C.replace("c-fixture", name));
    // Loaded one after the other through their descriptors: the second is not the first.
    let names = ["c-one", "c-two", "c-three"];
    for name in names {
        let file = cc(dir.path(), name, &table(name));
        assert_eq!(Plugin::load(&file).unwrap().name(), name);
    }
    for name in names {
        let file = dir.path().join(format!("lib{name}.so"));
        assert_eq!(load_plugin(&file).unwrap().name(), name);
    }
    // Loaded again and again: one descriptor kept, not one per load.
    let one = dir.path().join("libc-one.so");
    let real = std::fs::canonicalize(&one).unwrap();
    // Descriptors open on this file (other tests of this process open files of their own).
    let fds = || {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|target| *target == real)
            .count()
    };
    for _ in 0..50 {
        assert_eq!(Plugin::load(&one).unwrap().name(), "c-one");
    }
    assert_eq!(fds(), 1, "one descriptor per loaded file");
    let refused = |file: &Path| match Plugin::load(file) {
        Err(LoadError::Untrusted { reason, .. }) => reason,
        Err(e) => panic!("{e}"),
        Ok(p) => panic!("{} loaded", p.name()),
    };
    // Writable by its group: the operator's to keep (umask 002 is common), loaded.
    let shared = cc(dir.path(), "shared", &table("c-shared"));
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o775)).unwrap();
    assert_eq!(Plugin::load(&shared).unwrap().name(), "c-shared");
    // Writable by every user: refused, with the mode and what to do.
    let loose = cc(dir.path(), "loose", &table("c-loose"));
    std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o757)).unwrap();
    let why = refused(&loose);
    assert!(
        why.contains("every user") && why.contains("0757") && why.contains("chmod o-w"),
        "{why}"
    );
    let e = load_plugin(&loose).unwrap_err().to_string();
    assert!(e.contains(&loose.display().to_string()), "{e}");
    // In a directory every user can write (not sticky): someone else could swap the file.
    let open_dir = dir.path().join("open");
    std::fs::create_dir(&open_dir).unwrap();
    let planted = cc(&open_dir, "planted", &table("c-planted"));
    std::fs::set_permissions(&open_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let why = refused(&planted);
    assert!(
        why.contains("directory") && why.contains("every user"),
        "{why}"
    );
    std::fs::set_permissions(&open_dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
    assert_eq!(Plugin::load(&planted).unwrap().name(), "c-planted");
    // Not a regular file: a directory, and a FIFO (refused at once, never waited on).
    assert!(refused(dir.path()).contains("regular"));
    let fifo = dir.path().join("libfifo.so");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    assert!(refused(&fifo).contains("regular"));
    // Missing: says it cannot be opened, naming the file.
    match Plugin::load(dir.path().join("missing.so")) {
        Err(e @ LoadError::Unreadable { .. }) => {
            assert!(e.to_string().contains("missing.so"), "{e}")
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a missing file loaded"),
    }
    // Owned by someone else, or a link someone else made (only root can give them away).
    let theirs = cc(dir.path(), "theirs", &table("c-theirs"));
    if std::os::unix::fs::chown(&theirs, Some(54321), None).is_ok() {
        let why = refused(&theirs);
        assert!(why.contains("uid 54321") && why.contains("chown"), "{why}");
        let link = dir.path().join("libtheir-link.so");
        std::os::unix::fs::symlink(&one, &link).unwrap();
        std::os::unix::fs::lchown(&link, Some(54321), None).unwrap();
        let why = refused(&link);
        assert!(
            why.contains("symlink") && why.contains("uid 54321"),
            "{why}"
        );
    } else {
        eprintln!("not root: the checks of files and links owned by another user are not run");
    }
}

#[test]
fn a_plugin_path_is_loaded_once() {
    let dir = tempfile::tempdir().unwrap();
    let good = cc(dir.path(), "good", &format!("#define MAJOR 1\n{TABLE_C}"));
    let a = load_plugin(&good).unwrap();
    assert_eq!(a.name(), "c-fixture");
    let b = load_plugin(&good).unwrap();
    assert!(Arc::ptr_eq(&a, &b));
    // The same file by another spelling is the same plugin.
    let link = dir.path().join("link.so");
    std::os::unix::fs::symlink(&good, &link).unwrap();
    let c = load_plugin(&dir.path().join(".").join("link.so")).unwrap();
    assert!(Arc::ptr_eq(&a, &c));
    // Its library_open answers "unsupported": a typed error, not a crash.
    let e = Library::open(a, "").unwrap_err();
    assert!(
        matches!(
            e,
            DeviceError::Unsupported {
                call: "library_open",
                ..
            }
        ),
        "{e}"
    );
}
