//! Every relative link and anchor in the repository's Markdown resolves: the linked file or
//! folder exists, and an `#anchor` is a heading of the linked Markdown file as GitHub slugs it
//! (or an HTML `id`/`name` there). Links in code blocks and code spans are not links; `target/`,
//! `node_modules/`, `dist/` and `.git/` are skipped.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .unwrap()
}

fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_dir() {
            if !matches!(name, "target" | "node_modules" | "dist" | ".git") {
                markdown_files(&path, out);
            }
        } else if name.ends_with(".md") {
            out.push(path);
        }
    }
}

/// The lines outside fenced code blocks, with code spans blanked out.
fn prose_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fence: Option<&str> = None;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim_start();
        let marker = if t.starts_with("```") {
            Some("```")
        } else if t.starts_with("~~~") {
            Some("~~~")
        } else {
            None
        };
        match (fence, marker) {
            (None, Some(m)) => fence = Some(m),
            (Some(f), Some(m)) if f == m => fence = None,
            (None, None) => out.push((i + 1, strip_code_spans(line))),
            _ => {}
        }
    }
    out
}

fn strip_code_spans(line: &str) -> String {
    let mut out = String::new();
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
            out.push(' ');
        } else if in_code {
            out.push(' ');
        } else {
            out.push(c);
        }
    }
    out
}

/// GitHub's heading slug: lower case, letters, digits, spaces, `-` and `_` kept, spaces to `-`.
fn slug(heading: &str) -> String {
    // Links in headings keep their text.
    let mut text = String::new();
    let mut rest = heading;
    while let Some(i) = rest.find("](") {
        let close = rest[i..].find(')').map(|j| i + j + 1).unwrap_or(rest.len());
        text.push_str(&rest[..i]);
        rest = &rest[close..];
    }
    text.push_str(rest);
    text.trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// A Markdown file's anchors: its headings' slugs (repeats numbered -1, -2 as GitHub does)
/// and HTML `id="..."` / `name="..."`.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    let mut fence = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fence = !fence;
            continue;
        }
        if fence {
            continue;
        }
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if (1..=6).contains(&hashes) && line[hashes..].starts_with(' ') {
            let s = slug(line[hashes..].trim().trim_end_matches('#'));
            let n = seen.entry(s.clone()).or_insert(0);
            out.insert(if *n == 0 {
                s.clone()
            } else {
                format!("{s}-{n}")
            });
            *n += 1;
        }
        for attr in ["id=\"", "name=\""] {
            let mut rest = line;
            while let Some(i) = rest.find(attr) {
                let after = &rest[i + attr.len()..];
                if let Some(j) = after.find('"') {
                    out.insert(after[..j].to_string());
                }
                rest = after;
            }
        }
    }
    out
}

/// The targets of inline links and images `[..](target)` and of definitions `[x]: target`.
fn link_targets(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find("](") {
        let after = &rest[i + 2..];
        let Some(j) = after.find(')') else { break };
        // `<url>` and a title after a space are allowed.
        let target = after[..j].split_whitespace().next().unwrap_or("");
        out.push(
            target
                .trim_start_matches('<')
                .trim_end_matches('>')
                .to_string(),
        );
        rest = &after[j..];
    }
    let t = line.trim_start();
    if let Some(i) = t
        .find("]: ")
        .filter(|&i| t.starts_with('[') && !t[1..i].contains(']'))
    {
        out.push(
            t[i + 3..]
                .split_whitespace()
                .next()
                .unwrap_or("")
                .to_string(),
        );
    }
    out
}

fn is_external(target: &str) -> bool {
    target.starts_with("//")
        || target.split_once(':').is_some_and(|(scheme, _)| {
            !scheme.is_empty() && scheme.chars().all(|c| c.is_ascii_alphabetic())
        })
}

/// The broken links of one file, as `file:line: target (why)`.
fn broken_links(file: &Path, root: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap();
    let dir = file.parent().unwrap();
    let rel = file
        .strip_prefix(root)
        .unwrap_or(file)
        .display()
        .to_string();
    let mut broken = Vec::new();
    for (n, line) in prose_lines(&text) {
        for target in link_targets(&line) {
            if target.is_empty() || is_external(&target) {
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target.as_str(), None),
            };
            let resolved = if path.is_empty() {
                file.to_path_buf()
            } else if let Some(abs) = path.strip_prefix('/') {
                root.join(abs)
            } else {
                dir.join(path)
            };
            if !resolved.exists() {
                broken.push(format!("{rel}:{n}: {target} (no such file)"));
                continue;
            }
            let is_markdown = resolved.extension().and_then(|e| e.to_str()) == Some("md");
            if let Some(anchor) = anchor.filter(|_| is_markdown)
                && !anchors(&std::fs::read_to_string(&resolved).unwrap()).contains(anchor)
            {
                broken.push(format!("{rel}:{n}: {target} (no such heading)"));
            }
        }
    }
    broken
}

#[test]
fn every_relative_link_and_anchor_in_the_markdown_resolves() {
    let root = root();
    let mut files = Vec::new();
    markdown_files(&root, &mut files);
    files.sort();
    assert!(
        files.iter().any(|f| f.ends_with("README.md")),
        "no README.md found under {root:?}"
    );
    let broken: Vec<String> = files.iter().flat_map(|f| broken_links(f, &root)).collect();
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn slugs_and_link_parsing_follow_github() {
    assert_eq!(
        slug("On a real GPU: `tests/gpu-real.sh`"),
        "on-a-real-gpu-testsgpu-realsh"
    );
    assert_eq!(
        slug("Against transformers.js (the page's wasm CPU backend)"),
        "against-transformersjs-the-pages-wasm-cpu-backend"
    );
    assert_eq!(
        slug("Measured on an NVIDIA H100 (2026-11-24)"),
        "measured-on-an-nvidia-h100-2026-11-24"
    );
    assert_eq!(slug("See [the guide](x.md) now"), "see-the-guide-now");
    let a = anchors("# A\n## A\n```\n# not a heading\n```\n<a id=\"x\"></a>\n");
    assert_eq!(a, ["a", "a-1", "x"].iter().map(|s| s.to_string()).collect());
    assert_eq!(
        link_targets("see [a](b.md#c) and ![i](d.svg \"t\") and [e]: ignored"),
        vec!["b.md#c", "d.svg"]
    );
    assert_eq!(link_targets("[ref]: ../x.md"), vec!["../x.md"]);
    assert!(is_external("https://x") && is_external("mailto:a@b") && !is_external("a.md#b"));
    assert_eq!(prose_lines("a\n```\n[x](y)\n```\n`[u](v)` b").len(), 2);
    assert!(link_targets(&strip_code_spans("`[u](v)`")).is_empty());
}

#[test]
fn a_broken_link_and_a_broken_anchor_are_reported() {
    let dir = std::env::temp_dir().join(format!("kernels-links-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("b.md"), "# Present\n").unwrap();
    std::fs::write(
        dir.join("a.md"),
        "[ok](b.md#present) [gone](missing.md) [bad](b.md#absent) [self](#top)\n# Top\n",
    )
    .unwrap();
    let broken = broken_links(&dir.join("a.md"), &dir);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(broken.len(), 2, "{broken:?}");
    assert!(
        broken[0].contains("missing.md") && broken[1].contains("b.md#absent"),
        "{broken:?}"
    );
}
