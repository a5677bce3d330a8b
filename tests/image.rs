//! The container image builds from what deploy/Dockerfile copies: every
//! file the build reads at compile time (`include_str!`, `include_bytes!`)
//! and every target Cargo.toml declares lies inside one of the build
//! stage's COPY sources. (scripts/image-check.sh builds that file set and
//! makes a request to the result; this test says at once which file is
//! missing.)

use std::path::{Component, Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The sources of the COPY lines of the Dockerfile's build stage.
fn copied() -> Vec<PathBuf> {
    let dockerfile = std::fs::read_to_string(root().join("deploy/Dockerfile")).unwrap();
    let stage = dockerfile
        .split("\nFROM ")
        .find(|stage| {
            stage
                .lines()
                .next()
                .is_some_and(|l| l.ends_with(" AS build"))
        })
        .expect("a build stage");
    stage
        .lines()
        .filter_map(|l| l.strip_prefix("COPY "))
        .flat_map(|args| {
            let words: Vec<&str> = args.split_whitespace().collect();
            let (_, sources) = words.split_last().unwrap();
            sources
                .iter()
                .map(|s| PathBuf::from(s.trim_end_matches('/')))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// `path` with `.` and `..` resolved, relative to the repository.
fn normal(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Each path a file of `src/` reads at compile time, relative to the
/// repository: the first string literal of each `include_str!` or
/// `include_bytes!` (for `concat!("../../lua/", $file)`, its folder).
fn included() -> Vec<(PathBuf, PathBuf)> {
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let relative = file.strip_prefix(root()).unwrap().to_path_buf();
        for macro_name in ["include_str!(", "include_bytes!("] {
            for (at, _) in text.match_indices(macro_name) {
                let rest = &text[at + macro_name.len()..];
                let Some(open) = rest.find('"') else { continue };
                let literal = &rest[open + 1..];
                let literal = &literal[..literal.find('"').unwrap()];
                let read = normal(&relative.parent().unwrap().join(literal));
                out.push((relative.clone(), read));
            }
        }
    }
    out
}

#[test]
fn every_file_the_build_reads_is_copied_into_the_image() {
    let copied = copied();
    assert!(copied.iter().any(|c| c == Path::new("src")), "{copied:?}");
    let included = included();
    assert!(
        included.iter().any(|(_, read)| read.starts_with("assets")),
        "the scan finds the page's assets: {included:?}"
    );
    let outside: Vec<String> = included
        .iter()
        .filter(|(_, read)| !copied.iter().any(|c| read.starts_with(c)))
        .map(|(file, read)| format!("{} reads {}", file.display(), read.display()))
        .collect();
    assert!(
        outside.is_empty(),
        "deploy/Dockerfile does not copy what the build reads: {outside:?}"
    );
}

#[test]
fn every_target_cargo_toml_declares_is_copied_into_the_image() {
    let copied = copied();
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    assert!(copied.iter().any(|c| c == Path::new("Cargo.toml")));
    assert!(copied.iter().any(|c| c == Path::new("Cargo.lock")));
    let declared: Vec<PathBuf> = manifest
        .lines()
        .filter_map(|l| l.strip_prefix("path = \""))
        .map(|p| PathBuf::from(p.trim_end_matches('"')))
        .collect();
    assert!(!declared.is_empty());
    for path in declared {
        assert!(
            copied.iter().any(|c| path.starts_with(c)),
            "Cargo.toml declares {}, which deploy/Dockerfile does not copy",
            path.display()
        );
    }
}
