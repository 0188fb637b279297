//! `lockgate serve --config FILE`: the settings from a TOML file, below flags and the environment and above the defaults; `config check` and `config show`.
//!
//! A key is a setting's environment variable without `LOCKGATE_`, in
//! lower case (`redis_url` for `LOCKGATE_REDIS_URL`), so the README's
//! Settings table names each once. The file does not parse settings of its
//! own: each value is checked by the setting's own parser (the one the
//! flag uses), and then handed to the command line as a flag, after what
//! was given, for every setting neither a flag nor the environment set.
//! So one definition (`Config`) says what each setting accepts, wherever
//! it comes from.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, CommandFactory};

use crate::config::Config;

/// A file that cannot be used: one line naming the file, line and key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FileError(String);

/// Where a setting's effective value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Flag,
    Env,
    File,
    Default,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Flag => "flag",
            Self::Env => "env",
            Self::File => "file",
            Self::Default => "default",
        }
    }
}

/// `lockgate serve`'s definition, built once: its flags' names are borrowed
/// for the checks of single values.
static SERVE: std::sync::LazyLock<clap::Command> = std::sync::LazyLock::new(Config::command);

/// The settings whose values are secrets: shown as set or unset only.
const SECRETS: [&str; 4] = [
    "admin_token",
    "api_keys",
    "redis_password",
    "buyer_jwt_secret",
];

/// One setting of the file, checked: its key, line, and the flags it
/// stands for.
struct FileSetting {
    id: String,
    flags: Vec<OsString>,
}

/// The file's key of a setting: its variable without `LOCKGATE_`, lower case.
fn key_of(arg: &clap::Arg) -> Option<String> {
    let env = arg.get_env()?.to_str()?;
    Some(env.strip_prefix("LOCKGATE_")?.to_ascii_lowercase())
}

/// The line of `key` in `text` (1-based), for the error's place.
fn line_of(text: &str, key: &str) -> usize {
    text.lines()
        .position(|line| {
            let line = line.trim_start();
            line.strip_prefix(key).is_some_and(|rest| {
                let rest = rest.trim_start();
                rest.starts_with('=')
            }) || line
                .strip_prefix(&format!("\"{key}\""))
                .is_some_and(|rest| rest.trim_start().starts_with('='))
        })
        .map_or(1, |index| index + 1)
}

/// Reads and checks `path`: every key a setting of `lockgate serve`, every
/// value one its setting accepts.
fn read(path: &Path) -> Result<Vec<FileSetting>, FileError> {
    let shown = path.display();
    let text = std::fs::read_to_string(path)
        .map_err(|err| FileError(format!("{shown}: cannot read the settings file: {err}")))?;
    let table: toml::Table = text.parse().map_err(|err: toml::de::Error| {
        let line = err
            .span()
            .map_or(1, |span| text[..span.start].matches('\n').count() + 1);
        FileError(format!("{shown}:{line}: not TOML: {}", err.message()))
    })?;
    let command: &'static clap::Command = &SERVE;
    let mut settings = Vec::new();
    for (key, value) in &table {
        let line = line_of(&text, key);
        let at = |why: String| FileError(format!("{shown}:{line}: {key}: {why}"));
        let arg = command
            .get_arguments()
            .find(|arg| key_of(arg).as_deref() == Some(key.as_str()) && key != "config")
            .ok_or_else(|| {
                at("not a setting of lockgate serve (the keys are the README's variables without LOCKGATE_, in lower case)".to_owned())
            })?;
        let long = arg.get_long().expect("every setting has a flag");
        let texts: Vec<String> = match value {
            toml::Value::String(text) => vec![text.clone()],
            toml::Value::Integer(number) => vec![number.to_string()],
            toml::Value::Float(number) => vec![number.to_string()],
            toml::Value::Boolean(flag) => vec![flag.to_string()],
            toml::Value::Array(items) if arg.get_value_delimiter().is_some() => items
                .iter()
                .map(|item| match item {
                    toml::Value::String(text) => Ok(text.clone()),
                    toml::Value::Integer(number) => Ok(number.to_string()),
                    _ => Err(at("a list of strings is expected".to_owned())),
                })
                .collect::<Result<_, _>>()?,
            _ => return Err(at("a string, number or boolean is expected".to_owned())),
        };
        for text in &texts {
            if matches!(arg.get_action(), ArgAction::SetTrue) {
                if !matches!(value, toml::Value::Boolean(_)) {
                    return Err(at("true or false is expected".to_owned()));
                }
                continue;
            }
            // The setting alone, with its own parser: its value is checked
            // as the flag's would be, whatever the other settings are.
            let alone = clap::Command::new("lockgate serve").arg(
                clap::Arg::new(arg.get_id().clone())
                    .long(long)
                    .value_parser(arg.get_value_parser().clone())
                    .action(ArgAction::Set),
            );
            alone
                .try_get_matches_from([
                    OsStr::new("lockgate serve"),
                    OsStr::new(&format!("--{long}={text}")),
                ])
                .map_err(|err| at(short(&err)))?;
        }
        let flags = match (arg.get_action(), value) {
            (ArgAction::SetTrue, toml::Value::Boolean(true)) => vec![format!("--{long}").into()],
            (ArgAction::SetTrue, _) => Vec::new(),
            _ => vec![format!("--{long}={}", texts.join(",")).into()],
        };
        settings.push(FileSetting {
            id: arg.get_id().to_string(),
            flags,
        });
    }
    Ok(settings)
}

