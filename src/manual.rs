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
    #[error(
        "podns man: no command {0:?} (commands: {1}); to write every page to a directory, name it as a path (./{0})"
    )]
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

/// The flag reference, `docs/cli.md`: what `podns --help` and every
/// `podns COMMAND --help` print, as markdown. Environment values are left
/// out (clap shows a variable's value when it is set), so the page is the
/// same wherever it is made. A test holds the checked-in page to it.
pub fn cli_markdown() -> String {
    fn hide_env_values(cmd: clap::Command) -> clap::Command {
        cmd.mut_args(|a| a.hide_env_values(true))
            .mut_subcommands(hide_env_values)
    }
    let top = hide_env_values(Cli::command());
    let mut commands = vec![String::from("podns")];
    for sub in top.get_subcommands().filter(|c| c.get_name() != "help") {
        commands.push(format!("podns {}", sub.get_name()));
    }
    let mut md = String::from(
        "# Command-line reference\n\n\
         What `podns --help` and `podns COMMAND --help` print, made from the\n\
         clap definitions in `src/cli.rs` (and the simulator's in\n\
         `crates/sim/src/args.rs`) by `podns::manual::cli_markdown`. Do not edit\n\
         it by hand: `cargo test` fails when it differs from them, and\n\
         `PODNS_BLESS=1 cargo test --lib manual` writes it anew. Every flag\n\
         with `[env: NAME]` also reads that environment variable.\n\n",
    );
    for name in &commands {
        md.push_str(&format!("- [`{name}`](#{})\n", name.replace(' ', "-")));
    }
    for name in commands {
        // What `--help` prints: clap's own choice of the long or short form.
        let args = name.split(' ').chain(["--help"]);
        let help = match top.clone().try_get_matches_from(args) {
            Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelp => e.render().to_string(),
            other => panic!("{name} --help: {other:?}"),
        };
        let help: Vec<&str> = help.lines().map(str::trim_end).collect();
        md.push_str(&format!(
            "\n## {name}\n\n```text\n{}\n```\n",
            help.join("\n").trim_end()
        ));
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `docs/cli.md` is what clap prints (with the simulator's commands, as
    /// a default build has them).
    #[cfg(feature = "sim")]
    #[test]
    fn docs_cli_md_is_what_help_prints() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/cli.md");
        let want = cli_markdown();
        if std::env::var_os("PODNS_BLESS").is_some() {
            std::fs::write(path, &want).unwrap();
            return;
        }
        let have = std::fs::read_to_string(path).unwrap_or_default();
        if have != want {
            let line = have
                .lines()
                .zip(want.lines())
                .position(|(a, b)| a != b)
                .unwrap_or(have.lines().count().min(want.lines().count()));
            panic!(
                "docs/cli.md differs from the clap definitions (first at line {}): \
                 run `PODNS_BLESS=1 cargo test --lib manual` and commit it",
                line + 1
            );
        }
    }

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
