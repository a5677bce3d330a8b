//! The command line: `waitgate -c FILE [-t]`.

use std::path::PathBuf;

use clap::Parser;

use crate::config::{Config, ConfigError};
use crate::edge::secret::{Secret, SecretError};
use crate::server::{self, StartError};

#[derive(Parser, Debug)]
#[command(
    name = "waitgate",
    version,
    about = "A virtual waiting room that runs as a reverse proxy"
)]
pub struct Cli {
    /// The configuration file (YAML).
    #[arg(short = 'c', long = "conf", value_name = "FILE")]
    pub conf: PathBuf,

    /// Check the configuration and JWT_SECRET, print OK or the error, and exit.
    #[arg(short = 't', long = "test")]
    pub test: bool,
}

/// Everything that stops waitgate from starting, each a one-line message.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("{path}: {source}")]
    Config { path: String, source: ConfigError },
    #[error(transparent)]
    Secret(#[from] SecretError),
    #[error(transparent)]
    Start(#[from] StartError),
}

/// The checks `-t` runs, and start-up runs first.
pub fn check(cli: &Cli) -> Result<(Config, Secret), CliError> {
    let config = Config::load(&cli.conf).map_err(|source| CliError::Config {
        path: cli.conf.display().to_string(),
        source,
    })?;
    let secret = Secret::from_env()?;
    crate::edge::self_test(&secret)?;
    Ok((config, secret))
}

/// Checks, then runs the server (or just reports with `-t`).
pub fn run(cli: &Cli) -> Result<(), CliError> {
    let (config, secret) = check(cli)?;
    if cli.test {
        println!("{}: OK", cli.conf.display());
        return Ok(());
    }
    let server = server::build(&config, &secret)?;
    tracing::info!(
        listen = %config.listen,
        admin = %config.admin_listen,
        queues = config.queues.len(),
        routes = config.routes.len(),
        "waitgate starting"
    );
    server::run(server);
    Ok(())
}
