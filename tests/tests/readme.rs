//! The front door stays one: README.md is at most 300 lines, opens with the two commands (the
//! demo, and every test), `.ci/run` runs the second, and every crate guide it leads to exists.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

const DEMO: &str = "cargo run --release -p native-cli --bin kernels -- demo";
const EVERY_TEST: &str = "tests/ci.sh";
const GUIDES: [&str; 5] = [
    "kernels-core/README.md",
    "gpu/README.md",
    "web/README.md",
    "native-cli/README.md",
    "tests/README.md",
];

#[test]
fn the_readme_is_short_and_opens_with_the_two_commands() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines <= 300,
        "README.md has {lines} lines; the depth belongs in the guides"
    );
    // The first code block is the two commands, before any section.
    let first_block = readme.split("```").nth(1).unwrap();
    let commands: Vec<&str> = first_block
        .lines()
        .skip(1)
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    assert_eq!(commands, [DEMO, EVERY_TEST], "README.md's first code block");
    let first_section = readme.find("\n## ").unwrap();
    assert!(readme.find("```").unwrap() < first_section);
}

#[test]
fn ci_runs_the_readmes_test_command() {
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    let runs: Vec<&str> = ci
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#') && l.contains(EVERY_TEST))
        .collect();
    assert_eq!(
        runs,
        [format!("exec {EVERY_TEST}")],
        ".ci/run must run {EVERY_TEST}"
    );
    assert!(root().join(EVERY_TEST).is_file());
}

#[test]
fn the_readme_leads_to_every_guide() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    for guide in GUIDES {
        assert!(root().join(guide).is_file(), "{guide} is missing");
        assert!(
            readme.contains(&format!("]({guide})")),
            "README.md does not link {guide}"
        );
        let text = std::fs::read_to_string(root().join(guide)).unwrap();
        assert!(
            text.contains("](../README.md)"),
            "{guide} does not link back to the README"
        );
    }
}
