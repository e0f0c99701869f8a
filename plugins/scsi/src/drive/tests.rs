//! Drive tests against the scripted fake target: every sense edge case of the tape data path.

use super::*;
use crate::policy::Policy;
use crate::timeouts::Timeouts;
use crate::transport::fake::{Reply, Script};
use reel_plugin_abi::sdk::Drive as _;
use reel_plugin_abi::{
    REEL_E_CHECK_CONDITION, REEL_E_INVALID_ARG, REEL_FLAG_EOM, REEL_FLAG_FILEMARK, REEL_FLAG_ILI,
    REEL_FLAG_RESIDUE_VALID, REEL_POS_BOP, REEL_POS_EOP,
};
use std::time::Duration;

fn std_inquiry(t: u8, product: &str) -> Vec<u8> {
    let mut b = vec![0u8; 36];
    b[0] = t;
    b[1] = 0x80;
    b[8..16].copy_from_slice(b"IBM     ");
    b[16..32].copy_from_slice(format!("{product:<16}").as_bytes());
    b[32..36].copy_from_slice(b"0001");
    b
}

fn vpd80(serial: &str) -> Vec<u8> {
    let mut b = vec![0x01, 0x80, 0, serial.len() as u8];
    b.extend_from_slice(serial.as_bytes());
    b
}

fn sense(key: u8, asc: (u8, u8)) -> Sense {
    Sense {
        key,
        asc: asc.0,
        ascq: asc.1,
        ..Sense::default()
    }
}

/// A drive opened on a fresh script (INQUIRY, VPD 80h, READ BLOCK LIMITS consumed).
fn drive(lbp: LbpMode) -> (Script, TapeDrive) {
    let s = Script::new();
    s.expect(&[0x12, 0x00], Reply::data(std_inquiry(1, "ULT3580-TD9")))
        .expect(&[0x12, 0x01, 0x80], Reply::data(vpd80("DRV0000001")))
        .expect(&[0x05], Reply::data(vec![0, 0x10, 0, 0, 0, 1]));
    let dev = ScsiDevice::new(
        Box::new(s.transport()),
        Timeouts::for_generation(None),
        Policy {
            unit_attention_retries: 3,
            not_ready_wait: Duration::from_millis(3),
            poll: Duration::from_millis(1),
            busy_retries: 1,
        },
    );
    let d = TapeDrive::open(dev, lbp, None).unwrap();
    assert_eq!(s.pending(), 0);
    (s, d)
}

fn lbp_page(on: bool) -> Vec<u8> {
    let mut b = vec![0, 0, 0, 0x10, 0, 0, 0, 0];
    let mut p = vec![0x4A, 0xF0, 0x00, 0x1C];
    p.resize(32, 0);
    if on {
        p[4] = 2;
        p[5] = 4;
        p[6] = 0xC0;
    }
    b.extend_from_slice(&p);
    let l = ((b.len() - 2) as u16).to_be_bytes();
    b[0] = l[0];
    b[1] = l[1];
    b
}

#[test]
fn open_identifies_the_drive() {
    let (_s, mut d) = drive(LbpMode::Off);
    let i = d.info(&mut Call::default()).unwrap();
    assert_eq!(i.serial, "DRV0000001");
    assert_eq!(i.product, "ULT3580-TD9");
    assert_eq!(i.max_record_bytes, 1 << 20);
    assert_eq!(d.generation(), Some(9));
}

#[test]
fn open_refuses_a_changer_address() {
    let s = Script::new();
    s.expect(&[0x12, 0x00], Reply::data(std_inquiry(8, "3573-TL")))
        .expect(&[0x12, 0x01], Reply::data(vpd80("LIB0000001")));
    let dev = ScsiDevice::new(
        Box::new(s.transport()),
        Timeouts::for_generation(None),
        Policy::default(),
    );
    let Err(e) = TapeDrive::open(dev, LbpMode::Off, None) else {
        panic!("a changer opened as a drive");
    };
    assert!(e.to_string().contains("not a tape drive"), "{e}");
}

