//! `flamerec completions SHELL`: prints the completion script clap_complete
//! derives from the command line definition, so it never falls behind it.

use std::io::{self, Write};
use std::process::ExitCode;

use clap::CommandFactory;
use clap_complete::Shell;

/// Arguments of `flamerec completions`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Install, e.g.:\n  \
    flamerec completions bash > ~/.local/share/bash-completion/completions/flamerec\n  \
    flamerec completions zsh > ~/.zfunc/_flamerec   (with ~/.zfunc in $fpath)\n  \
    flamerec completions fish > ~/.config/fish/completions/flamerec.fish")]
pub struct Args {
    /// The shell to complete in.
    #[arg(value_enum)]
    shell: Shell,
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let mut cmd = super::Cli::command();
    // clap_complete panics when its writer fails; a Vec never does, and a
    // closed stdout (`| head`) then stays an ordinary error.
    let mut script = Vec::new();
    clap_complete::generate(a.shell, &mut cmd, "flamerec", &mut script);
    let mut out = io::stdout().lock();
    out.write_all(&script)?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
