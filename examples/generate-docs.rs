//! Writes lockgate's man pages (`lockgate.1` and one per subcommand, such as `lockgate-serve.1` and `lockgate-format-raise.1`), its bash, zsh and fish completions and its settings file with every setting commented (`lockgate.toml`) from the clap definition, for the Debian package: `cargo run --example generate-docs -- OUT_DIR` makes `OUT_DIR/man`, `OUT_DIR/completions` and `OUT_DIR/lockgate.toml`.

use std::path::PathBuf;

use clap::CommandFactory;
use clap_complete::Shell;
use lockgate::config::{Cli, Config};

fn main() -> std::io::Result<()> {
    let Some(out) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: generate-docs OUT_DIR");
        std::process::exit(2);
    };
    let man = out.join("man");
    let completions = out.join("completions");
    std::fs::create_dir_all(&man)?;
    std::fs::create_dir_all(&completions)?;

    // A page per command down the tree, named as `man` looks them up
    // (`lockgate-format-raise`); none for clap's `help` subcommands, nor
    // for hidden commands (internal to the binary).
    clap_mangen::generate_to(Cli::command(), &man)?;
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        clap_complete::generate_to(shell, &mut Cli::command(), "lockgate", &completions)?;
    }
    std::fs::write(out.join("lockgate.toml"), settings_file())?;
    Ok(())
}

/// The settings file the package installs: every setting of `lockgate
/// serve`, commented, with its help and its default, keyed as
/// `--config` reads it (the variable without `LOCKGATE_`, in lower case).
fn settings_file() -> String {
    let mut text = String::from(
        "# lockgate's settings (lockgate serve --config /etc/lockgate/lockgate.toml).\n\
         # Every setting, commented, with its default: uncomment to change one.\n\
         # A flag or a LOCKGATE_* variable (/etc/default/lockgate) wins over\n\
         # this file. `lockgate config check FILE` checks it, `lockgate config\n\
         # show --config FILE` prints what is in force and where it comes from.\n",
    );
    for arg in Config::command().get_arguments() {
        let Some(variable) = arg.get_env().and_then(|env| env.to_str()) else {
            continue;
        };
        let Some(key) = variable.strip_prefix("LOCKGATE_") else {
            continue;
        };
        let key = key.to_ascii_lowercase();
        if key == "config" {
            continue;
        }
        text.push('\n');
        let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
        for line in help.lines() {
            text.push_str(&format!("# {line}\n"));
        }
        let default: Vec<String> = arg
            .get_default_values()
            .iter()
            .map(|value| value.to_string_lossy().into_owned())
            .collect();
        match default.first() {
            Some(value) if value.parse::<i64>().is_ok() || value == "true" || value == "false" => {
                text.push_str(&format!("#{key} = {value}\n"));
            }
            Some(value) => text.push_str(&format!("#{key} = {value:?}\n")),
            None => text.push_str(&format!("#{key} =    (unset)\n")),
        }
    }
    text
}
