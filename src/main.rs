//! The `podns` binary: parse flags, start logging, run a subcommand, map
//! errors to exit codes (64 for bad flags or configuration).

use std::process::ExitCode;

use clap::Parser;
use clap::error::ErrorKind;
use podns::cli::{Cli, Command, LogFormat};
use tracing_subscriber::EnvFilter;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Hand the pages freed by a list back to the OS now: mimalloc purges
/// them only when it is next used, so a server that goes idle after its
/// first sync kept them resident (≈ 25 MiB at 100k pods,
/// benches/results/notes/2026-12-03-index-history.md).
fn release_memory() {
    // SAFETY: mi_collect takes no pointers and may be called from any
    // thread at any time; `force` also purges the arenas' freed pages.
    unsafe { libmimalloc_sys::mi_collect(true) }
}

/// No transparent huge pages for this process. mimalloc asks for them
/// (`MADV_HUGEPAGE`) on its arenas, and a 2 MiB page that holds one live
/// block is resident whole: at 100k pods they were 53 of 139 MiB of RSS
/// (benches/results/notes/2026-12-03-index-history.md). The kernel checks
/// the flag at each fault, so it must be set before the first allocation:
/// the runtime allocates before `main`, and those first faults took two
/// huge pages, 4 MiB of a 21 MiB server at 1,000 pods
/// (benches/results/notes/2026-12-07-thp-before-main.md). Hence a
/// constructor, which the loader runs before the runtime. An operator who
/// wants them sets `MIMALLOC_ALLOW_THP=1` (mimalloc's own option).
#[cfg(target_os = "linux")]
extern "C" fn no_huge_pages() {
    // SAFETY: getenv reads the environment the loader set up, before any
    // thread exists; PR_SET_THP_DISABLE takes plain integers and only sets
    // a flag on this process (a kernel without it returns EINVAL, which
    // changes nothing).
    unsafe {
        if libc::getenv(c"MIMALLOC_ALLOW_THP".as_ptr()).is_null() {
            libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
        }
    }
}

#[cfg(target_os = "linux")]
#[used]
#[unsafe(link_section = ".init_array")]
static NO_HUGE_PAGES: extern "C" fn() = no_huge_pages;

/// EX_USAGE from sysexits.h.
const EXIT_USAGE: u8 = 64;

fn main() -> ExitCode {
    #[cfg(not(feature = "sim"))]
    if let Some(cmd) = std::env::args()
        .nth(1)
        .filter(|c| c == "sim" || c == "demo")
    {
        eprintln!(
            "podns {cmd}: this build has no simulator (release images leave it out); \
             build with `cargo build --release --features sim`, or run `cargo run --release -- {cmd}` from a checkout"
        );
        return ExitCode::from(EXIT_USAGE);
    }
    podns_server::index::set_release_memory(release_memory);
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            return ExitCode::from(EXIT_USAGE);
        }
        Err(e) => {
            eprintln!("{}", podns::cli::error_line(&e));
            return ExitCode::from(EXIT_USAGE);
        }
    };
    match &cli.command {
        Command::Completion(args) => return print(&podns::manual::completion(args.shell)),
        Command::Man(args) => return man(args),
        _ => {}
    }
    init_tracing(cli.log_format);
    if let Command::Wait(args) = &cli.command {
        return wait(args);
    }
    if let Command::Explain(args) = &cli.command {
        return explain(args);
    }

    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: failed to start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Serve(args) => podns_server::serve::run(args.config()).await,
            #[cfg(feature = "sim")]
            Command::Sim(args) => podns_sim::run(args).await,
            #[cfg(feature = "sim")]
            Command::Demo(args) => podns::demo::run(args).await,
            Command::Zonefile(args) => podns_server::zonefile::run(args.config()).await,
            Command::Wait(_) | Command::Explain(_) | Command::Completion(_) | Command::Man(_) => {
                unreachable!("handled before the server runtime")
            }
        }
    });
    // Blocking threads (the index writer in the middle of a big initial
    // list, a UDP loop in its receive) must not hold the exit: the drain
    // has already run, so nothing is left to hand over.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One line, each cause once.
            eprintln!("error: {}", podns_server::config::error_line(&*e));
            ExitCode::from(exit_code(&e))
        }
    }
}

/// 64 for what the operator must fix before a retry can help: a
/// [`ConfigError`](podns_server::serve::ConfigError), or an address that
/// cannot be bound (taken, not on this host, a privileged port), whichever
/// command bound it. 1 for the rest.
fn exit_code(e: &anyhow::Error) -> u8 {
    use std::io::ErrorKind::{AddrInUse, AddrNotAvailable, PermissionDenied};
    let config = e.chain().any(|cause| {
        cause.is::<podns_server::serve::ConfigError>()
            || cause.downcast_ref::<std::io::Error>().is_some_and(|io| {
                matches!(io.kind(), AddrInUse | AddrNotAvailable | PermissionDenied)
            })
    });
    if config { EXIT_USAGE } else { 1 }
}

/// `podns wait`: one small thread is plenty for a poll a second.
fn wait(args: &podns::cli::WaitArgs) -> ExitCode {
    let cfg = args.config(|| std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default());
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("podns wait: failed to start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let started = std::time::Instant::now();
    match runtime.block_on(podns::wait::run(&cfg, |line| eprintln!("{line}"))) {
        Ok(summary) => {
            eprintln!(
                "{}",
                podns::wait::done_line(&cfg, &summary, started.elapsed())
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// Write `bytes` to stdout. A reader that stops early (`| head`) is no
/// failure; any other write error is (exit 1).
fn print(bytes: &[u8]) -> ExitCode {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: failed to write to stdout: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `podns man`: one page on stdout, or every page into a directory (the
/// files written, one a line).
fn man(args: &podns::cli::ManArgs) -> ExitCode {
    let done = match args.out_dir.as_deref().or_else(|| args.dir()) {
        Some(dir) => podns::manual::man_pages_to(dir).map(|paths| {
            let list: String = paths.iter().map(|p| format!("{}\n", p.display())).collect();
            print(list.as_bytes())
        }),
        None => podns::manual::man(args.command.as_deref()).map(|page| print(&page)),
    };
    match done {
        Ok(code) => code,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// `podns explain`: one GET, printed as the server wrote it.
fn explain(args: &podns::cli::ExplainArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("podns explain: failed to start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(podns::explain::run(&args.config())) {
        Ok(body) => {
            // The server's JSON is compact; a person reads it indented.
            let body = match args.output {
                podns::explain::Output::Json => serde_json::from_str::<serde_json::Value>(&body)
                    .and_then(|v| serde_json::to_string_pretty(&v))
                    .unwrap_or(body),
                podns::explain::Output::Text => body,
            };
            print!("{body}");
            if !body.ends_with('\n') {
                println!();
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

fn init_tracing(format: LogFormat) {
    use std::io::IsTerminal;
    // kube-client's trace layer logs every failed request at ERROR; our
    // watch loop logs the same failure once, with the reason and the
    // retry delay, so the client's line is left out unless RUST_LOG asks.
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,kube_client::client::builder=off"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
