//! The README against the code: every `lockgate serve` flag is in the Settings table with its variable (and no other), and the contents list every section.

use clap::CommandFactory;
use lockgate::config::Config;

const README: &str = include_str!("../../README.md");

/// The rows of the README's Settings table.
fn settings_rows() -> Vec<&'static str> {
    let section = README
        .split("\n## Settings\n")
        .nth(1)
        .expect("the README has a Settings section");
    let section = section.split("\n## ").next().unwrap();
    section
        .lines()
        .filter(|line| line.starts_with("| `"))
        .collect()
}

#[test]
fn every_serve_flag_is_in_the_readme_settings_table_with_its_variable() {
    let rows = settings_rows();
    let command = Config::command();
    let mut flags = Vec::new();
    for arg in command.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        if ["help", "version"].contains(&long) {
            continue;
        }
        let flag = format!("`--{long}`");
        let env = arg
            .get_env()
            .map(|env| format!("`{}`", env.to_string_lossy()))
            .unwrap_or_else(|| panic!("--{long} has no environment variable"));
        let row = rows
            .iter()
            .find(|row| row.contains(&flag))
            .unwrap_or_else(|| panic!("{flag} is missing from the README's Settings table"));
        assert!(row.contains(&env), "the row of {flag} does not name {env}");
        flags.push(flag);
    }
    assert!(flags.len() > 20, "only {} flags found", flags.len());

    // And the other way: every flag the table names exists.
    for row in &rows {
        for part in row.split('`').filter(|part| part.starts_with("--")) {
            assert!(
                flags.contains(&format!("`{part}`")),
                "the README lists {part}, which `lockgate serve` does not take"
            );
        }
    }
}

#[test]
fn the_contents_line_links_every_section_in_order() {
    let sections: Vec<&str> = README
        .lines()
        .filter_map(|line| line.strip_prefix("## "))
        .collect();
    let contents = README
        .split("\nContents: ")
        .nth(1)
        .expect("the README has a contents line")
        .split("\n\n")
        .next()
        .unwrap();
    let listed: Vec<&str> = contents
        .split('[')
        .skip(1)
        .map(|link| link.split(']').next().unwrap())
        .collect();
    assert_eq!(listed, sections);
    for section in sections {
        // GitHub's anchors: lower case, punctuation dropped, spaces as hyphens.
        let anchor: String = section
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        assert!(
            contents.contains(&format!("[{section}](#{anchor})")),
            "{section} is not linked as #{anchor}"
        );
    }
}

/// Every relative link of the README and of the pages under `docs/` names a
/// file of the repository (and the README links every page of `docs/`).
#[test]
fn the_readme_and_the_docs_link_only_to_files_that_exist() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages = vec![(root.join("README.md"), README.to_owned())];
    let mut docs: Vec<String> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.ends_with(".md"))
        .collect();
    docs.sort();
    for name in &docs {
        let path = root.join("docs").join(name);
        let text = std::fs::read_to_string(&path).unwrap();
        pages.push((path, text));
        assert!(
            README.contains(&format!("](docs/{name})")),
            "the README does not link docs/{name}"
        );
    }
    for (page, text) in &pages {
        for target in text
            .split("](")
            .skip(1)
            .filter_map(|rest| rest.split(')').next())
        {
            if target.starts_with("http") {
                continue;
            }
            let (file, anchor) = target.split_once('#').unwrap_or((target, ""));
            let resolved = if file.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(file)
            };
            assert!(
                resolved.exists(),
                "{} links {target}, which does not exist",
                page.display()
            );
            if !anchor.is_empty() && resolved.extension().is_some_and(|ext| ext == "md") {
                let linked = std::fs::read_to_string(&resolved).unwrap();
                assert!(
                    headings(&linked).any(|heading| anchor_of(&heading) == anchor),
                    "{} links {target}, whose page has no such section",
                    page.display()
                );
            }
        }
    }
}

/// The headings of a Markdown page, without their `#`s (none inside code blocks).
fn headings(page: &str) -> impl Iterator<Item = String> + '_ {
    let mut in_code = false;
    page.lines().filter_map(move |line| {
        if line.starts_with("```") {
            in_code = !in_code;
        }
        (!in_code && line.starts_with('#')).then(|| line.trim_start_matches('#').trim().to_owned())
    })
}