#[test]
fn exact_read_returns_the_record() {
    let (s, mut d) = drive(LbpMode::Off);
    s.expect(&[0x08], Reply::data(vec![7u8; 1000]).with_transferred(1000));
    let mut buf = vec![0u8; 1000];
    let r = d.read_record(&mut buf, &mut Call::default()).unwrap();
    assert_eq!(
        r,
        ReadRecord {
            len: 1000,
            crc: None
        }
    );
    assert_eq!(buf[999], 7);
    assert_eq!(d.counters().records_read, 1);
    // READ(6) variable length with SILI, 1000 bytes
    assert_eq!(
        s.log().last().unwrap().cdb,
        vec![0x08, 0x02, 0, 0x03, 0xE8, 0]
    );
}

#[test]
fn short_record_length_comes_from_sense_information_not_the_residual() {
    let (s, mut d) = drive(LbpMode::Off);
    // tgt: ILI with INFORMATION = excess (3096) and a wrong transport count
    let ili = Sense {
        ili: true,
        information: Some(3096),
        ..Sense::default()
    };
    s.expect(
        &[0x08],
        Reply::check(ili)
            .with_data(vec![9u8; 1000])
            .with_transferred(3096),
    );
    let mut buf = vec![0u8; 4096];
    let mut call = Call::default();
    let r = d.read_record(&mut buf, &mut call).unwrap();
    assert_eq!(r.len, 1000);
    assert_eq!(&buf[..1000], &[9u8; 1000][..]);
    // a drive honouring SILI answers GOOD with a residual instead
    s.expect(&[0x08], Reply::data(vec![5u8; 600]));
    let r = d.read_record(&mut buf, &mut Call::default()).unwrap();
    assert_eq!(r.len, 600);
}

#[test]
fn long_record_is_ili_with_negative_residue_and_partial_data() {
    let (s, mut d) = drive(LbpMode::Off);
    let ili = Sense {
        ili: true,
        information: Some(-1500),
        ..Sense::default()
    };
    s.expect(&[0x08], Reply::check(ili).with_data(vec![3u8; 500]));
    let mut buf = vec![0u8; 500];
    let f = d.read_record(&mut buf, &mut Call::default()).unwrap_err();
    assert_eq!(f.code, REEL_E_CHECK_CONDITION);
    assert_eq!(f.sense_key, 0);
    assert_ne!(f.flags & REEL_FLAG_ILI, 0);
    assert_ne!(f.flags & REEL_FLAG_RESIDUE_VALID, 0);
    assert_eq!(f.residue, -1500);
    assert_eq!(f.transferred, 500);
}

#[test]
fn filemark_is_a_check_condition_with_the_flag_and_no_data() {
    let (s, mut d) = drive(LbpMode::Off);
    let fm = Sense {
        filemark: true,
        asc: 0,
        ascq: 1,
        information: Some(4096),
        ..Sense::default()
    };
    s.expect(&[0x08], Reply::check(fm));
    let mut buf = vec![0u8; 4096];
    let f = d.read_record(&mut buf, &mut Call::default()).unwrap_err();
    assert_eq!((f.sense_key, f.asc, f.ascq), (0, 0, 1));
    assert_ne!(f.flags & REEL_FLAG_FILEMARK, 0);
    assert_eq!(f.transferred, 0);
    assert_eq!(f.residue, 4096);
}

#[test]
fn end_of_data_is_blank_check() {
    let (s, mut d) = drive(LbpMode::Off);
    // patched tgt: 8/00/05; stock tgt: 8/00/00 with EOM
    s.expect(&[0x08], Reply::check(sense(8, (0, 5))));
    s.expect(
        &[0x08],
        Reply::check(Sense {
            key: 8,
            eom: true,
            ..Sense::default()
        }),
    );
    let mut buf = vec![0u8; 16];
    let f = d.read_record(&mut buf, &mut Call::default()).unwrap_err();
    assert_eq!((f.sense_key, f.asc, f.ascq), (8, 0, 5));
    let f = d.read_record(&mut buf, &mut Call::default()).unwrap_err();
    assert_eq!(f.sense_key, 8);
    assert_ne!(f.flags & REEL_FLAG_EOM, 0);
}

