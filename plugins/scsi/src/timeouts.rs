//! Per-command timeouts by command class and LTO generation.
//!
//! Figures follow the per-generation tables of IBM's LTO drives as LTFS carries them (LTO-9:
//! LOCATE/SPACE 2940 s, READ 2340 s, WRITE FILEMARKS 1620 s, WRITE 1500 s, LOAD/UNLOAD 960 s,
//! REWIND 600 s, other commands 60 s). LTO-9 and later get 2 h for LOAD: the first load of a
//! new cartridge runs media optimisation, which may take that long. Every class can be
//! overridden in the config (`timeout.<class>=SECONDS`).

use std::time::Duration;

/// Command classes that share a timeout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Class {
    /// INQUIRY, MODE SENSE/SELECT, LOG SENSE, READ POSITION, TEST UNIT READY, MAM...
    Status,
    /// READ.
    Read,
    /// WRITE.
    Write,
    /// WRITE FILEMARKS.
    WriteFilemarks,
    /// LOCATE and SPACE.
    Locate,
    /// REWIND.
    Rewind,
    /// LOAD and UNLOAD.
    LoadUnload,
    /// Changer MOVE MEDIUM.
    Move,
    /// Changer INITIALIZE ELEMENT STATUS (a full barcode scan).
    Inventory,
}

impl Class {
    /// Every class, in config-key order.
    pub const ALL: [Class; 9] = [
        Class::Status,
        Class::Read,
        Class::Write,
        Class::WriteFilemarks,
        Class::Locate,
        Class::Rewind,
        Class::LoadUnload,
        Class::Move,
        Class::Inventory,
    ];

    /// The config key suffix (`timeout.<key>`).
    pub fn key(self) -> &'static str {
        match self {
            Class::Status => "status",
            Class::Read => "read",
            Class::Write => "write",
            Class::WriteFilemarks => "filemarks",
            Class::Locate => "locate",
            Class::Rewind => "rewind",
            Class::LoadUnload => "load",
            Class::Move => "move",
            Class::Inventory => "inventory",
        }
    }

    /// Class from its config key.
    pub fn from_key(k: &str) -> Option<Class> {
        Class::ALL.into_iter().find(|c| c.key() == k)
    }
}

/// Timeouts for every class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timeouts {
    secs: [u64; 9],
    overridden: [bool; 9],
}

impl Timeouts {
    /// Timeouts for an LTO generation (`None`: unknown, the most generous figures).
    pub fn for_generation(generation: Option<u8>) -> Timeouts {
        let load = match generation {
            Some(g) if g < 9 => 960,
            _ => 7200,
        };
        Timeouts {
            secs: [60, 2340, 1500, 1620, 2940, 600, load, 300, 1800],
            overridden: [false; 9],
        }
    }

    /// Timeout of a class.
    pub fn get(&self, class: Class) -> Duration {
        Duration::from_secs(self.secs[class as usize])
    }

    /// Override a class (kept when the generation changes).
    pub fn set(&mut self, class: Class, secs: u64) {
        self.secs[class as usize] = secs;
        self.overridden[class as usize] = true;
    }

    /// Switch to another generation's figures, keeping overrides.
    pub fn regenerate(&mut self, generation: Option<u8>) {
        let base = Timeouts::for_generation(generation);
        for i in 0..self.secs.len() {
            if !self.overridden[i] {
                self.secs[i] = base.secs[i];
            }
        }
    }
}

/// LTO generation from an INQUIRY product identification: IBM `ULT3580-TD9`,
/// `ULTRIUM-HH8`, HPE `Ultrium 9-SCSI`, Quantum `ULTRIUM-HH7`.
pub fn generation_from_product(product: &str) -> Option<u8> {
    let p = product.to_ascii_uppercase();
    let digits_after = |tag: &str| -> Option<u8> {
        let i = p.find(tag)? + tag.len();
        let d: String = p[i..].chars().take_while(|c| c.is_ascii_digit()).collect();
        d.parse().ok()
    };
    let g = digits_after("-TD")
        .or_else(|| digits_after("-HH"))
        .or_else(|| digits_after("ULTRIUM "))?;
    (g > 0).then_some(g)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lto9_first_load_gets_two_hours() {
        let t = Timeouts::for_generation(Some(9));
        assert_eq!(t.get(Class::LoadUnload), Duration::from_secs(7200));
        assert_eq!(
            Timeouts::for_generation(Some(8))
                .get(Class::LoadUnload)
                .as_secs(),
            960
        );
        assert_eq!(
            Timeouts::for_generation(None)
                .get(Class::LoadUnload)
                .as_secs(),
            7200
        );
        assert_eq!(t.get(Class::Locate).as_secs(), 2940);
    }

    #[test]
    fn overrides_survive_regeneration() {
        let mut t = Timeouts::for_generation(None);
        t.set(Class::Read, 5);
        t.regenerate(Some(8));
        assert_eq!(t.get(Class::Read).as_secs(), 5);
        assert_eq!(t.get(Class::LoadUnload).as_secs(), 960);
    }

    #[test]
    fn class_keys_round_trip() {
        for c in Class::ALL {
            assert_eq!(Class::from_key(c.key()), Some(c));
        }
        assert_eq!(Class::from_key("nope"), None);
    }

    #[test]
    fn generations_from_products() {
        assert_eq!(generation_from_product("ULT3580-TD9"), Some(9));
        assert_eq!(generation_from_product("ULTRIUM-HH8"), Some(8));
        assert_eq!(generation_from_product("Ultrium 7-SCSI"), Some(7));
        assert_eq!(generation_from_product("ULT3580-TD10"), Some(10));
        assert_eq!(generation_from_product("3573-TL"), None);
        assert_eq!(generation_from_product("VIRTUAL"), None);
    }
}
