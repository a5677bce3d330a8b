//! The documentation agrees with the code: the error table with the error
//! type, the configuration table with what the parser accepts, and every
//! link with a file and heading that exist.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use waitgate::config::Config;
use waitgate::error::ApiError;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(root().join(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

/// The rows of the first markdown table whose header row is `header`, as
/// cells with surrounding spaces trimmed.
fn table(text: &str, header: &str) -> Vec<Vec<String>> {
    let mut lines = text.lines().skip_while(|l| l.trim() != header);
    assert!(lines.next().is_some(), "no table headed {header}");
    lines
        .skip(1) // the |---| row
        .take_while(|l| l.trim_start().starts_with('|'))
        .map(|l| {
            let l = l.trim().trim_start_matches('|').trim_end_matches('|');
            l.split('|').map(|c| c.trim().to_string()).collect()
        })
        .collect()
}

fn unquote(cell: &str) -> String {
    cell.trim().trim_matches('`').to_string()
}

#[test]
fn the_error_table_lists_every_error_and_no_other() {
    let documented: BTreeSet<(u16, String)> =
        table(&read("docs/api.md"), "| Status | Code | When |")
            .iter()
            .map(|row| {
                let status = row[0]
                    .parse()
                    .unwrap_or_else(|_| panic!("status {:?}", row[0]));
                (status, unquote(&row[1]))
            })
            .collect();
    let actual: BTreeSet<(u16, String)> = ApiError::all()
        .iter()
        .map(|e| (e.status(), e.code().to_string()))
        .collect();
    let missing: Vec<_> = actual.difference(&documented).collect();
    let extra: Vec<_> = documented.difference(&actual).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "docs/api.md lacks {missing:?} and lists {extra:?}, which no ApiError has"
    );
}

/// A config every probe starts from: the smallest valid one.
const BASE: &str = "
redis: {url: 'redis://127.0.0.1:6379/0'}
queues: {baseball: {}}
upstreams: {ticketing: {address: '127.0.0.1:9000'}}
routes: [{prefix: /x, upstream: ticketing, queue: baseball}]
";

/// The fields the parser accepts at `section` (a documented key such as
/// `queues.<name>.heartbeat`, or "" for the top level), read from its own
/// error for a field it does not know.
fn accepted_fields(section: &str) -> BTreeSet<String> {
    let mut doc: serde_yaml::Value = serde_yaml::from_str(BASE).unwrap();
    let mut here = &mut doc;
    for part in section.split('.').filter(|p| !p.is_empty()) {
        let (name, list) = match part.strip_suffix("[]") {
            Some(name) => (name, true),
            None => (part, false),
        };
        let name = if name == "<name>" {
            // The one queue or upstream BASE has at this level.
            let map = here.as_mapping().unwrap();
            map.keys().next().unwrap().as_str().unwrap().to_string()
        } else {
            name.to_string()
        };
        let map = here.as_mapping_mut().unwrap();
        let key = serde_yaml::Value::from(name);
        if !map.contains_key(&key) {
            map.insert(key.clone(), serde_yaml::Mapping::new().into());
        }
        here = map.get_mut(&key).unwrap();
        if list {
            here = &mut here.as_sequence_mut().unwrap()[0];
        }
    }
    // The unknown field goes first, so that it is the first thing read.
    let mut probed = serde_yaml::Mapping::new();
    probed.insert("zz-unknown".into(), 1.into());
    for (k, v) in here.as_mapping().unwrap() {
        probed.insert(k.clone(), v.clone());
    }
    *here = probed.into();
    let text = serde_yaml::to_string(&doc).unwrap();
    let error = Config::from_yaml(&text).unwrap_err().to_string();
    let expected = error
        .split_once("expected")
        .unwrap_or_else(|| panic!("{section}: {error}"))
        .1;
    expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

#[test]
fn the_configuration_table_lists_every_key_the_parser_accepts() {
    let keys: BTreeSet<String> = table(
        &read("docs/configuration.md"),
        "| Key | Type | Default | Meaning |",
    )
    .iter()
    .map(|row| unquote(&row[0]))
    .collect();
    assert!(keys.len() > 30, "{keys:?}");
    // Each documented key's children, by section.
    let mut children: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    children.insert(String::new(), BTreeSet::new());
    for key in &keys {
        let (parent, field) = match key.rfind('.') {
            Some(at) => (&key[..at], &key[at + 1..]),
            None => ("", key.as_str()),
        };
        let (parent, field) = match parent.strip_suffix("[]") {
            Some(_) => (parent, field),
            None => (parent, field),
        };
        if field == "<name>" {
            continue;
        }
        children
            .entry(parent.to_string())
            .or_default()
            .insert(field.to_string());
    }
    let mut problems = Vec::new();
    for (section, documented) in &children {
        let accepted = accepted_fields(section);
        for field in accepted.difference(documented) {
            problems.push(format!("undocumented: {section}.{field}"));
        }
        for field in documented.difference(&accepted) {
            problems.push(format!("documented but refused: {section}.{field}"));
        }
    }
    // Every section the parser has is one the table opens.
    for (section, fields) in &children {
        for field in fields {
            let key = if section.is_empty() {
                field.clone()
            } else {
                format!("{section}.{field}")
            };
            assert!(keys.contains(&key), "{key} is not in the table");
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Every markdown file the repository ships.
fn markdown_files() -> Vec<PathBuf> {
    let mut files = vec![root().join("README.md"), root().join("CHANGELOG.md")];
    for entry in std::fs::read_dir(root().join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
    files
}

/// GitHub's anchor for a heading: lower case, spaces to `-`, most
/// punctuation dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    let mut in_code = false;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
        }
        if !in_code && line.starts_with('#') {
            out.insert(anchor(line.trim_start_matches('#')));
        }
    }
    out
}

/// `(target, fragment)` of every inline link `[text](target#fragment)`
/// outside code blocks.
fn links(text: &str) -> Vec<(String, Option<String>)> {
    let mut in_code = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            let link = &after[..end];
            rest = &after[end..];
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (target, fragment) = match link.split_once('#') {
                Some((t, f)) => (t.to_string(), Some(f.to_string())),
                None => (link.to_string(), None),
            };
            out.push((target, fragment));
        }
    }
    out
}

#[test]
fn every_link_reaches_a_file_and_heading_in_the_repository() {
    let mut problems = Vec::new();
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        let dir = file.parent().unwrap();
        for (target, fragment) in links(&text) {
            let resolved: PathBuf = if target.is_empty() {
                file.clone()
            } else {
                dir.join(&target)
            };
            let name = file.strip_prefix(root()).unwrap().display().to_string();
            if !resolved.exists() {
                problems.push(format!("{name}: {target} does not exist"));
                continue;
            }
            if !resolved.starts_with(root()) || !canonical_inside(&resolved) {
                problems.push(format!("{name}: {target} is outside the repository"));
                continue;
            }
            if let Some(fragment) = fragment {
                if resolved.extension().is_some_and(|e| e == "md") {
                    let linked = std::fs::read_to_string(&resolved).unwrap();
                    if !anchors(&linked).contains(&fragment) {
                        problems.push(format!("{name}: {target}#{fragment} has no such heading"));
                    }
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

fn canonical_inside(path: &Path) -> bool {
    let root = root().canonicalize().unwrap();
    path.canonicalize().is_ok_and(|p| p.starts_with(root))
}

/// The repository describes its contract in its own words: nothing points
/// to documents a clone does not have.
#[test]
fn nothing_refers_to_documents_outside_the_repository() {
    let mut files = markdown_files();
    let mut stack = vec![root().join("src"), root().join("tests"), root().join("lua")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                files.push(path);
            }
        }
    }
    let forbidden = ["../shared", "SPEC.md", "SPEC §", "the seed"];
    let mut problems = Vec::new();
    for file in files {
        if file.ends_with("tests/docs.rs") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        for (n, line) in text.lines().enumerate() {
            for word in forbidden {
                if line.contains(word) {
                    let name = file.strip_prefix(root()).unwrap().display();
                    problems.push(format!("{name}:{}: {}", n + 1, line.trim()));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The module map in docs/development.md names every file and folder of
/// `src/` (a folder's files by name where its line lists them, else the
/// folder), and nothing that is not there.
#[test]
fn the_module_map_matches_src() {
    let doc = read("docs/development.md");
    let start = doc.find("```\nsrc/").expect("the map starts with src/");
    let map = &doc[start + 4..];
    let map = &map[..map.find("```").unwrap()];
    // Each entry: a path at the start of a line, then its description.
    let mut entries: Vec<(String, String)> = Vec::new();
    for line in map.lines() {
        if let Some(first) = line
            .split_whitespace()
            .next()
            .filter(|_| !line.starts_with(' '))
        {
            entries.push((first.to_string(), line[first.len()..].to_string()));
        } else if let Some(last) = entries.last_mut() {
            last.1.push(' ');
            last.1.push_str(line.trim());
        }
    }
    for (path, _) in &entries {
        if path.starts_with("src/") {
            assert!(
                root().join(path).exists(),
                "the map names {path}, which is not there"
            );
        }
    }
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(root().join("src")).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().into_string().unwrap();
        if entry.path().is_dir() {
            let folder = format!("src/{name}/");
            let Some((_, description)) = entries.iter().find(|(p, _)| *p == folder) else {
                missing.push(folder);
                continue;
            };
            // A folder whose line names files by name names them all.
            let files: Vec<String> = std::fs::read_dir(entry.path())
                .unwrap()
                .map(|f| f.unwrap().file_name().into_string().unwrap())
                .filter(|f| f.ends_with(".rs") && f != "mod.rs")
                .collect();
            if files.iter().any(|f| description.contains(f.as_str())) {
                for file in files {
                    let named = description.contains(file.as_str())
                        || entries.iter().any(|(p, _)| *p == format!("{folder}{file}"));
                    if !named {
                        missing.push(format!("{folder}{file}"));
                    }
                }
            }
        } else if !entries.iter().any(|(p, _)| *p == format!("src/{name}")) {
            missing.push(format!("src/{name}"));
        }
    }
    assert!(
        missing.is_empty(),
        "docs/development.md's map lacks {missing:?}"
    );
}

/// Every measured figure the README quotes (a number with a thousands
/// comma or a decimal point, or a ratio like `2.10x`) and every run it
/// names (a commit) stands in docs/performance.md, the one source of the
/// figures.
#[test]
fn the_readmes_figures_come_from_the_performance_page() {
    let readme = read("README.md");
    let performance = read("docs/performance.md");
    // The prose only: the flow's sample answers are not figures.
    let prose: String = readme.split("```").step_by(2).collect::<Vec<_>>().join(" ");
    let mut quoted = Vec::new();
    for word in prose.split_whitespace() {
        // `84,671` in `proxy_pass's 84,671 (0.84x)`: the word less its
        // punctuation and a trailing full stop.
        let word = word
            .trim_matches(|c: char| !c.is_ascii_alphanumeric() && c != '.')
            .trim_end_matches('.');
        let number = word.trim_end_matches('x');
        let figure = number.contains(',') || number.contains('.') || word.ends_with('x');
        let numeric = number.chars().next().is_some_and(|c| c.is_ascii_digit())
            && number
                .chars()
                .all(|c| c.is_ascii_digit() || c == ',' || c == '.');
        if figure && numeric {
            quoted.push(word.to_string());
        }
    }
    for (at, _) in prose.match_indices("at `") {
        let commit: String = prose[at + 4..].chars().take_while(|c| *c != '`').collect();
        if commit.len() >= 7 && commit.chars().all(|c| c.is_ascii_hexdigit()) {
            quoted.push(commit);
        }
    }
    println!("the README's figures: {quoted:?}");
    assert!(quoted.len() >= 8, "the README's figures: {quoted:?}");
    let missing: Vec<&String> = quoted
        .iter()
        .filter(|q| !performance.contains(q.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "the README quotes {missing:?}, which docs/performance.md does not have"
    );
}