#[test]
fn medium_error_on_read_is_reported_as_is() {
    let (s, mut d) = drive(LbpMode::Off);
    s.expect(&[0x08], Reply::check(sense(3, (0x11, 0))));
    let f = d
        .read_record(&mut [0u8; 64], &mut Call::default())
        .unwrap_err();
    assert_eq!((f.sense_key, f.asc), (3, 0x11));
    assert!(
        f.message.contains("unrecovered read error"),
        "{}",
        f.message
    );
    assert_eq!(d.counters().records_read, 0);
}

#[test]
fn unit_attention_on_read_is_retried_and_not_ready_reported() {
    let (s, mut d) = drive(LbpMode::Off);
    s.expect(&[0x08], Reply::check(sense(6, (0x28, 0))))
        .expect(&[0x08], Reply::data(vec![1u8; 10]));
    let r = d.read_record(&mut [0u8; 10], &mut Call::default()).unwrap();
    assert_eq!(r.len, 10);
    s.expect(&[0x00], Reply::check(sense(2, (0x3A, 0))));
    let f = d.test_ready(&mut Call::default()).unwrap_err();
    assert_eq!((f.sense_key, f.asc), (2, 0x3A));
}

#[test]
fn early_warning_on_write_is_check_condition_with_eom_and_data_written() {
    let (s, mut d) = drive(LbpMode::Off);
    let ew = Sense {
        eom: true,
        ascq: 2,
        ..Sense::default()
    };
    s.expect(&[0x0A], Reply::check(ew.clone()));
    let mut call = Call::default();
    let f = d.write_record(&[1u8; 100], None, &mut call).unwrap_err();
    assert_eq!((f.sense_key, f.asc, f.ascq), (0, 0, 2));
    assert_ne!(f.flags & REEL_FLAG_EOM, 0);
    assert_eq!(d.counters().records_written, 1);
    assert_eq!(s.log().last().unwrap().data_out.len(), 100);
    // and on WRITE FILEMARKS
    s.expect(&[0x10], Reply::check(ew));
    let mut call = Call::default();
    let f = d.write_filemarks(1, false, &mut call).unwrap_err();
    assert_ne!(f.flags & REEL_FLAG_EOM, 0);
    assert_eq!(d.counters().filemarks_written, 1);
}

#[test]
fn deferred_write_error_is_flagged() {
    let (s, mut d) = drive(LbpMode::Off);
    s.expect(
        &[0x10],
        Reply::check(Sense {
            key: 3,
            asc: 0x0C,
            deferred: true,
            ..Sense::default()
        }),
    );
    let f = d
        .write_filemarks(1, false, &mut Call::default())
        .unwrap_err();
    assert_eq!((f.sense_key, f.asc), (3, 0x0C));
    assert_ne!(f.flags & reel_plugin_abi::REEL_FLAG_DEFERRED, 0);
    assert_eq!(d.counters().filemarks_written, 0);
}

#[test]
fn volume_overflow_fails_with_residue() {
    let (s, mut d) = drive(LbpMode::Off);
    s.expect(
        &[0x0A],
        Reply::check(Sense {
            key: 0x0D,
            eom: true,
            ascq: 2,
            information: Some(262144),
            ..Sense::default()
        }),
    );
    let f = d
        .write_record(&[0u8; 1000], None, &mut Call::default())
        .unwrap_err();
    assert_eq!(f.sense_key, 0x0D);
    assert_ne!(f.flags & REEL_FLAG_EOM, 0);
    assert_eq!(f.residue, 262144);
    assert_eq!(d.counters().records_written, 0);
}

#[test]
fn write_refuses_bad_input_before_touching_the_tape() {
    let (s, mut d) = drive(LbpMode::Off);
    let f = d.write_record(&[], None, &mut Call::default()).unwrap_err();
    assert_eq!(f.code, REEL_E_INVALID_ARG);
    let big = vec![0u8; (1 << 20) + 1];
    let f = d
        .write_record(&big, None, &mut Call::default())
        .unwrap_err();
    assert_eq!(f.code, REEL_E_INVALID_ARG);
    let f = d
        .write_record(b"abc", Some(0xDEAD_BEEF), &mut Call::default())
        .unwrap_err();
    assert_eq!((f.sense_key, f.asc, f.ascq), (0x0B, 0x10, 0x01));
    assert!(s.log().iter().all(|l| l.cdb[0] != 0x0A), "nothing written");
}

