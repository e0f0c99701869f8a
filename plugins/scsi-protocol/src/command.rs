//! One SCSI command as a transport carries it: the direction and buffer of its data phase, and
//! how it completed at the SCSI level (status, sense bytes, data transferred). The same for
//! SG_IO, iSCSI and a scripted test target.

/// SCSI status GOOD.
pub const STATUS_GOOD: u8 = 0x00;
/// SCSI status CHECK CONDITION.
pub const STATUS_CHECK_CONDITION: u8 = 0x02;
/// SCSI status BUSY.
pub const STATUS_BUSY: u8 = 0x08;
/// SCSI status RESERVATION CONFLICT.
pub const STATUS_RESERVATION_CONFLICT: u8 = 0x18;

/// The data phase of one command.
pub enum DataDir<'a> {
    /// No data.
    None,
    /// Data from the device into this buffer (its length is the allocation length).
    In(&'a mut [u8]),
    /// Data from this buffer to the device.
    Out(&'a [u8]),
}

impl DataDir<'_> {
    /// Length of the data phase requested.
    pub fn len(&self) -> usize {
        match self {
            DataDir::None => 0,
            DataDir::In(b) => b.len(),
            DataDir::Out(b) => b.len(),
        }
    }

    /// Whether there is no data phase.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reborrow for a retry of the same command.
    pub fn reborrow(&mut self) -> DataDir<'_> {
        match self {
            DataDir::None => DataDir::None,
            DataDir::In(b) => DataDir::In(b),
            DataDir::Out(b) => DataDir::Out(b),
        }
    }
}

/// What came back from the device for one command.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Completion {
    /// SCSI status byte.
    pub status: u8,
    /// Raw sense bytes (fixed or descriptor format), empty when none.
    pub sense: Vec<u8>,
    /// Bytes of data-in the transport reports as transferred (requested minus residual).
    /// Tape readers take a short record's length from the sense INFORMATION instead when it is
    /// present: some targets report the residual wrongly on a read of a shorter record.
    pub transferred: usize,
}