/// The first line of a clap error, without its `error: ` prefix.
fn short(err: &clap::Error) -> String {
    let rendered = err.render().to_string();
    let first = rendered.lines().next().unwrap_or("invalid value");
    first.strip_prefix("error: ").unwrap_or(first).to_owned()
}

/// `lockgate serve`'s arguments with the file's settings added, for those
/// neither a flag nor the environment set. No `--config` (flag or
/// `LOCKGATE_CONFIG`): the arguments as they are. Arguments clap refuses
/// are left for it to refuse, as without a file.
pub fn serve_args(args: &[OsString]) -> Result<Vec<OsString>, FileError> {
    Ok(merge(args)?.0)
}

/// [`serve_args`], and the ids of the settings the file gave.
fn merge(args: &[OsString]) -> Result<(Vec<OsString>, Vec<String>), FileError> {
    let Ok(matches) = parse(args) else {
        return Ok((args.to_vec(), Vec::new()));
    };
    let Some(path) = matches.get_one::<PathBuf>("config") else {
        return Ok((args.to_vec(), Vec::new()));
    };
    let mut merged = args.to_vec();
    let mut from_file = Vec::new();
    for setting in read(path)? {
        let given = matches!(
            matches.value_source(&setting.id),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        );
        if !given {
            merged.extend(setting.flags);
            from_file.push(setting.id);
        }
    }
    Ok((merged, from_file))
}

fn parse(args: &[OsString]) -> Result<ArgMatches, clap::Error> {
    Config::command().try_get_matches_from(
        std::iter::once(OsString::from("lockgate serve")).chain(args.iter().cloned()),
    )
}

/// `lockgate config check FILE`: `Ok` with how many settings it gives.
pub fn check(path: &Path) -> Result<usize, FileError> {
    read(path).map(|settings| settings.len())
}

/// `lockgate config show`: each setting of `lockgate serve` (as `args`,
/// the environment and the file would make it), its effective value and
/// where that comes from, as lines `key = value  # source`.
pub fn show(args: &[OsString]) -> Result<Vec<String>, String> {
    let (merged, from_file) = merge(args).map_err(|err| err.to_string())?;
    let matches = parse(&merged).map_err(|err| short(&err))?;
    let command = Config::command();
    let mut lines = Vec::new();
    for arg in command.get_arguments() {
        let Some(key) = key_of(arg) else {
            continue;
        };
        let id = arg.get_id().as_str();
        let source = if from_file.iter().any(|from| from == id) {
            Some(Source::File)
        } else {
            match matches.value_source(id) {
                Some(ValueSource::CommandLine) => Some(Source::Flag),
                Some(ValueSource::EnvVariable) => Some(Source::Env),
                Some(ValueSource::DefaultValue) => Some(Source::Default),
                _ => None,
            }
        };
        let raw: Option<Vec<String>> = matches.get_raw(id).map(|values| {
            values
                .map(|value| value.to_string_lossy().into_owned())
                .collect()
        });
        let shown = match (&raw, SECRETS.contains(&key.as_str())) {
            (Some(_), true) => "(set)".to_owned(),
            (None, true) => "(unset)".to_owned(),
            (Some(values), false) => serde_json::Value::from(values.join(",")).to_string(),
            (None, false) => "(unset)".to_owned(),
        };
        let source = source.map_or("unset", Source::as_str);
        lines.push(format!("{key} = {shown}  # {source}"));
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    fn file(text: &str) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), text).unwrap();
        file
    }

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    #[test]
    fn a_file_gives_what_no_flag_gives_and_a_flag_wins() {
        let settings = file("listen = \"127.0.0.1:9000\"\nmax_ttl_ms = 5000\n");
        let path = settings.path().to_str().unwrap();
        let merged = serve_args(&args(&["--config", path, "--max-ttl-ms", "7000"])).unwrap();
        let config =
            Config::try_parse_from(std::iter::once(OsString::from("lockgate")).chain(merged))
                .unwrap();
        assert_eq!(config.listen, "127.0.0.1:9000".parse().unwrap());
        assert_eq!(config.max_ttl_ms, 7000);
    }

    #[test]
    fn an_unknown_key_or_a_bad_value_is_refused_with_the_file_line_and_key() {
        let settings = file("listen = \"127.0.0.1:9000\"\n\nredis_urll = \"redis://x\"\n");
        let err = check(settings.path()).unwrap_err().to_string();
        let shown = settings.path().display().to_string();
        assert!(
            err.starts_with(&format!("{shown}:3: redis_urll: not a setting")),
            "{err}"
        );

        let settings = file("# a comment\nmax_ttl_ms = 5\n");
        let err = check(settings.path()).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!("{}:2: max_ttl_ms: ", settings.path().display())),
            "{err}"
        );

        let settings = file("listen = [1, 2\n");
        let err = check(settings.path()).unwrap_err().to_string();
        assert!(err.contains(": not TOML: "), "{err}");
    }
}