#[test]
fn lbp_appends_crc_on_write_and_checks_it_on_read() {
    let (s, mut d) = drive(LbpMode::Off);
    s.expect(&[0x5A], Reply::data(lbp_page(false)))
        .expect(&[0x55], Reply::good());
    d.set_lbp(REEL_LBP_CRC32C, &mut Call::default()).unwrap();
    let sel = s.log().last().unwrap().data_out.clone();
    assert_eq!(&sel[8..12], &[0x4A, 0xF0, 0x00, 0x1C]);
    assert_eq!(&sel[12..15], &[2, 4, 0xC0]);

    let data = b"reel record".to_vec();
    let crc = lbp::crc32c(&data);
    s.expect(&[0x0A], Reply::good());
    d.write_record(&data, Some(crc), &mut Call::default())
        .unwrap();
    let out = s.log().last().unwrap().data_out.clone();
    assert_eq!(out.len(), data.len() + 4);
    assert_eq!(&out[data.len()..], &crc.to_le_bytes());
    assert_eq!(s.log().last().unwrap().cdb[4] as usize, data.len() + 4);

    // read back: drive returns data + CRC (short record: ILI with INFORMATION)
    let mut rec = data.clone();
    rec.extend_from_slice(&crc.to_le_bytes());
    let info = (64 + 4 - rec.len()) as i64;
    s.expect(
        &[0x08],
        Reply::check(Sense {
            ili: true,
            information: Some(info),
            ..Sense::default()
        })
        .with_data(rec.clone()),
    );
    let mut buf = vec![0u8; 64];
    let r = d.read_record(&mut buf, &mut Call::default()).unwrap();
    assert_eq!(
        r,
        ReadRecord {
            len: data.len(),
            crc: Some(crc)
        }
    );
    assert_eq!(&buf[..data.len()], &data[..]);

    // corrupted on the way: CRC mismatch is ABORTED COMMAND 10/01
    let mut bad = rec.clone();
    bad[0] ^= 1;
    s.expect(
        &[0x08],
        Reply::data(bad.clone()).with_transferred(bad.len()),
    );
    let mut buf = vec![0u8; bad.len() - 4];
    let f = d.read_record(&mut buf, &mut Call::default()).unwrap_err();
    assert_eq!((f.sense_key, f.asc, f.ascq), (0x0B, 0x10, 0x01));
}

#[test]
fn lbp_on_a_drive_without_the_page_is_refused_and_off_is_fine() {
    let (s, mut d) = drive(LbpMode::Off);
    s.always(&[0x5A], Reply::sense(5, (0x24, 0)));
    let f = d
        .set_lbp(REEL_LBP_CRC32C, &mut Call::default())
        .unwrap_err();
    assert!(f.message.contains("lbp=off"), "{}", f.message);
    d.set_lbp(REEL_LBP_OFF, &mut Call::default()).unwrap();
    assert!(d.set_lbp(7, &mut Call::default()).is_err());
}

#[test]
fn locate16_falls_back_to_locate10_once() {
    let (s, mut d) = drive(LbpMode::Off);
    s.expect(&[0x92], Reply::sense(5, (0x20, 0)))
        .expect(&[0x2B], Reply::good())
        .expect(&[0x2B], Reply::good());
    d.locate(5, &mut Call::default()).unwrap();
    d.locate(7, &mut Call::default()).unwrap();
    assert_eq!(s.opcodes()[3..], [0x92, 0x2B, 0x2B]);
    assert_eq!(s.log()[5].cdb[6], 7);
    let f = d.locate(1 << 33, &mut Call::default()).unwrap_err();
    assert_eq!(f.code, REEL_E_INVALID_ARG);
}

#[test]
fn locate_past_eod_keeps_the_sense() {
    let (s, mut d) = drive(LbpMode::Off);
    s.expect(&[0x92], Reply::check(sense(8, (0, 5))));
    let f = d.locate(1000, &mut Call::default()).unwrap_err();
    assert_eq!((f.sense_key, f.asc, f.ascq), (8, 0, 5));
    // LOCATE(16) answered: it stays the command used
    s.expect(&[0x92], Reply::good());
    d.locate(1, &mut Call::default()).unwrap();
}

