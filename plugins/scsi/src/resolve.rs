//! Devices named by serial number: the `/dev/sg*` node whose VPD page 80h carries the serial.
//! Serials are stable across reboots and HBA rescans; `/dev/sgN` numbers are not.

use crate::config::Config;
use crate::device::ScsiDevice;
use crate::drive::identify;
use crate::error::ScsiError;
use crate::transport::TransportError;

/// Find the sg node of the device with this serial.
pub fn sg_by_serial(cfg: &Config, serial: &str) -> Result<String, ScsiError> {
    let mut nodes: Vec<String> = std::fs::read_dir("/dev")
        .map_err(|source| TransportError::Io {
            device: "/dev".to_string(),
            what: "read_dir",
            source,
        })?
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| {
            n.strip_prefix("sg")
                .is_some_and(|d| d.parse::<u32>().is_ok())
        })
        .map(|n| format!("/dev/{n}"))
        .collect();
    nodes.sort_by_key(|n| {
        n.trim_start_matches("/dev/sg")
            .parse::<u32>()
            .unwrap_or(u32::MAX)
    });
    let mut seen = Vec::new();
    for node in &nodes {
        let found = ScsiDevice::open(cfg, node).and_then(|mut d| identify(&mut d));
        match found {
            Ok((_, s)) if s == serial => {
                tracing::info!(%serial, %node, "device resolved by serial");
                return Ok(node.clone());
            }
            Ok((_, s)) => seen.push(format!("{node}={s}")),
            Err(e) => tracing::debug!(%node, "skipped while resolving serial {serial}: {e}"),
        }
    }
    Err(TransportError::BadAddress {
        address: format!("serial={serial}"),
        reason: format!(
            "no /dev/sg* device reports this serial (seen: {}); check the serial with `sg_inq -p 0x80`, that the sg module is loaded and that reel may open the nodes read-write",
            if seen.is_empty() {
                "none".to_string()
            } else {
                seen.join(", ")
            }
        ),
    }
    .into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_serial_says_how_to_check() {
        let cfg = Config::parse("drives=serial=NO-SUCH-SERIAL-REEL").unwrap();
        let e = sg_by_serial(&cfg, "NO-SUCH-SERIAL-REEL")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("NO-SUCH-SERIAL-REEL") && e.contains("sg_inq"),
            "{e}"
        );
    }
}
