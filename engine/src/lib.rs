//! # reel-engine: catalogue, on-tape format, device host and sessions
