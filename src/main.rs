use std::process::ExitCode;

use clap::Parser;

/// mimalloc instead of glibc's malloc: a proxy allocates and frees small
/// buffers on every request, and glibc's allocator showed as 12% of the CPU
/// profile of the protected route (see the README's Performance section).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // First of all, before the arguments are read: from here on a SIGHUP
    // asks for a reload instead of ending the process, even while the
    // config is still being read (a `systemctl reload` right after
    // `start`).
    let sighup = waitgate::reload::catch_sighup();
    let cli = waitgate::cli::Cli::parse();
    if let Err(e) = sighup {
        eprintln!("waitgate: cannot catch SIGHUP ({e}); reloads are off");
    }
    let outcome = waitgate::cli::run(&cli);
    waitgate::logging::flush();
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("waitgate: {e}");
            ExitCode::FAILURE
        }
    }
}
