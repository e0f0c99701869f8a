//! # reel-plugin-scsi: real drives and changers (SSC/SMC over SG_IO or iSCSI)
