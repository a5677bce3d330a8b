//! The command line: `waitgate -c FILE [-t]`, and `waitgate verify`.

use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand};

use crate::config::{Config, ConfigError};
use crate::edge::secret::{Keys, SecretError};
use crate::fairness::draw::{draw_order, Seed};
use crate::fairness::receipt::{BadReceiptKey, ReceiptKeys};
use crate::proxy::routes::{ResolveError, RouteTable};
use crate::server::{self, StartError};

#[derive(Parser, Debug)]
#[command(
    name = "waitgate",
    version,
    about = "A virtual waiting room that runs as a reverse proxy",
    subcommand_negates_reqs = true
)]
pub struct Cli {
    /// The configuration file (YAML).
    #[arg(short = 'c', long = "conf", value_name = "FILE", required = true)]
    pub conf: Option<PathBuf>,

    /// Check the configuration (upstream names resolved, routes not shadowed)
    /// and JWT_SECRET, print OK or the error, and exit.
    #[arg(short = 't', long = "test")]
    pub test: bool,

    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Print the draw order a pre-queue's seed gives these users, one line
    /// each, `<place> <userId>`, place 1 first (no Redis, no config).
    Verify {
        /// The draw's seed, as the fairness answer revealed it at the open (64 hex digits).
        #[arg(long, value_name = "SEED")]
        seed: Seed,
        /// The queue the draw was for.
        #[arg(long, value_name = "QUEUE")]
        queue: String,
        /// The users to place, in any order.
        #[arg(value_name = "USERID", required = true)]
        users: Vec<String>,
    },
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
    #[error(transparent)]
    Receipt(#[from] BadReceiptKey),
    #[error("identity: {0}")]
    Login(#[from] crate::edge::login::LoginKeyError),
}

/// What start-up reads before it starts anything, checked.
pub struct Checked {
    pub config: Config,
    pub keys: Keys,
    pub receipts: ReceiptKeys,
}

/// The checks `-t` runs, and start-up runs first.
pub fn check(conf: &Path) -> Result<Checked, CliError> {
    let config = Config::load(conf).map_err(|source| CliError::Config {
        path: conf.display().to_string(),
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
    let receipts = ReceiptKeys::from_env()?;
    Ok(Checked {
        config,
        keys,
        receipts,
    })
}

/// Checks, then runs the server (or just reports with `-t`); or runs a
/// subcommand.
pub fn run(cli: &Cli) -> Result<(), CliError> {
    if let Some(Command::Verify { seed, queue, users }) = &cli.command {
        print!("{}", verify(seed, queue, users));
        return Ok(());
    }
    let conf = cli
        .conf
        .as_deref()
        .expect("clap requires --conf without a subcommand");
    let Checked {
        config,
        keys,
        receipts,
    } = check(conf)?;
    if cli.test {
        println!("{}: OK", conf.display());
        return Ok(());
    }
    crate::logging::init(&config.log);
    if receipts.generated {
        tracing::warn!(
            kid = receipts.kid(),
            "{} is not set: receipts are signed with a key made at start, which other instances and a restart do not share",
            crate::fairness::receipt::ENV
        );
    }
    let receipt_kid = receipts.kid().to_string();
    let server = server::build(&config, &keys, receipts, conf)?;
    tracing::info!(
        listen = %config.listen,
        admin = %config.admin_listen,
        queues = config.queues.len(),
        routes = config.routes.len(),
        key = %keys.current.kid(),
        previous_key = keys.previous.as_ref().map(|k| k.kid()),
        receipt_key = %receipt_kid,
        "waitgate starting"
    );
    server::run(server);
    Ok(())
}

/// `waitgate verify`: the users in draw order, `<place> <userId>` a line.
pub fn verify(seed: &Seed, queue: &str, users: &[String]) -> String {
    let users: Vec<&str> = users.iter().map(String::as_str).collect();
    draw_order(seed, queue, &users)
        .iter()
        .enumerate()
        .map(|(i, user)| format!("{} {user}\n", i + 1))
        .collect()
}
