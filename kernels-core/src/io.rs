//! (stub: to be written)
