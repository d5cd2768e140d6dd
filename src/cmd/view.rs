//! `flamerec view`: the interactive viewer, served on 127.0.0.1 or written
//! as one self-contained HTML page.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use flamerec_viewer::{Server, ViewData};

/// Arguments of `flamerec view`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Port on 127.0.0.1 to listen on (default: a free one).
    #[arg(long, value_name = "N")]
    port: Option<u16>,
    /// Write one self-contained HTML page here instead of serving.
    #[arg(long, value_name = "PATH", conflicts_with = "port")]
    html: Option<PathBuf>,
    /// Runs merged into one profile (or the base of a diff with --new): .frec, perf.data
    /// or folded stacks.
    #[arg(long = "base", value_name = "PATH", num_args = 1.., conflicts_with = "input")]
    base_runs: Vec<PathBuf>,
    /// Runs merged into the NEW side of a diff from the --base runs.
    #[arg(long = "new", value_name = "PATH", num_args = 1.., requires = "base_runs")]
    new_runs: Vec<PathBuf>,
    /// The profile: a .frec recording, perf.data or folded stacks, `-` for standard input (the
    /// base of a diff when NEW is given).
    #[arg(required_unless_present = "base_runs")]
    input: Option<PathBuf>,
    /// A second profile: show the change from INPUT to NEW (red grew, blue shrank).
    new: Option<PathBuf>,
    #[command(flatten)]
    naming: super::NamingArgs,
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let (base, new): (Vec<&Path>, Vec<&Path>) = match &a.input {
        Some(input) => (vec![input], a.new.iter().map(PathBuf::as_path).collect()),
        None => (
            a.base_runs.iter().map(PathBuf::as_path).collect(),
            a.new_runs.iter().map(PathBuf::as_path).collect(),
        ),
    };
    let opts = a.naming.options();
    let data = ViewData::load_runs(&base, (!new.is_empty()).then_some(new.as_slice()), &opts)?;
    for w in data.warnings() {
        eprintln!("flamerec: warning: {w}");
    }
    if let Some(path) = &a.html {
        super::write_to(path, |w| flamerec_viewer::write_html(&data, w))?;
        return Ok(ExitCode::SUCCESS);
    }
    let server = Server::bind(data, a.port.unwrap_or(0))?;
    println!("{}", server.url());
    eprintln!("flamerec: serving the viewer on 127.0.0.1 only; Ctrl-C stops it");
    std::io::stdout().flush()?;
    server.run();
    Ok(ExitCode::SUCCESS)
}
