//! Module classes.
