//! The `flamerec` command line: parse, dispatch, report. The work happens
//! in the `flamerec-record`, `flamerec-fold` and `flamerec-format` crates.

#![forbid(unsafe_code)]

mod cmd;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cmd::Cli::parse();
    match cmd::run(cli) {
        Ok(code) => code,
        Err(e) => {
            // `flamerec fold x.frec | head` closes the pipe early: not an error.
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) {
                return ExitCode::SUCCESS;
            }
            let code = e.downcast_ref::<cmd::Exit>().map_or(1, |x| x.code);
            eprintln!("flamerec: error: {}", one_line(&e));
            ExitCode::from(code)
        }
    }
}

/// The error and its causes on one line, skipping causes whose text an
/// outer message already includes (typed errors often embed their source).
fn one_line(e: &anyhow::Error) -> String {
    let mut msg = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if msg.contains(&text) {
            continue;
        }
        if !msg.is_empty() {
            msg.push_str(": ");
        }
        msg.push_str(&text);
    }
    msg.replace('\n', " ")
}
