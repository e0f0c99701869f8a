//! The `control` call: fault injection, synthetic feeds, robot recovery and counters, as JSON
//! requests (docs/SIMULATOR.md lists them). Every reply is JSON with `"ok": true`.

use std::collections::VecDeque;

use reel_plugin_abi::mam;
use reel_plugin_abi::sdk::Fault;
use serde_json::{Value, json};

use crate::drive_state::Feed;
use crate::sense;
use crate::shared::Shared;

fn field<'a>(req: &'a Value, name: &str, op: &str) -> Result<&'a Value, Fault> {
    req.get(name)
        .ok_or_else(|| Fault::invalid(format!("control op `{op}` needs the field `{name}`")))
}

fn u64_field(req: &Value, name: &str, op: &str) -> Result<u64, Fault> {
    field(req, name, op)?.as_u64().ok_or_else(|| {
        Fault::invalid(format!(
            "control op `{op}`: `{name}` must be a non-negative integer"
        ))
    })
}

fn opt_u32(req: &Value, name: &str, op: &str) -> Result<u32, Fault> {
    match req.get(name) {
        None => Ok(0),
        Some(v) => v
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| {
                Fault::invalid(format!(
                    "control op `{op}`: `{name}` must be a small non-negative integer"
                ))
            }),
    }
}

fn str_field<'a>(req: &'a Value, name: &str, op: &str) -> Result<&'a str, Fault> {
    field(req, name, op)?
        .as_str()
        .ok_or_else(|| Fault::invalid(format!("control op `{op}`: `{name}` must be a string")))
}

fn drive_of(s: &Shared, req: &Value, op: &str) -> Result<u32, Fault> {
    let d = u64_field(req, "drive", op)?;
    if d >= u64::from(s.drive_count()) {
        return Err(Fault::invalid(format!(
            "control op `{op}`: no drive {d} (this library has {})",
            s.drive_count()
        )));
    }
    s.check_not_foreign(d as u32, op)?;
    Ok(d as u32)
}

fn ok() -> Value {
    json!({"ok": true})
}

/// Handle one control request; returns the JSON reply and the modelled seconds it took.
pub fn handle(s: &Shared, request: &str) -> Result<(String, f64), Fault> {
    let req: Value = serde_json::from_str(request)
        .map_err(|e| Fault::invalid(format!("control request is not JSON: {e}")))?;
    let op = req
        .get("op")
        .and_then(Value::as_str)
        .ok_or_else(|| Fault::invalid("control request needs a string field `op`"))?;
    let mut secs = 0.0;
    let reply = match op {
        "fault" => fault(s, &req)?,
        "test.early_warning_after" | "test.end_of_medium_after" => {
            let d = drive_of(s, &req, op)?;
            let n = u64_field(&req, "bytes", op)?;
            arm_point(s, d, n, op == "test.early_warning_after")?;
            ok()
        }
        "counters" => counters(s)?,
        "feed" => feed(s, &req)?,
        "robot_recover" => {
            let d = drive_of(s, &req, op)?;
            secs = s.robot_recover(d)?;
            ok()
        }
        "clean" => {
            let d = drive_of(s, &req, op)?;
            s.drive(d)?.clean_alert = false;
            ok()
        }
        "disarm" => {
            // Every one-shot fault armed on the drive and not met yet, and its early-warning
            // and end-of-medium points, are dropped; a dead drive stays dead.
            let d = drive_of(s, &req, op)?;
            let mut st = s.drive(d)?;
            let was = std::mem::take(&mut st.faults);
            st.faults.power_cut_due = was.power_cut_due;
            st.ew_rel = None;
            st.eom_rel = None;
            st.ew_abs = None;
            st.eom_abs = None;
            ok()
        }
        "ie_insert" => {
            let ie = opt_u32(&req, "ie", op)?;
            let bc = str_field(&req, "barcode", op)?;
            let worm = req.get("worm").and_then(Value::as_bool).unwrap_or(false);
            s.ie_insert(ie, bc, worm)?;
            ok()
        }
        "ie_remove" => {
            let ie = opt_u32(&req, "ie", op)?;
            let bc = s.ie_remove(ie)?;
            json!({"ok": true, "barcode": bc})
        }
        "power_cut" => {
            let lost = s.power_cut()?;
            json!({"ok": true, "objects_lost": lost})
        }
        other => {
            // docs/ABI.md: an op the plugin does not know is unsupported, not malformed
            return Err(Fault::code(
                reel_plugin_abi::REEL_E_UNSUPPORTED,
                format!("unknown control op `{other}`; see docs/SIMULATOR.md for the vocabulary"),
            ));
        }
    };
    Ok((reply.to_string(), secs))
}

