//! Is this the cartridge the catalogue knows? Read its BOT label and compare it with the
//! catalogue's record: barcode, pool, label UUID and epoch.
//!
//! Run for each cartridge that comes back from a vault (`reel cartridge import` asks for it,
//! `reel verify --label` on demand, and a write to a cartridge whose label is unchecked since it
//! came back runs it first): a cartridge that left the building may come back erased,
//! relabelled by another site, or as another cartridge wearing the same barcode. A read
//! compares each container's header with the catalogue too, but only when work reaches it.

use serde::Serialize;

use super::SessionError;
use super::mount::{LabelState, read_label};
use crate::catalogue::Catalogue;
use crate::device::Drive;

/// What the label check found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "label")]
pub enum LabelCheck {
    /// The label is the one the catalogue recorded (or, for a cartridge the catalogue has
    /// never labelled, the cartridge is blank).
    Matches {
        /// The pool its label names; `None` for a blank one.
        pool: Option<String>,
        /// Its label epoch (0 for a blank one).
        epoch: u64,
    },
    /// It is not the cartridge the catalogue knows, in words.
    Differs {
        /// What differs.
        reason: String,
    },
    /// The catalogue has no label for it (never labelled, or an intake that stopped after
    /// writing the label) and the tape holds something: nothing to compare with. Intake or a
    /// rebuild decides what it is; the check changes nothing.
    Unknown {
        /// What the tape holds.
        reason: String,
    },
}

/// Read the label of `barcode`, mounted in `drive`, and compare it with the catalogue.
pub async fn check_label(
    catalogue: &Catalogue,
    drive: &Drive,
    barcode: &str,
) -> Result<LabelCheck, SessionError> {
    let Some(known) = catalogue.cartridge(barcode).await? else {
        return Ok(LabelCheck::Differs {
            reason: "the catalogue does not know it".into(),
        });
    };
    let differs = |reason: String| Ok(LabelCheck::Differs { reason });
    match (read_label(drive, barcode).await?, known.cartridge_uuid) {
        (LabelState::Blank, None) => Ok(LabelCheck::Matches {
            pool: None,
            epoch: 0,
        }),
        (LabelState::Blank, Some(uuid)) => differs(format!(
            "it is blank, but the catalogue has it labelled (uuid {uuid}, epoch {}): erased, or \
             another cartridge with the same barcode",
            known.label_epoch
        )),
        (LabelState::Foreign(what), Some(_)) => differs(format!(
            "it holds another application's data ({what}), not reel's label"
        )),
        (LabelState::Foreign(what), None) => Ok(LabelCheck::Unknown {
            reason: format!(
                "the catalogue has it unlabelled and it holds another application's data ({what}); `reel intake` refuses it"
            ),
        }),
        (LabelState::Reel(l), None) => Ok(LabelCheck::Unknown {
            reason: format!(
                "the catalogue has it unlabelled but it carries a reel label (pool {}, uuid {}, \
                 epoch {}): rebuild the catalogue from it (`reel rebuild`) if it is yours",
                l.pool, l.cartridge_uuid, l.epoch
            ),
        }),
        (LabelState::Reel(l), Some(uuid)) => {
            let mut wrong = Vec::new();
            if l.barcode != barcode {
                wrong.push(format!("its label names barcode {}", l.barcode));
            }
            if l.cartridge_uuid != uuid {
                wrong.push(format!(
                    "its label uuid is {} where the catalogue has {uuid}",
                    l.cartridge_uuid
                ));
            }
            if l.epoch != known.label_epoch {
                wrong.push(format!(
                    "its label epoch is {} where the catalogue has {}",
                    l.epoch, known.label_epoch
                ));
            }
            if known.pool.as_deref() != Some(l.pool.as_str()) {
                wrong.push(format!(
                    "its label names pool {} where the catalogue has {}",
                    l.pool,
                    known.pool.as_deref().unwrap_or("none")
                ));
            }
            if wrong.is_empty() {
                Ok(LabelCheck::Matches {
                    pool: Some(l.pool),
                    epoch: l.epoch,
                })
            } else {
                differs(format!(
                    "not the cartridge the catalogue knows: {}",
                    wrong.join("; ")
                ))
            }
        }
    }
}