#[test]
fn space_stopped_by_a_filemark_or_bot_reports_residue() {
    let (s, mut d) = drive(LbpMode::Off);
    s.expect(
        &[0x11, 0x00],
        Reply::check(Sense {
            filemark: true,
            ascq: 1,
            information: Some(1),
            ..Sense::default()
        }),
    );
    let f = d
        .space(REEL_SPACE_RECORDS, 2, &mut Call::default())
        .unwrap_err();
    assert_ne!(f.flags & REEL_FLAG_FILEMARK, 0);
    assert_eq!(f.residue, 1);
    s.expect(
        &[0x11, 0x01, 0xFF, 0xFF, 0xFE],
        Reply::check(Sense {
            eom: true,
            ascq: 4,
            information: Some(1),
            ..Sense::default()
        }),
    );
    let f = d
        .space(REEL_SPACE_FILEMARKS, -2, &mut Call::default())
        .unwrap_err();
    assert_eq!((f.asc, f.ascq), (0, 4));
    s.expect(&[0x11, 0x03], Reply::good());
    d.space(REEL_SPACE_EOD, 99, &mut Call::default()).unwrap();
    // beyond 24 bits: SPACE(16)
    s.expect(&[0x91, 0x00], Reply::good());
    d.space(REEL_SPACE_RECORDS, 1 << 30, &mut Call::default())
        .unwrap();
    assert!(d.space(9, 1, &mut Call::default()).is_err());
}

#[test]
fn read_position_long_then_short_fallback() {
    let (s, mut d) = drive(LbpMode::Off);
    let mut long = vec![0u8; 32];
    long[0] = 0x80;
    long[8..16].copy_from_slice(&3u64.to_be_bytes());
    long[16..24].copy_from_slice(&1u64.to_be_bytes());
    s.expect(&[0x34, 0x06], Reply::data(long));
    let p = d.read_position(&mut Call::default()).unwrap();
    assert_eq!((p.block, p.file, p.flags), (3, 1, REEL_POS_BOP));

    let (s, mut d) = drive(LbpMode::Off);
    let mut short = vec![0u8; 20];
    short[0] = 0x40;
    short[4..8].copy_from_slice(&9u32.to_be_bytes());
    s.expect(&[0x34, 0x06], Reply::sense(5, (0x24, 0)))
        .expect(&[0x34, 0x00], Reply::data(short.clone()))
        .expect(&[0x34, 0x00], Reply::data(short));
    let p = d.read_position(&mut Call::default()).unwrap();
    assert_eq!((p.block, p.flags), (9, REEL_POS_EOP));
    d.read_position(&mut Call::default()).unwrap();
    assert_eq!(s.opcodes().iter().filter(|o| **o == 0x34).count(), 3);
}

#[test]
fn load_sets_variable_blocks_and_waits_until_ready() {
    let (s, mut d) = drive(LbpMode::Off);
    let mut ms = vec![11, 0, 0x10, 8, 0x60, 0, 0, 0, 0, 0, 0x02, 0];
    ms[0] = 11;
    s.expect(&[0x1B, 0, 0, 0, 1], Reply::good())
        .expect(&[0x00], Reply::sense(2, (0x04, 0x01)))
        .expect(&[0x00], Reply::good())
        .expect(&[0x44], Reply::sense(5, (0x20, 0)))
        .expect(&[0x1A, 0x00, 0x10], Reply::data(ms))
        .expect(&[0x15], Reply::good());
    d.load(&mut Call::default()).unwrap();
    assert_eq!(s.pending(), 0);
    // the first TEST UNIT READY after a load reports the medium change once
    let f = d.test_ready(&mut Call::default()).unwrap_err();
    assert_eq!((f.sense_key, f.asc, f.ascq), (6, 0x28, 0));
    s.expect(&[0x00], Reply::good());
    d.test_ready(&mut Call::default()).unwrap();
    let sel = s
        .log()
        .iter()
        .rev()
        .find(|l| l.cdb[0] == 0x15)
        .unwrap()
        .data_out
        .clone();
    assert_eq!(sel.len(), 12);
    assert_eq!(&sel[9..12], &[0, 0, 0], "block length 0: variable");
    assert_eq!(sel[4], 0x60, "density kept");
    assert_eq!(d.counters().mounts, 1);
}

