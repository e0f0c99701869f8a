//! The plugin contract kit (to be completed).