fn arm_point(s: &Shared, d: u32, bytes: u64, early_warning: bool) -> Result<(), Fault> {
    let mut st = s.drive(d)?;
    let loaded_end = match (&st.cart, st.loaded) {
        (Some(c), true) => Some(c.data_end()),
        _ => None,
    };
    match (loaded_end, early_warning) {
        (Some(end), true) => st.ew_abs = Some(end + bytes),
        (Some(end), false) => st.eom_abs = Some(end + bytes),
        (None, true) => st.ew_rel = Some(bytes),
        (None, false) => st.eom_rel = Some(bytes),
    }
    Ok(())
}

fn counters(s: &Shared) -> Result<Value, Fault> {
    let stats = s.all_stats();
    let drives: Vec<Value> = stats
        .iter()
        .enumerate()
        .map(|(i, st)| {
            json!({
                "drive": i,
                "busy_ns": st.busy_ns,
                "streaming_ns": st.streaming_ns,
                "locate_ns": st.locate_ns,
                "mount_ns": st.mount_ns,
                "bytes_written": st.bytes_written,
                "bytes_read": st.bytes_read,
                "records_written": st.records_written,
                "records_read": st.records_read,
                "filemarks_written": st.filemarks_written,
                "locates": st.locates,
                "backhitch_underrun": st.backhitch_underrun,
                "backhitch_sync": st.backhitch_sync,
                "repositions": st.repositions,
                "mounts": st.mounts,
                "writes_not_at_eod": st.writes_not_at_eod,
                "relabels": st.relabels,
                "writes_together": s.drive(i as u32).map(|d| d.writes_together).unwrap_or(0),
                "owned": s.owns(i as u32),
                // Died (`drive_dies`) and not yet serviced (`robot_recover`).
                "failed": s.drive(i as u32).map(|d| d.dead).unwrap_or(false),
            })
        })
        .collect();
    let mut v = json!({
        "ok": true,
        "basis": "SIMULATED",
        "violations": stats.iter().map(|s| s.writes_not_at_eod).sum::<u64>(),
        "relabels": stats.iter().map(|s| s.relabels).sum::<u64>(),
        "robot_moves": s.robot_moves(),
        "drives": drives,
    });
    // Shared mode: the figures above are this process's; the library's whole history, every
    // process included (a killed one too), comes from its event log and layout.
    if let Some(c) = s.library_counters()? {
        v["shared"] = json!(true);
        v["library"] = json!({
            "violations": c.violations,
            "relabels": c.relabels,
            "worm_refusals": c.worm_refusals,
            "robot_moves": c.robot_moves,
            "busy_ns": c.busy_ns,
            "fired": c.fired,
        });
    }
    Ok(v)
}

fn feed(s: &Shared, req: &Value) -> Result<Value, Fault> {
    let d = drive_of(s, req, "feed")?;
    let mut st = s.drive(d)?;
    let now = st.now;
    if let Some(r) = req.get("bytes_per_sec") {
        let bps = r
            .as_f64()
            .filter(|v| *v > 0.0 && v.is_finite())
            .ok_or_else(|| Fault::invalid("feed: `bytes_per_sec` must be a positive number"))?;
        st.feed = Feed::Rate {
            bytes_per_sec: bps,
            produced_at: now,
        };
    } else if let Some(a) = req.get("arrivals_ms") {
        let times: Option<VecDeque<f64>> = a
            .as_array()
            .map(|v| v.iter().map(|x| x.as_f64().map(|ms| ms / 1000.0)).collect())
            .and_then(|v: Option<VecDeque<f64>>| v);
        let times = times
            .ok_or_else(|| Fault::invalid("feed: `arrivals_ms` must be an array of numbers"))?;
        st.feed = Feed::Arrivals { origin: now, times };
    } else if req.get("host_clock").and_then(Value::as_bool) == Some(true) {
        st.feed = Feed::HostClock;
    } else {
        return Err(Fault::invalid(
            "feed needs `bytes_per_sec`, `arrivals_ms` or `host_clock: true`",
        ));
    }
    Ok(ok())
}

