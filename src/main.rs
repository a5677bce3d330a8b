use std::process::ExitCode;

use clap::Parser;

/// mimalloc instead of glibc's malloc: a proxy allocates and frees small
/// buffers on every request, and glibc's allocator showed as 12% of the CPU
/// profile of the protected route (see the README's Performance section).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = waitgate::cli::Cli::parse();
    match waitgate::cli::run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("waitgate: {e}");
            ExitCode::FAILURE
        }
    }
}