/// The anchor GitHub gives a heading: lower case, spaces as hyphens, and
/// only letters, digits, hyphens and underscores kept.
fn anchor_of(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The architecture page's map names every file of `src/`, so a newcomer
/// finds where each behaviour lives.
#[test]
fn every_file_of_src_is_in_the_architecture_map() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let map = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let mut missing = Vec::new();
    let mut folders = vec![root.join("src")];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                let name = path.strip_prefix(root).unwrap().display().to_string();
                if !map.contains(&format!("`{name}`")) {
                    missing.push(name);
                }
            }
        }
    }
    missing.sort();
    assert!(
        missing.is_empty(),
        "docs/architecture.md's map leaves out {missing:?}"
    );
}

/// The architecture page's list of scripts (its section "The scripts")
/// names every file under `lua/` and nothing else, each a function of the
/// library, and lists the libraries of `lua/lib/` in the order
/// `src/redis/scripts.rs` joins them.
#[test]
fn the_architecture_page_lists_every_script_and_library_of_lua() {
    use std::collections::BTreeSet;

    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let page = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let section = page
        .split("\n## The scripts\n")
        .nth(1)
        .expect("docs/architecture.md has a section The scripts");
    let section = section.split("\n## ").next().unwrap();
    // Rows of its tables: "| `lua/<name>` | ...".
    let rows: Vec<(String, Vec<&str>)> = section
        .lines()
        .filter_map(|line| line.strip_prefix("| `lua/"))
        .map(|rest| {
            let (name, cells) = rest
                .split_once('`')
                .expect("a row's name ends with a backtick");
            let cells = cells.split('|').map(str::trim).skip(1).collect();
            (name.to_owned(), cells)
        })
        .collect();
    let listed_scripts: BTreeSet<String> = rows
        .iter()
        .filter(|(name, _)| !name.starts_with("lib/"))
        .map(|(name, _)| name.clone())
        .collect();
    let listed_libraries: Vec<String> = rows
        .iter()
        .filter_map(|(name, _)| name.strip_prefix("lib/").map(str::to_owned))
        .collect();

    let lua_files = |dir: &str| -> BTreeSet<String> {
        std::fs::read_dir(root.join(dir))
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .filter(|name| name.ends_with(".lua"))
            .collect()
    };
    let scripts = lua_files("lua");
    let libraries = lua_files("lua/lib");
    let unlisted: Vec<_> = scripts.difference(&listed_scripts).collect();
    assert!(
        unlisted.is_empty(),
        "docs/architecture.md's scripts leave out {unlisted:?} of lua/"
    );
    let missing: Vec<_> = listed_scripts.difference(&scripts).collect();
    assert!(
        missing.is_empty(),
        "docs/architecture.md lists {missing:?}, which lua/ does not have"
    );
    let listed_set: BTreeSet<String> = listed_libraries.iter().cloned().collect();
    assert_eq!(
        listed_set.len(),
        listed_libraries.len(),
        "a library listed twice"
    );
    let unlisted: Vec<_> = libraries.difference(&listed_set).collect();
    assert!(
        unlisted.is_empty(),
        "docs/architecture.md's libraries leave out {unlisted:?} of lua/lib/"
    );
    let missing: Vec<_> = listed_set.difference(&libraries).collect();
    assert!(
        missing.is_empty(),
        "docs/architecture.md lists the libraries {missing:?}, which lua/lib/ does not have"
    );

    // Against the code that loads them: the library's functions and the
    // order of its libraries.
    let code = std::fs::read_to_string(root.join("src/redis/scripts.rs")).unwrap();
    let functions: BTreeSet<String> = code
        .split("function!(\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .filter(|name| name.ends_with(".lua"))
        .map(str::to_owned)
        .collect();
    assert!(functions.len() > 20, "only {functions:?} found");
    assert_eq!(
        listed_scripts, functions,
        "the scripts docs/architecture.md lists are not the library's functions"
    );
    let joined = code
        .split("const LIBRARIES: &str = concat!(")
        .nth(1)
        .expect("src/redis/scripts.rs joins the libraries")
        .split(");")
        .next()
        .unwrap();
    let order: Vec<String> = joined
        .split("lua/lib/")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .map(str::to_owned)
        .collect();
    assert_eq!(
        listed_libraries, order,
        "docs/architecture.md lists the libraries in another order than src/redis/scripts.rs joins them"
    );
}
