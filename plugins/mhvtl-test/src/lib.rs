//! # reel-plugin-mhvtl: the Linux st/sg driver path
