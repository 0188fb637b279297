//! Writes lockgate's man pages (`lockgate.1` and one per subcommand, such as `lockgate-serve.1` and `lockgate-format-raise.1`) and its bash, zsh and fish completions from the clap definition, for the Debian package: `cargo run --example generate-docs -- OUT_DIR` makes `OUT_DIR/man` and `OUT_DIR/completions`.

use std::path::PathBuf;

use clap::CommandFactory;
use clap_complete::Shell;
use lockgate::config::Cli;

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
    Ok(())
}