#[test]
fn load_with_lbp_wanted_enables_it() {
    let (s, mut d) = drive(LbpMode::Crc32c);
    let ms = vec![11, 0, 0x10, 8, 0, 0, 0, 0, 0, 0, 0, 0];
    s.expect(&[0x1B], Reply::good())
        .expect(&[0x00], Reply::good())
        .expect(&[0x44], Reply::sense(5, (0x20, 0)))
        .expect(&[0x1A], Reply::data(ms))
        .expect(&[0x5A], Reply::data(lbp_page(true)));
    d.load(&mut Call::default()).unwrap();
    assert_eq!(s.pending(), 0);
    // any other command consumes the medium-changed report
    s.expect(&[0x01], Reply::good())
        .expect(&[0x00], Reply::good());
    d.rewind(&mut Call::default()).unwrap();
    d.test_ready(&mut Call::default()).unwrap();
    // already on at the drive: no MODE SELECT, and writes carry the CRC
    s.expect(&[0x0A], Reply::good());
    d.write_record(b"x", None, &mut Call::default()).unwrap();
    assert_eq!(s.log().last().unwrap().data_out.len(), 5);
}

#[test]
fn unload_allows_removal_first() {
    let (s, mut d) = drive(LbpMode::Off);
    s.expect(&[0x1E, 0, 0, 0, 0], Reply::good())
        .expect(&[0x1B, 0, 0, 0, 0], Reply::good());
    d.unload(&mut Call::default()).unwrap();
    assert_eq!(s.pending(), 0);
}

#[test]
fn mam_write_and_read() {
    let (s, mut d) = drive(LbpMode::Off);
    s.expect(&[0x8D], Reply::good());
    d.mam_write(0x0806, b"GFS001L9", &mut Call::default())
        .unwrap();
    let list = s.log().last().unwrap().data_out.clone();
    assert_eq!(list.len(), 4 + 5 + 32);
    s.expect(&[0x8C], Reply::data(list));
    let v = d.mam_read(0x0806, &mut Call::default()).unwrap();
    assert_eq!(v, b"GFS001L9");
    s.expect(&[0x8C], Reply::data(vec![0, 0, 0, 0]));
    let f = d.mam_read(0x0806, &mut Call::default()).unwrap_err();
    assert!(f.message.contains("not set"), "{}", f.message);
    let f = d
        .mam_write(0x0800, b"much too long", &mut Call::default())
        .unwrap_err();
    assert_eq!(f.code, REEL_E_INVALID_ARG);
    // tgt: no MAM at all
    s.always(&[0x8C], Reply::sense(5, (0x20, 0)));
    let f = d.mam_read(0x0001, &mut Call::default()).unwrap_err();
    assert_eq!(f.code, REEL_E_UNSUPPORTED);
}

fn log_page(code: u8, params: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut b = vec![code, 0, 0, 0];
    for (c, v) in params {
        b.extend_from_slice(&c.to_be_bytes());
        b.push(3);
        b.push(v.len() as u8);
        b.extend_from_slice(v);
    }
    let l = ((b.len() - 4) as u16).to_be_bytes();
    b[2] = l[0];
    b[3] = l[1];
    b
}

