//! `flamerec view`: the interactive viewer, served on 127.0.0.1 or written
//! as one self-contained HTML page.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
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
    /// The profile: a .frec recording or folded stacks (the base of a diff when NEW is given).
    input: PathBuf,
    /// A second profile: show the change from INPUT to NEW (red grew, blue shrank).
    new: Option<PathBuf>,
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let data = ViewData::load(&a.input, a.new.as_deref())?;
    for w in data.warnings() {
        eprintln!("flamerec: warning: {w}");
    }
    if let Some(path) = &a.html {
        let file =
            File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
        let mut w = BufWriter::new(file);
        flamerec_viewer::write_html(&data, &mut w)
            .and_then(|()| w.flush())
            .with_context(|| format!("cannot write {}", path.display()))?;
        return Ok(ExitCode::SUCCESS);
    }
    let server = Server::bind(data, a.port.unwrap_or(0))?;
    println!("{}", server.url());
    eprintln!("flamerec: serving the viewer on 127.0.0.1 only; Ctrl-C stops it");
    std::io::stdout().flush()?;
    server.run();
    Ok(ExitCode::SUCCESS)
}