fn fault(s: &Shared, req: &Value) -> Result<Value, Fault> {
    let kind = str_field(req, "kind", "fault")?;
    let op = kind;
    match kind {
        "corrupt_write" | "corrupt_read" | "silent_corrupt_write" => {
            let d = drive_of(s, req, op)?;
            let off = opt_u32(req, "offset", op)?;
            let mut st = s.drive(d)?;
            match kind {
                "corrupt_write" => st.faults.corrupt_write = Some(off),
                "corrupt_read" => st.faults.corrupt_read = Some(off),
                _ => st.faults.silent_write = Some(off),
            }
        }
        "short_write" => {
            let d = drive_of(s, req, op)?;
            let n = u64_field(req, "bytes", op)?;
            s.drive(d)?.faults.short_write = Some(n);
        }
        "deferred_write_error" => {
            s.drive(drive_of(s, req, op)?)?.faults.deferred_write_error = true
        }
        "drive_fault" => s.drive(drive_of(s, req, op)?)?.faults.drive_fault = true,
        "cleaning_required" => s.drive(drive_of(s, req, op)?)?.faults.cleaning_required = true,
        "media_alert" => s.drive(drive_of(s, req, op)?)?.media_alert = true,
        "worm_overwrite" => s.drive(drive_of(s, req, op)?)?.faults.worm_overwrite = true,
        "unit_attention" => {
            let mut st = s.drive(drive_of(s, req, op)?)?;
            match req.get("on").and_then(Value::as_str) {
                None => st.pending_ua = Some(reel_plugin_abi::asc::POWER_ON_RESET),
                Some("mam_read") => {
                    let attribute = match req.get("attribute") {
                        None => None,
                        Some(v) => Some(v.as_u64().and_then(|a| u16::try_from(a).ok()).ok_or_else(
                            || Fault::invalid("unit_attention: `attribute` is a MAM attribute number (0 to 65535)"),
                        )?),
                    };
                    st.faults.ua_on_mam_read = Some(attribute);
                }
                Some(other) => {
                    return Err(Fault::invalid(format!(
                        "unit_attention: `on` may be \"mam_read\" (or absent: the next command), not {other:?}"
                    )));
                }
            }
        }
        "position_lost" => {
            let mut st = s.drive(drive_of(s, req, op)?)?;
            st.pending_ua = Some(reel_plugin_abi::asc::POWER_ON_RESET);
            if st.loaded {
                st.pos_unknown = true;
            }
        }
        "drive_dies" => {
            let d = drive_of(s, req, op)?;
            let n = u64_field(req, "after_records", op)?;
            let mut st = s.drive(d)?;
            if n == 0 {
                st.dead = true;
                st.lose_buffer()?;
            } else {
                st.faults.dies_after = Some(n);
            }
        }
        "early_warning" | "end_of_medium" => {
            let d = drive_of(s, req, op)?;
            let n = u64_field(req, "bytes", op)?;
            arm_point(s, d, n, kind == "early_warning")?;
        }
        "medium_error" => {
            let bc = str_field(req, "barcode", op)?;
            let block = u64_field(req, "block", op)?;
            s.with_cartridge(bc, |_, _| Ok(()))?;
            s.add_medium_error(bc, block);
        }
        "corrupt_stored" => {
            let bc = str_field(req, "barcode", op)?;
            let block = u64_field(req, "block", op)?;
            let off = opt_u32(req, "offset", op)?;
            s.with_cartridge(bc, |c, _| {
                c.corrupt_stored(block, off)
                    .map_err(|e| Fault::invalid(format!("corrupt_stored on {bc}: {e}")))
            })?;
            s.log_event("fired_corrupt_stored", bc, block);
        }
        "foreign_cartridge" => {
            let bc = str_field(req, "barcode", op)?;
            s.with_cartridge(bc, |c, drive| {
                c.truncate_to(0).map_err(|e| sense::io("truncate", e))?;
                let label = foreign_label(bc);
                c.append_record(&label).map_err(|e| sense::io("label", e))?;
                c.append_filemark().map_err(|e| sense::io("label", e))?;
                c.sync().map_err(|e| sense::io("sync", e))?;
                c.mam_set(mam::APPLICATION_NAME, b"OTHER-ARCHIVER")
                    .map_err(|e| sense::io("MAM", e))?;
                if let Some(st) = drive {
                    st.pos = 0;
                }
                Ok(())
            })?;
        }
        "mam_epoch_bump" => {
            let bc = str_field(req, "barcode", op)?;
            let epoch = s.with_cartridge(bc, |c, _| {
                let next = bump_epoch(c.mam_get(mam::REEL_LABEL_EPOCH).map(Vec::as_slice))?;
                c.mam_set(mam::REEL_LABEL_EPOCH, &next.1)
                    .map_err(|e| sense::io("MAM", e))?;
                Ok(next.0)
            })?;
            return Ok(json!({"ok": true, "epoch": epoch}));
        }
        "power_cut" if req.get("after_records").is_some() => {
            let d = drive_of(s, req, op)?;
            let n = u64_field(req, "after_records", op)?;
            if n == 0 {
                return Err(Fault::invalid(
                    "power_cut: `after_records` counts writes and must be at least 1; \
                     leave it out to cut the power at once",
                ));
            }
            s.drive(d)?.faults.power_cut_after = Some(n);
        }
        "power_cut" => {
            let lost = s.power_cut()?;
            return Ok(json!({"ok": true, "objects_lost": lost}));
        }
        other => {
            return Err(Fault::invalid(format!(
                "unknown fault kind `{other}`; see docs/SIMULATOR.md for the vocabulary"
            )));
        }
    }
    Ok(ok())
}

