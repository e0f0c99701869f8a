//! Tape seek cost model and recommended access order (to be completed).