#[test]
fn tape_alerts_and_statistics() {
    let (s, mut d) = drive(LbpMode::Off);
    s.expect(
        &[0x4D, 0, 0x52],
        Reply::data(log_page(0x12, &[(0, vec![0x20, 0, 0, 0, 0, 0, 0, 0])])),
    );
    assert_eq!(d.tape_alerts(&mut Call::default()).unwrap(), 1 << 2);
    s.expect(&[0x0A], Reply::good());
    d.write_record(&[0u8; 10], None, &mut Call::default())
        .unwrap();
    s.expect(
        &[0x4D, 0, 0x57],
        Reply::data(log_page(0x17, &[(1, vec![0, 0, 0, 12])])),
    );
    // Write error counters: 4 corrected, 1 not; read: 9 corrected, no uncorrected total.
    s.expect(
        &[0x4D, 0, 0x42],
        Reply::data(log_page(
            0x02,
            &[(3, vec![0, 0, 0, 4]), (6, vec![0, 0, 0, 1])],
        )),
    );
    s.expect(
        &[0x4D, 0, 0x43],
        Reply::data(log_page(0x03, &[(3, vec![0, 0, 0, 9])])),
    );
    let st = d.statistics(&mut Call::default()).unwrap();
    assert_eq!(s.pending(), 0, "pages 17h, 02h and 03h were read");
    assert_eq!(st.mounts, 12);
    assert_eq!(st.bytes_written, 10);
    assert_eq!(st.records_written, 1);
    assert_ne!(st.valid & (1 << 4), 0);
    assert_eq!(st.valid & (1 << 14), 0, "writes_not_at_eod is not known");
    assert_eq!(
        (
            st.write_errors_corrected,
            st.write_errors_uncorrected,
            st.read_errors_corrected
        ),
        (4, 1, 9)
    );
    assert_eq!(
        st.valid >> 16 & 0xF,
        0b0111,
        "read uncorrected was not reported"
    );
    // no LOG SENSE (tgt): host counters still reported, alerts unsupported
    s.always(&[0x4D], Reply::sense(5, (0x20, 0)));
    let st = d.statistics(&mut Call::default()).unwrap();
    assert_eq!(st.mounts, 0);
    assert_eq!(
        st.valid >> 16 & 0xF,
        0,
        "no error counters without LOG SENSE"
    );
    assert_eq!(
        d.tape_alerts(&mut Call::default()).unwrap_err().code,
        REEL_E_UNSUPPORTED
    );
}

#[test]
fn geometry_from_end_of_wrap_positions() {
    let (s, mut d) = drive(LbpMode::Off);
    let mut w = vec![0, 0, 0, 0];
    for (wrap, blk) in [(0u16, 99u64), (1, 199)] {
        w.extend_from_slice(&wrap.to_be_bytes());
        w.extend_from_slice(&[0, 0, 0, 0]);
        w.extend_from_slice(&blk.to_be_bytes()[2..]);
    }
    let l = ((w.len() - 2) as u16).to_be_bytes();
    w[0] = l[0];
    w[1] = l[1];
    s.expect(&[0xA3, 0x1F], Reply::data(w)).expect(
        &[0x4D, 0, 0x71],
        Reply::data(log_page(
            0x31,
            &[(1, vec![0, 0, 0, 1]), (3, vec![0, 0, 0x10, 0])],
        )),
    );
    let g = d.geometry(&mut Call::default()).unwrap();
    assert_eq!(g.wraps, 2);
    assert_eq!(g.eowp, vec![100, 200]);
    assert_eq!(g.capacity_bytes, 4096 * 1024 * 1024);
    s.always(&[0xA3], Reply::sense(5, (0x24, 0)));
    assert_eq!(
        d.geometry(&mut Call::default()).unwrap_err().code,
        REEL_E_UNSUPPORTED
    );
}

#[test]
fn native_rao_round_trip_and_unsupported() {
    let (s, mut d) = drive(LbpMode::Off);
    let ext = [
        ReelExtent {
            first_block: 500,
            last_block: 510,
        },
        ReelExtent {
            first_block: 10,
            last_block: 12,
        },
    ];
    let list = rao::encode(&[(500, 510), (10, 12)]);
    let mut resp = list[..8].to_vec();
    resp.extend_from_slice(&list[8 + 32..]);
    resp.extend_from_slice(&list[8..8 + 32]);
    s.expect(&[0xA4, 0x1D], Reply::good())
        .expect(&[0xA3, 0x1D], Reply::data(resp));
    assert_eq!(d.rao(&ext, &mut Call::default()).unwrap(), vec![1, 0]);
    assert_eq!(s.log()[3].data_out, list);
    s.always(&[0xA4], Reply::sense(5, (0x20, 0)));
    assert_eq!(
        d.rao(&ext, &mut Call::default()).unwrap_err().code,
        REEL_E_UNSUPPORTED
    );
}

#[test]
fn elapsed_time_is_reported() {
    let (s, mut d) = drive(LbpMode::Off);
    s.expect(&[0x01], Reply::good());
    let mut call = Call::default();
    d.rewind(&mut call).unwrap();
    // measured: only that it is accounted, never its size
    assert_eq!(d.counters().busy_ns, call.elapsed_ns);
}
