//! `podns completion SHELL` and `podns man`: shell completion scripts
//! (clap_complete) and man pages (clap_mangen) read from the clap
//! definitions of [`crate::cli`], so they say what `--help` says.

use std::path::{Path, PathBuf};

use clap::CommandFactory;

use crate::cli::Cli;

/// The command line as clap knows it, built (so subcommands carry their
/// full names: `podns serve`, page `podns-serve`).
fn command() -> clap::Command {
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    cmd
}

/// The completion script for `shell`.
pub fn completion(shell: clap_complete::Shell) -> Vec<u8> {
    let mut cmd = command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, "podns", &mut out);
    out
}

/// A page of `cmd`, its footer naming the release (the commit is
/// `podns --version`'s).
fn page(cmd: clap::Command) -> clap_mangen::Man {
    clap_mangen::Man::new(cmd)
        .source(concat!("podns ", env!("CARGO_PKG_VERSION")))
        .manual("podns manual")
}

/// Why `podns man` printed no page.
#[derive(Debug, thiserror::Error)]
pub enum ManError {
    /// No such subcommand (exit 64).
    #[error("podns man: no command {0:?} (commands: {1})")]
    NoCommand(String, String),
    /// The page could not be written (exit 1).
    #[error("podns man: failed to write {0}: {1}")]
    Write(String, #[source] std::io::Error),
}

impl ManError {
    pub fn exit_code(&self) -> u8 {
        match self {
            ManError::NoCommand(..) => 64,
            ManError::Write(..) => 1,
        }
    }
}

/// The man page (roff) of podns, or of its subcommand `name`.
pub fn man(name: Option<&str>) -> Result<Vec<u8>, ManError> {
    let cmd = command();
    let page_cmd = match name {
        None => cmd,
        Some(name) => match cmd.find_subcommand(name) {
            Some(sub) => sub.clone(),
            None => {
                let names: Vec<&str> = cmd.get_subcommands().map(|c| c.get_name()).collect();
                return Err(ManError::NoCommand(name.to_string(), names.join(", ")));
            }
        },
    };
    let mut out = Vec::new();
    page(page_cmd)
        .render(&mut out)
        .map_err(|e| ManError::Write("the page".into(), e))?;
    Ok(out)
}

/// Every page (podns.1 and one per command) into `dir`; the files written.
pub fn man_pages_to(dir: &Path) -> Result<Vec<PathBuf>, ManError> {
    let failed = |e| ManError::Write(dir.display().to_string(), e);
    std::fs::create_dir_all(dir).map_err(failed)?;
    let cmd = command();
    let mut written = Vec::new();
    for cmd in std::iter::once(&cmd).chain(cmd.get_subcommands()) {
        let path = page(cmd.clone()).generate_to(dir).map_err(failed)?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_page_names_its_flags_and_the_top_page_its_commands() {
        let serve = String::from_utf8(man(Some("serve")).unwrap()).unwrap();
        assert!(serve.starts_with(".ie"), "roff: {serve}");
        assert!(serve.contains(".TH podns-serve 1"), "{serve}");
        assert!(serve.contains("dns\\-listen"), "{serve}");
        let top = String::from_utf8(man(None).unwrap()).unwrap();
        assert!(top.contains("podns\\-serve(1)"), "{top}");
        let err = man(Some("serv")).unwrap_err();
        assert_eq!(err.exit_code(), 64);
        assert!(err.to_string().contains("serve, "), "{err}");
    }
}
