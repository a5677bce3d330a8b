use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = waitgate::cli::Cli::parse();
    waitgate::logging::init();
    match waitgate::cli::run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("waitgate: {e}");
            ExitCode::FAILURE
        }
    }
}
