//! The crate's layering: a module imports only layers below its own, so no two modules import each other.

use std::collections::BTreeMap;
use std::path::Path;

/// Every top-level module of `src/` and its layer; a module may name
/// (`crate::<module>`) only modules of a lower layer.
const LAYERS: [(&str, u8); 18] = [
    // Small pieces every layer may use.
    ("acl", 0),
    ("tls", 0),
    ("sync", 0),
    ("duration", 0),
    ("sse", 0),
    // A client of the HTTP API: it imports nothing of the server.
    ("run", 1),
    ("metrics", 1),
    // Logs and traces: the spans and trace context of every layer above.
    ("telemetry", 1),
    ("redis", 2),
    ("locks", 3),
    // The fleet of instances and its data format, beside the locks.
    ("fleet", 3),
    ("seckill", 4),
    // The hand-off of the sale's orders into a database (whose stored
    // orders the sale's listing reads).
    ("handoff", 5),
    // The API surface, then the transport that serves it.
    ("http", 6),
    ("server", 7),
    ("config", 8),
    // The settings file: the flags of `config` from a TOML file.
    ("config_file", 9),
    ("app", 10),
];

fn layer_of(module: &str) -> u8 {
    LAYERS
        .iter()
        .find(|(name, _)| *name == module)
        .map(|(_, layer)| *layer)
        .unwrap_or_else(|| {
            panic!("src/{module} has no layer: add it to LAYERS in tests/api/layers.rs")
        })
}

/// The top-level modules a source file names as `crate::<module>`.
fn named_modules(source: &str) -> Vec<String> {
    let mut named = Vec::new();
    for (at, _) in source.match_indices("crate::") {
        // `lockgate::crate::` cannot occur; skip `$crate::` in macros.
        if source[..at].ends_with('$') {
            continue;
        }
        let rest = &source[at + "crate::".len()..];
        let groups: Vec<&str> = match rest.strip_prefix('{') {
            // `crate::{a, b::c}`: every top-level name in the braces.
            Some(inner) => inner[..inner.find('}').unwrap_or(inner.len())]
                .split(',')
                .collect(),
            None => vec![rest],
        };
        for group in groups {
            let name: String = group
                .trim()
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                named.push(name);
            }
        }
    }
    named
}

fn sources(dir: &Path, found: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, found);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            found.push(path);
        }
    }
}

#[test]
fn every_module_imports_only_layers_below_its_own() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &mut files);
    let mut upward: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for file in files {
        let relative = file.strip_prefix(&root).unwrap();
        let module = relative
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_owned();
        // The crate root and the binary sit above every layer.
        if module == "lib" || module == "main" {
            continue;
        }
        let own = layer_of(&module);
        let source = std::fs::read_to_string(&file).unwrap();
        for named in named_modules(&source) {
            if named != module && layer_of(&named) >= own {
                upward
                    .entry(relative.display().to_string())
                    .or_default()
                    .push(named);
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports of a layer not below the importer's own: {upward:?}"
    );
}

#[test]
fn the_checker_sees_imports_in_every_form() {
    let source = "use crate::locks::Token;\nuse crate::{metrics, redis::Redis};\n\
                  let x = crate::http::X; $crate::http::responses";
    assert_eq!(named_modules(source), ["locks", "metrics", "redis", "http"]);
}
