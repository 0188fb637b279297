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
            if target.starts_with("http") || target.starts_with('#') {
                continue;
            }
            let file = target.split('#').next().unwrap();
            let resolved = page.parent().unwrap().join(file);
            assert!(
                resolved.exists(),
                "{} links {target}, which does not exist",
                page.display()
            );
        }
    }
}
