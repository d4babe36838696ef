//! Shared by the binary's end-to-end tests: run `kernels` and read what it said.

#![allow(dead_code)]

use std::process::{Command, Output};

/// Runs the built `kernels` binary with `args`, with `KERNELS_BACKEND` cleared.
pub fn kernels(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kernels"))
        .args(args)
        .env_remove("KERNELS_BACKEND")
        .output()
        .expect("run kernels")
}

/// The run's standard error, as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