/// An 80-byte ANSI VOL1 label of another application.
fn foreign_label(barcode: &str) -> Vec<u8> {
    let volser: String = barcode.chars().take(6).collect();
    let mut l = format!("VOL1{volser:<6}{:<27}{:<14}", "", "OTHERARCHIVER").into_bytes();
    l.resize(79, b' ');
    l.push(b'4');
    l
}

/// The next label epoch: an 8-byte big-endian counter, or ASCII decimal digits.
fn bump_epoch(cur: Option<&[u8]>) -> Result<(u64, Vec<u8>), Fault> {
    match cur {
        None => Ok((1, 1u64.to_be_bytes().to_vec())),
        Some(b) if b.len() == 8 => {
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            let n = u64::from_be_bytes(a).wrapping_add(1);
            Ok((n, n.to_be_bytes().to_vec()))
        }
        Some(b) if !b.is_empty() && b.iter().all(u8::is_ascii_digit) => {
            let n: u64 = std::str::from_utf8(b)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| Fault::invalid("label epoch does not parse"))?;
            Ok((n + 1, (n + 1).to_string().into_bytes()))
        }
        Some(_) => Err(Fault::invalid(
            "the label epoch attribute (1400h) is neither 8 bytes big-endian nor ASCII digits",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_bumps_both_encodings() {
        assert_eq!(bump_epoch(None).unwrap().0, 1);
        assert_eq!(bump_epoch(Some(&7u64.to_be_bytes())).unwrap().0, 8);
        assert_eq!(bump_epoch(Some(b"41")).unwrap(), (42, b"42".to_vec()));
        assert!(bump_epoch(Some(b"x")).is_err());
    }

    #[test]
    fn foreign_label_is_80_bytes_vol1() {
        let l = foreign_label("RL0004L9");
        assert_eq!(l.len(), 80);
        assert!(l.starts_with(b"VOL1RL0004"));
    }
}
