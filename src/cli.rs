//! The command line: `waitgate -c FILE [-t]`.

use std::path::PathBuf;

use clap::Parser;

use crate::config::{Config, ConfigError};
use crate::edge::secret::{Keys, SecretError};
use crate::proxy::routes::{ResolveError, RouteTable};
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

    /// Check the configuration (upstream names resolved, routes not shadowed)
    /// and JWT_SECRET, print OK or the error, and exit.
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
    Resolve(#[from] ResolveError),
    #[error(transparent)]
    Start(#[from] StartError),
    #[error("identity: {0}")]
    Login(#[from] crate::edge::login::LoginKeyError),
}

/// The checks `-t` runs, and start-up runs first.
pub fn check(cli: &Cli) -> Result<(Config, Keys), CliError> {
    let config = Config::load(&cli.conf).map_err(|source| CliError::Config {
        path: cli.conf.display().to_string(),
        source,
    })?;
    // Every upstream name must resolve now, as start-up needs it to.
    RouteTable::build(&config)?;
    let keys = Keys::from_env()?;
    crate::edge::self_test(&keys)?;
    if let Some(identity) = &config.identity {
        crate::edge::login::Logins::load(identity)?;
    }
    crate::control::AdminAccess::from_env().map_err(StartError::from)?;
    Ok((config, keys))
}

/// Checks, then runs the server (or just reports with `-t`).
pub fn run(cli: &Cli) -> Result<(), CliError> {
    let (config, keys) = check(cli)?;
    if cli.test {
        println!("{}: OK", cli.conf.display());
        return Ok(());
    }
    crate::logging::init(&config.log);
    let server = server::build(&config, &keys, &cli.conf)?;
    tracing::info!(
        listen = %config.listen,
        admin = %config.admin_listen,
        queues = config.queues.len(),
        routes = config.routes.len(),
        key = %keys.current.kid(),
        previous_key = keys.previous.as_ref().map(|k| k.kid()),
        "waitgate starting"
    );
    server::run(server);
    Ok(())
}
